//! Reboots the nodes ask for, under a `RebootPolicy`: which nodes want one, which start now, and
//! what each node in progress does next. Pure: [`super::shell`] reads the nodes, their pods and
//! the policy's `status.nodes`, calls [`decide`], and the runtime writes the status it returns,
//! then acts.
//!
//! A node's reboot goes: cordon (recorded on the node, so only slipway's own cordon is undone),
//! drain through the Eviction API, reboot (a reboot pod, or for nodes run by Flatcar's or Container
//! Linux's update-agent the operator's `reboot-ok` grant, after which the agent reboots), then the
//! hand-off Plans use: a new boot ID and Ready, then the health gate. The state is written before
//! the action, so a controller killed at any point finds the node where it left it and never
//! starts more nodes than the concurrency.

pub mod agent;
pub mod alerts;
mod checks;
mod drain_view;
mod failures;
pub mod kured;
mod kured_lock;
mod nodes;
pub mod pod;
mod prepull;
pub mod request;
mod signals;
mod spec;
mod state;
mod steps;
mod waiting;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;

use crate::common::condition::{Condition, Standing, set_condition, set_standing};
use crate::common::decision::{Decision, Effect, Event};
use crate::common::phase::{PhaseTally, tally};
use crate::common::selector::Selector;
use crate::node::change::NodeChange;
use crate::node::cordon::{self, CordonOwner};
use crate::node::drain::PodKey;
use crate::node::holders::{Hold, Holder};
use crate::node::index::Interest;
pub use crate::reboot_policy::api::RebootPhase;
use crate::reboot_policy::api::{RebootPolicy, RebootPolicyStatus, RebootRecord};
pub use nodes::decide_nodes;
pub use prepull::owner as pull_owner;
pub use signals::*;
pub use spec::{DEFAULT_DRAIN_TIMEOUT, PolicySettings, PolicySpec, read_spec};
pub use state::{DRAIN_TIMED_OUT, RebootState, read_status};
pub use steps::{DrainView, NodeSteps, NodeView, RebootAction};

/// How many rebooted nodes `status.rebooted` remembers.
pub const REBOOTED_KEPT: usize = 20;
/// How soon a node whose drain timed out is tried again.
pub const DRAIN_RETRY: Duration = Duration::from_secs(10 * 60);
/// How often a drain under way is looked at.
pub const DRAIN_RECHECK: Duration = Duration::from_secs(5);
/// How often nodes that want a reboot but wait are looked at, besides node events.
pub const WAIT_RECHECK: Duration = Duration::from_secs(30);
/// How often a policy is looked at when nothing asks for it.
pub const RESYNC: Duration = Duration::from_secs(300);

/// `status.rebooted` after this decision: the new records first, then the previous ones, at
/// most [`REBOOTED_KEPT`].
pub fn rebooted_history(previous: &[RebootRecord], new: &[RebootRecord]) -> Vec<RebootRecord> {
    new.iter()
        .rev()
        .chain(previous)
        .take(REBOOTED_KEPT)
        .cloned()
        .collect()
}

/// Everything one decision of a policy reads.
pub struct PolicyInput<'a> {
    pub policy: &'a RebootPolicy,
    /// The policy's spec as [`read_spec`] read it, or what is wrong with it.
    pub spec: &'a Result<PolicySpec, String>,
    /// Every node the policy governs or has a state for, as read now (with who else holds it).
    pub nodes: &'a [NodeView<'a>],
    /// Set when Prometheus holds every reboot: which alerts fire, or why it could not be asked.
    pub alerts: Option<String>,
    /// What the shell read for each of `spec.healthChecks`; `None` when it did not read them (no
    /// node wants a reboot).
    pub checks: Option<&'a [crate::common::check::CheckRead]>,
    /// Who else holds which node, and the DisruptionBudgets a reboot must fit in.
    pub budget: &'a crate::node::budget::Budget,
    /// The policy's pull pods (`spec.disruption.prePull`), as listed now.
    pub pull_pods: &'a [&'a k8s_openapi::api::core::v1::Pod],
    /// Where the reboot pods and pull pods live (the controller's namespace).
    pub namespace: &'a str,
    /// What the shell read of kured's lock.
    pub kured: &'a kured::KuredView,
}

impl<'a> PolicyInput<'a> {
    fn views_by_name(&self) -> BTreeMap<&'a str, &'a NodeView<'a>> {
        self.nodes
            .iter()
            .map(|v| (v.node.name.as_str(), v))
            .collect()
    }
}

