//! What GitOps tools make of every kind, judged by their own code on what slipway's own cores
//! decide (tests/tools/gitops-health, built from the Go module proxy by its build.sh, cached):
//! kstatus (cli-utils' `Compute`, which Flux's `wait` and health checks use), Argo CD's Lua
//! engine running the health checks of gitops/argocd as argocd-cm would, and wrangler's summary
//! (what Fleet judges a bundle's resources by). Every case says what the object means
//! (docs/gitops.md's table): each tool must read that, and the kind's kstatus conditions must say
//! it; a status older than its object's spec is progressing to kstatus and Argo CD.
//!
//! The Argo CD fixtures in gitops/argocd/resource_customizations (`testdata/`, `health_test.yaml`,
//! in Argo CD's own layout) and gitops/argocd/argocd-cm-patch.yaml are these cases as this test
//! writes them: the test fails when they differ, and `SLIPWAY_BLESS=1` writes them again.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use slipway::maintenance::api::{FINALIZER, NodeMaintenance, NodeMaintenanceSpec};
use slipway::maintenance::core::{
    self as maintenance_core, LeaseView, MaintenanceInput, NodeFacts,
};
use slipway::node::NodeInfo;
use slipway::node::budget::api::{BudgetSchedule, DisruptionBudgetSpec};
use slipway::node::budget::ledger::{self, LedgerInput};
use slipway::node::budget::{Budget, DisruptionBudget, Pool, Reason};
use slipway::node::disruption::DisruptionSpec;
use slipway::node::drain::{PodKey, PodsView};
use slipway::nodeop::api::{NodeOp, NodeOpSpec, NodeOpUpgrade, NodeOpUpgradeSpec};
use slipway::nodeop::core::upgrade::{decide_upgrade, render_nodeop};
use slipway::nodeop::core::{self as nodeop_core, JobView, NodeOpEffect, NodeOpInput};
use slipway::plan::api::{ContainerSpec, Plan, PlanSpec, TimeWindowSpec, labels};
use slipway::plan::core::config::JobConfig;
use slipway::plan::core::{self as plan_core, ChannelAnswer, PlanInput};
use slipway::reboot_policy::api::{
    RebootFailureAction, RebootFailurePolicy, RebootPolicy, RebootPolicySpec,
};
use slipway::reboot_policy::core::request::REBOOT_REQUIRED_ANNOTATION;
use slipway::reboot_policy::core::{self as policy_core, NodeView, PolicyInput, read_spec};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Argo CD's health checks, in its own `resource_customizations/<group>/<Kind>` layout.
fn customizations() -> PathBuf {
    repo().join("gitops/argocd/resource_customizations")
}

/// The kinds, as Argo CD keys them (`<group>/<Kind>`), in the order the docs list them.
const KINDS: [&str; 6] = [
    "upgrade.cattle.io/Plan",
    "slipway.dev/RebootPolicy",
    "slipway.dev/DisruptionBudget",
    "nodemaintenance.medik8s.io/NodeMaintenance",
    "operator.kairos.io/NodeOp",
    "operator.kairos.io/NodeOpUpgrade",
];

/// The checker: `SLIPWAY_GITOPS_HEALTH`, else what tests/tools/gitops-health/build.sh builds
/// (once, cached).
fn checker() -> &'static Path {
    static CHECKER: OnceLock<PathBuf> = OnceLock::new();
    CHECKER.get_or_init(|| {
        super::tool(
            "SLIPWAY_GITOPS_HEALTH",
            "tests/tools/gitops-health/build.sh",
        )
    })
}

/// Every kind's health check, keyed as argocd-cm keys them.
fn scripts() -> BTreeMap<String, String> {
    (KINDS.iter())
        .map(|key| {
            let path = customizations().join(key).join("health.lua");
            let script = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            (key.to_string(), script)
        })
        .collect()
}

/// What the three tools make of one object.
#[derive(Debug, Clone)]
struct Verdict {
    kstatus: (String, String),
    /// Argo CD's status and message (`Error: ...` as the status when the script failed).
    argocd: (String, String),
    fleet_ready: bool,
    fleet_error: bool,
    fleet_state: String,
}

