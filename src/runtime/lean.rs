//! Objects decoded from a watch without what the process would drop at once. serde skips a field
//! its target does not name without building anything, so a watch that decodes into these mirror
//! structs never pays for `managedFields` (a JSON tree per manager) or for the parts of an object
//! no decision reads. Each lean type wraps the real one, so stores and decisions are unchanged.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

/// Makes `$lean` a stand-in for `$full` (the same kind, group and path; its metadata is the
/// wrapped object's; written as the object it wraps), and gives it `into_event`, which hands the
/// watch's events on as `$full`.
macro_rules! lean_resource {
    ($lean:ident, $full:ty) => {
        impl kube::Resource for $lean {
            type DynamicType = ();
            type Scope = <$full as kube::Resource>::Scope;
            fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
                <$full as kube::Resource>::kind(dt)
            }
            fn group(dt: &()) -> std::borrow::Cow<'_, str> {
                <$full as kube::Resource>::group(dt)
            }
            fn version(dt: &()) -> std::borrow::Cow<'_, str> {
                <$full as kube::Resource>::version(dt)
            }
            fn api_version(dt: &()) -> std::borrow::Cow<'_, str> {
                <$full as kube::Resource>::api_version(dt)
            }
            fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
                <$full as kube::Resource>::plural(dt)
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.0.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.0.metadata
            }
        }

        impl serde::Serialize for $lean {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                self.0.serialize(s)
            }
        }

        impl $lean {
            /// The watch's event about the object it carries.
            pub fn into_event(
                event: kube::runtime::watcher::Event<$lean>,
            ) -> kube::runtime::watcher::Event<$full> {
                use kube::runtime::watcher::Event;
                match event {
                    Event::Apply(o) => Event::Apply(o.0),
                    Event::Delete(o) => Event::Delete(o.0),
                    Event::Init => Event::Init,
                    Event::InitApply(o) => Event::InitApply(o.0),
                    Event::InitDone => Event::InitDone,
                }
            }
        }
    };
}
pub(crate) use lean_resource;

/// `ObjectMeta` but `managedFields`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct LeanMeta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl LeanMeta {
    /// The metadata as the process keeps it (`None`: the object had none).
    pub(crate) fn into_meta(meta: Option<LeanMeta>) -> ObjectMeta {
        let Some(m) = meta else {
            return ObjectMeta::default();
        };
        ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: None,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: m.self_link,
            uid: m.uid,
        }
    }
}

/// A Node with only what [`crate::node::NodeInfo`] reads: its metadata, whether it is cordoned,
/// its taints, its conditions and its boot id. Not its images (a real node lists every image it
/// holds, often hundreds), addresses, capacity, or the rest of its system info.
#[derive(Clone, Debug)]
pub struct LeanNode(pub Node);

lean_resource!(LeanNode, Node);

#[derive(Deserialize)]
struct NodeWire {
    metadata: Option<LeanMeta>,
    spec: Option<NodeSpecWire>,
    status: Option<NodeStatusWire>,
}

