//! kstatus, the rules Flux's health checks judge by, on what slipway's own cores decide:
//! cli-utils' checker itself (tests/tools/kstatus, built from the Go module proxy by its build.sh,
//! cached) reads objects of every kind whose status comes from the kind's decision, and must find
//! `Ready` Current, `Reconciling` InProgress, `Stalled` Failed, and any status older than its
//! object's generation InProgress.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::Value;

use slipway::maintenance::api::{FINALIZER, NodeMaintenance, NodeMaintenanceSpec};
use slipway::maintenance::core::{
    self as maintenance_core, LeaseView, MaintenanceInput, NodeFacts,
};
use slipway::node::NodeInfo;
use slipway::node::budget::api::DisruptionBudgetSpec;
use slipway::node::budget::ledger::{self, LedgerInput};
use slipway::node::budget::{Budget, DisruptionBudget, Pool};
use slipway::node::disruption::DisruptionSpec;
use slipway::node::drain::{PodKey, PodsView};
use slipway::nodeop::api::{NodeOp, NodeOpSpec, NodeOpUpgrade, NodeOpUpgradeSpec};
use slipway::nodeop::core::upgrade::{decide_upgrade, render_nodeop};
use slipway::nodeop::core::{self as nodeop_core, JobView, NodeOpEffect, NodeOpInput};
use slipway::plan::api::{ContainerSpec, Plan, PlanSpec, labels};
use slipway::plan::core::config::JobConfig;
use slipway::plan::core::{self as plan_core, PlanInput};
use slipway::reboot_policy::api::{
    RebootFailureAction, RebootFailurePolicy, RebootPolicy, RebootPolicySpec,
};
use slipway::reboot_policy::core::request::REBOOT_REQUIRED_ANNOTATION;
use slipway::reboot_policy::core::{self as policy_core, NodeView, PolicyInput, read_spec};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The checker: `SLIPWAY_KSTATUS`, else what tests/tools/kstatus/build.sh builds (once, cached).
fn kstatus() -> &'static Path {
    static KSTATUS: OnceLock<PathBuf> = OnceLock::new();
    KSTATUS.get_or_init(|| {
        if let Some(p) = std::env::var_os("SLIPWAY_KSTATUS") {
            return PathBuf::from(p);
        }
        let out = Command::new(repo().join("tests/tools/kstatus/build.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("run tests/tools/kstatus/build.sh");
        assert!(out.status.success(), "tests/tools/kstatus/build.sh failed");
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
}

/// kstatus' status and message for each object, in order.
fn verdicts(objects: &[Value]) -> Vec<(String, String)> {
    let mut child = Command::new(kstatus())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run kstatus");
    let input = serde_json::to_vec(objects).expect("objects as JSON");
    (child.stdin.take().expect("kstatus' stdin"))
        .write_all(&input)
        .expect("writing to kstatus");
    let out = child.wait_with_output().expect("kstatus' answer");
    assert!(
        out.status.success(),
        "kstatus failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let v: Value = serde_json::from_str(line).expect("a JSON line");
            let field = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            (field("status"), field("message"))
        })
        .collect()
}

/// One object as a kind's decision left it, and which of `Ready`, `Reconciling`, `Stalled` the
/// situation must have made `True`.
struct Case {
    what: &'static str,
    object: Value,
    standing: &'static str,
}

fn case(what: &'static str, object: impl serde::Serialize, standing: &'static str) -> Case {
    let object = serde_json::to_value(object).expect("an object as JSON");
    Case {
        what,
        object,
        standing,
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

/// Feeds every case, and the `Ready` and `Stalled` ones once more with a newer generation, to
/// kstatus; fails with the whole table if the situations are not what they say or kstatus reads
/// anything but what slipway means.
fn check(kind: &str, cases: Vec<Case>) {
    let mut rows: Vec<(String, Value, &str, &str)> = Vec::new();
    for c in &cases {
        let want = match c.standing {
            "Ready" => "Current",
            "Reconciling" => "InProgress",
            _ => "Failed",
        };
        rows.push((c.what.to_string(), c.object.clone(), c.standing, want));
        if c.standing != "Reconciling" {
            let what = format!("{}, spec changed since", c.what);
            rows.push((what, stale(&c.object), c.standing, "InProgress"));
        }
    }
    let objects: Vec<Value> = rows.iter().map(|r| r.1.clone()).collect();
    let got = verdicts(&objects);
    assert_eq!(got.len(), rows.len(), "one verdict per object");
    let mut table = String::new();
    let mut wrong = 0;
    for ((what, object, standing, want), (status, message)) in rows.iter().zip(&got) {
        let slipway = standing_of(object);
        let ok = slipway == *standing && status == want;
        wrong += usize::from(!ok);
        let mark = if ok { "ok " } else { "BAD" };
        table += &format!(
            "{mark} {kind} {what}: slipway {slipway} (meant {standing}), kstatus {status} (want {want}): {message}\n"
        );
    }
    println!("{table}");
    assert_eq!(wrong, 0, "kstatus against slipway's conditions:\n{table}");
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
        }
    }

    fn step(&mut self, now: Timestamp) {
        let (config, budget) = (JobConfig::default(), Budget::unlimited());
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
                channel: None,
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
fn plans_as_kstatus_reads_them() {
    let mut w = PlanWorld::new(plan_spec());
    w.step(at(0));
    let under_way = case("its Job running", &w.plan, "Reconciling");
    let mut failed = PlanWorld::new(plan_spec());
    failed.step(at(0));
    failed.finish("Failed", at(60));
    failed.step(at(61));
    w.finish("Complete", at(60));
    for s in 1..=3 {
        w.step(at(60 + s));
    }
    let done = case("every node done", &w.plan, "Ready");
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
    check(
        "Plan",
        vec![
            done,
            under_way,
            case("a Job failed", &failed.plan, "Stalled"),
            case("an invalid nodeSelector", &invalid.plan, "Stalled"),
            case("neither version nor channel", &unresolvable.plan, "Stalled"),
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
fn reboot_policies_as_kstatus_reads_them() {
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
        "RebootPolicy",
        vec![
            case("no node wants a reboot", &idle, "Ready"),
            case("a node draining for its reboot", &rebooting, "Reconciling"),
            case("stopped by a failure", &stopped, "Stalled"),
            case("concurrency 0", &invalid, "Stalled"),
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
fn disruption_budgets_as_kstatus_reads_them() {
    let spec = |max: IntOrString, halt: bool| DisruptionBudgetSpec {
        max_unavailable: max,
        halt: Some(halt),
        ..Default::default()
    };
    let one = || IntOrString::Int(1);
    check(
        "DisruptionBudget",
        vec![
            case("in force", budget_ledger(spec(one(), false), &[]), "Ready"),
            case(
                "in force, a node held",
                budget_ledger(spec(one(), false), &["n1"]),
                "Ready",
            ),
            case("halted", budget_ledger(spec(one(), true), &[]), "Ready"),
            case(
                "maxUnavailable 150%",
                budget_ledger(spec(IntOrString::String("150%".into()), false), &[]),
                "Stalled",
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
fn node_maintenances_as_kstatus_reads_them() {
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
        "NodeMaintenance",
        vec![
            case("drained", &drained, "Ready"),
            case("draining", &draining, "Reconciling"),
            case("drain timed out", &timed_out, "Stalled"),
            case("no such node", &missing, "Stalled"),
            case("a silence without matchers", &invalid, "Stalled"),
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
fn nodeops_as_kstatus_reads_them() {
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
        "NodeOp",
        vec![
            case("every node done", &done, "Ready"),
            case("its Job running", &running, "Reconciling"),
            case("a Job failed", &failed, "Stalled"),
            case("an invalid nodeSelector", &invalid, "Stalled"),
        ],
    );
}

/// The upgrade with the status of its decision over `nodeop` (`None`: not created yet).
fn upgraded(mut u: NodeOpUpgrade, nodeop: Option<&NodeOp>) -> NodeOpUpgrade {
    u.status = Some(decide_upgrade(&u, nodeop, at(100)).status);
    u
}

#[test]
fn nodeop_upgrades_as_kstatus_reads_them() {
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
        "NodeOpUpgrade",
        vec![
            case("its NodeOp done", after(&done), "Ready"),
            case("its NodeOp just created", &created, "Reconciling"),
            case("its NodeOp running", after(&running), "Reconciling"),
            case("its NodeOp failed", after(&failed), "Stalled"),
            case(
                "a NodeOp of its name not its own",
                after(&foreign),
                "Stalled",
            ),
        ],
    );
}
