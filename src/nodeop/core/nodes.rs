//! Each node's next step: the fresh nodes that start now (and why the others wait), and what each
//! started node does next.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use super::objects::{self, Owner};
use super::spec::Settings;
use super::state::NodeState;
use super::{
    DRAIN_RECHECK, JobView, NodeOpEffect, NodeOpInput, PROGRESS_RECHECK, PreflightView,
    WAIT_RECHECK, holder,
};
use crate::common::decision::{Event, Waiting, wait};
use crate::node::NodeInfo;
use crate::node::budget::Budget;
use crate::node::change::NodeChange;
use crate::node::cordon::{self, CordonOwner};
use crate::node::drain::{self, OnDrainTimeout};
use crate::node::handoff::{self, Handoff, HandoffPolicy, Observation};
use crate::node::holders::Holder;
use crate::node::reboot::DEFAULT_TIMEOUT;

/// The labels that make a node a control-plane node, which kairos-operator starts first.
pub const CONTROL_PLANE_LABELS: [&str; 2] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// The steps of every node, before they become a decision.
#[derive(Debug, Default)]
pub(super) struct Steps {
    pub states: BTreeMap<String, NodeState>,
    /// The nodes the NodeOp runs on: those selected now and those it started.
    pub targets: BTreeSet<String>,
    pub effects: Vec<NodeOpEffect>,
    pub events: Vec<Event>,
    pub waiting: Vec<Waiting>,
    pub recheck: Option<Duration>,
    /// `status.prePull`: the pull before the first node.
    pub pre_pull: Option<crate::node::prepull::PrePullStatus>,
    /// The fresh nodes that wait for their turn (not for another holder nor a stop), in order.
    pub next_up: Vec<String>,
}

impl Steps {
    fn recheck(&mut self, after: Duration) {
        self.recheck = Some(self.recheck.map_or(after, |r| r.min(after)));
    }
}

/// What one node's step reads besides its state.
struct Ctx<'a, 'i> {
    input: &'a NodeOpInput<'i>,
    settings: &'a Settings,
    owner: Owner,
    me: Holder,
    nodes: BTreeMap<&'a str, &'a NodeInfo>,
    now: Timestamp,
}

/// Every node's step: those started go on, then the fresh ones start while there is room.
pub(super) fn step_all(
    input: &NodeOpInput<'_>,
    settings: &Settings,
    states: &BTreeMap<String, NodeState>,
    now: Timestamp,
) -> Steps {
    let ctx = Ctx {
        input,
        settings,
        owner: Owner::of(input.op),
        me: holder(input.op),
        nodes: input.nodes.iter().map(|n| (n.name.as_str(), *n)).collect(),
        now,
    };
    let mut steps = Steps::default();
    for (node, state) in states {
        let next = advance(&ctx, node, state, &mut steps);
        clean_up(&ctx, node, &next, &mut steps);
        steps.states.insert(node.clone(), next);
    }
    let selected = selected(&ctx);
    steps.targets = states.keys().cloned().chain(selected.clone()).collect();
    let fresh: Vec<String> = (selected.iter())
        .filter(|n| !states.contains_key(*n))
        .cloned()
        .collect();
    let pull =
        super::prepull::before_first(input, settings, &ctx.owner, &fresh, !states.is_empty());
    steps.pre_pull = pull.status;
    steps.effects.extend(pull.effects);
    steps.events.extend(pull.events);
    match pull.holding {
        Some((reason, message)) => {
            for node in &fresh {
                wait(&mut steps.waiting, node, reason, || message.clone(), None);
            }
            steps.next_up.extend(fresh.iter().cloned());
            steps.recheck(super::prepull::RECHECK);
        }
        None => start_fresh(&ctx, &selected, &mut steps),
    }
    steps
}

