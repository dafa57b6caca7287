//! Declarative node maintenance, as medik8s node-maintenance-operator (NMO) does it: a
//! `NodeMaintenance` cordons and taints its node, takes the node's medik8s Lease, labels it
//! excluded from remediation and drains it; deleting the resource undoes what it did, and only
//! that (an admin's own cordon stays).
//!
//! This module decides; [`super::shell`] reads the node, its pods and its Lease, and applies the
//! decision. One reconcile is one step: evictions are asked once per reconcile and their answers
//! come back as input to the next decision, so a drain survives a crash of the controller at any
//! point.
//!
//! What slipway adds to NMO: it never takes a node another slipway operation holds (a node in the
//! middle of a Plan's step waits, saying so); a drain can have a timeout after which the
//! maintenance fails naming the pods that block; the status says why each pending pod is still
//! there; and a cordon or label that was there before stays after the maintenance ends, because
//! the node's annotations record what the maintenance itself did.

mod drain;
mod evictions;
mod extensions;
mod lease;
mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Taint;

use crate::common::decision::{Decision, Effect, Event};
use crate::maintenance::api::{MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus};
use crate::node::budget::Refusal;
use crate::node::change::NodeChange;
use crate::node::cordon::CORDONED_BY;
use crate::node::disruption::DisruptionSpec;
use crate::node::drain::{PodKey, PodsView};
use crate::node::holders::{Hold, Holder, MAINTENANCE_TAINT};
use drain::drain;
pub use evictions::{Asking, EvictionRound, refusal_backoff};
pub use lease::{LeaseAction, LeaseSettings, LeaseView, lease_name, lease_view, renewed_lease};
pub use status::phase;
use status::{finish, record_evictions, stamp};

/// NMO's taint, beside the cordon.
pub const DRAIN_TAINT_KEY: &str = MAINTENANCE_TAINT;
/// NMO's label that keeps medik8s remediation operators off the node.
pub const EXCLUDE_LABEL: &str = "remediation.medik8s.io/exclude-from-remediation";
/// On the node: which NodeMaintenance added [`EXCLUDE_LABEL`].
pub const EXCLUDED_BY: &str = "slipway.dev/remediation-excluded-by";
/// The condition that says how the drain goes.
pub const DRAINED: &str = "Drained";

/// After this many consecutive failures to keep the Lease once the drain started, the
/// maintenance gives up and restores the node (NMO's rule).
pub const MAX_LEASE_ERRORS: i64 = 3;
/// How soon a running drain is looked at again (NMO's requeue).
pub const DRAIN_RECHECK: Duration = Duration::from_secs(5);
/// The longest wait between evictions a PodDisruptionBudget keeps refusing.
pub const REFUSAL_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// How soon a maintenance that waits for another holder looks again.
pub const WAIT_RECHECK: Duration = Duration::from_secs(10);

/// What the decision needs to know about the node (read fresh, not from a cache).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeFacts {
    pub name: String,
    pub uid: String,
    pub unschedulable: bool,
    pub drain_taint: bool,
    pub excluded: bool,
    pub cordoned_by: Option<String>,
    pub excluded_by: Option<String>,
    /// The node's taints other than the maintenance's (kept when the taint list is rewritten).
    pub other_taints: Vec<Taint>,
    /// Guards a rewrite of the taint list.
    pub resource_version: Option<String>,
}

/// Everything the decision reads.
pub struct MaintenanceInput<'a> {
    pub maintenance: &'a NodeMaintenance,
    /// `None`: no node of that name exists.
    pub node: Option<&'a NodeFacts>,
    /// The operation that holds the node against this maintenance: an older NodeMaintenance of
    /// the same node (then this one is a duplicate), or another slipway operation in the middle of
    /// its step.
    pub held_by: Option<&'a Holder>,
    /// Why the DisruptionBudgets do not let the node go now, if they do not.
    pub refusal: Option<&'a Refusal>,
    pub lease: LeaseView,
    /// The node's pods; `None` when they were not listed (not draining).
    pub pods: Option<&'a PodsView>,
    /// What the last round of evictions answered.
    pub evictions: Option<&'a EvictionRound>,
    /// Why the effects of the last decision failed, if they did (the status says it).
    pub last_error: Option<&'a str>,
}

