//! A change to a Node, as every operation asks for one: labels, annotations, the cordon, and the
//! taints. The runtime applies it as one merge patch.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;

use super::NodeInfo;

/// What to change on one node. `None` values remove a label or an annotation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeChange {
    pub node: String,
    pub labels: BTreeMap<String, Option<String>>,
    pub annotations: BTreeMap<String, Option<String>>,
    /// `Some(true)` cordons, `Some(false)` uncordons.
    pub unschedulable: Option<bool>,
    /// The node's whole taint list, when it changes. A list is replaced whole by a merge patch, so
    /// the patch then carries `resource_version`: a taint someone added since the node was read is
    /// not overwritten (the patch is refused and the reconcile runs again).
    pub taints: Option<Vec<Taint>>,
    pub resource_version: Option<String>,
}

impl NodeChange {
    pub fn of(node: &str) -> NodeChange {
        NodeChange {
            node: node.to_string(),
            ..Default::default()
        }
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
            && self.annotations.is_empty()
            && self.unschedulable.is_none()
            && self.taints.is_none()
    }

    pub fn label(mut self, key: &str, value: Option<&str>) -> Self {
        self.labels
            .insert(key.to_string(), value.map(str::to_string));
        self
    }

    pub fn annotation(mut self, key: &str, value: Option<&str>) -> Self {
        self.annotations
            .insert(key.to_string(), value.map(str::to_string));
        self
    }

    pub fn cordon(mut self, on: bool) -> Self {
        self.unschedulable = Some(on);
        self
    }

    /// The merge patch that makes the change.
    pub fn patch(&self) -> serde_json::Value {
        let mut body = serde_json::json!({});
        if !self.labels.is_empty() {
            body["metadata"]["labels"] = serde_json::json!(self.labels);
        }
        if !self.annotations.is_empty() {
            body["metadata"]["annotations"] = serde_json::json!(self.annotations);
        }
        if let Some(on) = self.unschedulable {
            // null removes the field: an uncordoned node looks as if it had never been cordoned.
            body["spec"]["unschedulable"] = if on {
                serde_json::json!(true)
            } else {
                serde_json::Value::Null
            };
        }
        if let Some(taints) = &self.taints {
            body["spec"]["taints"] = serde_json::json!(taints);
            if let Some(rv) = &self.resource_version {
                body["metadata"]["resourceVersion"] = serde_json::json!(rv);
            }
        }
        body
    }

    /// The node as it is once the change is applied (for what the caches have not shown yet).
    pub fn apply_to(&self, node: &mut NodeInfo) {
        for (k, v) in &self.labels {
            match v {
                Some(v) => node.labels.insert(k.clone(), v.clone()),
                None => node.labels.remove(k),
            };
        }
        for (k, v) in &self.annotations {
            match v {
                Some(v) => node.annotations.insert(k.clone(), v.clone()),
                None => node.annotations.remove(k),
            };
        }
        if let Some(on) = self.unschedulable {
            node.unschedulable = on;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_merge_patch_for_labels_annotations_and_the_cordon() {
        let change = NodeChange::of("n1")
            .label("plan.upgrade.cattle.io/k3s", Some("h1"))
            .annotation("slipway.dev/cordoned-by", None)
            .cordon(false);
        assert_eq!(
            change.patch(),
            serde_json::json!({
                "metadata": {
                    "labels": {"plan.upgrade.cattle.io/k3s": "h1"},
                    "annotations": {"slipway.dev/cordoned-by": null},
                },
                "spec": {"unschedulable": null},
            })
        );
        assert!(NodeChange::of("n1").is_empty());
        assert_eq!(NodeChange::of("n1").patch(), serde_json::json!({}));
    }

    #[test]
    fn a_new_taint_list_is_guarded_by_the_resource_version() {
        let change = NodeChange {
            taints: Some(vec![Taint {
                key: "medik8s.io/drain".into(),
                effect: "NoSchedule".into(),
                ..Default::default()
            }]),
            resource_version: Some("42".into()),
            ..NodeChange::of("n1").cordon(true)
        };
        let body = change.patch();
        assert_eq!(body["metadata"]["resourceVersion"], "42");
        assert_eq!(body["spec"]["unschedulable"], true);
        assert_eq!(body["spec"]["taints"][0]["key"], "medik8s.io/drain");
    }

    #[test]
    fn applied_to_the_cached_node() {
        let mut node = NodeInfo {
            name: "n1".into(),
            unschedulable: true,
            annotations: [("a".to_string(), "1".to_string())].into(),
            ..Default::default()
        };
        NodeChange::of("n1")
            .label("done", Some("h"))
            .annotation("a", None)
            .cordon(false)
            .apply_to(&mut node);
        assert_eq!(node.labels.get("done").map(String::as_str), Some("h"));
        assert!(node.annotations.is_empty() && !node.unschedulable);
    }
}
