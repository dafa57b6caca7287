//! Mode `soak`: a long-running process under object churn, for memory that stays flat.
//!
//! `SLIPWAY_BENCH_NODES` (1,000) nodes and `SLIPWAY_BENCH_PLANS` (50) Plans, all done; slipway runs
//! with maintenance, reboot policies and NodeOps on. For `SLIPWAY_BENCH_SOAK_SECS` (3,600), every
//! 10 s: five NodeMaintenances and two NodeOps (one node each) are created and those of two
//! rounds before deleted, one node is deleted and created again, and every sixth round one Plan
//! moves to a new version. Every minute it prints slipway's RSS and `slipway_tracked_objects`
//! (the per-object maps). At the end everything it created is deleted; it fails when RSS at the
//! end is more than 10% over its value after `SLIPWAY_BENCH_SOAK_WARMUP_SECS` (600), or when a map
//! is not back to its size before the churn.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use slipway::maintenance::api::NodeMaintenance;
use slipway::nodeop::api::NodeOp;
use slipway::plan::api::Plan;

use super::quiet::{free_port, label, mib, samples, scrape, settled, vm_rss_mib};
use super::{LocalCluster, NS, Options, controller_env, prepare_churn};

const ROUND: Duration = Duration::from_secs(10);
const MAINTENANCES: usize = 5;
const NODEOPS: usize = 2;
/// Objects live this many rounds before they are deleted.
const LIFETIME: usize = 2;

/// deploy/ with every component, its Deployment scaled to 0: the controller runs here.
fn install(cluster: &LocalCluster) -> Result<()> {
    super::install(
        cluster,
        "bench-soak",
        &["maintenance", "reboot-policy", "kairos"],
        &[
            "nodemaintenances.nodemaintenance.medik8s.io",
            "nodeops.operator.kairos.io",
        ],
    )
}

/// The sum of `slipway_tracked_objects` by map.
fn tracked(metrics: &str) -> BTreeMap<String, f64> {
    let mut by_map = BTreeMap::new();
    for (labels, v) in samples(metrics, "slipway_tracked_objects") {
        let map = label(labels, "map").unwrap_or_default().to_string();
        *by_map.entry(map).or_insert(0.0) += v;
    }
    by_map
}

fn maintenance(name: &str, node: &str) -> Result<NodeMaintenance> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
        "metadata": {"name": name}, "spec": {"nodeName": node, "reason": "soak"},
    }))?)
}

/// A NodeOp on `node` alone. (Its selector once had a wrong field name, which the type ignored:
/// every NodeOp then ran on every node, and the soak measured 20,000 Jobs instead of churn.)
fn nodeop(name: &str, node: &str) -> Result<NodeOp> {
    let op: NodeOp = serde_json::from_value(json!({
        "apiVersion": "operator.kairos.io/v1alpha1", "kind": "NodeOp",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"command": ["sh", "-c", "true"], "image": "busybox",
                 "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": node}}},
    }))?;
    let selected = (op.spec.node_selector.as_ref())
        .and_then(|s| s.match_labels.as_ref())
        .and_then(|l| l.get("kubernetes.io/hostname"));
    if selected.map(String::as_str) != Some(node) {
        bail!("the soak's NodeOp {name} does not select {node} alone");
    }
    Ok(op)
}

