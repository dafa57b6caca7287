//! What an operation asks for around each disruption of a node, in one shape for every kind
//! (`spec.disruption` of a Plan, a RebootPolicy, a NodeMaintenance and a NodeOp).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::drain::OnDrainTimeout;

/// `spec.disruption` (a slipway extension).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionSpec {
    /// What a drain does once its timeout has passed with pods still on the node (the timeout is
    /// the kind's own: a NodeMaintenance's `spec.drainTimeout`, a NodeOp's
    /// `spec.drainOptions.timeoutSeconds`, a RebootPolicy's `spec.drain.timeout`). `Fail` (the
    /// default): the kind's failure. `DeletePods`: the pods left are deleted, as `kubectl drain
    /// --disable-eviction` would, bypassing their PodDisruptionBudgets, with an Event per pod.
    /// Plans drain in their Job: there only `Fail` is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_drain_timeout: Option<OnDrainTimeout>,
    /// A drain is over only once the node's VolumeAttachments are gone too (its CSI volumes
    /// detached), so that a reboot or a power-off never cuts a volume still attached. Bounded by
    /// the drain's timeout. Plans drain in their Job: there it is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_for_volume_detach: Option<bool>,
}

impl DisruptionSpec {
    /// Whether a drain of an object with `spec` waits for the node's volumes to detach.
    pub fn waits_for_volumes(spec: Option<&DisruptionSpec>) -> bool {
        spec.and_then(|d| d.wait_for_volume_detach).unwrap_or(false)
    }

    /// What a drain of an object with `spec` does when its timeout passes.
    pub fn on_drain_timeout(spec: Option<&DisruptionSpec>) -> OnDrainTimeout {
        spec.and_then(|d| d.on_drain_timeout)
            .unwrap_or(OnDrainTimeout::Fail)
    }
}
