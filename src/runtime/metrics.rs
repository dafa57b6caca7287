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

use super::error::ErrorKind;

/// A Plan's gauges: whether it is complete, and how many of its nodes are in each state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlanGauges {
    pub complete: bool,
    pub applying: usize,
    pub failed: usize,
    /// Nodes that carry the Plan's latest hash.
    pub upgraded: usize,
}

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct PolicyLabels {
    pub policy: String,
}

/// The kind of object a reconcile is about.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelValue)]
#[allow(non_camel_case_types)] // label values are lower case
pub enum Kind {
    plan,
    nodemaintenance,
    rebootpolicy,
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: Kind,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: Kind,
    pub category: ErrorKind,
}

type Histograms = Family<KindLabels, Histogram, fn() -> Histogram>;

fn reconcile_histogram() -> Histogram {
    // 1 ms .. ~32 s
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// All of slipway's metrics.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<KindLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: Histograms,
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
    reboot_wanting: Family<PolicyLabels, Gauge>,
    reboot_rebooting: Family<PolicyLabels, Gauge>,
    policies: Mutex<BTreeSet<PolicyLabels>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Creates every family and registers it under its exported name, one group at a time.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("slipway");
        let m = Metrics {
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(reconcile_histogram),
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
            reboot_wanting: Family::default(),
            reboot_rebooting: Family::default(),
            policies: Mutex::default(),
            registry: Registry::default(),
        };
        m.register_reconciles(&mut registry);
        m.register_plans(&mut registry);
        m.register_channels(&mut registry);
        m.register_leader(&mut registry);
        m.register_reboot_policies(&mut registry);
        Metrics { registry, ..m }
    }

    /// The OpenMetrics text exposition of every family.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Shows the kind's reconcile series from the start (at 0), before its first reconcile.
    pub fn kind_running(&self, kind: Kind) {
        let _ = self.reconciles.get_or_create(&KindLabels { kind });
        let _ = self.reconcile_duration.get_or_create(&KindLabels { kind });
    }

    pub fn reconcile_started(&self, kind: Kind) {
        self.reconciles.get_or_create(&KindLabels { kind }).inc();
    }

    pub fn reconcile_finished(&self, kind: Kind, took: Duration, error: Option<ErrorKind>) {
        self.reconcile_duration
            .get_or_create(&KindLabels { kind })
            .observe(took.as_secs_f64());
        if let Some(category) = error {
            self.reconcile_errors
                .get_or_create(&ErrorLabels { kind, category })
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
    pub fn plan(&self, namespace: &str, plan: &str, s: PlanGauges) {
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

impl Metrics {
    /// Sets a RebootPolicy's gauges.
    pub fn reboot_policy(&self, policy: &str, wanting: usize, rebooting: usize) {
        let key = PolicyLabels {
            policy: policy.to_string(),
        };
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.reboot_wanting.get_or_create(&key).set(count(wanting));
        self.reboot_rebooting
            .get_or_create(&key)
            .set(count(rebooting));
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
            self.reboot_wanting.remove(key);
            self.reboot_rebooting.remove(key);
            false
        });
    }
}

impl Metrics {
    /// Reconciles of every kind: started, failed, how long they took.
    fn register_reconciles(&self, registry: &mut Registry) {
        registry.register(
            "reconciles",
            "Reconciles started, by kind (plan, nodemaintenance, rebootpolicy)",
            self.reconciles.clone(),
        );
        registry.register(
            "reconcile_errors",
            "Reconciles that failed, by kind and error category (not_found, conflict, gone, too_many_requests, server, api, timeout, transport, startup, cache, object, not_leader)",
            self.reconcile_errors.clone(),
        );
        registry.register_with_unit(
            "reconcile_duration",
            "Time a reconcile took, from the caches to the last write, by kind",
            Unit::Seconds,
            self.reconcile_duration.clone(),
        );
    }

    /// The per-Plan gauges and the writes Plans make (Jobs, node patches).
    fn register_plans(&self, registry: &mut Registry) {
        registry.register(
            "plan_complete",
            "1 when the Plan's Complete condition is True, else 0",
            self.plan_complete.clone(),
        );
        registry.register(
            "plan_nodes",
            "Nodes of a Plan by state: applying = len(status.applying) (nodes holding a concurrency slot); \
             failed = status.nodes in phase Failed (a subset of applying); complete = nodes matched by \
             spec.nodeSelector whose plan.upgrade.cattle.io/<plan> label equals status.latestHash",
            self.plan_nodes.clone(),
        );
        registry.register(
            "jobs_created",
            "Upgrade Jobs created",
            self.jobs_created.clone(),
        );
        registry.register(
            "jobs_deleted",
            "Upgrade Jobs deleted (finished past their TTL, outdated, replaced or out of turn)",
            self.jobs_deleted.clone(),
        );
        registry.register(
            "node_patches",
            "Node label/uncordon patches applied",
            self.node_patches.clone(),
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

    /// Whether this replica may write.
    fn register_leader(&self, registry: &mut Registry) {
        registry.register(
            "leader",
            "1 while this replica may write (holds the leader lease, or runs without leader election), else 0",
            self.leader.clone(),
        );
    }

    /// The per-RebootPolicy gauges.
    fn register_reboot_policies(&self, registry: &mut Registry) {
        registry.register(
            "reboot_wanting_nodes",
            "Nodes of a RebootPolicy that want a reboot and have not started it",
            self.reboot_wanting.clone(),
        );
        registry.register(
            "reboot_rebooting_nodes",
            "Nodes of a RebootPolicy from the start of their drain to the end of their health gate (failed ones included: they hold their slot)",
            self.reboot_rebooting.clone(),
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

    #[test]
    fn rendering_shows_every_family() {
        let m = Metrics::new();
        m.reconcile_started(Kind::plan);
        m.reconcile_finished(Kind::plan, Duration::from_millis(20), None);
        m.reconcile_started(Kind::plan);
        m.reconcile_finished(
            Kind::plan,
            Duration::from_millis(3),
            Some(ErrorKind::conflict),
        );
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
            PlanGauges {
                complete: true,
                upgraded: 5,
                ..Default::default()
            },
        );
        let text = m.render();
        for line in [
            "slipway_reconciles_total{kind=\"plan\"} 2",
            "slipway_reconcile_errors_total{kind=\"plan\",category=\"conflict\"} 1",
            "slipway_reconcile_duration_seconds_count{kind=\"plan\"} 2",
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
    fn reboot_policies_have_gauges_until_they_are_gone() {
        let m = Metrics::new();
        m.reboot_policy("nightly", 3, 1);
        m.reboot_policy("gone", 1, 0);
        m.retain_policies(|p| p == "nightly");
        let text = m.render();
        for line in [
            "slipway_reboot_wanting_nodes{policy=\"nightly\"} 3",
            "slipway_reboot_rebooting_nodes{policy=\"nightly\"} 1",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(!text.contains("policy=\"gone\""), "{text}");
    }

    #[test]
    fn gone_plans_lose_their_gauges() {
        let m = Metrics::new();
        m.plan("ns", "keep", PlanGauges::default());
        m.plan("ns", "gone", PlanGauges::default());
        m.retain_plans(|_, plan| plan == "keep");
        let text = m.render();
        assert!(text.contains("plan=\"keep\""), "{text}");
        assert!(!text.contains("plan=\"gone\""), "{text}");
    }
}
