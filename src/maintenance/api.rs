//! The `NodeMaintenance` resource of medik8s node-maintenance-operator (NMO),
//! `nodemaintenance.medik8s.io/v1beta1`, field for field as NMO defines it, plus optional slipway
//! fields that an NMO user never needs to set.
//!
//! JSON names match NMO's `api/v1beta1/nodemaintenance_types.go` (note `totalpods`, all lower
//! case); omitted-when-empty fields stay omitted, so NMO's tools read what slipway writes.

// kube's `printcolumn(...)` repeats `type_ = ...`, which clippy mistakes for a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use crate::common::condition::Condition;
use crate::common::crd::{GO_DURATION_PATTERN, extend, push_rule, rule, with_rules};
use crate::node::disruption::DisruptionSpec;

/// The API group of NMO, shared so that NMO's users and tools keep working.
pub const GROUP: &str = "nodemaintenance.medik8s.io";
/// NMO's finalizer: deleting a NodeMaintenance waits until the node is restored.
pub const FINALIZER: &str = "foregroundDeleteNodeMaintenance";

/// `NodeMaintenance.spec`: put one node into maintenance (cordoned, tainted, drained) until the
/// resource is deleted.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "nodemaintenance.medik8s.io",
    version = "v1beta1",
    kind = "NodeMaintenance",
    plural = "nodemaintenances",
    singular = "nodemaintenance",
    shortname = "nm",
    status = "NodeMaintenanceStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "A NodeMaintenance cordons, taints and drains one node until it is deleted.",
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.nodeName"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Progress",
        type_ = "integer",
        json_path = ".status.drainProgress"
    ),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Drained')].message"
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = ".spec.reason",
        priority = 10
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct NodeMaintenanceSpec {
    /// The node to put into maintenance. It cannot change.
    pub node_name: String,
    /// Why the node is in maintenance, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// slipway: how long the drain may take, as a Go duration (`30m`). When it passes, the phase
    /// becomes `Failed` naming the pods that still block, evictions stop, and the node stays
    /// cordoned until the NodeMaintenance is deleted. Unset (as in NMO): no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_timeout: Option<String>,
    /// slipway: what slipway does around the disruption of the node: an Alertmanager silence
    /// while it is taken, what the drain does past `drainTimeout`, whether it waits for the
    /// node's volumes to detach (docs/disruptions.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<DisruptionSpec>,
}

/// `NodeMaintenance.status`, NMO's fields and, after them, slipway's.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeMaintenanceStatus {
    /// `Running`, `Succeeded` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MaintenancePhase>,
    /// Percent of the pods to evict that are gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_progress: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update: Option<Time>,
    /// The latest error, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Names of the pods still to be evicted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_pods: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_pods_refs: Vec<PodReference>,
    /// Pods on the node when the maintenance started.
    #[serde(default, rename = "totalpods", skip_serializing_if = "Option::is_none")]
    pub total_pods: Option<i64>,
    /// Pods to evict when the maintenance started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_pods: Option<i64>,
    /// Consecutive failures to renew the node's lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_on_lease_count: Option<i64>,
    /// slipway: why each pending pod is still there (a PodDisruptionBudget, a pod without a
    /// controller, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending_pods_reasons: Vec<PendingPodReason>,
    /// slipway: the `metadata.generation` this status was decided from (kstatus reads a status
    /// as out of date by it, not by the conditions').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// slipway: `Drained`, with a reason and a message that say what the maintenance waits for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum MaintenancePhase {
    Running,
    Succeeded,
    Failed,
}

impl MaintenancePhase {
    pub fn as_str(self) -> &'static str {
        match self {
            MaintenancePhase::Running => "Running",
            MaintenancePhase::Succeeded => "Succeeded",
            MaintenancePhase::Failed => "Failed",
        }
    }
}

#[derive(
    Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
