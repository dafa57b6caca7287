//! What `slipway status` shows of each resource, built from what it read, and its text form.
//! Pure: the shell in `status.rs` reads the cluster.

use k8s_openapi::api::batch::v1::Job;
use serde::Serialize;
use slipway::common::selector::Selector;
use slipway::maintenance::api::NodeMaintenance;
use slipway::node::NodeInfo;
use slipway::nodeop::api::NodeOp;
use slipway::plan::api::{Plan, labels};
use slipway::plan::core::failure::{FailurePolicy, quarantined_at};
use slipway::reboot_policy::api::{RebootNodeStatus, RebootPolicy, RebootRecord};

/// One resource's status, tagged with its kind in JSON and YAML.
#[derive(Serialize, PartialEq, Debug)]
#[serde(tag = "kind")]
pub enum Report {
    Plan(PlanReport),
    NodeMaintenance(MaintenanceReport),
    RebootPolicy(RebootPolicyReport),
    NodeOp(NodeOpReport),
}

/// A condition of any of the kinds, in the words they share.
#[derive(Serialize, PartialEq, Debug)]
#[serde(rename_all = "camelCase")]
pub struct ConditionReport {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Serialize, PartialEq, Debug)]
#[serde(rename_all = "camelCase")]
pub struct PlanReport {
    pub name: String,
    pub namespace: String,
    pub latest_version: Option<String>,
    pub latest_hash: Option<String>,
    pub conditions: Vec<ConditionReport>,
    /// Selected nodes labelled with the latest hash.
    pub done: usize,
    pub applying: usize,
    pub remaining: usize,
    pub nodes: Vec<PlanNodeReport>,
    /// `spec.failurePolicy` in words, when the Plan has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<String>,
    /// Selected nodes the failure policy quarantined at the latest hash.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quarantined: Vec<String>,
    /// The health checks as the controller last read them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<slipway::common::check::HealthCheckStatus>,
    /// The hooks' runs at the latest hash.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hooks: Option<Box<slipway::plan::api::HooksStatus>>,
}

#[derive(Serialize, PartialEq, Debug)]
#[serde(rename_all = "camelCase")]
pub struct PlanNodeReport {
    pub name: String,
    pub phase: String,
    pub since: Option<String>,
    pub job: Option<String>,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// The Job's failure message, when it failed.
    pub job_failure: Option<String>,
    /// Failed Jobs recreated by the failure policy, and Jobs killed by the node's reboot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reboot_retries: Option<i32>,
    /// When a `Retrying` node's Job is created again.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
}

#[derive(Serialize, PartialEq, Debug)]
#[serde(rename_all = "camelCase")]
pub struct MaintenanceReport {
    pub name: String,
    pub node: String,
    /// `spec.reason`: why the node is in maintenance.
    pub reason: Option<String>,
    /// `Running`, `Succeeded` or `Failed`; none before the controller first wrote the status.
    pub phase: Option<String>,
    /// Percent of the pods to evict that are gone.
    pub drain_progress: Option<i64>,
    pub conditions: Vec<ConditionReport>,
    /// The pods still to be evicted, with why they are still there when known.
    pub pending_pods: Vec<PendingPod>,
    pub last_error: Option<String>,
}

#[derive(Serialize, PartialEq, Debug)]
#[serde(rename_all = "camelCase")]
pub struct PendingPod {
    pub namespace: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Serialize, PartialEq, Debug)]
#[serde(rename_all = "camelCase")]
pub struct RebootPolicyReport {
    pub name: String,
    pub paused: bool,
    pub wanting: i64,
    pub rebooting: i64,
    pub conditions: Vec<ConditionReport>,
    pub nodes: Vec<RebootNodeStatus>,
    /// The latest reboots, newest first.
    pub rebooted: Vec<RebootRecord>,
    /// Why a failure stopped the policy (`failurePolicy.action: Stop`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub health_checks: Vec<slipway::common::check::HealthCheckStatus>,
}

