//! `slipway agent` on the local cluster. kwok nodes run no processes, so the agent runs as a
//! process on the test machine, pointed at a directory that stands in for the host's /var/run
//! (and /etc), and at a private D-Bus with a stand-in for Flatcar's update engine
//! (`agent/update_engine.rs`); a reboot is simulated as the reboot scenes do (a new
//! `status.nodeInfo.bootID`).
//!
//! The scenes: the sentinel file across boots; a sentinel command (`--once`); bad input; a Kairos
//! host's label; the update engine's status and signals (and a forged one); the engine read every
//! period and a bus that goes away; a RebootPolicy rebooting the node its engine asks for. An
//! agent writes only its own node, so every scene shares the cluster but the last, whose
//! controller reconciles every RebootPolicy.

use crate::support;
pub mod update_engine;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::support::controller::ControllerProcess;
use crate::support::process::ChildProcess;
use crate::support::scene::Scene;
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

/// A running `slipway agent` of `node` (its log `<dir>/<log>`), with `extra` arguments and `env`.
fn start_agent(
    s: &Scene,
    node: &str,
    dir: &Path,
    log: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> ChildProcess {
    ChildProcess::slipway(dir.join(log))
        .args(agent_args(s.cluster.kubeconfig_path(), node, extra))
        // Plain log lines, for the scenes that read them.
        .env("NO_COLOR", "1")
        .envs(env.iter().copied())
        .started()
}

/// A directory of the scene's own that stands in for the host's /var/run (or /etc); removed when
/// dropped.
struct HostDir(std::path::PathBuf);

impl HostDir {
    fn new(what: &str) -> HostDir {
        let dir = std::env::temp_dir().join(support::unique_name(what));
        std::fs::create_dir_all(&dir).expect("a stand-in for a host directory");
        HostDir(dir)
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
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

/// The agent asks while the sentinel file is there, at the node's current boot: a sentinel that
/// survives a reboot asks again at the new boot; one removed withdraws; a reboot clears a request
/// whose sentinel is gone. The other node is left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_marks_its_node_while_the_sentinel_says_so() {
    let Some(s) = Scene::new("agent").nodes(2).start().await else {
        return;
    };
    let (client, nodes) = (&s.client, &Api::<Node>::all(s.client.clone()));
    let (node, other) = (&s.nodes[0], &s.nodes[1]);
    let host_run = HostDir::new("slipway-agent-run");
    let sentinel = host_run.0.join("reboot-required");
    let sentinel_arg = sentinel.display().to_string();
    let _agent = start_agent(
        &s,
        node,
        &host_run.0,
        "agent.log",
        &["--sentinel-file", &sentinel_arg, "--period", "200ms"],
        &[],
    );

    let first_boot = support::current_boot_id(client, node).await;
    std::fs::write(&sentinel, "").expect("touch the sentinel");
    wait_annotation(nodes, node, Some(&first_boot), "the request at this boot").await;
    assert_eq!(annotation(nodes, other).await.expect("other node"), None);

    // A sentinel that survives the reboot asks again, at the new boot.
    let second_boot = support::simulate_reboot(client, node).await;
    wait_annotation(nodes, node, Some(&second_boot), "a request at the new boot").await;
    std::fs::remove_file(&sentinel).expect("remove the sentinel");
    wait_annotation(nodes, node, None, "the request withdrawn").await;

    // As after a real reboot: a new boot and no sentinel (/var/run is a tmpfs).
    std::fs::write(&sentinel, "").expect("touch the sentinel");
    wait_annotation(nodes, node, Some(&second_boot), "the request again").await;
    std::fs::remove_file(&sentinel).expect("remove the sentinel");
    support::simulate_reboot(client, node).await;
    wait_annotation(nodes, node, None, "the request cleared after the reboot").await;
}

/// A sentinel command (`--once`): exit 0 asks, 1 withdraws, one that cannot run changes nothing
/// and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_command_asks_withdraws_or_changes_nothing() {
    let Some(s) = Scene::new("agent-once").nodes(1).start().await else {
        return;
    };
    let (client, nodes) = (&s.client, &Api::<Node>::all(s.client.clone()));
    let node = &s.nodes[0];
    let kubeconfig = s.cluster.kubeconfig_path();
    let once = |command: &str| {
        agent(kubeconfig, node, &["--once", "--sentinel-command", command])
            .output()
            .expect("run slipway agent --once")
    };
    assert!(once("true").status.success());
    let boot = support::current_boot_id(client, node).await;
    assert_eq!(
        annotation(nodes, node).await.expect("get"),
        Some(boot.clone())
    );
    let missing = once("/nonexistent/needs-reboot");
    assert!(missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stdout).contains("cannot tell whether a reboot is needed"),
        "{}",
        String::from_utf8_lossy(&missing.stdout)
    );
    assert_eq!(annotation(nodes, node).await.expect("get"), Some(boot));
    assert!(once("false").status.success());
    assert_eq!(annotation(nodes, node).await.expect("get"), None);
}

