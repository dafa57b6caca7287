//! `slipway agent` on the local cluster. kwok nodes run no processes, so the agent runs as a
//! process on the test machine, pointed at a directory that stands in for the host's /var/run
//! (and /etc), and at a private D-Bus with a stand-in for Flatcar's update engine
//! (`agent/update_engine.rs`); a reboot is simulated as the reboot tests do (a new
//! `status.nodeInfo.bootID`).

use crate::support;
mod update_engine;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::controller::ControllerProcess;
use crate::support::process::ChildProcess;
use anyhow::anyhow;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use slipway::reboot_policy::api::RebootPolicy;
use update_engine::{Bus, DOWNLOADING, Engine, FINALIZING, IDLE, NEED_REBOOT};

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

/// The agent labels a Kairos host's Node `kairos.io/managed: "true"` and leaves every other
/// host's alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_labels_a_kairos_node() {
    let Some((cluster, ns, names, _)) = support::setup_pool("agent-kairos", 3).await else {
        return;
    };
    let client = ns.client();
    let nodes = Api::<Node>::all(client.clone());
    let etc = std::env::temp_dir().join(support::unique_name("slipway-agent-etc"));
    let hosts = [
        ("kairos-release", "KAIROS_ID=kairos\nKAIROS_FLAVOR=ubuntu\n"),
        ("os-release", "NAME=\"Kairos\"\nID=\"kairos-ubuntu\"\n"),
        (
            "os-release",
            "NAME=\"Flatcar Container Linux by Kinvolk\"\nID=flatcar\n",
        ),
    ];
    for ((file, text), node) in hosts.iter().zip(&names) {
        let host_etc = etc.join(node);
        std::fs::create_dir_all(&host_etc).expect("the stand-in for /etc");
        std::fs::write(host_etc.join(file), text).expect("an os-release file");
        let host_etc = host_etc.display().to_string();
        let out = agent(
            cluster.kubeconfig_path(),
            node,
            &[
                "--once",
                "--sentinel-command",
                "false",
                "--host-etc",
                &host_etc,
            ],
        )
        .output()
        .expect("run slipway agent --once");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let label = |node: Node| {
        node.metadata
            .labels
            .and_then(|l| l.get("kairos.io/managed").cloned())
    };
    let got = [
        label(nodes.get(&names[0]).await.expect("node")),
        label(nodes.get(&names[1]).await.expect("node")),
        label(nodes.get(&names[2]).await.expect("node")),
    ];
    assert_eq!(got, [Some("true".into()), Some("true".into()), None]);
    let _ = std::fs::remove_dir_all(&etc);
    support::delete_nodes(&client, &names).await;
    ns.cleanup().await;
}

/// Flatcar's update engine, read over D-Bus, asks for the reboot through the agent, and a
/// RebootPolicy with default signals reboots the node: no FLUO component anywhere. Each way the
/// agent reads the engine is shown on its own: `GetStatus` at start, the `StatusUpdate` signal, a
/// restarted engine (a new owner, no signal), the period, and a bus that goes away and comes back;
/// statuses other than `UPDATE_STATUS_UPDATED_NEED_REBOOT`, and a forged signal, ask for nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_update_engine_asks_and_a_reboot_policy_reboots_the_node() {
    let Some((cluster, ns, names, pool)) = support::setup_pool("agent-ue", 1).await else {
        return;
    };
    let client = ns.client();
    let nodes = Api::<Node>::all(client.clone());
    let node = &names[0];
    let mut bus = Bus::new();
    bus.start().await;
    let address = bus.address();
    let engine = Engine::serve(&address, NEED_REBOOT).await;
    let host_run = std::env::temp_dir().join(support::unique_name("slipway-agent-ue-run"));
    std::fs::create_dir_all(&host_run).expect("the stand-in for /var/run");
    let sentinel = host_run.join("reboot-required");
    let start_agent = |period: &str, log: &str| {
        let sentinel = sentinel.display().to_string();
        ChildProcess::slipway(host_run.join(log))
            .args(agent_args(
                cluster.kubeconfig_path(),
                node,
                &["--sentinel-file", &sentinel, "--period", period],
            ))
            .env("SLIPWAY_AGENT_UPDATE_ENGINE", "true")
            .env("SLIPWAY_AGENT_DBUS_ADDRESS", &address)
            .started()
    };
    let boot = support::current_boot_id(&client, node).await;

    // A period of an hour: whatever the agent does here, the engine's status or its signals made
    // it do.
    let agent_process = start_agent("1h", "agent-1.log");
    wait_annotation(&nodes, node, Some(&boot), "GetStatus at start asks").await;
    engine.announce(IDLE).await;
    wait_annotation(&nodes, node, None, "a StatusUpdate IDLE withdraws").await;
    engine.announce(DOWNLOADING).await;
    update_engine::forge(&address, NEED_REBOOT).await;
    engine.announce(FINALIZING).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        annotation(&nodes, node).await.expect("get"),
        None,
        "only NEED_REBOOT from the engine itself asks"
    );
    let engine = engine.restart(NEED_REBOOT).await;
    wait_annotation(&nodes, node, Some(&boot), "a restarted engine asks").await;
    drop(agent_process);

    // A short period: a change that came without a signal is read on the next period.
    let mut agent_process = start_agent("300ms", "agent-2.log");
    engine.set_quietly(IDLE);
    wait_annotation(&nodes, node, None, "GetStatus on the period withdraws").await;
    a_bus_that_goes_away_neither_stops_the_agent_nor_the_sentinel(
        &mut bus,
        &mut agent_process,
        &nodes,
        node,
        &sentinel,
    )
    .await;
    let engine = Engine::serve(&address, IDLE).await;
    wait_annotation(&nodes, node, None, "the agent back on the bus").await;

    a_reboot_policy_reboots_the_node(&cluster, &ns, &pool, node, &mut agent_process, engine).await;
    drop(agent_process);
    let _ = std::fs::remove_dir_all(&host_run);
    support::delete_nodes(&client, &names).await;
    ns.cleanup().await;
}

