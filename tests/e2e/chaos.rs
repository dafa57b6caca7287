//! Fault injection on the local cluster: rollouts under controller kills, leader failovers, kills
//! while nodes reboot, NodeMaintenances taking nodes of a rollout through kills, a RebootPolicy
//! and a NodeOp that reboot their nodes under kills, kills under a DisruptionBudget shared by a
//! Plan and a RebootPolicy, an API server restart, a paused etcd, a cut connection, Job and node
//! churn, Plan edits and deletion, and a soak of Plan changes. An invariant checker watches Jobs,
//! reboot pods and Nodes on its own (it knows nothing of slipway's state) and records every
//! violation.
//!
//! Each scenario is a scene of its own: a namespace, nodes, its controller(s) and a checker. In
//! the normal run each scene runs its scenario once, small, with a fixed seed of its own (printed
//! with its row, overridden by `SLIPWAY_CHAOS_SEED`), and fails on any violation or when it
//! injected none of its faults. The scenes that stop the API server or pause etcd run on a cluster
//! of their own, the one with a DisruptionBudget on the budgets' cluster (one scene at a time on
//! each); those whose controllers reconcile RebootPolicies,
//! NodeMaintenances or NodeOps are cluster-wide; the others share the cluster.
//!
//! `full_suite` (ignored; `just chaos NODES RUNS SOAK_SECS` runs it) runs every scenario at full
//! size, one after another, each run with a random seed, prints a table (scenario, runs, faults,
//! violations, longest stall) and fails on any violation. Its environment:
//!   SLIPWAY_CHAOS_NODES (20)        nodes per rollout
//!   SLIPWAY_CHAOS_CONCURRENCY (3)   the Plans' concurrency
//!   SLIPWAY_CHAOS_KILLS (20)        controller kills, at most, in the scenarios that kill it
//!   SLIPWAY_CHAOS_CHURN (no limit)  faults, at most, in `job-and-node-churn`
//!   SLIPWAY_CHAOS_SOAK_CYCLES (20)  Plan create/update/delete cycles in `soak`
//!   SLIPWAY_CHAOS_SOAK_SECS (0)     spread the soak's cycles over this long
//!   SLIPWAY_CHAOS_RUNS (1)          runs of each scenario
//!   SLIPWAY_CHAOS_SCENARIOS (all)   comma-separated names to run
//!   SLIPWAY_CHAOS_SEED (random)     the seed of every run, to repeat one (each run prints its own)

use crate::support;

mod expired;
mod flapping;
mod proxy;
mod skew;
mod throttle;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::Cluster;
use crate::support::controller::{ControllerProcess, FAST_ELECTION};
use crate::support::process::signal;
use crate::support::scene::{POOL_LABEL, Scene, SceneBuilder};
use anyhow::anyhow;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use slipway::maintenance::api::NodeMaintenance;
use slipway::node::budget::DisruptionBudget;
use slipway::plan::api::Plan;
use slipway::reboot_policy::api::RebootPolicy;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const PLAN_NODE_PREFIX: &str = "plan.upgrade.cattle.io/";
const REBOOT_LABEL: &str = "slipway.dev/reboot";
/// The taint of a node in maintenance (medik8s node-maintenance-operator's).
const DRAIN_TAINT: &str = "medik8s.io/drain";
const REBOOT_PLAN_LABEL: &str = "slipway.dev/plan";
const REBOOT_POLICY_LABEL: &str = "slipway.dev/reboot-policy";
/// The labels of a NodeOp's Jobs and pods (kairos-operator's).
const NODEOP_LABEL: &str = "kairos.io/nodeop";
const NODEOP_NODE_LABEL: &str = "kairos.io/node";

/// The CRDs of the cluster-wide kinds the scenes create.
const REBOOT_POLICY_CRD: &str = "rebootpolicies.slipway.dev";
const MAINTENANCE_CRD: &str = "nodemaintenances.nodemaintenance.medik8s.io";
const NODEOP_CRD: &str = "nodeops.operator.kairos.io";

/// The lease duration of [`FAST_ELECTION`].
const LEASE: Duration = Duration::from_secs(10);

/// How long kube-apiserver may take to exit after SIGTERM. It stops listening at once, then
/// drains open requests for 30 s and more: past this, SIGKILL. The outage still outlasts the
/// leader's renew deadline (6 s).
const APISERVER_GRACE: Duration = Duration::from_secs(5);

/// A node labelled done must have a completed Job of that hash within this long (the checker's
/// Job and Node watches are not ordered with each other).
const MATCH_GRACE: Duration = Duration::from_secs(20);

/// A new Plan after the soak must be picked up within this long.
const PICKUP_LIMIT: Duration = Duration::from_secs(20);

/// How big a scenario is.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    nodes: usize,
    concurrency: usize,
    /// Controller kills, at most, in the scenarios that kill it again and again.
    kills: usize,
    /// Faults, at most, in `job-and-node-churn` (otherwise until the rollout finishes).
    churn: usize,
    soak_cycles: usize,
    /// The soak's cycles are spread over this long.
    soak: Duration,
}

impl Sizes {
    /// A scene of the normal run: a small pool whose rollout still lasts through every fault of
    /// the scenario.
    const SMALL: Sizes = Sizes {
        nodes: 6,
        concurrency: 2,
        kills: 10,
        churn: 15,
        soak_cycles: 20,
        soak: Duration::ZERO,
    };

    /// The full suite's sizes, from the environment.
    fn from_env() -> Sizes {
        Sizes {
            nodes: number("SLIPWAY_CHAOS_NODES", 20).max(2),
            concurrency: number("SLIPWAY_CHAOS_CONCURRENCY", 3).max(1),
            kills: number("SLIPWAY_CHAOS_KILLS", 20),
            churn: number("SLIPWAY_CHAOS_CHURN", usize::MAX),
            soak_cycles: number("SLIPWAY_CHAOS_SOAK_CYCLES", 20),
            soak: Duration::from_secs(number("SLIPWAY_CHAOS_SOAK_SECS", 0) as u64),
        }
    }
}

fn number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `SLIPWAY_CHAOS_SEED`, when set: the seed of every run.
fn seed_from_env() -> Option<u64> {
    std::env::var("SLIPWAY_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
}

/// A seed from the clock, for the full suite's runs.
fn fresh_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

/// A line of the run's log, past the test harness's capture: the seed and the row of a scene
/// that passes show too.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "chaos: {line}");
}

/// xorshift64*: reproducible from the printed seed.
struct Random(u64);

impl Random {
    fn seeded(seed: u64) -> Random {
        Random(seed.max(1))
    }

    /// A generator of its own, drawn from this one, for a task beside the scenario.
    fn fork(&mut self) -> Random {
        Random::seeded(self.next())
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.next() % (to - from).max(1))
    }
}

/// A task beside the scenario (playing the nodes' reboots), aborted when dropped.
struct Task(JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}
// ---------------------------------------------------------------------------------------------
// The invariant checker

#[derive(Debug)]
struct SeenJob {
    plan: String,
    node: String,
    live: bool,
}

/// What the checker knows, from its own watches only.
#[derive(Default)]
struct Observed {
    jobs: BTreeMap<String, SeenJob>,
    /// (plan, node, hash) of every Job seen complete.
    completed: BTreeSet<(String, String, String)>,
    /// Reboot pods: name -> (plan, node), while not being deleted.
    reboot_pods: BTreeMap<String, (String, String)>,
    /// Per node: whether it is cordoned, and its `plan.upgrade.cattle.io/<plan>` labels.
    nodes: BTreeMap<String, (bool, BTreeMap<String, String>)>,
    /// Nodes carrying the maintenance taint, now and ever.
    in_maintenance: BTreeSet<String>,
    ever_in_maintenance: BTreeSet<String>,
    /// Done labels not yet matched to a completed Job.
    unmatched: Vec<(String, String, String, Instant)>,
    /// Names listed since the last watch (re)start, to drop what went away meanwhile.
    relisting_jobs: Option<BTreeSet<String>>,
    relisting_nodes: Option<BTreeSet<String>>,
    relisting_pods: Option<BTreeSet<String>>,
    violations: Vec<String>,
    reported: BTreeSet<String>,
    last_progress: Option<Instant>,
    longest_stall: Duration,
}

/// What the checker holds the cluster to.
#[derive(Default, Clone)]
struct Limits {
    /// Plan name -> concurrency.
    concurrency: BTreeMap<String, usize>,
    /// Cordoned nodes allowed in the pool at once (the concurrency of the Plans that cordon).
    cordons: usize,
}

impl Limits {
    /// One Plan of `concurrency`, which cordons.
    fn one_plan(name: &str, concurrency: usize) -> Limits {
        Limits {
            concurrency: BTreeMap::from([(name.to_string(), concurrency)]),
            cordons: concurrency,
        }
    }
}

impl Observed {
    fn violation(&mut self, key: String, text: String) {
        if self.reported.insert(key) {
            self.violations.push(text);
        }
    }

    fn progress(&mut self, now: Instant) {
        if let Some(last) = self.last_progress {
            self.longest_stall = self.longest_stall.max(now - last);
        }
        self.last_progress = Some(now);
    }

    fn apply_job(&mut self, job: &Job, limits: &Limits) {
        let labels = job.labels();
        // A NodeOp's Job counts as a Plan `nodeop:<name>`'s.
        let nodeop = labels.get(NODEOP_LABEL).map(|n| format!("nodeop:{n}"));
        let (Some(plan), Some(node)) = (
            nodeop.as_ref().or(labels.get("upgrade.cattle.io/plan")),
            labels
                .get("upgrade.cattle.io/node")
                .or(labels.get(NODEOP_NODE_LABEL)),
        ) else {
            return;
        };
        let hash = labels
            .get(&format!("{PLAN_NODE_PREFIX}{plan}"))
            .cloned()
            .unwrap_or_default();
        let conditions = job
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let is = |t: &str| {
            conditions
                .iter()
                .any(|c| c.type_ == t && c.status == "True")
        };
        if is("Complete") {
            self.completed.insert((plan.clone(), node.clone(), hash));
        }
        let live = !is("Complete") && !is("Failed") && job.metadata.deletion_timestamp.is_none();
        let name = job.name_any();
        self.jobs.insert(
            name,
            SeenJob {
                plan: plan.clone(),
                node: node.clone(),
                live,
            },
        );
        self.check_jobs(limits);
        self.check_maintenance();
    }

