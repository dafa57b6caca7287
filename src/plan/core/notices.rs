//! The steps of a Plan's nodes, told to notifications only (quiet events: a Plan publishes SUC's
//! Kubernetes Events, and its nodes' steps are in its status). A node's start and its reboot are
//! read from the status before and after the decision, so each is told once, by the decision
//! whose status write recorded it; its end is told with the labels that mark it done.

use std::collections::BTreeMap;

use crate::common::decision::Event;
use crate::plan::api::{NodePhase, PlanStatus};

pub use crate::node::notify::quiet::{NODE_DONE, NODE_REBOOTING, NODE_STARTED};

/// The quiet events of the nodes that started or began their reboot from `old` to `new`.
pub fn of(plan: &str, old: &PlanStatus, new: &PlanStatus) -> Vec<Event> {
    let before: BTreeMap<&str, NodePhase> = (old.nodes.iter())
        .map(|n| (n.name.as_str(), n.phase))
        .collect();
    (new.nodes.iter())
        .filter(|n| before.get(n.name.as_str()) != Some(&n.phase))
        .filter_map(|n| {
            let node = n.name.as_str();
            let event = match n.phase {
                NodePhase::Upgrading => {
                    Event::normal(NODE_STARTED, format!("Plan {plan} started on node {node}"))
                }
                NodePhase::Rebooting => Event::normal(
                    NODE_REBOOTING,
                    format!("Node {node} reboots after its upgrade by Plan {plan}"),
                ),
                _ => return None,
            };
            Some(event.on(node).quiet())
        })
        .collect()
}

/// The quiet event of a node marked done.
pub fn done(plan: &str, node: &str) -> Event {
    Event::normal(NODE_DONE, format!("Plan {plan} is done on node {node}"))
        .on(node)
        .quiet()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::api::NodeProgress;

    fn status(nodes: &[(&str, NodePhase)]) -> PlanStatus {
        PlanStatus {
            nodes: (nodes.iter())
                .map(|(name, phase)| NodeProgress {
                    name: name.to_string(),
                    phase: *phase,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_start_and_a_reboot_are_told_once_quietly_and_nothing_else() {
        let old = status(&[
            ("a", NodePhase::Upgrading),
            ("b", NodePhase::Upgrading),
            ("c", NodePhase::Pending),
            ("d", NodePhase::Retrying),
        ]);
        let new = status(&[
            ("a", NodePhase::Upgrading),
            ("b", NodePhase::Rebooting),
            ("c", NodePhase::Upgrading),
            ("d", NodePhase::Upgrading),
            ("e", NodePhase::Upgrading),
            ("f", NodePhase::Failed),
        ]);
        let told: Vec<(&str, String, Option<String>, bool)> = of("k3s", &old, &new)
            .into_iter()
            .map(|e| (e.reason, e.message, e.node, e.quiet))
            .collect();
        let node = |n: &str| Some(n.to_string());
        assert_eq!(
            told,
            [
                (
                    NODE_REBOOTING,
                    "Node b reboots after its upgrade by Plan k3s".to_string(),
                    node("b"),
                    true
                ),
                (
                    NODE_STARTED,
                    "Plan k3s started on node c".into(),
                    node("c"),
                    true
                ),
                (
                    NODE_STARTED,
                    "Plan k3s started on node d".into(),
                    node("d"),
                    true
                ),
                (
                    NODE_STARTED,
                    "Plan k3s started on node e".into(),
                    node("e"),
                    true
                ),
            ]
        );
        assert!(
            of("k3s", &new, &new).is_empty(),
            "a status written again tells nothing"
        );
        let d = done("k3s", "a");
        assert!(d.quiet && d.node.as_deref() == Some("a") && d.reason == NODE_DONE);
    }
}