/// The bus stops: the agent keeps running and says so, the sentinel still asks, and since the
/// engine cannot be read the request is not withdrawn when the sentinel goes. Then the bus is
/// back (without an engine yet).
async fn a_bus_that_goes_away_neither_stops_the_agent_nor_the_sentinel(
    bus: &mut Bus,
    agent_process: &mut ChildProcess,
    nodes: &Api<Node>,
    node: &str,
    sentinel: &Path,
) {
    let client = nodes.clone().into_client();
    let boot = support::current_boot_id(&client, node).await;
    bus.stop();
    assert!(
        agent_process
            .wait_exit(Duration::from_secs(2))
            .await
            .is_none(),
        "the agent exited when the bus went away:\n{}",
        agent_process.log_tail()
    );
    std::fs::write(sentinel, "").expect("touch the sentinel");
    wait_annotation(nodes, node, Some(&boot), "the sentinel asks without a bus").await;
    std::fs::remove_file(sentinel).expect("remove the sentinel");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        annotation(nodes, node).await.expect("get").as_deref(),
        Some(boot.as_str()),
        "withdrawn while the engine could not be read"
    );
    assert!(
        agent_process
            .log()
            .contains("cannot read the update engine"),
        "{}",
        agent_process.log_tail()
    );
    bus.start().await;
}

/// A RebootPolicy with default signals reboots the node once its engine says NEED_REBOOT. The node
/// reboots as a Flatcar node does: its agent goes down with it, its engine comes back idle (a
/// new owner of the name), then the new boot; the agent starts again.
async fn a_reboot_policy_reboots_the_node(
    cluster: &support::Cluster,
    ns: &support::TestNamespace,
    pool: &str,
    node: &str,
    agent_process: &mut ChildProcess,
    engine: Engine,
) {
    let client = ns.client();
    let _controller =
        ControllerProcess::start(cluster, ns.name(), &[("SLIPWAY_REBOOT_POLICIES", "true")]);
    let policies = Api::<RebootPolicy>::all(client.clone());
    let name = format!("{}-flatcar", ns.name());
    let policy: RebootPolicy = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "RebootPolicy",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {"slipway.test/pool": pool}}},
    }))
    .expect("a RebootPolicy");
    // The controller installs the CRD at start; it may not be served yet.
    support::wait_for("the RebootPolicy", Duration::from_secs(60), || async {
        policies.create(&PostParams::default(), &policy).await
    })
    .await;
    let before = support::current_boot_id(&client, node).await;
    engine.announce(NEED_REBOOT).await;
    let pods = Api::<Pod>::namespaced(client.clone(), ns.name());
    let selector = format!("slipway.dev/reboot-policy={name}");
    support::wait_for("the reboot pod", Duration::from_secs(90), || async {
        let on_node = pods
            .list(&ListParams::default().labels(&selector))
            .await?
            .items
            .iter()
            .any(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node));
        on_node
            .then_some(())
            .ok_or_else(|| anyhow!("no reboot pod on {node} yet"))
    })
    .await;
    agent_process.kill();
    let _engine = engine.restart(IDLE).await;
    let after = support::simulate_reboot(&client, node).await;
    agent_process.spawn();
    support::wait_for("the policy's record", Duration::from_secs(90), || async {
        let status = policies.get(&name).await?.status.unwrap_or_default();
        let record = status.rebooted.iter().find(|r| r.name == node);
        match record {
            Some(r) if status.nodes.is_empty() => Ok(r.boot_id.clone()),
            _ => Err(anyhow!("status: {}", serde_json::to_string(&status)?)),
        }
    })
    .await
    .filter(|b| *b == after)
    .expect("rebooted into the new boot");
    assert_ne!(before, after);
    let nodes = Api::<Node>::all(client.clone());
    wait_annotation(&nodes, node, None, "no request after the reboot").await;
    let _ = policies.delete(&name, &DeleteParams::default()).await;
}
