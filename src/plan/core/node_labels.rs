//! What a Plan's decision reads of each node's labels, read once per decision: whether the Plan's
//! selector matches the node, whether it has a hostname, and the Plan's own labels on it. Every
//! rule of the decision (eligibility, quarantines, the upgraded count, "selects nothing") reads
//! these instead of looking the labels up again: at 100,000 nodes the repeated lookups were half
//! of a decision.

use super::PlanInput;
use crate::node::NodeInfo;
use crate::plan::api::labels;
use crate::plan::core::failure;

/// One node's labels as the Plan's decision reads them.
#[derive(Debug, Clone, Copy)]
pub(super) struct NodeLabels<'a> {
    pub(super) node: &'a NodeInfo,
    /// The Plan's `nodeSelector` matches the node.
    pub(super) selected: bool,
    /// The node's `kubernetes.io/hostname` label.
    pub(super) host: Option<&'a str>,
    /// `plan.upgrade.cattle.io/<plan>`: the hash the node was upgraded to, or `disabled`.
    pub(super) plan: Option<&'a str>,
    /// `quarantine.slipway.dev/<plan>`: the hash at which the Plan quarantined the node.
    pub(super) quarantine: Option<&'a str>,
}

impl<'a> NodeLabels<'a> {
    /// The node's hostname as SUC names it in `status.applying`: the label, else the node's name.
    pub(super) fn hostname(&self) -> &'a str {
        self.host.unwrap_or(&self.node.name)
    }

    /// SUC's eligibility ([`super::selection::Eligibility`]): selected, with a hostname, and the
    /// Plan's label neither `disabled` nor `hash`.
    pub(super) fn eligible(&self, hash: &str) -> bool {
        self.targeted() && self.plan != Some(hash)
    }

    /// Counted among the Plan's nodes: selected, with a hostname, not `disabled`.
    pub(super) fn targeted(&self) -> bool {
        self.selected && self.host.is_some() && self.plan != Some(labels::DISABLED)
    }
}

/// Reads the labels of every node of `input` (an invalid selector selects none; the decision
/// says why).
pub(super) fn read<'a>(input: &PlanInput<'a>) -> Vec<NodeLabels<'a>> {
    let plan = input.plan;
    let name = plan.metadata.name.as_deref().unwrap_or_default();
    let selector = super::settings::selector(&plan.spec);
    let plan_label = labels::plan_node_label(name);
    let quarantine = failure::quarantine_key(name);
    input
        .nodes
        .iter()
        .map(|&node| NodeLabels {
            node,
            selected: selector.matches(&node.labels),
            host: node.labels.get(labels::HOSTNAME).map(String::as_str),
            plan: node.labels.get(&plan_label).map(String::as_str),
            quarantine: failure::quarantined_by(node, &quarantine),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    use super::*;
    use crate::plan::core::selection::Eligibility;

    /// `eligible` is SUC's eligibility, on every combination of the labels it reads.
    #[test]
    fn eligible_agrees_with_suc_s_selector() {
        let selector = LabelSelector {
            match_labels: Some(BTreeMap::from([("pool".to_string(), "a".to_string())])),
            ..Default::default()
        };
        let parsed =
            crate::common::selector::Selector::from_label_selector(Some(&selector)).expect("valid");
        for hash in ["h1", ""] {
            let rule = Eligibility::new("p", Some(&selector), hash, &[]).expect("valid");
            for pool in [None, Some("a"), Some("b")] {
                for host in [None, Some("n")] {
                    for value in [None, Some("h1"), Some("h0"), Some("disabled"), Some("")] {
                        let mut node = NodeInfo::default();
                        let pairs = [
                            ("pool", pool),
                            (labels::HOSTNAME, host),
                            ("plan.upgrade.cattle.io/p", value),
                        ];
                        for (k, v) in pairs {
                            if let Some(v) = v {
                                node.labels.insert(k.to_string(), v.to_string());
                            }
                        }
                        let read = NodeLabels {
                            node: &node,
                            selected: parsed.matches(&node.labels),
                            host,
                            plan: value,
                            quarantine: None,
                        };
                        assert_eq!(
                            read.eligible(hash),
                            rule.admits(&node),
                            "{hash:?} {pool:?} {host:?} {value:?}"
                        );
                    }
                }
            }
        }
    }
}
