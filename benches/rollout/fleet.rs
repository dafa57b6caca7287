//! Mode `fleet`: every operation at once on a big fleet.
//!
//! `SLIPWAY_BENCH_NODES` (5,000) nodes and `SLIPWAY_BENCH_PLANS` (50) Plans, all done; 10
//! RebootPolicies (each over a tenth of the nodes, concurrency 5); one node in 100 runs a pod
//! (50 of 5,000), four in five of those pods held by a PodDisruptionBudget. slipway starts with
//! maintenance and reboot policies on and settles; then two phases:
//!
//! 1. unread churn (`SLIPWAY_BENCH_QUIET_SECS`, 60): kwok's heartbeats, `SLIPWAY_BENCH_CHURN_RATE`
//!    (50) patches per second of a node label no decision reads, and one patch per second of a
//!    node condition none reads. Every reconcile counted here was caused by a change no decision
//!    reads.
//! 2. the fleet at work (`SLIPWAY_BENCH_CHURN_SECS`, 240): a NodeMaintenance for each node with a
//!    pod, and one node in 25 (200 of 5,000) asking for a reboot, all at once; the same churn,
//!    plus one node deleted and re-created every 5 s. The bench plays the nodes (a new boot ID
//!    once a reboot pod is there) and relaxes a quarter of the budgets every 20 s.
//!
//! It prints when every reboot and every maintenance was done, and for each maintenance the
//! seconds from the moment nothing held it any more (its budget relaxed, or its creation when no
//! budget held it) to its `Succeeded` phase; for slipway, CPU seconds, peak and steady RSS,
//! reconciles per kind in each phase, p50/p99 reconcile latency per kind, and its API requests at
//! work by resource and verb (from the audit log).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use slipway::maintenance::api::{MaintenancePhase, NodeMaintenance};
use slipway::reboot_policy::api::RebootPolicy;

use super::quiet::{free_port, joined, mib, reconcile_line, reconciles_by_kind, scrape, settled};
use super::{
    CHURN_LABEL, LocalCluster, NS, Options, POOL_LABEL, conflicts, controller_env, prepare_churn,
    requests,
};

const WORKLOADS: &str = "bench-fleet";
const POLICIES: usize = 10;
const POLICY_CONCURRENCY: usize = 5;
/// One node in this many asks for a reboot.
const REBOOT_EVERY: usize = 25;
/// One node in this many runs a pod and gets a NodeMaintenance.
const MAINTAIN_EVERY: usize = 100;
/// Every 5th maintenance drains freely; the others wait for their budget.
const FREE_EVERY: usize = 5;
const RELAX_EVERY: Duration = Duration::from_secs(20);
const RELAX_WAVES: usize = 4;
const RECREATE_EVERY: Duration = Duration::from_secs(5);
const REBOOT_POD_LABEL: &str = "slipway.dev/reboot-policy";
const REBOOT_REQUIRED: &str = "slipway.dev/reboot-required";

/// The nodes each part of the scene uses, by their place in the list (disjoint sets).
struct Roles {
    reboot: Vec<String>,
    maintained: Vec<String>,
    /// Deleted and re-created in turn.
    spare: Vec<String>,
}

fn roles(nodes: &[String]) -> Roles {
    let pick = |every: usize, offset: usize| -> Vec<String> {
        nodes
            .iter()
            .enumerate()
            .filter(|(i, _)| i % every == offset)
            .map(|(_, n)| n.clone())
            .collect()
    };
    Roles {
        reboot: pick(REBOOT_EVERY, 0),
        maintained: pick(MAINTAIN_EVERY, 7),
        spare: pick(MAINTAIN_EVERY, 13),
    }
}

/// deploy/ with the maintenance and reboot-policy components, through kustomize as a user would.
fn install(cluster: &LocalCluster) -> Result<()> {
    super::install(
        cluster,
        "bench-fleet",
        &["maintenance", "reboot-policy"],
        &[
            "nodemaintenances.nodemaintenance.medik8s.io",
            "rebootpolicies.slipway.dev",
        ],
    )
}

fn workload_name(k: usize) -> String {
    format!("nm-{k}")
}

