//! Prometheus metrics (prometheus-client, OpenMetrics text), served on `/metrics`.
//!
//! Every family is prefixed `slipway_`. Per-Plan gauges are set after each successful reconcile
//! from the decision that was applied, and removed when the Plan is gone.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::api::{Plan, labels};
use crate::conditions::{self as cond, COMPLETE, TRUE};
use crate::node::NodeInfo;
use crate::rollout::{Rollout, phase};
use crate::selection;

/// The content type of [`Metrics::render`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub category: String,
}

/// What the per-Plan gauges show after one decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlanSnapshot {
    /// `Complete` condition is `True`.
    pub complete: bool,
    /// `status.applying.len()`.
    pub applying: usize,
    /// Entries of `status.nodes` in phase `Failed`.
    pub failed: usize,
    /// Nodes matched by `spec.nodeSelector` whose `plan.upgrade.cattle.io/<plan>` label equals
    /// `status.latestHash`, counting the labels this decision sets.
    pub upgraded: usize,
}

impl PlanSnapshot {
    /// Reads the snapshot from a decision, the Plan it was made for and the nodes it saw.
    pub fn from_decision(plan: &Plan, nodes: &[NodeInfo], decision: &Rollout) -> PlanSnapshot {
        let status = &decision.status;
        let name = plan.metadata.name.as_deref().unwrap_or_default();
        let plan_label = labels::plan_node_label(name);
        let upgraded = match status.latest_hash.as_deref().filter(|h| !h.is_empty()) {
            None => 0,
            Some(hash) => nodes
                .iter()
                .filter(|n| {
                    selection::matches(plan.spec.node_selector.as_ref(), &n.labels).unwrap_or(false)
                })
                .filter(|n| {
                    let patched = decision
                        .node_patches
                        .iter()
                        .filter(|p| p.node == n.name)
                        .find_map(|p| p.labels.get(&plan_label));
                    patched
                        .or_else(|| n.labels.get(&plan_label))
                        .map(String::as_str)
                        == Some(hash)
                })
                .count(),
        };
        PlanSnapshot {
            complete: cond::is(status, COMPLETE, TRUE),
            applying: status.applying.len(),
            failed: status
                .nodes
                .iter()
                .filter(|p| p.phase == phase::FAILED)
                .count(),
            upgraded,
        }
    }
}

