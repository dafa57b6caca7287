//! A RebootPolicy's spec, read and checked once per reconcile, and the settings one decision reads.

use crate::common::check::HealthCheckSpec;
use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use super::alerts::AlertFilter;
use super::signals::Signals;
use crate::common::duration::GoDuration;
use crate::common::selector::Selector;
use crate::common::window::TimeWindow;
use crate::node::disruption::DisruptionSpec;
use crate::node::drain::{DrainOptions, OnDrainTimeout};
use crate::node::handoff::{GatePolicy, HandoffPolicy};
use crate::node::reboot::{DEFAULT_HEALTH_TIMEOUT, DEFAULT_TIMEOUT, HealthGate, HealthGateSpec};
use crate::reboot_policy::api::{RebootBlockers, RebootDrain, RebootPolicySpec, RebootRecord};

/// The policy's settings, with defaults applied and the clock read.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicySettings {
    pub concurrency: usize,
    pub paused: bool,
    /// `None` when the window is open (or there is none); else when it opens next.
    pub window_closed: Option<Option<Timestamp>>,
    /// How long a node taken waits before it is cordoned and drained (`spec.drain.delay`).
    pub drain_delay: Duration,
    /// `None`: cordon only; else the drain's timeout.
    pub drain_timeout: Option<Duration>,
    /// What the drain does once its timeout passed.
    pub on_drain_timeout: OnDrainTimeout,
    pub handoff: HandoffPolicy,
    /// Set when Prometheus holds every reboot: which alerts fire, or why it could not be asked.
    pub alerts: Option<String>,
    /// Set when a health check holds every reboot: its reason and message.
    pub health_check: Option<(&'static str, String)>,
    /// Set while the pull of the reboot image holds every new reboot: its reason and message.
    pub pulling: Option<(&'static str, String)>,
    /// A failure stops every new reboot (`failurePolicy.action: Stop`).
    pub stop_on_failure: bool,
    /// Set when an earlier failure stopped the policy and it was not reset since: why.
    pub stopped: Option<String>,
    /// `spec.soak`.
    pub soak: Option<Duration>,
    /// Nodes back from an earlier reboot that still keep their slot, and until when.
    pub soaking: Vec<(String, Timestamp)>,
    /// What the shell read of kured's lock.
    pub kured: super::kured_lock::KuredView,
}

/// How long a drain may take unless the policy says otherwise.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// A policy's spec, read and checked once per reconcile.
#[derive(Debug, Clone)]
pub struct PolicySpec {
    pub selector: Selector,
    pub concurrency: usize,
    pub paused: bool,
    pub window: Option<TimeWindow>,
    pub signals: Signals,
    /// `None`: cordon only.
    pub drain: Option<(Duration, DrainOptions)>,
    /// `spec.drain.delay` (zero when absent): it comes before the cordon, drain or not.
    pub drain_delay: Duration,
    pub on_drain_timeout: OnDrainTimeout,
    /// The drain waits for the node's volumes to detach.
    pub volumes: bool,
    /// The nodes that reboot next are tainted `PreferNoSchedule` (`spec.disruption`).
    pub taints_next: bool,
    /// The reboot pod's image is pulled on every node before reboots use it (`spec.disruption`).
    pub pre_pull: bool,
    pub timeout: Duration,
    pub health_gate: Option<HealthGate>,
    pub blocking_pods: Vec<Selector>,
    pub alerts: Option<AlertFilter>,
    pub health_checks: Vec<HealthCheckSpec>,
    /// `failurePolicy.action: Stop`.
    pub stop_on_failure: bool,
    pub image: String,
    /// `spec.soak`: how long a node back from its reboot keeps its slot.
    pub soak: Option<Duration>,
    /// The labels set as a node is cordoned, and once it is back.
    pub labels_before: BTreeMap<String, String>,
    pub labels_after: BTreeMap<String, String>,
}

fn duration_field(text: Option<&str>, field: &str, default: Duration) -> Result<Duration, String> {
    let Some(text) = text.filter(|t| !t.is_empty()) else {
        return Ok(default);
    };
    text.parse::<GoDuration>()
        .ok()
        .and_then(GoDuration::to_std)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{field} must be a positive duration such as 15m, not {text:?}"))
}

/// Reads `spec`; `Err` names the first field that is wrong (the CRD's rules catch most of them
/// at `kubectl apply`; this is for what CEL cannot see, and for a CRD older than the controller).
pub fn read_spec(spec: &RebootPolicySpec, default_image: &str) -> Result<PolicySpec, String> {
    let selector = match &spec.node_selector {
        None => Selector::everything(),
        Some(s) => Selector::from_label_selector(Some(s))
            .map_err(|e| format!("spec.nodeSelector is invalid: {e}"))?,
    };
    let concurrency = match spec.concurrency {
        None => 1,
        Some(c) if c >= 1 => usize::try_from(c).unwrap_or(usize::MAX),
        Some(c) => return Err(format!("spec.concurrency must be at least 1, not {c}")),
    };
    let window = spec
        .window
        .as_ref()
        .map(TimeWindow::new)
        .transpose()
        .map_err(|e| format!("spec.window is invalid: {e}"))?;
    let drain_spec = spec.drain.clone().unwrap_or_default();
    let drain_delay = duration_field(
        drain_spec.delay.as_deref(),
        "spec.drain.delay",
        Duration::ZERO,
    )?;
    let drain = read_drain(drain_spec)?;
    let health_gate = spec
        .health_gate
        .as_ref()
        .map(read_health_gate)
        .transpose()?;
    let (blocking_pods, alerts) = read_blockers(&spec.blocking.clone().unwrap_or_default())?;
    let health_checks = spec.health_checks.clone().unwrap_or_default();
    crate::common::check::validate(&health_checks, "spec.healthChecks")?;
    if let Some(disruption) = &spec.disruption {
        crate::node::disruption::validate(disruption, "spec.disruption")?;
    }
    let labels = spec.node_labels.as_ref();
    Ok(PolicySpec {
        selector,
        concurrency,
        paused: spec.paused.unwrap_or(false),
        window,
        signals: Signals::of(spec.signals.as_ref()),
        drain,
        drain_delay,
        on_drain_timeout: DisruptionSpec::on_drain_timeout(spec.disruption.as_ref()),
        volumes: DisruptionSpec::waits_for_volumes(spec.disruption.as_ref()),
        taints_next: DisruptionSpec::taints_next(spec.disruption.as_ref()),
        pre_pull: DisruptionSpec::pre_pulls(spec.disruption.as_ref()),
        timeout: duration_field(spec.timeout.as_deref(), "spec.timeout", DEFAULT_TIMEOUT)?,
        health_gate,
        blocking_pods,
        alerts,
        health_checks,
        stop_on_failure: spec.failure_policy.as_ref().and_then(|f| f.action)
            == Some(crate::reboot_policy::api::RebootFailureAction::Stop),
        image: spec
            .image
            .clone()
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| default_image.to_string()),
        soak: match spec.soak.as_deref() {
            None => None,
            Some(text) => Some(duration_field(Some(text), "spec.soak", Duration::ZERO)?),
        },
        labels_before: read_labels(labels.map(|l| &l.before_reboot), "beforeReboot")?,
        labels_after: read_labels(labels.map(|l| &l.after_reboot), "afterReboot")?,
    })
}