#[derive(Serialize, PartialEq, Debug)]
#[serde(rename_all = "camelCase")]
pub struct NodeOpReport {
    pub name: String,
    pub namespace: String,
    /// `Running`, `Completed` or `Failed`; none before the controller first wrote the status.
    pub phase: Option<String>,
    /// Why the nodes not started yet wait.
    pub message: Option<String>,
    pub nodes: Vec<NodeOpNodeReport>,
}

#[derive(Serialize, PartialEq, Debug)]
#[serde(rename_all = "camelCase")]
pub struct NodeOpNodeReport {
    pub name: String,
    pub phase: String,
    pub job: Option<String>,
    pub reboot_status: Option<String>,
    pub message: Option<String>,
}

/// How many of a RebootPolicy's latest reboots the text shows (JSON and YAML have them all).
const REBOOTS_SHOWN: usize = 3;

fn text_or_none(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// A Plan's progress over the cluster's nodes and the Jobs of its namespace.
pub fn plan_report(plan: &Plan, nodes: &[NodeInfo], jobs: &[Job]) -> PlanReport {
    let name = plan.metadata.name.clone().unwrap_or_default();
    let st = plan.status.clone().unwrap_or_default();
    let hash = st.latest_hash.clone().unwrap_or_default();
    let label = labels::plan_node_label(&name);
    let selector = Selector::from_label_selector(plan.spec.node_selector.as_ref())
        .unwrap_or(Selector::Nothing);
    let selected: Vec<&NodeInfo> = nodes
        .iter()
        .filter(|n| selector.matches(&n.labels))
        .filter(|n| n.labels.get(&label).map(String::as_str) != Some(labels::DISABLED))
        .collect();
    let done = selected
        .iter()
        .filter(|n| !hash.is_empty() && n.labels.get(&label) == Some(&hash))
        .count();
    PlanReport {
        name,
        namespace: plan.metadata.namespace.clone().unwrap_or_default(),
        latest_version: st.latest_version.clone(),
        latest_hash: st.latest_hash.clone(),
        conditions: st
            .conditions
            .iter()
            .map(|c| ConditionReport {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone().filter(|r| !r.is_empty()),
                message: c.message.clone().filter(|m| !m.is_empty()),
            })
            .collect(),
        done,
        applying: st.applying.len(),
        remaining: selected.len().saturating_sub(done + st.applying.len()),
        nodes: st
            .nodes
            .iter()
            .map(|p| PlanNodeReport {
                name: p.name.clone(),
                phase: p.phase.to_string(),
                since: p.since.clone(),
                job: p.job.clone(),
                reason: p.reason.clone(),
                message: p.message.clone(),
                job_failure: p.job.as_ref().and_then(|j| failure(jobs, j)),
                retries: p.retries,
                reboot_retries: p.reboot_retries,
                retry_at: p.retry_at.clone(),
            })
            .collect(),
        failure_policy: plan.spec.failure_policy.as_ref().map(|spec| {
            FailurePolicy::of(Some(spec)).map_or_else(|e| format!("invalid: {e}"), |p| p.describe())
        }),
        quarantined: selected
            .iter()
            .filter(|n| {
                !hash.is_empty() && quarantined_at(n, &name_of(plan)) == Some(hash.as_str())
            })
            .map(|n| n.name.clone())
            .collect(),
        health_checks: plan
            .status
            .as_ref()
            .map(|s| s.health_checks.clone())
            .unwrap_or_default(),
        hooks: plan
            .status
            .as_ref()
            .and_then(|s| s.hooks.clone())
            .map(Box::new),
    }
}

fn name_of(plan: &Plan) -> String {
    plan.metadata.name.clone().unwrap_or_default()
}

fn failure(jobs: &[Job], name: &str) -> Option<String> {
    let job = jobs
        .iter()
        .find(|j| j.metadata.name.as_deref() == Some(name))?;
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .map(|c| {
            format!(
                "{}: {}",
                c.reason.as_deref().unwrap_or_default(),
                c.message.as_deref().unwrap_or_default()
            )
        })
}

fn conditions(list: &[slipway::common::condition::Condition]) -> Vec<ConditionReport> {
    list.iter()
        .map(|c| ConditionReport {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: text_or_none(&c.reason),
            message: text_or_none(&c.message),
        })
        .collect()
}

pub fn maintenance_report(m: &NodeMaintenance) -> MaintenanceReport {
    let st = m.status.clone().unwrap_or_default();
    // The reasons name every pending pod when the controller gives them; NMO gives only names.
    let pending_pods = if !st.pending_pods_reasons.is_empty() {
        st.pending_pods_reasons
            .iter()
            .map(|p| PendingPod {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                reason: text_or_none(&p.reason),
            })
            .collect()
    } else if !st.pending_pods_refs.is_empty() {
        st.pending_pods_refs
            .iter()
            .map(|p| PendingPod {
                namespace: p.namespace.clone(),
                name: p.name.clone(),
                reason: None,
            })
            .collect()
    } else {
        st.pending_pods
            .iter()
            .map(|name| PendingPod {
                namespace: String::new(),
                name: name.clone(),
                reason: None,
            })
            .collect()
    };
    MaintenanceReport {
        name: m.metadata.name.clone().unwrap_or_default(),
        node: m.spec.node_name.clone(),
        reason: m.spec.reason.clone().filter(|r| !r.is_empty()),
        phase: st.phase.map(|p| p.as_str().to_string()),
        drain_progress: st.drain_progress,
        conditions: conditions(&st.conditions),
        pending_pods,
        last_error: st.last_error.clone().filter(|e| !e.is_empty()),
    }
}

pub fn reboot_policy_report(p: &RebootPolicy) -> RebootPolicyReport {
    let st = p.status.clone().unwrap_or_default();
    RebootPolicyReport {
        name: p.metadata.name.clone().unwrap_or_default(),
        paused: p.spec.paused.unwrap_or(false),
        wanting: st.wanting,
        rebooting: st.rebooting,
        conditions: conditions(&st.conditions),
        nodes: st.nodes,
        rebooted: st.rebooted,
        stopped: st.stopped,
        health_checks: st.health_checks,
    }
}

pub fn nodeop_report(op: &NodeOp) -> NodeOpReport {
    let st = op.status.clone().unwrap_or_default();
    NodeOpReport {
        name: op.metadata.name.clone().unwrap_or_default(),
        namespace: op.metadata.namespace.clone().unwrap_or_default(),
        phase: st.phase,
        message: st.message,
        nodes: (st.node_statuses.into_iter())
            .map(|(name, n)| NodeOpNodeReport {
                name,
                phase: n.phase,
                job: n.job_name,
                reboot_status: n.reboot_status,
                message: n.message,
            })
            .collect(),
    }
}

/// The reports for people: a line per resource, then its conditions and nodes, indented.
/// `nothing` is what to say when there is no report.
pub fn text(reports: &[Report], nothing: &str) -> String {
    let mut out = String::new();
    for r in reports {
        match r {
            Report::Plan(p) => plan_text(p, &mut out),
            Report::NodeMaintenance(m) => maintenance_text(m, &mut out),
            Report::RebootPolicy(p) => reboot_policy_text(p, &mut out),
            Report::NodeOp(op) => nodeop_text(op, &mut out),
        }
    }
    if reports.is_empty() {
        out.push_str(nothing);
    }
    out.trim_end().to_string()
}

fn condition_lines(conditions: &[ConditionReport], out: &mut String) {
    for c in conditions {
        let why = [c.reason.as_deref(), c.message.as_deref()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(": ");
        out.push_str(format!("  {}={}  {why}", c.type_, c.status).trim_end());
        out.push('\n');
    }
}

fn plan_text(r: &PlanReport, out: &mut String) {
    out.push_str(&format!(
        "plan/{}  version {}  done {}  applying {}  remaining {}\n",
        r.name,
        r.latest_version.as_deref().unwrap_or("-"),
        r.done,
        r.applying,
        r.remaining
    ));
    condition_lines(&r.conditions, out);
    if let Some(policy) = &r.failure_policy {
        out.push_str(&format!("  failure policy: {policy}\n"));
    }
    if !r.quarantined.is_empty() {
        out.push_str(&format!("  quarantined: {}\n", r.quarantined.join(", ")));
    }
    health_check_lines(&r.health_checks, out);
    let hooks = r
        .hooks
        .iter()
        .flat_map(|h| [("pre", &h.pre), ("post", &h.post)]);
    for (which, hook) in hooks {
        if let Some(h) = hook {
            let why = h
                .message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {which} hook  {:?}{why}  job {}  since {}\n",
                h.phase,
                h.job,
                h.since.as_deref().unwrap_or("-")
            ));
        }
    }
    for n in &r.nodes {
        let mut line = format!(
            "  node {}  {}  since {}  job {}",
            n.name,
            n.phase,
            n.since.as_deref().unwrap_or("-"),
            n.job.as_deref().unwrap_or("-")
        );
        if let Some(at) = &n.retry_at {
            line.push_str(&format!("  retry {} at {at}", n.retries.unwrap_or(0)));
        }
        if let Some(m) = n.job_failure.as_ref().or(n.message.as_ref()) {
            line.push_str(&format!("  {m}"));
        }
        out.push_str(&line);
        out.push('\n');
    }
}