/// One Deployment of one pod on each maintained node; a PDB that refuses its eviction for all but
/// every [`FREE_EVERY`]th.
async fn workloads(admin: &Client, maintained: &[String]) -> Result<()> {
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": WORKLOADS}}))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &namespace)
        .await?;
    let deployments = Api::<Deployment>::namespaced(admin.clone(), WORKLOADS);
    let pdbs = Api::<PodDisruptionBudget>::namespaced(admin.clone(), WORKLOADS);
    for (k, node) in maintained.iter().enumerate() {
        let name = workload_name(k);
        let deployment: Deployment = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name, "bench.slipway.dev/fleet": "nm"}},
                    "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                        "containers": [{"name": "app", "image": "nginx:1.27"}],
                        "terminationGracePeriodSeconds": 1}}}
        }))?;
        deployments
            .create(&PostParams::default(), &deployment)
            .await?;
        if k % FREE_EVERY != 0 {
            let pdb: PodDisruptionBudget = serde_json::from_value(json!({
                "metadata": {"name": name},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": name}}}
            }))?;
            pdbs.create(&PostParams::default(), &pdb).await?;
        }
    }
    let pods = Api::<Pod>::namespaced(admin.clone(), WORKLOADS);
    for _ in 0..600 {
        let running = pods
            .list(&ListParams::default().labels("bench.slipway.dev/fleet=nm"))
            .await?
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == maintained.len() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("the maintained nodes' pods did not all run")
}

fn policy(p: usize) -> Result<RebootPolicy> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "RebootPolicy",
        "metadata": {"name": format!("fleet-{p}")},
        "spec": {
            "nodeSelector": {"matchLabels": {POOL_LABEL: p.to_string()}},
            "concurrency": POLICY_CONCURRENCY,
            "drain": {"timeout": "10m"},
            "timeout": "10m",
        },
    }))?)
}

/// Every policy has a status for its generation.
async fn policies_settled(admin: &Client) -> Result<()> {
    let api = Api::<RebootPolicy>::all(admin.clone());
    for _ in 0..600 {
        let list = api.list(&ListParams::default()).await?.items;
        let observed = list
            .iter()
            .filter(|p| {
                p.status.as_ref().and_then(|s| s.observed_generation) == p.metadata.generation
            })
            .count();
        if observed == POLICIES {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("the RebootPolicies were not all reconciled")
}

#[derive(Default)]
struct Counts {
    labels: AtomicU64,
    conditions: AtomicU64,
    recreated: AtomicU64,
    errors: AtomicU64,
}

impl Counts {
    fn line(&self) -> String {
        format!(
            "{} label patches, {} condition patches, {} nodes deleted and re-created, {} churn requests failed",
            self.labels.load(Ordering::Relaxed),
            self.conditions.load(Ordering::Relaxed),
            self.recreated.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
        )
    }
}

/// Changes no decision reads, until `stop`: `rate` label patches per second and one node
/// condition per second; with `spare` nodes, one of them deleted and re-created every
/// [`RECREATE_EVERY`].
fn churn(
    admin: &Client,
    nodes: Arc<Vec<String>>,
    spare: Vec<String>,
    rate: u64,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let api = Api::<Node>::all(admin.clone());
    let mut tasks = Vec::new();
    let (a, n, s, c) = (api.clone(), nodes.clone(), stop.clone(), counts.clone());
    tasks.push(tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(1000 / rate.max(1)));
        let mut i = 0usize;
        while !s.load(Ordering::Relaxed) {
            tick.tick().await;
            let node = &n[(i * 7919) % n.len()];
            let patch = json!({"metadata": {"labels": {CHURN_LABEL: i.to_string()}}});
            let r = a
                .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            count(&c, &c.labels, r.is_ok());
            i += 1;
        }
    }));
    let (a, n, s, c) = (api.clone(), nodes, stop.clone(), counts.clone());
    tasks.push(tokio::spawn(async move {
        let mut i = 0usize;
        while !s.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let node = &n[(i * 104_729) % n.len()];
            let status = if i.is_multiple_of(2) { "True" } else { "False" };
            let patch = json!({"status": {"conditions": [{"type": "BenchUnread", "status": status,
                "reason": "Bench", "message": "a condition no decision reads"}]}});
            let r = a
                .patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch))
                .await;
            count(&c, &c.conditions, r.is_ok());
            i += 1;
        }
    }));
    if !spare.is_empty() {
        tasks.push(tokio::spawn(async move {
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(RECREATE_EVERY).await;
                let ok = recreate(&api, &spare[i % spare.len()]).await.is_ok();
                count(&counts, &counts.recreated, ok);
                i += 1;
            }
        }));
    }
    tasks
}