    /// One budget: a node that maintenance took (it carries the drain taint) runs no Plan's Job.
    fn check_maintenance(&mut self) {
        if self.relisting_jobs.is_some() || self.relisting_nodes.is_some() {
            return;
        }
        let found: Vec<(String, String)> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.live && self.in_maintenance.contains(&j.node))
            .map(|(name, j)| {
                (
                    format!("maintenance/{name}"),
                    format!(
                        "Job {name} of Plan {} is live on node {} under maintenance",
                        j.plan, j.node
                    ),
                )
            })
            .collect();
        for (key, text) in found {
            self.violation(key, text);
        }
    }

    fn check_jobs(&mut self, limits: &Limits) {
        // Mid-relist (the watch restarted) the map mixes fresh and stale objects: judge only
        // once the relist is complete.
        if self.relisting_jobs.is_some() {
            return;
        }
        let mut per_plan: BTreeMap<&str, usize> = BTreeMap::new();
        let mut per_node: BTreeMap<(&str, &str), Vec<&str>> = BTreeMap::new();
        for (name, j) in self.jobs.iter().filter(|(_, j)| j.live) {
            *per_plan.entry(&j.plan).or_default() += 1;
            per_node.entry((&j.plan, &j.node)).or_default().push(name);
        }
        let mut found = Vec::new();
        for (plan, live) in per_plan {
            let allowed = limits.concurrency.get(plan).copied().unwrap_or(usize::MAX);
            if live > allowed {
                found.push((
                    format!("jobs/{plan}/{live}"),
                    format!("Plan {plan}: {live} live Jobs, concurrency {allowed}"),
                ));
            }
        }
        for ((plan, node), jobs) in per_node {
            if jobs.len() > 1 {
                found.push((
                    format!("twice/{plan}/{node}/{jobs:?}"),
                    format!("Plan {plan}: live Jobs {jobs:?} on one node {node}"),
                ));
            }
        }
        for (key, text) in found {
            self.violation(key, text);
        }
    }

    /// Nodes with a reboot pod (rebooting, or about to) count against the Plan's concurrency.
    fn apply_reboot_pod(&mut self, pod: &Pod, limits: &Limits) {
        let name = pod.name_any();
        // A RebootPolicy's reboot pods count against the policy's concurrency, keyed
        // `policy:<name>` in the limits.
        let plan = match (
            pod.labels().get(REBOOT_POLICY_LABEL),
            pod.labels().get(NODEOP_LABEL),
        ) {
            (Some(policy), _) => format!("policy:{policy}"),
            (None, Some(nodeop)) => format!("nodeop:{nodeop}"),
            (None, None) => pod
                .labels()
                .get(REBOOT_PLAN_LABEL)
                .cloned()
                .unwrap_or_default(),
        };
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        if pod.metadata.deletion_timestamp.is_some() {
            self.reboot_pods.remove(&name);
        } else {
            self.reboot_pods.insert(name, (plan, node));
        }
        self.check_reboot_pods(limits);
    }

    fn check_reboot_pods(&mut self, limits: &Limits) {
        if self.relisting_pods.is_some() {
            return;
        }
        let mut per_plan: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        let mut per_node: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for (plan, node) in self.reboot_pods.values() {
            per_plan.entry(plan).or_default().insert(node);
            *per_node.entry((plan, node)).or_default() += 1;
        }
        let mut found = Vec::new();
        for (plan, nodes) in per_plan {
            let allowed = limits.concurrency.get(plan).copied().unwrap_or(usize::MAX);
            if nodes.len() > allowed {
                found.push((
                    format!("rebooting/{plan}/{}", nodes.len()),
                    format!(
                        "Plan {plan}: reboot pods on {} nodes, concurrency {allowed}",
                        nodes.len()
                    ),
                ));
            }
        }
        for ((plan, node), n) in per_node {
            if n > 1 {
                found.push((
                    format!("reboot-twice/{plan}/{node}"),
                    format!("Plan {plan}: {n} reboot pods on node {node}"),
                ));
            }
        }
        for (key, text) in found {
            self.violation(key, text);
        }
    }

    fn apply_node(&mut self, node: &Node, limits: &Limits, now: Instant) {
        let name = node.name_any();
        let cordoned = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        let done: BTreeMap<String, String> = node
            .labels()
            .iter()
            .filter_map(|(k, v)| Some((k.strip_prefix(PLAN_NODE_PREFIX)?.to_string(), v.clone())))
            .collect();
        let before = self
            .nodes
            .get(&name)
            .map(|(_, d)| d.clone())
            .unwrap_or_default();
        for (plan, hash) in &done {
            if before.get(plan) != Some(hash) && !hash.is_empty() && hash != "disabled" {
                self.progress(now);
                self.unmatched
                    .push((plan.clone(), name.clone(), hash.clone(), now));
            }
        }
        let tainted = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == DRAIN_TAINT));
        if tainted {
            self.in_maintenance.insert(name.clone());
            self.ever_in_maintenance.insert(name.clone());
        } else {
            self.in_maintenance.remove(&name);
        }
        self.nodes.insert(name, (cordoned, done));
        self.check_cordons(limits);
        self.check_maintenance();
    }

    fn check_cordons(&mut self, limits: &Limits) {
        if self.relisting_nodes.is_some() {
            return;
        }
        let cordons = self.nodes.values().filter(|(c, _)| *c).count();
        if cordons > limits.cordons {
            self.violation(
                format!("cordons/{cordons}"),
                format!(
                    "{cordons} cordoned nodes, at most {} allowed",
                    limits.cordons
                ),
            );
        }
    }

    fn see(&mut self, seen: Seen, limits: &Limits, now: Instant) {
        let relisted = match &seen {
            Seen::Job(e) => matches!(**e, Ok(watcher::Event::InitDone)),
            Seen::Node(e) => matches!(**e, Ok(watcher::Event::InitDone)),
            Seen::Pod(e) => matches!(**e, Ok(watcher::Event::InitDone)),
            Seen::Tick => false,
        };
        match seen {
            Seen::Job(event) => {
                if let Some(j) = fold(*event, &mut self.relisting_jobs, &mut self.jobs) {
                    self.apply_job(&j, limits);
                }
            }
            Seen::Node(event) => {
                if let Some(n) = fold(*event, &mut self.relisting_nodes, &mut self.nodes) {
                    self.apply_node(&n, limits, now);
                }
            }
            Seen::Pod(event) => {
                if let Some(p) = fold(*event, &mut self.relisting_pods, &mut self.reboot_pods) {
                    self.apply_reboot_pod(&p, limits);
                }
            }
            Seen::Tick => self.settle(now, MATCH_GRACE),
        }
        // A relist is judged once it is complete.
        if relisted {
            self.check_jobs(limits);
            self.check_reboot_pods(limits);
            self.check_cordons(limits);
            self.check_maintenance();
        }
    }

    /// Done labels whose Job completed are settled; those without one after the grace are
    /// violations.
    fn settle(&mut self, now: Instant, grace: Duration) {
        let unmatched = std::mem::take(&mut self.unmatched);
        for (plan, node, hash, at) in unmatched {
            if self
                .completed
                .contains(&(plan.clone(), node.clone(), hash.clone()))
            {
                continue;
            }
            if now - at >= grace {
                self.violation(
                    format!("done/{plan}/{node}/{hash}"),
                    format!("node {node} labelled done for Plan {plan} ({hash}) but no Job of it completed"),
                );
            } else {
                self.unmatched.push((plan, node, hash, at));
            }
        }
    }
}

/// Folds one watch event into `items` (keyed by name): a deletion removes, and a relist (after
/// the watch restarted) drops what it no longer lists. Returns the object of an event that shows
/// one, for the invariants to look at. Watch errors (the API server away) are retried with backoff.
fn fold<K: kube::Resource, T>(
    event: Result<watcher::Event<K>, watcher::Error>,
    relisting: &mut Option<BTreeSet<String>>,
    items: &mut BTreeMap<String, T>,
) -> Option<K> {
    match event {
        Ok(watcher::Event::Apply(k)) => Some(k),
        Ok(watcher::Event::InitApply(k)) => {
            if let Some(seen) = relisting {
                seen.insert(k.name_any());
            }
            Some(k)
        }
        Ok(watcher::Event::Delete(k)) => {
            items.remove(&k.name_any());
            None
        }
        Ok(watcher::Event::Init) => {
            *relisting = Some(BTreeSet::new());
            None
        }
        Ok(watcher::Event::InitDone) => {
            if let Some(seen) = relisting.take() {
                items.retain(|name, _| seen.contains(name));
            }
            None
        }
        Err(_) => None,
    }
}

enum Seen {
    Job(Box<Result<watcher::Event<Job>, watcher::Error>>),
    Node(Box<Result<watcher::Event<Node>, watcher::Error>>),
    Pod(Box<Result<watcher::Event<Pod>, watcher::Error>>),
    Tick,
}

/// Watches the Jobs of a namespace and the Nodes of a pool on its own connection.
struct Checker {
    observed: Arc<Mutex<Observed>>,
    task: JoinHandle<()>,
    started: Instant,
}

impl Checker {
    fn start(client: &Client, ns: &str, pool: &str, limits: Limits) -> Checker {
        let observed = Arc::new(Mutex::new(Observed::default()));
        let jobs = watcher(
            Api::<Job>::namespaced(client.clone(), ns),
            watcher::Config::default(),
        )
        .default_backoff()
        .map(|e| Seen::Job(Box::new(e)));
        let nodes = watcher(
            Api::<Node>::all(client.clone()),
            watcher::Config::default().labels(&format!("{POOL_LABEL}={pool}")),
        )
        .default_backoff()
        .map(|e| Seen::Node(Box::new(e)));
        let pods = watcher(
            Api::<Pod>::namespaced(client.clone(), ns),
            watcher::Config::default().labels(&format!("{REBOOT_LABEL}=true")),
        )
        .default_backoff()
        .map(|e| Seen::Pod(Box::new(e)));
        let ticks = futures::stream::unfold((), |()| async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            Some((Seen::Tick, ()))
        });
        let mut all = futures::stream::select(
            futures::stream::select(futures::stream::select(jobs, nodes), pods),
            ticks,
        )
        .boxed();
        let o = observed.clone();
        let task = tokio::spawn(async move {
            while let Some(seen) = all.next().await {
                let mut o = o.lock().expect("observed");
                let now = Instant::now();
                let before = o.violations.len();
                o.see(seen, &limits, now);
                for v in &o.violations[before..] {
                    eprintln!("chaos: VIOLATION: {v}");
                }
            }
        });
        Checker {
            observed,
            task,
            started: Instant::now(),
        }
    }

    fn violation(&self, text: String) {
        let mut o = self.observed.lock().expect("observed");
        o.violation(text.clone(), text);
    }

    /// Stops watching: the violations and the longest stall (from the start to the first node
    /// done, between two, or from the last to `finished`).
    async fn finish(self, finished: Instant) -> (Vec<String>, Duration) {
        // Let the watches catch up with the last Job completions before matching done labels.
        let deadline = Instant::now() + MATCH_GRACE;
        loop {
            let pending = {
                let mut o = self.observed.lock().expect("observed");
                o.settle(Instant::now(), Duration::MAX);
                o.unmatched.len()
            };
            if pending == 0 || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.task.abort();
        let mut o = self.observed.lock().expect("observed");
        o.settle(Instant::now(), Duration::ZERO);
        let first = o
            .last_progress
            .map_or(finished - self.started, |_| Duration::ZERO);
        let last = o
            .last_progress
            .map_or(Duration::ZERO, |l| finished.saturating_duration_since(l));
        let stall = o.longest_stall.max(first).max(last);
        (std::mem::take(&mut o.violations), stall)
    }
}