/// What the shell does for a policy, per node.
#[derive(Debug, Clone, PartialEq)]
pub enum RebootEffect {
    /// The node is back (or gave up): withdraw an update-agent's grant (`reboot-ok=false`),
    /// remove the reboot pod, and change the node: its cordon given back if the policy made it,
    /// its after-reboot labels. Done before the status forgets the node.
    Finish {
        node: String,
        signal: Signal,
        change: Option<NodeChange>,
    },
    /// Change the node's annotations or labels, not its cordon: which occurrence of its
    /// conditions this reboot handles, whose cordon it is, its before-reboot labels.
    Annotate(NodeChange),
    /// Cordon the node, recording that the policy did.
    Cordon(NodeChange),
    /// Ask the Eviction API once for each pod.
    Evict {
        node: String,
        pods: Vec<PodKey>,
        grace_period_seconds: Option<i64>,
    },
    /// Delete each pod: the drain's timeout passed (`onDrainTimeout: DeletePods`).
    Delete {
        node: String,
        pods: Vec<PodKey>,
        grace_period_seconds: Option<i64>,
    },
    /// A pod that pulls the reboot pod's image on one node ahead of its reboots.
    PullImages(Box<k8s_openapi::api::core::v1::Pod>),
    /// A pull pod, by name, once its pull is done or no longer wanted.
    DeletePullPod(String),
    /// Have the node reboot from boot `before`: a reboot pod, or `reboot-ok=true` for an
    /// update-agent. Asked again on every look until the node has rebooted (both are idempotent).
    Reboot {
        node: String,
        signal: Signal,
        before: String,
    },
}

impl Effect for RebootEffect {
    fn before_status(&self) -> bool {
        matches!(self, RebootEffect::Finish { .. })
    }
}

/// The gauges of a policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyReport {
    pub wanting: usize,
    pub rebooting: usize,
}

/// What one decision of a RebootPolicy is.
pub type RebootDecision = Decision<RebootPolicyStatus, RebootEffect, PolicyReport>;

/// The holder of a RebootPolicy in the budget.
pub fn holder(policy: &RebootPolicy) -> Holder {
    Holder::Reboot {
        policy: policy.metadata.name.clone().unwrap_or_default(),
    }
}

/// What a policy reads of the nodes: those its selector matches (none while its spec is invalid),
/// with their conditions when a node condition asks for reboots.
pub fn interest(spec: Result<&PolicySpec, &String>) -> Interest {
    match spec {
        Ok(s) => Interest {
            selector: s.selector.clone(),
            label: None,
            conditions: !s.signals.node_conditions.is_empty(),
        },
        Err(_) => Interest {
            selector: Selector::Nothing,
            label: None,
            conditions: false,
        },
    }
}

/// The nodes a policy holds by its own record: those `status.nodes` says are in progress.
pub fn holds(policy: &RebootPolicy, now: Timestamp) -> Vec<Hold> {
    let me = holder(policy);
    let nodes = policy.status.as_ref().map(|s| s.nodes.as_slice());
    let (states, _) = read_status(nodes.unwrap_or_default(), now);
    states
        .into_iter()
        .filter(|(_, s)| s.holds_slot())
        .map(|(node, _)| Hold::new(node, me.clone()))
        .collect()
}