#[derive(Deserialize)]
struct NodeSpecWire {
    taints: Option<Vec<Taint>>,
    unschedulable: Option<bool>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeStatusWire {
    conditions: Option<Vec<NodeCondition>>,
    node_info: Option<SystemInfoWire>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SystemInfoWire {
    #[serde(rename = "bootID")]
    boot_id: Option<String>,
}

impl<'de> Deserialize<'de> for LeanNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let NodeWire {
            metadata,
            spec,
            status,
        } = NodeWire::deserialize(d)?;
        Ok(LeanNode(Node {
            metadata: LeanMeta::into_meta(metadata),
            spec: spec.map(|s| NodeSpec {
                taints: s.taints,
                unschedulable: s.unschedulable,
                ..Default::default()
            }),
            status: status.map(|s| NodeStatus {
                conditions: s.conditions,
                node_info: s.node_info.map(|i| NodeSystemInfo {
                    boot_id: i.boot_id.unwrap_or_default(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::NodeInfo;
    use kube::runtime::watcher::Event;
    use serde_json::{Value, json};

    const KEPT: &[&str] = &["slipway.dev/hold", "weave.works/kured-node-lock"];

    /// What the index keeps of a Node decoded whole.
    fn whole(v: &Value) -> NodeInfo {
        let node: Node = serde_json::from_value(v.clone()).expect("a Node");
        NodeInfo::from_node_keeping(&node, KEPT)
    }

    fn lean(v: &Value) -> NodeInfo {
        let node = serde_json::from_str::<LeanNode>(&v.to_string()).expect("a lean Node");
        NodeInfo::from_node_keeping(&node.0, KEPT)
    }

    /// A real node as the API server sends it: the fields the index reads, and the bulk it
    /// does not (images, managed fields, addresses, capacity, the rest of the system info).
    fn real_node() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "worker-1.example.com",
                "uid": "n-1",
                "resourceVersion": "812",
                "creationTimestamp": "2026-11-27T09:00:00Z",
                "labels": {
                    "kubernetes.io/hostname": "worker-1",
                    "kubernetes.io/os": "linux",
                    "plan.upgrade.cattle.io/k3s-agent": "4f1c0a"
                },
                "annotations": {
                    "slipway.dev/hold": "ops: disk swap",
                    "k3s.io/node-args": "[\"agent\",\"--node-label\",\"x\"]",
                    "node.alpha.kubernetes.io/ttl": "0"
                },
                "managedFields": [{
                    "manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                    "time": "2026-11-27T09:01:00Z", "fieldsType": "FieldsV1",
                    "subresource": "status",
                    "fieldsV1": {"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {}}}}
                }]
            },
            "spec": {
                "podCIDR": "10.42.1.0/24",
                "podCIDRs": ["10.42.1.0/24"],
                "providerID": "k3s://worker-1",
                "unschedulable": true,
                "taints": [
                    {"key": "medik8s.io/drain", "effect": "NoSchedule"},
                    {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
                     "timeAdded": "2026-11-27T09:30:00Z"}
                ]
            },
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.11"}],
                "allocatable": {"cpu": "2", "memory": "3961Mi", "pods": "110"},
                "capacity": {"cpu": "2", "memory": "4061Mi", "pods": "110"},
                "conditions": [
                    {"type": "MemoryPressure", "status": "False",
                     "lastHeartbeatTime": "2026-11-27T09:40:00Z",
                     "lastTransitionTime": "2026-11-27T09:00:00Z",
                     "reason": "KubeletHasSufficientMemory", "message": "ok"},
                    {"type": "KernelDeadlock", "status": "True",
                     "lastHeartbeatTime": "2026-11-27T09:40:00Z",
                     "lastTransitionTime": "2026-11-27T09:20:00Z",
                     "reason": "AUFSUmountHung", "message": "task hung"},
                    {"type": "Ready", "status": "True",
                     "lastHeartbeatTime": "2026-11-27T09:40:00Z",
                     "lastTransitionTime": "2026-11-27T09:05:00Z",
                     "reason": "KubeletReady", "message": "kubelet is posting ready status"}
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "images": [
                    {"names": ["docker.io/rancher/k3s-upgrade@sha256:aa", "docker.io/rancher/k3s-upgrade:v1.34.1-k3s1"],
                     "sizeBytes": 24000000},
                    {"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320000}
                ],
                "nodeInfo": {
                    "architecture": "amd64", "bootID": "b-7", "containerRuntimeVersion": "containerd://2.1.4",
                    "kernelVersion": "6.1.0-40-amd64", "kubeProxyVersion": "", "kubeletVersion": "v1.34.1",
                    "machineID": "m-1", "operatingSystem": "linux", "osImage": "Debian GNU/Linux 12",
                    "systemUUID": "s-1"
                },
                "volumesAttached": [{"name": "kubernetes.io/csi/x", "devicePath": ""}],
                "volumesInUse": ["kubernetes.io/csi/x"]
            }
        })
    }

    #[test]
    fn a_lean_node_is_the_node_the_index_kept() {
        let full = real_node();
        let info = lean(&full);
        assert_eq!(info, whole(&full));
        // The case is not vacuous: every field of the index has a value here.
        assert!(info.unschedulable && info.ready && info.in_maintenance);
        assert_eq!(info.boot_id, "b-7");
        assert_eq!(info.held_by(), Some("ops"));
        assert!(info.ready_since.is_some());
        assert_eq!(info.true_conditions.len(), 1);
        assert_eq!(info.labels.len(), 3);
    }

    #[test]
    fn nodes_missing_parts_decode_as_the_index_kept_them() {
        let full = real_node();
        let mut cases = vec![json!({"apiVersion": "v1", "kind": "Node", "metadata": {}})];
        for drop in ["spec", "status", "metadata"] {
            let mut v = full.clone();
            v.as_object_mut().expect("an object").remove(drop);
            cases.push(v);
        }
        for field in ["labels", "annotations", "managedFields"] {
            let mut v = full.clone();
            v["metadata"][field] = Value::Null;
            cases.push(v);
        }
        for (part, field) in [
            ("spec", "taints"),
            ("spec", "unschedulable"),
            ("status", "conditions"),
            ("status", "nodeInfo"),
            ("status", "images"),
        ] {
            let mut v = full.clone();
            v[part][field] = Value::Null;
            cases.push(v);
        }
        for case in cases {
            assert_eq!(lean(&case), whole(&case), "{case}");
        }
    }

    #[test]
    fn a_lean_node_keeps_no_bulk() {
        let node = serde_json::from_str::<LeanNode>(&real_node().to_string())
            .expect("a lean Node")
            .0;
        let status = node.status.expect("a status");
        assert!(node.metadata.managed_fields.is_none());
        assert!(status.images.is_none() && status.addresses.is_none());
        assert!(status.capacity.is_none() && status.allocatable.is_none());
        assert_eq!(status.node_info.expect("node info").kernel_version, "");
    }

    #[test]
    fn watch_events_carry_the_node() {
        let node = serde_json::from_str::<LeanNode>(&real_node().to_string())
            .expect("a lean Node")
            .0;
        let events = [
            Event::Apply(LeanNode(node.clone())),
            Event::Delete(LeanNode(node.clone())),
            Event::Init,
            Event::InitApply(LeanNode(node.clone())),
            Event::InitDone,
        ];
        let seen: Vec<Option<Node>> = (events.into_iter())
            .map(LeanNode::into_event)
            .map(|e| match e {
                Event::Apply(n) | Event::Delete(n) | Event::InitApply(n) => Some(n),
                Event::Init | Event::InitDone => None,
            })
            .collect();
        let n = Some(node);
        assert_eq!(seen, vec![n.clone(), n.clone(), None, n, None]);
    }
}
