//! End-to-end scenes of NodeMaintenance (medik8s node-maintenance-operator's API) on the local
//! cluster, with real Deployments, PodDisruptionBudgets and the real Eviction API; kwok plays the
//! kubelet (it runs the pods and deletes terminating ones).
//!
//! The scenes: a drain that succeeds and a deletion that restores the node; a PodDisruptionBudget
//! holding the drain; a second maintenance of a node; a drain timeout beside an admin's cordon; a
//! controller killed mid-drain; a Plan leaving out a node in maintenance, and a maintenance waiting
//! for a node's upgrade step (one budget); a maintenance of a missing node; a Lease namespace that
//! does not exist; `spec.nodeName` immutable.
//!
//! NodeMaintenances are cluster-scoped and a maintenance-enabled controller reconciles all of
//! them, so every scene here is in the [`CLUSTER_WIDE`](crate::support::scene::CLUSTER_WIDE)
//! group: one at a time, each with a controller of its own.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::TestNamespace;
use crate::support::controller::ControllerProcess;
use crate::support::scene::Scene;
use anyhow::{anyhow, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use slipway::maintenance::api::{MaintenancePhase, NodeMaintenance};
use slipway::plan::api::Plan;

use crate::support::LEASES;

/// The controller's setting that turns NodeMaintenances on.
const MAINTENANCE_ON: [(&str, &str); 1] = [("SLIPWAY_MAINTENANCE", "true")];

/// A scene of `nodes` nodes, with the NodeMaintenance CRD and the Lease namespace.
async fn bare_scene(name: &str, nodes: usize) -> Option<Scene> {
    // NodeMaintenances are cluster-wide: a maintenance-enabled controller reconciles them all.
    let s = Scene::new(name)
        .nodes(nodes)
        .cluster_wide()
        .crds(&["nodemaintenances.nodemaintenance.medik8s.io"])
        .start()
        .await?;
    support::ensure_lease_namespace(&s.client).await;
    Some(s)
}

/// [`bare_scene`] and its maintenance-enabled controller.
async fn maintenance_scene(name: &str, nodes: usize) -> Option<(Scene, ControllerProcess)> {
    let s = bare_scene(name, nodes).await?;
    let controller = ControllerProcess::start(&s.cluster, s.ns.name(), &MAINTENANCE_ON);
    Some((s, controller))
}

fn nms(s: &Scene) -> Api<NodeMaintenance> {
    Api::all(s.client.clone())
}

/// Creates the scene's NodeMaintenance `<namespace>-<what>` of `node`; its name.
async fn create_nm(s: &Scene, what: &str, node: &str, timeout: Option<&str>) -> String {
    let name = s.name(what);
    nms(s)
        .create(&PostParams::default(), &maintenance(&name, node, timeout))
        .await
        .expect("create NodeMaintenance");
    name
}

fn maintenance(name: &str, node: &str, timeout: Option<&str>) -> NodeMaintenance {
    let mut spec = json!({ "nodeName": node, "reason": "e2e" });
    if let Some(t) = timeout {
        spec["drainTimeout"] = json!(t);
    }
    serde_json::from_value(json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
        "kind": "NodeMaintenance",
        "metadata": { "name": name },
        "spec": spec,
    }))
    .expect("a NodeMaintenance")
}

/// A Deployment of `replicas` pods pinned to `node`, labelled `app=<name>`.
fn deployment(name: &str, node: &str, replicas: i32) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": { "app": name } },
                "spec": {
                    "nodeSelector": { "kubernetes.io/hostname": node },
                    "containers": [{ "name": "app", "image": "nginx:1.27" }],
                    "terminationGracePeriodSeconds": 1,
                },
            },
        },
    }))
    .expect("a Deployment")
}

fn pdb(name: &str, min_available: i32) -> PodDisruptionBudget {
    serde_json::from_value(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": { "name": name },
        "spec": {
            "minAvailable": min_available,
            "selector": { "matchLabels": { "app": name } },
        },
    }))
    .expect("a PodDisruptionBudget")
}

