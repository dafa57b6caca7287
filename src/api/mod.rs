//! The Plan API, `upgrade.cattle.io/v1`, NMO's `NodeMaintenance`, and their CustomResourceDefinitions.

pub mod crd;
pub mod maintenance;
pub mod plan;
pub mod reboot_policy;

pub use plan::{
    ContainerSpec, DrainSpec, DrainTimeout, HealthGateSpec, NodeProgress, Plan, PlanCondition,
    PlanSpec, PlanStatus, RebootSpec, SecretSpec, TimeWindowSpec, VolumeSpec,
};

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
    /// On Jobs and pods: the name of the controller that made them.
    pub const CONTROLLER: &str = "upgrade.cattle.io/controller";
    /// On Jobs and pods: `"true"` when the Plan is exclusive.
    pub const EXCLUSIVE: &str = "upgrade.cattle.io/exclusive";
    /// On Jobs and pods: the node name.
    pub const NODE: &str = "upgrade.cattle.io/node";
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
    /// The well-known hostname label that Jobs are pinned to.
    pub const HOSTNAME: &str = "kubernetes.io/hostname";
    /// The well-known OS label.
    pub const OS: &str = "kubernetes.io/os";

    /// The node label key that records which hash of `plan` a node has completed.
    pub fn plan_node_label(plan: &str) -> String {
        format!("{PLAN_NODE_PREFIX}{plan}")
    }
}
