//! End-to-end scenes of NodeOp (kairos-operator's `operator.kairos.io/v1alpha1` API) on the local
//! cluster: real Jobs run by the Job controller, kwok playing the kubelet (a Job's pod succeeds
//! after a second, fails when it carries the `slipway.test/fail` label, or stays Running while
//! it carries `slipway.test/hold`).
//!
//! The scenes: kairos-operator's examples applied unchanged; a failing canary; `concurrency: 0`; a
//! node in maintenance; a NodeOpUpgrade, control plane first, rebooting each node through the
//! hand-off; a Plan leaving out a node a NodeOp holds, and a NodeOp waiting for a node a Plan
//! upgrades (one budget); a controller killed mid-operation.
//!
//! A NodeOp-enabled controller reconciles the NodeOps of every namespace, so every scene with a
//! controller is in the [`CLUSTER_WIDE`](crate::support::scene::CLUSTER_WIDE) group: one at a
//! time, each with a controller of its own. The examples are a dry run, and share the cluster.

use crate::support;

use std::time::Duration;

use crate::support::TestNamespace;
use crate::support::controller::ControllerProcess;
use crate::support::scene::Scene;
use anyhow::{anyhow, bail};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use slipway::maintenance::api::{MaintenancePhase, NodeMaintenance};
use slipway::nodeop::api::{NodeOp, NodeOpUpgrade};
use slipway::plan::api::Plan;

/// The controller of every scene: NodeOps, and NodeMaintenances (one budget with them).
const ENV: [(&str, &str); 2] = [("SLIPWAY_NODEOPS", "true"), ("SLIPWAY_MAINTENANCE", "true")];
/// The controller's reconciles of NodeOps, as its metrics name them.
const KIND: &str = "nodeop";
const CRDS: [&str; 3] = [
    "nodeops.operator.kairos.io",
    "nodeopupgrades.operator.kairos.io",
    "nodemaintenances.nodemaintenance.medik8s.io",
];

/// A scene of `nodes` nodes and its controller (with metrics, for [`ControllerProcess::settled`]).
async fn nodeop_scene(name: &str, nodes: usize) -> Option<(Scene, ControllerProcess)> {
    // Its controller reconciles the NodeOps of every namespace, and every NodeMaintenance.
    let s = Scene::new(name)
        .nodes(nodes)
        .cluster_wide()
        .crds(&CRDS)
        .start()
        .await?;
    support::ensure_lease_namespace(&s.client).await;
    let controller = ControllerProcess::start_metered(&s.cluster, s.ns.name(), &ENV);
    Some((s, controller))
}

fn ops(s: &Scene) -> Api<NodeOp> {
    s.ns.api()
}

/// A NodeOp named `name` on the nodes `nodes` (by hostname), with `extra` merged into its spec.
fn nodeop(name: &str, nodes: &[&String], extra: Value) -> NodeOp {
    let mut spec = json!({
        "command": ["sh", "-c", "echo done"],
        "nodeSelector": {"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}
        ]},
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "operator.kairos.io/v1alpha1",
        "kind": "NodeOp",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("a NodeOp")
}

fn status_of(op: &NodeOp) -> String {
    serde_json::to_string(&op.status).unwrap_or_default()
}

/// Waits until NodeOp `name` satisfies `done`.
async fn wait_nodeop(
    api: &Api<NodeOp>,
    name: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&NodeOp) -> bool,
) -> NodeOp {
    support::wait_for(&format!("{name}: {what}"), timeout, || async {
        let op = api.get(name).await?;
        if done(&op) {
            Ok(op)
        } else {
            Err(anyhow!("status: {}", status_of(&op)))
        }
    })
    .await
}