/// The selected nodes, control-plane nodes first, then by name.
fn selected(ctx: &Ctx<'_, '_>) -> Vec<String> {
    let mut nodes: Vec<&NodeInfo> = ctx
        .nodes
        .values()
        .copied()
        .filter(|n| ctx.settings.selector.matches(&n.labels))
        .collect();
    nodes.sort_by_key(|n| (!is_control_plane(n), n.name.clone()));
    nodes.into_iter().map(|n| n.name.clone()).collect()
}

fn is_control_plane(n: &NodeInfo) -> bool {
    CONTROL_PLANE_LABELS
        .iter()
        .any(|l| n.labels.contains_key(*l))
}

/// Starts the selected nodes not started yet while the NodeOp has room, in order; the others
/// wait, each with why.
fn start_fresh(ctx: &Ctx<'_, '_>, selected: &[String], steps: &mut Steps) {
    let mut budget: Budget = ctx.input.budget.clone();
    let failed = steps
        .states
        .iter()
        .find(|(_, s)| matches!(s, NodeState::Failed { .. }))
        .map(|(n, _)| n.clone());
    let mut busy = steps.states.values().filter(|s| s.in_flight()).count();
    let fresh: Vec<&String> = selected
        .iter()
        .filter(|n| !steps.states.contains_key(*n))
        .collect();
    for node in fresh {
        let Some(info) = ctx.nodes.get(node.as_str()).copied() else {
            continue;
        };
        if let (true, Some(f)) = (ctx.settings.stop_on_failure, &failed) {
            let message = || format!("node {f} failed and spec.stopOnFailure is set");
            wait(&mut steps.waiting, node, "StopOnFailure", message, None);
            continue;
        }
        if let Some(refusal) = budget.stopped(info) {
            let message = || refusal.to_string();
            wait(&mut steps.waiting, node, refusal.reason(), message, None);
            steps.recheck(WAIT_RECHECK);
            continue;
        }
        if let Some(other) = budget.holder_of(node) {
            let message = || format!("{other} holds the node");
            wait(&mut steps.waiting, node, "NodeBusy", message, None);
            steps.recheck(WAIT_RECHECK);
            continue;
        }
        if ctx.settings.concurrency.is_some_and(|c| busy >= c) {
            let c = ctx.settings.concurrency.unwrap_or_default();
            let message =
                || format!("{busy} of at most {c} nodes are in progress (spec.concurrency)");
            wait(
                &mut steps.waiting,
                node,
                "ConcurrencyReached",
                message,
                None,
            );
            steps.next_up.push(node.clone());
            continue;
        }
        if let Err(refusal) = budget.take(info) {
            steps.next_up.push(node.clone());
            let message = || refusal.to_string();
            wait(
                &mut steps.waiting,
                node,
                refusal.reason(),
                message,
                refusal.until(),
            );
            steps.recheck(WAIT_RECHECK);
            continue;
        }
        busy += 1;
        let state = start(ctx, info, steps);
        steps.states.insert(node.clone(), state);
    }
}

/// A node starts: its preflight pod, or its work.
fn start(ctx: &Ctx<'_, '_>, node: &NodeInfo, steps: &mut Steps) -> NodeState {
    steps.recheck(PROGRESS_RECHECK);
    match objects::preflight_pod(&ctx.owner, ctx.settings, &node.name) {
        Some(pod) => {
            steps.effects.push(NodeOpEffect::CreatePod(Box::new(pod)));
            steps.events.push(
                Event::normal(
                    "Preflight",
                    format!("Checking whether node {} needs the operation", node.name),
                )
                .on(&node.name),
            );
            NodeState::Preflight { since: ctx.now }
        }
        None => begin_work(ctx, node, steps),
    }
}

/// The node's work begins: cordon (if asked), then the drain (if asked) or the Job at once.
fn begin_work(ctx: &Ctx<'_, '_>, node: &NodeInfo, steps: &mut Steps) -> NodeState {
    steps.events.push(
        Event::normal(
            "NodeStarted",
            format!("Started the operation on node {}", node.name),
        )
        .on(&node.name),
    );
    let state = NodeState::Pending {
        job: objects::job_name(&ctx.owner, &node.name),
        before: node.boot_id.clone(),
        since: ctx.now,
    };
    pending(ctx, &node.name, state, steps)
}