fn count(counts: &Counts, what: &AtomicU64, ok: bool) {
    match ok {
        true => what.fetch_add(1, Ordering::Relaxed),
        false => counts.errors.fetch_add(1, Ordering::Relaxed),
    };
}

/// Deletes the node and creates it again with the same labels, annotations and spec (as a node
/// that is replaced under the same name); kwok takes it over again and makes it Ready.
pub(super) async fn recreate(api: &Api<Node>, name: &str) -> Result<()> {
    let old = api.get(name).await?;
    api.delete(name, &DeleteParams::default()).await?;
    for _ in 0..100 {
        if api.get_opt(name).await?.is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: old.metadata.labels,
            annotations: old.metadata.annotations,
            ..ObjectMeta::default()
        },
        spec: old.spec,
        status: None,
    };
    api.create(&PostParams::default(), &node).await?;
    Ok(())
}

/// Plays the nodes being rebooted until `stop`: a node gets a new boot ID once a reboot pod is
/// on it (kwok nodes run nothing that reboots).
fn play_reboots(
    admin: &Client,
    stop: Arc<AtomicBool>,
    rebooted: Arc<Mutex<BTreeSet<String>>>,
) -> tokio::task::JoinHandle<()> {
    let pods = Api::<Pod>::namespaced(admin.clone(), NS);
    let nodes = Api::<Node>::all(admin.clone());
    tokio::spawn(async move {
        let mut boot = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let list = pods
                .list(&ListParams::default().labels(REBOOT_POD_LABEL))
                .await
                .map(|l| l.items)
                .unwrap_or_default();
            for p in list {
                let node = p.spec.and_then(|s| s.node_name).unwrap_or_default();
                let new = rebooted
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(node.clone());
                if new && !node.is_empty() {
                    boot += 1;
                    let patch =
                        json!({"status": {"nodeInfo": {"bootID": format!("fleet-boot-{boot}")}}});
                    let _ = nodes
                        .patch_status(&node, &PatchParams::default(), &Patch::Merge(&patch))
                        .await;
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

/// Each node asks for a reboot as `slipway agent` does: its current boot ID in the annotation.
async fn ask_reboots(admin: &Client, nodes: &[String]) -> Result<()> {
    let api = Api::<Node>::all(admin.clone());
    let boots: BTreeMap<String, String> = api
        .list(&ListParams::default().labels("type=kwok"))
        .await?
        .items
        .into_iter()
        .map(|n| {
            let boot = n
                .status
                .and_then(|s| s.node_info)
                .map(|i| i.boot_id)
                .unwrap_or_default();
            (n.metadata.name.unwrap_or_default(), boot)
        })
        .collect();
    for n in nodes {
        let boot = boots.get(n).cloned().unwrap_or_default();
        let patch = json!({"metadata": {"annotations": {REBOOT_REQUIRED: boot}}});
        api.patch(n, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

/// One maintenance: when nothing held it any more, and when it was seen `Succeeded`.
struct Maintenance {
    free_at: Option<Instant>,
    done_at: Option<Instant>,
}

async fn create_maintenances(admin: &Client, maintained: &[String]) -> Result<Vec<Maintenance>> {
    let api = Api::<NodeMaintenance>::all(admin.clone());
    let mut out = Vec::new();
    for (k, node) in maintained.iter().enumerate() {
        let nm: NodeMaintenance = serde_json::from_value(json!({
            "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
            "kind": "NodeMaintenance",
            "metadata": {"name": workload_name(k)},
            "spec": {"nodeName": node, "reason": "bench"},
        }))?;
        api.create(&PostParams::default(), &nm).await?;
        out.push(Maintenance {
            free_at: (k % FREE_EVERY == 0).then(Instant::now),
            done_at: None,
        });
    }
    Ok(out)
}

/// Relaxes the budgets of wave `wave` (a quarter of the held ones) and records when.
async fn relax(admin: &Client, wave: usize, maintenances: &mut [Maintenance]) -> Result<()> {
    let pdbs = Api::<PodDisruptionBudget>::namespaced(admin.clone(), WORKLOADS);
    let held: Vec<usize> = (0..maintenances.len())
        .filter(|k| k % FREE_EVERY != 0)
        .collect();
    let per_wave = held.len().div_ceil(RELAX_WAVES);
    for &k in held.iter().skip(wave * per_wave).take(per_wave) {
        let patch = json!({"spec": {"minAvailable": 0}});
        pdbs.patch(
            &workload_name(k),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
        maintenances[k].free_at = Some(Instant::now());
    }
    Ok(())
}

/// Marks the maintenances seen `Succeeded` now.
async fn observe_maintenances(admin: &Client, maintenances: &mut [Maintenance]) -> Result<()> {
    let list = Api::<NodeMaintenance>::all(admin.clone())
        .list(&ListParams::default())
        .await?;
    for nm in list.items {
        let Some(k) = nm
            .metadata
            .name
            .as_deref()
            .and_then(|n| n.strip_prefix("nm-"))
            .and_then(|k| k.parse::<usize>().ok())
        else {
            continue;
        };
        let done = nm.status.and_then(|s| s.phase) == Some(MaintenancePhase::Succeeded);
        if let Some(m) = maintenances.get_mut(k)
            && done
            && m.done_at.is_none()
        {
            m.done_at = Some(Instant::now());
        }
    }
    Ok(())
}

/// True when no policy has a node in progress or wanting.
async fn policies_idle(admin: &Client) -> Result<bool> {
    let list = Api::<RebootPolicy>::all(admin.clone())
        .list(&ListParams::default())
        .await?;
    Ok(list.items.iter().all(|p| {
        p.status
            .as_ref()
            .is_some_and(|s| s.nodes.is_empty() && s.wanting == 0 && s.rebooting == 0)
    }))
}

fn delta(after: &BTreeMap<String, f64>, before: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    let mut out = after.clone();
    for (k, v) in before {
        if let Some(n) = out.get_mut(k) {
            *n -= v;
        }
    }
    out.retain(|_, n| *n > 0.0);
    out
}

fn quantile(mut v: Vec<f64>, q: f64) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied()
}

fn seconds(v: Option<f64>) -> String {
    v.map_or("-".into(), |s| format!("{s:.1} s"))
}

/// The fleet at work: maintenances, reboots and churn at once, for `secs`. Returns when the
/// reboots and the maintenances were all done (from the phase's start).
async fn at_work(
    admin: &Client,
    roles: &Roles,
    secs: u64,
    maintenances: &mut [Maintenance],
    rebooted: &Arc<Mutex<BTreeSet<String>>>,
) -> Result<(Option<f64>, Option<f64>)> {
    let started = Instant::now();
    ask_reboots(admin, &roles.reboot).await?;
    let (mut reboots_done, mut maintenances_done) = (None, None);
    let mut waves = 0;
    while started.elapsed() < Duration::from_secs(secs) {
        if waves < RELAX_WAVES && started.elapsed() >= RELAX_EVERY * (waves as u32 + 1) {
            relax(admin, waves, maintenances).await?;
            waves += 1;
        }
        observe_maintenances(admin, maintenances).await?;
        if maintenances_done.is_none() && maintenances.iter().all(|m| m.done_at.is_some()) {
            maintenances_done = Some(started.elapsed().as_secs_f64());
        }
        let all_rebooted =
            rebooted.lock().unwrap_or_else(|e| e.into_inner()).len() >= roles.reboot.len();
        if reboots_done.is_none() && all_rebooted && policies_idle(admin).await? {
            reboots_done = Some(started.elapsed().as_secs_f64());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok((reboots_done, maintenances_done))
}

pub(super) async fn fleet(cluster: &LocalCluster, admin: &Client, opts: &Options) -> Result<()> {
    install(cluster)?;
    let nodes = Arc::new(prepare_churn(admin, opts, POLICIES).await?);
    let roles = roles(&nodes);
    workloads(admin, &roles.maintained).await?;
    let policies = Api::<RebootPolicy>::all(admin.clone());
    for p in 0..POLICIES {
        policies.create(&PostParams::default(), &policy(p)?).await?;
    }
    let (kubeconfig, jti) = cluster.service_account("slipway-fleet")?;
    let mut env = controller_env(&kubeconfig)?;
    env.insert("SLIPWAY_MAINTENANCE".into(), "true".into());
    env.insert("SLIPWAY_REBOOT_POLICIES".into(), "true".into());
    let port = free_port()?;
    let process = super::start_slipway(cluster, &env, port, "slipway-fleet")?;
    settled(admin, opts.plans).await?;
    policies_settled(admin).await?;
    tokio::time::sleep(Duration::from_secs(10)).await;

    // 1. Changes no decision reads.
    let metrics_start = scrape(port).await.unwrap_or_default();
    let cpu_start = process.cpu_seconds().unwrap_or(0.0);
    let stop = Arc::new(AtomicBool::new(false));
    let unread = Arc::new(Counts::default());
    let tasks = churn(
        admin,
        nodes.clone(),
        Vec::new(),
        opts.churn_rate,
        stop.clone(),
        unread.clone(),
    );
    tokio::time::sleep(Duration::from_secs(opts.quiet_secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let metrics_unread = scrape(port).await.unwrap_or_default();
    let cpu_unread = process.cpu_seconds().unwrap_or(0.0) - cpu_start;

    // 2. The fleet at work.
    let audit = cluster.dir().join("logs/audit.log");
    let requests_before = requests(&audit, &jti, false)?;
    let stop = Arc::new(AtomicBool::new(false));
    let busy = Arc::new(Counts::default());
    let mut tasks = churn(
        admin,
        nodes.clone(),
        roles.spare.clone(),
        opts.churn_rate,
        stop.clone(),
        busy.clone(),
    );
    let rebooted = Arc::new(Mutex::new(BTreeSet::new()));
    tasks.push(play_reboots(admin, stop.clone(), rebooted.clone()));
    let cpu_before = process.cpu_seconds().unwrap_or(0.0);
    let mut maintenances = create_maintenances(admin, &roles.maintained).await?;
    let done = at_work(admin, &roles, opts.churn_secs, &mut maintenances, &rebooted).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let (reboots_done, maintenances_done) = done?;
    let cpu_busy = process.cpu_seconds().unwrap_or(0.0) - cpu_before;
    let metrics_end = scrape(port).await.unwrap_or_default();
    let mut made = requests(&audit, &jti, false)?;
    for (k, before) in requests_before {
        if let Some(n) = made.get_mut(&k) {
            *n -= before;
        }
    }
    made.retain(|_, n| *n > 0);

    let after_free: Vec<f64> = maintenances
        .iter()
        .filter_map(|m| {
            Some(
                m.done_at?
                    .saturating_duration_since(m.free_at?)
                    .as_secs_f64(),
            )
        })
        .collect();
    let succeeded = maintenances.iter().filter(|m| m.done_at.is_some()).count();
    println!(
        "\nresult: fleet: {} nodes, {} Plans (all done), {POLICIES} RebootPolicies (concurrency {POLICY_CONCURRENCY}), \
         {} NodeMaintenances ({} held by PDBs), {} reboot requests, on {} cores",
        opts.nodes,
        opts.plans,
        roles.maintained.len(),
        roles.maintained.len() - roles.maintained.len().div_ceil(FREE_EVERY),
        roles.reboot.len(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "unread churn, {}s: {}; reconciles: {}; {cpu_unread:.2} CPU s",
        opts.quiet_secs,
        unread.line(),
        joined(&delta(
            &reconciles_by_kind(&metrics_unread),
            &reconciles_by_kind(&metrics_start)
        )),
    );
    println!("at work, {}s: {}", opts.churn_secs, busy.line());
    println!(
        "result: reboots: {} of {} nodes rebooted, all done after {}; maintenances: {succeeded} of {} Succeeded, all after {}",
        rebooted.lock().unwrap_or_else(|e| e.into_inner()).len(),
        roles.reboot.len(),
        seconds(reboots_done),
        maintenances.len(),
        seconds(maintenances_done),
    );
    println!(
        "result: drained after nothing held it: p50 {}, max {} (over {} maintenances)",
        seconds(quantile(after_free.clone(), 0.5)),
        seconds(quantile(after_free.clone(), 1.0)),
        after_free.len(),
    );
    println!(
        "result: at work, reconciles: {}; {cpu_busy:.2} CPU s ({:.3} cores)",
        joined(&delta(
            &reconciles_by_kind(&metrics_end),
            &reconciles_by_kind(&metrics_unread)
        )),
        cpu_busy / opts.churn_secs.max(1) as f64,
    );
    println!("  requests: {}", joined(&made));
    println!(
        "  refused with 409 since the start: {}",
        joined(&conflicts(&audit, &jti)?)
    );
    println!(
        "result: slipway peak RSS {}, steady RSS {}; since its start: {}",
        mib(process.peak_rss_mib()),
        mib(super::quiet::vm_rss_mib(&process)),
        reconcile_line(port).await
    );
    Ok(())
}