fn phase(op: &NodeOp) -> &str {
    op.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

async fn jobs_of(ns: &TestNamespace, nodeop: &str) -> Vec<Job> {
    ns.api::<Job>()
        .list(&ListParams::default().labels(&format!("kairos.io/nodeop={nodeop}")))
        .await
        .expect("list Jobs")
        .items
}

async fn unschedulable(client: &kube::Client, node: &str) -> bool {
    Api::<Node>::all(client.clone())
        .get(node)
        .await
        .expect("get node")
        .spec
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// Marks the pods of `nodeop` on `node` to fail (kwok's `slipway.test/fail` label), as soon as
/// they appear, until aborted.
fn fail_pods_on(ns: &TestNamespace, nodeop: &str, node: &str) -> tokio::task::JoinHandle<()> {
    let pods = ns.api::<Pod>();
    let selector = format!("kairos.io/nodeop={nodeop},kairos.io/node={node}");
    tokio::spawn(async move {
        loop {
            if let Ok(list) = pods.list(&ListParams::default().labels(&selector)).await {
                for pod in list.items {
                    let marked = pod
                        .metadata
                        .labels
                        .as_ref()
                        .is_some_and(|l| l.contains_key(support::FAIL_LABEL));
                    if let (false, Some(name)) = (marked, pod.metadata.name) {
                        let patch = json!({"metadata": {"labels": {support::FAIL_LABEL: "true"}}});
                        let _ = pods
                            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                            .await;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// kairos-operator's own examples (tests/kairos/), sent as they are: the API server takes them
/// with slipway's CRD and fills in kairos-operator's defaults. A dry run (without a selector they
/// would run on every node of the shared cluster), so no controller and nothing to share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kairos_examples_apply_unchanged() {
    let Some(s) = Scene::new("nodeop-examples").crds(&CRDS).start().await else {
        return;
    };
    let resource = ApiResource::erase::<NodeOp>(&());
    for file in [
        "kairos.io_v1alpha1_nodeop.yaml",
        "nodeop-generateName-demo.yaml",
    ] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/kairos")
            .join(file);
        let text = std::fs::read_to_string(&path).expect("example");
        let obj: DynamicObject = serde_saphyr::from_str(&text).expect("YAML");
        let ns = obj.metadata.namespace.clone();
        let api = Api::<DynamicObject>::namespaced_with(
            s.client.clone(),
            ns.as_deref().unwrap_or(s.ns.name()),
            &resource,
        );
        let params = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let created = api
            .create(&params, &obj)
            .await
            .unwrap_or_else(|e| panic!("{file} is refused: {e}"));
        let spec = &created.data["spec"];
        assert_eq!(spec["hostMountPath"], "/host", "{file}: {spec}");
        assert_eq!(spec["concurrency"], 0, "{file}");
        assert_eq!(spec["stopOnFailure"], false, "{file}");
        assert_eq!(spec["rebootOnSuccess"], false, "{file}");
        let op: NodeOp = serde_json::from_value(serde_json::to_value(&created).expect("JSON"))
            .expect("slipway reads what the API server made of it");
        assert_eq!(
            op.spec.command,
            obj.data["spec"]["command"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        );
        if file == "kairos.io_v1alpha1_nodeop.yaml" {
            let drain = &spec["drainOptions"];
            assert_eq!(drain["ignoreDaemonSets"], true, "{drain}");
            assert_eq!(drain["timeoutSeconds"], 300, "{drain}");
        }
    }
}

/// Three nodes, `concurrency: 1` and `stopOnFailure`: the first node's Job fails, no other node
/// starts, and the status says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_that_fails_starts_no_other_node_and_says_so() {
    let Some((s, controller)) = nodeop_scene("nodeop-canary", 3).await else {
        return;
    };
    let ops = &ops(&s);
    let nodes: Vec<&String> = s.nodes.iter().collect();
    let failing = fail_pods_on(&s.ns, "canary", nodes[0]);
    let spec = json!({"concurrency": 1, "stopOnFailure": true, "backoffLimit": 0, "cordon": true});
    ops.create(&PostParams::default(), &nodeop("canary", &nodes, spec))
        .await
        .expect("create the NodeOp");
    let failed = wait_nodeop(ops, "canary", "Failed", Duration::from_secs(90), |op| {
        phase(op) == "Failed"
    })
    .await;
    // Every reconcile the failure led to is done: a wrong start would show now.
    controller.settled(KIND).await;
    failing.abort();
    let op = ops.get("canary").await.expect("get");
    let status = op.status.clone().unwrap_or_default();
    assert_eq!(
        status.node_statuses.keys().collect::<Vec<_>>(),
        [nodes[0]],
        "{}",
        status_of(&failed)
    );
    let first = &status.node_statuses[nodes[0]];
    assert_eq!(first.phase, "Failed");
    assert!(
        first
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with("Job failed")),
        "{first:?}"
    );
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains(&format!(
            "2 nodes ({}, {}) waits: node {} failed and spec.stopOnFailure is set",
            nodes[1], nodes[2], nodes[0]
        )),
        "{message}"
    );
    assert_eq!(jobs_of(&s.ns, "canary").await.len(), 1);
    assert!(
        unschedulable(&s.client, nodes[0]).await,
        "a failed node stays cordoned without uncordonOnFailure"
    );
    let reasons = s.ns.event_reasons().await;
    assert!(reasons.iter().any(|r| r == "NodeFailed"), "{reasons:?}");
    // What GitOps tools and scripts read: the failed NodeOp is Stalled, not Ready.
    s.kubectl_wait("nodeop/canary", "condition=Stalled", 30)
        .await;
    s.kubectl_wait("nodeop/canary", "condition=Ready=False", 30)
        .await;
    support::delete_and_wait_gone(ops, "canary").await;
    assert!(
        !unschedulable(&s.client, nodes[0]).await,
        "deleting the NodeOp gives its cordon back"
    );
}

/// `concurrency: 0`: every selected node's Job is created before any of them completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_zero_runs_every_node_at_once() {
    let Some((s, _controller)) = nodeop_scene("nodeop-all", 3).await else {
        return;
    };
    let ops = &ops(&s);
    let nodes: Vec<&String> = s.nodes.iter().collect();
    ops.create(&PostParams::default(), &nodeop("all", &nodes, json!({})))
        .await
        .expect("create the NodeOp");
    let done = wait_nodeop(ops, "all", "Completed", Duration::from_secs(90), |op| {
        phase(op) == "Completed"
    })
    .await;
    let status = done.status.clone().unwrap_or_default();
    assert_eq!(status.node_statuses.len(), 3, "{}", status_of(&done));
    for st in status.node_statuses.values() {
        assert_eq!(
            (st.phase.as_str(), st.message.as_deref()),
            ("Completed", Some("Job completed successfully"))
        );
    }
    let jobs = jobs_of(&s.ns, "all").await;
    assert_eq!(jobs.len(), 3);
    let created = jobs
        .iter()
        .filter_map(|j| j.metadata.creation_timestamp.clone())
        .map(|t| t.0)
        .max();
    let completed = jobs
        .iter()
        .filter_map(|j| j.status.as_ref()?.completion_time.clone())
        .map(|t| t.0)
        .min();
    assert!(
        created.is_some() && created <= completed,
        "the last Job was created at {created:?}, the first completed at {completed:?}"
    );
    // The Job as kairos-operator makes it: the command, privileged, the host's root at /host.
    let pod = jobs[0]
        .spec
        .clone()
        .unwrap_or_default()
        .template
        .spec
        .unwrap_or_default();
    let c = &pod.containers[0];
    assert_eq!(
        c.security_context.as_ref().and_then(|s| s.privileged),
        Some(true)
    );
    assert_eq!(
        c.volume_mounts.as_ref().map(|m| m[0].mount_path.as_str()),
        Some("/host")
    );
    assert!(
        nodes
            .iter()
            .any(|n| pod.node_name.as_deref() == Some(n.as_str()))
    );
    support::delete_and_wait_gone(ops, "all").await;
}

/// A node a NodeMaintenance holds: the NodeOp waits, saying who holds it, and runs once the
/// maintenance is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_in_maintenance_waits_then_runs() {
    let Some((s, controller)) = nodeop_scene("nodeop-maint", 1).await else {
        return;
    };
    let ops = &ops(&s);
    let node = &s.nodes[0];
    let nms = Api::<NodeMaintenance>::all(s.client.clone());
    let nm_name = s.name("disk");
    let nm: NodeMaintenance = serde_json::from_value(json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
        "kind": "NodeMaintenance",
        "metadata": {"name": nm_name},
        "spec": {"nodeName": node, "reason": "e2e"},
    }))
    .expect("a NodeMaintenance");
    nms.create(&PostParams::default(), &nm)
        .await
        .expect("create the NodeMaintenance");
    support::wait_for(
        "the maintenance to drain",
        Duration::from_secs(60),
        || async {
            let nm = nms.get(&nm_name).await?;
            match nm.status.and_then(|s| s.phase) {
                Some(MaintenancePhase::Succeeded) => Ok(()),
                p => bail!("phase {p:?}"),
            }
        },
    )
    .await;
    ops.create(
        &PostParams::default(),
        &nodeop("held", &[node], json!({"cordon": true})),
    )
    .await
    .expect("create the NodeOp");
    let holder = format!("node {node} waits: nodemaintenance {nm_name} holds the node");
    wait_nodeop(
        ops,
        "held",
        "waiting for the maintenance",
        Duration::from_secs(60),
        |op| {
            op.status
                .as_ref()
                .and_then(|s| s.message.as_deref())
                .is_some_and(|m| m.contains(&holder))
        },
    )
    .await;
    // The status says the decision; once every reconcile it led to is done, no Job was made.
    controller.settled(KIND).await;
    assert!(jobs_of(&s.ns, "held").await.is_empty(), "no Job while held");
    // `slipway explain` says the same, decided by the controller's own code.
    let out = support::process::slipway()
        .args([
            "explain",
            &format!("nodeop/{}/held", s.ns.name()),
            "-o",
            "json",
        ])
        .env("KUBECONFIG", s.cluster.kubeconfig_path())
        .output()
        .expect("run slipway explain");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e: Value = serde_json::from_slice(&out.stdout).expect("explain's JSON");
    assert_eq!(e["object"], format!("nodeop/{}/held", s.ns.name()), "{e}");
    assert_eq!(e["waiting"][0]["reason"], "NodeBusy", "{e}");
    assert_eq!(e["waiting"][0]["nodes"][0], node.as_str(), "{e}");
    let reasons = s.ns.event_reasons().await;
    assert!(reasons.iter().any(|r| r == "Waiting"), "{reasons:?}");
    nms.delete(&nm_name, &DeleteParams::default())
        .await
        .expect("delete the NodeMaintenance");
    let done = wait_nodeop(ops, "held", "Completed", Duration::from_secs(90), |op| {
        phase(op) == "Completed"
    })
    .await;
    assert!(done.status.and_then(|s| s.message).is_none());
    assert!(
        !unschedulable(&s.client, node).await,
        "the NodeOp's cordon goes after its Job, the maintenance's with it"
    );
    support::delete_and_wait_gone(ops, "held").await;
}

/// The controller is killed once the first node's Job exists; a new one finishes the NodeOp with
/// one Job per node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_mid_operation_resumes_without_a_second_job() {
    let Some((s, mut controller)) = nodeop_scene("nodeop-resume", 3).await else {
        return;
    };
    let ops = &ops(&s);
    let nodes: Vec<&String> = s.nodes.iter().collect();
    let spec = json!({"concurrency": 1, "cordon": true});
    ops.create(&PostParams::default(), &nodeop("resume", &nodes, spec))
        .await
        .expect("create the NodeOp");
    support::wait_for("the first Job", Duration::from_secs(60), || async {
        match jobs_of(&s.ns, "resume").await.len() {
            0 => bail!("no Job yet"),
            _ => Ok(()),
        }
    })
    .await;
    controller.restart();
    let done = wait_nodeop(ops, "resume", "Completed", Duration::from_secs(90), |op| {
        phase(op) == "Completed"
    })
    .await;
    assert_eq!(done.status.map(|s| s.node_statuses.len()), Some(3));
    let mut on: Vec<String> = jobs_of(&s.ns, "resume")
        .await
        .iter()
        .filter_map(|j| j.metadata.labels.as_ref()?.get("kairos.io/node").cloned())
        .collect();
    on.sort();
    let mut want: Vec<String> = nodes.iter().map(|n| n.to_string()).collect();
    want.sort();
    assert_eq!(on, want, "one Job per node");
    for n in &nodes {
        assert!(!unschedulable(&s.client, n).await, "{n} uncordoned");
    }
    support::delete_and_wait_gone(ops, "resume").await;
}