/// A node whose Job is not created yet: cordon it (again, if the cordon is gone), drain it, and
/// create the Job once the drain is over.
fn pending(ctx: &Ctx<'_, '_>, node: &str, state: NodeState, steps: &mut Steps) -> NodeState {
    let NodeState::Pending { since, job, .. } = &state else {
        return state;
    };
    let info = ctx.nodes.get(node).copied();
    if ctx.settings.cordon && info.is_some_and(|n| !n.unschedulable) {
        steps.effects.push(NodeOpEffect::Cordon(NodeChange {
            annotations: cordon::record(&CordonOwner::Operation(ctx.me.clone())),
            ..NodeChange::of(node).cordon(true)
        }));
    }
    if let Some(drain) = &ctx.settings.drain {
        let Some(pods) = ctx.input.drains.get(node) else {
            // The pods are read from the next look on.
            steps.recheck(Duration::from_secs(1));
            return state;
        };
        if !pods.is_drained() {
            let waited = ctx.now.duration_since(*since);
            let out = drain
                .timeout
                .filter(|t| waited >= jiff::SignedDuration::try_from(*t).unwrap_or_default());
            if let Some(timeout) = out.filter(|_| drain.on_timeout == OnDrainTimeout::Fail) {
                let left: Vec<String> = (pods.to_evict.keys())
                    .chain(pods.blocked.keys())
                    .map(ToString::to_string)
                    .chain(
                        pods.attached
                            .iter()
                            .map(|v| format!("volume attachment {v}")),
                    )
                    .collect();
                let message = format!(
                    "Drain timed out after {}s (spec.drainOptions.timeoutSeconds); pods left: {}",
                    timeout.as_secs(),
                    left.join(", ")
                );
                return fail(ctx, node, None, message, steps);
            }
            steps.recheck(DRAIN_RECHECK);
            if let Some(timeout) = out {
                let after = format!("{}s", timeout.as_secs());
                let delete = drain::to_delete(pods);
                (steps.events).extend(delete.iter().map(|p| drain::deleted_event(p, node, &after)));
                if !delete.is_empty() {
                    steps.effects.push(NodeOpEffect::DeletePods {
                        node: node.to_string(),
                        pods: delete,
                        grace_period_seconds: drain.options.grace_period_seconds,
                    });
                }
                return state;
            }
            let to_evict: Vec<_> = pods
                .to_evict
                .iter()
                .filter(|(_, terminating)| !**terminating)
                .map(|(k, _)| k.clone())
                .collect();
            if pods.blocked.is_empty() && !to_evict.is_empty() {
                steps.effects.push(NodeOpEffect::Evict {
                    node: node.to_string(),
                    pods: to_evict,
                    grace_period_seconds: drain.options.grace_period_seconds,
                });
            }
            return state;
        }
    }
    let job = objects::job(&ctx.owner, ctx.settings, node, job);
    steps.effects.push(NodeOpEffect::CreateJob(Box::new(job)));
    steps.recheck(PROGRESS_RECHECK);
    state
}

/// Deletes what a node no longer needs, from its state (so a controller killed before the
/// deletion deletes it on its next look): the preflight pod once it answered, the reboot pod once
/// the node is done or failed.
fn clean_up(ctx: &Ctx<'_, '_>, node: &str, state: &NodeState, steps: &mut Steps) {
    let answered = !matches!(state, NodeState::Preflight { .. });
    if answered && ctx.input.preflights.contains_key(node) {
        let pod = objects::preflight_pod_name(&ctx.owner, node);
        steps.effects.push(NodeOpEffect::DeletePod(pod));
    }
    if !state.in_flight() && ctx.input.reboot_pods.contains(node) {
        let pod = objects::reboot_pod_name(&ctx.owner, node);
        steps.effects.push(NodeOpEffect::CallOffReboot(pod));
    }
}