fn maintenance_text(m: &MaintenanceReport, out: &mut String) {
    let mut line = format!(
        "nodemaintenance/{}  node {}  {}",
        m.name,
        m.node,
        m.phase.as_deref().unwrap_or("-")
    );
    if let Some(p) = m.drain_progress {
        line.push_str(&format!("  drained {p}%"));
    }
    if let Some(r) = &m.reason {
        line.push_str(&format!("  reason: {r}"));
    }
    out.push_str(&line);
    out.push('\n');
    condition_lines(&m.conditions, out);
    for p in &m.pending_pods {
        let pod = if p.namespace.is_empty() {
            p.name.clone()
        } else {
            format!("{}/{}", p.namespace, p.name)
        };
        match &p.reason {
            Some(why) => out.push_str(&format!("  pending pod {pod}: {why}\n")),
            None => out.push_str(&format!("  pending pod {pod}\n")),
        }
    }
    if let Some(e) = &m.last_error {
        out.push_str(&format!("  last error: {e}\n"));
    }
}

/// A line per health check: whether it holds, why not, since when.
fn health_check_lines(checks: &[slipway::common::check::HealthCheckStatus], out: &mut String) {
    for c in checks {
        let state = match (c.healthy, c.timed_out) {
            (true, false) => "holds".to_string(),
            (true, true) => "holds, timed out earlier".to_string(),
            (false, timed_out) => format!(
                "fails{}: {}",
                if timed_out { " (timed out)" } else { "" },
                c.message.as_deref().unwrap_or("-")
            ),
        };
        let since = c.since.as_deref().unwrap_or("-");
        out.push_str(&format!(
            "  health check {}  {state}  since {since}\n",
            c.name
        ));
    }
}

