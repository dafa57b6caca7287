//! The drain step of a maintenance: evict what is left, notice the drain is over, and what
//! happens once `drainTimeout` has passed (fail, or delete the pods left).

use jiff::Timestamp;

use super::status::count;
use super::{DRAIN_RECHECK, EvictionRound, MaintenanceInput, Stage, Step};
use crate::node::disruption::DisruptionSpec;
use crate::node::drain::{self, OnDrainTimeout};

/// Evicts what is left (not sooner than the refusal backoff allows), or notices the drain is
/// over or out of time.
pub(super) fn drain(input: &MaintenanceInput<'_>, step: &mut Step, now: Timestamp) {
    let Some(pods) = input.pods else {
        step.requeue_after = Some(DRAIN_RECHECK);
        return;
    };
    if step.status.total_pods.is_none() {
        step.status.total_pods = Some(count(pods.total));
        step.status.eviction_pods = Some(count(pods.to_evict.len() + pods.blocked.len()));
    }
    // Drained only on a node taken already as read: its cordon and taint are written after the
    // status (the hold is recorded first), so a decision that takes the node and says drained
    // would say so before the node is cordoned, and go on saying it if the cordon failed.
    if pods.is_drained() && step.node.is_empty() {
        step.stage = Stage::Drained;
        return;
    }
    if let Some(after) = super::extensions::timed_out(input, now) {
        let spec = input.maintenance.spec.disruption.as_ref();
        if DisruptionSpec::on_drain_timeout(spec) == OnDrainTimeout::Fail {
            step.stage = Stage::TimedOut { after };
            return;
        }
        let node = &input.maintenance.spec.node_name;
        step.delete = drain::to_delete(pods);
        (step.events).extend(
            step.delete
                .iter()
                .map(|p| drain::deleted_event(p, node, &after)),
        );
        step.stage = Stage::DeletingPods { after };
        step.requeue_after = Some(DRAIN_RECHECK);
        return;
    }
    step.stage = Stage::Draining;
    step.requeue_after = Some(DRAIN_RECHECK);
    let next_ask = input.evictions.and_then(EvictionRound::next_ask);
    if let Some(at) = next_ask.filter(|at| now < *at) {
        // A PodDisruptionBudget refused the last round: wait before asking again.
        step.requeue_after = Some(now.duration_until(at).try_into().unwrap_or(DRAIN_RECHECK));
        return;
    }
    if pods.blocked.is_empty() {
        step.evict = pods
            .to_evict
            .iter()
            .filter(|(_, terminating)| !**terminating)
            .map(|(k, _)| k.clone())
            .collect();
    }
}