pub struct PodReference {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct PendingPodReason {
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

/// The CRD of `nodemaintenances.nodemaintenance.medik8s.io`: NMO's, with CEL for what NMO's
/// webhook checks on one object (an immutable `nodeName`). What CEL cannot see (the node exists,
/// one maintenance per node) the controller reports in the status.
pub fn maintenance_crd() -> CustomResourceDefinition {
    with_rules(NodeMaintenance::crd(), add_rules)
}

/// The CRD as YAML, exactly as committed in `crds/`.
pub fn maintenance_crd_yaml() -> Result<String, crate::Error> {
    serde_saphyr::to_string(&maintenance_crd()).map_err(|e| crate::Error::Yaml(e.to_string()))
}

fn add_rules(root: &mut Value) {
    extend(root, "/properties/spec", |s| {
        push_rule(
            s,
            rule(
                "self.nodeName == oldSelf.nodeName",
                "spec.nodeName is immutable",
            ),
        );
    });
    extend(root, "/properties/spec/properties/nodeName", |s| {
        s["minLength"] = json!(1);
        s["maxLength"] = json!(253);
    });
    extend(root, "/properties/spec/properties/reason", |s| {
        s["maxLength"] = json!(1024);
    });
    extend(root, "/properties/spec/properties/drainTimeout", |s| {
        s["pattern"] = json!(GO_DURATION_PATTERN);
        s["maxLength"] = json!(64);
        push_rule(
            s,
            rule(
                "!self.startsWith('-') && self.matches('[1-9]')",
                "spec.drainTimeout must be a positive duration such as 30m",
            ),
        );
    });
    let disruption = "/properties/spec/properties/disruption";
    crate::node::disruption::crd_rules(root, disruption, "spec.disruption");
    extend(root, "/properties/status/properties/conditions", |s| {
        s["x-kubernetes-list-type"] = json!("map");
        s["x-kubernetes-list-map-keys"] = json!(["type"]);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_uses_nmo_json_names() {
        let status = NodeMaintenanceStatus {
            phase: Some(MaintenancePhase::Running),
            drain_progress: Some(50),
            total_pods: Some(4),
            eviction_pods: Some(2),
            error_on_lease_count: Some(0),
            pending_pods: vec!["web-1".into()],
            pending_pods_refs: vec![PodReference {
                namespace: "shop".into(),
                name: "web-1".into(),
            }],
            ..Default::default()
        };
        let v = serde_json::to_value(&status).unwrap_or_default();
        for key in [
            "phase",
            "drainProgress",
            "totalpods",
            "evictionPods",
            "errorOnLeaseCount",
            "pendingPods",
            "pendingPodsRefs",
        ] {
            assert!(v.get(key).is_some(), "{key} in {v}");
        }
        assert_eq!(v["phase"], "Running");
        assert_eq!(v["pendingPodsRefs"][0]["namespace"], "shop");
    }

    #[test]
    fn an_nmo_object_reads_back_unchanged() {
        let nmo = json!({
            "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
            "kind": "NodeMaintenance",
            "metadata": {"name": "nm-1"},
            "spec": {"nodeName": "worker-1", "reason": "disk"},
            "status": {"phase": "Succeeded", "drainProgress": 100, "totalpods": 7,
                       "evictionPods": 3, "lastUpdate": "2026-01-01T00:00:00Z"}
        });
        let nm: NodeMaintenance = serde_json::from_value(nmo.clone()).expect("an NMO object");
        assert_eq!(nm.spec.node_name, "worker-1");
        assert_eq!(serde_json::to_value(&nm).unwrap_or_default(), nmo);
    }

    #[test]
    fn the_crd_is_cluster_scoped_with_nmo_names_and_an_immutable_node() {
        let crd = maintenance_crd();
        assert_eq!(crd.spec.scope, "Cluster");
        assert_eq!(crd.spec.names.short_names, Some(vec!["nm".to_string()]));
        let yaml = maintenance_crd_yaml().unwrap_or_default();
        assert!(yaml.contains("self.nodeName == oldSelf.nodeName"), "{yaml}");
        assert!(yaml.contains("totalpods"));
    }
}
