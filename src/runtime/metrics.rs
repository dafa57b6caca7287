//! Prometheus metrics (prometheus-client, OpenMetrics text), served on `/metrics`.
//!
//! Every family of slipway's own is prefixed `slipway_`; beside them, `slipway_build_info` and the
//! standard process metrics (`process_*`, [`process`]). Per-object gauges are set after each
//! successful reconcile from the decision that was applied, and removed when the object is gone.

mod notifications;
mod operations;
mod phases;
pub mod process;
mod silences;

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
use crate::common::phase::PhaseTally;
pub use notifications::{Delivery, NotificationMetrics};
use phases::{Names, PhaseGauges};
use silences::SilenceMetrics;

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

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct MaintenanceLabels {
    pub nodemaintenance: String,
    pub node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct NodeOpLabels {
    pub namespace: String,
    pub nodeop: String,
}

/// The labels of `slipway_build_info`: the version, and the commit when the build was given one
/// (`SLIPWAY_COMMIT` at compile time; a build from a source tarball has none).
pub fn build_labels() -> Vec<(&'static str, String)> {
    let mut labels = vec![("version", env!("CARGO_PKG_VERSION").to_string())];
    if let Some(commit) = option_env!("SLIPWAY_COMMIT").filter(|c| !c.is_empty()) {
        labels.push(("commit", commit.to_string()));
    }
    labels
}

/// The kind of object a reconcile is about.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelValue)]
#[allow(non_camel_case_types)] // label values are lower case
pub enum Kind {
    plan,
    nodemaintenance,
    rebootpolicy,
    nodeop,
    nodeopupgrade,
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
pub struct TrackedLabels {
    pub kind: Kind,
    pub map: &'static str,
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
    build_info: Family<Vec<(&'static str, String)>, Gauge>,
    reconciles: Family<KindLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: Histograms,
    tracked: Family<TrackedLabels, Gauge>,
    plan_complete: Family<PlanLabels, Gauge>,
    plan_nodes: Family<PlanNodeLabels, Gauge>,
    plan_targeted: Family<PlanLabels, Gauge>,
    plan_phases: PhaseGauges<PlanLabels>,
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
    reboot_phases: PhaseGauges<PolicyLabels>,
    maintenance_phases: PhaseGauges<MaintenanceLabels>,
    nodeop_phases: PhaseGauges<NodeOpLabels>,
    silences: SilenceMetrics,
    notifications: NotificationMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Creates every family and registers it under its exported name, one group at a time.
    pub fn new() -> Metrics {
        let mut root = Registry::default();
        let m = Metrics {
            build_info: Family::default(),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(reconcile_histogram),
            tracked: Family::default(),
            plan_complete: Family::default(),
            plan_nodes: Family::default(),
            plan_targeted: Family::default(),
            plan_phases: PhaseGauges::default(),
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
            reboot_phases: PhaseGauges::default(),
            maintenance_phases: PhaseGauges::default(),
            nodeop_phases: PhaseGauges::default(),
            silences: SilenceMetrics::default(),
            notifications: NotificationMetrics::default(),
            registry: Registry::default(),
        };
        root.register_collector(Box::new(process::ProcessCollector));
        let registry = root.sub_registry_with_prefix("slipway");
        m.register_build_info(registry);
        m.register_reconciles(registry);
        m.register_plans(registry);
        m.register_channels(registry);
        m.register_leader(registry);
        m.register_reboot_policies(registry);
        m.register_maintenances(registry);
        m.register_nodeops(registry);
        m.silences.register(registry);
        m.notifications.register(registry);
        Metrics {
            registry: root,
            ..m
        }
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

    /// A request to Alertmanager was made (`request`: list, create, extend, expire).
    pub fn alertmanager_request(&self, request: &'static str, ok: bool) {
        self.silences.request(request, ok);
    }

    /// How many of slipway's silences Alertmanager lists in `state`.
    pub fn silences(&self, state: &'static str, count: usize) {
        self.silences.set(state, count);
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
        // Disjoint, so that a sum over states counts each node once.
        for (state, n) in [
            (NodeState::applying, s.applying.saturating_sub(s.failed)),
            (NodeState::failed, s.failed),
            (NodeState::complete, s.upgraded),
        ] {
            self.plan_nodes
                .get_or_create(&node_key(&key, state))
                .set(count(n));
        }
        self.plan_targeted
            .get_or_create(&key)
            .set(count(s.targeted));
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
            self.plan_targeted.remove(key);
            for state in [NodeState::applying, NodeState::failed, NodeState::complete] {
                self.plan_nodes.remove(&node_key(key, state));
            }
            false
        });
        self.plan_phases
            .retain(|key| exists(&key.namespace, &key.plan));
    }

    /// Sets the per-phase gauges of a Plan's nodes (`status.nodes`).
    pub fn plan_phases(&self, namespace: &str, plan: &str, phases: &[PhaseTally]) {
        let key = PlanLabels {
            namespace: namespace.to_string(),
            plan: plan.to_string(),
        };
        self.plan_phases.set(&key, phases);
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Metrics {
    /// The running build: always 1, its labels say which.
    fn register_build_info(&self, registry: &mut Registry) {
        self.build_info.get_or_create(&build_labels()).set(1);
        registry.register(
            "build_info",
            "Always 1; the labels say which slipway runs: version, and commit when the build had one",
            self.build_info.clone(),
        );
    }

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
        registry.register(
            "tracked_objects",
            "Objects the controller keeps per-object state for, by kind and map (failures: failing in a row; starts: when the last reconcile began; written: own writes the cache has not shown yet); back to where it was once the objects are gone",
            self.tracked.clone(),
        );
    }

    /// The per-Plan gauges and the writes Plans make (Jobs, node patches).
    fn register_plans(&self, registry: &mut Registry) {
        self.register_plan_gauges(registry);
        self.register_plan_writes(registry);
    }

    /// Where each Plan's rollout stands: complete, nodes by state and by phase, nodes targeted.
    fn register_plan_gauges(&self, registry: &mut Registry) {
        registry.register(
            "plan_complete",
            "1 when the Plan's Complete condition is True, else 0",
            self.plan_complete.clone(),
        );
        registry.register(
            "plan_nodes",
            "Nodes of a Plan by state, each node in one state at most: applying = nodes of \
             status.applying (holding a concurrency slot) that have not failed; failed = status.nodes \
             in phase Failed (holding their slot too); complete = nodes matched by spec.nodeSelector \
             whose plan.upgrade.cattle.io/<plan> label equals status.latestHash",
            self.plan_nodes.clone(),
        );
        registry.register(
            "plan_targeted_nodes",
            "Nodes a Plan's spec.nodeSelector matches that have a hostname and are not disabled: \
             the whole of its rollout (progress = plan_nodes{state=\"complete\"} / this)",
            self.plan_targeted.clone(),
        );
        self.plan_phases.register(
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

    /// The writes Plans make: Jobs created and deleted, node patches.
    fn register_plan_writes(&self, registry: &mut Registry) {
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
        self.reboot_phases.register(
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

    /// The per-NodeMaintenance gauges.
    fn register_maintenances(&self, registry: &mut Registry) {
        self.maintenance_phases.register(
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

impl Metrics {
    /// The per-NodeOp gauges.
    fn register_nodeops(&self, registry: &mut Registry) {
        self.nodeop_phases.register(
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
        // Three nodes hold a slot, one of them failed: no node is counted in two states.
        m.plan(
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
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
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

    fn tally(phase: &'static str, nodes: usize, since: Option<&str>) -> PhaseTally {
        PhaseTally {
            phase,
            nodes,
            oldest_since: since.map(|s| s.parse().unwrap()),
        }
    }

    fn has(text: &str, line: &str) -> bool {
        text.lines().any(|l| l == line)
    }

    #[test]
    fn build_info_and_process_metrics_are_there_from_the_start() {
        let text = Metrics::new().render();
        let version = env!("CARGO_PKG_VERSION");
        assert!(
            text.lines().any(|l| l.starts_with("slipway_build_info{")
                && l.contains(&format!("version=\"{version}\""))
                && l.ends_with("} 1")),
            "{text}"
        );
        #[cfg(target_os = "linux")]
        for family in [
            "process_cpu_seconds counter",
            "process_resident_memory_bytes gauge",
            "process_virtual_memory_bytes gauge",
            "process_start_time_seconds gauge",
            "process_open_fds gauge",
            "process_max_fds gauge",
        ] {
            assert!(has(&text, &format!("# TYPE {family}")), "{family}: {text}");
        }
        assert!(
            text.lines()
                .any(|l| l.starts_with("process_cpu_seconds_total ")),
            "{text}"
        );
    }

    #[test]
    fn phases_show_nodes_and_their_oldest_since_and_go_with_their_object() {
        let m = Metrics::new();
        m.plan(
            "ns",
            "p",
            PlanGauges {
                targeted: 7,
                ..Default::default()
            },
        );
        m.plan_phases(
            "ns",
            "p",
            &[
                tally("Upgrading", 2, Some("2026-01-01T00:00:00Z")),
                tally("Failed", 1, None),
            ],
        );
        m.reboot_phases(
            "nightly",
            &[tally("Draining", 1, Some("2026-01-01T00:00:10Z"))],
        );
        m.maintenance(
            "nm",
            "n1",
            Some(tally("Running", 1, Some("2026-01-01T00:01:00Z"))),
        );
        let text = m.render();
        for line in [
            "slipway_plan_targeted_nodes{namespace=\"ns\",plan=\"p\"} 7",
            "slipway_plan_phase_nodes{namespace=\"ns\",plan=\"p\",phase=\"Upgrading\"} 2",
            "slipway_plan_phase_nodes{namespace=\"ns\",plan=\"p\",phase=\"Failed\"} 1",
            "slipway_plan_phase_since_timestamp_seconds{namespace=\"ns\",plan=\"p\",phase=\"Upgrading\"} 1767225600",
            "slipway_reboot_phase_nodes{policy=\"nightly\",phase=\"Draining\"} 1",
            "slipway_reboot_phase_since_timestamp_seconds{policy=\"nightly\",phase=\"Draining\"} 1767225610",
            "slipway_nodemaintenance_phase{nodemaintenance=\"nm\",node=\"n1\",phase=\"Running\"} 1",
            "slipway_nodemaintenance_phase_since_timestamp_seconds{nodemaintenance=\"nm\",node=\"n1\",phase=\"Running\"} 1767225660",
            "# UNIT slipway_plan_phase_since_timestamp_seconds seconds",
        ] {
            assert!(has(&text, line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("phase=\"Failed\"} 0"), "{text}");
        assert!(
            !text.contains("since_timestamp_seconds{namespace=\"ns\",plan=\"p\",phase=\"Failed\"}"),
            "no since without a time: {text}"
        );

        // A phase left loses its series; a gone object loses all of its own.
        m.plan_phases("ns", "p", &[tally("Rebooting", 2, None)]);
        m.maintenance("nm", "n1", Some(tally("Succeeded", 1, None)));
        m.retain_policies(|_| false);
        let text = m.render();
        assert!(
            !text.contains("phase=\"Upgrading\"") && !text.contains("phase=\"Failed\""),
            "{text}"
        );
        assert!(text.contains("phase=\"Rebooting\"} 2"), "{text}");
        assert!(
            !text.contains("phase=\"Running\"") && text.contains("phase=\"Succeeded\""),
            "{text}"
        );
        assert!(!text.contains("policy=\"nightly\""), "{text}");
        m.retain_plans(|_, _| false);
        m.retain_maintenances(|_| false);
        let text = m.render();
        assert!(
            !text.contains("plan=") && !text.contains("nodemaintenance="),
            "{text}"
        );
    }

    #[test]
    fn nodeops_have_phase_gauges_until_they_are_gone() {
        let m = Metrics::new();
        m.nodeop_phases(
            "default",
            "upgrade",
            &[
                tally("Running", 2, Some("2026-01-01T00:00:00Z")),
                tally("Completed", 1, None),
            ],
        );
        m.nodeop_phases("other", "upgrade", &[tally("Failed", 1, None)]);
        let text = m.render();
        for line in [
            "slipway_nodeop_phase_nodes{namespace=\"default\",nodeop=\"upgrade\",phase=\"Running\"} 2",
            "slipway_nodeop_phase_nodes{namespace=\"default\",nodeop=\"upgrade\",phase=\"Completed\"} 1",
            "slipway_nodeop_phase_since_timestamp_seconds{namespace=\"default\",nodeop=\"upgrade\",phase=\"Running\"} 1767225600",
        ] {
            assert!(has(&text, line), "missing {line:?} in\n{text}");
        }
        m.retain_nodeops(|ns, _| ns == "other");
        let text = m.render();
        assert!(!text.contains("namespace=\"default\",nodeop="), "{text}");
        assert!(
            text.contains("namespace=\"other\",nodeop=\"upgrade\""),
            "{text}"
        );
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