/// A NodeOpUpgrade of two nodes, one at a time: its NodeOp starts with the control-plane node,
/// reboots it through the sentinel, and starts the other only once the first runs a new boot ID
/// and is Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_goes_control_plane_first_and_reboots_each_node_through_the_hand_off() {
    let Some((s, controller)) = nodeop_scene("nodeop-upgrade", 2).await else {
        return;
    };
    let ops = &ops(&s);
    let (worker, server) = (&s.nodes[0], &s.nodes[1]);
    let role = json!({"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}});
    Api::<Node>::all(s.client.clone())
        .patch(server, &PatchParams::default(), &Patch::Merge(&role))
        .await
        .expect("label the control-plane node");
    let upgrades = s.ns.api::<NodeOpUpgrade>();
    let u: NodeOpUpgrade = serde_json::from_value(json!({
        "apiVersion": "operator.kairos.io/v1alpha1",
        "kind": "NodeOpUpgrade",
        "metadata": {"name": "to-v3"},
        "spec": {
            "image": "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3s",
            "concurrency": 1,
            "stopOnFailure": true,
            // kwok runs no preflight container: the version check is skipped.
            "force": true,
            "nodeSelector": {"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [worker, server]}
            ]},
        },
    }))
    .expect("a NodeOpUpgrade");
    upgrades
        .create(&PostParams::default(), &u)
        .await
        .expect("create the NodeOpUpgrade");
    for (node, other) in [(server, worker), (worker, server)] {
        let rebooting = |op: &NodeOp| {
            op.status
                .as_ref()
                .and_then(|s| s.node_statuses.get(node.as_str()))
                .is_some_and(|n| {
                    n.reboot_status.as_deref() == Some("pending") && n.phase == "Completed"
                })
        };
        let op = wait_nodeop(
            ops,
            "to-v3",
            &format!("{node} to wait for its reboot"),
            Duration::from_secs(90),
            rebooting,
        )
        .await;
        let statuses = op.status.clone().unwrap_or_default().node_statuses;
        if node == server {
            assert!(
                !statuses.contains_key(other.as_str()),
                "the worker waits: {statuses:?}"
            );
        }
        assert!(
            unschedulable(&s.client, node).await,
            "{node} stays cordoned until it is back"
        );
        let job = statuses[node.as_str()].job_name.clone().unwrap_or_default();
        // The reboot pod is made once the Job succeeded, in the reconcile that says so.
        let pods = support::wait_for(
            &format!("{node}'s reboot pod"),
            Duration::from_secs(30),
            || async {
                let pods =
                    s.ns.api::<Pod>()
                        .list(
                            &ListParams::default()
                                .labels(&format!("kairos.io/reboot=true,kairos.io/node={node}")),
                        )
                        .await?
                        .items;
                match pods.is_empty() {
                    true => Err(anyhow!("none yet")),
                    false => Ok(pods),
                }
            },
        )
        .await;
        let script = pods
            .first()
            .and_then(|p| p.spec.as_ref()?.containers[0].command.clone())
            .unwrap_or_default()
            .join(" ");
        assert!(
            script.contains(&format!("/sentinel/{job}")),
            "the reboot pod waits for {job}: {script}"
        );
        // The node has not rebooted yet: every reconcile since says so.
        controller.settled(KIND).await;
        let still = ops.get("to-v3").await.expect("get");
        assert!(
            rebooting(&still),
            "no reboot seen yet: {}",
            status_of(&still)
        );
        support::simulate_reboot(&s.client, node).await;
        let back = |op: &NodeOp| {
            op.status
                .as_ref()
                .and_then(|s| s.node_statuses.get(node.as_str()))
                .is_some_and(|n| n.reboot_status.as_deref() == Some("completed"))
        };
        wait_nodeop(
            ops,
            "to-v3",
            &format!("{node} back"),
            Duration::from_secs(60),
            back,
        )
        .await;
        assert!(
            !unschedulable(&s.client, node).await,
            "{node} uncordoned once back"
        );
    }
    let done = support::wait_for(
        "the upgrade to complete",
        Duration::from_secs(60),
        || async {
            let u = upgrades.get("to-v3").await?;
            match u.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some("Completed") => Ok(u),
                _ => bail!("status: {}", serde_json::to_string(&u.status)?),
            }
        },
    )
    .await;
    let status = done.status.unwrap_or_default();
    assert_eq!(status.node_op_name.as_deref(), Some("to-v3"));
    assert_eq!(
        status.message.as_deref(),
        Some("Upgrade operation completed successfully")
    );
    assert_eq!(status.node_statuses.len(), 2);
    let nodeop = ops.get("to-v3").await.expect("the upgrade's NodeOp");
    let command = nodeop.spec.command.join(" ");
    assert!(
        command.contains("kairos-agent upgrade --source dir:/ --exclude-path '/etc/hostname'"),
        "{command}"
    );
    s.kubectl_wait("nodeopupgrade/to-v3", "condition=Ready", 30)
        .await;
    s.kubectl_wait("nodeop/to-v3", "condition=Ready", 30).await;
    upgrades
        .delete("to-v3", &DeleteParams::default())
        .await
        .expect("delete the upgrade");
}

