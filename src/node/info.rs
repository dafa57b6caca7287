//! The part of a Node that slipway decides on. The controller caches Nodes pruned to this.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;

use super::holders::MAINTENANCE_TAINT;
use crate::common::labels;

/// A node as the decision functions see it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeInfo {
    pub name: String,
    pub uid: String,
    /// Its `resourceVersion`, an etcd revision (`None` if it is not a number): which of two
    /// copies of the node is newer (the watch's, or the answer to this process's own patch).
    pub revision: Option<u64>,
    pub labels: BTreeMap<String, String>,
    /// `spec.unschedulable`: cordoned.
    pub unschedulable: bool,
    /// The `Ready` condition is `True`.
    pub ready: bool,
    /// When the `Ready` condition last turned `True` (its `lastTransitionTime`), while it is.
    pub ready_since: Option<jiff::Timestamp>,
    /// `status.nodeInfo.bootID`; it changes when the node reboots.
    pub boot_id: String,
    /// The node's annotations whose keys the process keeps (see [`NodeInfo::from_node_keeping`]).
    pub annotations: BTreeMap<String, String>,
    /// The node carries the `medik8s.io/drain` taint: it is in maintenance (slipway's or
    /// node-maintenance-operator's), and no Plan starts it.
    pub in_maintenance: bool,
    /// It carries the taint of the nodes operations take next ([`super::next::NEXT_TAINT`]).
    pub next_up: bool,
    /// Conditions other than Ready that are `True` (kubelet's pressure conditions are `False`
    /// on a healthy node, so this is usually empty), with their `lastTransitionTime`: Node
    /// Problem Detector's signals for reboot policies.
    pub true_conditions: BTreeMap<String, String>,
}

impl NodeInfo {
    /// Who holds the node by the `slipway.dev/hold` annotation (`<who>` or `<who>: <why>`).
    pub fn held_by(&self) -> Option<&str> {
        let value = self.annotations.get(super::budget::HOLD_ANNOTATION)?;
        let who = value
            .split_once(':')
            .map_or(value.as_str(), |(who, _)| who)
            .trim();
        Some(if who.is_empty() { "someone" } else { who })
    }

    pub fn from_node(node: &Node) -> Self {
        Self::from_node_keeping(node, &[])
    }

    /// Like [`NodeInfo::from_node`], keeping the annotations named in `kept` (a short list: node
    /// operations that read a node's own signals, such as a reboot request, name them here).
    pub fn from_node_keeping(node: &Node, kept: &[&str]) -> Self {
        let status = node.status.as_ref();
        NodeInfo {
            name: node.metadata.name.clone().unwrap_or_default(),
            uid: node.metadata.uid.clone().unwrap_or_default(),
            revision: (node.metadata.resource_version.as_deref()).and_then(|r| r.parse().ok()),
            labels: node.metadata.labels.clone().unwrap_or_default(),
            unschedulable: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
            ready: status
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True"),
            ready_since: status
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .find(|c| c.type_ == "Ready" && c.status == "True")
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0),
            boot_id: status
                .and_then(|s| s.node_info.as_ref())
                .map(|i| i.boot_id.clone())
                .unwrap_or_default(),
            annotations: node
                .metadata
                .annotations
                .iter()
                .flatten()
                .filter(|(k, _)| kept.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            true_conditions: status
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .filter(|c| c.type_ != "Ready" && c.status == "True")
                .map(|c| {
                    let since = c
                        .last_transition_time
                        .as_ref()
                        .map(|t| t.0.to_string())
                        .unwrap_or_default();
                    (c.type_.clone(), since)
                })
                .collect(),
            in_maintenance: node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .any(|t| t.key == MAINTENANCE_TAINT),
            next_up: node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .any(|t| t.key == super::next::NEXT_TAINT),
        }
    }

    /// The `kubernetes.io/hostname` label, or the node name without one. Jobs are pinned to it and
    /// `status.applying` lists it.
    pub fn hostname(&self) -> &str {
        self.labels
            .get(labels::HOSTNAME)
            .map(String::as_str)
            .unwrap_or(&self.name)
    }

    pub fn is_windows(&self) -> bool {
        self.labels
            .get(labels::OS)
            .is_some_and(|os| os == "windows")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo};
    use kube::api::ObjectMeta;

    fn node() -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("node-1.example.com".into()),
                uid: Some("uid-1".into()),
                labels: Some(
                    [
                        (labels::HOSTNAME.to_string(), "node-1".to_string()),
                        (labels::OS.to_string(), "linux".to_string()),
                    ]
                    .into(),
                ),
                annotations: Some([("big".to_string(), "x".repeat(1000))].into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                unschedulable: Some(true),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(vec![
                    NodeCondition {
                        type_: "MemoryPressure".into(),
                        status: "False".into(),
                        ..Default::default()
                    },
                    NodeCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        message: Some("kubelet is posting ready status".into()),
                        ..Default::default()
                    },
                ]),
                node_info: Some(NodeSystemInfo {
                    boot_id: "boot-1".into(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn reads_what_decisions_need() {
        let info = NodeInfo::from_node(&node());
        assert_eq!(info.name, "node-1.example.com");
        assert_eq!(info.hostname(), "node-1");
        assert!(info.unschedulable && info.ready && !info.is_windows());
        assert_eq!(info.boot_id, "boot-1");
    }

    #[test]
    fn hostname_falls_back_to_the_name() {
        let info = NodeInfo {
            name: "n".into(),
            ..Default::default()
        };
        assert_eq!(info.hostname(), "n");
    }

    #[test]
    fn keeps_only_the_named_annotations() {
        let info = NodeInfo::from_node_keeping(&node(), &["wanted"]);
        assert!(info.annotations.is_empty());
        let mut n = node();
        n.metadata
            .annotations
            .get_or_insert_default()
            .insert("wanted".into(), "yes".into());
        let info = NodeInfo::from_node_keeping(&n, &["wanted"]);
        assert_eq!(info.annotations.len(), 1);
        assert_eq!(info.annotations["wanted"], "yes");
    }
}
