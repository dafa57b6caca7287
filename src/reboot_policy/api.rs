//! `RebootPolicy` (`slipway.dev/v1alpha1`, cluster-scoped): standing rules for the reboots nodes
//! ask for themselves, the job kured and the Flatcar/CoreOS update operators do.
//!
//! A node asks through a signal: the annotation `slipway agent` writes, FLUO's or CLUO's
//! `reboot-needed` annotation, or a Node condition (Node Problem Detector). The policy says which
//! nodes it governs, how many may reboot at once, when, how they are drained, and what must hold
//! before and after.

// kube's `printcolumn(...)` repeats `type_ = ...`, which clippy mistakes for a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use crate::common::check::{HealthCheckSpec, HealthCheckStatus};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::common::condition::Condition;
use crate::common::crd::{
    extend, map_list, positive_duration, push_rule, rule, window_rules, with_rules,
};
use crate::common::window::TimeWindowSpec;
use crate::node::reboot::HealthGateSpec;

/// slipway's own API group (`upgrade.cattle.io` stays SUC's).
pub const GROUP: &str = "slipway.dev";

/// `RebootPolicy.spec`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "slipway.dev",
    version = "v1alpha1",
    kind = "RebootPolicy",
    plural = "rebootpolicies",
    singular = "rebootpolicy",
    shortname = "rbp",
    status = "RebootPolicyStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "Which nodes may reboot when they ask for it, how many at once, when, and how.",
    printcolumn(name = "Wanting", type_ = "integer", json_path = ".status.wanting"),
    printcolumn(name = "Rebooting", type_ = "integer", json_path = ".status.rebooting"),
    printcolumn(name = "Paused", type_ = "boolean", json_path = ".spec.paused"),
    printcolumn(
        name = "Message",
        type_ = "string",
        json_path = ".status.conditions[?(@.type=='Progressing')].message"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct RebootPolicySpec {
    /// The nodes this policy reboots; every node when absent. A node two policies govern is
    /// taken by whichever starts it first; the other counts it against its own concurrency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// How many nodes may be rebooting at once, counting nodes that any slipway operation
    /// (a Plan, a maintenance, another policy) has taken (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<i64>,
    /// When a reboot may start (the window Plans use); a reboot under way is never interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<TimeWindowSpec>,
    /// Which signals say that a node wants a reboot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signals: Option<RebootSignals>,
    /// How nodes are drained before their reboot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<RebootDrain>,
    /// How long a node may take to come back Ready with a new boot ID (a Go duration; default
    /// 15m). A node that does not fails, holding its slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Pods that must be Ready again on the rebooted node before the next node starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_gate: Option<HealthGateSpec>,
    /// What holds a reboot back while it is present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocking: Option<RebootBlockers>,
    /// Start no new reboot (the ones under way finish).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<bool>,
    /// After a node is back (and its health gate passed), keep its slot this long before another
    /// node starts: a settle time between reboots (a Go duration; none by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soak: Option<String>,
    /// Labels a node gets around its reboot (kured's `--pre-reboot-node-labels` and
    /// `--post-reboot-node-labels`), for what schedules by them or watches them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_labels: Option<RebootNodeLabels>,
    /// Checks on any resource that must all hold before a node starts its reboot (the same as
    /// Plans'); a failing one holds new reboots, the ones under way finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_checks: Option<Vec<HealthCheckSpec>>,
    /// What a failed reboot (a drain or a node that did not come back in time) does to the
    /// others. Absent: `Hold`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<RebootFailurePolicy>,
    /// Image of the reboot pod; needs `sh`, `cat` and `nsenter` (default: the controller's
    /// `SLIPWAY_REBOOT_IMAGE`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// What slipway does around each node it disrupts: an Alertmanager silence while the node is
    /// taken, what the drain does past its timeout, whether it waits for the node's volumes to
    /// detach (docs/disruptions.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disruption: Option<crate::node::disruption::DisruptionSpec>,
}

/// The signals a policy listens to.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RebootSignals {
    /// The annotation `slipway.dev/reboot-required` that `slipway agent` writes (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<bool>,
    /// Flatcar's update-agent (FLUO): the annotation
    /// `flatcar-linux-update.v1.flatcar-linux.net/reboot-needed: "true"` (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flatcar: Option<bool>,
    /// Container Linux's update-agent (CLUO): the annotation
    /// `container-linux-update.v1.coreos.com/reboot-needed: "true"` (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_linux: Option<bool>,
    /// Node condition types that, when `True`, ask for a reboot (for example a Node Problem
    /// Detector condition such as `KernelDeadlock`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_conditions: Vec<String>,
}

