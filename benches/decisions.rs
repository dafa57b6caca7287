//! `just bench decisions`: the pure decisions alone, no API server, at fleet sizes this machine's
//! local cluster cannot hold: 10,000, 100,000 and 1,000,000 nodes (`SLIPWAY_BENCH_SIZES`, a
//! comma-separated list, overrides them; `SLIPWAY_BENCH_ONLY=plan-first,policy` runs only those).
//!
//! Scenarios, each timed as the median of several decisions and printed as one line:
//! - `plan-first`: one Plan over every node, concurrency 100, nothing done yet: the first decision
//!   (version and hash, selection, 100 Jobs rendered);
//! - `plan-steady`: the same Plan with its 100 Jobs running: what a Job or node event costs;
//! - `plan-done`: every node carries the hash: an idle Plan's decision;
//! - `plans-50`: 50 Plans, each selecting its share of the nodes, all done: the 50 decisions;
//! - `policy`: a RebootPolicy over every node, 1% of them asking for a reboot, concurrency 10;
//! - `plan-budgets`: `plan-first` under 10 DisruptionBudgets (each a fifth of the pools, 1%), the
//!   pools measured from the members the node index keeps, as the controller does, then the decision;
//! - `plan-change`: `plan-done` kept in the node index, then one node replaced (created again
//!   without the Plan's label): the index told, then the reconcile as the controller assembles it
//!   (the hash, the unsettled candidates and the count of the others) and its decision;
//! - `plan-mid`: one Plan over every node at concurrency a tenth of them, rolled out to its middle
//!   (half the nodes done, their Jobs complete and kept until their TTL, a tenth running): the
//!   reconcile as the controller assembles it from the node index and the Job index, and its
//!   decision;
//! - `index`: the node index built from every node, then one Plan's candidates looked up.
//!
//! `per_node_ns` is the decision's time divided by the nodes it looks at: flat as the fleet grows
//! means linear. Nothing here asserts a time: it measures and prints.

use slipway::node::budget::api::Reason;
use slipway::node::budget::{Budget, DisruptionBudget, Members, Pool};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
use slipway::node::NodeInfo;
use slipway::node::holders::Holder;
use slipway::node::index::{Interest, NodeIndex};
use slipway::plan::api::{ContainerSpec, Plan, PlanSpec, labels};
use slipway::plan::core::config::JobConfig;
use slipway::plan::core::job_index::JobIndex;
use slipway::plan::core::settled::{self, SettledNodes};
use slipway::plan::core::{self as plan_core, PlanInput, TemplateMemo};
use slipway::reboot_policy::api::{RebootPolicy, RebootPolicySpec};
use slipway::reboot_policy::core::request::REBOOT_REQUIRED_ANNOTATION;
use slipway::reboot_policy::core::{self as policy_core, NodeView, PolicyInput};

const CONCURRENCY: i64 = 100;
const PLANS: usize = 50;

fn main() {
    let sizes: Vec<usize> = std::env::var("SLIPWAY_BENCH_SIZES")
        .ok()
        .map(|s| {
            s.split(',')
                .filter_map(|n| n.trim().parse().ok())
                .collect::<Vec<_>>()
        })
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| vec![10_000, 100_000, 1_000_000]);
    // SLIPWAY_BENCH_ONLY: a comma-separated list of scenarios, to profile one alone.
    let only = std::env::var("SLIPWAY_BENCH_ONLY").unwrap_or_default();
    let runs = |scenario: &str| only.is_empty() || only.split(',').any(|s| s.trim() == scenario);
    for n in sizes {
        let nodes = fleet(n);
        if runs("plan-first") {
            print_line("plan-first", n, n, plan_first(&nodes));
        }
        if runs("plan-steady") || runs("plan-done") {
            let (steady, done) = plan_steady_and_done(&nodes);
            print_line("plan-steady", n, n, steady);
            print_line("plan-done", n, n, done);
        }
        if runs("plans-50") {
            print_line("plans-50", n, n, many_plans(&nodes));
        }
        if runs("policy") {
            print_line("policy", n, n, policy(&nodes));
        }
        if runs("plan-budgets") {
            print_line("plan-budgets", n, n, plan_budgets(&nodes));
        }
        if runs("plan-change") {
            print_line("plan-change", n, n, plan_change(&nodes));
        }
        if runs("plan-mid") {
            let (took, read) = plan_mid(&nodes);
            print_line("plan-mid", n, read, took);
        }
        if runs("index") {
            print_line("index", n, n, index(&nodes));
        }
    }
}