/// Where a maintenance stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Stage {
    /// Being deleted: restore the node, then let the resource go.
    Restoring,
    NodeMissing,
    /// `spec.disruption` cannot be followed: nothing is done to the node until it is fixed.
    InvalidSpec {
        message: String,
    },
    Duplicate {
        of: String,
    },
    /// Another slipway operation holds the node; nothing was done to it yet.
    WaitingForNode {
        holder: String,
    },
    /// A DisruptionBudget does not let the node go now; nothing was done to it yet.
    WaitingForBudget {
        reason: &'static str,
        message: String,
    },
    /// Another medik8s operator holds the node's Lease; nothing was done to it yet.
    LeaseHeld {
        holder: String,
    },
    /// The Lease was lost too often after the drain started: the node is restored.
    LeaseLost {
        holder: String,
    },
    #[default]
    Draining,
    Drained,
    /// `drainTimeout` passed with pods still pending.
    TimedOut {
        after: String,
    },
    /// `drainTimeout` passed and `onDrainTimeout` is `DeletePods`: the pods left are deleted.
    DeletingPods {
        after: String,
    },
}

/// What the maintenance changes on the node, before it becomes a [`NodeChange`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeEdit {
    pub unschedulable: Option<bool>,
    pub drain_taint: Option<bool>,
    pub exclude_label: Option<bool>,
    /// Annotations to set (`Some`) or remove (`None`).
    pub annotations: BTreeMap<String, Option<String>>,
}

impl NodeEdit {
    pub fn is_empty(&self) -> bool {
        *self == NodeEdit::default()
    }

    /// The change of `node` that makes this edit.
    fn change(&self, node: &NodeFacts) -> NodeChange {
        let mut change = NodeChange {
            annotations: self.annotations.clone(),
            unschedulable: self.unschedulable,
            ..NodeChange::of(&node.name)
        };
        if let Some(add) = self.exclude_label {
            change
                .labels
                .insert(EXCLUDE_LABEL.into(), add.then(|| "true".to_string()));
        }
        if let Some(add) = self.drain_taint {
            let mut taints = node.other_taints.clone();
            if add {
                taints.push(Taint {
                    key: DRAIN_TAINT_KEY.into(),
                    effect: "NoSchedule".into(),
                    value: None,
                    time_added: None,
                });
            }
            change.taints = Some(taints);
            change.resource_version = node.resource_version.clone();
        }
        change
    }
}

/// What the shell does for a maintenance.
#[derive(Debug, Clone, PartialEq)]
pub enum MaintenanceEffect {
    /// Undo what the maintenance did to the node (it gives the node back).
    RestoreNode(NodeChange),
    /// Delete the node's Lease if it is ours.
    ReleaseLease,
    /// As NMO: a non-controller owner reference to the Node, so that deleting the Node deletes
    /// the maintenance (its finalizer still runs first).
    OwnedByNode { node: String, uid: String },
    /// Create, renew or take over the node's Lease.
    HoldLease,
    /// Cordon, taint and label the node.
    TakeNode(NodeChange),
    /// Ask the Eviction API once for each pod; the answers come back as the next input.
    Evict(Vec<PodKey>),
    /// Delete each pod (the drain's timeout passed, `onDrainTimeout: DeletePods`).
    Delete(Vec<PodKey>),
}

impl Effect for MaintenanceEffect {
    fn before_status(&self) -> bool {
        matches!(
            self,
            MaintenanceEffect::RestoreNode(_) | MaintenanceEffect::ReleaseLease
        )
    }
}

/// What one decision of a NodeMaintenance is.
pub type MaintenanceDecision = Decision<NodeMaintenanceStatus, MaintenanceEffect, Stage>;

/// The decision as it is built, before it becomes a [`MaintenanceDecision`].
#[derive(Debug, Clone, PartialEq)]
struct Step {
    stage: Stage,
    /// Whether the maintenance holds the node in the budget from now on.
    hold_node: bool,
    node: NodeEdit,
    lease: Option<LeaseAction>,
    /// Pods to ask the Eviction API for, once.
    evict: Vec<PodKey>,
    /// Pods to delete, past the drain's timeout.
    delete: Vec<PodKey>,
    status: NodeMaintenanceStatus,
    events: Vec<Event>,
    requeue_after: Option<Duration>,
}

