//! The local cluster the benchmarks stand on starts with a few hundred nodes, and says when it is
//! ready only once every one of them is (the readiness check once compared node numbers as
//! strings, so a cluster of more than 9 nodes never became ready and every benchmark failed at
//! startup). A private cluster of its own, torn down at the end.
//!
//! A shared scene: it touches nothing of the shared cluster (its scene only keeps it from running
//! beside a scene that runs alone). Measured on 2 busy cores, the private cluster costs about 19 s
//! of CPU over 33 s (0.6 of a core) and 700 MiB at its peak: less than the suite loses by
//! stopping every other scene for it.

use std::process::{Command, Stdio};

use crate::support::scene::Scene;

const NODES: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_of_a_few_hundred_nodes_starts_and_every_node_is_ready() {
    if std::env::var("SLIPWAY_E2E").as_deref() == Ok("skip") {
        eprintln!("SLIPWAY_E2E=skip: the large local cluster is not started");
        return;
    }
    let Some(_s) = Scene::new("scale").start().await else {
        return;
    };
    tokio::task::spawn_blocking(a_private_cluster_starts_with_every_node_ready)
        .await
        .expect("the private cluster's task");
}

fn a_private_cluster_starts_with_every_node_ready() {
    let repo = env!("CARGO_MANIFEST_DIR");
    let out = Command::new(format!("{repo}/tests/cluster/up.sh"))
        .arg(NODES.to_string())
        .env("SLIPWAY_CLUSTER_OWNER_PID", std::process::id().to_string())
        .env("SLIPWAY_CLUSTER_TIMEOUT", "600")
        .env("SLIPWAY_CLUSTER_NODE_PREFIX", "scale-")
        .env_remove("SLIPWAY_CLUSTER_DIR")
        .stderr(Stdio::inherit())
        .output()
        .expect("run tests/cluster/up.sh");
    assert!(out.status.success(), "up.sh failed: {}", out.status);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let kubeconfig = stdout
        .lines()
        .last()
        .and_then(|l| l.strip_prefix("export KUBECONFIG="))
        .expect("up.sh prints the kubeconfig last")
        .trim()
        .to_string();
    let listed = Command::new("kubectl")
        .args(["--kubeconfig", &kubeconfig, "get", "nodes", "--no-headers"])
        .output()
        .expect("kubectl get nodes");
    let text = String::from_utf8_lossy(&listed.stdout);
    let ready = text
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("Ready"))
        .count();
    let dir = std::path::Path::new(&kubeconfig)
        .parent()
        .expect("the cluster's directory");
    let down = Command::new(format!("{repo}/tests/cluster/down.sh"))
        .arg(dir)
        .status();
    assert_eq!(ready, NODES, "nodes Ready when up.sh said so:\n{text}");
    assert!(down.is_ok_and(|s| s.success()), "down.sh failed");
}
