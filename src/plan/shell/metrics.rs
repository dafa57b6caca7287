//! The Plan's own metrics: where each Plan's rollout stands (complete, its nodes by state and by
//! phase, the nodes it targets), and the requests to its channels.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::common::phase::PhaseTally;
use crate::runtime::metrics::phases::{Names, PhaseGauges};
use crate::runtime::metrics::{Families, count};

/// A Plan's gauges: whether it is complete, and how many of its nodes are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanGauges {
    pub complete: bool,
    pub applying: usize,
    pub failed: usize,
    /// Nodes that carry the Plan's latest hash.
    pub upgraded: usize,
    /// Nodes the Plan's selector matches that have a hostname and are not `disabled`.
    pub targeted: usize,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct PlanLabels {
    pub namespace: String,
    pub plan: String,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelValue)]
#[allow(non_camel_case_types)] // label values are lower case
pub enum NodeState {
    applying,
    failed,
    complete,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct PlanNodeLabels {
    pub namespace: String,
    pub plan: String,
    pub state: NodeState,
}

/// The Plans' families.
pub struct PlanMetrics {
    complete: Family<PlanLabels, Gauge>,
    nodes: Family<PlanNodeLabels, Gauge>,
    targeted: Family<PlanLabels, Gauge>,
    phases: PhaseGauges<PlanLabels>,
    /// The Plans that have gauges.
    plans: Mutex<BTreeSet<PlanLabels>>,
    channel_requests: Counter,
    channel_errors: Counter,
    channel_cache_hits: Counter,
    channel_duration: Histogram,
}

impl Default for PlanMetrics {
    fn default() -> Self {
        PlanMetrics {
            complete: Family::default(),
            nodes: Family::default(),
            targeted: Family::default(),
            phases: PhaseGauges::default(),
            plans: Mutex::default(),
            channel_requests: Counter::default(),
            channel_errors: Counter::default(),
            channel_cache_hits: Counter::default(),
            // 5 ms .. ~41 s
            channel_duration: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
        }
    }
}

impl Families for PlanMetrics {
    fn register(&self, registry: &mut Registry) {
        self.register_gauges(registry);
        self.register_channels(registry);
    }
}

impl PlanMetrics {
    /// Sets a Plan's gauges.
    pub fn plan(&self, namespace: &str, plan: &str, s: PlanGauges) {
        let key = PlanLabels {
            namespace: namespace.to_string(),
            plan: plan.to_string(),
        };
        self.complete.get_or_create(&key).set(i64::from(s.complete));
        // Disjoint, so that a sum over states counts each node once.
        for (state, n) in [
            (NodeState::applying, s.applying.saturating_sub(s.failed)),
            (NodeState::failed, s.failed),
            (NodeState::complete, s.upgraded),
        ] {
            self.nodes
                .get_or_create(&node_key(&key, state))
                .set(count(n));
        }
        self.targeted.get_or_create(&key).set(count(s.targeted));
        self.plans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key);
    }

    /// Drops the gauges of Plans for which `exists` is false.
    pub fn retain_plans(&self, mut exists: impl FnMut(&str, &str) -> bool) {
        let mut plans = self.plans.lock().unwrap_or_else(PoisonError::into_inner);
        plans.retain(|key| {
            if exists(&key.namespace, &key.plan) {
                return true;
            }
            self.complete.remove(key);
            self.targeted.remove(key);
            for state in [NodeState::applying, NodeState::failed, NodeState::complete] {
                self.nodes.remove(&node_key(key, state));
            }
            false
        });
        self.phases.retain(|key| exists(&key.namespace, &key.plan));
    }

    /// Sets the per-phase gauges of a Plan's nodes (`status.nodes`).
    pub fn plan_phases(&self, namespace: &str, plan: &str, phases: &[PhaseTally]) {
        let key = PlanLabels {
            namespace: namespace.to_string(),
            plan: plan.to_string(),
        };
        self.phases.set(&key, phases);
    }

    /// A channel request was made: how long it took and whether it gave a version.
    pub fn channel_request(&self, took: Duration, ok: bool) {
        self.channel_requests.inc();
        self.channel_duration.observe(took.as_secs_f64());
        if !ok {
            self.channel_errors.inc();
        }
    }

    pub fn channel_cache_hit(&self) {
        self.channel_cache_hits.inc();
    }

    /// Where each Plan's rollout stands: complete, nodes by state and by phase, nodes targeted.
    fn register_gauges(&self, registry: &mut Registry) {
        registry.register(
            "plan_complete",
            "1 when the Plan's Complete condition is True, else 0",
            self.complete.clone(),
        );
        registry.register(
            "plan_nodes",
            "Nodes of a Plan by state, each node in one state at most: applying = nodes of \
             status.applying (holding a concurrency slot) that have not failed; failed = status.nodes \
             in phase Failed (holding their slot too); complete = nodes matched by spec.nodeSelector \
             whose plan.upgrade.cattle.io/<plan> label equals status.latestHash",
            self.nodes.clone(),
        );
        registry.register(
            "plan_targeted_nodes",
            "Nodes a Plan's spec.nodeSelector matches that have a hostname and are not disabled: \
             the whole of its rollout (progress = plan_nodes{state=\"complete\"} / this)",
            self.targeted.clone(),
        );
        self.phases.register(
            registry,
            &Names {
                nodes: "plan_phase_nodes",
                nodes_help: "Nodes of a Plan's status.nodes (the nodes it works on) by phase: Pending, \
                             Upgrading, Rebooting, WaitingForHealth, Waiting, Failed",
                since: "plan_phase_since_timestamp",
                since_help: "The earliest status.nodes[].since of a Plan's nodes in a phase: when the \
                             node there longest entered it",
            },
        );
    }