/// All of slipway's metrics.
pub struct Metrics {
    registry: Registry,
    reconciles: Counter,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: Histogram,
    plan_complete: Family<PlanLabels, Gauge>,
    plan_nodes: Family<PlanNodeLabels, Gauge>,
    jobs_created: Counter,
    jobs_deleted: Counter,
    node_patches: Counter,
    channel_requests: Counter,
    channel_errors: Counter,
    channel_cache_hits: Counter,
    channel_duration: Histogram,
    leader: Gauge,
    plans: Mutex<BTreeSet<PlanLabels>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("slipway");
        let m = Metrics {
            reconciles: Counter::default(),
            reconcile_errors: Family::default(),
            // 1 ms .. ~32 s
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            plan_complete: Family::default(),
            plan_nodes: Family::default(),
            jobs_created: Counter::default(),
            jobs_deleted: Counter::default(),
            node_patches: Counter::default(),
            channel_requests: Counter::default(),
            channel_errors: Counter::default(),
            channel_cache_hits: Counter::default(),
            // 5 ms .. ~41 s
            channel_duration: Histogram::new(exponential_buckets(0.005, 2.0, 14)),
            leader: Gauge::default(),
            plans: Mutex::default(),
            registry: Registry::default(),
        };
        registry.register(
            "reconciles",
            "Plan reconciles started",
            m.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Plan reconciles that failed, by error category (conflict, api, transport, cache, plan, channel, not_leader)",
            m.reconcile_errors.clone(),
        );
        registry.register_with_unit(
            "reconcile_duration",
            "Time a Plan reconcile took, from the caches to the last write",
            Unit::Seconds,
            m.reconcile_duration.clone(),
        );
        registry.register(
            "plan_complete",
            "1 when the Plan's Complete condition is True, else 0",
            m.plan_complete.clone(),
        );
        registry.register(
            "plan_nodes",
            "Nodes of a Plan by state: applying = len(status.applying) (nodes holding a concurrency slot); \
             failed = status.nodes in phase Failed (a subset of applying); complete = nodes matched by \
             spec.nodeSelector whose plan.upgrade.cattle.io/<plan> label equals status.latestHash",
            m.plan_nodes.clone(),
        );
        registry.register(
            "jobs_created",
            "Upgrade Jobs created",
            m.jobs_created.clone(),
        );
        registry.register(
            "jobs_deleted",
            "Upgrade Jobs deleted (finished past their TTL, outdated, replaced or out of turn)",
            m.jobs_deleted.clone(),
        );
        registry.register(
            "node_patches",
            "Node label/uncordon patches applied",
            m.node_patches.clone(),
        );
        registry.register(
            "channel_requests",
            "Requests made to channel servers (answers served from the cache are not counted)",
            m.channel_requests.clone(),
        );
        registry.register(
            "channel_request_errors",
            "Channel requests that gave no version",
            m.channel_errors.clone(),
        );
        registry.register(
            "channel_cache_hits",
            "Channel resolutions answered from the cache",
            m.channel_cache_hits.clone(),
        );
        registry.register_with_unit(
            "channel_request_duration",
            "Time a channel request took",
            Unit::Seconds,
            m.channel_duration.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica may write (holds the leader lease, or runs without leader election), else 0",
            m.leader.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The OpenMetrics text exposition of every family.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    pub fn reconcile_started(&self) {
        self.reconciles.inc();
    }

    pub fn reconcile_finished(&self, took: Duration, error_category: Option<&str>) {
        self.reconcile_duration.observe(took.as_secs_f64());
        if let Some(category) = error_category {
            self.reconcile_errors
                .get_or_create(&ErrorLabels {
                    category: category.to_string(),
                })
                .inc();
        }
    }

    pub fn job_created(&self) {
        self.jobs_created.inc();
    }

    pub fn job_deleted(&self) {
        self.jobs_deleted.inc();
    }

    pub fn node_patched(&self) {
        self.node_patches.inc();
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

    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Sets the per-Plan gauges.
    pub fn plan(&self, namespace: &str, plan: &str, s: PlanSnapshot) {
        let key = PlanLabels {
            namespace: namespace.to_string(),
            plan: plan.to_string(),
        };
        self.plan_complete
            .get_or_create(&key)
            .set(i64::from(s.complete));
        for (state, n) in [
            (NodeState::applying, s.applying),
            (NodeState::failed, s.failed),
            (NodeState::complete, s.upgraded),
        ] {
            self.plan_nodes
                .get_or_create(&node_key(&key, state))
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
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
            self.plan_complete.remove(key);
            for state in [NodeState::applying, NodeState::failed, NodeState::complete] {
                self.plan_nodes.remove(&node_key(key, state));
            }
            false
        });
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
    use crate::api::{NodeProgress, PlanStatus};
    use crate::rollout::NodePatch;
    use std::collections::BTreeMap;

    fn node(name: &str, pool: &str, plan_label: Option<&str>) -> NodeInfo {
        let mut labels = BTreeMap::from([
            ("kubernetes.io/hostname".to_string(), name.to_string()),
            ("pool".to_string(), pool.to_string()),
        ]);
        if let Some(v) = plan_label {
            labels.insert("plan.upgrade.cattle.io/p".to_string(), v.to_string());
        }
        NodeInfo {
            name: name.to_string(),
            labels,
            ..Default::default()
        }
    }

    fn plan() -> Plan {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "upgrade.cattle.io/v1",
            "kind": "Plan",
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "concurrency": 2,
                "version": "v1",
                "nodeSelector": {"matchLabels": {"pool": "a"}},
                "upgrade": {"image": "img"}
            }
        }))
        .unwrap()
    }

    fn decision() -> Rollout {
        let mut status = PlanStatus {
            latest_hash: Some("h1".into()),
            applying: vec!["n2".into(), "n3".into()],
            nodes: vec![
                NodeProgress {
                    name: "n2".into(),
                    phase: phase::UPGRADING.into(),
                    ..Default::default()
                },
                NodeProgress {
                    name: "n3".into(),
                    phase: phase::FAILED.into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        cond::set(
            &mut status,
            COMPLETE,
            "False",
            "SyncJob",
            "",
            "2026-01-01T00:00:00Z",
            None,
        );
        Rollout {
            status,
            node_patches: vec![NodePatch {
                node: "n4".into(),
                labels: BTreeMap::from([("plan.upgrade.cattle.io/p".into(), "h1".into())]),
                uncordon: true,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_decision_gives_the_plan_gauges() {
        let nodes = [
            node("n1", "a", Some("h1")), // done
            node("n2", "a", None),       // applying
            node("n3", "a", Some("h0")), // failed, old hash
            node("n4", "a", None),       // labelled by this decision
            node("n5", "b", Some("h1")), // not selected
        ];
        let s = PlanSnapshot::from_decision(&plan(), &nodes, &decision());
        assert_eq!(
            s,
            PlanSnapshot {
                complete: false,
                applying: 2,
                failed: 1,
                upgraded: 2
            }
        );
    }

    #[test]
    fn rendering_shows_every_family() {
        let m = Metrics::new();
        m.reconcile_started();
        m.reconcile_finished(Duration::from_millis(20), None);
        m.reconcile_started();
        m.reconcile_finished(Duration::from_millis(3), Some("conflict"));
        m.job_created();
        m.job_created();
        m.job_deleted();
        m.node_patched();
        m.channel_request(Duration::from_millis(40), true);
        m.channel_request(Duration::from_millis(40), false);
        m.channel_cache_hit();
        m.set_leader(true);
        m.plan(
            "ns",
            "p",
            PlanSnapshot {
                complete: true,
                applying: 0,
                failed: 0,
                upgraded: 5,
            },
        );
        let text = m.render();
        for line in [
            "slipway_reconciles_total 2",
            "slipway_reconcile_errors_total{category=\"conflict\"} 1",
            "slipway_reconcile_duration_seconds_count 2",
            "slipway_plan_complete{namespace=\"ns\",plan=\"p\"} 1",
            "slipway_plan_nodes{namespace=\"ns\",plan=\"p\",state=\"complete\"} 5",
            "slipway_plan_nodes{namespace=\"ns\",plan=\"p\",state=\"applying\"} 0",
            "slipway_plan_nodes{namespace=\"ns\",plan=\"p\",state=\"failed\"} 0",
            "slipway_jobs_created_total 2",
            "slipway_jobs_deleted_total 1",
            "slipway_node_patches_total 1",
            "slipway_channel_requests_total 2",
            "slipway_channel_request_errors_total 1",
            "slipway_channel_cache_hits_total 1",
            "slipway_channel_request_duration_seconds_count 2",
            "slipway_leader 1",
            "# TYPE slipway_reconcile_duration_seconds histogram",
            "# EOF",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn gone_plans_lose_their_gauges() {
        let m = Metrics::new();
        m.plan("ns", "keep", PlanSnapshot::default());
        m.plan("ns", "gone", PlanSnapshot::default());
        m.retain_plans(|_, plan| plan == "keep");
        let text = m.render();
        assert!(text.contains("plan=\"keep\""), "{text}");
        assert!(!text.contains("plan=\"gone\""), "{text}");
    }
}