async fn running_pods_on(ns: &TestNamespace, node: &str) -> Vec<String> {
    ns.api::<Pod>()
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| p.metadata.name)
        .collect()
}

async fn wait_running(ns: &TestNamespace, node: &str, n: usize) {
    support::wait_for(
        &format!("{n} running pods on {node}"),
        Duration::from_secs(60),
        || async {
            let pods = running_pods_on(ns, node).await;
            if pods.len() >= n {
                Ok(())
            } else {
                bail!("running: {pods:?}")
            }
        },
    )
    .await
}

async fn wait_phase(
    api: &Api<NodeMaintenance>,
    name: &str,
    phase: MaintenancePhase,
    timeout: Duration,
) -> NodeMaintenance {
    support::wait_for(&format!("{name} to be {phase:?}"), timeout, || async {
        let nm = api.get(name).await?;
        match nm.status.as_ref().and_then(|s| s.phase) {
            Some(p) if p == phase => Ok(nm),
            _ => Err(anyhow!("status: {}", serde_json::to_string(&nm.status)?)),
        }
    })
    .await
}

fn drained_message(nm: &NodeMaintenance) -> String {
    nm.status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.type_ == "Drained")
        .map(|c| format!("{}: {}", c.reason, c.message))
        .unwrap_or_default()
}

#[derive(Debug)]
struct NodeState {
    unschedulable: bool,
    drain_taint: bool,
    excluded: bool,
}

async fn node_state(client: &kube::Client, node: &str) -> NodeState {
    let n = Api::<Node>::all(client.clone())
        .get(node)
        .await
        .expect("get node");
    let spec = n.spec.unwrap_or_default();
    NodeState {
        unschedulable: spec.unschedulable.unwrap_or(false),
        drain_taint: spec
            .taints
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == "medik8s.io/drain"),
        excluded: n
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("remediation.medik8s.io/exclude-from-remediation"),
    }
}

/// A Deployment `name` of one pod on `node`, held by a PodDisruptionBudget `name` that allows no
/// eviction; once the pod runs.
async fn one_pod_held_by_a_budget(s: &Scene, name: &str, node: &str) {
    let pp = PostParams::default();
    s.ns.api::<Deployment>()
        .create(&pp, &deployment(name, node, 1))
        .await
        .expect("create deployment");
    s.ns.api::<PodDisruptionBudget>()
        .create(&pp, &pdb(name, 1))
        .await
        .expect("create pdb");
    wait_running(&s.ns, node, 1).await;
}

/// A drain that succeeds, and a deletion that restores the node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_succeeds_and_deleting_it_restores_the_node() {
    let Some((s, _controller)) = maintenance_scene("nm-drain", 1).await else {
        return;
    };
    let (client, ns, nms) = (&s.client, &s.ns, &nms(&s));
    let node = &s.nodes[0];
    ns.api::<Deployment>()
        .create(&PostParams::default(), &deployment("web", node, 2))
        .await
        .expect("create deployment");
    wait_running(ns, node, 2).await;
    let name = create_nm(&s, "drain", node, None).await;
    let done = wait_phase(
        nms,
        &name,
        MaintenancePhase::Succeeded,
        Duration::from_secs(60),
    )
    .await;
    let status = done.status.clone().unwrap_or_default();
    let owners = done.metadata.owner_references.clone().unwrap_or_default();
    assert!(
        owners
            .iter()
            .any(|o| o.kind == "Node" && &o.name == node && o.controller.is_none()),
        "{owners:?}"
    );
    assert_eq!(status.drain_progress, Some(100));
    assert_eq!(status.eviction_pods, Some(2), "{status:?}");
    s.kubectl_wait(&format!("nodemaintenance/{name}"), "condition=Ready", 30)
        .await;
    assert!(running_pods_on(ns, node).await.is_empty());
    let st = node_state(client, node).await;
    assert!(st.unschedulable && st.drain_taint && st.excluded);
    let lease = Api::<Lease>::namespaced(client.clone(), LEASES)
        .get(&format!("node-{node}"))
        .await
        .expect("the node's lease");
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("node-maintenance")
    );
    support::delete_and_wait_gone(nms, &name).await;
    let st = node_state(client, node).await;
    assert!(!st.unschedulable && !st.drain_taint && !st.excluded);
    assert!(
        Api::<Lease>::namespaced(client.clone(), LEASES)
            .get_opt(&format!("node-{node}"))
            .await
            .expect("get lease")
            .is_none(),
        "the lease is released"
    );
}