fn print_line(scenario: &str, nodes: usize, looked_at: usize, d: Duration) {
    let ms = d.as_secs_f64() * 1e3;
    let per_node = d.as_nanos() as f64 / looked_at.max(1) as f64;
    println!("decisions {scenario:<11} nodes={nodes:<8} ms={ms:<10.2} per_node_ns={per_node:.0}");
    println!("result: {scenario} {nodes} nodes {ms:.2} ms");
}

/// `n` Ready nodes, each in pool `i % 50` (what `plans-50` selects on).
fn fleet(n: usize) -> Vec<NodeInfo> {
    (0..n)
        .map(|i| {
            let name = format!("node-{i:07}");
            NodeInfo {
                uid: format!("uid-{i}"),
                labels: BTreeMap::from([
                    (labels::HOSTNAME.to_string(), name.clone()),
                    (labels::OS.to_string(), "linux".to_string()),
                    ("pool".to_string(), format!("p{}", i % PLANS)),
                ]),
                name,
                ready: true,
                boot_id: format!("boot-{i}"),
                ..Default::default()
            }
        })
        .collect()
}

fn plan(name: &str, selector: BTreeMap<String, String>) -> Plan {
    Plan {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("system-upgrade".into()),
            uid: Some(format!("uid-{name}")),
            generation: Some(1),
            ..Default::default()
        },
        spec: PlanSpec {
            concurrency: Some(CONCURRENCY),
            version: Some("v1.34.2+k3s1".into()),
            service_account_name: Some("system-upgrade".into()),
            node_selector: Some(LabelSelector {
                match_labels: Some(selector),
                ..Default::default()
            }),
            upgrade: ContainerSpec {
                image: "rancher/k3s-upgrade".into(),
                ..Default::default()
            },
            ..Default::default()
        },
        status: None,
    }
}

/// One decision of `plan` over `nodes` with `jobs` live.
fn decide(
    plan: &Plan,
    nodes: &[&NodeInfo],
    jobs: &[&Job],
    memo: &RefCell<TemplateMemo>,
) -> plan_core::PlanDecision {
    decide_under(plan, nodes, None, jobs, memo, &Budget::unlimited())
}

fn decide_under(
    plan: &Plan,
    nodes: &[&NodeInfo],
    settled: Option<&SettledNodes>,
    jobs: &[&Job],
    memo: &RefCell<TemplateMemo>,
    budget: &Budget,
) -> plan_core::PlanDecision {
    let config = JobConfig::default();
    // As the controller keeps the memo: read by the decision, added to after it.
    let known = memo.borrow();
    let (decision, learned) = plan_core::decide_learning(
        &PlanInput {
            plan,
            nodes,
            settled,
            jobs,
            hook_jobs: &[],
            reboot_pods: &[],
            pull_pods: &[],
            health: &BTreeMap::new(),
            secrets: &BTreeMap::new(),
            channel: None,
            controller_name: "system-upgrade-controller",
            job_config: &config,
            budget,
            shared: &BTreeSet::new(),
            checks: &[],
            stages: Some(&[]),
            templates: Some(&known),
            explain: false,
            pruned: None,
        },
        now(),
    );
    drop(known);
    memo.borrow_mut().learn(learned);
    decision
}