fn verdicts(objects: &[Value]) -> Vec<Verdict> {
    let mut child = Command::new(checker())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run gitops-health");
    let input = json!({"argocd": scripts(), "objects": objects});
    (child.stdin.take().expect("gitops-health's stdin"))
        .write_all(&serde_json::to_vec(&input).expect("the input as JSON"))
        .expect("writing to gitops-health");
    let out = child.wait_with_output().expect("gitops-health's answer");
    assert!(
        out.status.success(),
        "gitops-health failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).expect("a JSON line");
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            let argocd = match &v["argocd"] {
                Value::Null => ("none".to_string(), String::new()),
                a if a.get("error").is_some() => {
                    (format!("Error: {}", text(&a["error"])), String::new())
                }
                a => (text(&a["status"]), text(&a["message"])),
            };
            Verdict {
                kstatus: (
                    text(&v["kstatus"]["status"]),
                    text(&v["kstatus"]["message"]),
                ),
                argocd,
                fleet_ready: v["fleet"]["ready"].as_bool().unwrap_or_default(),
                fleet_error: v["fleet"]["error"].as_bool().unwrap_or_default(),
                fleet_state: text(&v["fleet"]["state"]),
            }
        })
        .collect()
}

/// What an object means to a GitOps tool (docs/gitops.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    /// Done, or in force: nothing to wait for, nothing wrong.
    Healthy,
    /// Under way: it gets there by itself.
    Progressing,
    /// Held on purpose (a window, a halt, a version not old enough): goes on by itself.
    Suspended,
    /// Cannot go on until someone acts.
    Degraded,
}

impl Health {
    /// The kstatus condition slipway sets `True` for it.
    fn standing(self) -> &'static str {
        match self {
            Health::Healthy | Health::Suspended => "Ready",
            Health::Progressing => "Reconciling",
            Health::Degraded => "Stalled",
        }
    }

    fn kstatus(self) -> &'static str {
        match self {
            Health::Healthy | Health::Suspended => "Current",
            Health::Progressing => "InProgress",
            Health::Degraded => "Failed",
        }
    }

    fn argocd(self) -> &'static str {
        match self {
            Health::Healthy => "Healthy",
            Health::Progressing => "Progressing",
            Health::Suspended => "Suspended",
            Health::Degraded => "Degraded",
        }
    }

    /// Fleet's `IsReady`, and whether its summary is an error.
    fn fleet(self) -> (bool, bool) {
        match self {
            Health::Healthy | Health::Suspended => (true, false),
            Health::Progressing => (false, false),
            Health::Degraded => (false, true),
        }
    }
}

/// One object as a kind's decision left it: what it is (a fixture's file name, without `.yaml`),
/// and what it means.
struct Case {
    name: &'static str,
    object: Value,
    health: Health,
}

fn case(name: &'static str, object: impl serde::Serialize, health: Health) -> Case {
    let mut object = serde_json::to_value(object).expect("an object as JSON");
    // A field left empty, as the API server would not store it.
    if let Some(o) = object.as_object_mut() {
        o.retain(|_, v| !v.is_null());
    }
    Case {
        name,
        object,
        health,
    }
}

/// Which of the three is `True` on the object (all three present, one `True`), else a description.
fn standing_of(object: &Value) -> String {
    let conditions = object["status"]["conditions"].as_array().cloned();
    let of = |t: &str| {
        (conditions.iter().flatten())
            .find(|c| c["type"] == t)
            .map(|c| c["status"].as_str().unwrap_or_default().to_string())
    };
    let three = ["Ready", "Reconciling", "Stalled"].map(|t| (t, of(t)));
    let on: Vec<&str> = (three.iter())
        .filter(|(_, s)| s.as_deref() == Some("True"))
        .map(|(t, _)| *t)
        .collect();
    match (three.iter().all(|(_, s)| s.is_some()), on.as_slice()) {
        (true, [one]) => one.to_string(),
        _ => format!("{three:?}"),
    }
}

/// The same object once its spec changed and before the controller looked again.
fn stale(object: &Value) -> Value {
    let mut object = object.clone();
    let generation = object["metadata"]["generation"]
        .as_i64()
        .expect("a generation");
    object["metadata"]["generation"] = Value::from(generation + 1);
    object
}

/// One row of the table: the object, what slipway meant, and what each tool must say.
struct Row {
    what: String,
    object: Value,
    standing: &'static str,
    kstatus: &'static str,
    argocd: &'static str,
    /// Fleet's (ready, error); `None` where Fleet's verdict is not slipway's to give (below).
    fleet: Option<(bool, bool)>,
}