/// A NodeMaintenance node-maintenance-operator started (its node cordoned, tainted and labelled,
/// nothing recorded, its status NMO's), taken over by slipway: deleting it gives the node back
/// whole, as NMO would have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintenance_nmo_started_gives_its_node_back_when_deleted() {
    let Some(s) = bare_scene("nm-takeover", 1).await else {
        return;
    };
    let (client, nms) = (&s.client, &nms(&s));
    let node = &s.nodes[0];
    let as_nmo = json!({
        "metadata": {"labels": {"remediation.medik8s.io/exclude-from-remediation": "true"}},
        "spec": {"unschedulable": true,
                 "taints": [{"key": "medik8s.io/drain", "effect": "NoSchedule"}]},
    });
    Api::<Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&as_nmo))
        .await
        .expect("the node as NMO leaves it");
    let name = create_nm(&s, "takeover", node, None).await;
    let running = json!({"status": {"phase": "Running", "drainProgress": 0}});
    nms.patch_status(&name, &PatchParams::default(), &Patch::Merge(&running))
        .await
        .expect("NMO's status");
    let _controller = ControllerProcess::start(&s.cluster, s.ns.name(), &MAINTENANCE_ON);
    wait_phase(
        nms,
        &name,
        MaintenancePhase::Succeeded,
        Duration::from_secs(60),
    )
    .await;
    // The status is written before the effects that take the node (a controller killed in
    // between finds the node in it): the cordon's record may land a moment after `Succeeded`.
    let me = format!("nodemaintenance/{name}");
    let nodes = Api::<Node>::all(client.clone());
    support::wait_for(
        "slipway's cordon record",
        Duration::from_secs(30),
        || async {
            let node = nodes.get(node).await?;
            let annotations = node.metadata.annotations.unwrap_or_default();
            match annotations.get("slipway.dev/cordoned-by") {
                Some(by) if *by == me => Ok(()),
                other => Err(anyhow!("cordoned-by: {other:?}")),
            }
        },
    )
    .await;
    support::delete_and_wait_gone(nms, &name).await;
    let st = node_state(client, node).await;
    assert!(
        !st.unschedulable && !st.drain_taint && !st.excluded,
        "the node is given back whole: {st:?}"
    );
}

/// A PodDisruptionBudget holds the drain, says so, and then lets it through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_holds_the_drain_says_so_then_lets_it_through() {
    let Some((s, _controller)) = maintenance_scene("nm-pdb", 1).await else {
        return;
    };
    let (ns, nms) = (&s.ns, &nms(&s));
    let node = &s.nodes[0];
    one_pod_held_by_a_budget(&s, "db", node).await;
    let name = create_nm(&s, "pdb", node, None).await;
    let blocked = support::wait_for("the PDB to be named", Duration::from_secs(60), || async {
        let nm = nms.get(&name).await?;
        let message = drained_message(&nm);
        if message.contains("BlockedByDisruptionBudget") && message.contains("db") {
            Ok(nm)
        } else {
            bail!("condition: {message}; status {:?}", nm.status)
        }
    })
    .await;
    let status = blocked.status.clone().unwrap_or_default();
    assert_eq!(status.phase, Some(MaintenancePhase::Running));
    assert_eq!(status.pending_pods.len(), 1, "{status:?}");
    assert_eq!(status.pending_pods_refs[0].namespace, ns.name());
    ns.api::<PodDisruptionBudget>()
        .patch(
            "db",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "minAvailable": 0 } })),
        )
        .await
        .expect("relax the pdb");
    let relaxed = std::time::Instant::now();
    wait_phase(
        nms,
        &name,
        MaintenancePhase::Succeeded,
        Duration::from_secs(60),
    )
    .await;
    // Printed, not asserted: the watched budget wakes the drain (its backoff was up to a minute).
    eprintln!(
        "drained {:?} after the budget allowed it",
        relaxed.elapsed()
    );
    support::delete_and_wait_gone(nms, &name).await;
}