/// A Plan `os` over `nodes`, two at a time, whose Job pods stay Running until the scene releases
/// them ([`support::release_held_pod`]).
fn held_plan(nodes: &[&String]) -> Plan {
    let nodes: Vec<&str> = nodes.iter().map(|n| n.as_str()).collect();
    serde_saphyr::from_str(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: os
  labels:
    {hold}: "true"
spec:
  concurrency: 2
  version: "2026-11-25"
  nodeSelector:
    matchExpressions:
    - {{key: kubernetes.io/hostname, operator: In, values: [{nodes}]}}
  upgrade:
    image: debian:bookworm-slim
"#,
        hold = support::HOLD_LABEL,
        nodes = nodes.join(", "),
    ))
    .expect("the Plan parses")
}

async fn applying(plans: &Api<Plan>) -> anyhow::Result<Vec<String>> {
    let p = plans.get("os").await?;
    Ok(p.status.map(|s| s.applying).unwrap_or_default())
}

/// Until the Plan `os` is applying exactly `busy`.
async fn wait_applying_only(plans: &Api<Plan>, busy: &str) {
    support::wait_for(
        &format!("the Plan to start {busy} only"),
        Duration::from_secs(60),
        || async {
            match applying(plans).await? {
                a if a == [busy.to_string()] => Ok(()),
                a => bail!("applying {a:?}"),
            }
        },
    )
    .await;
}

