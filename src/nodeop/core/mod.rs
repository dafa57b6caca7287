//! A NodeOp, as kairos-operator runs it: which selected node starts next (control-plane nodes
//! first, at most `concurrency` at once, none after a failure under `stopOnFailure`), and what each
//! started node does next: the preflight pod, the cordon and the drain (by the controller), the
//! Job, the reboot through the sentinel file and the hand-off that waits for a new boot ID and
//! Ready, the uncordon. Pure: [`super::shell`] reads the nodes, the Jobs and pods of the NodeOp,
//! calls [`decide`], and the runtime writes the status it returns, then acts.
//!
//! What slipway adds: a node another operation holds (a Plan, a NodeMaintenance, a RebootPolicy)
//! or a DisruptionBudget does not let go waits, and the status and an event say why; the drain
//! goes through the Eviction API like `kubectl drain` with the NodeOp's options, within
//! `timeoutSeconds`; the state of each node is written before its next object is created, under
//! names that do not change, so a controller killed at any point creates no second Job on a node.

mod nodes;
pub mod objects;
mod prepull;
pub mod spec;
pub mod state;
pub mod upgrade;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::common::condition::{Standing, set_standing};
use crate::common::decision::{Decision, Effect, Event, Waiting};
use crate::common::phase::{PhaseTally, tally};
use crate::node::NodeInfo;
use crate::node::budget::Budget;
use crate::node::change::NodeChange;
use crate::node::drain::{PodKey, PodsView};
use crate::node::holders::{Hold, Holder};
use crate::nodeop::api::{NodeOp, NodeOpStatus};
pub use nodes::CONTROL_PLANE_LABELS;
use objects::Owner;
pub use spec::{Settings, settings};
pub use state::{NodeState, words};

/// How often nodes in progress are looked at (besides the changes of their Jobs and pods).
pub const PROGRESS_RECHECK: Duration = Duration::from_secs(10);
/// How often a drain under way is looked at.
pub const DRAIN_RECHECK: Duration = Duration::from_secs(5);
/// How often waiting nodes are looked at.
pub const WAIT_RECHECK: Duration = Duration::from_secs(30);
/// How often a NodeOp is looked at when nothing is in progress (a new node may match).
pub const RESYNC: Duration = Duration::from_secs(300);

/// What the shell saw of a node's Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobView {
    Running,
    Succeeded,
    /// Failed (its `backoffLimit` is spent), with the Job's reason.
    Failed(String),
}

/// What the shell saw of a node's preflight pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreflightView {
    Running,
    /// Succeeded with an empty termination message: the node needs the operation.
    Proceed,
    /// Succeeded with a message: the node is skipped, for that reason.
    Skip(String),
    /// Failed or past its deadline, with why.
    Failed(String),
}

/// Everything one decision of a NodeOp reads.
pub struct NodeOpInput<'a> {
    pub op: &'a NodeOp,
    /// Every node of the cluster, as the node index has it.
    pub nodes: &'a [&'a NodeInfo],
    /// The NodeOp's Jobs, by name.
    pub jobs: &'a BTreeMap<String, JobView>,
    /// The NodeOp's preflight pods, by node.
    pub preflights: &'a BTreeMap<String, PreflightView>,
    /// The nodes that have a reboot pod of the NodeOp.
    pub reboot_pods: &'a BTreeSet<String>,
    /// The pods of the nodes being drained (those [`to_drain`] names).
    pub drains: &'a BTreeMap<String, PodsView>,
    /// The image of reboot pods (`SLIPWAY_REBOOT_IMAGE`).
    pub reboot_image: &'a str,
    /// The NodeOp's pull pods (`spec.disruption.prePull`).
    pub pull_pods: &'a [&'a Pod],
    /// Who else holds which node, and the DisruptionBudgets a node must fit in.
    pub budget: &'a Budget,
}

/// What the shell does for a NodeOp.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeOpEffect {
    /// Give back a cordon the NodeOp made (before the status says the node is done).
    Uncordon(NodeChange),
    /// Cordon the node, recording that the NodeOp did.
    Cordon(NodeChange),
    /// Ask the Eviction API once for each pod.
    Evict {
        node: String,
        pods: Vec<PodKey>,
        grace_period_seconds: Option<i64>,
    },
    /// Delete each pod: the drain's timeout passed (`onDrainTimeout: DeletePods`).
    DeletePods {
        node: String,
        pods: Vec<PodKey>,
        grace_period_seconds: Option<i64>,
    },
    /// Create a preflight, pull or reboot pod (already there: nothing to do).
    CreatePod(Box<Pod>),
    /// Create the node's Job (already there: nothing to do).
    CreateJob(Box<Job>),
    /// Delete a preflight pod that has answered, or a pull pod (gone: nothing to do).
    DeletePod(String),
    /// Delete a reboot pod: its node is back, failed, or the NodeOp is deleted (before the status
    /// lets the slot go, so no more nodes than the concurrency ever have one).
    CallOffReboot(String),
}

