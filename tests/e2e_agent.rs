//! `slipway agent` on the local cluster. kwok nodes run no processes, so the agent runs as a
//! process on the test machine, pointed at a directory that stands in for the host's /var/run; a
//! reboot is simulated as the reboot tests do (a new `status.nodeInfo.bootID`).

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::anyhow;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use support::process::ChildProcess;

const ANNOTATION: &str = support::REBOOT_REQUIRED_ANNOTATION;

/// `agent --kubeconfig <kubeconfig> --node <node> <extra>`.
fn agent_args(kubeconfig: &Path, node: &str, extra: &[&str]) -> Vec<String> {
    let head = [
        "agent",
        "--kubeconfig",
        &kubeconfig.display().to_string(),
        "--node",
        node,
    ];
    head.iter().chain(extra).map(|a| a.to_string()).collect()
}

/// `slipway agent ...` to run to its end (`--once`, or bad input).
fn agent(kubeconfig: &Path, node: &str, extra: &[&str]) -> Command {
    let mut cmd = support::process::slipway();
    cmd.args(agent_args(kubeconfig, node, extra));
    cmd
}

async fn annotation(nodes: &Api<Node>, node: &str) -> anyhow::Result<Option<String>> {
    Ok(nodes
        .get(node)
        .await?
        .metadata
        .annotations
        .and_then(|a| a.get(ANNOTATION).cloned()))
}

async fn wait_annotation(nodes: &Api<Node>, node: &str, want: Option<&str>, what: &str) {
    support::wait_for(what, Duration::from_secs(30), || async {
        let got = annotation(nodes, node).await?;
        if got.as_deref() == want {
            Ok(())
        } else {
            Err(anyhow!("{ANNOTATION}: {got:?}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_marks_its_node_while_the_sentinel_says_so() {
    let Some((cluster, ns, names, _)) = support::setup_pool("agent", 2).await else {
        return;
    };
    let client = ns.client();
    let nodes = Api::<Node>::all(client.clone());
    let (node, other) = (&names[0], &names[1]);
    let host_run = std::env::temp_dir().join(support::unique_name("slipway-agent-run"));
    std::fs::create_dir_all(&host_run).expect("the stand-in for /var/run");
    let sentinel = host_run.join("reboot-required");
    let sentinel_arg = sentinel.display().to_string();
    let agent_process = ChildProcess::slipway(host_run.with_extension("log"))
        .args(agent_args(
            cluster.kubeconfig_path(),
            node,
            &["--sentinel-file", &sentinel_arg, "--period", "200ms"],
        ))
        .started();

    let first_boot = support::current_boot_id(&client, node).await;
    std::fs::write(&sentinel, "").expect("touch the sentinel");
    wait_annotation(&nodes, node, Some(&first_boot), "the request at this boot").await;
    assert_eq!(annotation(&nodes, other).await.expect("other node"), None);

    // A sentinel that survives the reboot asks again, at the new boot.
    let second_boot = support::simulate_reboot(&client, node).await;
    wait_annotation(
        &nodes,
        node,
        Some(&second_boot),
        "a request at the new boot",
    )
    .await;
    std::fs::remove_file(&sentinel).expect("remove the sentinel");
    wait_annotation(&nodes, node, None, "the request withdrawn").await;

    // As after a real reboot: a new boot and no sentinel (/var/run is a tmpfs).
    std::fs::write(&sentinel, "").expect("touch the sentinel");
    wait_annotation(&nodes, node, Some(&second_boot), "the request again").await;
    std::fs::remove_file(&sentinel).expect("remove the sentinel");
    support::simulate_reboot(&client, node).await;
    wait_annotation(&nodes, node, None, "the request cleared after the reboot").await;
    drop(agent_process);

    // A sentinel command: exit 0 asks, 1 withdraws, one that cannot run changes nothing.
    let kubeconfig = cluster.kubeconfig_path();
    let once = |command: &str| {
        agent(
            kubeconfig,
            other,
            &["--once", "--sentinel-command", command],
        )
        .output()
        .expect("run slipway agent --once")
    };
    assert!(once("true").status.success());
    let boot = support::current_boot_id(&client, other).await;
    assert_eq!(
        annotation(&nodes, other).await.expect("get"),
        Some(boot.clone())
    );
    let missing = once("/nonexistent/needs-reboot");
    assert!(missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stdout).contains("cannot tell whether a reboot is needed"),
        "{}",
        String::from_utf8_lossy(&missing.stdout)
    );
    assert_eq!(annotation(&nodes, other).await.expect("get"), Some(boot));
    assert!(once("false").status.success());
    assert_eq!(annotation(&nodes, other).await.expect("get"), None);

    // Bad input says what is wrong.
    let bad = agent(kubeconfig, other, &["--once", "--period", "soon"])
        .output()
        .expect("run slipway agent");
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .contains("--period \"soon\" is not a positive duration")
    );
    let _ = std::fs::remove_dir_all(&host_run);
    support::delete_nodes(&client, &names).await;
    ns.cleanup().await;
}