/// A second maintenance for a node one already holds is reported, and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_maintenance_of_a_node_is_reported_and_changes_nothing() {
    let Some((s, _controller)) = maintenance_scene("nm-again", 1).await else {
        return;
    };
    let (client, nms) = (&s.client, &nms(&s));
    let node = &s.nodes[0];
    let first = create_nm(&s, "first", node, None).await;
    wait_phase(
        nms,
        &first,
        MaintenancePhase::Succeeded,
        Duration::from_secs(60),
    )
    .await;
    let again = create_nm(&s, "again", node, None).await;
    let dup = wait_phase(
        nms,
        &again,
        MaintenancePhase::Failed,
        Duration::from_secs(30),
    )
    .await;
    assert!(
        drained_message(&dup).contains(&format!("already exists: {first}")),
        "{}",
        drained_message(&dup)
    );
    support::delete_and_wait_gone(nms, &again).await;
    assert!(
        node_state(client, node).await.drain_taint,
        "the first one still holds it"
    );
    support::delete_and_wait_gone(nms, &first).await;
}

/// How long the drain of a pod that may not be evicted is given: it times out.
const DRAIN_TIMEOUT: &str = "2s";

/// A drain timeout fails clearly and keeps the node cordoned; an admin's cordon stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_timeout_fails_and_an_admins_cordon_stays() {
    let Some((s, _controller)) = maintenance_scene("nm-timeout", 1).await else {
        return;
    };
    let (client, nms) = (&s.client, &nms(&s));
    let node = &s.nodes[0];
    one_pod_held_by_a_budget(&s, "cache", node).await;
    // An admin cordons the node.
    support::set_unschedulable(client, node, true).await;
    let name = create_nm(&s, "timeout", node, Some(DRAIN_TIMEOUT)).await;
    let failed = wait_phase(
        nms,
        &name,
        MaintenancePhase::Failed,
        Duration::from_secs(60),
    )
    .await;
    s.kubectl_wait(&format!("nodemaintenance/{name}"), "condition=Stalled", 30)
        .await;
    let error = failed
        .status
        .as_ref()
        .and_then(|s| s.last_error.clone())
        .unwrap_or_default();
    assert!(
        error.starts_with(&format!("the drain did not finish within {DRAIN_TIMEOUT}"))
            && error.contains("cache-"),
        "{error}"
    );
    let st = node_state(client, node).await;
    assert!(st.unschedulable && st.drain_taint);
    support::delete_and_wait_gone(nms, &name).await;
    let st = node_state(client, node).await;
    assert!(st.unschedulable, "the admin's cordon stays");
    assert!(!st.drain_taint && !st.excluded);
}

/// A controller killed mid-drain resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_mid_drain_resumes() {
    let Some((s, mut controller)) = maintenance_scene("nm-crash", 1).await else {
        return;
    };
    let nms = &nms(&s);
    let node = &s.nodes[0];
    one_pod_held_by_a_budget(&s, "queue", node).await;
    let name = create_nm(&s, "crash", node, None).await;
    support::wait_for("the drain to start", Duration::from_secs(60), || async {
        let nm = nms.get(&name).await?;
        if drained_message(&nm).contains("BlockedByDisruptionBudget") {
            Ok(())
        } else {
            bail!("{}", drained_message(&nm))
        }
    })
    .await;
    controller.kill();
    s.ns.api::<PodDisruptionBudget>()
        .patch(
            "queue",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "minAvailable": 0 } })),
        )
        .await
        .expect("relax the pdb");
    controller.spawn();
    wait_phase(
        nms,
        &name,
        MaintenancePhase::Succeeded,
        Duration::from_secs(90),
    )
    .await;
    support::delete_and_wait_gone(nms, &name).await;
}