/// The drain before a reboot: through the Eviction API, so PodDisruptionBudgets hold.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RebootDrain {
    /// Drain before the reboot (default true); false only cordons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// How long the drain may take (a Go duration; default 30m), counted from its start. When it
    /// passes, the node is uncordoned (unless it was cordoned before) and the reboot fails naming
    /// the pods that stay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// How long a node waits, once taken and its `nodeLabels.beforeReboot` set, before it is
    /// cordoned and drained (a Go duration; kured's `--drain-delay`). It holds its slot meanwhile.
    /// Absent: at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<String>,
    /// Seconds each evicted pod gets to stop; the pod's own value when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_period_seconds: Option<i64>,
    /// Evict pods with `emptyDir` volumes (default true, as kured does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_emptydir_data: Option<bool>,
    /// Evict pods that no controller recreates (default true, as kured does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
    /// Drain only the pods this selects (kured's `--drain-pod-selector`); the others stay and go
    /// down with the node. Absent: every pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<LabelSelector>,
    /// Pods deleted longer ago than this (a Go duration) are no longer waited for (kured's
    /// `--skip-wait-for-delete-timeout`). Absent: every deleted pod is waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_wait_for_delete_timeout: Option<String>,
}

/// The labels a node gets around its reboot. A label of both sets takes its after-reboot value;
/// one set only before stays.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RebootNodeLabels {
    /// Set as the node is cordoned for its reboot.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub before_reboot: BTreeMap<String, String>,
    /// Set once the node is back (and its health gate passed), as it is given back; not after a
    /// drain that timed out.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub after_reboot: BTreeMap<String, String>,
}

/// kured's blocking conditions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RebootBlockers {
    /// A running pod on the node that matches any of these selectors holds the node's reboot
    /// (kured's `--blocking-pod-selector`), in every namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pod_selectors: Vec<LabelSelector>,
    /// Alerts firing in Prometheus hold every reboot of the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<PrometheusBlocker>,
}

/// Asked over the Prometheus HTTP API (`/api/v1/query?query=ALERTS`). An unreachable server, or
/// an answer that cannot be read, blocks too.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusBlocker {
    /// Base URL, for example `http://prometheus.monitoring:9090`.
    pub url: String,
    /// A regular expression over alert names: matching alerts are ignored (or, with
    /// `matchOnly`, the only ones that count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_filter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_only: Option<bool>,
    /// Pending alerts do not count (default true).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firing_only: Option<bool>,
}

/// `RebootPolicy.status`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RebootPolicyStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Nodes that want a reboot and have not started it.
    #[serde(default)]
    pub wanting: i64,
    /// Nodes between the start of their drain and the end of their health gate.
    #[serde(default)]
    pub rebooting: i64,
    /// Every node the policy is doing something about, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<RebootNodeStatus>,
    /// The nodes rebooted most recently (back, Ready and healthy), newest first; at most 20.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rebooted: Vec<RebootRecord>,
    /// `Validated` and `Progressing`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The health checks of `spec.healthChecks`, as last read (they are read while a node waits).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<HealthCheckStatus>,
    /// Set while a failure stopped the policy (`failurePolicy.action: Stop`): why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// The value of the policy's `slipway.dev/reset-failures` annotation last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures_reset: Option<String>,
    /// With `spec.disruption.prePull`: the pull of the reboot pod's image on the nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_pull: Option<crate::node::prepull::PrePullStatus>,
}

/// What a failed reboot does to the policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RebootFailurePolicy {
    /// `Hold` (the default): a node that does not come back keeps its slot, a drain that timed
    /// out is tried again later, other nodes go on. `Stop`: no node starts its reboot after a
    /// failure until the policy changes or its failures are reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<RebootFailureAction>,
}

/// What a failure does.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum RebootFailureAction {
    Hold,
    Stop,
}

/// A node the policy rebooted.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RebootRecord {
    pub name: String,
    /// When it was back (RFC 3339).
    pub at: String,
    /// Which signal asked for the reboot.
    pub signal: Signal,
    /// The boot it came back with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
}

/// What asked for a node's reboot.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum Signal {
    /// `slipway agent`'s annotation, made at the node's current boot.
    #[default]
    Agent,
    /// FLUO's update-agent: slipway grants `reboot-ok` and the agent reboots.
    Flatcar,
    /// CLUO's update-agent, the same protocol under its own prefix.
    ContainerLinux,
    /// A Node condition the policy names (Node Problem Detector) became `True`.
    NodeCondition,
    /// kured's lock named the node: a reboot kured started, taken over (docs/migrating.md).
    Kured,
}

