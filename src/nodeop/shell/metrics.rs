//! The NodeOps' own metrics: each NodeOp's nodes by phase, and since when.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::registry::Registry;

use crate::common::phase::PhaseTally;
use crate::runtime::metrics::Families;
use crate::runtime::metrics::phases::{Names, PhaseGauges};

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct NodeOpLabels {
    pub namespace: String,
    pub nodeop: String,
}

/// The NodeOps' families.
#[derive(Default)]
pub struct NodeOpMetrics {
    phases: PhaseGauges<NodeOpLabels>,
}

impl Families for NodeOpMetrics {
    fn register(&self, registry: &mut Registry) {
        self.phases.register(
            registry,
            &Names {
                nodes: "nodeop_phase_nodes",
                nodes_help: "Nodes of a NodeOp's status.nodeStatuses by phase: Preflight, Pending, \
                             Running, Completed, Failed",
                since: "nodeop_phase_since_timestamp",
                since_help: "The earliest time a NodeOp's node in a phase entered it (its since, \
                             else its lastUpdated)",
            },
        );
    }
}

impl NodeOpMetrics {
    /// Sets the per-phase gauges of a NodeOp's nodes (`status.nodeStatuses`).
    pub fn nodeop_phases(&self, namespace: &str, nodeop: &str, phases: &[PhaseTally]) {
        let key = NodeOpLabels {
            namespace: namespace.to_string(),
            nodeop: nodeop.to_string(),
        };
        self.phases.set(&key, phases);
    }

    /// Drops the gauges of NodeOps for which `exists` is false.
    pub fn retain_nodeops(&self, mut exists: impl FnMut(&str, &str) -> bool) {
        self.phases
            .retain(|key| exists(&key.namespace, &key.nodeop));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::metrics::Metrics;

    fn tally(phase: &'static str, nodes: usize, since: Option<&str>) -> PhaseTally {
        PhaseTally {
            phase,
            nodes,
            oldest_since: since.map(|s| s.parse().expect("a time")),
        }
    }

    #[test]
    fn nodeops_have_phase_gauges_until_they_are_gone() {
        let m = Metrics::new();
        let n = m.families::<NodeOpMetrics>();
        n.nodeop_phases(
            "default",
            "upgrade",
            &[
                tally("Running", 2, Some("2026-01-01T00:00:00Z")),
                tally("Completed", 1, None),
            ],
        );
        n.nodeop_phases("other", "upgrade", &[tally("Failed", 1, None)]);
        let text = m.render();
        for line in [
            "slipway_nodeop_phase_nodes{namespace=\"default\",nodeop=\"upgrade\",phase=\"Running\"} 2",
            "slipway_nodeop_phase_nodes{namespace=\"default\",nodeop=\"upgrade\",phase=\"Completed\"} 1",
            "slipway_nodeop_phase_since_timestamp_seconds{namespace=\"default\",nodeop=\"upgrade\",phase=\"Running\"} 1767225600",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        n.retain_nodeops(|ns, _| ns == "other");
        let text = m.render();
        assert!(!text.contains("namespace=\"default\",nodeop="), "{text}");
        assert!(
            text.contains("namespace=\"other\",nodeop=\"upgrade\""),
            "{text}"
        );
    }
}