impl Drop for Checker {
    fn drop(&mut self) {
        self.task.abort();
    }
}
// ---------------------------------------------------------------------------------------------
// Controllers, the cluster's processes, and a proxy that can be cut

/// Controller replicas, restarted when they exit as a Deployment's pods would be.
struct Replicas {
    procs: Arc<Mutex<Vec<(String, ControllerProcess)>>>,
    stopped: Arc<AtomicBool>,
    supervisor: JoinHandle<()>,
}

impl Replicas {
    /// `ids` with their kubeconfigs; with `elect`, under leader election.
    fn start(ns: &str, replicas: &[(&str, &Path)], elect: bool) -> Replicas {
        Replicas::start_with(ns, replicas, elect, &[])
    }

    fn start_with(
        ns: &str,
        replicas: &[(&str, &Path)],
        elect: bool,
        extra_env: &[(&str, &str)],
    ) -> Replicas {
        let mut env: Vec<(&str, &str)> = vec![("SYSTEM_UPGRADE_CONTROLLER_THREADS", "4")];
        env.extend(extra_env);
        let mut args: Vec<&str> = Vec::new();
        if elect {
            env.extend(FAST_ELECTION);
            args.push("--leader-elect");
        }
        let procs: Vec<(String, ControllerProcess)> = replicas
            .iter()
            .map(|(id, kubeconfig)| {
                (
                    id.to_string(),
                    ControllerProcess::start_replica(kubeconfig, ns, Some(id), &env, &args),
                )
            })
            .collect();
        let procs = Arc::new(Mutex::new(procs));
        let watched = procs.clone();
        let supervisor = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(300)).await;
                for (_, p) in watched.lock().expect("replicas").iter_mut() {
                    p.respawn_if_exited();
                }
            }
        });
        Replicas {
            procs,
            stopped: Arc::default(),
            supervisor,
        }
    }

    /// The log of replica `id` so far.
    fn log_of(&self, id: &str) -> String {
        (self.procs.lock().expect("replicas").iter())
            .filter(|(i, _)| i == id)
            .map(|(_, p)| p.log())
            .collect()
    }

    /// SIGKILL and start again, as a crash and the kubelet would.
    fn crash(&self, id: &str) {
        for (_, p) in self
            .procs
            .lock()
            .expect("replicas")
            .iter_mut()
            .filter(|(i, _)| i == id)
        {
            p.restart();
        }
    }

    /// SIGKILL, and start again only after `down` (a pod that takes a while to come back), so
    /// that a standby has to take over.
    fn crash_for(&self, id: &str, down: Duration) {
        for (_, p) in self
            .procs
            .lock()
            .expect("replicas")
            .iter_mut()
            .filter(|(i, _)| i == id)
        {
            p.kill();
        }
        let (procs, stopped, id) = (self.procs.clone(), self.stopped.clone(), id.to_string());
        tokio::spawn(async move {
            tokio::time::sleep(down).await;
            // Under the lock that `drop` takes to stop them all: no replica outlives it.
            let mut procs = procs.lock().expect("replicas");
            if stopped.load(Ordering::SeqCst) {
                return;
            }
            for (i, p) in procs.iter_mut() {
                if *i == id {
                    p.spawn();
                }
            }
        });
    }

    /// SIGSTOP, then SIGCONT after `paused`: a process frozen (a long GC pause, a VM suspended)
    /// past its lease, that wakes up believing it still leads.
    fn pause_for(&self, id: &str, paused: Duration) -> anyhow::Result<()> {
        let pid = (self.procs.lock().expect("replicas").iter())
            .find(|(i, _)| i == id)
            .and_then(|(_, p)| p.pid())
            .ok_or_else(|| anyhow::anyhow!("replica {id} runs no process"))?;
        signal(pid, "STOP")?;
        tokio::spawn(async move {
            tokio::time::sleep(paused).await;
            // Killed meanwhile (the scene ended): nothing to wake.
            let _ = signal(pid, "CONT");
        });
        Ok(())
    }

    /// Kills every replica for good.
    fn stop(self) {}
}

impl Drop for Replicas {
    fn drop(&mut self) {
        self.supervisor.abort();
        let mut procs = self.procs.lock().unwrap_or_else(|e| e.into_inner());
        self.stopped.store(true, Ordering::SeqCst);
        for (_, p) in procs.iter_mut() {
            p.kill();
        }
    }
}

async fn lease_holder(client: &Client, ns: &str) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), ns)
        .get_opt(&format!("slipway-{ns}"))
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// The directory `tests/cluster/up.sh` made: its kubeconfig's directory.
fn cluster_dir(cluster: &Cluster) -> PathBuf {
    cluster
        .kubeconfig_path()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

fn component_pid(cluster: &Cluster, name: &str) -> anyhow::Result<u32> {
    let file = cluster_dir(cluster)
        .join("pids")
        .join(format!("{name}.pid"));
    Ok(std::fs::read_to_string(&file)?.trim().parse()?)
}

/// Stops kube-apiserver (SIGTERM, then SIGKILL if it has not exited within [`APISERVER_GRACE`]),
/// waits `down`, and starts it again with the same command line, recording the new PID where
/// `tests/cluster/down.sh` looks for it.
async fn restart_apiserver(cluster: &Cluster, down: Duration) -> anyhow::Result<()> {
    let dir = cluster_dir(cluster);
    let pid = component_pid(cluster, "kube-apiserver")?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))?;
    let argv: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let (program, args) = argv.split_first().ok_or(anyhow!("empty command line"))?;
    let stopped = Instant::now();
    signal(pid, "TERM")?;
    let gone = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() {
        if gone.elapsed() > APISERVER_GRACE {
            // It may have exited meanwhile: that is no error.
            let _ = signal(pid, "KILL");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let exited = gone.elapsed();
    tokio::time::sleep(down).await;
    let log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("logs").join("kube-apiserver.log"))?;
    let child = {
        use std::os::unix::process::CommandExt;
        Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()?
    };
    let started = Instant::now();
    std::fs::write(
        dir.join("pids").join("kube-apiserver.pid"),
        format!("{}\n", child.id()),
    )?;
    // Reaped by a thread, so that it never lingers as a zombie of the test process.
    std::thread::spawn(move || {
        let mut child = child;
        let _ = child.wait();
    });
    let client = cluster.try_client().await?;
    support::wait_for(
        "the API server to serve again",
        Duration::from_secs(90),
        || async { client.apiserver_version().await.map(|_| ()) },
    )
    .await;
    say(&format!(
        "kube-apiserver exited {:.1} s after SIGTERM, stopped for {:.1} s, serving again after {:.1} s",
        exited.as_secs_f64(),
        started.duration_since(stopped).as_secs_f64(),
        stopped.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// A TCP proxy on loopback in front of the API server that the test can cut: while cut, open
/// connections are dropped and new ones are accepted and left silent (a partition, not a refusal).
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    task: JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: String) -> anyhow::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let cut = Arc::new(AtomicBool::new(false));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let (c, k) = (cut.clone(), conns.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                let cut = c.clone();
                let upstream = upstream.clone();
                let conn = tokio::spawn(async move {
                    if cut.load(Ordering::SeqCst) {
                        // Held silently until the proxy drops it.
                        std::future::pending::<()>().await;
                    }
                    if let Ok(mut up) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                    }
                });
                k.lock().expect("proxy").push(conn);
            }
        });
        Ok(Proxy {
            port,
            cut,
            conns,
            task,
        })
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for c in self.conns.lock().expect("proxy").drain(..) {
            c.abort();
        }
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
        for c in self.conns.lock().expect("proxy").drain(..) {
            c.abort();
        }
    }

    /// A copy of the cluster's kubeconfig that goes through this proxy.
    fn kubeconfig(&self, cluster: &Cluster, path: &Path) -> anyhow::Result<PathBuf> {
        let text = std::fs::read_to_string(cluster.kubeconfig_path())?;
        let proxied: Vec<String> = text
            .lines()
            .map(|l| match l.trim_start().strip_prefix("server: ") {
                Some(_) => format!("    server: https://127.0.0.1:{}", self.port),
                None => l.to_string(),
            })
            .collect();
        std::fs::write(path, proxied.join("\n") + "\n")?;
        Ok(path.to_path_buf())
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.heal();
    }
}

fn apiserver_address(cluster: &Cluster) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(cluster.kubeconfig_path())?;
    let server = text
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("server: "))
        .ok_or(anyhow!("no server in the kubeconfig"))?;
    Ok(server.trim().trim_start_matches("https://").to_string())
}
// ---------------------------------------------------------------------------------------------
// Rollouts

fn rollout_plan(name: &str, pool: &str, concurrency: usize, version: &str, extra: &str) -> Plan {
    serde_saphyr::from_str(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: {name}
  annotations:
    slipway.test/complete-delay: "2s"
spec:
  concurrency: {concurrency}
  cordon: true
  version: {version}
  serviceAccountName: default
  nodeSelector:
    matchLabels:
      {POOL_LABEL}: {pool}
  upgrade:
    image: rancher/k3s-upgrade
    command: [sh, -c]
    args: ["echo upgrading"]
{extra}"#
    ))
    .expect("chaos plan parses")
}

/// One scenario's scene and checker.
struct Stage {
    s: Scene,
    checker: Checker,
    started: Instant,
}

impl Stage {
    /// Starts `scene` with the scenario's nodes, and a checker holding it to `limits`.
    async fn new(
        scene: SceneBuilder,
        sizes: Sizes,
        limits: impl FnOnce(&Scene) -> Limits,
    ) -> Option<Stage> {
        let s = scene.nodes(sizes.nodes).start().await?;
        let checker = Checker::start(&s.client, s.ns.name(), &s.pool, limits(&s));
        Some(Stage {
            s,
            checker,
            started: Instant::now(),
        })
    }

    fn ns(&self) -> &str {
        self.s.ns.name()
    }

    fn client(&self) -> Client {
        self.s.client.clone()
    }

    fn kubeconfig(&self) -> &Path {
        self.s.cluster.kubeconfig_path()
    }

    async fn create_plan(&self, plan: &Plan) {
        self.s
            .ns
            .api::<Plan>()
            .create(&PostParams::default(), plan)
            .await
            .expect("create plan");
    }

    /// Nodes of the pool done with the Plan's current hash, out of all of them.
    async fn done(&self, plan: &str) -> anyhow::Result<(usize, usize)> {
        let p = self.s.ns.api::<Plan>().get(plan).await?;
        let hash = p.status.and_then(|s| s.latest_hash).unwrap_or_default();
        let nodes = Api::<Node>::all(self.client())
            .list(&ListParams::default().labels(&self.s.pool_selector()))
            .await?;
        let done = nodes
            .items
            .iter()
            .filter(|n| {
                !hash.is_empty()
                    && n.labels().get(&format!("{PLAN_NODE_PREFIX}{plan}")) == Some(&hash)
                    && !n
                        .spec
                        .as_ref()
                        .and_then(|s| s.unschedulable)
                        .unwrap_or(false)
            })
            .count();
        Ok((done, nodes.items.len()))
    }