impl Effect for NodeOpEffect {
    fn before_status(&self) -> bool {
        matches!(
            self,
            NodeOpEffect::Uncordon(_) | NodeOpEffect::CallOffReboot(_)
        )
    }
}

/// What one decision of a NodeOp is.
pub type NodeOpDecision = Decision<NodeOpStatus, NodeOpEffect>;

/// The holder of a NodeOp in the budget.
pub fn holder(op: &NodeOp) -> Holder {
    Holder::NodeOp {
        namespace: op.metadata.namespace.clone().unwrap_or_default(),
        name: op.metadata.name.clone().unwrap_or_default(),
    }
}

/// The states of the nodes a NodeOp has started, from its status.
pub fn states(op: &NodeOp, now: Timestamp) -> BTreeMap<String, NodeState> {
    op.status
        .iter()
        .flat_map(|s| &s.node_statuses)
        .filter_map(|(node, st)| Some((node.clone(), NodeState::read(st, now)?)))
        .collect()
}

/// The nodes a NodeOp holds by its own record: those in progress.
pub fn holds(op: &NodeOp, now: Timestamp) -> Vec<Hold> {
    let me = holder(op);
    states(op, now)
        .into_iter()
        .filter(|(_, s)| s.in_flight())
        .map(|(node, _)| Hold::new(node, me.clone()))
        .collect()
}

/// The nodes whose pods the next decision reads: started, draining, and their Job not created.
pub fn to_drain(op: &NodeOp, jobs: &BTreeMap<String, JobView>, now: Timestamp) -> Vec<String> {
    let drains = settings(&op.spec).is_ok_and(|s| s.drain.is_some());
    states(op, now)
        .into_iter()
        .filter(|(_, s)| {
            drains && matches!(s, NodeState::Pending { job, .. } if !jobs.contains_key(job))
        })
        .map(|(node, _)| node)
        .collect()
}

/// Decides one reconcile of a NodeOp.
pub fn decide(input: &NodeOpInput<'_>, now: Timestamp) -> NodeOpDecision {
    let op = input.op;
    let previous = op.status.clone().unwrap_or_default();
    let states = states(op, now);
    if op.metadata.deletion_timestamp.is_some() {
        return give_back(input, &states, previous);
    }
    let generation = op.metadata.generation;
    let mut decision = match settings(&op.spec) {
        Ok(settings) => {
            let steps = nodes::step_all(input, &settings, &states, now);
            into_decision(&settings, previous, steps, now)
        }
        Err(message) => invalid(&states, previous, message, now),
    };
    standing(&mut decision.status, generation, now);
    decision
}

/// kstatus' conditions from the phase: done is `Ready`, a failure (or an invalid spec) is
/// `Stalled` (a NodeOp runs once: only a new one goes on), anything else `Reconciling`.
fn standing(status: &mut NodeOpStatus, generation: Option<i64>, now: Timestamp) {
    let message = status.message.clone();
    let failed = message
        .as_deref()
        .unwrap_or("a node failed: see status.nodeStatuses");
    let running = message.as_deref().unwrap_or("nodes are under way");
    let standing = match status.phase.as_deref() {
        Some(words::COMPLETED) => Standing::Ready(words::COMPLETED, "every selected node is done"),
        Some(words::FAILED) => Standing::Stalled(words::FAILED, failed),
        _ => Standing::Reconciling(words::RUNNING, running),
    };
    set_standing(&mut status.conditions, standing, generation, now);
    status.observed_generation = generation;
}

/// The status, effects and events of the nodes' steps.
fn into_decision(
    settings: &Settings,
    previous: NodeOpStatus,
    steps: nodes::Steps,
    now: Timestamp,
) -> NodeOpDecision {
    let node_statuses = steps
        .states
        .iter()
        .map(|(node, state)| {
            let entry = state.write(settings.reboot, previous.node_statuses.get(node), now);
            (node.clone(), entry)
        })
        .collect();
    let phase = top_phase(&steps.states, steps.targets.len());
    let completed = phase == words::COMPLETED && previous.phase.as_deref() != Some(phase);
    let message = summary(&steps.waiting);
    let changed = message != previous.message;
    let mut status = NodeOpStatus {
        phase: Some(phase.to_string()),
        node_statuses,
        last_updated: previous.last_updated.clone(),
        message,
        observed_generation: previous.observed_generation,
        conditions: previous.conditions.clone(),
        pre_pull: steps.pre_pull.clone(),
    };
    if status != previous {
        status.last_updated = Some(Time(now));
    }
    let mut decision = NodeOpDecision::keep(status);
    decision.effects = steps.effects;
    decision.events = steps.events;
    if completed {
        // Told once, when the last node is done (what a notification says of the rollout).
        decision.events.push(Event::normal(
            "Completed",
            format!("Completed on {} nodes", steps.targets.len()),
        ));
    }
    if let (true, Some(first)) = (changed, steps.waiting.first()) {
        decision.events.push(Event::normal(
            "Waiting",
            format!("{}: {}", nodes_list(&first.nodes), first.message),
        ));
    }
    decision.holds = steps
        .states
        .iter()
        .filter(|(_, s)| s.in_flight())
        .map(|(n, _)| n.clone())
        .collect();
    decision.waiting = steps.waiting;
    if settings.taints_next {
        let batch = settings.concurrency.unwrap_or(usize::MAX);
        decision.next = steps.next_up.into_iter().take(batch).collect();
    }
    decision.requeue = Some(steps.recheck.unwrap_or(RESYNC));
    decision
}

