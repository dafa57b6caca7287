//! Declarative node maintenance, as medik8s node-maintenance-operator (NMO) does it: a
//! `NodeMaintenance` cordons and taints its node, takes the node's medik8s Lease, labels it
//! excluded from remediation and drains it; deleting the resource undoes what it did, and only
//! that (an admin's own cordon stays).
//!
//! This module decides; `controller::maintenance` reads the node, its pods and its Lease, and
//! applies the [`Step`]. One reconcile is one step: evictions are asked once per reconcile and the
//! controller comes back, so a drain survives a crash of the controller at any point.
//!
//! What slipway adds to NMO: it never takes a node another slipway operation holds (a node in the
//! middle of a Plan's step waits, saying so); a drain can have a timeout after which the
//! maintenance fails naming the pods that block; the status says why each pending pod is still
//! there; and a cordon or label that was there before stays after the maintenance ends, because
//! the node's annotations record what the maintenance itself did.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::common::condition::Condition;
use crate::maintenance::api::{
    FINALIZER, MaintenancePhase, NodeMaintenance, NodeMaintenanceStatus, PendingPodReason,
    PodReference,
};
use crate::node::drain::{EvictionResult, PodKey, PodsView};
use crate::node::holders::Holder;

/// NMO's taint, beside the cordon.
pub const DRAIN_TAINT_KEY: &str = "medik8s.io/drain";
/// NMO's label that keeps medik8s remediation operators off the node.
pub const EXCLUDE_LABEL: &str = "remediation.medik8s.io/exclude-from-remediation";
/// On the node: which NodeMaintenance cordoned it (absent: someone else did, or nobody).
pub const CORDONED_BY: &str = "slipway.dev/cordoned-by";
/// On the node: which NodeMaintenance added [`EXCLUDE_LABEL`].
pub const EXCLUDED_BY: &str = "slipway.dev/remediation-excluded-by";
/// The condition that says how the drain goes.
pub const DRAINED: &str = "Drained";

/// How the maintenance takes the node's medik8s Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    /// NMO's default is `medik8s-leases` (its `LEASE_NAMESPACE`).
    pub namespace: String,
    /// NMO's is `node-maintenance`; other medik8s operators see the node as taken by it.
    pub holder: String,
    /// NMO requests 3600 s.
    pub duration: Duration,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        LeaseSettings {
            namespace: "medik8s-leases".into(),
            holder: "node-maintenance".into(),
            duration: Duration::from_secs(3600),
        }
    }
}

/// The Lease name of a node, as medik8s names it.
pub fn lease_name(node: &str) -> String {
    format!("node-{node}")
}

/// After this many consecutive failures to keep the Lease once the drain started, the
/// maintenance gives up and restores the node (NMO's rule).
pub const MAX_LEASE_ERRORS: i64 = 3;
/// How soon a running drain is looked at again (NMO's requeue).
pub const DRAIN_RECHECK: Duration = Duration::from_secs(5);
/// The longest wait between evictions a PodDisruptionBudget keeps refusing.
pub const REFUSAL_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// The wait before asking again after an eviction was refused (429): `DRAIN_RECHECK` the first
/// time, then twice the previous wait, up to `REFUSAL_BACKOFF_MAX`.
pub fn refusal_backoff(previous: Option<Duration>) -> Duration {
    previous.map_or(DRAIN_RECHECK, |d| {
        d.saturating_mul(2)
            .clamp(DRAIN_RECHECK, REFUSAL_BACKOFF_MAX)
    })
}

/// Whether a PodDisruptionBudget refused one of the evictions.
pub fn any_refused(results: &[(PodKey, EvictionResult)]) -> bool {
    results
        .iter()
        .any(|(_, r)| matches!(r, EvictionResult::Refused(_)))
}
/// How soon a maintenance that waits for another holder looks again.
pub const WAIT_RECHECK: Duration = Duration::from_secs(10);

/// What the decision needs to know about the node (read fresh, not from a cache).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeFacts {
    pub name: String,
    pub uid: String,
    pub unschedulable: bool,
    pub drain_taint: bool,
    pub excluded: bool,
    pub cordoned_by: Option<String>,
    pub excluded_by: Option<String>,
}