    /// What the Plan's status says of each node it has not finished, for a stall's report.
    async fn unfinished(&self, plan: &str) -> String {
        let Ok(p) = self.s.ns.api::<Plan>().get(plan).await else {
            return "unreadable".into();
        };
        let nodes = p.status.map(|s| s.nodes).unwrap_or_default();
        if nodes.is_empty() {
            return "none".into();
        }
        nodes
            .iter()
            .map(|n| {
                format!(
                    "{} {} {} {}",
                    n.name,
                    n.phase,
                    n.reason.as_deref().unwrap_or("-"),
                    n.message.as_deref().unwrap_or("")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Waits until `fraction` of the nodes are done (a point to strike at).
    async fn until_done(&self, plan: &str, fraction: f64) {
        let want = ((self.s.nodes.len() as f64) * fraction).ceil() as usize;
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            if let Ok((done, _)) = self.done(plan).await
                && done >= want
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn is_rolled_out(&self, plan: &str) -> bool {
        matches!(self.done(plan).await, Ok((done, all)) if done == all && all > 0)
    }

    /// Waits for the rollout to finish (every node done with the current hash, none cordoned);
    /// a rollout that does not is a violation.
    async fn finish_rollout(&self, plan: &str, within: Duration) -> Instant {
        let deadline = Instant::now() + within;
        loop {
            if self.is_rolled_out(plan).await {
                return Instant::now();
            }
            if Instant::now() >= deadline {
                let state = self.done(plan).await.map_err(|e| e.to_string());
                let waiting = self.unfinished(plan).await;
                self.checker.violation(format!(
                    "Plan {plan} did not finish within {within:?} ({state:?} nodes done; \
                     status.nodes: {waiting})"
                ));
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// No node of the pool is left cordoned.
    async fn check_no_cordons(&self) {
        let nodes = Api::<Node>::all(self.client())
            .list(&ListParams::default().labels(&self.s.pool_selector()))
            .await;
        for n in nodes.map(|l| l.items).unwrap_or_default() {
            if n.spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false)
            {
                self.checker
                    .violation(format!("node {} left cordoned", n.name_any()));
            }
        }
    }

    /// The scenario's row. A scenario that injected no fault tested nothing: a violation too.
    async fn end(self, finished: Instant, faults: usize) -> Row {
        self.check_no_cordons().await;
        if faults == 0 {
            self.checker
                .violation("the scenario injected no fault".to_string());
        }
        let Stage {
            s,
            checker,
            started,
        } = self;
        let took = started.elapsed();
        let (violations, stall) = checker.finish(finished).await;
        Row {
            faults,
            violations,
            stall,
            took,
            _scene: Some(s),
        }
    }
}

/// What a scenario's run found.
#[derive(Default)]
struct Row {
    faults: usize,
    violations: Vec<String>,
    stall: Duration,
    took: Duration,
    /// Kept until the row is judged, so that a scene with violations is reported as failed; its
    /// clean-up runs when it is dropped.
    _scene: Option<Scene>,
}

impl Row {
    fn summary(&self) -> String {
        format!(
            "{} faults, {} violations, longest stall {:.1} s, took {:.0} s",
            self.faults,
            self.violations.len(),
            self.stall.as_secs_f64(),
            self.took.as_secs_f64()
        )
    }
}

const ROLLOUT_LIMIT: Duration = Duration::from_secs(240);

// ---------------------------------------------------------------------------------------------
// The scenes of the normal run: each scenario once, small, with a seed of its own

/// Runs `scenario` once at `sizes` with `seed` (unless `SLIPWAY_CHAOS_SEED` says otherwise),
/// prints its row, and fails on any violation.
async fn scene<F, Fut>(name: &str, seed: u64, sizes: Sizes, scenario: F)
where
    F: FnOnce(Sizes, Random) -> Fut,
    Fut: Future<Output = Option<Row>>,
{
    let seed = seed_from_env().unwrap_or(seed);
    say(&format!("{name}: SLIPWAY_CHAOS_SEED={seed}"));
    let Some(row) = scenario(sizes, Random::seeded(seed)).await else {
        return;
    };
    say(&format!("{name} (seed {seed}): {}", row.summary()));
    assert!(
        row.violations.is_empty(),
        "{name} (SLIPWAY_CHAOS_SEED={seed}): invariant violations:\n{}",
        row.violations.join("\n")
    );
}

/// Up to 10 SIGKILLs of the only controller at random moments of a rollout of 9 nodes, 3 at a
/// time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_survives_controller_kills() {
    let sizes = Sizes {
        nodes: 9,
        concurrency: 3,
        ..Sizes::SMALL
    };
    scene("controller-kills", 1, sizes, controller_kills).await;
}

/// Two replicas under leader election: the leader killed (the standby must take over within
/// the lease and 5 s), the standby killed, both killed; each at least once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_from_a_killed_leader() {
    let sizes = Sizes {
        nodes: 9,
        concurrency: 3,
        ..Sizes::SMALL
    };
    scene("leader-kills", 2, sizes, leader_kills).await;
}

/// Two replicas under leader election, the leader frozen past its lease and woken beside the
/// standby that took over, twice: no node over the Plan's limits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_frozen_past_its_lease_wakes_up_harmless() {
    let sizes = Sizes {
        nodes: 9,
        concurrency: 3,
        ..Sizes::SMALL
    };
    scene("leader-pause", 17, sizes, leader_pause).await;
}

/// Kills while the Plan's nodes reboot (`spec.reboot`): reboot pods on no more nodes than the
/// concurrency, never two on a node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebooting_nodes_survive_controller_kills() {
    scene("reboot-kills", 3, Sizes::SMALL, reboot_kills).await;
}

/// NodeMaintenances taking three nodes of a rollout through kills: no live Job on a node with the
/// maintenance taint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_and_a_rollout_share_nodes_through_kills() {
    scene("maintenance-kills", 4, Sizes::SMALL, maintenance_kills).await;
}

/// Every node asks for a reboot while a RebootPolicy works through kills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_policy_survives_controller_kills() {
    scene("policy-kills", 5, Sizes::SMALL, policy_kills).await;
}

/// A NodeOp that cordons and reboots every node, through kills.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodeop_survives_controller_kills() {
    scene("nodeop-kills", 6, Sizes::SMALL, nodeop_kills).await;
}

/// A DisruptionBudget of 1 over a Plan and a RebootPolicy of concurrency 2 on 4 nodes, through
/// kills (on the budgets' cluster, and the budget makes it one node at a time: a small pool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disruption_budget_holds_through_kills() {
    let sizes = Sizes {
        nodes: 4,
        ..Sizes::SMALL
    };
    scene("budget-kills", 7, sizes, budget_kills).await;
}

/// kube-apiserver stopped mid-rollout and started again (on a cluster of its own: a small pool).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_survives_an_apiserver_restart() {
    let sizes = Sizes {
        nodes: 4,
        ..Sizes::SMALL
    };
    scene("apiserver-restart", 8, sizes, apiserver_restart).await;
}

/// etcd paused (SIGSTOP) mid-rollout for longer than the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_survives_an_etcd_pause() {
    scene("etcd-pause", 9, Sizes::SMALL, etcd_pause).await;
}

/// The leader's connection cut at a proxy for longer than the renew deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_survives_a_cut_connection() {
    scene("connection-cut", 10, Sizes::SMALL, connection_cut).await;
}

/// Up to 15 pods and Jobs deleted, nodes deleted and re-created, at random; each kind at least
/// once.
/// The API server's own flow control answers every new request of the controller 429 for a
/// minute, then queues them behind one seat for another: the rollout holds its limits and
/// finishes once the API server answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_survives_an_api_server_answering_429_then_slowly() {
    scene("api-throttle", 23, Sizes::SMALL, throttle::api_throttle).await;
}

/// Nodes of the pool flap NotReady and Ready again, one at a time at random, until the rollout is
/// done: no node over the Plan's limits, the rollout finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_survives_nodes_flapping() {
    scene("node-flapping", 29, Sizes::SMALL, flapping::node_flapping).await;
}

/// The controller's watches ended and answered `410 Expired` for a few seconds, three times
/// through a rollout, as after etcd's compaction: it lists again and the rollout finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_survives_watches_expired_by_compaction() {
    scene("watch-expired", 31, Sizes::SMALL, expired::watch_expired).await;
}

/// Two replicas whose times differ by a minute, each leading in turn: no node over the Plan's
/// limits, the rollout finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_whose_clocks_differ_by_a_minute_keep_the_limits() {
    let sizes = Sizes {
        nodes: 9,
        concurrency: 3,
        ..Sizes::SMALL
    };
    scene("clock-skew", 37, sizes, skew::clock_skew).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_survives_job_and_node_churn() {
    let sizes = Sizes {
        nodes: 9,
        concurrency: 3,
        ..Sizes::SMALL
    };
    scene("job-and-node-churn", 11, sizes, job_and_node_churn).await;
}

/// The Plan's version and its Secret changed mid-rollout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_follows_plan_and_secret_edits() {
    scene("plan-edits", 12, Sizes::SMALL, plan_edits).await;
}

/// The Plan deleted mid-rollout: no node left cordoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_plan_mid_rollout_leaves_no_cordon() {
    scene("plan-deletion", 13, Sizes::SMALL, plan_deletion).await;
}

/// 20 Plan create/update/delete cycles, then a new Plan picked up within 20 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_plan_is_picked_up_after_a_soak_of_plan_changes() {
    scene("soak", 14, Sizes::SMALL, soak).await;
}

// ---------------------------------------------------------------------------------------------
// The full suite: `just chaos`

