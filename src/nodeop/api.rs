//! The `NodeOp` resource of kairos-operator (`operator.kairos.io/v1alpha1`, namespaced), field for
//! field as kairos-operator v0.1.3 defines it in `api/v1alpha1/nodeop_types.go`, with the same
//! defaults in its CRD, plus a few optional slipway fields in the status that a kairos user never
//! sets (listed in `tests/offline/kairos_crd.rs` and COMPATIBILITY.md).
//!
//! JSON names and omitted-when-empty fields match kairos-operator's, so its tools and its users'
//! scripts read what slipway writes.

// kube's `printcolumn(...)` repeats `type_ = ...`, which clippy mistakes for a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::LocalObjectReference;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::common::crd::{extend, with_rules};

/// kairos-operator's API group, shared so that its users and tools keep working.
pub const GROUP: &str = "operator.kairos.io";
/// Held while a NodeOp has nodes to give back (a cordon it made) when it is deleted.
pub const FINALIZER: &str = "slipway.dev/nodeop";
/// Where the host's root is mounted in the Job's container unless `hostMountPath` says otherwise.
pub const DEFAULT_HOST_MOUNT_PATH: &str = "/host";
/// The image of the Job and the preflight pod unless `image` says otherwise (kairos-operator's).
pub const DEFAULT_IMAGE: &str = "busybox:latest";
/// The Job's `backoffLimit` unless `backoffLimit` says otherwise (Kubernetes' default).
pub const DEFAULT_BACKOFF_LIMIT: i32 = 6;
/// The preflight pod's `activeDeadlineSeconds` unless the spec says otherwise.
pub const DEFAULT_PREFLIGHT_DEADLINE: i32 = 120;

/// `NodeOp.spec`: run a command on each selected node, with the host's root filesystem mounted.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "operator.kairos.io",
    version = "v1alpha1",
    kind = "NodeOp",
    plural = "nodeops",
    singular = "nodeop",
    namespaced,
    status = "NodeOpStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A NodeOp runs a command on selected nodes, with the host's root filesystem mounted.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodeOpSpec {
    /// The nodes to run on; every node when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// The command, run in a privileged container with the node's root filesystem mounted.
    pub command: Vec<String>,
    /// Where the node's root filesystem is mounted in the container (default `/host`; also in
    /// the environment as `HOST_DIR`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_mount_path: Option<String>,
    /// The image of the container (default `busybox:latest`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Secrets of the NodeOp's namespace to pull the images with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
    /// Cordon the node before the command, and uncordon it after it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordon: Option<bool>,
    /// Uncordon a node whose command failed (only a cordon this NodeOp made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncordon_on_failure: Option<bool>,
    /// Drain the node before the command (needs `cordon`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_options: Option<DrainOptions>,
    /// Reboot the node after its command succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_on_success: Option<bool>,
    /// The Job's `backoffLimit` (default 6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
    /// How many nodes run at once; 0 (the default): every selected node at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<i32>,
    /// Start no new node once one failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_on_failure: Option<bool>,
    /// A pod run on each node first: a message in its termination log skips the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight: Option<PreflightSpec>,
    /// slipway: what slipway does around the disruption of each node: an Alertmanager silence
    /// while it is taken, what the drain does past `timeoutSeconds`, whether it waits for the
    /// node's volumes to detach (docs/disruptions.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<crate::node::disruption::DisruptionSpec>,
}

/// `spec.preflight`: decides per node whether the operation is needed. The container writes a
/// reason to `/dev/termination-log` to skip the node, nothing to go on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightSpec {
    pub command: Vec<String>,
    /// The image (default: the NodeOp's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// How long the pod may run (default 120 seconds); past it the node fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i32>,
}

/// `spec.drainOptions`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DrainOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Also evict pods that no controller manages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// Seconds each pod has to terminate; negative: the pod's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i32>,
    /// Leave DaemonSet pods (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_daemon_sets: Option<bool>,
    /// Also evict pods with emptyDir volumes (their data is lost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_empty_dir_data: Option<bool>,
    /// How long the drain may take; past it the node fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
}