fn me(nm: &NodeMaintenance) -> String {
    format!(
        "nodemaintenance/{}",
        nm.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The holder of a NodeMaintenance in the budget.
pub fn holder(nm: &NodeMaintenance) -> Holder {
    Holder::Maintenance {
        name: nm.metadata.name.clone().unwrap_or_default(),
    }
}

/// The nodes the NodeMaintenances hold by their own record, oldest first (of two maintenances of
/// one node, the older holds it; the younger is a duplicate): every maintenance until it is
/// deleted, but those that failed in a way that gave the node back or never took it.
pub fn holds(maintenances: &[Arc<NodeMaintenance>]) -> Vec<Hold> {
    let mut live: Vec<&NodeMaintenance> = maintenances
        .iter()
        .map(AsRef::as_ref)
        .filter(|nm| !gave_the_node_back(nm.status.as_ref()))
        .collect();
    live.sort_by_key(|nm| {
        (
            nm.metadata.creation_timestamp.clone().map(|t| t.0),
            nm.metadata.name.clone(),
        )
    });
    live.into_iter()
        .map(|nm| Hold {
            node: nm.spec.node_name.clone(),
            holder: holder(nm),
            waiting: not_started(nm.status.as_ref()),
        })
        .collect()
}

/// Whether the maintenance has done nothing to its node yet: no status, or its `Drained`
/// condition says it waits (for a budget, another holder, the Lease).
fn not_started(status: Option<&NodeMaintenanceStatus>) -> bool {
    let Some(st) = status else { return true };
    match st.conditions.iter().find(|c| c.type_ == DRAINED) {
        Some(c) => status::is_waiting(&c.reason),
        None => st.phase.is_none(),
    }
}

/// A failure after which the maintenance does not hold its node (a timed-out drain keeps it).
fn gave_the_node_back(status: Option<&NodeMaintenanceStatus>) -> bool {
    let Some(st) = status.filter(|s| s.phase == Some(MaintenancePhase::Failed)) else {
        return false;
    };
    st.conditions
        .iter()
        .find(|c| c.type_ == DRAINED)
        .is_some_and(|c| {
            matches!(
                c.reason.as_str(),
                "LeaseLost" | "NodeNotFound" | "Duplicate"
            )
        })
}

/// Decides one reconcile of a NodeMaintenance.
pub fn decide(input: &MaintenanceInput<'_>, now: Timestamp) -> MaintenanceDecision {
    into_decision(input, plan_step(input, now))
}

/// The step of this reconcile, with the answers of the last evictions recorded in its status.
fn plan_step(input: &MaintenanceInput<'_>, now: Timestamp) -> Step {
    let old = input.maintenance.status.clone().unwrap_or_default();
    let mut step = step(input, &old, now);
    // While the drain goes on, the status says why each pod is still there.
    let round = input.evictions.filter(|r| !r.results.is_empty());
    if let Some(round) = round.filter(|_| step.stage == Stage::Draining) {
        record_evictions(&mut step, round, now, input.maintenance.metadata.generation);
    }
    if let Some(e) = input.last_error.filter(|_| step.stage != Stage::Restoring) {
        step.status.last_error = Some(e.to_string());
    }
    stamp(&mut step, &old, now);
    // Every event is about the maintenance's node: what a notification names.
    let node = &input.maintenance.spec.node_name;
    for event in &mut step.events {
        event.node.get_or_insert_with(|| node.clone());
    }
    step
}

fn step(input: &MaintenanceInput<'_>, old: &NodeMaintenanceStatus, now: Timestamp) -> Step {
    let nm = input.maintenance;
    let mut step = Step {
        stage: Stage::Draining,
        hold_node: false,
        node: NodeEdit::default(),
        lease: None,
        evict: Vec::new(),
        delete: Vec::new(),
        status: old.clone(),
        events: Vec::new(),
        requeue_after: None,
    };
    let duplicate_of = match input.held_by {
        Some(Holder::Maintenance { name }) => Some(name.as_str()),
        _ => None,
    };
    if nm.metadata.deletion_timestamp.is_some() {
        return deleting(input, step, duplicate_of.is_some());
    }
    if old.phase.is_none() {
        step.events.push(Event::normal(
            "BeginMaintenance",
            format!("Begin the maintenance of node {}", nm.spec.node_name),
        ));
    }
    if let Some(stage) = failed_for_good(old) {
        // It stays so until the resource is deleted. A timed-out drain keeps its node (and the
        // node's Lease); a lost Lease has given the node back already.
        if let Stage::TimedOut { .. } = stage {
            step.hold_node = true;
            step.lease = Some(LeaseAction::Hold);
            step.requeue_after = Some(LeaseSettings::default().duration / 4);
        }
        step.stage = stage;
        return step;
    }
    let Some(node) = input.node else {
        step.stage = Stage::NodeMissing;
        return finish(input, step, old, now);
    };
    if let Some(of) = duplicate_of {
        step.stage = Stage::Duplicate { of: of.to_string() };
        return finish(input, step, old, now);
    }
    let started = node.cordoned_by.as_deref() == Some(me(nm).as_str()) || node.drain_taint;
    if let (Some(stage), false) = (extensions::invalid(nm), started) {
        step.stage = stage;
        return finish(input, step, old, now);
    }
    if let (Some(refusal), None, false) = (input.refusal, input.held_by, started) {
        step.stage = Stage::WaitingForBudget {
            reason: refusal.reason(),
            message: refusal.to_string(),
        };
        return finish(input, step, old, now);
    }
    match (&input.lease, input.held_by) {
        (_, Some(holder)) if !started => {
            step.stage = Stage::WaitingForNode {
                holder: holder.to_string(),
            };
            return finish(input, step, old, now);
        }
        (LeaseView::Other { holder }, _) => {
            lease_held_by(input, node, holder, started, old, &mut step, now);
            return finish(input, step, old, now);
        }
        _ => {}
    }
    step.status.error_on_lease_count = Some(0);
    step.lease = Some(LeaseAction::Hold);
    take_node(input, node, &mut step);
    drain(input, &mut step, now);
    finish(input, step, old, now)
}

/// As NMO: the maintenance is owned by its Node (deleting the Node deletes it), once.
fn owned_by_node(input: &MaintenanceInput<'_>) -> Option<MaintenanceEffect> {
    let node = input.node?;
    let owned =
        (input.maintenance.metadata.owner_references.iter().flatten()).any(|o| o.uid == node.uid);
    (!owned && input.maintenance.metadata.deletion_timestamp.is_none()).then(|| {
        MaintenanceEffect::OwnedByNode {
            node: node.name.clone(),
            uid: node.uid.clone(),
        }
    })
}

/// The effects of a step, in the order the shell performs them.
fn into_decision(input: &MaintenanceInput<'_>, step: Step) -> MaintenanceDecision {
    let waiting = status::waiting(&step, &input.maintenance.spec.node_name);
    let releasing = step.lease == Some(LeaseAction::Release);
    let change = input.node.map(|node| step.node.change(node));
    let mut effects = Vec::new();
    if releasing {
        // Giving back: the node first, then the Lease (other medik8s operators wait for it).
        effects.extend(
            change
                .filter(|c| !c.is_empty())
                .map(MaintenanceEffect::RestoreNode),
        );
        effects.push(MaintenanceEffect::ReleaseLease);
    } else {
        // Taking: as NMO, the Lease first (another medik8s operator may hold the node), then
        // the cordon and taint, then the evictions.
        effects.extend(owned_by_node(input));
        if step.lease == Some(LeaseAction::Hold) {
            effects.push(MaintenanceEffect::HoldLease);
        }
        effects.extend(
            change
                .filter(|c| !c.is_empty())
                .map(MaintenanceEffect::TakeNode),
        );
        if !step.evict.is_empty() {
            effects.push(MaintenanceEffect::Evict(step.evict));
        }
        if !step.delete.is_empty() {
            effects.push(MaintenanceEffect::Delete(step.delete));
        }
    }
    let node = &input.maintenance.spec.node_name;
    let holds: BTreeSet<String> = step.hold_node.then(|| node.clone()).into_iter().collect();
    // Its node, while it waits to take it.
    let waits = matches!(
        step.stage,
        Stage::WaitingForNode { .. } | Stage::WaitingForBudget { .. } | Stage::LeaseHeld { .. }
    );
    let taints = DisruptionSpec::taints_next(input.maintenance.spec.disruption.as_ref());
    let next = (waits && taints && !step.hold_node)
        .then(|| node.clone())
        .into_iter()
        .collect();
    Decision {
        status: step.status,
        effects,
        events: step.events,
        holds,
        requeue: step.requeue_after,
        waiting,
        next,
        report: step.stage,
    }
}

/// Another medik8s operator holds the node's Lease: wait before the drain; once it started,
/// count the failures and keep draining, and give the node back after too many (NMO's rule).
fn lease_held_by(
    input: &MaintenanceInput<'_>,
    node: &NodeFacts,
    holder: &str,
    started: bool,
    old: &NodeMaintenanceStatus,
    step: &mut Step,
    now: Timestamp,
) {
    let errors = old.error_on_lease_count.unwrap_or(0) + i64::from(started);
    step.status.error_on_lease_count = Some(errors);
    let holder = holder.to_string();
    if !started {
        step.stage = Stage::LeaseHeld { holder };
    } else if errors > MAX_LEASE_ERRORS {
        restore(input, step);
        step.stage = Stage::LeaseLost { holder };
    } else {
        take_node(input, node, step);
        drain(input, step, now);
    }
}

/// The resource is being deleted: restore the node (the runtime then removes the finalizer).
fn deleting(input: &MaintenanceInput<'_>, mut step: Step, duplicate: bool) -> Step {
    let nm = input.maintenance;
    // A duplicate never took the node: the node, its taint and its Lease are the older
    // maintenance's.
    if !duplicate {
        restore(input, &mut step);
    }
    step.events.push(Event::normal(
        "RemovedMaintenance",
        format!("Removed the maintenance of node {}", nm.spec.node_name),
    ));
    step.stage = Stage::Restoring;
    step
}

/// A failure that only deleting the resource ends (not a missing node, which may appear).
fn failed_for_good(old: &NodeMaintenanceStatus) -> Option<Stage> {
    if old.phase != Some(MaintenancePhase::Failed) {
        return None;
    }
    let c = old.conditions.iter().find(|c| c.type_ == DRAINED)?;
    match c.reason.as_str() {
        "DrainTimedOut" => Some(Stage::TimedOut {
            after: String::new(),
        }),
        "LeaseLost" => Some(Stage::LeaseLost {
            holder: String::new(),
        }),
        _ => None,
    }
}

/// Cordons, taints and labels the node, recording what the maintenance itself changed.
fn take_node(input: &MaintenanceInput<'_>, node: &NodeFacts, step: &mut Step) {
    let me = me(input.maintenance);
    step.hold_node = true;
    let nmo = taken_by_nmo(input.maintenance, node);
    if !node.unschedulable {
        step.node.unschedulable = Some(true);
        step.node
            .annotations
            .insert(CORDONED_BY.into(), Some(me.clone()));
    } else if nmo && node.cordoned_by.is_none() {
        step.node
            .annotations
            .insert(CORDONED_BY.into(), Some(me.clone()));
    }
    if !node.drain_taint {
        step.node.drain_taint = Some(true);
    }
    if !node.excluded {
        step.node.exclude_label = Some(true);
        step.node.annotations.insert(EXCLUDED_BY.into(), Some(me));
    } else if nmo && node.excluded_by.is_none() {
        step.node.annotations.insert(EXCLUDED_BY.into(), Some(me));
    }
}

/// node-maintenance-operator started this maintenance before slipway took over: slipway has never
/// decided on it (no `Drained` condition of its own) and the node carries NMO's taint. NMO records
/// nothing of what it changed and gives the cordon and the exclusion label back whatever they were
/// before; the maintenance does the same once it ends, so they are recorded as its own.
fn taken_by_nmo(nm: &NodeMaintenance, node: &NodeFacts) -> bool {
    let decided = (nm.status.iter()).any(|st| st.conditions.iter().any(|c| c.type_ == DRAINED));
    node.drain_taint && !decided
}

/// Undoes what the maintenance did to the node, and only that.
fn restore(input: &MaintenanceInput<'_>, step: &mut Step) {
    step.lease = Some(LeaseAction::Release);
    let Some(node) = input.node else { return };
    let me = me(input.maintenance);
    if node.cordoned_by.as_deref() == Some(me.as_str()) {
        if node.unschedulable {
            step.node.unschedulable = Some(false);
            step.events.push(Event::normal(
                "UncordonNode",
                format!("Uncordoned node {}", node.name),
            ));
        }
        step.node.annotations.insert(CORDONED_BY.into(), None);
    }
    if node.drain_taint {
        step.node.drain_taint = Some(false);
    }
    if node.excluded_by.as_deref() == Some(me.as_str()) {
        if node.excluded {
            step.node.exclude_label = Some(false);
        }
        step.node.annotations.insert(EXCLUDED_BY.into(), None);
    }
}

#[cfg(test)]
mod tests;