/// A Plan `os` over `nodes` whose Job pods stay Running until the scene releases them
/// ([`support::release_held_pod`]).
fn held_plan(s: &Scene, nodes: &[&str]) -> Plan {
    let (pool, nodes) = (&s.pool, nodes.join(", "));
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
  version: "2026-11-22"
  nodeSelector:
    matchExpressions:
    - {{key: slipway.test/pool, operator: In, values: ["{pool}"]}}
    - {{key: kubernetes.io/hostname, operator: In, values: [{nodes}]}}
  upgrade:
    image: debian:bookworm-slim
"#,
        hold = support::HOLD_LABEL,
    ))
    .expect("test plan parses")
}

/// Until the Plan `os` is applying exactly `nodes`.
async fn wait_applying(plans: &Api<Plan>, nodes: &[&str]) {
    support::wait_for(
        &format!("the Plan to be applying {nodes:?}"),
        Duration::from_secs(60),
        || async {
            let p = plans.get("os").await?;
            let applying = p
                .status
                .as_ref()
                .map(|s| s.applying.clone())
                .unwrap_or_default();
            if applying == nodes {
                Ok(())
            } else {
                bail!("applying {applying:?}")
            }
        },
    )
    .await;
}

/// One budget: with `held` in maintenance, a Plan over `busy` and `held` starts `busy` only, says
/// it waits for `held`, and upgrades it once the maintenance is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_leaves_out_a_node_in_maintenance() {
    let Some((s, _controller)) = maintenance_scene("nm-plan", 2).await else {
        return;
    };
    let (client, ns, nms) = (&s.client, &s.ns, &nms(&s));
    let (busy, held) = (s.nodes[0].as_str(), s.nodes[1].as_str());
    let name = create_nm(&s, "held", held, None).await;
    wait_phase(
        nms,
        &name,
        MaintenancePhase::Succeeded,
        Duration::from_secs(60),
    )
    .await;
    let plans = ns.api::<Plan>();
    plans
        .create(&PostParams::default(), &held_plan(&s, &[busy, held]))
        .await
        .expect("create plan");
    wait_applying(&plans, &[busy]).await;
    support::release_held_pod(client, ns.name(), busy).await;
    let p = support::wait_for(
        "the Plan to wait for the node in maintenance",
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
    let complete: BTreeMap<String, String> = p
        .status
        .iter()
        .flat_map(|s| &s.conditions)
        .filter(|c| c.type_ == "Complete")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        complete
            .get("WaitingForNodes")
            .is_some_and(|m| m.contains(held)),
        "{complete:?}"
    );
    support::delete_and_wait_gone(nms, &name).await;
    support::release_held_pod(client, ns.name(), held).await;
    support::plans::wait_complete(&plans, "os", Duration::from_secs(90)).await;
}

/// One budget: a maintenance of a node a Plan is upgrading waits for the upgrade step and names
/// the Plan, without touching the node; then drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintenance_waits_for_the_nodes_upgrade_step() {
    let Some((s, _controller)) = maintenance_scene("nm-busy", 1).await else {
        return;
    };
    let (client, ns, nms) = (&s.client, &s.ns, &nms(&s));
    let busy = s.nodes[0].as_str();
    let plans = ns.api::<Plan>();
    plans
        .create(&PostParams::default(), &held_plan(&s, &[busy]))
        .await
        .expect("create plan");
    // The upgrade step lasts until the scene releases its pod.
    wait_applying(&plans, &[busy]).await;
    let name = create_nm(&s, "busy", busy, None).await;
    let waiting = support::wait_for(
        "the maintenance to wait",
        Duration::from_secs(30),
        || async {
            let nm = nms.get(&name).await?;
            let message = drained_message(&nm);
            if message.contains("WaitingForNode") {
                Ok(message)
            } else {
                bail!("{message}")
            }
        },
    )
    .await;
    assert!(
        waiting.contains(&format!("plan {}/os", ns.name())),
        "{waiting}"
    );
    assert!(
        !node_state(client, busy).await.unschedulable,
        "not touched while upgrading"
    );
    support::release_held_pod(client, ns.name(), busy).await;
    // The Plan lets go of the node when its Job ends, and that wakes the maintenance (the
    // shell's unit tests prove the wake-up; here it is measured, not timed: about a second on an
    // idle machine, where its recheck while it waits is 10 s).
    wait_applying(&plans, &[]).await;
    let let_go = std::time::Instant::now();
    support::wait_for(
        "the maintenance to take the node the Plan let go of",
        Duration::from_secs(60),
        || async {
            let node = node_state(client, busy).await;
            if node.unschedulable && node.drain_taint {
                Ok(())
            } else {
                bail!("not taken")
            }
        },
    )
    .await;
    eprintln!("took the node {:?} after the Plan let go", let_go.elapsed());
    wait_phase(
        nms,
        &name,
        MaintenancePhase::Succeeded,
        Duration::from_secs(60),
    )
    .await;
    support::plans::wait_complete(&plans, "os", Duration::from_secs(60)).await;
    support::delete_and_wait_gone(nms, &name).await;
}