/// Where a node of the policy is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum RebootPhase {
    /// It asked for a reboot and waits for a slot (or the policy is paused).
    #[default]
    Wanting,
    /// It waits for the policy's window to open.
    WaitingForWindow,
    /// Something holds its reboot: another operation, blocking pods, firing alerts.
    Blocked,
    /// Cordoned and being drained.
    Draining,
    /// Told to reboot; waiting for a new boot ID and Ready.
    Rebooting,
    /// Back with a new boot ID; waiting for the health gate's pods.
    WaitingForHealth,
    /// Its drain or its hand-off timed out.
    Failed,
    /// A phase this version does not know (written by another version of slipway).
    #[serde(other)]
    #[schemars(skip)]
    Unknown,
}

impl RebootPhase {
    /// The phase as the status writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            RebootPhase::Wanting => "Wanting",
            RebootPhase::WaitingForWindow => "WaitingForWindow",
            RebootPhase::Blocked => "Blocked",
            RebootPhase::Draining => "Draining",
            RebootPhase::Rebooting => "Rebooting",
            RebootPhase::WaitingForHealth => "WaitingForHealth",
            RebootPhase::Failed => "Failed",
            RebootPhase::Unknown => "Unknown",
        }
    }
}

/// One node of the policy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RebootNodeStatus {
    pub name: String,
    pub phase: RebootPhase,
    /// Since when the node is in this phase (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Which signal asked for the reboot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<Signal>,
    /// The boot ID the node ran when its reboot started; a different one means it rebooted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The node's cordon is the policy's to give back without the node annotation
    /// `slipway.dev/cordoned-by` saying so: written by slipway before that annotation existed,
    /// and for a node kured cordoned that was schedulable before (signal `kured`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordoned: Option<bool>,
    /// Why the node waits, or why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The CRD of `rebootpolicies.slipway.dev`.
pub fn reboot_policy_crd() -> CustomResourceDefinition {
    with_rules(RebootPolicy::crd(), add_rules)
}

/// The CRD as YAML, exactly as committed in `crds/`.
pub fn reboot_policy_crd_yaml() -> Result<String, crate::Error> {
    serde_saphyr::to_string(&reboot_policy_crd()).map_err(|e| crate::Error::Yaml(e.to_string()))
}

fn add_rules(root: &mut Value) {
    let spec = "/properties/spec";
    extend(root, &format!("{spec}/properties/concurrency"), |s| {
        push_rule(s, rule("self >= 1", "spec.concurrency must be at least 1"));
    });
    window_rules(root, &format!("{spec}/properties/window"));
    positive_duration(root, &format!("{spec}/properties/timeout"), "spec.timeout");
    let disruption = format!("{spec}/properties/disruption");
    crate::node::disruption::crd_rules(root, &disruption, "spec.disruption");
    positive_duration(root, &format!("{spec}/properties/soak"), "spec.soak");
    crate::common::crd::health_check_rules(
        root,
        &format!("{spec}/properties/healthChecks"),
        "spec.healthChecks",
    );
    positive_duration(
        root,
        &format!("{spec}/properties/drain/properties/timeout"),
        "spec.drain.timeout",
    );
    positive_duration(
        root,
        &format!("{spec}/properties/drain/properties/delay"),
        "spec.drain.delay",
    );
    positive_duration(
        root,
        &format!("{spec}/properties/drain/properties/skipWaitForDeleteTimeout"),
        "spec.drain.skipWaitForDeleteTimeout",
    );
    positive_duration(
        root,
        &format!("{spec}/properties/healthGate/properties/timeout"),
        "spec.healthGate.timeout",
    );
    extend(
        root,
        &format!("{spec}/properties/drain/properties/gracePeriodSeconds"),
        |s| {
            push_rule(
                s,
                rule(
                    "self >= 0",
                    "spec.drain.gracePeriodSeconds must not be negative",
                ),
            );
        },
    );
    extend(
        root,
        &format!("{spec}/properties/signals/properties/nodeConditions"),
        |s| {
            s["maxItems"] = json!(32);
            s["items"]["maxLength"] = json!(316);
            s["items"]["minLength"] = json!(1);
        },
    );
    extend(
        root,
        &format!("{spec}/properties/blocking/properties/podSelectors"),
        |s| {
            s["maxItems"] = json!(32);
        },
    );
    extend(
        root,
        &format!("{spec}/properties/blocking/properties/prometheus/properties/url"),
        |s| {
            s["maxLength"] = json!(2048);
            push_rule(
                s,
                rule(
                    "self.startsWith('http://') || self.startsWith('https://')",
                    "spec.blocking.prometheus.url must be an http:// or https:// URL",
                ),
            );
        },
    );
    extend(root, &format!("{spec}/properties/image"), |s| {
        push_rule(s, rule("self != ''", "spec.image must not be empty"));
    });
    map_list(root, "/properties/status/properties/nodes", "name");
    map_list(root, "/properties/status/properties/conditions", "type");
}