/// `NodeOp.status`, kairos-operator's fields and, after them, slipway's.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOpStatus {
    /// `Running`, `Completed` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Each node started so far, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_statuses: BTreeMap<String, NodeStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    /// slipway: why the nodes not started yet wait (another operation holds one, the
    /// concurrency, a failed node under `stopOnFailure`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// slipway: the `metadata.generation` this status was decided from (kstatus reads a status
    /// as out of date by it, not by the conditions').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// slipway: kstatus' `Ready`, `Reconciling` and `Stalled`, for GitOps tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<crate::common::condition::Condition>,
    /// slipway, with `spec.disruption.prePull`: the pull of the images before the first node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_pull: Option<crate::node::prepull::PrePullStatus>,
}

/// `NodeOp.status.nodeStatuses[node]`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// `Preflight`, `Pending`, `Running`, `Completed` or `Failed`.
    pub phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `not-requested`, `pending`, `cancelled` or `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    /// slipway: the boot the node ran when its work started; after a reboot the node is back
    /// once it runs another one and is Ready.
    #[serde(default, rename = "bootID", skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// slipway: when the current step (the drain, the wait for the reboot) started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Time>,
}

/// `NodeOpUpgrade.spec`: upgrade Kairos on the selected nodes to the OS in `image`, through a
/// NodeOp of the same name (cordon, drain, `kairos-agent upgrade`, reboot), control-plane nodes
/// first.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "operator.kairos.io",
    version = "v1alpha1",
    kind = "NodeOpUpgrade",
    plural = "nodeopupgrades",
    singular = "nodeopupgrade",
    namespaced,
    status = "NodeOpUpgradeStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A NodeOpUpgrade upgrades Kairos on selected nodes to the OS of an image.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodeOpUpgradeSpec {
    /// The nodes to upgrade; every node when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// The Kairos image to upgrade to: its root filesystem is the upgrade's source.
    pub image: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_secrets: Option<Vec<LocalObjectReference>>,
    /// How many nodes upgrade at once; 0 (the default): every selected node at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_on_failure: Option<bool>,
    /// Upgrade the recovery partition (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_recovery: Option<bool>,
    /// Upgrade the active partition and reboot into it (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade_active: Option<bool>,
    /// Upgrade even a node that already runs the image's version (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// `kairos-agent --debug` (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncordon_on_failure: Option<bool>,
    /// Paths the upgrade leaves as they are, besides `/etc/hostname` and `/etc/hosts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude_paths: Option<Vec<String>>,
}

/// `NodeOpUpgrade.status`: the NodeOp's, copied.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOpUpgradeStatus {
    /// `Initializing` once the NodeOp is created, then the NodeOp's phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_op_name: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_statuses: BTreeMap<String, NodeStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<Time>,
    /// slipway: the `metadata.generation` this status was decided from (kstatus reads a status
    /// as out of date by it, not by the conditions').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// slipway: kstatus' `Ready`, `Reconciling` and `Stalled`, for GitOps tools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<crate::common::condition::Condition>,
}

/// The CRD of `nodeopupgrades.operator.kairos.io`: kairos-operator's.
pub fn nodeopupgrade_crd() -> CustomResourceDefinition {
    let mut crd = with_rules(NodeOpUpgrade::crd(), |root| {
        let spec = "/properties/spec/properties";
        extend(root, &format!("{spec}/concurrency"), |s| {
            s["default"] = json!(0);
            s["minimum"] = json!(0);
        });
        kubernetes_types(root);
    });
    crd.spec.names.list_kind = Some("NodeOpUpgradeList".into());
    crd
}

/// The CRD as YAML, exactly as committed in `crds/`.
pub fn nodeopupgrade_crd_yaml() -> Result<String, crate::Error> {
    serde_saphyr::to_string(&nodeopupgrade_crd()).map_err(|e| crate::Error::Yaml(e.to_string()))
}

/// The CRD of `nodeops.operator.kairos.io`: kairos-operator's, with its defaults and bounds.
pub fn nodeop_crd() -> CustomResourceDefinition {
    let mut crd = with_rules(NodeOp::crd(), |root| {
        add_defaults(root);
        let disruption = "/properties/spec/properties/disruption";
        crate::node::disruption::crd_rules(root, disruption, "spec.disruption");
    });
    // As controller-gen writes it (the API server would default it the same).
    crd.spec.names.list_kind = Some("NodeOpList".into());
    crd
}