/// The per-phase gauges of a NodeOp's nodes (`status.nodeStatuses`), each phase with the
/// earliest time a node entered it.
pub fn phases(status: Option<&NodeOpStatus>) -> Vec<PhaseTally> {
    let nodes = status.map(|s| &s.node_statuses);
    let entries: Vec<(&'static str, Option<String>)> = nodes
        .into_iter()
        .flatten()
        .map(|(_, st)| {
            let since = st.since.as_ref().or(st.last_updated.as_ref());
            (phase_word(&st.phase), since.map(|t| t.0.to_string()))
        })
        .collect();
    tally(entries.iter().map(|(p, since)| (*p, since.as_deref())))
}

fn phase_word(phase: &str) -> &'static str {
    match phase {
        words::PREFLIGHT => words::PREFLIGHT,
        words::PENDING => words::PENDING,
        words::RUNNING => words::RUNNING,
        words::COMPLETED => words::COMPLETED,
        _ => words::FAILED,
    }
}

/// kairos-operator's phase of the NodeOp: `Failed` once a node failed, `Completed` once every
/// selected node is done, else `Running`. Unlike kairos-operator, nodes not started yet count:
/// a NodeOp between two batches is not `Completed`.
fn top_phase(states: &BTreeMap<String, NodeState>, targets: usize) -> &'static str {
    let failed = states
        .values()
        .any(|s| matches!(s, NodeState::Failed { .. }));
    let done = states
        .values()
        .filter(|s| matches!(s, NodeState::Completed { .. }))
        .count();
    if failed {
        words::FAILED
    } else if targets > 0 && done == targets {
        words::COMPLETED
    } else {
        words::RUNNING
    }
}

fn nodes_list(nodes: &[String]) -> String {
    match nodes {
        [one] => format!("node {one}"),
        many => format!("{} nodes ({})", many.len(), many.join(", ")),
    }
}

/// The status message: why the nodes not started wait, first group first.
fn summary(waiting: &[Waiting]) -> Option<String> {
    let parts: Vec<String> = waiting
        .iter()
        .map(|w| format!("{} waits: {}", nodes_list(&w.nodes), w.message))
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// A deleted NodeOp gives back every cordon it made, and stops the reboots it has not started.
fn give_back(
    input: &NodeOpInput<'_>,
    states: &BTreeMap<String, NodeState>,
    previous: NodeOpStatus,
) -> NodeOpDecision {
    let me = holder(input.op);
    let owner = Owner::of(input.op);
    let mut decision = NodeOpDecision::keep(previous);
    // Its pods are collected with it too; deleted now, none pulls on.
    let key = crate::common::naming::safe_concat_name(&["nodeop", &owner.name]);
    let pulls = crate::node::prepull::leftovers(&key, input.pull_pods);
    (decision.effects).extend(pulls.into_iter().map(NodeOpEffect::DeletePod));
    for (node, state) in states {
        if let Some(change) = nodes::uncordon(&me, input.nodes, node) {
            decision.effects.push(NodeOpEffect::Uncordon(change));
        }
        if state.in_flight() && input.reboot_pods.contains(node) {
            decision
                .effects
                .push(NodeOpEffect::CallOffReboot(objects::reboot_pod_name(
                    &owner, node,
                )));
        }
    }
    decision
}

/// A spec slipway cannot follow: nothing new starts, the nodes in progress keep their slots,
/// and the status says what is wrong.
fn invalid(
    states: &BTreeMap<String, NodeState>,
    previous: NodeOpStatus,
    message: String,
    now: Timestamp,
) -> NodeOpDecision {
    let told = previous.message.as_deref() == Some(message.as_str());
    let mut status = NodeOpStatus {
        phase: Some(words::FAILED.into()),
        message: Some(message.clone()),
        ..previous
    };
    if !told {
        status.last_updated = Some(Time(now));
    }
    let mut decision = NodeOpDecision::keep(status);
    if !told {
        decision.events.push(Event::warning("InvalidSpec", message));
    }
    decision.holds = states
        .iter()
        .filter(|(_, s)| s.in_flight())
        .map(|(n, _)| n.clone())
        .collect();
    decision.requeue = Some(RESYNC);
    decision
}

#[cfg(test)]
mod tests;