/// The next state of a started node.
fn advance(ctx: &Ctx<'_, '_>, node: &str, state: &NodeState, steps: &mut Steps) -> NodeState {
    match state {
        NodeState::Preflight { .. } => preflight(ctx, node, state, steps),
        NodeState::Pending { job, before, .. } => match ctx.input.jobs.get(job) {
            Some(view) => running(ctx, node, job, before, view, steps),
            None => pending(ctx, node, state.clone(), steps),
        },
        NodeState::Running { job, before } => match ctx.input.jobs.get(job) {
            Some(view) => running(ctx, node, job, before, view, steps),
            None => fail(ctx, node, Some(job), "Job not found".into(), steps),
        },
        NodeState::Rebooting {
            job, before, since, ..
        } => rebooting(ctx, node, job, before, *since, steps),
        NodeState::Completed { .. } | NodeState::Failed { .. } => state.clone(),
    }
}

fn preflight(ctx: &Ctx<'_, '_>, node: &str, state: &NodeState, steps: &mut Steps) -> NodeState {
    let Some(view) = ctx.input.preflights.get(node) else {
        // Not created yet (the controller stopped after the status said Preflight).
        if let Some(p) = objects::preflight_pod(&ctx.owner, ctx.settings, node) {
            steps.effects.push(NodeOpEffect::CreatePod(Box::new(p)));
        }
        steps.recheck(PROGRESS_RECHECK);
        return state.clone();
    };
    match view {
        PreflightView::Running => {
            steps.recheck(PROGRESS_RECHECK);
            state.clone()
        }
        PreflightView::Skip(reason) => {
            steps.events.push(
                Event::normal(
                    "NodeSkipped",
                    format!("Node {node} skipped by preflight: {reason}"),
                )
                .on(node),
            );
            NodeState::Completed {
                job: None,
                message: format!("Skipped by preflight: {reason}"),
                rebooted: false,
            }
        }
        PreflightView::Failed(reason) => fail(
            ctx,
            node,
            None,
            format!("Preflight failed: {reason}"),
            steps,
        ),
        PreflightView::Proceed => match ctx.nodes.get(node).copied() {
            Some(info) => begin_work(ctx, info, steps),
            None => fail(ctx, node, None, "Node not found".into(), steps),
        },
    }
}

fn running(
    ctx: &Ctx<'_, '_>,
    node: &str,
    job: &str,
    before: &str,
    view: &JobView,
    steps: &mut Steps,
) -> NodeState {
    match view {
        JobView::Running => {
            steps.recheck(PROGRESS_RECHECK);
            NodeState::Running {
                job: job.to_string(),
                before: before.to_string(),
            }
        }
        JobView::Failed(reason) => {
            let message = match reason.is_empty() {
                true => "Job failed".to_string(),
                false => format!("Job failed: {reason}"),
            };
            fail(ctx, node, Some(job), message, steps)
        }
        JobView::Succeeded if ctx.settings.reboot => {
            steps.events.push(
                Event::normal(
                    "Rebooting",
                    format!("Job {job} succeeded; node {node} reboots"),
                )
                .on(node),
            );
            reboot_pod(ctx, node, job, steps);
            steps.recheck(PROGRESS_RECHECK);
            NodeState::Rebooting {
                job: job.to_string(),
                before: before.to_string(),
                since: ctx.now,
                late: None,
            }
        }
        JobView::Succeeded => done(ctx, node, job, false, steps),
    }
}

/// The node's reboot pod, if it has none. Made only once its Job succeeded, never beside a
/// running Job: it reboots as soon as the Job's last step writes the sentinel, and a reboot before
/// the kubelet reports the Job's pod Succeeded would leave the Job running through the reboot.
fn reboot_pod(ctx: &Ctx<'_, '_>, node: &str, job: &str, steps: &mut Steps) {
    if !ctx.input.reboot_pods.contains(node) {
        let pod = objects::reboot_pod(&ctx.owner, node, ctx.input.reboot_image, job);
        steps.effects.push(NodeOpEffect::CreatePod(Box::new(pod)));
    }
}