    /// Channel requests: made, failed, answered from the cache, how long they took.
    fn register_channels(&self, registry: &mut Registry) {
        registry.register(
            "channel_requests",
            "Requests made to channel servers (answers served from the cache are not counted)",
            self.channel_requests.clone(),
        );
        registry.register(
            "channel_request_errors",
            "Channel requests that gave no version",
            self.channel_errors.clone(),
        );
        registry.register(
            "channel_cache_hits",
            "Channel resolutions answered from the cache",
            self.channel_cache_hits.clone(),
        );
        registry.register_with_unit(
            "channel_request_duration",
            "Time a channel request took",
            Unit::Seconds,
            self.channel_duration.clone(),
        );
    }
}

fn node_key(key: &PlanLabels, state: NodeState) -> PlanNodeLabels {
    PlanNodeLabels {
        namespace: key.namespace.clone(),
        plan: key.plan.clone(),
        state,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::metrics::Metrics;

    fn has(text: &str, line: &str) -> bool {
        text.lines().any(|l| l == line)
    }

    fn tally(phase: &'static str, nodes: usize, since: Option<&str>) -> PhaseTally {
        PhaseTally {
            phase,
            nodes,
            oldest_since: since.map(|s| s.parse().expect("a time")),
        }
    }

    #[test]
    fn plans_have_gauges_and_channels_their_counts() {
        let m = Metrics::new();
        let p = m.families::<PlanMetrics>();
        p.channel_request(Duration::from_millis(40), true);
        p.channel_request(Duration::from_millis(40), false);
        p.channel_cache_hit();
        p.plan(
            "ns",
            "p",
            PlanGauges {
                complete: true,
                upgraded: 5,
                ..Default::default()
            },
        );
        // Three nodes hold a slot, one of them failed: no node is counted in two states.
        p.plan(
            "ns",
            "q",
            PlanGauges {
                applying: 3,
                failed: 1,
                ..Default::default()
            },
        );
        let text = m.render();
        for line in [
            "slipway_plan_nodes{namespace=\"ns\",plan=\"q\",state=\"applying\"} 2",
            "slipway_plan_nodes{namespace=\"ns\",plan=\"q\",state=\"failed\"} 1",
            "slipway_plan_complete{namespace=\"ns\",plan=\"p\"} 1",
            "slipway_plan_nodes{namespace=\"ns\",plan=\"p\",state=\"complete\"} 5",
            "slipway_plan_nodes{namespace=\"ns\",plan=\"p\",state=\"applying\"} 0",
            "slipway_plan_nodes{namespace=\"ns\",plan=\"p\",state=\"failed\"} 0",
            "slipway_channel_requests_total 2",
            "slipway_channel_request_errors_total 1",
            "slipway_channel_cache_hits_total 1",
            "slipway_channel_request_duration_seconds_count 2",
        ] {
            assert!(has(&text, line), "missing {line:?} in\n{text}");
        }
    }

    #[test]
    fn phases_show_nodes_and_their_oldest_since_and_go_with_their_plan() {
        let m = Metrics::new();
        let p = m.families::<PlanMetrics>();
        p.plan(
            "ns",
            "p",
            PlanGauges {
                targeted: 7,
                ..Default::default()
            },
        );
        p.plan_phases(
            "ns",
            "p",
            &[
                tally("Upgrading", 2, Some("2026-01-01T00:00:00Z")),
                tally("Failed", 1, None),
            ],
        );
        let text = m.render();
        for line in [
            "slipway_plan_targeted_nodes{namespace=\"ns\",plan=\"p\"} 7",
            "slipway_plan_phase_nodes{namespace=\"ns\",plan=\"p\",phase=\"Upgrading\"} 2",
            "slipway_plan_phase_nodes{namespace=\"ns\",plan=\"p\",phase=\"Failed\"} 1",
            "slipway_plan_phase_since_timestamp_seconds{namespace=\"ns\",plan=\"p\",phase=\"Upgrading\"} 1767225600",
            "# UNIT slipway_plan_phase_since_timestamp_seconds seconds",
        ] {
            assert!(has(&text, line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("phase=\"Failed\"} 0"), "{text}");
        assert!(
            !text.contains("since_timestamp_seconds{namespace=\"ns\",plan=\"p\",phase=\"Failed\"}"),
            "no since without a time: {text}"
        );
        // A phase left loses its series; a gone Plan loses all of its own.
        p.plan_phases("ns", "p", &[tally("Rebooting", 2, None)]);
        let text = m.render();
        assert!(
            !text.contains("phase=\"Upgrading\"") && !text.contains("phase=\"Failed\""),
            "{text}"
        );
        assert!(text.contains("phase=\"Rebooting\"} 2"), "{text}");
        p.retain_plans(|_, _| false);
        assert!(!m.render().contains("plan="), "{}", m.render());
    }

    #[test]
    fn gone_plans_lose_their_gauges() {
        let m = Metrics::new();
        let p = m.families::<PlanMetrics>();
        p.plan("ns", "keep", PlanGauges::default());
        p.plan("ns", "gone", PlanGauges::default());
        p.retain_plans(|_, plan| plan == "keep");
        let text = m.render();
        assert!(text.contains("plan=\"keep\""), "{text}");
        assert!(!text.contains("plan=\"gone\""), "{text}");
    }
}
