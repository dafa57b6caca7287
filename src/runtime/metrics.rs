//! Prometheus metrics (prometheus-client, OpenMetrics text), served on `/metrics`.
//!
//! Every family of slipway's own is prefixed `slipway_`; beside them, `slipway_build_info` and the
//! standard process metrics (`process_*`, [`process`]). The families of every kind (reconciles,
//! Jobs, leader, silences, notifications) are here; each kind's own per-object gauges are its
//! [`Families`], registered when the kind starts. Per-object gauges are set after each successful
//! reconcile from the decision that was applied, and removed when the object is gone.

mod notifications;
pub mod phases;
pub mod process;
mod silences;

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use super::error::ErrorKind;
pub use notifications::{Delivery, NotificationMetrics};
use silences::SilenceMetrics;

/// The content type of [`Metrics::render`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A kind's own families (its per-object gauges): registered under slipway's prefix, beside
/// the families of every kind, the first time the kind asks for them ([`Metrics::families`]).
pub trait Families: Default + Send + Sync + 'static {
    fn register(&self, registry: &mut Registry);
}

/// The labels of `slipway_build_info`: the version, and the commit when the build was given one
/// (`SLIPWAY_COMMIT` at compile time; a build from a source tarball has none).
fn build_labels() -> Vec<(&'static str, String)> {
    let mut labels = vec![("version", env!("CARGO_PKG_VERSION").to_string())];
    if let Some(commit) = option_env!("SLIPWAY_COMMIT").filter(|c| !c.is_empty()) {
        labels.push(("commit", commit.to_string()));
    }
    labels
}

/// `build_info` in `registry` (slipway's prefix): always 1, its labels say which build runs. The
/// controller and the agent each serve it.
pub fn register_build_info(registry: &mut Registry) {
    let build = Family::<Vec<(&'static str, String)>, Gauge>::default();
    build.get_or_create(&build_labels()).set(1);
    registry.register(
        "build_info",
        "Always 1; the labels say which slipway runs: version, and commit when the build had one",
        build,
    );
}

/// The kind of object a reconcile is about, as its `kind` label says it (`plan`,
/// `rebootpolicy`...): each operation names its own.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Kind(pub &'static str);

impl EncodeLabelValue for Kind {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        self.0.encode(encoder)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
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
    registry: Mutex<Registry>,
    /// The kinds' own families, one of each type.
    kinds: Mutex<Vec<Arc<dyn Any + Send + Sync>>>,
    reconciles: Family<KindLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: Histograms,
    tracked: Family<TrackedLabels, Gauge>,
    jobs_created: Counter,
    jobs_deleted: Counter,
    node_patches: Counter,
    leader: Gauge,
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
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Family::new_with_constructor(reconcile_histogram),
            tracked: Family::default(),
            jobs_created: Counter::default(),
            jobs_deleted: Counter::default(),
            node_patches: Counter::default(),
            leader: Gauge::default(),
            silences: SilenceMetrics::default(),
            notifications: NotificationMetrics::default(),
            kinds: Mutex::default(),
            registry: Mutex::default(),
        };
        root.register_collector(Box::new(process::ProcessCollector));
        let registry = root.sub_registry_with_prefix("slipway");
        register_build_info(registry);
        m.register_reconciles(registry);
        m.register_writes(registry);
        m.register_leader(registry);
        m.silences.register(registry);
        m.notifications.register(registry);
        Metrics {
            registry: Mutex::new(root),
            ..m
        }
    }

    /// The families `F` of a kind: registered the first time (the kind's operation asks when it
    /// is made, so that they are shown from the start), the same ones after.
    pub fn families<F: Families>(&self) -> Arc<F> {
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = (kinds.iter()).find_map(|k| k.clone().downcast::<F>().ok()) {
            return found;
        }
        let families = Arc::new(F::default());
        let mut root = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        families.register(root.sub_registry_with_prefix("slipway"));
        kinds.push(families.clone());
        families
    }

    /// The OpenMetrics text exposition of every family.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let registry = self.registry.lock().unwrap_or_else(PoisonError::into_inner);
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
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

    /// A request to Alertmanager was made (`request`: list, create, extend, expire).
    pub fn alertmanager_request(&self, request: &'static str, ok: bool) {
        self.silences.request(request, ok);
    }

    /// How many of slipway's silences Alertmanager lists in `state`.
    pub fn silences(&self, state: &'static str, count: usize) {
        self.silences.set(state, count);
    }

    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// How many objects of `kind` each per-object map holds (`slipway_tracked_objects`).
    pub fn tracked(&self, kind: Kind, maps: [(&'static str, usize); 3]) {
        for (map, n) in maps {
            let key = TrackedLabels { kind, map };
            self.tracked.get_or_create(&key).set(count(n));
        }
    }

    /// The notification targets' series.
    pub fn notifications(&self) -> &NotificationMetrics {
        &self.notifications
    }
}

/// A count as a gauge's value.
pub fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Metrics {
    /// Reconciles of every kind: started, failed, how long they took.
    fn register_reconciles(&self, registry: &mut Registry) {
        registry.register(
            "reconciles",
            "Reconciles started, by kind (plan, rebootpolicy, nodeop, nodeopupgrade, nodemaintenance)",
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

    /// The writes operations make: Jobs created and deleted, node patches.
    fn register_writes(&self, registry: &mut Registry) {
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

    /// Whether this replica may write.
    fn register_leader(&self, registry: &mut Registry) {
        registry.register(
            "leader",
            "1 while this replica may write (holds the leader lease, or runs without leader election), else 0",
            self.leader.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(text: &str, line: &str) -> bool {
        text.lines().any(|l| l == line)
    }

    #[test]
    fn rendering_shows_every_family() {
        let m = Metrics::new();
        m.reconcile_started(Kind("plan"));
        m.reconcile_finished(Kind("plan"), Duration::from_millis(20), None);
        m.reconcile_started(Kind("plan"));
        m.reconcile_finished(
            Kind("plan"),
            Duration::from_millis(3),
            Some(ErrorKind::conflict),
        );
        m.job_created();
        m.job_created();
        m.job_deleted();
        m.node_patched();
        m.set_leader(true);
        let text = m.render();
        for line in [
            "slipway_reconciles_total{kind=\"plan\"} 2",
            "slipway_reconcile_errors_total{kind=\"plan\",category=\"conflict\"} 1",
            "slipway_reconcile_duration_seconds_count{kind=\"plan\"} 2",
            "slipway_jobs_created_total 2",
            "slipway_jobs_deleted_total 1",
            "slipway_node_patches_total 1",
            "slipway_leader 1",
            "# TYPE slipway_reconcile_duration_seconds histogram",
            "# EOF",
        ] {
            assert!(has(&text, line), "missing {line:?} in\n{text}");
        }
    }

    /// A kind's families, as a kind's shell has them.
    #[derive(Default)]
    struct Widgets(Gauge);

    impl Families for Widgets {
        fn register(&self, registry: &mut Registry) {
            registry.register("widgets", "Widgets", self.0.clone());
        }
    }

    #[test]
    fn a_kinds_families_are_registered_once_and_shown_beside_the_rest() {
        let m = Metrics::new();
        assert!(!m.render().contains("widgets"));
        m.families::<Widgets>().0.set(3);
        m.families::<Widgets>().0.inc();
        let text = m.render();
        assert!(has(&text, "slipway_widgets 4"), "{text}");
        assert_eq!(text.matches("# TYPE slipway_widgets gauge").count(), 1);
        assert!(has(&text, "slipway_leader 0"), "{text}");
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
}
