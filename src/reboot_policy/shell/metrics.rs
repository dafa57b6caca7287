//! The RebootPolicies' own metrics: each policy's nodes that want a reboot, that are rebooting,
//! and its nodes by phase.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::common::phase::PhaseTally;
use crate::runtime::metrics::phases::{Names, PhaseGauges};
use crate::runtime::metrics::{Families, count};

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct PolicyLabels {
    pub policy: String,
}

/// The RebootPolicies' families.
#[derive(Default)]
pub struct PolicyMetrics {
    wanting: Family<PolicyLabels, Gauge>,
    rebooting: Family<PolicyLabels, Gauge>,
    /// The policies that have gauges.
    policies: Mutex<BTreeSet<PolicyLabels>>,
    phases: PhaseGauges<PolicyLabels>,
}

impl Families for PolicyMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "reboot_wanting_nodes",
            "Nodes of a RebootPolicy that want a reboot and have not started it",
            self.wanting.clone(),
        );
        registry.register(
            "reboot_rebooting_nodes",
            "Nodes of a RebootPolicy from the start of their drain to the end of their health gate (failed ones included: they hold their slot)",
            self.rebooting.clone(),
        );
        self.phases.register(
            registry,
            &Names {
                nodes: "reboot_phase_nodes",
                nodes_help: "Nodes of a RebootPolicy's status.nodes by phase: Wanting, WaitingForWindow, \
                             Blocked, Draining, Rebooting, WaitingForHealth, Failed",
                since: "reboot_phase_since_timestamp",
                since_help: "The earliest status.nodes[].since of a RebootPolicy's nodes in a phase: \
                             when the node there longest entered it",
            },
        );
    }
}

impl PolicyMetrics {
    /// Sets a RebootPolicy's gauges.
    pub fn reboot_policy(&self, policy: &str, wanting: usize, rebooting: usize) {
        let key = PolicyLabels {
            policy: policy.to_string(),
        };
        self.wanting.get_or_create(&key).set(count(wanting));
        self.rebooting.get_or_create(&key).set(count(rebooting));
        self.policies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key);
    }

    /// Drops the gauges of RebootPolicies for which `exists` is false.
    pub fn retain_policies(&self, mut exists: impl FnMut(&str) -> bool) {
        let mut policies = self.policies.lock().unwrap_or_else(PoisonError::into_inner);
        policies.retain(|key| {
            if exists(&key.policy) {
                return true;
            }
            self.wanting.remove(key);
            self.rebooting.remove(key);
            false
        });
        self.phases.retain(|key| exists(&key.policy));
    }

    /// Sets the per-phase gauges of a RebootPolicy's nodes (`status.nodes`).
    pub fn reboot_phases(&self, policy: &str, phases: &[PhaseTally]) {
        let key = PolicyLabels {
            policy: policy.to_string(),
        };
        self.phases.set(&key, phases);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::metrics::Metrics;

    #[test]
    fn reboot_policies_have_gauges_until_they_are_gone() {
        let m = Metrics::new();
        let p = m.families::<PolicyMetrics>();
        p.reboot_policy("nightly", 3, 1);
        p.reboot_policy("gone", 1, 0);
        p.reboot_phases(
            "nightly",
            &[PhaseTally {
                phase: "Draining",
                nodes: 1,
                oldest_since: Some("2026-01-01T00:00:10Z".parse().expect("a time")),
            }],
        );
        p.retain_policies(|p| p == "nightly");
        let text = m.render();
        for line in [
            "slipway_reboot_wanting_nodes{policy=\"nightly\"} 3",
            "slipway_reboot_rebooting_nodes{policy=\"nightly\"} 1",
            "slipway_reboot_phase_nodes{policy=\"nightly\",phase=\"Draining\"} 1",
            "slipway_reboot_phase_since_timestamp_seconds{policy=\"nightly\",phase=\"Draining\"} 1767225610",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(!text.contains("policy=\"gone\""), "{text}");
        p.retain_policies(|_| false);
        assert!(!m.render().contains("policy=\"nightly\""), "{}", m.render());
    }
}