/// Every scenario at the environment's sizes, `SLIPWAY_CHAOS_RUNS` times, one after another;
/// a table, and a failure on any violation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the full-size chaos suite: `just chaos`"]
async fn full_suite() {
    if support::cluster().await.is_none() {
        return;
    }
    let mut suite = Suite {
        sizes: Sizes::from_env(),
        runs: number("SLIPWAY_CHAOS_RUNS", 1).max(1),
        only: std::env::var("SLIPWAY_CHAOS_SCENARIOS")
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| v.split(',').map(|s| s.trim().to_string()).collect()),
        table: Vec::new(),
    };
    say(&format!(
        "{} nodes per rollout, concurrency {}, {} run(s) each",
        suite.sizes.nodes, suite.sizes.concurrency, suite.runs
    ));
    suite.run("controller-kills", controller_kills).await;
    suite.run("leader-kills", leader_kills).await;
    suite.run("leader-pause", leader_pause).await;
    suite.run("reboot-kills", reboot_kills).await;
    suite.run("maintenance-kills", maintenance_kills).await;
    suite.run("policy-kills", policy_kills).await;
    suite.run("nodeop-kills", nodeop_kills).await;
    suite.run("budget-kills", budget_kills).await;
    suite.run("apiserver-restart", apiserver_restart).await;
    suite.run("etcd-pause", etcd_pause).await;
    suite.run("connection-cut", connection_cut).await;
    suite.run("api-throttle", throttle::api_throttle).await;
    suite.run("node-flapping", flapping::node_flapping).await;
    suite.run("watch-expired", expired::watch_expired).await;
    suite.run("clock-skew", skew::clock_skew).await;
    suite.run("job-and-node-churn", job_and_node_churn).await;
    suite.run("plan-edits", plan_edits).await;
    suite.run("plan-deletion", plan_deletion).await;
    suite.run("soak", soak).await;

    println!(
        "\n{:<20} {:>5} {:>7} {:>11} {:>14} {:>9}",
        "scenario", "runs", "faults", "violations", "longest stall", "took"
    );
    for (name, row) in &suite.table {
        println!(
            "{:<20} {:>5} {:>7} {:>11} {:>13.1}s {:>8.0}s",
            name,
            suite.runs,
            row.faults,
            row.violations.len(),
            row.stall.as_secs_f64(),
            row.took.as_secs_f64()
        );
    }
    let all: Vec<String> = (suite.table.iter())
        .flat_map(|(name, row)| row.violations.iter().map(move |v| format!("{name}: {v}")))
        .collect();
    assert!(all.is_empty(), "invariant violations:\n{}", all.join("\n"));
}

struct Suite {
    sizes: Sizes,
    runs: usize,
    only: Option<BTreeSet<String>>,
    table: Vec<(&'static str, Row)>,
}

impl Suite {
    /// The scenario's runs, each with a seed of its own (`SLIPWAY_CHAOS_SEED`'s if set), summed
    /// into its row of the table.
    async fn run<F, Fut>(&mut self, name: &'static str, scenario: F)
    where
        F: Fn(Sizes, Random) -> Fut,
        Fut: Future<Output = Option<Row>>,
    {
        if self.only.as_ref().is_some_and(|s| !s.contains(name)) {
            return;
        }
        let mut total = Row::default();
        for run in 0..self.runs {
            let seed = seed_from_env().unwrap_or_else(fresh_seed);
            say(&format!(
                "{name} run {}: SLIPWAY_CHAOS_SEED={seed}",
                run + 1
            ));
            let Some(row) = scenario(self.sizes, Random::seeded(seed)).await else {
                return;
            };
            say(&format!("{name} run {}: {}", run + 1, row.summary()));
            total.faults += row.faults;
            (total.violations).extend(row.violations.iter().map(|v| format!("(seed {seed}) {v}")));
            total.stall = total.stall.max(row.stall);
            total.took += row.took;
            // `row` and its scene end here: cleaned up before the next run.
        }
        self.table.push((name, total));
    }
}

// ---------------------------------------------------------------------------------------------
// Scenarios

/// The usual scenario: one replica without leader election, and Plan `up` over the pool (with
/// `extra` spec lines).
async fn one_rollout(scene: SceneBuilder, sizes: Sizes, extra: &str) -> Option<(Stage, Replicas)> {
    let c = sizes.concurrency;
    let stage = Stage::new(scene, sizes, |_| Limits::one_plan("up", c)).await?;
    let replicas = Replicas::start(stage.ns(), &[("a", stage.kubeconfig())], false);
    stage
        .create_plan(&rollout_plan("up", &stage.s.pool, c, "v1", extra))
        .await;
    Some((stage, replicas))
}

async fn controller_kills(sizes: Sizes, mut rng: Random) -> Option<Row> {
    let (stage, replicas) = one_rollout(Scene::new("chaos-kills"), sizes, "").await?;
    let mut kills = 0;
    while kills < sizes.kills && !stage.is_rolled_out("up").await {
        tokio::time::sleep(rng.millis(100, 1500)).await;
        replicas.crash("a");
        kills += 1;
    }
    let finished = stage.finish_rollout("up", ROLLOUT_LIMIT).await;
    replicas.stop();
    Some(stage.end(finished, kills).await)
}

/// A rollout of Plan `up` driven by two replicas, `a` and `b`, under leader election.
async fn elected_rollout(scene: SceneBuilder, sizes: Sizes) -> Option<(Stage, Replicas, String)> {
    let c = sizes.concurrency;
    let stage = Stage::new(scene, sizes, |_| Limits::one_plan("up", c)).await?;
    let ns = stage.ns().to_string();
    let kubeconfig = stage.kubeconfig();
    let replicas = Replicas::start(&ns, &[("a", kubeconfig), ("b", kubeconfig)], true);
    stage
        .create_plan(&rollout_plan("up", &stage.s.pool, c, "v1", ""))
        .await;
    Some((stage, replicas, ns))
}

/// Waits until `leader` (down or frozen) no longer holds the Lease; a violation if the standby
/// has not taken it within the lease and 5 s.
async fn standby_takes_over(stage: &Stage, client: &Client, ns: &str, leader: &str) {
    let until = Instant::now() + LEASE + Duration::from_secs(5);
    while lease_holder(client, ns).await.as_deref() == Some(leader) {
        if Instant::now() >= until {
            stage
                .checker
                .violation(format!("the standby did not take over from {leader}"));
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn leader_kills(sizes: Sizes, mut rng: Random) -> Option<Row> {
    let (stage, replicas, ns) = elected_rollout(Scene::new("chaos-leader"), sizes).await?;
    let client = stage.client();
    let mut kills = 0;
    // The leader, the standby, both: each at least once, and again while the rollout lasts.
    let mut struck = [false; 3];
    for round in 0..3 * 3 {
        if struck.iter().all(|s| *s) && stage.is_rolled_out("up").await {
            break;
        }
        tokio::time::sleep(rng.millis(1000, 3000)).await;
        let Some(leader) = lease_holder(&client, &ns).await else {
            continue;
        };
        let standby = if leader == "a" { "b" } else { "a" };
        match round % 3 {
            // Back after the lease expired: the standby must have taken over.
            0 => {
                replicas.crash_for(&leader, LEASE + Duration::from_secs(5));
                standby_takes_over(&stage, &client, &ns, &leader).await;
            }
            1 => replicas.crash(standby),
            _ => {
                replicas.crash(&leader);
                replicas.crash(standby);
            }
        }
        struck[round % 3] = true;
        kills += 1 + usize::from(round % 3 == 2);
    }
    let finished = stage.finish_rollout("up", ROLLOUT_LIMIT).await;
    replicas.stop();
    Some(stage.end(finished, kills).await)
}

/// Two replicas under leader election; the leader frozen (SIGSTOP) past its lease, so that the
/// standby takes over, then woken (SIGCONT) while the new leader works: the old one must see that
/// it no longer leads before it writes anything. Twice, and the rollout finishes.
async fn leader_pause(sizes: Sizes, mut rng: Random) -> Option<Row> {
    let (stage, replicas, ns) = elected_rollout(Scene::new("chaos-pause"), sizes).await?;
    let client = stage.client();
    let mut pauses = 0;
    for _ in 0..2 {
        tokio::time::sleep(rng.millis(500, 2000)).await;
        let Some(leader) = lease_holder(&client, &ns).await else {
            continue;
        };
        let frozen = LEASE + Duration::from_secs(8);
        if let Err(e) = replicas.pause_for(&leader, frozen) {
            stage
                .checker
                .violation(format!("could not pause {leader}: {e}"));
            continue;
        }
        pauses += 1;
        standby_takes_over(&stage, &client, &ns, &leader).await;
        // Both working again: the woken one beside the new leader, for a while.
        tokio::time::sleep(frozen - LEASE + rng.millis(1000, 3000)).await;
    }
    let finished = stage.finish_rollout("up", ROLLOUT_LIMIT).await;
    replicas.stop();
    Some(stage.end(finished, pauses).await)
}

async fn apiserver_restart(sizes: Sizes, _rng: Random) -> Option<Row> {
    let c = sizes.concurrency;
    // A cluster of its own: every scene beside it would lose the API server.
    let scene = Scene::new("chaos-apiserver").own_cluster("disruptions");
    let stage = Stage::new(scene, sizes, |_| Limits::one_plan("up", c)).await?;
    let replicas = Replicas::start(stage.ns(), &[("a", stage.kubeconfig())], true);
    stage
        .create_plan(&rollout_plan("up", &stage.s.pool, c, "v1", ""))
        .await;
    stage.until_done("up", 0.3).await;
    let mut faults = 0;
    match restart_apiserver(&stage.s.cluster, Duration::from_secs(3)).await {
        Ok(()) => faults += 1,
        Err(e) => stage
            .checker
            .violation(format!("could not restart kube-apiserver: {e}")),
    }
    let finished = stage.finish_rollout("up", ROLLOUT_LIMIT).await;
    replicas.stop();
    Some(stage.end(finished, faults).await)
}

async fn etcd_pause(sizes: Sizes, _rng: Random) -> Option<Row> {
    let c = sizes.concurrency;
    // A cluster of its own: every scene beside it would lose etcd.
    let scene = Scene::new("chaos-etcd").own_cluster("disruptions");
    let stage = Stage::new(scene, sizes, |_| Limits::one_plan("up", c)).await?;
    let kubeconfig = stage.kubeconfig();
    let replicas = Replicas::start(stage.ns(), &[("a", kubeconfig), ("b", kubeconfig)], true);
    stage
        .create_plan(&rollout_plan("up", &stage.s.pool, c, "v1", ""))
        .await;
    stage.until_done("up", 0.3).await;
    let mut faults = 0;
    match component_pid(&stage.s.cluster, "etcd") {
        Ok(pid) => {
            // Longer than the 10 s lease: the time is the fault.
            if signal(pid, "STOP").is_ok() {
                tokio::time::sleep(Duration::from_secs(13)).await;
                faults += 1;
            }
            if let Err(e) = signal(pid, "CONT") {
                panic!("etcd stays stopped: {e}");
            }
        }
        Err(e) => stage.checker.violation(format!("no etcd PID: {e}")),
    }
    let finished = stage.finish_rollout("up", ROLLOUT_LIMIT).await;
    replicas.stop();
    Some(stage.end(finished, faults).await)
}

async fn connection_cut(sizes: Sizes, _rng: Random) -> Option<Row> {
    let c = sizes.concurrency;
    let stage = Stage::new(Scene::new("chaos-cut"), sizes, |_| {
        Limits::one_plan("up", c)
    })
    .await?;
    let ns = stage.ns().to_string();
    let cluster = &stage.s.cluster;
    let proxy = match apiserver_address(cluster) {
        Ok(upstream) => Proxy::start(upstream).await.ok(),
        Err(_) => None,
    };
    let Some(proxy) = proxy else {
        stage
            .checker
            .violation("could not start the proxy".to_string());
        return Some(stage.end(Instant::now(), 0).await);
    };
    let proxied = proxy
        .kubeconfig(
            cluster,
            &std::env::temp_dir().join(format!("{ns}.kubeconfig")),
        )
        .expect("write the proxied kubeconfig");
    // "a" talks through the proxy and leads; "b" talks directly and stands by.
    let a = Replicas::start(&ns, &[("a", &proxied)], true);
    let client = stage.client();
    support::wait_for("replica a to lead", Duration::from_secs(60), || async {
        match lease_holder(&client, &ns).await {
            Some(h) if h == "a" => Ok(()),
            other => Err(anyhow!("holder {other:?}")),
        }
    })
    .await;
    let b = Replicas::start(&ns, &[("b", cluster.kubeconfig_path())], true);
    stage
        .create_plan(&rollout_plan("up", &stage.s.pool, c, "v1", ""))
        .await;
    stage.until_done("up", 0.3).await;
    // Longer than the 6 s renew deadline and the 10 s lease: the time is the fault.
    proxy.cut();
    tokio::time::sleep(Duration::from_secs(14)).await;
    proxy.heal();
    let finished = stage.finish_rollout("up", ROLLOUT_LIMIT).await;
    a.stop();
    b.stop();
    Some(stage.end(finished, 1).await)
}

async fn job_and_node_churn(sizes: Sizes, mut rng: Random) -> Option<Row> {
    let c = sizes.concurrency;
    let stage = Stage::new(Scene::new("chaos-churn"), sizes, |_| {
        Limits::one_plan("up", c)
    })
    .await?;
    // Every pod deleted here counts against its Job's backoff limit (2 by default), and a Job
    // that exceeds it fails and holds its node by design (SUC's rule, kept): the scenario is about
    // losing no node under deletions, so its Jobs may lose many pods.
    let replicas = Replicas::start_with(
        stage.ns(),
        &[("a", stage.kubeconfig())],
        false,
        &[("SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT", "1000")],
    );
    stage
        .create_plan(&rollout_plan("up", &stage.s.pool, c, "v1", ""))
        .await;
    let client = stage.client();
    let (jobs, pods) = (stage.s.ns.api::<Job>(), stage.s.ns.api::<Pod>());
    // Faults of each kind: pods, Jobs, nodes.
    let mut struck = [0usize; 3];
    while struck.iter().sum::<usize>() < sizes.churn
        && !stage.is_rolled_out("up").await
        && stage.started.elapsed() < ROLLOUT_LIMIT
    {
        tokio::time::sleep(rng.millis(300, 1200)).await;
        let live: Vec<Job> = jobs
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default()
            .into_iter()
            .filter(|j| j.status.as_ref().and_then(|s| s.active).unwrap_or(0) > 0)
            .collect();
        // Each kind once first, then at random.
        let kind = match struck.iter().position(|n| *n == 0) {
            Some(kind) => kind,
            None => rng.below(3),
        };
        match kind {
            // A pod fails: the Job runs another.
            0 => {
                let running = pods
                    .list(&ListParams::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default();
                if !running.is_empty() {
                    let pod = &running[rng.below(running.len())];
                    if pods
                        .delete(&pod.name_any(), &DeleteParams::default())
                        .await
                        .is_ok()
                    {
                        struck[0] += 1;
                    }
                }
            }
            // A Job goes away.
            1 => {
                if !live.is_empty() {
                    let job = &live[rng.below(live.len())];
                    if jobs
                        .delete(&job.name_any(), &DeleteParams::background())
                        .await
                        .is_ok()
                    {
                        struck[1] += 1;
                    }
                }
            }
            // A node goes away and comes back as a new machine of the same name, which takes a
            // moment to boot (and kwok the moment to forget the old one: a pod bound to a node
            // it re-creates before it has seen the deletion is never run).
            _ => {
                let node = stage.s.nodes[rng.below(stage.s.nodes.len())].clone();
                support::delete_nodes(&client, std::slice::from_ref(&node)).await;
                let nodes = Api::<Node>::all(client.clone());
                support::wait_for("the node to go", Duration::from_secs(60), || async {
                    match nodes.get_opt(&node).await? {
                        None => Ok(()),
                        Some(_) => Err(anyhow!("still there")),
                    }
                })
                .await;
                tokio::time::sleep(rng.millis(1000, 2000)).await;
                let fresh = support::fake_node(&node, &[(POOL_LABEL, &stage.s.pool)]);
                support::create_node_objects(&client, &[fresh]).await;
                struck[2] += 1;
            }
        }
    }
    let finished = stage.finish_rollout("up", ROLLOUT_LIMIT).await;
    replicas.stop();
    let [pods_lost, jobs_lost, nodes_lost] = struck;
    say(&format!(
        "job-and-node-churn: {pods_lost} pods, {jobs_lost} Jobs, {nodes_lost} nodes deleted"
    ));
    for (n, what) in struck.iter().zip(["pod", "Job", "node"]) {
        if *n == 0 {
            stage
                .checker
                .violation(format!("no {what} was deleted before the rollout finished"));
        }
    }
    Some(stage.end(finished, struck.iter().sum()).await)
}

async fn plan_edits(sizes: Sizes, _rng: Random) -> Option<Row> {
    let c = sizes.concurrency;
    let stage = Stage::new(Scene::new("chaos-edit"), sizes, |_| {
        Limits::one_plan("up", c)
    })
    .await?;
    let secrets = stage.s.ns.api::<Secret>();
    let secret: Secret = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "config"},
        "stringData": {"setting": "one"},
    }))
    .expect("secret literal");
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("create secret");
    let replicas = Replicas::start(stage.ns(), &[("a", stage.kubeconfig())], false);
    let extra = "  secrets:\n  - name: config\n    path: /host/run/config\n";
    stage
        .create_plan(&rollout_plan("up", &stage.s.pool, c, "v1", extra))
        .await;
    let plans = stage.s.ns.api::<Plan>();
    stage.until_done("up", 0.3).await;
    plans
        .patch(
            "up",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"version": "v2"}})),
        )
        .await
        .expect("edit the plan");
    stage.until_done("up", 0.3).await;
    let before = latest_hash(&plans, "up").await;
    secrets
        .patch(
            "config",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"setting": "two"}})),
        )
        .await
        .expect("change the secret");
    // The hash moves with the Secret: the rollout is judged once the Plan shows the new one.
    support::wait_for(
        "the Plan's hash to move with the Secret",
        Duration::from_secs(60),
        || async {
            match latest_hash(&plans, "up").await {
                now if now != before => Ok(()),
                now => Err(anyhow!("latestHash {now:?}")),
            }
        },
    )
    .await;
    let finished = stage.finish_rollout("up", ROLLOUT_LIMIT).await;
    replicas.stop();
    Some(stage.end(finished, 2).await)
}