/// One round: new objects on the round's nodes, those of `LIFETIME` rounds before deleted, one
/// node replaced, and every sixth round a Plan edited.
async fn round(admin: &Client, nodes: &[String], r: usize, plans: usize) -> Result<()> {
    let nms = Api::<NodeMaintenance>::all(admin.clone());
    let ops = Api::<NodeOp>::namespaced(admin.clone(), NS);
    let pp = PostParams::default();
    let node = |k: usize| &nodes[k % nodes.len()];
    for k in 0..MAINTENANCES {
        let at = r * (MAINTENANCES + NODEOPS) + k;
        nms.create(&pp, &maintenance(&format!("soak-{r}-{k}"), node(at))?)
            .await?;
    }
    for k in 0..NODEOPS {
        let at = r * (MAINTENANCES + NODEOPS) + MAINTENANCES + k;
        ops.create(&pp, &nodeop(&format!("soak-{r}-{k}"), node(at))?)
            .await?;
    }
    if let Some(old) = r.checked_sub(LIFETIME) {
        delete_round(admin, old).await?;
    }
    let replaced = node(nodes.len() / 2 + r);
    super::fleet::recreate(&Api::<Node>::all(admin.clone()), replaced).await?;
    if r % 6 == 5 && plans > 0 {
        let name = format!("churn-{}", (r / 6) % plans);
        let patch = json!({"spec": {"version": format!("v1.0.{}", r / 6 + 1)}});
        Api::<Plan>::namespaced(admin.clone(), NS)
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

async fn delete_round(admin: &Client, r: usize) -> Result<()> {
    let nms = Api::<NodeMaintenance>::all(admin.clone());
    let ops = Api::<NodeOp>::namespaced(admin.clone(), NS);
    let dp = DeleteParams::default();
    for k in 0..MAINTENANCES {
        let _ = nms.delete(&format!("soak-{r}-{k}"), &dp).await;
    }
    for k in 0..NODEOPS {
        let _ = ops.delete(&format!("soak-{r}-{k}"), &dp).await;
    }
    Ok(())
}

/// Waits until no object the soak made is left (their finalizers are the controller's).
async fn gone(admin: &Client) -> Result<()> {
    let nms = Api::<NodeMaintenance>::all(admin.clone());
    let ops = Api::<NodeOp>::namespaced(admin.clone(), NS);
    for _ in 0..600 {
        let left = nms.list(&ListParams::default()).await?.items.len()
            + ops.list(&ListParams::default()).await?.items.len();
        if left == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("the soak's NodeMaintenances and NodeOps are not all gone")
}

pub(super) async fn soak(cluster: &LocalCluster, admin: &Client, opts: &Options) -> Result<()> {
    install(cluster)?;
    let nodes = prepare_churn(admin, opts, 0).await?;
    let (kubeconfig, _jti) = cluster.service_account("slipway-soak")?;
    let mut env = controller_env(&kubeconfig)?;
    for switch in [
        "SLIPWAY_MAINTENANCE",
        "SLIPWAY_REBOOT_POLICIES",
        "SLIPWAY_NODEOPS",
    ] {
        env.insert(switch.into(), "true".into());
    }
    let port = free_port()?;
    let process = super::start_slipway(cluster, &env, port, "slipway-soak")?;
    settled(admin, opts.plans).await?;
    let before = tracked(&scrape(port).await.unwrap_or_default());
    println!(
        "\nresult: soak: {} nodes, {} Plans, {} s of churn ({MAINTENANCES} NodeMaintenances and {NODEOPS} NodeOps a round of {} s, a node replaced each round, a Plan edited every sixth), on {} cores",
        opts.nodes,
        opts.plans,
        opts.soak_secs,
        ROUND.as_secs(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let started = Instant::now();
    let (mut r, mut next_print, mut warm) = (0, Duration::ZERO, None);
    while started.elapsed() < Duration::from_secs(opts.soak_secs) {
        let at = Instant::now();
        round(admin, &nodes, r, opts.plans).await?;
        r += 1;
        if started.elapsed() >= next_print {
            let maps = tracked(&scrape(port).await.unwrap_or_default());
            let rss = vm_rss_mib(&process);
            println!(
                "  {:>5} s  RSS {}  tracked {}",
                started.elapsed().as_secs(),
                mib(rss),
                super::quiet::joined(&maps)
            );
            next_print += Duration::from_secs(60);
        }
        if warm.is_none() && started.elapsed() >= Duration::from_secs(opts.soak_warmup_secs) {
            warm = vm_rss_mib(&process);
        }
        tokio::time::sleep(ROUND.saturating_sub(at.elapsed())).await;
    }
    for old in r.saturating_sub(LIFETIME)..r {
        delete_round(admin, old).await?;
    }
    gone(admin).await?;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let end = vm_rss_mib(&process);
    let after = tracked(&scrape(port).await.unwrap_or_default());
    println!(
        "result: slipway RSS after warm-up {}, at the end {}, peak {}; {} rounds; tracked before {}, after {}",
        mib(warm),
        mib(end),
        mib(process.peak_rss_mib()),
        r,
        super::quiet::joined(&before),
        super::quiet::joined(&after)
    );
    if let (Some(w), Some(e)) = (warm, end)
        && e > w * 1.10
    {
        bail!("RSS grew {:.0}% after the warm-up", (e / w - 1.0) * 100.0);
    }
    for (map, n) in &after {
        if *n > before.get(map).copied().unwrap_or(0.0) {
            bail!("slipway_tracked_objects{{map={map}}} is {n}, not back to where it was");
        }
    }
    Ok(())
}