/// `spec.drain`: `None` when disabled (cordon only), else the timeout and kured's options.
fn read_drain(drain: RebootDrain) -> Result<Option<(Duration, DrainOptions)>, String> {
    if drain.enabled == Some(false) {
        return Ok(None);
    }
    let timeout = duration_field(
        drain.timeout.as_deref(),
        "spec.drain.timeout",
        DEFAULT_DRAIN_TIMEOUT,
    )?;
    let pod_selector = (drain.pod_selector.as_ref())
        .map(|s| Selector::from_label_selector(Some(s)))
        .transpose()
        .map_err(|e| format!("spec.drain.podSelector is invalid: {e}"))?;
    let skip_wait_for_delete_timeout = (drain.skip_wait_for_delete_timeout.as_deref())
        .map(|d| {
            duration_field(
                Some(d),
                "spec.drain.skipWaitForDeleteTimeout",
                Duration::ZERO,
            )
        })
        .transpose()?;
    let options = DrainOptions {
        grace_period_seconds: drain.grace_period_seconds,
        delete_emptydir_data: drain.delete_emptydir_data.unwrap_or(true),
        force: drain.force.unwrap_or(true),
        pod_selector,
        skip_wait_for_delete_timeout,
        ..DrainOptions::default()
    };
    Ok(Some((timeout, options)))
}