/// Feeds every case, and the ones that are not progressing once more with a newer generation, to
/// the three tools; fails with the whole table if a case is not what it says or a tool reads
/// anything but what slipway means. Then checks the Argo CD fixtures of `key` are these cases.
fn check(key: &str, cases: Vec<Case>) {
    let mut rows: Vec<Row> = Vec::new();
    // The row of each case as it is (the others are its stale twins).
    let mut own: Vec<usize> = Vec::new();
    for c in &cases {
        own.push(rows.len());
        rows.push(Row {
            what: c.name.to_string(),
            object: c.object.clone(),
            standing: c.health.standing(),
            kstatus: c.health.kstatus(),
            argocd: c.health.argocd(),
            fleet: Some(c.health.fleet()),
        });
        if c.health != Health::Progressing {
            // Fleet's summary reads the conditions (and a `status.phase`) before kstatus, which
            // alone compares generations: there, a stale status keeps its verdict until the
            // controller has decided again.
            rows.push(Row {
                what: format!("{}, spec changed since", c.name),
                object: stale(&c.object),
                standing: c.health.standing(),
                kstatus: Health::Progressing.kstatus(),
                argocd: Health::Progressing.argocd(),
                fleet: None,
            });
        }
    }
    let objects: Vec<Value> = rows.iter().map(|r| r.object.clone()).collect();
    let got = verdicts(&objects);
    assert_eq!(got.len(), rows.len(), "one verdict per object");
    let mut table = String::new();
    let mut wrong = 0;
    for (row, v) in rows.iter().zip(&got) {
        let slipway = standing_of(&row.object);
        let fleet = (v.fleet_ready, v.fleet_error);
        let ok = slipway == row.standing
            && v.kstatus.0 == row.kstatus
            && v.argocd.0 == row.argocd
            && !v.argocd.1.is_empty()
            && row.fleet.is_none_or(|want| want == fleet);
        wrong += usize::from(!ok);
        let mark = if ok { "ok " } else { "BAD" };
        let fleet_want = match row.fleet {
            Some((ready, error)) => format!("ready {ready} error {error}"),
            None => "not judged".to_string(),
        };
        table += &format!(
            "{mark} {key} {}: slipway {slipway} (meant {}); kstatus {} (want {}): {}; Argo CD {} (want {}): {}; Fleet ready {} error {} state {} (want {fleet_want})\n",
            row.what,
            row.standing,
            v.kstatus.0,
            row.kstatus,
            v.kstatus.1,
            v.argocd.0,
            row.argocd,
            v.argocd.1,
            v.fleet_ready,
            v.fleet_error,
            v.fleet_state,
        );
    }
    println!("{table}");
    assert_eq!(wrong, 0, "GitOps tools against slipway's meaning:\n{table}");
    let tests: Vec<(&Case, &Verdict)> = cases.iter().zip(own.iter().map(|i| &got[*i])).collect();
    fixtures(key, &tests);
}

/// The Argo CD fixtures of `key` (its `testdata/<case>.yaml` and `health_test.yaml`), as Argo CD's
/// own test of its health checks reads them: written with `SLIPWAY_BLESS=1`, else compared.
fn fixtures(key: &str, tests: &[(&Case, &Verdict)]) {
    let dir = customizations().join(key);
    let mut files: BTreeMap<PathBuf, String> = BTreeMap::new();
    let mut list = String::from("tests:\n");
    for (c, v) in tests {
        let input = format!("testdata/{}.yaml", c.name);
        let yaml = serde_saphyr::to_string(&c.object).expect("an object as YAML");
        files.insert(dir.join(&input), yaml);
        let health = json!({"healthStatus": {"status": v.argocd.0, "message": v.argocd.1}, "inputPath": input});
        let item = serde_saphyr::to_string(&health).expect("a test as YAML");
        list += &indent_item(&item);
    }
    files.insert(dir.join("health_test.yaml"), list);
    compare_or_bless(&files);
}

/// A YAML mapping as an item of a list.
fn indent_item(mapping: &str) -> String {
    let mut out = String::new();
    for (i, line) in mapping.lines().enumerate() {
        out += if i == 0 { "- " } else { "  " };
        out += line;
        out += "\n";
    }
    out
}

