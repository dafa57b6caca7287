//! `DisruptionBudget` (`slipway.dev/v1alpha1`, cluster-scoped): how many nodes of a pool may be
//! unavailable at once, whatever makes them so, and the ledger of who holds which node.
//!
//! A node of the pool counts as unavailable while any slipway operation holds it, while it is not
//! Ready, or while it is cordoned (by anyone) or held by the `slipway.dev/hold` annotation. Every
//! operation whose reason the budget covers asks it before it starts a node: a node that is
//! available takes one unit of room, in every budget that selects it.

// kube's `printcolumn(...)` repeats `type_ = ...`, which clippy mistakes for a duplicated attribute.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::common::condition::Condition;
use crate::common::crd::{extend, map_list, positive_duration, push_rule, rule, with_rules};

/// `DisruptionBudget.spec`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "slipway.dev",
    version = "v1alpha1",
    kind = "DisruptionBudget",
    plural = "disruptionbudgets",
    singular = "disruptionbudget",
    shortname = "dbudget",
    status = "DisruptionBudgetStatus",
    derive = "Default",
    derive = "PartialEq",
    doc = "How many nodes of a pool may be unavailable at once, for which operations, and when.",
    printcolumn(name = "Nodes", type_ = "integer", json_path = ".status.nodes"),
    printcolumn(name = "Max", type_ = "integer", json_path = ".status.maxUnavailable"),
    printcolumn(
        name = "Unavailable",
        type_ = "integer",
        json_path = ".status.unavailable"
    ),
    printcolumn(name = "Allowed", type_ = "integer", json_path = ".status.allowed"),
    printcolumn(name = "Halted", type_ = "boolean", json_path = ".spec.halt"),
    printcolumn(
        name = "Schedule",
        type_ = "string",
        json_path = ".status.schedule.name"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionBudgetSpec {
    /// The nodes of the pool; every node when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<LabelSelector>,
    /// How many nodes of the pool may be unavailable at once: a number, or a percentage of the
    /// pool's nodes (`"10%"`), rounded up as Kubernetes rounds a PodDisruptionBudget's
    /// percentage `maxUnavailable`.
    pub max_unavailable: IntOrString,
    /// The operations that must ask this budget before they start a node: `upgrade` (Plans),
    /// `reboot` (RebootPolicies), `maintenance` (NodeMaintenances), `nodeop` (NodeOps). Every
    /// operation when absent. Unavailable nodes count whatever made them so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasons: Option<Vec<Reason>>,
    /// Recurring periods with their own `maxUnavailable` (0 freezes the pool). When several are
    /// in force, the smallest wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedules: Vec<BudgetSchedule>,
    /// The kill switch: no operation starts a node of the pool (the ones under way finish).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub halt: Option<bool>,
}

/// Why slipway takes a node: the operation that does.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum Reason {
    /// A Plan's upgrade.
    Upgrade,
    /// A reboot a RebootPolicy grants.
    Reboot,
    /// A NodeMaintenance.
    Maintenance,
    /// A NodeOp (kairos-operator's API).
    Nodeop,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Upgrade => "upgrade",
            Reason::Reboot => "reboot",
            Reason::Maintenance => "maintenance",
            Reason::Nodeop => "nodeop",
        }
    }
}

/// A recurring period with its own `maxUnavailable`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetSchedule {
    /// A name for the status and messages; `schedules[i]` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// When the period starts: five-field cron (minute hour day-of-month month day-of-week) or a
    /// macro such as `@daily`, in `timeZone`.
    pub schedule: String,
    /// How long it lasts (a Go duration such as `8h`).
    pub duration: String,
    /// IANA time zone of `schedule`; UTC when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// The pool's `maxUnavailable` while the period lasts.
    pub max_unavailable: IntOrString,
}