async fn latest_hash(plans: &Api<Plan>, name: &str) -> Option<String> {
    let plan = plans.get(name).await.ok()?;
    plan.status?.latest_hash
}

async fn plan_deletion(sizes: Sizes, _rng: Random) -> Option<Row> {
    let (stage, replicas) = one_rollout(Scene::new("chaos-delete"), sizes, "").await?;
    stage.until_done("up", 0.3).await;
    let plans = stage.s.ns.api::<Plan>();
    plans
        .delete("up", &DeleteParams::default())
        .await
        .expect("delete the plan");
    let gone = support::wait_for("the Plan to be gone", Duration::from_secs(60), || async {
        match plans.get_opt("up").await? {
            None => Ok(Instant::now()),
            Some(_) => Err(anyhow!("still there")),
        }
    })
    .await;
    replicas.stop();
    // `end` finds any cordon the deletion left behind.
    Some(stage.end(gone, 1).await)
}

/// Plays the nodes of a Plan with `spec.reboot`: a node the Plan reports `Rebooting` comes back
/// with a new boot ID a moment later, once.
fn simulate_reboots(client: Client, ns: String, plan: String, mut rng: Random) -> Task {
    Task(tokio::spawn(async move {
        let plans = Api::<Plan>::namespaced(client.clone(), &ns);
        let mut rebooted = BTreeSet::new();
        loop {
            tokio::time::sleep(rng.millis(200, 1000)).await;
            let Ok(p) = plans.get(&plan).await else {
                continue;
            };
            let rebooting: Vec<String> = p
                .status
                .iter()
                .flat_map(|s| s.nodes.iter())
                .filter(|n| n.phase == slipway::plan::api::NodePhase::Rebooting)
                .map(|n| n.name.clone())
                .collect();
            for node in rebooting {
                if rebooted.contains(&node) {
                    continue;
                }
                if support::try_simulate_reboot(&client, &node).await.is_ok() {
                    rebooted.insert(node);
                }
            }
        }
    }))
}

async fn reboot_kills(sizes: Sizes, mut rng: Random) -> Option<Row> {
    let extra = "  reboot:\n    timeout: 5m\n";
    let (stage, replicas) = one_rollout(Scene::new("chaos-reboot"), sizes, extra).await?;
    let nodes = simulate_reboots(
        stage.client(),
        stage.ns().to_string(),
        "up".into(),
        rng.fork(),
    );
    let mut kills = 0;
    while kills < sizes.kills && !stage.is_rolled_out("up").await {
        tokio::time::sleep(rng.millis(300, 2000)).await;
        replicas.crash("a");
        kills += 1;
    }
    let finished = stage.finish_rollout("up", ROLLOUT_LIMIT).await;
    drop(nodes);
    replicas.stop();
    Some(stage.end(finished, kills).await)
}

