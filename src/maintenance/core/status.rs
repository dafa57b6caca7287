//! What a maintenance reports: the phase, the progress of the drain, why each pending pod is still
//! there, the `Drained` condition and the events of the stage reached.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{DRAINED, EvictionRound, LeaseSettings, MaintenanceInput, Stage, Step, WAIT_RECHECK};
use crate::common::condition::{Condition, Standing, set_standing};
use crate::common::decision::Event;
use crate::common::phase::PhaseTally;
use crate::maintenance::api::{
    MaintenancePhase, NodeMaintenanceStatus, PendingPodReason, PodReference,
};
use crate::node::drain::{EvictionResult, PodKey, PodsView};

pub(super) fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Sets phase, progress, pending pods, the condition and the events of the stage reached.
pub(super) fn finish(
    input: &MaintenanceInput<'_>,
    mut step: Step,
    old: &NodeMaintenanceStatus,
    now: Timestamp,
) -> Step {
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
        Stage::Draining | Stage::TimedOut { .. } | Stage::DeletingPods { .. }
            if input.pods.is_some() =>
        {
            set_pending(st, input.pods, &pending);
        }
        _ => {}
    }
    st.last_error = failure.then(|| message.clone()).or(st.last_error.take());
    // `Unknown` while it drains or waits, `False` once it failed: the convention of Rancher's
    // summaries (wrangler's, which Fleet judges a bundle by), where a `Drained=False` is an error.
    let drained = match phase {
        MaintenancePhase::Succeeded => "True",
        MaintenancePhase::Failed => "False",
        MaintenancePhase::Running => "Unknown",
    };
    set_condition(st, drained, reason, &message, now, nm.metadata.generation);
    // kstatus, for GitOps tools: drained is Ready, a failure only deleting it ends is Stalled.
    let standing = match phase {
        MaintenancePhase::Succeeded => Standing::Ready(reason, &message),
        MaintenancePhase::Failed => Standing::Stalled(reason, &message),
        MaintenancePhase::Running => Standing::Reconciling(reason, &message),
    };
    set_standing(&mut st.conditions, standing, nm.metadata.generation, now);
    st.observed_generation = nm.metadata.generation;
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
        Stage::InvalidSpec { message } => {
            (MaintenancePhase::Failed, "InvalidSpec", message.clone())
        }
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
        Stage::WaitingForBudget { reason, message } => (
            MaintenancePhase::Running,
            *reason,
            format!("waiting to take node {node}: {message}"),
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
        Stage::DeletingPods { after } => (
            MaintenancePhase::Running,
            "DeletingPods",
            format!(
                "the drain did not finish within {after}; deleting the pods left \
                 (spec.disruption.onDrainTimeout: DeletePods): {}",
                draining_message(pods, pending)
            ),
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
            MaintenancePhase::Succeeded => step
                .events
                .push(Event::normal("SucceedMaintenance", message)),
            MaintenancePhase::Failed => step
                .events
                .push(Event::warning("FailedMaintenance", message)),
            MaintenancePhase::Running if reason != "Draining" => {
                step.events.push(Event::normal(reason, message))
            }
            MaintenancePhase::Running => {}
        }
    }
}

/// When to look again: soon while waiting or draining, and while the node is held, often
/// enough to keep its Lease.
fn requeue(step: &Step) -> Option<Duration> {
    match (&step.stage, step.requeue_after) {
        (
            Stage::WaitingForNode { .. } | Stage::WaitingForBudget { .. } | Stage::LeaseHeld { .. },
            _,
        ) => Some(WAIT_RECHECK),
        // Nothing else tells a maintenance that its node appeared.
        (Stage::NodeMissing, _) => Some(WAIT_RECHECK * 6),
        // A spec fixed is a new generation, which wakes the maintenance by itself.
        (Stage::InvalidSpec { .. }, _) => None,
        // Keep the Lease while the node is held.
        (Stage::Drained | Stage::TimedOut { .. }, None) => {
            Some(LeaseSettings::default().duration / 4)
        }
        (_, keep) => keep,
    }
}

/// Stamps `lastUpdate` when the status to write differs from the one read (call last).
pub(super) fn stamp(step: &mut Step, old: &NodeMaintenanceStatus, now: Timestamp) {
    if *old != step.status {
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
        [] => pods.volumes_message().unwrap_or_else(|| "draining".into()),
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
pub(super) fn record_evictions(
    step: &mut Step,
    round: &EvictionRound,
    now: Timestamp,
    generation: Option<i64>,
) {
    let results = &round.results;
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
        set_condition(st, "Unknown", reason, &message, now, generation);
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
    // The time of `Drained=Unknown` is when the drain started (the drain timeout counts from it):
    // waiting for the node or its Lease is not draining yet. A drain recorded as `False` (before
    // slipway wrote `Unknown`) is the same drain.
    let pos = st.conditions.iter().position(|c| c.type_ == DRAINED);
    let keep_time = pos
        .map(|i| &st.conditions[i])
        .filter(|c| {
            (c.status == status || c.status == "False" && status == "Unknown")
                && (c.reason == reason || !is_waiting(&c.reason) && !is_waiting(reason))
        })
        .map(|c| c.last_transition_time.clone());
    let condition = Condition {
        type_: DRAINED.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: keep_time.unwrap_or(Time(now)),
        observed_generation: generation,
    };
    match pos {
        Some(i) => st.conditions[i] = condition,
        None => st.conditions.push(condition),
    }
}

/// The node, when the maintenance waits to take it: why, as its `Drained` condition says.
pub(super) fn waiting(step: &Step, node: &str) -> Vec<crate::common::decision::Waiting> {
    let condition = step.status.conditions.iter().find(|c| c.type_ == DRAINED);
    match (&step.stage, condition) {
        (
            Stage::WaitingForNode { .. } | Stage::WaitingForBudget { .. } | Stage::LeaseHeld { .. },
            Some(c),
        ) => vec![crate::common::decision::Waiting {
            reason: match &step.stage {
                Stage::WaitingForBudget { reason, .. } => reason,
                Stage::LeaseHeld { .. } => "LeaseHeld",
                _ => "WaitingForNode",
            },
            message: c.message.clone(),
            nodes: vec![node.to_string()],
            until: None,
        }],
        _ => Vec::new(),
    }
}

/// Reasons of `Drained=False` before the drain started.
pub(super) fn is_waiting(reason: &str) -> bool {
    matches!(
        reason,
        "WaitingForNode"
            | "LeaseHeld"
            | "DisruptionBudget"
            | "Halted"
            | "Frozen"
            | "DisruptionBudgetInvalid"
    )
}

/// The phase gauge of a maintenance: its phase, since the last transition of its `Drained`
/// condition; `None` before its first decision.
pub fn phase(status: Option<&NodeMaintenanceStatus>) -> Option<PhaseTally> {
    let st = status?;
    let since = st
        .conditions
        .iter()
        .find(|c| c.type_ == DRAINED)
        .map(|c| c.last_transition_time.0);
    Some(PhaseTally {
        phase: st.phase?.as_str(),
        nodes: 1,
        oldest_since: since,
    })
}