/// A maintenance of a node that does not exist fails, saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintenance_of_a_missing_node_fails_saying_so() {
    let Some((s, _controller)) = maintenance_scene("nm-ghost", 0).await else {
        return;
    };
    let nms = &nms(&s);
    let name = create_nm(&s, "ghost", "no-such-node", None).await;
    let ghost = wait_phase(
        nms,
        &name,
        MaintenancePhase::Failed,
        Duration::from_secs(30),
    )
    .await;
    assert!(drained_message(&ghost).contains("no node with name no-such-node"));
    support::delete_and_wait_gone(nms, &name).await;
}

/// A controller whose Lease namespace does not exist (`--maintenance` without the component's
/// `medik8s-leases` namespace) says so in the maintenance's status and in an Event, and leaves the
/// node untouched (the Lease comes before the cordon).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_lease_namespace_is_told_on_the_maintenance() {
    let Some(s) = bare_scene("nm-leases", 1).await else {
        return;
    };
    let (client, nms) = (&s.client, &nms(&s));
    let node = &s.nodes[0];
    let missing = s.name("no-leases");
    let _controller = ControllerProcess::start(
        &s.cluster,
        s.ns.name(),
        &[
            ("SLIPWAY_MAINTENANCE", "true"),
            ("SLIPWAY_MAINTENANCE_LEASE_NAMESPACE", &missing),
        ],
    );
    let name = create_nm(&s, "no-leases", node, None).await;
    let told = support::wait_for(
        "lastError to name the Lease",
        Duration::from_secs(60),
        || async {
            let nm = nms.get(&name).await?;
            match nm.status.and_then(|st| st.last_error) {
                Some(e) if e.contains("cannot take the node's lease") && e.contains(&missing) => {
                    Ok(e)
                }
                other => bail!("lastError {other:?}"),
            }
        },
    )
    .await;
    assert!(told.contains("not found"), "{told}");
    support::wait_for(
        "a ReconcileError event",
        Duration::from_secs(60),
        || async {
            let events = Api::<k8s_openapi::api::events::v1::Event>::all(client.clone())
                .list(&ListParams::default())
                .await?;
            events
                .items
                .iter()
                .find(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str())
                        && e.reason.as_deref() == Some("ReconcileError")
                        && e.type_.as_deref() == Some("Warning")
                })
                .map(|_| ())
                .ok_or_else(|| anyhow!("no ReconcileError event on {name} yet"))
        },
    )
    .await;
    let state = node_state(client, node).await;
    assert!(
        !state.unschedulable && !state.drain_taint,
        "no cordon or taint without the Lease"
    );
    support::delete_and_wait_gone(nms, &name).await;
}

/// `spec.nodeName` is immutable (CEL): the API server refuses the change, no controller needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_name_is_immutable() {
    // No controller; but a maintenance-enabled controller of another scene would act on this
    // NodeMaintenance.
    let Some(s) = bare_scene("nm-immutable", 0).await else {
        return;
    };
    let nms = &nms(&s);
    let (here, there) = (s.name("here"), s.name("there"));
    let name = create_nm(&s, "immutable", &here, None).await;
    let refused = nms
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "nodeName": there } })),
        )
        .await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("spec.nodeName is immutable")),
        "{refused:?}"
    );
    support::delete_and_wait_gone(nms, &name).await;
}