/// The CRD as YAML, exactly as committed in `crds/`.
pub fn nodeop_crd_yaml() -> Result<String, crate::Error> {
    serde_saphyr::to_string(&nodeop_crd()).map_err(|e| crate::Error::Yaml(e.to_string()))
}

/// kairos-operator's kubebuilder markers: the API server fills in the same defaults.
fn add_defaults(root: &mut Value) {
    let spec = "/properties/spec/properties";
    let defaults = [
        ("hostMountPath", json!(DEFAULT_HOST_MOUNT_PATH)),
        ("cordon", json!(false)),
        ("uncordonOnFailure", json!(false)),
        ("rebootOnSuccess", json!(false)),
        ("concurrency", json!(0)),
        ("stopOnFailure", json!(false)),
        (
            "preflight/properties/activeDeadlineSeconds",
            json!(DEFAULT_PREFLIGHT_DEADLINE),
        ),
        ("drainOptions/properties/enabled", json!(false)),
        ("drainOptions/properties/force", json!(false)),
        ("drainOptions/properties/ignoreDaemonSets", json!(true)),
        ("drainOptions/properties/deleteEmptyDirData", json!(false)),
    ];
    for (field, value) in defaults {
        extend(root, &format!("{spec}/{field}"), |s| s["default"] = value);
    }
    extend(root, &format!("{spec}/concurrency"), |s| {
        s["minimum"] = json!(0);
    });
    kubernetes_types(root);
}

/// Kubernetes' own list and map types, as controller-gen writes them for the core types of a spec
/// (`imagePullSecrets`, `nodeSelector`).
fn kubernetes_types(root: &mut Value) {
    let spec = "/properties/spec/properties";
    extend(root, &format!("{spec}/imagePullSecrets/items"), |s| {
        s["x-kubernetes-map-type"] = json!("atomic");
        if let Some(o) = s.as_object_mut() {
            o.remove("required");
        }
    });
    extend(
        root,
        &format!("{spec}/imagePullSecrets/items/properties/name"),
        |s| s["default"] = json!(""),
    );
    extend(root, &format!("{spec}/nodeSelector"), |s| {
        s["x-kubernetes-map-type"] = json!("atomic");
    });
    let expressions = format!("{spec}/nodeSelector/properties/matchExpressions");
    extend(root, &expressions, |s| {
        s["x-kubernetes-list-type"] = json!("atomic");
    });
    extend(
        root,
        &format!("{expressions}/items/properties/values"),
        |s| {
            s["x-kubernetes-list-type"] = json!("atomic");
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kairos_object_reads_back_unchanged() {
        let kairos = json!({
            "apiVersion": "operator.kairos.io/v1alpha1",
            "kind": "NodeOp",
            "metadata": {"name": "upgrade", "namespace": "default"},
            "spec": {
                "command": ["sh", "-c", "echo hi"],
                "hostMountPath": "/host",
                "cordon": true,
                "drainOptions": {"enabled": true, "ignoreDaemonSets": true, "timeoutSeconds": 300},
                "concurrency": 1,
                "stopOnFailure": true,
                "preflight": {"command": ["true"], "activeDeadlineSeconds": 120}
            },
            "status": {
                "phase": "Running",
                "lastUpdated": "2026-01-01T00:00:00Z",
                "nodeStatuses": {"n1": {"phase": "Pending", "jobName": "upgrade-n1-abcde",
                    "message": "Job created", "rebootStatus": "not-requested",
                    "lastUpdated": "2026-01-01T00:00:00Z"}}
            }
        });
        let op: NodeOp = serde_json::from_value(kairos.clone()).expect("a kairos NodeOp");
        assert_eq!(op.spec.concurrency, Some(1));
        assert_eq!(serde_json::to_value(&op).unwrap_or_default(), kairos);
    }

    #[test]
    fn the_crd_is_namespaced_in_kairos_group_with_its_defaults() {
        let crd = nodeop_crd();
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.group, GROUP);
        let yaml = nodeop_crd_yaml().unwrap_or_default();
        assert!(yaml.contains("default: /host"), "{yaml}");
    }
}