fn now() -> Timestamp {
    Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The median of `runs` timings of `f` (at least 3 at small sizes, 1 at a million nodes).
fn median(n: usize, mut f: impl FnMut()) -> Duration {
    let runs = (2_000_000 / n.max(1)).clamp(1, 9);
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn everything() -> BTreeMap<String, String> {
    BTreeMap::from([(labels::OS.to_string(), "linux".to_string())])
}

fn plan_first(nodes: &[NodeInfo]) -> Duration {
    let refs: Vec<&NodeInfo> = nodes.iter().collect();
    let p = plan("first", everything());
    median(nodes.len(), || {
        let memo = RefCell::new(TemplateMemo::default());
        std::hint::black_box(decide(&p, &refs, &[], &memo));
    })
}

/// `plan-first` under 10 budgets: each a fifth of the pools (every node is in two), 1% of its
/// nodes. The pools are measured over every node, as `runtime::Shared` does before each decision.
fn plan_budgets(nodes: &[NodeInfo]) -> Duration {
    let refs: Vec<&NodeInfo> = nodes.iter().collect();
    let p = plan("budgeted", everything());
    let pools: Vec<Pool> = (0..10)
        .map(|b| {
            let values: Vec<String> = (0..PLANS / 5)
                .map(|i| format!("p{}", (b * 5 + i) % PLANS))
                .collect();
            let budget: DisruptionBudget = serde_json::from_value(serde_json::json!({
                "apiVersion": "slipway.dev/v1alpha1", "kind": "DisruptionBudget",
                "metadata": {"name": format!("budget-{b}")},
                "spec": {"maxUnavailable": "1%", "nodeSelector": {"matchExpressions": [
                    {"key": "pool", "operator": "In", "values": values}]}},
            }))
            .unwrap_or_default();
            Pool::new(&budget)
        })
        .collect();
    let held = BTreeSet::new();
    // The node index counts each pool's members once per budget read, then node by node.
    let kept: Vec<Members> = pools.iter().map(|p| Members::of(p, nodes)).collect();
    let by_name: HashMap<&str, &NodeInfo> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    median(nodes.len(), || {
        let memo = RefCell::new(TemplateMemo::default());
        let measured: Vec<_> = (pools.iter().zip(&kept))
            .map(|(pool, kept)| {
                let member =
                    |n: &str| (by_name.get(n)).is_some_and(|n| pool.selector.matches(&n.labels));
                pool.measure_kept(kept, member, &held, &held, now())
            })
            .collect();
        let budget = Budget::new(BTreeMap::new(), &measured, Reason::Upgrade);
        std::hint::black_box(decide_under(&p, &refs, None, &[], &memo, &budget));
    })
}

fn plan_steady_and_done(nodes: &[NodeInfo]) -> (Duration, Duration) {
    let refs: Vec<&NodeInfo> = nodes.iter().collect();
    let mut p = plan("steady", everything());
    let memo = RefCell::new(TemplateMemo::default());
    let first = decide(&p, &refs, &[], &memo);
    let jobs: Vec<Job> = first.create_jobs().into_iter().cloned().collect();
    let hash = first.status.latest_hash.clone().unwrap_or_default();
    p.status = Some(first.status);
    let job_refs: Vec<&Job> = jobs.iter().collect();
    let steady = median(nodes.len(), || {
        std::hint::black_box(decide(&p, &refs, &job_refs, &memo));
    });
    let key = labels::plan_node_label("steady");
    let done: Vec<NodeInfo> = nodes
        .iter()
        .map(|n| {
            let mut n = n.clone();
            n.labels.insert(key.clone(), hash.clone());
            n
        })
        .collect();
    let done_refs: Vec<&NodeInfo> = done.iter().collect();
    if let Some(s) = p.status.as_mut() {
        s.applying.clear();
    }
    let settled = decide(&p, &done_refs, &[], &memo);
    p.status = Some(settled.status);
    let idle = median(nodes.len(), || {
        std::hint::black_box(decide(&p, &done_refs, &[], &memo));
    });
    (steady, idle)
}

/// 50 Plans, each over its pool, every node done: the sum of their decisions. Each Plan sees only
/// its candidates, as the node index gives them.
fn many_plans(nodes: &[NodeInfo]) -> Duration {
    let memo = RefCell::new(TemplateMemo::default());
    let mut plans: Vec<(Plan, Vec<NodeInfo>)> = (0..PLANS)
        .map(|i| {
            let pool = BTreeMap::from([("pool".to_string(), format!("p{i}"))]);
            let p = plan(&format!("plan-{i}"), pool);
            let mine: Vec<NodeInfo> = nodes
                .iter()
                .filter(|n| n.labels.get("pool").map(String::as_str) == Some(&format!("p{i}")))
                .cloned()
                .collect();
            (p, mine)
        })
        .collect();
    for (p, mine) in &mut plans {
        let refs: Vec<&NodeInfo> = mine.iter().collect();
        let hash = decide(p, &refs, &[], &memo)
            .status
            .latest_hash
            .unwrap_or_default();
        let key = labels::plan_node_label(p.metadata.name.as_deref().unwrap_or_default());
        for n in mine.iter_mut() {
            n.labels.insert(key.clone(), hash.clone());
        }
        let refs: Vec<&NodeInfo> = mine.iter().collect();
        p.status = Some(decide(p, &refs, &[], &memo).status);
    }
    median(nodes.len(), || {
        for (p, mine) in &plans {
            let refs: Vec<&NodeInfo> = mine.iter().collect();
            std::hint::black_box(decide(p, &refs, &[], &memo));
        }
    })
}

fn policy(nodes: &[NodeInfo]) -> Duration {
    let asking: Vec<NodeInfo> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut n = n.clone();
            if i % 100 == 0 {
                n.annotations
                    .insert(REBOOT_REQUIRED_ANNOTATION.to_string(), n.boot_id.clone());
            }
            n
        })
        .collect();
    let views: Vec<NodeView<'_>> = asking.iter().map(NodeView::bare).collect();
    let mut p = RebootPolicy::new(
        "nightly",
        RebootPolicySpec {
            concurrency: Some(10),
            ..Default::default()
        },
    );
    p.metadata.generation = Some(1);
    let spec = policy_core::read_spec(&p.spec, "busybox");
    median(nodes.len(), || {
        std::hint::black_box(policy_core::decide(
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
            now(),
        ));
    })
}

