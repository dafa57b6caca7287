//! The `Plan` resource, field for field as system-upgrade-controller v0.20.1 defines it.
//!
//! JSON names, types and meanings match SUC's `pkg/apis/upgrade.cattle.io/v1/types.go`. Optional scalars
//! are `Option`s so that a Plan read from YAML serialises back exactly as written, and every struct keeps
//! fields it does not know in `extra`, so that nothing is lost on a round trip through these types.

// kube's `printcolumn(...)` repeats `type_ = ...`, which clippy mistakes for a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    EnvFromSource, EnvVar, LocalObjectReference, SecurityContext, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::common::Extra;
pub use crate::common::check::{HealthCheckSpec, HealthCheckStatus};
pub use crate::common::window::TimeWindowSpec;
pub use crate::node::reboot::HealthGateSpec;

pub mod crd;
mod hooks;
pub mod strict;

pub use hooks::{HookPhase, HookStatus, HooksSpec, HooksStatus};

/// The API group shared with system-upgrade-controller.
pub const GROUP: &str = "upgrade.cattle.io";

/// The owner reference that ties a Job or reboot pod to its Plan, so deleting the Plan removes it.
/// Like SUC: the Plan is the controller, and the owner does not block deletion.
pub fn plan_owner_reference(
    plan_name: &str,
    plan_uid: &str,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: format!("{GROUP}/v1"),
        kind: "Plan".to_string(),
        name: plan_name.to_string(),
        uid: plan_uid.to_string(),
        controller: Some(true),
        block_owner_deletion: Some(false),
    }
}

/// Label and annotation keys of the SUC protocol.
pub mod labels {
    pub use crate::common::labels::{CONTROLLER, HOSTNAME, NODE, OS};

    /// On Jobs and pods: `"true"` when the Plan is exclusive.
    pub const EXCLUSIVE: &str = "upgrade.cattle.io/exclusive";
    /// On Jobs and pods: the Plan name.
    pub const PLAN: &str = "upgrade.cattle.io/plan";
    /// On Jobs and pods: the resolved version.
    pub const VERSION: &str = "upgrade.cattle.io/version";
    /// Job annotation with the TTL after which the controller deletes a finished Job.
    pub const TTL_SECONDS_AFTER_FINISHED: &str = "upgrade.cattle.io/ttl-seconds-after-finished";
    /// Plan annotation naming dotted paths whose values are added to the hash.
    pub const DIGEST: &str = "upgrade.cattle.io/digest";
    /// Prefix of the per-Plan node label: `plan.upgrade.cattle.io/<plan>=<hash>` or `=disabled`.
    pub const PLAN_NODE_PREFIX: &str = "plan.upgrade.cattle.io/";
    /// The node label value that opts a node out of a Plan.
    pub const DISABLED: &str = "disabled";

    /// The node label key that records which hash of `plan` a node has completed.
    pub fn plan_node_label(plan: &str) -> String {
        format!("{PLAN_NODE_PREFIX}{plan}")
    }
}

/// `Plan.spec`: what to run, where, and how many nodes at once.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "upgrade.cattle.io",
    version = "v1",
    kind = "Plan",
    plural = "plans",
    singular = "plan",
    namespaced,
    status = "PlanStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A Plan runs an upgrade Job on every node its selector matches, a few nodes at a time.",
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.upgrade.image"),
    printcolumn(name = "Channel", type_ = "string", json_path = ".spec.channel"),
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(
        name = "Complete",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Complete')].status"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.message!='')].message"
    ),
    printcolumn(
        name = "Applying",
        type_ = "string",
        json_path = ".status.applying",
        priority = 10
    )
)]
#[serde(rename_all = "camelCase")]
pub struct PlanSpec {
    /// Maximum number of nodes that run the upgrade at once. 0 (the default) runs nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<i64>,

    /// Deadline for each Job in seconds: >0 as is, 0 for none, <0 for the controller default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_active_deadline_secs: Option<i64>,

    /// Nodes to upgrade. Absent selects no node; `{}` selects every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,

    /// Service account of the Job pods; part of the hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,

    /// URL polled for the latest version; ignored when `version` is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,

    /// The version to upgrade to. `+` becomes `-` in `status.latestVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,

    /// Secrets mounted into every container; their content is part of the hash unless `ignoreUpdates`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets: Option<Vec<SecretSpec>>,

    /// Tolerations added after the built-in `node.kubernetes.io/unschedulable` one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,

    /// Never run this Plan's pods beside another exclusive Plan's pods on one node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclusive: Option<bool>,

    /// Only start a rollout inside this window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<TimeWindowSpec>,

    /// An init container that runs before cordon or drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepare: Option<ContainerSpec>,

    /// The upgrade container.
    pub upgrade: ContainerSpec,

    /// Cordon the node before the upgrade (implied by `drain`) and uncordon it after success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordon: Option<bool>,