fn reboot_policy_text(p: &RebootPolicyReport, out: &mut String) {
    out.push_str(&format!(
        "rebootpolicy/{}  wanting {}  rebooting {}{}\n",
        p.name,
        p.wanting,
        p.rebooting,
        if p.paused { "  paused" } else { "" }
    ));
    condition_lines(&p.conditions, out);
    if let Some(why) = &p.stopped {
        out.push_str(&format!("  stopped: {why}\n"));
    }
    health_check_lines(&p.health_checks, out);
    for n in &p.nodes {
        let mut line = format!(
            "  node {}  {:?}  since {}",
            n.name,
            n.phase,
            n.since.as_deref().unwrap_or("-")
        );
        if let Some(s) = n.signal {
            line.push_str(&format!("  signal {}", signal(s)));
        }
        let why = [n.reason.as_deref(), n.message.as_deref()]
            .into_iter()
            .flatten()
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(": ");
        if !why.is_empty() {
            line.push_str(&format!("  {why}"));
        }
        out.push_str(&line);
        out.push('\n');
    }
    for r in p.rebooted.iter().take(REBOOTS_SHOWN) {
        out.push_str(&format!(
            "  rebooted {} at {} ({})\n",
            r.name,
            r.at,
            signal(r.signal)
        ));
    }
}