/// Every node of the pool asks for a reboot (the agent's annotation); a RebootPolicy reboots them
/// `concurrency` at a time while the controller is SIGKILLed; the test plays each node once its
/// reboot pod is there. The checker counts the policy's reboot pods and the pool's cordons.
async fn policy_kills(sizes: Sizes, mut rng: Random) -> Option<Row> {
    let c = sizes.concurrency;
    // Cluster-wide: its controller reconciles every RebootPolicy.
    let scene = (Scene::new("chaos-policy").cluster_wide()).crds(&[REBOOT_POLICY_CRD]);
    let stage = Stage::new(scene, sizes, |s| Limits {
        concurrency: BTreeMap::from([(format!("policy:{}", s.name("reboots")), c)]),
        cordons: c,
    })
    .await?;
    let name = stage.s.name("reboots");
    let client = stage.client();
    let replicas = Replicas::start_with(
        stage.ns(),
        &[("a", stage.kubeconfig())],
        false,
        &[("SLIPWAY_REBOOT_POLICIES", "true")],
    );
    let policies = Api::<RebootPolicy>::all(client.clone());
    let policy: RebootPolicy = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1", "kind": "RebootPolicy",
        "metadata": {"name": name},
        "spec": {"concurrency": c, "timeout": "5m",
                 "nodeSelector": {"matchLabels": {POOL_LABEL: stage.s.pool}}},
    }))
    .expect("policy literal");
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("create the policy");
    let nodes = Api::<Node>::all(client.clone());
    let mut before = BTreeMap::new();
    for n in &stage.s.nodes {
        before.insert(n.clone(), support::current_boot_id(&client, n).await);
        support::ask_reboot(&client, n).await;
    }
    let player = play_reboot_pods(
        client.clone(),
        stage.ns().to_string(),
        name.clone(),
        rng.fork(),
    );
    let all_back = || every_node_back(&policies, &nodes, &name, &before);
    let mut kills = 0;
    while kills < sizes.kills && !all_back().await {
        tokio::time::sleep(rng.millis(300, 2000)).await;
        replicas.crash("a");
        kills += 1;
    }
    let deadline = Instant::now() + ROLLOUT_LIMIT;
    while !all_back().await {
        if Instant::now() >= deadline {
            let status = policies.get(&name).await.map(|p| p.status);
            stage.checker.violation(format!(
                "RebootPolicy {name} did not reboot every node within {ROLLOUT_LIMIT:?}: {status:?}"
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let finished = Instant::now();
    drop(player);
    replicas.stop();
    let _ = policies.delete(&name, &DeleteParams::default()).await;
    Some(stage.end(finished, kills).await)
}

/// One DisruptionBudget over the pool, a Plan and a RebootPolicy that would each take more nodes
/// than it allows, and the controller killed again and again: no kill or restart ever lets more
/// nodes of the pool be unavailable at once than the budget allows (an independent count of
/// cordoned and NotReady nodes, live Jobs and reboot pods), and both operations finish.
async fn budget_kills(sizes: Sizes, mut rng: Random) -> Option<Row> {
    let c = sizes.concurrency.max(2);
    let allowed = (c - 1).max(1);
    // The budgets' cluster: every controller of a cluster reads every DisruptionBudget and writes
    // its ledger.
    let scene = (Scene::new("chaos-budget").own_cluster("budgets")).crds(&[REBOOT_POLICY_CRD]);
    let stage = Stage::new(scene, sizes, |s| Limits {
        concurrency: BTreeMap::from([
            ("up".to_string(), c),
            (format!("policy:{}", s.name("budget")), c),
        ]),
        cordons: allowed,
    })
    .await?;
    let name = stage.s.name("budget");
    let client = stage.client();
    let budgets = Api::<DisruptionBudget>::all(client.clone());
    let budget: DisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1", "kind": "DisruptionBudget",
        "metadata": {"name": name},
        "spec": {"maxUnavailable": allowed,
                 "nodeSelector": {"matchLabels": {POOL_LABEL: stage.s.pool}}},
    }))
    .expect("budget literal");
    budgets
        .create(&PostParams::default(), &budget)
        .await
        .expect("create the budget");
    let pool = support::budgets::PoolChecker::start(
        client.clone(),
        stage.ns().to_string(),
        stage.s.pool.clone(),
    );
    let replicas = Replicas::start_with(
        stage.ns(),
        &[("a", stage.kubeconfig())],
        false,
        &[("SLIPWAY_REBOOT_POLICIES", "true")],
    );
    // The budget takes effect once the controller has seen it: its ledger says so.
    support::wait_for("the budget's ledger", Duration::from_secs(60), || async {
        let b = budgets.get(&name).await?;
        match b.status.is_some_and(|s| s.nodes > 0) {
            true => Ok(()),
            false => Err(anyhow!("no ledger yet")),
        }
    })
    .await;
    let policies = Api::<RebootPolicy>::all(client.clone());
    let policy: RebootPolicy = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1", "kind": "RebootPolicy",
        "metadata": {"name": name},
        "spec": {"concurrency": c, "timeout": "5m",
                 "nodeSelector": {"matchLabels": {POOL_LABEL: stage.s.pool}}},
    }))
    .expect("policy literal");
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("create the policy");
    let nodes = Api::<Node>::all(client.clone());
    let mut before = BTreeMap::new();
    for n in stage.s.nodes.iter().step_by(2) {
        before.insert(n.clone(), support::current_boot_id(&client, n).await);
        support::ask_reboot(&client, n).await;
    }
    stage
        .create_plan(&rollout_plan("up", &stage.s.pool, c, "v1", ""))
        .await;
    let player = play_reboot_pods(
        client.clone(),
        stage.ns().to_string(),
        name.clone(),
        rng.fork(),
    );
    let done = || async {
        stage.is_rolled_out("up").await && every_node_back(&policies, &nodes, &name, &before).await
    };
    let mut kills = 0;
    while kills < sizes.kills && !done().await {
        tokio::time::sleep(rng.millis(300, 2000)).await;
        replicas.crash("a");
        kills += 1;
    }
    stage.finish_rollout("up", ROLLOUT_LIMIT).await;
    let deadline = Instant::now() + ROLLOUT_LIMIT;
    while !every_node_back(&policies, &nodes, &name, &before).await {
        if Instant::now() >= deadline {
            let status = policies.get(&name).await.map(|p| p.status);
            stage.checker.violation(format!(
                "RebootPolicy {name} did not reboot every node within {ROLLOUT_LIMIT:?}: {status:?}"
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    drop(player);
    replicas.stop();
    let most = pool.most();
    if most.len() > allowed {
        stage.checker.violation(format!(
            "{} nodes of the pool were unavailable at once ({most:?}); the budget allows {allowed}",
            most.len()
        ));
    }
    let _ = policies.delete(&name, &DeleteParams::default()).await;
    let _ = budgets.delete(&name, &DeleteParams::default()).await;
    Some(stage.end(Instant::now(), kills).await)
}

/// Plays the nodes of the RebootPolicy `policy`: a node with a reboot pod of it comes back with a
/// new boot ID a moment later, once.
fn play_reboot_pods(client: Client, ns: String, policy: String, mut rng: Random) -> Task {
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let label = format!("{REBOOT_POLICY_LABEL}={policy}");
    Task(tokio::spawn(async move {
        let mut rebooted = BTreeSet::new();
        loop {
            tokio::time::sleep(rng.millis(200, 1000)).await;
            let Ok(list) = pods.list(&ListParams::default().labels(&label)).await else {
                continue;
            };
            for p in list.items {
                let node = p.spec.and_then(|s| s.node_name).unwrap_or_default();
                if rebooted.contains(&node) {
                    continue;
                }
                if support::try_simulate_reboot(&client, &node).await.is_ok() {
                    rebooted.insert(node);
                }
            }
        }
    }))
}
/// The policy has no node left, and every node of `before` has a boot ID other than the one
/// there and is schedulable.
async fn every_node_back(
    policies: &Api<RebootPolicy>,
    nodes: &Api<Node>,
    name: &str,
    before: &BTreeMap<String, String>,
) -> bool {
    let status = policies
        .get(name)
        .await
        .ok()
        .and_then(|p| p.status)
        .unwrap_or_default();
    if !status.nodes.is_empty() {
        return false;
    }
    for (n, boot) in before {
        match nodes.get(n).await {
            Ok(node)
                if node
                    .status
                    .as_ref()
                    .and_then(|s| s.node_info.as_ref())
                    .map(|i| &i.boot_id)
                    != Some(boot)
                    && !node
                        .spec
                        .as_ref()
                        .and_then(|s| s.unschedulable)
                        .unwrap_or(false) => {}
            _ => return false,
        }
    }
    true
}

/// A NodeMaintenance of `node`.
async fn create_maintenance(api: &Api<NodeMaintenance>, name: &str, node: &str) {
    let nm: NodeMaintenance = serde_json::from_value(json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
        "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "reason": "chaos"},
    }))
    .expect("a NodeMaintenance");
    api.create(&PostParams::default(), &nm)
        .await
        .expect("create the NodeMaintenance");
}

async fn maintenance_kills(sizes: Sizes, mut rng: Random) -> Option<Row> {
    let c = sizes.concurrency;
    let maintained = 3.min(sizes.nodes);
    let mut limits = Limits::one_plan("up", c);
    limits.cordons = c + maintained;
    // Cluster-wide: its controller reconciles every NodeMaintenance.
    let scene = (Scene::new("chaos-maintenance").cluster_wide()).crds(&[MAINTENANCE_CRD]);
    let stage = Stage::new(scene, sizes, |_| limits).await?;
    // Where slipway keeps the nodes' medik8s Leases.
    support::ensure_lease_namespace(&stage.s.client).await;
    let replicas = Replicas::start_with(
        stage.ns(),
        &[("a", stage.kubeconfig())],
        false,
        &[("SLIPWAY_MAINTENANCE", "true")],
    );
    stage
        .create_plan(&rollout_plan("up", &stage.s.pool, c, "v1", ""))
        .await;
    let api = Api::<NodeMaintenance>::all(stage.client());
    let mut faults = 0;
    let mut created = Vec::new();
    for i in 0..maintained {
        tokio::time::sleep(rng.millis(500, 2500)).await;
        let node = stage.s.nodes[rng.below(stage.s.nodes.len())].clone();
        let name = stage.s.name(&i.to_string());
        create_maintenance(&api, &name, &node).await;
        created.push(name);
        replicas.crash("a");
        faults += 2;
    }
    // Maintenance holds its nodes for a while, through another crash, then ends: the time is
    // part of the fault.
    tokio::time::sleep(rng.millis(2000, 5000)).await;
    let taken = support::wait_for(
        "maintenance to take a node",
        Duration::from_secs(60),
        || {
            let taken = stage
                .checker
                .observed
                .lock()
                .expect("observed")
                .ever_in_maintenance
                .len();
            async move {
                if taken > 0 {
                    Ok(taken)
                } else {
                    Err(anyhow!("none yet"))
                }
            }
        },
    )
    .await;
    say(&format!(
        "maintenance-kills: maintenance took {taken} node(s)"
    ));
    replicas.crash("a");
    faults += 1;
    for name in &created {
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
    let finished = stage.finish_rollout("up", ROLLOUT_LIMIT).await;
    // Every NodeMaintenance is gone (its finalizer released) before the controller stops.
    support::wait_for(
        "the NodeMaintenances to go",
        Duration::from_secs(60),
        || async {
            let left = api.list(&ListParams::default()).await?.items;
            let mine = left
                .iter()
                .filter(|m| created.contains(&m.name_any()))
                .count();
            if mine == 0 {
                Ok(())
            } else {
                Err(anyhow!("{mine} left"))
            }
        },
    )
    .await;
    replicas.stop();
    Some(stage.end(finished, faults).await)
}

/// A NodeOp over the pool that cordons and reboots each node, under controller kills: at most
/// `concurrency` nodes with a live Job or a reboot pod, never two of either on a node, every node
/// rebooted once its Job succeeded, and at the end the NodeOp `Completed` with no node cordoned.
async fn nodeop_kills(sizes: Sizes, mut rng: Random) -> Option<Row> {
    use slipway::nodeop::api::NodeOp;
    let c = sizes.concurrency;
    let mut limits = Limits::default();
    limits.concurrency.insert("nodeop:chaos".into(), c);
    limits.cordons = c;
    // Cluster-wide: its controller reconciles the NodeOps of every namespace.
    let scene = (Scene::new("chaos-nodeop").cluster_wide()).crds(&[NODEOP_CRD]);
    let stage = Stage::new(scene, sizes, |_| limits).await?;
    let client = stage.client();
    let replicas = Replicas::start_with(
        stage.ns(),
        &[("a", stage.kubeconfig())],
        false,
        &[("SLIPWAY_NODEOPS", "true")],
    );
    let op: NodeOp = serde_json::from_value(json!({
        "apiVersion": "operator.kairos.io/v1alpha1", "kind": "NodeOp",
        "metadata": {"name": "chaos"},
        "spec": {"command": ["sh", "-c", "true"], "concurrency": c, "cordon": true,
                 "rebootOnSuccess": true,
                 "nodeSelector": {"matchLabels": {POOL_LABEL: stage.s.pool}}},
    }))
    .expect("a NodeOp");
    let ops = stage.s.ns.api::<NodeOp>();
    ops.create(&PostParams::default(), &op)
        .await
        .expect("create the NodeOp");
    let rebooter = reboot_after_jobs(client.clone(), ops.clone(), rng.fork());
    let completed = || async {
        let op = ops.get("chaos").await.ok()?;
        (op.status?.phase.as_deref() == Some("Completed")).then_some(())
    };
    let mut kills = 0;
    while kills < sizes.kills && completed().await.is_none() {
        tokio::time::sleep(rng.millis(300, 2500)).await;
        replicas.crash("a");
        kills += 1;
    }
    let deadline = Instant::now() + ROLLOUT_LIMIT;
    while completed().await.is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let finished = Instant::now();
    if completed().await.is_none() {
        let status = ops
            .get("chaos")
            .await
            .map(|o| serde_json::to_string(&o.status));
        stage.checker.violation(format!(
            "NodeOp chaos did not complete within {ROLLOUT_LIMIT:?}: {status:?}"
        ));
    }
    drop(rebooter);
    let _ = ops.delete("chaos", &DeleteParams::default()).await;
    let _ = support::wait_for("the NodeOp to go", Duration::from_secs(60), || async {
        match ops.get_opt("chaos").await? {
            None => Ok(()),
            Some(_) => Err(anyhow!("still there")),
        }
    })
    .await;
    replicas.stop();
    Some(stage.end(finished, kills).await)
}

/// Plays the reboot pods of a NodeOp's nodes: a node whose Job succeeded and whose reboot the
/// NodeOp awaits gets a new boot ID, once, after a short while.
fn reboot_after_jobs(
    client: Client,
    ops: Api<slipway::nodeop::api::NodeOp>,
    mut rng: Random,
) -> Task {
    Task(tokio::spawn(async move {
        let mut rebooted = BTreeSet::new();
        loop {
            tokio::time::sleep(rng.millis(200, 1500)).await;
            let Ok(op) = ops.get("chaos").await else {
                continue;
            };
            for (node, st) in op.status.map(|s| s.node_statuses).unwrap_or_default() {
                let awaited =
                    st.phase == "Completed" && st.reboot_status.as_deref() == Some("pending");
                if awaited
                    && !rebooted.contains(&node)
                    && support::try_simulate_reboot(&client, &node).await.is_ok()
                {
                    rebooted.insert(node);
                }
            }
        }
    }))
}

async fn soak(sizes: Sizes, mut rng: Random) -> Option<Row> {
    let c = sizes.concurrency;
    let mut limits = Limits::default();
    for i in 0..sizes.soak_cycles {
        limits.concurrency.insert(format!("soak-{i}"), c);
    }
    limits.concurrency.insert("last".into(), c);
    // Several Plans may cordon at once while they come and go.
    limits.cordons = usize::MAX;
    let stage = Stage::new(Scene::new("chaos-soak"), sizes, |_| limits).await?;
    let replicas = Replicas::start(stage.ns(), &[("a", stage.kubeconfig())], false);
    let plans = stage.s.ns.api::<Plan>();
    let mut cycles = 0;
    let soak_started = Instant::now();
    for i in 0..sizes.soak_cycles {
        // Evenly over the soak's duration, if it has one.
        let due = sizes
            .soak
            .mul_f64(i as f64 / sizes.soak_cycles.max(1) as f64);
        tokio::time::sleep(due.saturating_sub(soak_started.elapsed())).await;
        let name = format!("soak-{i}");
        stage
            .create_plan(&rollout_plan(&name, &stage.s.pool, c, "v1", ""))
            .await;
        tokio::time::sleep(rng.millis(50, 600)).await;
        let _ = plans
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"version": "v2"}})),
            )
            .await;
        tokio::time::sleep(rng.millis(50, 600)).await;
        let _ = plans.delete(&name, &DeleteParams::default()).await;
        cycles += 1;
    }
    let asked = Instant::now();
    stage
        .create_plan(&rollout_plan("last", &stage.s.pool, c, "v1", ""))
        .await;
    let picked = support::wait_for(
        "the last Plan to be picked up",
        Duration::from_secs(120),
        || async {
            let p = plans.get("last").await?;
            match p.status.and_then(|s| s.latest_hash) {
                Some(_) => Ok(asked.elapsed()),
                None => Err(anyhow!("no status yet")),
            }
        },
    )
    .await;
    say(&format!("soak: a new Plan was picked up after {picked:?}"));
    if picked > PICKUP_LIMIT {
        stage.checker.violation(format!(
            "after {cycles} Plan cycles a new Plan was picked up only after {picked:?}"
        ));
    }
    let finished = stage.finish_rollout("last", ROLLOUT_LIMIT).await;
    replicas.stop();
    Some(stage.end(finished, cycles).await)
}