/// The controller's pod template as deploy/ ships it: its labels and tolerations, pinned to
/// `node`, running a stand-in image (the controller itself runs as this scene's process).
fn controller_like(node: &str) -> Deployment {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/deployment.yaml"
    ))
    .expect("read deploy/deployment.yaml");
    let shipped: serde_json::Value = serde_saphyr::from_str(&text).expect("parse the Deployment");
    let template = &shipped["spec"]["template"];
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": "controller" },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": template["metadata"]["labels"].clone() },
            "template": {
                "metadata": { "labels": template["metadata"]["labels"].clone() },
                "spec": {
                    "nodeSelector": { "kubernetes.io/hostname": node },
                    "tolerations": template["spec"]["tolerations"].clone(),
                    "containers": [{ "name": "controller", "image": "slipway:e2e" }],
                    "terminationGracePeriodSeconds": 1,
                },
            },
        },
    }))
    .expect("a Deployment")
}

/// The pods of the scene's Deployment `controller`: name, node, and whether each runs.
async fn controller_pods(ns: &TestNamespace) -> Vec<(String, Option<String>, bool)> {
    let label = format!(
        "{}=system-upgrade-controller",
        slipway::common::labels::CONTROLLER
    );
    ns.api::<Pod>()
        .list(&ListParams::default().labels(&label))
        .await
        .expect("list the controller's pods")
        .items
        .into_iter()
        .map(|p| {
            let running = p.metadata.deletion_timestamp.is_none()
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let node = p.spec.and_then(|s| s.node_name);
            (p.metadata.name.unwrap_or_default(), node, running)
        })
        .collect()
}

/// The node the controller runs on, maintained (on a cluster with one control-plane node, the
/// only node it may run on): its pod is not evicted, and a new one (the old one lost, the
/// controller upgraded) goes back to the cordoned, tainted node, so the maintenance can end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintenance_of_the_controllers_own_node_keeps_the_controller_there() {
    let Some((s, _controller)) = maintenance_scene("nm-self", 1).await else {
        return;
    };
    let (client, ns, nms) = (&s.client, &s.ns, &nms(&s));
    let node = &s.nodes[0];
    let pp = PostParams::default();
    ns.api::<Deployment>()
        .create(&pp, &controller_like(node))
        .await
        .expect("create the controller's Deployment");
    ns.api::<Deployment>()
        .create(&pp, &deployment("web", node, 1))
        .await
        .expect("create deployment");
    wait_running(ns, node, 2).await;
    let before = controller_pods(ns).await;
    let name = create_nm(&s, "self", node, Some("2m")).await;
    let done = wait_phase(
        nms,
        &name,
        MaintenancePhase::Succeeded,
        Duration::from_secs(60),
    )
    .await;
    let status = done.status.clone().unwrap_or_default();
    assert_eq!(status.eviction_pods, Some(1), "only web: {status:?}");
    assert_eq!(
        controller_pods(ns).await,
        before,
        "the controller's pod is neither evicted nor replaced"
    );
    let st = node_state(client, node).await;
    assert!(st.unschedulable && st.drain_taint, "{st:?}");

    // Its pod lost while the node is cordoned and tainted: the new one runs there again.
    ns.api::<Pod>()
        .delete(&before[0].0, &Default::default())
        .await
        .expect("delete the controller's pod");
    support::wait_for(
        "a new controller pod running on the maintained node",
        Duration::from_secs(60),
        || async {
            let pods = controller_pods(ns).await;
            match &pods[..] {
                [(name, Some(on), true)] if name != &before[0].0 && on == node => Ok(()),
                _ => Err(anyhow!("controller pods: {pods:?}")),
            }
        },
    )
    .await;
    support::delete_and_wait_gone(nms, &name).await;
    let st = node_state(client, node).await;
    assert!(!st.unschedulable && !st.drain_taint, "{st:?}");
}