/// Bad input says what is wrong (before the agent reads anything).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_agent_input_says_what_is_wrong() {
    let Some(s) = Scene::new("agent-bad").start().await else {
        return;
    };
    let bad = agent(
        s.cluster.kubeconfig_path(),
        "no-node",
        &["--once", "--period", "soon"],
    )
    .output()
    .expect("run slipway agent");
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .contains("--period \"soon\" is not a positive duration")
    );
}

/// The agent labels a Kairos host's Node `kairos.io/managed: "true"` and leaves every other
/// host's alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_labels_a_kairos_node() {
    let Some(s) = Scene::new("agent-kairos").nodes(3).start().await else {
        return;
    };
    let nodes = Api::<Node>::all(s.client.clone());
    let etc = HostDir::new("slipway-agent-etc");
    let hosts = [
        ("kairos-release", "KAIROS_ID=kairos\nKAIROS_FLAVOR=ubuntu\n"),
        ("os-release", "NAME=\"Kairos\"\nID=\"kairos-ubuntu\"\n"),
        (
            "os-release",
            "NAME=\"Flatcar Container Linux by Kinvolk\"\nID=flatcar\n",
        ),
    ];
    for ((file, text), node) in hosts.iter().zip(&s.nodes) {
        let host_etc = etc.0.join(node);
        std::fs::create_dir_all(&host_etc).expect("the stand-in for /etc");
        std::fs::write(host_etc.join(file), text).expect("an os-release file");
        let host_etc = host_etc.display().to_string();
        let out = agent(
            s.cluster.kubeconfig_path(),
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
        label(nodes.get(&s.nodes[0]).await.expect("node")),
        label(nodes.get(&s.nodes[1]).await.expect("node")),
        label(nodes.get(&s.nodes[2]).await.expect("node")),
    ];
    assert_eq!(got, [Some("true".into()), Some("true".into()), None]);
}

/// The environment of an agent that reads the update engine on `address`.
fn engine_env(address: &str) -> [(&str, &str); 2] {
    [
        ("SLIPWAY_AGENT_UPDATE_ENGINE", "true"),
        ("SLIPWAY_AGENT_DBUS_ADDRESS", address),
    ]
}

/// The statuses the agent read from the update engine, in order, from its log.
fn statuses_read(agent: &ChildProcess) -> Vec<String> {
    (agent.log().lines())
        .filter_map(|l| l.split("update engine status=").nth(1))
        .map(|s| s.trim().to_string())
        .collect()
}

/// Until the agent's log shows that it read `status` from the engine: the statuses read so far.
async fn wait_read(agent: &ChildProcess, status: &str) -> Vec<String> {
    support::wait_for(
        &format!("the agent to read {status}"),
        Duration::from_secs(30),
        || async {
            let read = statuses_read(agent);
            match read.last() {
                Some(last) if last == status => Ok(read),
                _ => Err(anyhow!("read {read:?}")),
            }
        },
    )
    .await
}