// ---------------------------------------------------------------------------------------------
// The checker itself, on made-up objects: each invariant can fail.

fn job(name: &str, plan: &str, node: &str, hash: &str, condition: Option<&str>) -> Job {
    let conditions: Vec<serde_json::Value> = condition
        .map(|c| json!({"type": c, "status": "True"}))
        .into_iter()
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {
            "upgrade.cattle.io/plan": plan,
            "upgrade.cattle.io/node": node,
            format!("{PLAN_NODE_PREFIX}{plan}"): hash,
        }},
        "status": {"conditions": conditions},
    }))
    .expect("job literal")
}

fn node(name: &str, cordoned: bool, done: &[(&str, &str)]) -> Node {
    let labels: BTreeMap<String, String> = done
        .iter()
        .map(|(plan, hash)| (format!("{PLAN_NODE_PREFIX}{plan}"), hash.to_string()))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": cordoned},
    }))
    .expect("node literal")
}

#[test]
fn the_checker_counts_live_jobs_per_plan_and_per_node() {
    let limits = Limits::one_plan("up", 2);
    let mut o = Observed::default();
    o.apply_job(&job("j1", "up", "n1", "h", None), &limits);
    o.apply_job(&job("j2", "up", "n2", "h", None), &limits);
    assert!(o.violations.is_empty());
    o.apply_job(&job("j3", "up", "n3", "h", None), &limits);
    assert_eq!(o.violations, ["Plan up: 3 live Jobs, concurrency 2"]);
    // A finished Job frees its slot; a second live one on a node is a violation of its own.
    o.apply_job(&job("j3", "up", "n3", "h", Some("Complete")), &limits);
    o.apply_job(&job("j4", "up", "n1", "h", None), &limits);
    assert_eq!(o.violations.len(), 2, "{:?}", o.violations);
    assert!(
        o.violations[1].contains("on one node n1"),
        "{:?}",
        o.violations
    );
}

#[test]
fn the_checker_wants_a_completed_job_behind_every_done_label_and_few_cordons() {
    let limits = Limits::one_plan("up", 1);
    let start = Instant::now();
    let mut o = Observed::default();
    o.apply_job(&job("j1", "up", "n1", "h1", Some("Complete")), &limits);
    o.apply_node(&node("n1", false, &[("up", "h1")]), &limits, start);
    o.apply_job(&job("j2", "up", "n2", "h1", Some("Failed")), &limits);
    o.apply_node(&node("n2", false, &[("up", "h1")]), &limits, start);
    o.settle(start, MATCH_GRACE);
    assert!(
        o.violations.is_empty(),
        "within the grace: {:?}",
        o.violations
    );
    o.settle(start + MATCH_GRACE, MATCH_GRACE);
    assert_eq!(
        o.violations,
        ["node n2 labelled done for Plan up (h1) but no Job of it completed"]
    );
    o.apply_node(&node("n3", true, &[]), &limits, start);
    o.apply_node(&node("n4", true, &[]), &limits, start);
    assert_eq!(o.violations[1], "2 cordoned nodes, at most 1 allowed");
    assert_eq!(o.longest_stall, Duration::ZERO);
}

#[test]
fn the_checker_counts_nodes_with_reboot_pods() {
    let limits = Limits::one_plan("up", 1);
    let pod = |name: &str, node: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {REBOOT_LABEL: "true", REBOOT_PLAN_LABEL: "up"}},
            "spec": {"nodeName": node, "containers": []},
        }))
        .expect("pod literal")
    };
    let mut o = Observed::default();
    o.apply_reboot_pod(&pod("r1", "n1"), &limits);
    assert!(o.violations.is_empty());
    o.apply_reboot_pod(&pod("r2", "n1"), &limits);
    assert_eq!(o.violations, ["Plan up: 2 reboot pods on node n1"]);
    o.apply_reboot_pod(&pod("r3", "n2"), &limits);
    assert_eq!(
        o.violations[1],
        "Plan up: reboot pods on 2 nodes, concurrency 1"
    );
    // A RebootPolicy's reboot pods count against the policy's own concurrency.
    let limits = Limits {
        concurrency: BTreeMap::from([("policy:nightly".to_string(), 1)]),
        cordons: 1,
    };
    let policy_pod = |name: &str, node: &str| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {REBOOT_LABEL: "true", REBOOT_POLICY_LABEL: "nightly"}},
            "spec": {"nodeName": node, "containers": []},
        }))
        .expect("pod literal")
    };
    let mut o = Observed::default();
    o.apply_reboot_pod(&policy_pod("p1", "n1"), &limits);
    assert!(o.violations.is_empty());
    o.apply_reboot_pod(&policy_pod("p2", "n2"), &limits);
    assert_eq!(
        o.violations,
        ["Plan policy:nightly: reboot pods on 2 nodes, concurrency 1"]
    );
}

#[test]
fn the_checker_wants_no_job_on_a_node_in_maintenance() {
    let limits = Limits::one_plan("up", 1);
    let mut tainted = node("n1", true, &[]);
    if let Some(spec) = tainted.spec.as_mut() {
        spec.taints = Some(vec![k8s_openapi::api::core::v1::Taint {
            key: DRAIN_TAINT.into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        }]);
    }
    let mut o = Observed::default();
    o.apply_node(&tainted, &limits, Instant::now());
    assert!(o.violations.is_empty());
    o.apply_job(&job("j1", "up", "n1", "h", None), &limits);
    assert_eq!(
        o.violations,
        ["Job j1 of Plan up is live on node n1 under maintenance"]
    );
}