/// The hand-off after the reboot: a boot other than the one before, and Ready.
fn rebooting(
    ctx: &Ctx<'_, '_>,
    node: &str,
    job: &str,
    before: &str,
    since: Timestamp,
    steps: &mut Steps,
) -> NodeState {
    let info = ctx.nodes.get(node).copied();
    let obs = Observation {
        node,
        ready: info.is_some_and(|n| n.ready),
        boot_id: info.map_or("", |n| n.boot_id.as_str()),
        health: None,
    };
    let policy = HandoffPolicy {
        timeout: DEFAULT_TIMEOUT,
        health_gate: None,
    };
    let state = Handoff::AwaitingBoot {
        before: before.to_string(),
        since,
    };
    let step = handoff::step(&state, &obs, &policy, ctx.now);
    let late = match step.state {
        Handoff::Passed => return done(ctx, node, job, true, steps),
        Handoff::TimedOut { message, .. } => Some(message),
        _ => None,
    };
    reboot_pod(ctx, node, job, steps);
    if let Some(after) = step.recheck_after {
        steps.recheck(after);
    }
    let previous = ctx.input.op.status.as_ref();
    let told = previous
        .and_then(|s| s.node_statuses.get(node))
        .and_then(|s| s.message.as_ref());
    if let Some(message) = late.as_ref().filter(|m| told != Some(*m)) {
        steps
            .events
            .push(Event::warning("RebootTimedOut", message.clone()).on(node));
    }
    steps.recheck(WAIT_RECHECK);
    NodeState::Rebooting {
        job: job.to_string(),
        before: before.to_string(),
        since,
        late,
    }
}

/// The node is done: its cordon goes back, its reboot pod goes.
fn done(ctx: &Ctx<'_, '_>, node: &str, job: &str, rebooted: bool, steps: &mut Steps) -> NodeState {
    if let Some(change) = uncordon(&ctx.me, ctx.input.nodes, node) {
        steps.effects.push(NodeOpEffect::Uncordon(change));
    }
    let message = match rebooted {
        true => "Job and reboot completed successfully",
        false => "Job completed successfully",
    };
    steps
        .events
        .push(Event::normal("NodeCompleted", format!("Node {node}: {message}")).on(node));
    NodeState::Completed {
        job: Some(job.to_string()),
        message: message.to_string(),
        rebooted,
    }
}

/// The node failed: its cordon goes back if `uncordonOnFailure`; a reboot waiting for the Job is
/// called off.
fn fail(
    ctx: &Ctx<'_, '_>,
    node: &str,
    job: Option<&str>,
    message: String,
    steps: &mut Steps,
) -> NodeState {
    if ctx.settings.uncordon_on_failure
        && let Some(change) = uncordon(&ctx.me, ctx.input.nodes, node)
    {
        steps.effects.push(NodeOpEffect::Uncordon(change));
    }
    steps
        .events
        .push(Event::warning("NodeFailed", format!("Node {node}: {message}")).on(node));
    NodeState::Failed {
        job: job.map(str::to_string),
        message,
    }
}

/// The change that gives back `me`'s cordon of `node`, if `me` cordoned it (by the node's record).
pub(super) fn uncordon(me: &Holder, nodes: &[&NodeInfo], node: &str) -> Option<NodeChange> {
    let info = nodes.iter().find(|n| n.name == node)?;
    if !cordon::cordoned_by(&info.annotations, me) {
        return None;
    }
    let change = NodeChange {
        annotations: cordon::forget(),
        ..NodeChange::of(node)
    };
    Some(match info.unschedulable {
        true => change.cordon(false),
        false => change,
    })
}