/// Decides one reconcile of a RebootPolicy: which node reboots next, why the others wait, what
/// each node in progress does next, and the status. A policy being deleted gives back every node
/// it started.
pub fn decide(input: &PolicyInput<'_>, now: Timestamp) -> RebootDecision {
    let p = input.policy;
    let previous = p.status.clone().unwrap_or_default();
    let (mut states, wanting_since) = read_status(&previous.nodes, now);
    if p.metadata.deletion_timestamp.is_some() {
        return give_back_all(input, &states, previous);
    }
    let spec = match input.spec {
        Ok(spec) => spec,
        Err(message) => return invalid(input, &states, previous, message, now),
    };
    let mut settings = spec.settings(now, input.alerts.clone());
    settings.kured = input.kured.clone();
    settings.soaking = spec.soaking(&previous.rebooted, now);
    let checked = checks::checked(p, spec, input.checks, now);
    settings.health_check = checked.hold.clone();
    let pulled = prepull::pull(input, spec, input.namespace);
    settings.pulling = pulled.holding.clone();
    let reset = failures::reset_requested(p, &previous);
    settings.stopped = failures::sticky_stop(p, spec, &previous, reset.is_some(), &mut states);
    let steps = decide_nodes(
        &settings,
        &spec.signals,
        &states,
        input.nodes,
        input.budget,
        &wanting_since,
        now,
    );
    let generation = p.metadata.generation;
    let conditions = conditions(&previous.conditions, &steps, generation, now);
    let status = RebootPolicyStatus {
        observed_generation: generation,
        wanting: count(steps.wanting),
        rebooting: count(steps.rebooting),
        nodes: steps.nodes.clone(),
        rebooted: rebooted_history(&previous.rebooted, &steps.rebooted),
        conditions,
        health_checks: checked.status,
        stopped: steps.stopped.clone(),
        failures_reset: reset.clone().or(previous.failures_reset.clone()),
        pre_pull: pulled.status,
    };
    let newly_stopped = steps
        .stopped
        .clone()
        .filter(|_| status.stopped != previous.stopped);
    let mut decision = into_decision(input, spec, status, steps);
    decision.effects.extend(pulled.effects);
    decision.events.extend(pulled.events);
    decision.events.extend(checked.events);
    decision
        .events
        .extend(failures::events(reset, newly_stopped));
    if let Some(soon) = checked.recheck {
        decision.requeue = Some(decision.requeue.map_or(soon, |r| r.min(soon)));
    }
    decision
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The effects and events of the nodes' steps.
fn into_decision(
    input: &PolicyInput<'_>,
    spec: &PolicySpec,
    status: RebootPolicyStatus,
    steps: NodeSteps,
) -> RebootDecision {
    let me = holder(input.policy);
    let views = input.views_by_name();
    let mut decision = RebootDecision::keep(status);
    decision.waiting = steps.waiting;
    let grace_period_seconds = spec
        .drain
        .as_ref()
        .and_then(|(_, o)| o.grace_period_seconds);
    for (node, action) in steps.actions {
        let view = views.get(node.as_str()).copied();
        match action {
            RebootAction::Event {
                warning,
                reason,
                message,
            } => {
                let event = match warning {
                    true => Event::warning(reason, message),
                    false => Event::normal(reason, message),
                };
                decision.events.push(event.on(&node));
            }
            action => (decision.effects).extend(node_effect(
                &me,
                node,
                action,
                view,
                grace_period_seconds,
                spec,
            )),
        }
    }
    decision.holds = steps
        .states
        .iter()
        .filter(|(_, s)| s.holds_slot())
        .map(|(n, _)| n.clone())
        .collect();
    if spec.taints_next {
        let batch = steps.next_up.iter().take(spec.concurrency);
        decision.next = batch.cloned().collect();
    }
    decision.requeue = Some(steps.recheck.unwrap_or(RESYNC));
    decision.report = PolicyReport {
        wanting: steps.wanting,
        rebooting: steps.rebooting,
    };
    decision
}

/// What the policy does to a node for `action` (`None` for an event, which is no node's, and for
/// labels when there are none to set).
fn node_effect(
    me: &Holder,
    node: String,
    action: RebootAction,
    view: Option<&NodeView<'_>>,
    grace_period_seconds: Option<i64>,
    spec: &PolicySpec,
) -> Option<RebootEffect> {
    let mine = || cordon::record(&CordonOwner::Operation(me.clone()));
    let before = || labelled(&spec.labels_before);
    Some(match action {
        RebootAction::MarkConditions(marker) => RebootEffect::Annotate(
            NodeChange::of(&node).annotation(CONDITION_HANDLED, Some(&marker)),
        ),
        RebootAction::Label if spec.labels_before.is_empty() => return None,
        RebootAction::Label => RebootEffect::Annotate(NodeChange {
            labels: before(),
            ..NodeChange::of(&node)
        }),
        RebootAction::Cordon => RebootEffect::Cordon(NodeChange {
            annotations: mine(),
            labels: before(),
            ..NodeChange::of(&node).cordon(true)
        }),
        RebootAction::RecordCordon => RebootEffect::Annotate(NodeChange {
            annotations: mine(),
            labels: before(),
            ..NodeChange::of(&node)
        }),
        RebootAction::Drain => RebootEffect::Evict {
            pods: view
                .and_then(|v| v.drain.as_ref())
                .map(|d| d.to_evict.clone())
                .unwrap_or_default(),
            grace_period_seconds,
            node,
        },
        RebootAction::DeletePods(pods) => RebootEffect::Delete {
            pods,
            grace_period_seconds,
            node,
        },
        RebootAction::Reboot { signal, before } => RebootEffect::Reboot {
            node,
            signal,
            before,
        },
        RebootAction::Finish {
            signal,
            uncordon,
            rebooted,
        } => {
            let after = rebooted.then(|| labelled(&spec.labels_after));
            finish(me, node, signal, uncordon, after.unwrap_or_default(), view)
        }
        RebootAction::Event { .. } => return None,
    })
}

/// A node change's labels: `labels`, each set.
fn labelled(labels: &BTreeMap<String, String>) -> BTreeMap<String, Option<String>> {
    (labels.iter())
        .map(|(k, v)| (k.clone(), Some(v.clone())))
        .collect()
}

/// Finishing a node: its cordon goes back if the policy made it: the node's record says so, or
/// (a record of a slipway from before the node record) the state did; `labels` go on with it.
fn finish(
    me: &Holder,
    node: String,
    signal: Signal,
    legacy_cordoned: bool,
    labels: BTreeMap<String, Option<String>>,
    view: Option<&NodeView<'_>>,
) -> RebootEffect {
    let recorded = view.is_some_and(|v| cordon::cordoned_by(&v.node.annotations, me));
    let ours = recorded || (legacy_cordoned && view.is_none_or(|v| !cordon::has_record(v.node)));
    let change = match ours {
        true => NodeChange {
            annotations: cordon::forget(),
            labels,
            ..NodeChange::of(&node).cordon(false)
        },
        false => NodeChange {
            labels,
            ..NodeChange::of(&node)
        },
    };
    RebootEffect::Finish {
        node,
        signal,
        change: (!change.is_empty()).then_some(change),
    }
}

/// A deleted policy gives back every node it started: its cordon undone, an update-agent's grant
/// withdrawn, its reboot pod removed. A node in the middle of its reboot comes back on its own.
fn give_back_all(
    input: &PolicyInput<'_>,
    states: &BTreeMap<String, RebootState>,
    previous: RebootPolicyStatus,
) -> RebootDecision {
    let me = holder(input.policy);
    let views = input.views_by_name();
    let mut decision = RebootDecision::keep(previous);
    for (node, state) in states {
        let legacy = match state {
            RebootState::Draining { cordoned, .. } | RebootState::Rebooting { cordoned, .. } => {
                *cordoned
            }
            // kured may be rebooting it still: its cordon stays kured's.
            RebootState::DrainFailed { .. } | RebootState::Kured { .. } => false,
        };
        let view = views.get(node.as_str()).copied();
        decision.effects.push(finish(
            &me,
            node.clone(),
            state.signal(),
            legacy,
            BTreeMap::new(),
            view,
        ));
    }
    let name = input.policy.metadata.name.as_deref().unwrap_or_default();
    let pulls = crate::node::prepull::leftovers(&prepull::owner(name), input.pull_pods);
    (decision.effects).extend(pulls.into_iter().map(RebootEffect::DeletePullPod));
    decision
}

/// A valid policy's conditions: `Validated`, `Progressing` while a reboot is under way, and
/// kstatus' three: stalled while a failure stopped it, else ready. A policy rebooting nodes is
/// doing what it is for, so it stays `Ready` (reason `Rebooting`, the message naming the nodes):
/// a GitOps tool's health must not flap with every reboot (docs/gitops.md).
fn conditions(
    previous: &[Condition],
    steps: &NodeSteps,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    let progressing = steps.rebooting > 0;
    let mut conditions = previous.to_vec();
    set_condition(
        &mut conditions,
        "Validated",
        true,
        "Valid",
        "",
        generation,
        now,
    );
    let reason = if progressing { "Rebooting" } else { "Idle" };
    set_condition(
        &mut conditions,
        "Progressing",
        progressing,
        reason,
        &steps.summary,
        generation,
        now,
    );
    let standing = match &steps.stopped {
        Some(why) => Standing::Stalled("Stopped", why.as_str()),
        None => Standing::Ready(reason, &steps.summary),
    };
    set_standing(&mut conditions, standing, generation, now);
    conditions
}

/// A spec the controller cannot follow: `Validated=False` names the field, nodes in progress keep
/// their slots (nothing new starts), and the policy is looked at again later.
fn invalid(
    input: &PolicyInput<'_>,
    states: &BTreeMap<String, RebootState>,
    previous: RebootPolicyStatus,
    message: &str,
    now: Timestamp,
) -> RebootDecision {
    let generation = input.policy.metadata.generation;
    let told = previous
        .conditions
        .iter()
        .any(|c| c.type_ == "Validated" && c.message == message);
    let mut status = RebootPolicyStatus {
        observed_generation: generation,
        ..previous
    };
    set_condition(
        &mut status.conditions,
        "Validated",
        false,
        "Invalid",
        message,
        generation,
        now,
    );
    let stalled = Standing::Stalled("Invalid", message);
    set_standing(&mut status.conditions, stalled, generation, now);
    let mut decision = RebootDecision::keep(status);
    if !told {
        decision
            .events
            .push(Event::warning("ValidationFailed", message));
    }
    decision.holds = states
        .iter()
        .filter(|(_, s)| s.holds_slot())
        .map(|(n, _)| n.clone())
        .collect::<BTreeSet<_>>();
    decision.requeue = Some(RESYNC);
    decision
}

/// The per-phase gauges of a policy's nodes (`status.nodes`).
pub fn phases(status: Option<&RebootPolicyStatus>) -> Vec<PhaseTally> {
    let nodes = status.map(|st| st.nodes.as_slice()).unwrap_or_default();
    tally(nodes.iter().map(|n| (n.phase.as_str(), n.since.as_deref())))
}

/// The conditions of a policy, for tests and tools.
pub fn condition<'a>(status: &'a RebootPolicyStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests;
