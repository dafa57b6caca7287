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
}

impl DisruptionSpec {
    /// What a drain of an object with `spec` does when its timeout passes.
    pub fn on_drain_timeout(spec: Option<&DisruptionSpec>) -> OnDrainTimeout {
        spec.and_then(|d| d.on_drain_timeout)
            .unwrap_or(OnDrainTimeout::Fail)
    }
}