    /// Drain the node before the upgrade and uncordon it after success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainSpec>,

    /// Pull secrets of the Job pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,

    /// How long to wait after a Job completes before the node counts as done (a Go duration, e.g. `5m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_complete_delay: Option<String>,

    /// Priority class of the Job pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,

    /// Node labels set when the upgrade succeeds; `$(LATEST_VERSION)` and `$(LATEST_HASH)` are expanded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_complete_labels: Option<BTreeMap<String, String>>,

    /// slipway only: reboot each node after a successful upgrade, through a separate reboot pod,
    /// and count the node as done only when it is back (and healthy). Absent: SUC's behaviour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot: Option<RebootSpec>,

    /// slipway only: what happens when a node's Job fails. Absent: SUC's behaviour (the node
    /// keeps its slot until the Plan changes, the other nodes go on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<FailurePolicySpec>,

    /// slipway only: checks on any resource that must all hold before the rollout starts and
    /// before each next node (running nodes finish). Past a check's `timeout`, the failure
    /// policy applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_checks: Option<Vec<HealthCheckSpec>>,

    /// slipway only: Jobs run once per version, before the first node and after the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<HooksSpec>,

    /// slipway only: staged promotion. No node starts a version until each Plan named here (in
    /// this namespace) has completed that same version and soaked for its `soak`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<AfterPlan>>,

    /// slipway only: how long a version the channel gives must have been seen before it rolls
    /// out (a Go duration). Until then the previous version stays in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_version_age: Option<String>,

    /// slipway only: the order nodes start in. `Default`: system-upgrade-controller's;
    /// `ControlPlaneFirst`: control-plane nodes (labelled `node-role.kubernetes.io/control-plane`
    /// or `node-role.kubernetes.io/master`) before the others, each group in the default order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<NodeOrder>,

    /// slipway only: what slipway does around each node it disrupts: an Alertmanager silence
    /// while the node is taken (docs/disruptions.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<crate::node::disruption::DisruptionSpec>,

    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// A Plan another one goes after.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AfterPlan {
    /// The Plan's name, in this Plan's namespace.
    pub plan: String,
    /// How long after it completed the version this Plan waits (a Go duration; none by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak: Option<String>,
}

/// The order a Plan's nodes start in.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum NodeOrder {
    /// system-upgrade-controller's order (a hash of node, Plan and version).
    #[default]
    Default,
    /// Control-plane nodes first.
    ControlPlaneFirst,
}

/// What a Plan does when a node's Job fails (a slipway extension of the Plan). A Job killed by
/// its own node's reboot is recreated whatever the policy (at most 3 times per node and Plan
/// generation), without using up `retries`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailurePolicySpec {
    /// `Hold` (the default): the node keeps its slot, the other nodes go on. `Stop`: no new node
    /// starts. `Retry`: the Job is recreated after a backoff, `retries` times, then `then`.
    /// `Quarantine`: the node is labelled and tainted `quarantine.slipway.dev/<plan>` and its
    /// slot goes to the next node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<FailureAction>,
    /// `Retry`: how many times a failed Job is recreated (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<i32>,
    /// `Retry`: the delay before the first retry, doubled for each next one, at most 10m (a Go
    /// duration; default 30s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<String>,
    /// `Retry`: what happens once the retries are used up: `Hold` (default), `Stop` or `Quarantine`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub then: Option<FailureAction>,
    /// `Quarantine`: how many nodes the Plan quarantines at one hash (default 1); one more
    /// failure then stops the rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_quarantined: Option<i32>,
    /// Uncordon a node whose Job failed for good (only a cordon the Plan made, never an admin's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncordon: Option<bool>,

    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// What a failure does to the rollout.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum FailureAction {
    Hold,
    Stop,
    Retry,
    Quarantine,
}