/// A done Plan over every node, kept in the node index; each run replaces one more node (deleted,
/// then created again without the Plan's label) and reconciles as the controller does.
fn plan_change(nodes: &[NodeInfo]) -> Duration {
    let refs: Vec<&NodeInfo> = nodes.iter().collect();
    let mut p = plan("change", everything());
    let memo = RefCell::new(TemplateMemo::default());
    let first = decide(&p, &refs, &[], &memo);
    let hash = first.status.latest_hash.clone().unwrap_or_default();
    p.status = Some(first.status);
    let key = labels::plan_node_label("change");
    let done: Vec<NodeInfo> = (nodes.iter().cloned())
        .map(|mut n| {
            n.labels.insert(key.clone(), hash.clone());
            n
        })
        .collect();
    if let Some(s) = p.status.as_mut() {
        s.applying.clear();
    }
    let done_refs: Vec<&NodeInfo> = done.iter().collect();
    p.status = Some(decide(&p, &done_refs, &[], &memo).status);
    let mut index = indexed(&done);
    let jobs = Jobs::of(&[]);
    let reconcile = |index: &mut NodeIndex| reconcile_settled(&p, index, &jobs, &memo).0;
    // The first reconcile finds the unsettled nodes among every candidate, once.
    reconcile(&mut index);
    let mut replaced = done.iter();
    median(1, || {
        if let Some(n) = replaced.next() {
            let mut fresh = n.clone();
            fresh.labels.remove(&key);
            fresh.uid = format!("{}-again", n.uid);
            index.delete(&n.name);
            index.apply(fresh);
        }
        std::hint::black_box(reconcile(&mut index));
    })
}

/// `plan-mid`: the rollout of one Plan (concurrency a tenth of the nodes) played decision by
/// decision, every Job completing at once, until half the nodes carry its hash; then the next
/// reconcile as the controller makes it (the unsettled candidates from the node index, the rest
/// counted). Also returns how many nodes that decision read.
fn plan_mid(nodes: &[NodeInfo]) -> (Duration, usize) {
    let mut p = plan("mid", everything());
    p.spec.concurrency = Some((nodes.len() / 10).max(1) as i64);
    let memo = RefCell::new(TemplateMemo::default());
    let mut fleet: BTreeMap<String, NodeInfo> = (nodes.iter().cloned())
        .map(|n| (n.name.clone(), n))
        .collect();
    let mut jobs: Vec<Job> = Vec::new();
    let key = labels::plan_node_label("mid");
    let done = |fleet: &BTreeMap<String, NodeInfo>| {
        (fleet.values())
            .filter(|n| n.labels.contains_key(&key))
            .count()
    };
    while done(&fleet) < nodes.len() / 2 {
        let refs: Vec<&NodeInfo> = fleet.values().collect();
        let job_refs: Vec<&Job> = jobs.iter().collect();
        let d = decide(&p, &refs, &job_refs, &memo);
        let created: Vec<Job> = d.create_jobs().into_iter().cloned().collect();
        for change in d.node_patches() {
            if let Some(n) = fleet.get_mut(&change.node) {
                for (k, v) in &change.labels {
                    match v {
                        Some(v) => n.labels.insert(k.clone(), v.clone()),
                        None => n.labels.remove(k),
                    };
                }
            }
        }
        p.status = Some(d.status);
        // Every Job the cluster has runs to completion before the next decision.
        jobs.extend(created);
        jobs.iter_mut().for_each(complete);
    }
    // The next wave is running.
    let refs: Vec<&NodeInfo> = fleet.values().collect();
    let job_refs: Vec<&Job> = jobs.iter().collect();
    let d = decide(&p, &refs, &job_refs, &memo);
    jobs.extend(d.create_jobs().into_iter().cloned());
    p.status = Some(d.status);
    let fleet: Vec<NodeInfo> = fleet.into_values().collect();
    let mut index = indexed(&fleet);
    let jobs = Jobs::of(&jobs);
    let mut read_count = 0;
    let mut reconcile = |index: &mut NodeIndex| {
        let (d, read) = reconcile_settled(&p, index, &jobs, &memo);
        read_count = read;
        d
    };
    // The index finds the unsettled candidates once; the reconciles after that are timed.
    reconcile(&mut index);
    let took = median(nodes.len(), || {
        std::hint::black_box(reconcile(&mut index));
    });
    (took, read_count)
}