/// One budget: a node a NodeOp holds (waiting for its reboot) is left out by a Plan, which says
/// so and takes it once the NodeOp is done with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_leaves_out_a_node_a_nodeop_holds() {
    let Some((s, _controller)) = nodeop_scene("nodeop-held", 2).await else {
        return;
    };
    let ops = &ops(&s);
    let (held, busy) = (&s.nodes[0], &s.nodes[1]);
    ops.create(
        &PostParams::default(),
        &nodeop("hold", &[held], json!({"rebootOnSuccess": true})),
    )
    .await
    .expect("create the NodeOp");
    let rebooting = |op: &NodeOp| {
        op.status
            .as_ref()
            .and_then(|s| s.node_statuses.get(held.as_str()))
            .is_some_and(|n| {
                n.reboot_status.as_deref() == Some("pending") && n.phase == "Completed"
            })
    };
    wait_nodeop(
        ops,
        "hold",
        "its node to wait for the reboot",
        Duration::from_secs(60),
        rebooting,
    )
    .await;
    let plans = s.ns.api::<Plan>();
    plans
        .create(&PostParams::default(), &held_plan(&[held, busy]))
        .await
        .expect("create the Plan");
    wait_applying_only(&plans, busy).await;
    support::release_held_pod(&s.client, s.ns.name(), busy).await;
    let waiting = support::wait_for(
        "the Plan to wait for the held node",
        Duration::from_secs(60),
        || async {
            let p = plans.get("os").await?;
            match support::plans::condition_reason(&p, "Complete").as_deref() {
                Some("WaitingForNodes") => Ok(p),
                other => bail!("Complete: {other:?}"),
            }
        },
    )
    .await;
    let message = support::plans::complete_message(&waiting);
    assert!(
        message.contains(&format!("node {held} is held by")),
        "{message}"
    );
    assert!(
        !applying(&plans).await.unwrap_or_default().contains(held),
        "the Plan leaves the held node"
    );
    support::simulate_reboot(&s.client, held).await;
    wait_nodeop(ops, "hold", "Completed", Duration::from_secs(60), |op| {
        phase(op) == "Completed"
    })
    .await;
    support::release_held_pod(&s.client, s.ns.name(), held).await;
    support::plans::wait_complete(&plans, "os", Duration::from_secs(120)).await;
    support::delete_and_wait_gone(ops, "hold").await;
    plans
        .delete("os", &DeleteParams::default())
        .await
        .expect("delete the Plan");
}

