//! The NodeMaintenances' own metrics: each maintenance's phase, and since when.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::registry::Registry;

use crate::common::phase::PhaseTally;
use crate::runtime::metrics::Families;
use crate::runtime::metrics::phases::{Names, PhaseGauges};

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct MaintenanceLabels {
    pub nodemaintenance: String,
    pub node: String,
}

/// The NodeMaintenances' families.
#[derive(Default)]
pub struct MaintenanceMetrics {
    phases: PhaseGauges<MaintenanceLabels>,
}

impl Families for MaintenanceMetrics {
    fn register(&self, registry: &mut Registry) {
        self.phases.register(
            registry,
            &Names {
                nodes: "nodemaintenance_phase",
                nodes_help: "1 for a NodeMaintenance's status.phase (Running, Succeeded, Failed)",
                since: "nodemaintenance_phase_since_timestamp",
                since_help: "The last transition of a NodeMaintenance's Drained condition: for \
                             Running, since when the node has not been drained (its start); for \
                             Succeeded, since when it is",
            },
        );
    }
}

impl MaintenanceMetrics {
    /// Sets a NodeMaintenance's phase (`None`: not decided yet, or being deleted: no series).
    pub fn maintenance(&self, name: &str, node: &str, phase: Option<PhaseTally>) {
        let key = MaintenanceLabels {
            nodemaintenance: name.to_string(),
            node: node.to_string(),
        };
        self.phases.set(&key, phase.as_slice());
    }

    /// Drops the gauges of NodeMaintenances for which `exists` is false.
    pub fn retain_maintenances(&self, mut exists: impl FnMut(&str) -> bool) {
        self.phases.retain(|key| exists(&key.nodemaintenance));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::metrics::Metrics;

    fn tally(phase: &'static str, since: Option<&str>) -> Option<PhaseTally> {
        Some(PhaseTally {
            phase,
            nodes: 1,
            oldest_since: since.map(|s| s.parse().expect("a time")),
        })
    }

    #[test]
    fn a_maintenance_shows_its_phase_until_it_is_gone() {
        let m = Metrics::new();
        let nm = m.families::<MaintenanceMetrics>();
        nm.maintenance("nm", "n1", tally("Running", Some("2026-01-01T00:01:00Z")));
        let text = m.render();
        for line in [
            "slipway_nodemaintenance_phase{nodemaintenance=\"nm\",node=\"n1\",phase=\"Running\"} 1",
            "slipway_nodemaintenance_phase_since_timestamp_seconds{nodemaintenance=\"nm\",node=\"n1\",phase=\"Running\"} 1767225660",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        nm.maintenance("nm", "n1", tally("Succeeded", None));
        let text = m.render();
        assert!(
            !text.contains("phase=\"Running\"") && text.contains("phase=\"Succeeded\""),
            "{text}"
        );
        nm.retain_maintenances(|_| false);
        assert!(!m.render().contains("nodemaintenance="), "{}", m.render());
    }
}