fn compare_or_bless(files: &BTreeMap<PathBuf, String>) {
    let bless = std::env::var_os("SLIPWAY_BLESS").is_some();
    let mut differ = Vec::new();
    for (path, want) in files {
        let have = std::fs::read_to_string(path).unwrap_or_default();
        if have == *want {
            continue;
        }
        if bless {
            std::fs::create_dir_all(path.parent().expect("a directory")).expect("mkdir");
            std::fs::write(path, want).expect("write a fixture");
        } else {
            differ.push(path.display().to_string());
        }
    }
    assert!(
        differ.is_empty(),
        "these differ from what the cores decide now (SLIPWAY_BLESS=1 cargo test --test offline -- gitops_health writes them): {differ:?}"
    );
}

/// The helpers every health check carries (Argo CD runs each configured script alone: none can
/// `require` a shared one) stay the same in all six.
#[test]
fn the_health_checks_share_their_helpers_word_for_word() {
    let helpers = |script: &str| -> String {
        let from = script
            .find("local function condition")
            .expect("the condition helper");
        let to = script[from..]
            .find("if obj.status == nil then")
            .expect("the first check")
            + from;
        script[from..to].to_string()
    };
    let all = scripts();
    let plan = helpers(&all["upgrade.cattle.io/Plan"]);
    for (key, script) in &all {
        assert_eq!(
            helpers(script),
            plan,
            "{key}'s helpers differ from the Plan's"
        );
    }
}

/// gitops/argocd/argocd-cm-patch.yaml: every health check as argocd-cm's
/// `resource.customizations.health.<group>_<Kind>` keys, a patch for `kubectl patch --patch-file`.
#[test]
fn the_argocd_cm_patch_holds_every_health_check() {
    let mut out = String::from(
        "# slipway's health checks for Argo CD, generated from gitops/argocd/resource_customizations\n\
         # (tests/offline/gitops_health.rs writes it). Apply with:\n\
         #   kubectl -n argocd patch configmap argocd-cm --type merge --patch-file argocd-cm-patch.yaml\n\
         data:\n",
    );
    for (key, script) in scripts() {
        out += &format!(
            "  resource.customizations.health.{}: |\n",
            key.replacen('/', "_", 1)
        );
        for line in script.lines() {
            if line.is_empty() {
                out += "\n";
            } else {
                out += &format!("    {line}\n");
            }
        }
    }
    let path = repo().join("gitops/argocd/argocd-cm-patch.yaml");
    compare_or_bless(&BTreeMap::from([(path, out)]));
}

fn at(secs: i64) -> Timestamp {
    let t0: Timestamp = "2026-11-26T10:00:00Z".parse().expect("a time");
    t0 + jiff::SignedDuration::from_secs(secs)
}

fn meta(name: &str, namespace: Option<&str>, generation: i64) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(str::to_string),
        uid: Some(format!("uid-{name}")),
        generation: Some(generation),
        ..Default::default()
    }
}