/// What the node's medik8s Lease says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseView {
    /// No Lease, or one that expired: it can be taken.
    Free,
    Ours,
    Other {
        holder: String,
    },
}

/// Everything the decision reads.
pub struct MaintenanceInput<'a> {
    pub maintenance: &'a NodeMaintenance,
    /// `None`: no node of that name exists.
    pub node: Option<&'a NodeFacts>,
    /// An older NodeMaintenance for the same node, which owns it.
    pub duplicate_of: Option<&'a str>,
    /// Another slipway operation that holds the node (a Plan in the middle of a step).
    pub busy: Option<&'a Holder>,
    pub lease: LeaseView,
    /// The node's pods; `None` when they were not listed (not draining).
    pub pods: Option<&'a PodsView>,
    pub now: Timestamp,
}

/// Where a maintenance stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stage {
    /// Being deleted: restore the node, then let the resource go.
    Restoring,
    NodeMissing,
    Duplicate {
        of: String,
    },
    /// Another slipway operation holds the node; nothing was done to it yet.
    WaitingForNode {
        holder: String,
    },
    /// Another medik8s operator holds the node's Lease; nothing was done to it yet.
    LeaseHeld {
        holder: String,
    },
    /// The Lease was lost too often after the drain started: the node is restored.
    LeaseLost {
        holder: String,
    },
    Draining,
    Drained,
    /// `drainTimeout` passed with pods still pending.
    TimedOut {
        after: String,
    },
}

/// What to change on the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeChange {
    pub unschedulable: Option<bool>,
    pub drain_taint: Option<bool>,
    pub exclude_label: Option<bool>,
    /// Annotations to set (`Some`) or remove (`None`).
    pub annotations: BTreeMap<String, Option<String>>,
}

