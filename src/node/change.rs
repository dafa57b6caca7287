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
    /// Taints to add (replacing one of the same key and effect) or, with `None` as the value of
    /// their key, to remove, when the caller does not hold the node's taint list: the runtime
    /// reads the node and writes the edited list guarded by its resource version.
    pub taint_edits: BTreeMap<String, Option<Taint>>,
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
            && self.taint_edits.is_empty()
    }

    /// Adds `taint` to the node.
    pub fn add_taint(mut self, taint: Taint) -> Self {
        self.taint_edits.insert(taint.key.clone(), Some(taint));
        self
    }

    /// Removes the node's taints with this key.
    pub fn remove_taint(mut self, key: &str) -> Self {
        self.taint_edits.insert(key.to_string(), None);
        self
    }

    /// The node's taints with the edits made; `None` when they change nothing.
    pub fn edited_taints(&self, current: &[Taint]) -> Option<Vec<Taint>> {
        let mut taints: Vec<Taint> = current
            .iter()
            .filter(|t| match self.taint_edits.get(&t.key) {
                None => true,
                Some(None) => false,
                Some(Some(new)) => new.effect != t.effect,
            })
            .cloned()
            .collect();
        taints.extend(self.taint_edits.values().flatten().cloned());
        let same = taints.len() == current.len() && taints.iter().all(|t| current.contains(t));
        (!same).then_some(taints)
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
    fn taint_edits_add_replace_and_remove_by_key_and_keep_the_others() {
        let taint = |key: &str, value: &str| Taint {
            key: key.into(),
            value: Some(value.into()),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let current = vec![taint("admin", "x"), taint("q/p", "old")];
        let change = NodeChange::of("n1").add_taint(taint("q/p", "new"));
        assert_eq!(
            change.edited_taints(&current),
            Some(vec![taint("admin", "x"), taint("q/p", "new")])
        );
        assert_eq!(
            NodeChange::of("n1")
                .remove_taint("q/p")
                .edited_taints(&current),
            Some(vec![taint("admin", "x")])
        );
        assert_eq!(
            NodeChange::of("n1")
                .add_taint(taint("q/p", "old"))
                .edited_taints(&current),
            None,
            "nothing to write"
        );
        assert_eq!(
            NodeChange::of("n1")
                .remove_taint("gone")
                .edited_taints(&current),
            None
        );
        assert!(!NodeChange::of("n1").remove_taint("gone").is_empty());
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