/// Flatcar's update engine, read over D-Bus, asks for the reboot through the agent, whatever the
/// sentinel: `GetStatus` at start, the `StatusUpdate` signal, a restarted engine (a new owner, no
/// signal). Statuses other than `UPDATE_STATUS_UPDATED_NEED_REBOOT`, and a forged signal, ask for
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_update_engine_itself_asks_for_a_reboot() {
    let Some(s) = Scene::new("agent-ue").nodes(1).start().await else {
        return;
    };
    let (client, nodes) = (&s.client, &Api::<Node>::all(s.client.clone()));
    let node = &s.nodes[0];
    let mut bus = Bus::new();
    bus.start().await;
    let address = bus.address();
    let engine = Engine::serve(&address, NEED_REBOOT).await;
    let host_run = HostDir::new("slipway-agent-ue-run");
    let sentinel = host_run.0.join("reboot-required").display().to_string();
    let boot = support::current_boot_id(client, node).await;
    // A period of an hour: whatever the agent does here, the engine's status or its signals made
    // it do.
    let agent = start_agent(
        &s,
        node,
        &host_run.0,
        "agent.log",
        &["--sentinel-file", &sentinel, "--period", "1h"],
        &engine_env(&address),
    );
    wait_annotation(nodes, node, Some(&boot), "GetStatus at start asks").await;
    engine.announce(IDLE).await;
    wait_annotation(nodes, node, None, "a StatusUpdate IDLE withdraws").await;
    engine.announce(DOWNLOADING).await;
    update_engine::forge(&address, NEED_REBOOT).await;
    engine.announce(FINALIZING).await;
    // The bus delivers in order: once the agent has read FINALIZING, the forged signal before it
    // was either read (and logged) or dropped.
    let read = wait_read(&agent, FINALIZING).await;
    let since_idle: Vec<&String> = read
        .iter()
        .skip(read.iter().rposition(|r| r == IDLE).expect("IDLE read"))
        .collect();
    assert_eq!(
        since_idle,
        [IDLE, DOWNLOADING, FINALIZING],
        "the forged NEED_REBOOT is not read"
    );
    assert_eq!(
        annotation(nodes, node).await.expect("get"),
        None,
        "only NEED_REBOOT from the engine itself asks"
    );
    let _engine = engine.restart(NEED_REBOOT).await;
    wait_annotation(nodes, node, Some(&boot), "a restarted engine asks").await;
}

/// A sentinel command that tests for the sentinel file and counts its runs in `looked`: what the
/// agent's loop looked at, and how many times.
fn counting_sentinel(dir: &Path) -> String {
    let script = dir.join("needs-reboot");
    std::fs::write(
        &script,
        format!(
            "echo >> {looked}\ntest -e {sentinel}\n",
            looked = dir.join("looked").display(),
            sentinel = dir.join("reboot-required").display()
        ),
    )
    .expect("the sentinel command");
    format!("sh {}", script.display())
}

/// How many times the agent ran the [`counting_sentinel`] of `dir`.
fn looks(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("looked"))
        .map(|l| l.lines().count())
        .unwrap_or(0)
}

/// A change that came without a signal is read on the next period. A bus that goes away neither
/// stops the agent nor its sentinel; while the engine cannot be read, a request is not withdrawn.
/// The agent finds the bus again when it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_reads_the_engine_every_period_and_outlives_its_bus() {
    let Some(s) = Scene::new("agent-bus").nodes(1).start().await else {
        return;
    };
    let (client, nodes) = (&s.client, &Api::<Node>::all(s.client.clone()));
    let node = &s.nodes[0];
    let mut bus = Bus::new();
    bus.start().await;
    let address = bus.address();
    let engine = Engine::serve(&address, NEED_REBOOT).await;
    let host_run = HostDir::new("slipway-agent-bus-run");
    let sentinel = host_run.0.join("reboot-required");
    let command = counting_sentinel(&host_run.0);
    let boot = support::current_boot_id(client, node).await;
    let mut agent = start_agent(
        &s,
        node,
        &host_run.0,
        "agent.log",
        &["--sentinel-command", &command, "--period", "300ms"],
        &engine_env(&address),
    );
    wait_annotation(nodes, node, Some(&boot), "GetStatus at start asks").await;
    engine.set_quietly(IDLE);
    wait_annotation(nodes, node, None, "GetStatus on the period withdraws").await;

    // The bus goes away: the agent says so, and runs on.
    let failures =
        |agent: &ChildProcess| agent.log().matches("cannot read the update engine").count();
    let before = failures(&agent);
    bus.stop();
    support::wait_for(
        "the agent to find the bus gone",
        Duration::from_secs(30),
        || async {
            match failures(&agent) {
                n if n > before => Ok(()),
                _ => Err(anyhow!("{}", agent.log_tail())),
            }
        },
    )
    .await;
    assert!(
        !agent.respawn_if_exited(),
        "the agent exited when the bus went away:\n{}",
        agent.log_tail()
    );
    std::fs::write(&sentinel, "").expect("touch the sentinel");
    wait_annotation(nodes, node, Some(&boot), "the sentinel asks without a bus").await;
    std::fs::remove_file(&sentinel).expect("remove the sentinel");
    // Two more looks: the first began after the removal, and had ended when the second began.
    let removed = looks(&host_run.0);
    support::wait_for(
        "the agent to look at the sentinel again",
        Duration::from_secs(30),
        || async {
            match looks(&host_run.0) {
                n if n >= removed + 2 => Ok(()),
                n => Err(anyhow!("{n} looks, {removed} when the sentinel went")),
            }
        },
    )
    .await;
    assert_eq!(
        annotation(nodes, node).await.expect("get").as_deref(),
        Some(boot.as_str()),
        "withdrawn while the engine could not be read"
    );

    // The bus is back, then an engine on it.
    bus.start().await;
    let _engine = Engine::serve(&address, IDLE).await;
    wait_annotation(nodes, node, None, "the agent back on the bus").await;
    drop(engine);
}