impl NodeChange {
    pub fn is_empty(&self) -> bool {
        *self == NodeChange::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseAction {
    /// Create, renew or take over the Lease.
    Hold,
    /// Delete the Lease if it is ours.
    Release,
}

/// An event on the NodeMaintenance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintenanceEvent {
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

/// The decision of one reconcile.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub stage: Stage,
    pub add_finalizer: bool,
    pub remove_finalizer: bool,
    /// Whether the maintenance takes the node in the budget (it holds it from now on).
    pub hold_node: bool,
    pub node: NodeChange,
    pub lease: Option<LeaseAction>,
    /// Pods to ask the Eviction API for, once.
    pub evict: Vec<PodKey>,
    pub status: NodeMaintenanceStatus,
    pub events: Vec<MaintenanceEvent>,
    pub requeue_after: Option<Duration>,
}

fn me(nm: &NodeMaintenance) -> String {
    format!(
        "nodemaintenance/{}",
        nm.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Decides one reconcile of a NodeMaintenance.
pub fn decide(input: &MaintenanceInput<'_>) -> Step {
    let nm = input.maintenance;
    let old = nm.status.clone().unwrap_or_default();
    let mut step = Step {
        stage: Stage::Draining,
        add_finalizer: false,
        remove_finalizer: false,
        hold_node: false,
        node: NodeChange::default(),
        lease: None,
        evict: Vec::new(),
        status: old.clone(),
        events: Vec::new(),
        requeue_after: None,
    };
    let has_finalizer = nm
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER);
    if nm.metadata.deletion_timestamp.is_some() {
        return deleting(input, step, has_finalizer);
    }
    if !has_finalizer {
        step.add_finalizer = true;
        step.events.push(normal(
            "BeginMaintenance",
            format!("Begin the maintenance of node {}", nm.spec.node_name),
        ));
    }
    if let Some(stage) = failed_for_good(&old) {
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
        return finish(input, step, &old);
    };
    if let Some(of) = input.duplicate_of {
        step.stage = Stage::Duplicate { of: of.to_string() };
        return finish(input, step, &old);
    }
    let started = node.cordoned_by.as_deref() == Some(me(nm).as_str()) || node.drain_taint;
    match (&input.lease, input.busy) {
        (_, Some(holder)) if !started => {
            step.stage = Stage::WaitingForNode {
                holder: holder.to_string(),
            };
            return finish(input, step, &old);
        }
        (LeaseView::Other { holder }, _) => {
            lease_held_by(input, node, holder, started, &old, &mut step);
            return finish(input, step, &old);
        }
        _ => {}
    }
    step.status.error_on_lease_count = Some(0);
    step.lease = Some(LeaseAction::Hold);
    take_node(input, node, &mut step);
    drain(input, &mut step);
    finish(input, step, &old)
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
        drain(input, step);
    }
}

/// The resource is being deleted: restore the node (once, while the finalizer holds it).
fn deleting(input: &MaintenanceInput<'_>, mut step: Step, has_finalizer: bool) -> Step {
    let nm = input.maintenance;
    if has_finalizer {
        // A duplicate never took the node: the node, its taint and its Lease are the
        // older maintenance's.
        if input.duplicate_of.is_none() {
            restore(input, &mut step);
        }
        step.remove_finalizer = true;
        step.events.push(normal(
            "RemovedMaintenance",
            format!("Removed the maintenance of node {}", nm.spec.node_name),
        ));
    }
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
    if !node.unschedulable {
        step.node.unschedulable = Some(true);
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
    }
}

/// Undoes what the maintenance did to the node, and only that.
fn restore(input: &MaintenanceInput<'_>, step: &mut Step) {
    step.lease = Some(LeaseAction::Release);
    let Some(node) = input.node else { return };
    let me = me(input.maintenance);
    if node.cordoned_by.as_deref() == Some(me.as_str()) {
        if node.unschedulable {
            step.node.unschedulable = Some(false);
            step.events.push(normal(
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

/// Evicts what is left, or notices the drain is over or out of time.
fn drain(input: &MaintenanceInput<'_>, step: &mut Step) {
    let Some(pods) = input.pods else {
        step.requeue_after = Some(DRAIN_RECHECK);
        return;
    };
    if step.status.total_pods.is_none() {
        step.status.total_pods = Some(count(pods.total));
        step.status.eviction_pods = Some(count(pods.to_evict.len() + pods.blocked.len()));
    }
    if pods.to_evict.is_empty() && pods.blocked.is_empty() {
        step.stage = Stage::Drained;
        return;
    }
    if let Some(after) = timed_out(input) {
        step.stage = Stage::TimedOut { after };
        return;
    }
    step.stage = Stage::Draining;
    if pods.blocked.is_empty() {
        step.evict = pods
            .to_evict
            .iter()
            .filter(|(_, terminating)| !**terminating)
            .map(|(k, _)| k.clone())
            .collect();
    }
    step.requeue_after = Some(DRAIN_RECHECK);
}

/// `Some(timeout)` once `drainTimeout` has passed since the drain started.
fn timed_out(input: &MaintenanceInput<'_>) -> Option<String> {
    let text = input.maintenance.spec.drain_timeout.as_deref()?;
    let timeout = text
        .parse::<crate::common::duration::GoDuration>()
        .ok()
        .and_then(crate::common::duration::GoDuration::to_std)?;
    let started = input
        .maintenance
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == DRAINED && c.status == "False" && !is_waiting(&c.reason))
        .and_then(|c| c.last_transition_time.as_ref())?
        .0;
    let deadline = started.checked_add(timeout).ok()?;
    (input.now >= deadline).then(|| text.to_string())
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Sets phase, progress, pending pods, the condition and the events of the stage reached.
fn finish(input: &MaintenanceInput<'_>, mut step: Step, old: &NodeMaintenanceStatus) -> Step {
    let nm = input.maintenance;
    let node = &nm.spec.node_name;
    let st = &mut step.status;
    let pending: Vec<PodKey> = input
        .pods
        .map(|p| p.to_evict.keys().chain(p.blocked.keys()).cloned().collect())
        .unwrap_or_default();
    let Some((phase, reason, message)) = describe(&step.stage, node, input.pods, &pending) else {
        return step;
    };
    let failure = phase == MaintenancePhase::Failed;
    st.phase = Some(phase);
    match &step.stage {
        Stage::Drained => {
            st.drain_progress = Some(100);
            st.pending_pods.clear();
            st.pending_pods_refs.clear();
            st.pending_pods_reasons.clear();
        }
        Stage::Draining | Stage::TimedOut { .. } if input.pods.is_some() => {
            set_pending(st, input.pods, &pending);
        }
        _ => {}
    }
    st.last_error = failure.then(|| message.clone()).or(st.last_error.take());
    let drained = if phase == MaintenancePhase::Succeeded {
        "True"
    } else {
        "False"
    };
    set_condition(
        st,
        drained,
        reason,
        &message,
        input.now,
        nm.metadata.generation,
    );
    stage_events(&mut step, old, phase, reason, message);
    step.requeue_after = requeue(&step);
    step
}

/// The phase, the reason and the message of the `Drained` condition at `stage`; `None` while
/// restoring (the resource is going).
fn describe(
    stage: &Stage,
    node: &str,
    pods: Option<&PodsView>,
    pending: &[PodKey],
) -> Option<(MaintenancePhase, &'static str, String)> {
    Some(match stage {
        Stage::Restoring => return None,
        Stage::NodeMissing => (
            MaintenancePhase::Failed,
            "NodeNotFound",
            format!("invalid nodeName, no node with name {node} found"),
        ),
        Stage::Duplicate { of } => (
            MaintenancePhase::Failed,
            "Duplicate",
            format!("a NodeMaintenance for node {node} already exists: {of}"),
        ),
        Stage::WaitingForNode { holder } => (
            MaintenancePhase::Running,
            "WaitingForNode",
            format!("waiting for {holder} to finish its step on node {node}"),
        ),
        Stage::LeaseHeld { holder } => (
            MaintenancePhase::Running,
            "LeaseHeld",
            format!("the lease of node {node} is held by {holder}"),
        ),
        Stage::LeaseLost { holder } => (
            MaintenancePhase::Failed,
            "LeaseLost",
            format!("the lease of node {node} could not be extended: it is held by {holder}"),
        ),
        Stage::Draining => (
            MaintenancePhase::Running,
            "Draining",
            draining_message(pods, pending),
        ),
        Stage::Drained => (
            MaintenancePhase::Succeeded,
            "Drained",
            format!("node {node} is drained"),
        ),
        Stage::TimedOut { after } => (
            MaintenancePhase::Failed,
            "DrainTimedOut",
            format!(
                "the drain did not finish within {after}: {}",
                draining_message(pods, pending)
            ),
        ),
    })
}

/// An event when the phase or the reason changes (draining itself is told by the status).
fn stage_events(
    step: &mut Step,
    old: &NodeMaintenanceStatus,
    phase: MaintenancePhase,
    reason: &'static str,
    message: String,
) {
    let changed_phase = old.phase != Some(phase) || cond_reason(old) != Some(reason);
    if changed_phase {
        match phase {
            MaintenancePhase::Succeeded => step.events.push(normal("SucceedMaintenance", message)),
            MaintenancePhase::Failed => step.events.push(MaintenanceEvent {
                warning: true,
                reason: "FailedMaintenance",
                message,
            }),
            MaintenancePhase::Running if reason != "Draining" => {
                step.events.push(normal(reason, message))
            }
            MaintenancePhase::Running => {}
        }
    }
}

/// When to look again: soon while waiting or draining, and while the node is held, often
/// enough to keep its Lease.
fn requeue(step: &Step) -> Option<Duration> {
    match (&step.stage, step.requeue_after) {
        (Stage::WaitingForNode { .. } | Stage::LeaseHeld { .. }, _) => Some(WAIT_RECHECK),
        // Nothing else tells a maintenance that its node appeared.
        (Stage::NodeMissing, _) => Some(WAIT_RECHECK * 6),
        // Keep the Lease while the node is held.
        (Stage::Drained | Stage::TimedOut { .. }, None) => {
            Some(LeaseSettings::default().duration / 4)
        }
        (_, keep) => keep,
    }
}

/// Stamps `lastUpdate` when the status to write differs from the one read (call last).
pub fn stamp(step: &mut Step, old: Option<&NodeMaintenanceStatus>, now: Timestamp) {
    if old != Some(&step.status) {
        step.status.last_update = Some(Time(now));
    }
}

fn cond_reason(st: &NodeMaintenanceStatus) -> Option<&str> {
    st.conditions
        .iter()
        .find(|c| c.type_ == DRAINED)
        .map(|c| c.reason.as_str())
}

fn draining_message(pods: Option<&PodsView>, pending: &[PodKey]) -> String {
    let Some(pods) = pods else {
        return "draining".into();
    };
    if let Some((pod, why)) = pods.blocked.iter().next() {
        return format!("the drain cannot start: pod {pod}: {why}");
    }
    match pending {
        [] => "draining".into(),
        [one] => format!("waiting for pod {one} to be evicted"),
        [first, rest @ ..] => format!(
            "waiting for {} pods to be evicted: {first} and {} more",
            rest.len() + 1,
            rest.len()
        ),
    }
}

fn set_pending(st: &mut NodeMaintenanceStatus, pods: Option<&PodsView>, pending: &[PodKey]) {
    st.pending_pods = pending.iter().map(|p| p.name.clone()).collect();
    st.pending_pods_refs = pending
        .iter()
        .map(|p| PodReference {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        })
        .collect();
    let evict = st.eviction_pods.unwrap_or(0);
    let left = count(pending.len());
    st.drain_progress = Some(if evict > 0 {
        (evict - left.min(evict)) * 100 / evict
    } else {
        100
    });
    let blocked = pods.map(|p| &p.blocked);
    let known: BTreeMap<(String, String), String> = st
        .pending_pods_reasons
        .drain(..)
        .map(|r| ((r.namespace, r.name), r.reason))
        .collect();
    st.pending_pods_reasons = pending
        .iter()
        .map(|p| {
            let key = (p.namespace.clone(), p.name.clone());
            let reason = blocked
                .and_then(|b| b.get(p).cloned())
                .or_else(|| known.get(&key).cloned())
                .unwrap_or_else(|| "waiting for eviction".into());
            PendingPodReason {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                reason,
            }
        })
        .collect();
}

/// Records what the Eviction API answered, so the status says why each pod is still there.
pub fn record_evictions(
    step: &mut Step,
    results: &[(PodKey, EvictionResult)],
    now: Timestamp,
    generation: Option<i64>,
) {
    let st = &mut step.status;
    let mut last_error = None;
    for (pod, result) in results {
        let reason = match result {
            EvictionResult::Accepted => "evicted, waiting for it to terminate".to_string(),
            EvictionResult::Refused(why) => why.clone(),
            EvictionResult::Failed(e) => {
                last_error = Some(format!("evicting pod {pod}: {e}"));
                format!("eviction failed: {e}")
            }
        };
        if let Some(r) = st
            .pending_pods_reasons
            .iter_mut()
            .find(|r| r.namespace == pod.namespace && r.name == pod.name)
        {
            r.reason = reason;
        }
    }
    let refused = results.iter().find_map(|(pod, r)| match r {
        EvictionResult::Refused(why) => Some(format!("pod {pod}: {why}")),
        _ => None,
    });
    if let Some(message) = refused {
        let reason = "BlockedByDisruptionBudget";
        set_condition(st, "False", reason, &message, now, generation);
        last_error = last_error.or(Some(message));
    }
    if let Some(e) = last_error {
        st.last_error = Some(e);
    }
}

fn set_condition(
    st: &mut NodeMaintenanceStatus,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
    generation: Option<i64>,
) {
    // The time of `Drained=False` is when the drain started (the drain timeout counts from it):
    // waiting for the node or its Lease is not draining yet.
    let pos = st.conditions.iter().position(|c| c.type_ == DRAINED);
    let keep_time = pos
        .map(|i| &st.conditions[i])
        .filter(|c| {
            c.status == status
                && (c.reason == reason || !is_waiting(&c.reason) && !is_waiting(reason))
        })
        .and_then(|c| c.last_transition_time.clone());
    let condition = Condition {
        type_: DRAINED.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Some(keep_time.unwrap_or(Time(now))),
        observed_generation: generation,
    };
    match pos {
        Some(i) => st.conditions[i] = condition,
        None => st.conditions.push(condition),
    }
}

/// Reasons of `Drained=False` before the drain started.
fn is_waiting(reason: &str) -> bool {
    matches!(reason, "WaitingForNode" | "LeaseHeld")
}

fn normal(reason: &'static str, message: String) -> MaintenanceEvent {
    MaintenanceEvent {
        warning: false,
        reason,
        message,
    }
}

#[cfg(test)]
mod tests;
