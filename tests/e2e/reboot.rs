//! `spec.reboot` on the local cluster, a scene each: the slot held until the node is back with a
//! new boot ID (through a crash while it reboots); a node that never comes back failing the Plan
//! after the timeout; the health gate waiting for the node's pods. kwok nodes do not reboot, so
//! the scene plays the node: it changes `status.nodeInfo.bootID` itself. Every scene shares the
//! cluster.

use crate::support;

use std::time::Duration;

use crate::support::TestNamespace;
use crate::support::controller::ControllerProcess;
use crate::support::plans::{condition, is_complete, settled};
use crate::support::scene::Scene;
use anyhow::anyhow;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use slipway::plan::api::Plan;

fn reboot_plan(name: &str, pool: &str, timeout: &str) -> Plan {
    serde_saphyr::from_str(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: {name}
  annotations:
    slipway.test/complete-delay: "2s"
spec:
  concurrency: 1
  version: "2026-11-22"
  nodeSelector:
    matchLabels:
      slipway.test/pool: {pool}
  upgrade:
    image: debian:bookworm-slim
    command: [chroot, /host, sh, -c, "apt-get update && apt-get -y dist-upgrade"]
  reboot:
    timeout: {timeout}
"#
    ))
    .expect("test plan parses")
}

async fn plan_status(ns: &TestNamespace, name: &str) -> Plan {
    ns.api::<Plan>().get(name).await.expect("get plan")
}

fn node_phase(plan: &Plan, node: &str) -> Option<String> {
    plan.status
        .as_ref()?
        .nodes
        .iter()
        .find(|n| n.name == node)
        .map(|n| n.phase.to_string())
}

async fn wait_phase(ns: &TestNamespace, plan: &str, node: &str, phase: &str, timeout: Duration) {
    let api = ns.api::<Plan>();
    support::wait_for(&format!("{node} to be {phase}"), timeout, || async {
        let p = api.get(plan).await?;
        if node_phase(&p, node).as_deref() == Some(phase) {
            Ok(())
        } else {
            Err(anyhow!("status: {}", serde_json::to_string(&p.status)?))
        }
    })
    .await
}

/// The node the Plan is working on (exactly one with concurrency 1).
async fn applying_node(ns: &TestNamespace, plan: &str) -> String {
    let api = ns.api::<Plan>();
    support::wait_for("a node to be applying", Duration::from_secs(60), || async {
        let p = api.get(plan).await?;
        p.status
            .as_ref()
            .and_then(|s| s.applying.first().cloned())
            .ok_or_else(|| anyhow!("status: {:?}", p.status))
    })
    .await
}