/// A RebootPolicy with default signals reboots the node once its engine says NEED_REBOOT. The
/// node reboots as a Flatcar node does: its agent goes down with it, its engine comes back idle
/// (a new owner of the name), then the new boot; the agent starts again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_policy_reboots_the_node_its_update_engine_asks_for() {
    // Its controller reconciles every RebootPolicy of the cluster.
    let Some(s) = Scene::new("agent-rbp")
        .nodes(1)
        .cluster_wide()
        .crds(&["rebootpolicies.slipway.dev"])
        .start()
        .await
    else {
        return;
    };
    let (client, nodes) = (&s.client, &Api::<Node>::all(s.client.clone()));
    let node = &s.nodes[0];
    let mut bus = Bus::new();
    bus.start().await;
    let address = bus.address();
    let engine = Engine::serve(&address, IDLE).await;
    let host_run = HostDir::new("slipway-agent-rbp-run");
    let sentinel = host_run.0.join("reboot-required").display().to_string();
    let mut agent = start_agent(
        &s,
        node,
        &host_run.0,
        "agent.log",
        &["--sentinel-file", &sentinel, "--period", "300ms"],
        &engine_env(&address),
    );
    let _controller = ControllerProcess::start(
        &s.cluster,
        s.ns.name(),
        &[("SLIPWAY_REBOOT_POLICIES", "true")],
    );
    let policies = Api::<RebootPolicy>::all(client.clone());
    let name = s.name("flatcar");
    let policy: RebootPolicy = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "RebootPolicy",
        "metadata": {"name": name},
        "spec": {"nodeSelector": {"matchLabels": {"slipway.test/pool": s.pool}}},
    }))
    .expect("a RebootPolicy");
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("create the RebootPolicy");
    let before = support::current_boot_id(client, node).await;
    engine.announce(NEED_REBOOT).await;
    let pods = Api::<Pod>::namespaced(client.clone(), s.ns.name());
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
    agent.kill();
    let _engine = engine.restart(IDLE).await;
    let after = support::simulate_reboot(client, node).await;
    agent.spawn();
    support::wait_for("the policy's record", Duration::from_secs(90), || async {
        let status = policies.get(&name).await?.status.unwrap_or_default();
        let record = status.rebooted.iter().find(|r| r.name == *node);
        match record {
            Some(r) if status.nodes.is_empty() => Ok(r.boot_id.clone()),
            _ => Err(anyhow!("status: {}", serde_json::to_string(&status)?)),
        }
    })
    .await
    .filter(|b| *b == after)
    .expect("rebooted into the new boot");
    assert_ne!(before, after);
    wait_annotation(nodes, node, None, "no request after the reboot").await;
    let _ = policies.delete(&name, &DeleteParams::default()).await;
}