/// An index of `nodes`, listed once.
fn indexed(nodes: &[NodeInfo]) -> NodeIndex {
    let mut index = NodeIndex::new();
    index.relist_start();
    nodes.iter().for_each(|n| index.relisted(n.clone()));
    index.relist_done();
    index
}

/// The Job cache as the Job watch keeps it: the Jobs by name, and their index by Plan.
struct Jobs<'a> {
    by_name: HashMap<&'a str, &'a Job>,
    index: JobIndex,
}

impl<'a> Jobs<'a> {
    fn of(jobs: &'a [Job]) -> Jobs<'a> {
        Jobs {
            by_name: (jobs.iter())
                .map(|j| (j.metadata.name.as_deref().unwrap_or_default(), j))
                .collect(),
            index: JobIndex::listed(jobs),
        }
    }

    fn get(&self, names: Vec<std::sync::Arc<str>>) -> Vec<&'a Job> {
        (names.iter())
            .filter_map(|n| self.by_name.get(n.as_ref()).copied())
            .collect()
    }
}

/// One reconcile of `p` as the controller assembles it: its target, the Jobs its decision reads
/// but the quiet ones, the unsettled candidates and those its records name from `index`, the rest
/// counted, the quiet Jobs of the nodes read; the decision, and how many nodes it read.
fn reconcile_settled(
    p: &Plan,
    index: &mut NodeIndex,
    jobs: &Jobs<'_>,
    memo: &RefCell<TemplateMemo>,
) -> (plan_core::PlanDecision, usize) {
    let name = p.metadata.name.clone().unwrap_or_default();
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let who = Holder::Plan {
        namespace: "system-upgrade".into(),
        name: name.clone(),
    };
    let config = JobConfig::default();
    let target =
        settled::target(p, &BTreeMap::new(), None, &config, now()).unwrap_or(settled::Target {
            hash: String::new(),
            version: String::new(),
        });
    let mut read_jobs = jobs.get(jobs.index.plan_jobs(&name, Some(&target.version)));
    let named = settled::named(p, &read_jobs, &[]);
    let rule = settled::rule(p, &target.hash);
    let interest = || plan_core::interest(p);
    let (read, count) = index.unsettled(&who, &uid, Some(1), interest, &rule, &named);
    let read: Vec<&NodeInfo> = read.iter().map(AsRef::as_ref).collect();
    let quiet = jobs
        .index
        .quiet_of(&name, &target.version, read.iter().map(|n| n.name.as_str()));
    read_jobs.extend(jobs.get(quiet));
    let settled = SettledNodes {
        hash: target.hash,
        count,
    };
    let d = decide_under(
        p,
        &read,
        Some(&settled),
        &read_jobs,
        memo,
        &Budget::unlimited(),
    );
    (d, read.len())
}

/// The Job as the job controller leaves it when its pod succeeded.
fn complete(job: &mut Job) {
    let status = job.status.get_or_insert_default();
    if status.conditions.is_none() {
        status.succeeded = Some(1);
        status.conditions = Some(vec![JobCondition {
            type_: "Complete".into(),
            status: "True".into(),
            last_transition_time: Some(Time(now())),
            ..Default::default()
        }]);
    }
}

fn index(nodes: &[NodeInfo]) -> Duration {
    median(nodes.len(), || {
        let mut index = NodeIndex::new();
        index.relist_start();
        for n in nodes {
            index.relisted(n.clone());
        }
        index.relist_done();
        let who = Holder::Plan {
            namespace: "system-upgrade".into(),
            name: "p".into(),
        };
        let selector =
            slipway::common::selector::Selector::from_label_selector(Some(&LabelSelector {
                match_labels: Some(BTreeMap::from([("pool".to_string(), "p7".to_string())])),
                ..Default::default()
            }))
            .unwrap_or(slipway::common::selector::Selector::Nothing);
        let found = index.candidates(&who, "uid-p", Some(1), || Interest {
            selector,
            label: None,
            conditions: false,
        });
        std::hint::black_box(found);
    })
}