/// One budget, the other way round: a NodeOp waits for the node a Plan upgrades, naming the
/// Plan, and runs once the Plan is done with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodeop_waits_for_the_node_a_plan_upgrades() {
    let Some((s, _controller)) = nodeop_scene("nodeop-after", 1).await else {
        return;
    };
    let ops = &ops(&s);
    let busy = &s.nodes[0];
    let plans = s.ns.api::<Plan>();
    plans
        .create(&PostParams::default(), &held_plan(&[busy]))
        .await
        .expect("create the Plan");
    // The upgrade step lasts until the scene releases its pod.
    wait_applying_only(&plans, busy).await;
    ops.create(&PostParams::default(), &nodeop("after", &[busy], json!({})))
        .await
        .expect("create the NodeOp");
    let waits = format!("node {busy} waits: plan {}/os holds the node", s.ns.name());
    wait_nodeop(
        ops,
        "after",
        "waiting for the Plan",
        Duration::from_secs(30),
        |op| {
            op.status
                .as_ref()
                .and_then(|s| s.message.as_deref())
                .is_some_and(|m| m.contains(&waits))
        },
    )
    .await;
    assert!(jobs_of(&s.ns, "after").await.is_empty());
    support::release_held_pod(&s.client, s.ns.name(), busy).await;
    support::plans::wait_complete(&plans, "os", Duration::from_secs(120)).await;
    wait_nodeop(ops, "after", "Completed", Duration::from_secs(90), |op| {
        phase(op) == "Completed"
    })
    .await;
    support::delete_and_wait_gone(ops, "after").await;
    plans
        .delete("os", &DeleteParams::default())
        .await
        .expect("delete the Plan");
}