fn node(name: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        uid: format!("uid-{name}"),
        labels: BTreeMap::from([
            (labels::HOSTNAME.to_string(), name.to_string()),
            (labels::OS.to_string(), "linux".to_string()),
        ]),
        ready: true,
        boot_id: format!("{name}-boot-1"),
        ..Default::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Plan
// ---------------------------------------------------------------------------------------------

/// A Plan, its node and Jobs, stepped as the controller and the cluster would.
struct PlanWorld {
    plan: Plan,
    nodes: Vec<NodeInfo>,
    jobs: Vec<Job>,
    budgets: Vec<DisruptionBudget>,
    channel: Option<ChannelAnswer>,
}

impl PlanWorld {
    fn new(spec: PlanSpec) -> PlanWorld {
        let plan = Plan {
            metadata: meta("k3s", Some("system-upgrade"), 4),
            spec,
            status: None,
        };
        PlanWorld {
            plan,
            nodes: vec![node("n1")],
            jobs: Vec::new(),
            budgets: Vec::new(),
            channel: None,
        }
    }

    fn step(&mut self, now: Timestamp) {
        let config = JobConfig::default();
        let mine: BTreeSet<String> = (self.plan.status.iter())
            .flat_map(|s| s.applying.clone())
            .collect();
        let pools: Vec<_> = (self.budgets.iter())
            .map(|b| Pool::new(b).measure_for(&self.nodes, &BTreeSet::new(), &mine, now))
            .collect();
        let budget = Budget::new(BTreeMap::new(), &pools, Reason::Upgrade);
        let nodes: Vec<&NodeInfo> = self.nodes.iter().collect();
        let jobs: Vec<&Job> = self.jobs.iter().collect();
        let (health, secrets) = (BTreeMap::new(), BTreeMap::new());
        let d = plan_core::decide(
            &PlanInput {
                plan: &self.plan,
                nodes: &nodes,
                settled: None,
                jobs: &jobs,
                reboot_pods: &[],
                pull_pods: &[],
                health: &health,
                secrets: &secrets,
                channel: self.channel.clone(),
                controller_name: "system-upgrade-controller",
                job_config: &config,
                budget: &budget,
                shared: &BTreeSet::new(),
                hook_jobs: &[],
                checks: &[],
                stages: Some(&[]),
                templates: None,
                explain: false,
                pruned: None,
            },
            now,
        );
        self.jobs.extend(d.create_jobs().into_iter().cloned());
        for change in d.node_patches() {
            let n = (self.nodes.iter_mut()).find(|n| n.name == change.node);
            change.apply_to(n.expect("a patched node exists"));
        }
        self.plan.status = Some(d.status);
    }

    /// Every Job ends with a condition of `type_` (`Complete` or `Failed`).
    fn finish(&mut self, type_: &str, now: Timestamp) {
        for job in &mut self.jobs {
            job.status = Some(JobStatus {
                conditions: Some(vec![JobCondition {
                    type_: type_.into(),
                    status: "True".into(),
                    reason: Some("BackoffLimitExceeded".into()).filter(|_| type_ == "Failed"),
                    last_transition_time: Some(Time(now)),
                    ..Default::default()
                }]),
                ..Default::default()
            });
        }
    }
}

fn plan_spec() -> PlanSpec {
    PlanSpec {
        concurrency: Some(1),
        version: Some("v1.34.2+k3s1".into()),
        service_account_name: Some("system-upgrade".into()),
        node_selector: Some(LabelSelector::default()),
        upgrade: ContainerSpec {
            image: "rancher/k3s-upgrade".into(),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[test]
fn plans() {
    use Health::*;
    let mut w = PlanWorld::new(plan_spec());
    w.step(at(0));
    let under_way = case("progressing_job_running", &w.plan, Progressing);
    let mut failed = PlanWorld::new(plan_spec());
    failed.step(at(0));
    failed.finish("Failed", at(60));
    failed.step(at(61));
    w.finish("Complete", at(60));
    for s in 1..=3 {
        w.step(at(60 + s));
    }
    let done = case("healthy_complete", &w.plan, Healthy);
    let mut spec = plan_spec();
    spec.node_selector = Some(LabelSelector {
        match_expressions: Some(vec![Default::default()]),
        ..Default::default()
    });
    let mut invalid = PlanWorld::new(spec);
    invalid.step(at(0));
    let mut unresolvable = PlanWorld::new(PlanSpec {
        version: None,
        ..plan_spec()
    });
    unresolvable.step(at(0));
    // 10:00 UTC, its window 01:00 to 02:00.
    let mut window = PlanWorld::new(PlanSpec {
        window: Some(TimeWindowSpec {
            days: Some(
                ["su", "mo", "tu", "we", "th", "fr", "sa"]
                    .map(String::from)
                    .to_vec(),
            ),
            start_time: Some("01:00".into()),
            end_time: Some("02:00".into()),
            time_zone: Some("UTC".into()),
            ..Default::default()
        }),
        ..plan_spec()
    });
    window.step(at(0));
    let mut halted = PlanWorld::new(plan_spec());
    let mut budget = DisruptionBudget::new(
        "pool",
        DisruptionBudgetSpec {
            max_unavailable: IntOrString::Int(1),
            halt: Some(true),
            ..Default::default()
        },
    );
    budget.metadata.generation = Some(1);
    halted.budgets = vec![budget];
    halted.step(at(0));
    // A schedule that allows no node all day: a freeze.
    let mut frozen = PlanWorld::new(plan_spec());
    let mut budget = DisruptionBudget::new(
        "pool",
        DisruptionBudgetSpec {
            max_unavailable: IntOrString::Int(1),
            schedules: vec![BudgetSchedule {
                name: Some("freeze".into()),
                schedule: "@daily".into(),
                duration: "24h".into(),
                time_zone: None,
                max_unavailable: IntOrString::Int(0),
            }],
            ..Default::default()
        },
    );
    budget.metadata.generation = Some(1);
    frozen.budgets = vec![budget];
    frozen.step(at(0));
    let mut young = PlanWorld::new(PlanSpec {
        version: None,
        channel: Some("https://update.k3s.io/v1-release/channels/stable".into()),
        min_version_age: Some("24h".into()),
        ..plan_spec()
    });
    young.channel = Some(ChannelAnswer::Version("v1.34.3+k3s1".into()));
    young.step(at(0));
    check(
        "upgrade.cattle.io/Plan",
        vec![
            done,
            under_way,
            case("suspended_window_closed", &window.plan, Suspended),
            case("suspended_budget_halted", &halted.plan, Suspended),
            case("suspended_budget_frozen", &frozen.plan, Suspended),
            case("suspended_version_too_new", &young.plan, Suspended),
            case("degraded_job_failed", &failed.plan, Degraded),
            case("degraded_invalid_node_selector", &invalid.plan, Degraded),
            case(
                "degraded_no_version_no_channel",
                &unresolvable.plan,
                Degraded,
            ),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// RebootPolicy
// ---------------------------------------------------------------------------------------------

fn asking(name: &str) -> NodeInfo {
    let mut n = node(name);
    (n.annotations).insert(REBOOT_REQUIRED_ANNOTATION.into(), n.boot_id.clone());
    n
}

/// The policy with the status of one decision over `nodes`.
fn policy_decided(mut p: RebootPolicy, nodes: &[NodeInfo]) -> RebootPolicy {
    let spec = read_spec(&p.spec, "busybox");
    let views: Vec<NodeView<'_>> = (nodes.iter()).map(NodeView::bare).collect();
    let d = policy_core::decide(
        &PolicyInput {
            policy: &p,
            spec: &spec,
            nodes: &views,
            alerts: None,
            checks: None,
            budget: &Budget::unlimited(),
            pull_pods: &[],
            namespace: "system-upgrade",
            kured: &slipway::reboot_policy::core::kured::KuredView::Off,
        },
        at(0),
    );
    p.status = Some(d.status);
    p
}

fn policy(spec: RebootPolicySpec) -> RebootPolicy {
    let mut p = RebootPolicy::new("nightly", spec);
    p.metadata.generation = Some(2);
    p
}

#[test]
fn reboot_policies() {
    use Health::*;
    let idle = policy_decided(policy(Default::default()), &[node("n1")]);
    let rebooting = policy_decided(policy(Default::default()), &[asking("n1")]);
    let invalid = policy(RebootPolicySpec {
        concurrency: Some(0),
        ..Default::default()
    });
    let invalid = policy_decided(invalid, &[asking("n1")]);
    // A failure stopped it (what an earlier decision recorded): nothing starts until a reset.
    let mut stopped = policy(RebootPolicySpec {
        failure_policy: Some(RebootFailurePolicy {
            action: Some(RebootFailureAction::Stop),
        }),
        ..Default::default()
    });
    stopped.status = Some(slipway::reboot_policy::api::RebootPolicyStatus {
        observed_generation: Some(2),
        stopped: Some("node n0 failed: it did not come back".into()),
        ..Default::default()
    });
    let stopped = policy_decided(stopped, &[asking("n1")]);
    check(
        "slipway.dev/RebootPolicy",
        vec![
            case("healthy_idle", &idle, Healthy),
            // Rebooting nodes is what a policy is for: not progressing towards anything.
            case("healthy_rebooting", &rebooting, Healthy),
            case("degraded_stopped", &stopped, Degraded),
            case("degraded_invalid_concurrency", &invalid, Degraded),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// DisruptionBudget
// ---------------------------------------------------------------------------------------------

/// The budget with the ledger its pool gives, `held` being the nodes operations hold.
fn budget_ledger(spec: DisruptionBudgetSpec, held: &[&str]) -> DisruptionBudget {
    let mut b = DisruptionBudget::new("pool", spec);
    b.metadata.generation = Some(3);
    let nodes = [node("n1"), node("n2"), node("n3")];
    let held: BTreeSet<String> = held.iter().map(|n| n.to_string()).collect();
    let state = Pool::new(&b).measure(&nodes, &held, at(0));
    let by_name: BTreeMap<String, &NodeInfo> = nodes.iter().map(|n| (n.name.clone(), n)).collect();
    b.status = Some(ledger::status(
        &LedgerInput {
            pool: &state,
            nodes: &by_name,
            holders: &BTreeMap::new(),
            old: &Default::default(),
            generation: b.metadata.generation,
        },
        at(0),
    ));
    b
}

#[test]
fn disruption_budgets() {
    use Health::*;
    let spec = |max: IntOrString, halt: bool| DisruptionBudgetSpec {
        max_unavailable: max,
        halt: Some(halt),
        ..Default::default()
    };
    let one = || IntOrString::Int(1);
    check(
        "slipway.dev/DisruptionBudget",
        vec![
            case(
                "healthy_in_force",
                budget_ledger(spec(one(), false), &[]),
                Healthy,
            ),
            case(
                "healthy_node_held",
                budget_ledger(spec(one(), false), &["n1"]),
                Healthy,
            ),
            case(
                "suspended_halted",
                budget_ledger(spec(one(), true), &[]),
                Suspended,
            ),
            case(
                "degraded_invalid_max_unavailable",
                budget_ledger(spec(IntOrString::String("150%".into()), false), &[]),
                Degraded,
            ),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// NodeMaintenance
// ---------------------------------------------------------------------------------------------

fn maintenance() -> NodeMaintenance {
    let mut metadata = meta("disk", None, 2);
    metadata.finalizers = Some(vec![FINALIZER.to_string()]);
    NodeMaintenance {
        metadata,
        spec: NodeMaintenanceSpec {
            node_name: "n1".into(),
            reason: Some("disk swap".into()),
            drain_timeout: Some("10m".into()),
            disruption: None,
        },
        status: None,
    }
}

fn facts() -> NodeFacts {
    NodeFacts {
        name: "n1".into(),
        uid: "uid-n1".into(),
        ..Default::default()
    }
}

fn pods(evict: &[&str]) -> PodsView {
    PodsView {
        total: evict.len(),
        to_evict: (evict.iter())
            .map(|n| {
                let key = PodKey {
                    namespace: "shop".into(),
                    name: n.to_string(),
                };
                (key, false)
            })
            .collect(),
        blocked: BTreeMap::new(),
        attached: Vec::new(),
    }
}

/// The maintenance with the status of one decision.
fn maintained(
    mut nm: NodeMaintenance,
    node: Option<&NodeFacts>,
    pods: &PodsView,
    now: Timestamp,
) -> NodeMaintenance {
    let d = maintenance_core::decide(
        &MaintenanceInput {
            maintenance: &nm,
            node,
            held_by: None,
            refusal: None,
            lease: LeaseView::Free,
            pods: Some(pods),
            evictions: None,
            last_error: None,
        },
        now,
    );
    nm.status = Some(d.status);
    nm
}

#[test]
fn node_maintenances() {
    use Health::*;
    let (n1, busy, empty) = (facts(), pods(&["web-1"]), pods(&[]));
    let draining = maintained(maintenance(), Some(&n1), &busy, at(0));
    // Ten minutes on, the pod still there: the drain timed out.
    let taken = NodeFacts {
        unschedulable: true,
        drain_taint: true,
        excluded: true,
        cordoned_by: Some("nodemaintenance/disk".into()),
        excluded_by: Some("nodemaintenance/disk".into()),
        ..facts()
    };
    // Drained once the node is taken, with nothing left on it.
    let drained = maintained(maintenance(), Some(&taken), &empty, at(0));
    let timed_out = maintained(draining.clone(), Some(&taken), &busy, at(600));
    let missing = maintained(maintenance(), None, &busy, at(0));
    let mut bad = maintenance();
    bad.spec.disruption = Some(DisruptionSpec {
        silence: Some(Default::default()),
        ..Default::default()
    });
    let invalid = maintained(bad, Some(&n1), &busy, at(0));
    check(
        "nodemaintenance.medik8s.io/NodeMaintenance",
        vec![
            case("healthy_drained", &drained, Healthy),
            case("progressing_draining", &draining, Progressing),
            case("degraded_drain_timed_out", &timed_out, Degraded),
            case("degraded_no_such_node", &missing, Degraded),
            case("degraded_invalid_silence", &invalid, Degraded),
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// NodeOp and NodeOpUpgrade
// ---------------------------------------------------------------------------------------------

/// A NodeOp stepped as the controller and the cluster would: cordons applied, nodes drained of
/// nothing, preflights answering "go on", every Job it creates ending as `job`, `steps` times.
fn nodeop_run(mut op: NodeOp, job: &JobView, steps: usize) -> NodeOp {
    let mut nodes = [node("n1")];
    let mut jobs: BTreeMap<String, JobView> = BTreeMap::new();
    let mut preflights = BTreeMap::new();
    for s in 0..steps {
        let now = at(i64::try_from(s).unwrap_or_default() * 10);
        let drains: BTreeMap<String, PodsView> = (nodeop_core::to_drain(&op, &jobs, now)
            .into_iter())
        .map(|n| (n, pods(&[])))
        .collect();
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let d = nodeop_core::decide(
            &NodeOpInput {
                op: &op,
                nodes: &refs,
                jobs: &jobs,
                preflights: &preflights,
                reboot_pods: &BTreeSet::new(),
                drains: &drains,
                reboot_image: "busybox:1.36",
                pull_pods: &[],
                budget: &Budget::unlimited(),
            },
            now,
        );
        for effect in &d.effects {
            match effect {
                NodeOpEffect::Cordon(c) | NodeOpEffect::Uncordon(c) => {
                    (nodes.iter_mut()).for_each(|n| {
                        if n.name == c.node {
                            c.apply_to(n)
                        }
                    })
                }
                NodeOpEffect::CreateJob(j) => {
                    jobs.insert(j.metadata.name.clone().unwrap_or_default(), job.clone());
                }
                NodeOpEffect::CreatePod(p) => {
                    let on = p.spec.as_ref().and_then(|s| s.node_name.clone());
                    preflights.insert(on.unwrap_or_default(), nodeop_core::PreflightView::Proceed);
                }
                _ => {}
            }
        }
        op.status = Some(d.status);
    }
    op
}

fn nodeop(spec: NodeOpSpec) -> NodeOp {
    NodeOp {
        metadata: meta("op", Some("default"), 2),
        spec: NodeOpSpec {
            command: vec!["sh".into(), "-c".into(), "true".into()],
            ..spec
        },
        status: None,
    }
}

#[test]
fn nodeops() {
    use Health::*;
    let cordoned = || NodeOpSpec {
        cordon: Some(true),
        ..Default::default()
    };
    let running = nodeop_run(nodeop(cordoned()), &JobView::Running, 3);
    let done = nodeop_run(nodeop(cordoned()), &JobView::Succeeded, 3);
    let failed = nodeop_run(
        nodeop(cordoned()),
        &JobView::Failed("BackoffLimitExceeded".into()),
        3,
    );
    let bad = nodeop(NodeOpSpec {
        node_selector: Some(LabelSelector {
            match_expressions: Some(vec![Default::default()]),
            ..Default::default()
        }),
        ..Default::default()
    });
    let invalid = nodeop_run(bad, &JobView::Running, 1);
    check(
        "operator.kairos.io/NodeOp",
        vec![
            case("healthy_complete", &done, Healthy),
            case("progressing_job_running", &running, Progressing),
            case("degraded_job_failed", &failed, Degraded),
            case("degraded_invalid_node_selector", &invalid, Degraded),
        ],
    );
}

/// The upgrade with the status of its decision over `nodeop` (`None`: not created yet).
fn upgraded(mut u: NodeOpUpgrade, nodeop: Option<&NodeOp>) -> NodeOpUpgrade {
    u.status = Some(decide_upgrade(&u, nodeop, at(100)).status);
    u
}

#[test]
fn nodeop_upgrades() {
    use Health::*;
    let u = NodeOpUpgrade {
        metadata: meta("to-v3", Some("default"), 5),
        spec: NodeOpUpgradeSpec {
            image: "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3s".into(),
            // No reboot into the new system: the stepping here does not boot nodes again.
            upgrade_active: Some(false),
            upgrade_recovery: Some(true),
            ..Default::default()
        },
        status: None,
    };
    let created = upgraded(u.clone(), None);
    let op = || render_nodeop(&u);
    let running = nodeop_run(op(), &JobView::Running, 4);
    let done = nodeop_run(op(), &JobView::Succeeded, 4);
    let failed = nodeop_run(op(), &JobView::Failed("BackoffLimitExceeded".into()), 4);
    let mut foreign = done.clone();
    foreign.metadata.owner_references = None;
    let after = |op: &NodeOp| upgraded(created.clone(), Some(op));
    check(
        "operator.kairos.io/NodeOpUpgrade",
        vec![
            case("healthy_nodeop_complete", after(&done), Healthy),
            case("progressing_nodeop_created", &created, Progressing),
            case("progressing_nodeop_running", after(&running), Progressing),
            case("degraded_nodeop_failed", after(&failed), Degraded),
            case("degraded_nodeop_not_owned", after(&foreign), Degraded),
        ],
    );
}