fn nodeop_text(op: &NodeOpReport, out: &mut String) {
    out.push_str(&format!(
        "nodeop/{}/{}  {}\n",
        op.namespace,
        op.name,
        op.phase.as_deref().unwrap_or("-")
    ));
    if let Some(m) = &op.message {
        out.push_str(&format!("  {m}\n"));
    }
    for n in &op.nodes {
        let mut line = format!("  node {}  {}", n.name, n.phase);
        if let Some(r) = n.reboot_status.as_deref().filter(|r| *r != "not-requested") {
            line.push_str(&format!("  reboot {r}"));
        }
        if let Some(j) = &n.job {
            line.push_str(&format!("  job {j}"));
        }
        if let Some(m) = n.message.as_deref().filter(|m| !m.is_empty()) {
            line.push_str(&format!("  {m}"));
        }
        out.push_str(&line);
        out.push('\n');
    }
}

/// A signal as the API writes it (`agent`, `flatcar`, `containerLinux`, `nodeCondition`, `kured`).
fn signal(s: slipway::reboot_policy::api::Signal) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{s:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml<T: serde::de::DeserializeOwned>(text: &str) -> T {
        serde_saphyr::from_str(text).expect("yaml")
    }

    #[test]
    fn a_plan_counts_its_selected_nodes() {
        let plan: Plan = yaml(
            "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata:\n  name: p\n  namespace: ns\nspec:\n  concurrency: 1\n  nodeSelector:\n    matchLabels:\n      pool: a\n  upgrade:\n    image: busybox\nstatus:\n  latestVersion: v1\n  latestHash: h1\n  applying: [n2]\n  nodes:\n  - name: n2\n    phase: Upgrading\n    job: j2\n  conditions:\n  - type: Complete\n    status: \"False\"\n    reason: Applying\n    message: \"\"\n",
        );
        let node = |name: &str, labels: &[(&str, &str)]| {
            let mut n = NodeInfo {
                name: name.to_string(),
                ..Default::default()
            };
            for (k, v) in labels {
                n.labels.insert(k.to_string(), v.to_string());
            }
            n
        };
        let nodes = [
            node("n1", &[("pool", "a"), ("plan.upgrade.cattle.io/p", "h1")]),
            node("n2", &[("pool", "a")]),
            node("n3", &[("pool", "a")]),
            node("n4", &[("pool", "b")]),
            node(
                "n5",
                &[("pool", "a"), ("plan.upgrade.cattle.io/p", "disabled")],
            ),
        ];
        let job: Job = yaml(
            "metadata:\n  name: j2\nstatus:\n  conditions:\n  - type: Failed\n    status: \"True\"\n    reason: BackoffLimitExceeded\n    message: gave up\n",
        );
        let r = plan_report(&plan, &nodes, &[job]);
        assert_eq!((r.done, r.applying, r.remaining), (1, 1, 1));
        assert_eq!(r.namespace, "ns");
        assert_eq!(
            r.nodes[0].job_failure.as_deref(),
            Some("BackoffLimitExceeded: gave up")
        );
        assert_eq!(r.conditions[0].message, None);
        let text = text(&[Report::Plan(r)], "");
        assert_eq!(
            text,
            "plan/p  version v1  done 1  applying 1  remaining 1\n  Complete=False  Applying\n  node n2  Upgrading  since -  job j2  BackoffLimitExceeded: gave up"
        );
    }

    #[test]
    fn a_plan_shows_its_failure_policy_what_it_quarantined_and_when_it_retries() {
        let plan: Plan = yaml(
            "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata:\n  name: p\n  namespace: ns\nspec:\n  concurrency: 1\n  nodeSelector: {}\n  upgrade:\n    image: busybox\n  failurePolicy:\n    action: Retry\n    retries: 2\n    backoff: 1m\n    then: Quarantine\nstatus:\n  latestVersion: v1\n  latestHash: h1\n  applying: [n2]\n  nodes:\n  - name: n2\n    phase: Retrying\n    job: j2\n    retries: 1\n    retryAt: \"2026-11-23T10:00:00Z\"\n",
        );
        let n1 = NodeInfo {
            name: "n1".into(),
            labels: [("quarantine.slipway.dev/p".to_string(), "h1".to_string())].into(),
            ..Default::default()
        };
        let n2 = NodeInfo {
            name: "n2".into(),
            ..Default::default()
        };
        let mut plan = plan;
        if let Some(st) = plan.status.as_mut() {
            st.health_checks = vec![slipway::common::check::HealthCheckStatus {
                name: "ConfigMap ops/gate".into(),
                healthy: false,
                message: Some("the expression is false".into()),
                since: Some("2026-11-23T09:00:00Z".into()),
                timed_out: false,
            }];
            st.hooks = Some(slipway::plan::api::HooksStatus {
                pre: Some(slipway::plan::api::HookStatus {
                    hash: "h1".into(),
                    job: "p-pre-hook-h1-1".into(),
                    attempt: 1,
                    phase: slipway::plan::api::HookPhase::Failed,
                    message: Some("BackoffLimitExceeded: snapshot failed".into()),
                    since: Some("2026-11-23T08:00:00Z".into()),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        let r = plan_report(&plan, &[n1, n2], &[]);
        assert_eq!(r.quarantined, ["n1"]);
        let text = text(&[Report::Plan(r)], "");
        assert_eq!(
            text,
            "plan/p  version v1  done 0  applying 1  remaining 1\n  failure policy: Retry 2 times (1m0s, doubling), then Quarantine (at most 1 node)\n  quarantined: n1\n  health check ConfigMap ops/gate  fails: the expression is false  since 2026-11-23T09:00:00Z\n  pre hook  Failed: BackoffLimitExceeded: snapshot failed  job p-pre-hook-h1-1  since 2026-11-23T08:00:00Z\n  node n2  Retrying  since -  job j2  retry 1 at 2026-11-23T10:00:00Z"
        );
    }

    #[test]
    fn a_node_maintenance_names_its_pending_pods() {
        let m: NodeMaintenance = yaml(
            "apiVersion: nodemaintenance.medik8s.io/v1beta1\nkind: NodeMaintenance\nmetadata:\n  name: m\nspec:\n  nodeName: w1\n  reason: disk\nstatus:\n  phase: Running\n  drainProgress: 50\n  pendingPods: [web-1]\n  pendingPodsRefs:\n  - {namespace: shop, name: web-1}\n  pendingPodsReasons:\n  - {namespace: shop, name: web-1, reason: \"PodDisruptionBudget shop/web allows no disruption\"}\n  lastError: evictions blocked\n  conditions:\n  - type: Drained\n    status: \"False\"\n    reason: Blocked\n    message: 1 pod left\n    lastTransitionTime: \"2026-01-01T00:00:00Z\"\n",
        );
        let r = maintenance_report(&m);
        assert_eq!(r.phase.as_deref(), Some("Running"));
        let json = serde_json::to_value(Report::NodeMaintenance(r)).expect("json");
        assert_eq!(json["kind"], "NodeMaintenance");
        assert_eq!(json["drainProgress"], 50);
        assert_eq!(json["pendingPods"][0]["namespace"], "shop");
        let r = maintenance_report(&m);
        assert_eq!(
            text(&[Report::NodeMaintenance(r)], ""),
            "nodemaintenance/m  node w1  Running  drained 50%  reason: disk\n  Drained=False  Blocked: 1 pod left\n  pending pod shop/web-1: PodDisruptionBudget shop/web allows no disruption\n  last error: evictions blocked"
        );
        // Before the controller wrote a status, and with NMO's names only.
        let mut fresh = m.clone();
        fresh.status = None;
        assert_eq!(
            text(&[Report::NodeMaintenance(maintenance_report(&fresh))], ""),
            "nodemaintenance/m  node w1  -  reason: disk"
        );
        let mut nmo = m;
        if let Some(s) = nmo.status.as_mut() {
            s.pending_pods_reasons.clear();
            s.pending_pods_refs.clear();
        }
        let r = maintenance_report(&nmo);
        assert_eq!(r.pending_pods[0].name, "web-1");
        assert_eq!(r.pending_pods[0].reason, None);
    }

    #[test]
    fn a_reboot_policy_shows_its_nodes_and_latest_reboots() {
        let p: RebootPolicy = yaml(
            "apiVersion: slipway.dev/v1alpha1\nkind: RebootPolicy\nmetadata:\n  name: weekly\nspec:\n  paused: true\nstatus:\n  wanting: 1\n  rebooting: 1\n  nodes:\n  - {name: w1, phase: Draining, since: \"2026-01-01T00:00:00Z\", signal: agent}\n  - {name: w2, phase: Blocked, reason: Alerts, message: KubePodCrashLooping}\n  rebooted:\n  - {name: w3, at: \"2026-01-01T00:00:00Z\", signal: flatcar}\n  - {name: w4, at: \"2025-12-31T00:00:00Z\", signal: agent}\n  - {name: w5, at: \"2025-12-30T00:00:00Z\", signal: agent}\n  - {name: w6, at: \"2025-12-29T00:00:00Z\", signal: agent}\n",
        );
        let r = reboot_policy_report(&p);
        assert_eq!(
            text(&[Report::RebootPolicy(r)], ""),
            "rebootpolicy/weekly  wanting 1  rebooting 1  paused\n  node w1  Draining  since 2026-01-01T00:00:00Z  signal agent\n  node w2  Blocked  since -  Alerts: KubePodCrashLooping\n  rebooted w3 at 2026-01-01T00:00:00Z (flatcar)\n  rebooted w4 at 2025-12-31T00:00:00Z (agent)\n  rebooted w5 at 2025-12-30T00:00:00Z (agent)"
        );
        let json =
            serde_json::to_value(Report::RebootPolicy(reboot_policy_report(&p))).expect("json");
        assert_eq!(json["kind"], "RebootPolicy");
        assert_eq!(json["rebooted"].as_array().map(Vec::len), Some(4));
        assert_eq!(json["nodes"][0]["phase"], "Draining");
    }

    #[test]
    fn a_nodeop_shows_why_its_nodes_wait_and_each_started_node() {
        let op: NodeOp = yaml(
            "apiVersion: operator.kairos.io/v1alpha1\nkind: NodeOp\nmetadata:\n  name: canary\n  namespace: default\nspec:\n  command: [\"true\"]\nstatus:\n  phase: Failed\n  message: \"2 nodes (n2, n3) waits: node n1 failed and spec.stopOnFailure is set\"\n  nodeStatuses:\n    n1: {phase: Failed, jobName: canary-n1-abcde, message: Job failed, rebootStatus: cancelled}\n",
        );
        let r = nodeop_report(&op);
        assert_eq!(
            text(&[Report::NodeOp(r)], ""),
            "nodeop/default/canary  Failed\n  2 nodes (n2, n3) waits: node n1 failed and spec.stopOnFailure is set\n  node n1  Failed  reboot cancelled  job canary-n1-abcde  Job failed"
        );
        let json = serde_json::to_value(Report::NodeOp(nodeop_report(&op))).expect("json");
        assert_eq!(json["kind"], "NodeOp");
        assert_eq!(json["nodes"][0]["rebootStatus"], "cancelled");
    }

    #[test]
    fn nothing_to_show() {
        assert_eq!(text(&[], "no plans"), "no plans");
    }
}