/// `DisruptionBudget.status`: the ledger.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DisruptionBudgetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Nodes in the pool.
    #[serde(default)]
    pub nodes: i64,
    /// The `maxUnavailable` in force, in nodes.
    #[serde(default)]
    pub max_unavailable: i64,
    /// Nodes of the pool unavailable now.
    #[serde(default)]
    pub unavailable: i64,
    /// How many more nodes may be taken now (0 while halted).
    #[serde(default)]
    pub allowed: i64,
    /// The schedule in force, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<ScheduleInForce>,
    /// When the `maxUnavailable` in force changes next (a schedule starts or ends; RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_change: Option<String>,
    /// Every unavailable node of the pool: who holds it, since when, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<LedgerEntry>,
    /// `Validated`, and `Halted` while the kill switch is on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The schedule whose period is in force.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleInForce {
    pub name: String,
    /// Its `maxUnavailable`, in nodes.
    pub max_unavailable: i64,
    /// RFC 3339.
    pub since: String,
    pub until: String,
}

/// One unavailable node of the pool.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntry {
    pub node: String,
    /// Who holds it: `plan/<namespace>/<name>`, `nodemaintenance/<name>`, `rebootpolicy/<name>`,
    /// `nodeop/<namespace>/<name>`, `hold/<who>` (the `slipway.dev/hold` annotation), or
    /// `cordoned` / `notReady` for a node no slipway operation holds.
    pub holder: String,
    /// `upgrade`, `reboot`, `maintenance`, `nodeop`, `hold`, `cordoned` or `notReady`.
    pub reason: String,
    /// Since when the ledger has seen it so (RFC 3339).
    pub since: String,
    /// What the holder says about it, when it says something.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The CRD of `disruptionbudgets.slipway.dev`.
pub fn disruption_budget_crd() -> CustomResourceDefinition {
    with_rules(DisruptionBudget::crd(), add_rules)
}

/// The CRD as YAML, exactly as committed in `crds/`.
pub fn disruption_budget_crd_yaml() -> Result<String, crate::Error> {
    serde_saphyr::to_string(&disruption_budget_crd()).map_err(|e| crate::Error::Yaml(e.to_string()))
}

/// A number of nodes (at least 0) or a percentage from 0% to 100%.
const MAX_UNAVAILABLE_RULE: &str =
    "type(self) == int ? self >= 0 : self.matches('^(100|[1-9]?[0-9])%$')";

fn max_unavailable(root: &mut Value, pointer: &str, field: &str) {
    extend(root, pointer, |s| {
        // Bounds the rule's cost ("100%" is the longest valid string).
        s["maxLength"] = json!(4);
        push_rule(
            s,
            rule(
                MAX_UNAVAILABLE_RULE,
                &format!(
                    "{field} must be a number of nodes (0 or more) or a percentage such as 10%"
                ),
            ),
        );
    });
}

fn add_rules(root: &mut Value) {
    let spec = "/properties/spec";
    max_unavailable(
        root,
        &format!("{spec}/properties/maxUnavailable"),
        "spec.maxUnavailable",
    );
    extend(root, &format!("{spec}/properties/reasons"), |s| {
        s["maxItems"] = json!(4);
        s["x-kubernetes-list-type"] = json!("set");
    });
    extend(root, &format!("{spec}/properties/schedules"), |s| {
        s["maxItems"] = json!(16);
    });
    let item = format!("{spec}/properties/schedules/items");
    max_unavailable(
        root,
        &format!("{item}/properties/maxUnavailable"),
        "spec.schedules[].maxUnavailable",
    );
    for (key, max) in [("schedule", 128), ("name", 63), ("timeZone", 64)] {
        extend(root, &format!("{item}/properties/{key}"), |s| {
            s["minLength"] = json!(1);
            s["maxLength"] = json!(max);
        });
    }
    positive_duration(
        root,
        &format!("{item}/properties/duration"),
        "spec.schedules[].duration",
    );
    map_list(root, "/properties/status/properties/conditions", "type");
}
