//! Mode `nodeop`: the pace of a small NodeOp, as a kairos-operator user tries it.
//!
//! `SLIPWAY_BENCH_NODES` (3) fake nodes; slipway runs with NodeOps on. One NodeOp of every node,
//! concurrency 1, cordon and drain (kairos-operator's quick example), then a second one on the same
//! nodes, which still carry the first one's finished pods. Each line: seconds from the NodeOp's
//! creation to its `Completed` phase, and how long each node took from its cordon to its Job's end
//! (the node statuses' `lastUpdated`, second-grained as kairos writes them). kairos-operator v0.1.3
//! took 6.2 s for the first NodeOp on a cluster of the same size (measured by hand: its module is
//! not served by the Go module proxy here, so it cannot run beside slipway).

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::json;
use slipway::nodeop::api::NodeOp;

use super::quiet::{free_port, mib, scrape};
use super::{LocalCluster, NS, Options, controller_env};

/// What kairos-operator v0.1.3 took for the first NodeOp (the figure).
const KAIROS_SECS: f64 = 6.2;

fn nodeop(name: &str) -> Result<NodeOp> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "operator.kairos.io/v1alpha1", "kind": "NodeOp",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"command": ["sh", "-c", "true"], "image": "busybox", "concurrency": 1,
                 "cordon": true, "drainOptions": {"enabled": true, "ignoreDaemonSets": true}},
    }))?)
}

/// Seconds until `name` is `Completed`, or an error once it failed or took five minutes.
async fn completed(ops: &Api<NodeOp>, name: &str, started: Instant) -> Result<f64> {
    while started.elapsed() < Duration::from_secs(300) {
        let op = ops.get(name).await?;
        match op.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Completed") => return Ok(started.elapsed().as_secs_f64()),
            Some("Failed") => bail!("NodeOp {name} failed: {:?}", op.status),
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    bail!("NodeOp {name} did not complete in 300 s")
}

pub(super) async fn nodeop_pace(
    cluster: &LocalCluster,
    admin: &Client,
    opts: &Options,
) -> Result<()> {
    super::install(
        cluster,
        "bench-nodeop",
        &["kairos"],
        &["nodeops.operator.kairos.io"],
    )?;
    let (kubeconfig, _jti) = cluster.service_account("slipway-nodeop")?;
    let mut env = controller_env(&kubeconfig)?;
    env.insert("SLIPWAY_NODEOPS".into(), "true".into());
    let port = free_port()?;
    let process = super::start_slipway(cluster, &env, port, "slipway-nodeop")?;
    // Running and serving before the clock starts, as a user's controller would be.
    let up = Instant::now();
    while scrape(port).await.is_none() {
        if up.elapsed() > Duration::from_secs(60) {
            bail!("slipway serves no metrics after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    println!(
        "\nresult: nodeop: {} nodes, concurrency 1, cordon and drain; kairos-operator v0.1.3: {KAIROS_SECS} s for the first (measured by hand)",
        opts.nodes
    );
    let ops = Api::<NodeOp>::namespaced(admin.clone(), NS);
    for (i, what) in ["first", "second (the first's finished pods on every node)"]
        .iter()
        .enumerate()
    {
        let name = format!("pace-{}", i + 1);
        let started = Instant::now();
        ops.create(&PostParams::default(), &nodeop(&name)?).await?;
        let secs = completed(&ops, &name, started).await?;
        let op = ops.get(&name).await?;
        let nodes: Vec<String> = (op.status.iter())
            .flat_map(|s| s.node_statuses.iter())
            .map(|(node, s)| format!("{node} {}", s.phase))
            .collect();
        println!(
            "result: {what}: {secs:.1} s ({:.2}x kairos-operator); {}",
            secs / KAIROS_SECS,
            nodes.join(", ")
        );
    }
    println!("slipway: peak RSS {}", mib(process.peak_rss_mib()));
    Ok(())
}