async fn jobs_on(ns: &TestNamespace, node: &str) -> Vec<String> {
    ns.api::<Job>()
        .list(&ListParams::default().labels(&format!("upgrade.cattle.io/node={node}")))
        .await
        .expect("list jobs")
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_slot_is_held_until_the_node_is_back_with_a_new_boot_id() {
    let Some(s) = Scene::new("reboot").nodes(2).start().await else {
        return;
    };
    let (ns, client) = (&s.ns, &s.client);
    let mut controller = ControllerProcess::builder(s.cluster.kubeconfig_path())
        .namespace(ns.name())
        .metrics_port()
        .start();
    ns.api::<Plan>()
        .create(&PostParams::default(), &reboot_plan("os", &s.pool, "5m"))
        .await
        .expect("create plan");

    for round in 0..2 {
        let node = applying_node(ns, "os").await;
        a_privileged_reboot_pod_is_on(ns, &node).await;
        wait_phase(ns, "os", &node, "Rebooting", Duration::from_secs(60)).await;
        if round == 1 {
            a_crash_while_the_node_reboots_loses_nothing(&mut controller, client, &node).await;
        } else {
            the_slot_stays_held_while_the_boot_id_is_unchanged(ns, &controller, &s.nodes, &node)
                .await;
            support::simulate_reboot(client, &node).await;
        }
        the_node_is_labelled_and_its_reboot_pod_gone(ns, client, &node).await;
    }
    let api = ns.api::<Plan>();
    support::plans::wait_complete(&api, "os", Duration::from_secs(60)).await;
}

/// The reboot pod is on the node before (or with) the Job: host PID namespace, restarted on
/// failure.
async fn a_privileged_reboot_pod_is_on(ns: &TestNamespace, node: &str) {
    let pods = ns.api::<Pod>();
    let pod = support::wait_for("the reboot pod", Duration::from_secs(30), || async {
        let list = pods
            .list(&ListParams::default().labels("slipway.dev/reboot=true"))
            .await?;
        list.items
            .into_iter()
            .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .ok_or_else(|| anyhow!("no reboot pod on {node} yet"))
    })
    .await;
    let spec = pod.spec.expect("pod spec");
    assert_eq!(spec.host_pid, Some(true));
    assert_eq!(spec.restart_policy.as_deref(), Some("OnFailure"));
}

/// A crash while the node reboots loses nothing.
async fn a_crash_while_the_node_reboots_loses_nothing(
    controller: &mut ControllerProcess,
    client: &kube::Client,
    node: &str,
) {
    controller.kill();
    support::simulate_reboot(client, node).await;
    // The controller stays down a moment after the node came back: the time is the fault.
    tokio::time::sleep(Duration::from_secs(2)).await;
    controller.restart();
}

/// The slot stays held while the boot ID is unchanged: the other node gets no Job, whenever the
/// controller looks again.
async fn the_slot_stays_held_while_the_boot_id_is_unchanged(
    ns: &TestNamespace,
    controller: &ControllerProcess,
    nodes: &[String],
    node: &str,
) {
    let job = jobs_on(ns, node).await.pop().expect("the node's Job");
    settled(controller, &ns.api(), &job).await;
    let other = nodes.iter().find(|n| **n != node).expect("other node");
    assert_eq!(
        jobs_on(ns, other).await,
        Vec::<String>::new(),
        "the next node waits for the reboot"
    );
    let p = plan_status(ns, "os").await;
    assert_eq!(node_phase(&p, node).as_deref(), Some("Rebooting"));
}

/// The node is labelled with the Plan's hash and its reboot pod is deleted.
async fn the_node_is_labelled_and_its_reboot_pod_gone(
    ns: &TestNamespace,
    client: &kube::Client,
    node: &str,
) {
    let pods = ns.api::<Pod>();
    let api = ns.api::<Plan>();
    let node_api = Api::<Node>::all(client.clone());
    support::wait_for(
        &format!("{node} to be labelled"),
        Duration::from_secs(60),
        || async {
            let n = node_api.get(node).await?;
            let hash = api.get("os").await?.status.and_then(|s| s.latest_hash);
            let label = n
                .metadata
                .labels
                .and_then(|l| l.get("plan.upgrade.cattle.io/os").cloned());
            if label.is_some() && label == hash {
                Ok(())
            } else {
                Err(anyhow!("label {label:?}, hash {hash:?}"))
            }
        },
    )
    .await;
    support::wait_for("the reboot pod to go", Duration::from_secs(30), || async {
        let n = pods
            .list(&ListParams::default().labels(&format!(
                "slipway.dev/reboot=true,upgrade.cattle.io/node={node}"
            )))
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .count();
        if n == 0 {
            Ok(())
        } else {
            Err(anyhow!("{n} reboot pods on {node}"))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_never_comes_back_fails_the_plan_after_the_timeout() {
    let Some(s) = Scene::new("noreturn").nodes(2).start().await else {
        return;
    };
    let ns = &s.ns;
    let _controller = ControllerProcess::start(&s.cluster, ns.name(), &[]);
    ns.api::<Plan>()
        .create(
            &PostParams::default(),
            &reboot_plan("stuck", &s.pool, "15s"),
        )
        .await
        .expect("create plan");
    let node = applying_node(ns, "stuck").await;
    let api = ns.api::<Plan>();
    let failed = support::wait_for("RebootTimedOut", Duration::from_secs(90), || async {
        let p = api.get("stuck").await?;
        match condition(&p, "Complete").cloned() {
            Some(c) if c.reason.as_deref() == Some("RebootTimedOut") => Ok(p),
            other => Err(anyhow!("Complete: {other:?}")),
        }
    })
    .await;
    let complete = condition(&failed, "Complete").expect("Complete");
    let message = complete.message.clone().unwrap_or_default();
    let status = failed.status.expect("status");
    assert!(
        message.contains(&format!("Node {node} did not come back")),
        "{message}"
    );
    assert_eq!(status.applying, vec![node.clone()], "the slot stays held");
    let other = s.nodes.iter().find(|n| **n != node).expect("other node");
    assert_eq!(jobs_on(ns, other).await, Vec::<String>::new());
}

async fn set_pod_ready(pods: &Api<Pod>, name: &str, ready: bool) {
    let status = if ready { "True" } else { "False" };
    pods.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": [{"type": "Ready", "status": status}]}})),
    )
    .await
    .expect("patch pod readiness");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_gate_waits_for_the_nodes_pods_and_says_which() {
    let Some(s) = Scene::new("health").nodes(1).start().await else {
        return;
    };
    let ns = &s.ns;
    let node = s.nodes[0].clone();
    // A workload pod on the node that the gate watches.
    let pods = ns.api::<Pod>();
    let critical: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "critical", "labels": {"app": "critical"}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}
    }))
    .expect("pod");
    pods.create(&PostParams::default(), &critical)
        .await
        .expect("create pod");
    let _controller = ControllerProcess::start(&s.cluster, ns.name(), &[]);
    let mut plan = reboot_plan("gated", &s.pool, "5m");
    plan.spec.reboot.as_mut().expect("reboot").health_gate =
        Some(slipway::plan::api::HealthGateSpec {
            pod_selector: serde_json::from_value(json!({"matchLabels": {"app": "critical"}}))
                .expect("selector"),
            namespace: Some(ns.name().to_string()),
            timeout: Some("5m".into()),
            ..Default::default()
        });
    ns.api::<Plan>()
        .create(&PostParams::default(), &plan)
        .await
        .expect("create plan");

    wait_phase(ns, "gated", &node, "Rebooting", Duration::from_secs(60)).await;
    set_pod_ready(&pods, "critical", false).await;
    support::simulate_reboot(&s.client, &node).await;
    wait_phase(
        ns,
        "gated",
        &node,
        "WaitingForHealth",
        Duration::from_secs(30),
    )
    .await;
    let p = plan_status(ns, "gated").await;
    let complete = condition(&p, "Complete").cloned().expect("Complete");
    assert_eq!(complete.reason.as_deref(), Some("WaitingForHealth"));
    let message = complete.message.unwrap_or_default();
    assert!(
        message.contains(&format!("{}/critical", ns.name())),
        "the condition names the pod: {message}"
    );
    assert!(!is_complete(&p), "not complete while the pod is not Ready");

    set_pod_ready(&pods, "critical", true).await;
    let api = ns.api::<Plan>();
    support::plans::wait_complete(&api, "gated", Duration::from_secs(60)).await;
}