/// A node kairos-operator cordoned for a NodeOp before slipway took over
/// (`operator.kairos.io/cordoned-by`): the NodeOp runs on it and gives the cordon back, with the
/// record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordon_kairos_operator_made_is_given_back_by_its_nodeop() {
    let Some((s, _controller)) = nodeop_scene("nodeop-kairos", 1).await else {
        return;
    };
    let ops = &ops(&s);
    let node = &s.nodes[0];
    let record = format!("{}/takeover@0b5c2a64-kairos", s.ns.name());
    let patch = json!({
        "metadata": {"annotations": {"operator.kairos.io/cordoned-by": record}},
        "spec": {"unschedulable": true},
    });
    Api::<Node>::all(s.client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("cordon as kairos-operator did");
    let nodes = [node];
    ops.create(
        &PostParams::default(),
        &nodeop("takeover", &nodes, json!({"cordon": true})),
    )
    .await
    .expect("create the NodeOp");
    wait_nodeop(
        ops,
        "takeover",
        "Completed",
        Duration::from_secs(90),
        |op| phase(op) == "Completed",
    )
    .await;
    support::wait_for("the cordon given back", Duration::from_secs(30), || async {
        let n = Api::<Node>::all(s.client.clone()).get(node).await?;
        let cordoned = n.spec.and_then(|s| s.unschedulable).unwrap_or(false);
        let annotations = n.metadata.annotations.unwrap_or_default();
        let records: Vec<&String> = (annotations.keys())
            .filter(|k| k.ends_with("/cordoned-by"))
            .collect();
        match (cordoned, records.is_empty()) {
            (false, true) => Ok(()),
            state => bail!("cordoned {}, records {records:?}", state.0),
        }
    })
    .await;
    support::delete_and_wait_gone(ops, "takeover").await;
}