/// `spec.nodeLabels.<set>`, each key and value checked as the API server checks a label.
fn read_labels(
    labels: Option<&BTreeMap<String, String>>,
    set: &str,
) -> Result<BTreeMap<String, String>, String> {
    let labels = labels.cloned().unwrap_or_default();
    for (key, value) in &labels {
        let field = format!("spec.nodeLabels.{set}[{key:?}]");
        if let Some(e) = crate::common::selector::label_key_errors(key).first() {
            return Err(format!("{field}: the key is not a label's: {e}"));
        }
        if let Some(e) = crate::common::selector::label_value_errors(value).first() {
            return Err(format!("{field}: {value:?} is not a label's value: {e}"));
        }
    }
    Ok(labels)
}

fn read_health_gate(gate: &HealthGateSpec) -> Result<HealthGate, String> {
    Selector::from_label_selector(Some(&gate.pod_selector))
        .map_err(|e| format!("spec.healthGate.podSelector is invalid: {e}"))?;
    Ok(HealthGate {
        pod_selector: gate.pod_selector.clone(),
        namespace: gate.namespace.clone().filter(|n| !n.is_empty()),
        timeout: duration_field(
            gate.timeout.as_deref(),
            "spec.healthGate.timeout",
            DEFAULT_HEALTH_TIMEOUT,
        )?,
    })
}

/// `spec.blocking`: the pod selectors, and the Prometheus filter.
fn read_blockers(
    blockers: &RebootBlockers,
) -> Result<(Vec<Selector>, Option<AlertFilter>), String> {
    let pods = blockers
        .pod_selectors
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Selector::from_label_selector(Some(s))
                .map_err(|e| format!("spec.blocking.podSelectors[{i}] is invalid: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let alerts = blockers
        .prometheus
        .as_ref()
        .map(AlertFilter::new)
        .transpose()?;
    Ok((pods, alerts))
}

impl PolicySpec {
    /// The nodes of `rebooted` (the policy's latest reboots) still soaking at `now`.
    pub fn soaking(&self, rebooted: &[RebootRecord], now: Timestamp) -> Vec<(String, Timestamp)> {
        let Some(soak) = self.soak else {
            return Vec::new();
        };
        rebooted
            .iter()
            .filter_map(|r| {
                let back = r.at.parse::<Timestamp>().ok()?;
                let until = back.checked_add(soak).ok()?;
                (until > now).then(|| (r.name.clone(), until))
            })
            .collect()
    }

    /// The settings one decision reads, at `now`; `alerts` is the Prometheus blocker's answer.
    pub fn settings(&self, now: Timestamp, alerts: Option<String>) -> PolicySettings {
        PolicySettings {
            concurrency: self.concurrency,
            paused: self.paused,
            window_closed: self
                .window
                .as_ref()
                .filter(|w| !w.contains(now))
                .map(|w| w.next_opening(now)),
            drain_delay: self.drain_delay,
            drain_timeout: self.drain.as_ref().map(|(t, _)| *t),
            on_drain_timeout: self.on_drain_timeout,
            handoff: HandoffPolicy {
                timeout: self.timeout,
                health_gate: self.health_gate.as_ref().map(|g| GatePolicy {
                    timeout: g.timeout,
                    pods: g.describe_pods(),
                }),
            },
            alerts,
            pulling: None,
            health_check: None,
            stop_on_failure: self.stop_on_failure,
            stopped: None,
            soak: self.soak,
            soaking: Vec::new(),
            kured: super::kured_lock::KuredView::Off,
        }
    }
}
