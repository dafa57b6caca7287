//! `spec.hooks` and `status.hooks`: Jobs a Plan runs around a rollout (a slipway extension).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Extra;

/// Jobs run once per version (hash): `pre` before the first node starts, `post` after the last
/// node is done. Each is a Job spec (`template`, `backoffLimit`, `activeDeadlineSeconds`...).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HooksSpec {
    /// Run before the first node of each version; while it runs no node starts, and if it fails
    /// the rollout stops before any node is touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre: Option<Map<String, Value>>,
    /// Run once the last node of each version is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post: Option<Map<String, Value>>,

    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Where the hooks of the current version stand.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HooksStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre: Option<HookStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post: Option<HookStatus>,
    /// The hash whose rollout started a node: its post hook runs once its last node is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_out: Option<String>,
}

/// One hook's Job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HookStatus {
    /// The hash (version) it runs for.
    pub hash: String,
    /// Its Job.
    pub job: String,
    /// Runs of the hook at this hash: a failed hook runs again on a reset or a change of the Plan.
    pub attempt: i32,
    /// The Plan generation it ran at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    pub phase: HookPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Since when it is in this phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
}

/// Where a hook's Job is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum HookPhase {
    #[default]
    Running,
    Succeeded,
    Failed,
}