/// How slipway reboots a node after its upgrade (a slipway extension of the Plan).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RebootSpec {
    /// Reboot after a successful upgrade (default true when `reboot` is present).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// How long a node may take to come back Ready with a new boot ID (a Go duration; default 15m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Image of the reboot pod and the sentinel step; needs `sh`, `touch` and `nsenter`
    /// (default: the controller's `SLIPWAY_REBOOT_IMAGE`, busybox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Host directory for the sentinel files (default /var/lib/slipway/reboot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sentinel_path: Option<String>,
    /// Before the next node starts, wait until these pods on the rebooted node are Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_gate: Option<HealthGateSpec>,

    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// A container of the Job: `prepare` or `upgrade`. Note the JSON name `envs`, not `env`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerSpec {
    /// Image; without a tag or digest it gets `:<latestVersion>`.
    pub image: String,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Vec<String>>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub envs: Option<Vec<EnvVar>>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_from: Option<Vec<EnvFromSource>>,

    /// Host paths mounted into the container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<VolumeSpec>>,

    /// Replaces the default security context (privileged with `CAP_SYS_BOOT` for `upgrade`, none for `prepare`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,

    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// A host path mounted into a container.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSpec {
    pub name: String,
    /// Path on the host.
    pub source: String,
    /// Path in the container.
    pub destination: String,

    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// A Secret mounted into every container of the Job.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretSpec {
    pub name: String,
    /// Mount path; a relative path goes under `/run/system-upgrade/secrets/`.
    pub path: String,
    /// Leave the Secret out of the hash, so that changing it does not re-run the Plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_updates: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_mode: Option<i32>,

    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// How to drain the node; the flags of `kubectl drain`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainSpec {
    /// An integer is nanoseconds; a string is passed to kubectl as is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DrainTimeout>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_local_data: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_emptydir_data: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_daemon_sets: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_eviction: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_wait_for_delete_timeout: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,

    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `Plan.status`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PlanCondition>,
    /// The resolved version, with `+` replaced by `-`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_version: Option<String>,
    /// SHA-224 over the version, service account, digest values and Secrets; the value of the node label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_hash: Option<String>,
    /// `kubernetes.io/hostname` values of the nodes being upgraded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applying: Vec<String>,
    /// The `metadata.generation` this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// What each node in `applying` is doing; only nodes in `applying`, so it stays small.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeProgress>,
    /// The value of the Plan's `slipway.dev/reset-failures` annotation last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures_reset: Option<String>,
    /// The health checks of `spec.healthChecks`, as last read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<HealthCheckStatus>,
    /// The hooks of `spec.hooks` at the current version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<HooksStatus>,
    /// With `spec.minVersionAge`: the newest version the channel gave, and when it was first seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel_version: Option<SeenVersion>,
    /// With `spec.disruption.prePull`: the pull of the current version's images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_pull: Option<crate::node::prepull::PrePullStatus>,

    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// A version the channel gave, and when slipway first saw it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SeenVersion {
    /// As the channel gave it (before `+` becomes `-`).
    pub version: String,
    /// RFC 3339.
    pub first_seen: String,
}

/// The progress of one node of `status.applying`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeProgress {
    /// The node's `kubernetes.io/hostname`, as in `applying`.
    pub name: String,
    pub phase: NodePhase,
    /// Why it failed: `JobFailed`, `RebootTimedOut` or `HealthGateTimedOut`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The node's boot ID when its Job was created; a different one means it rebooted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The node's Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the node entered this phase (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// For `Upgrading` and `Failed`: the Plan generation the node's Job was made at. A failed Job
    /// is not retried until the Plan changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// Failed Jobs of the node recreated by the failure policy at this generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<i32>,
    /// Jobs of the node killed by its own reboot and recreated at this generation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_retries: Option<i32>,
    /// For `Retrying`: when the Job is recreated (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
}

/// Where a node of `status.applying` is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum NodePhase {
    /// Its Job waits for an older Job of the node.
    #[default]
    Pending,
    /// Its Job was created.
    Upgrading,
    /// Its Job completed and it reboots: waiting for a new boot ID and Ready.
    Rebooting,
    /// Back with a new boot ID: waiting for the health gate's pods.
    WaitingForHealth,
    /// Done, waiting `postCompleteDelay` before its slot is free.
    Waiting,
    /// Its Job failed, or its reboot or health gate timed out.
    Failed,
    /// Its Job failed and is recreated at `retryAt` (failure policy `Retry`, or killed by the
    /// node's own reboot).
    Retrying,
    /// A phase this version does not know (written by another version of slipway).
    #[serde(other)]
    #[schemars(skip)]
    Unknown,
}

impl NodePhase {
    /// The phase as the status writes it (also the `Complete` condition's reason while a node
    /// reboots).
    pub fn as_str(self) -> &'static str {
        match self {
            NodePhase::Pending => "Pending",
            NodePhase::Upgrading => "Upgrading",
            NodePhase::Rebooting => "Rebooting",
            NodePhase::WaitingForHealth => "WaitingForHealth",
            NodePhase::Waiting => "Waiting",
            NodePhase::Failed => "Failed",
            NodePhase::Retrying => "Retrying",
            NodePhase::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for NodePhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A condition as SUC writes it (wrangler's GenericCondition), plus `observedGeneration`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// RFC 3339; changes only when status or message changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<String>,
    /// RFC 3339; changes only when status changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// `drain.timeout`: nanoseconds as an integer (the pre-v0.16.3 form) or a duration string.
///
/// Unlike Kubernetes' `IntOrString` (and so SUC), the integer is 64-bit: `300000000000` (5m) is the
/// documented way to write an integer timeout, and it does not fit in 32 bits.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub enum DrainTimeout {
    Nanoseconds(i64),
    Text(String),
}

impl JsonSchema for DrainTimeout {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "DrainTimeout".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "x-kubernetes-int-or-string": true })
    }
}
