//! End-to-end tests of NodeMaintenance (medik8s node-maintenance-operator's API) on the local
//! cluster, with real Deployments, PodDisruptionBudgets and the real Eviction API; kwok plays the
//! kubelet (it runs the pods and deletes terminating ones).
//!
//! NodeMaintenances are cluster-scoped and a maintenance-enabled controller reconciles all of
//! them, so the scenarios run as named steps of one test, one after the other, with one
//! controller.

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::TestNamespace;
use crate::support::controller::ControllerProcess;
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

/// What every step of the scenario works with: the test's namespace and its six nodes (pool
/// `pool`), and the APIs of NodeMaintenances, Deployments and PodDisruptionBudgets.
struct Scene {
    client: kube::Client,
    ns: TestNamespace,
    nodes: Vec<String>,
    pool: String,
    nms: Api<NodeMaintenance>,
    deployments: Api<Deployment>,
    pdbs: Api<PodDisruptionBudget>,
}

impl Scene {
    /// `<namespace>-<what>`: a NodeMaintenance name of this test's own.
    fn nm_name(&self, what: &str) -> String {
        format!("{}-{what}", self.ns.name())
    }
}

/// A Deployment `name` of one pod on `node`, held by a PodDisruptionBudget `name` that allows no
/// eviction; once the pod runs.
async fn one_pod_held_by_a_budget(s: &Scene, name: &str, node: &str) {
    let pp = PostParams::default();
    s.deployments
        .create(&pp, &deployment(name, node, 1))
        .await
        .expect("create deployment");
    s.pdbs.create(&pp, &pdb(name, 1)).await.expect("create pdb");
    wait_running(&s.ns, node, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_maintenance_drains_respects_budgets_and_restores() {
    let Some((cluster, ns, nodes, pool)) = support::setup_pool("maint", 6).await else {
        return;
    };
    let client = ns.client();
    support::ensure_lease_namespace(&client).await;
    let mut controller =
        ControllerProcess::start(&cluster, ns.name(), &[("SLIPWAY_MAINTENANCE", "true")]);
    let s = Scene {
        nms: Api::<NodeMaintenance>::all(client.clone()),
        deployments: ns.api::<Deployment>(),
        pdbs: ns.api::<PodDisruptionBudget>(),
        client,
        ns,
        nodes,
        pool,
    };
    a_drain_succeeds_and_deleting_it_restores_the_node(&s).await;
    a_budget_holds_the_drain_says_so_then_lets_it_through(&s).await;
    a_second_maintenance_of_the_node_is_reported_and_changes_nothing(&s).await;
    a_drain_timeout_fails_and_an_admins_cordon_stays(&s).await;
    a_controller_killed_mid_drain_resumes(&s, &mut controller).await;
    a_plan_and_a_maintenance_share_one_budget(&s).await;
    a_maintenance_of_a_missing_node_fails_saying_so(&s).await;
    node_name_is_immutable(&s).await;
    drop(controller);
    a_missing_lease_namespace_is_told_on_the_maintenance(&s, &cluster).await;
    s.ns.cleanup().await;
}

/// A drain that succeeds, and a deletion that restores the node.
async fn a_drain_succeeds_and_deleting_it_restores_the_node(s: &Scene) {
    let Scene {
        client,
        ns,
        nodes,
        nms,
        deployments,
        ..
    } = s;
    let pp = PostParams::default();
    let node = &nodes[0];
    deployments
        .create(&pp, &deployment("web", node, 2))
        .await
        .expect("create deployment");
    wait_running(ns, node, 2).await;
    nms.create(&pp, &maintenance(&s.nm_name("drain"), node, None))
        .await
        .expect("create NodeMaintenance");
    let done = wait_phase(
        nms,
        &s.nm_name("drain"),
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
    support::delete_and_wait_gone(nms, &s.nm_name("drain")).await;
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

/// A PodDisruptionBudget holds the drain, says so, and then lets it through.
async fn a_budget_holds_the_drain_says_so_then_lets_it_through(s: &Scene) {
    let Scene {
        ns,
        nodes,
        nms,
        pdbs,
        ..
    } = s;
    let pp = PostParams::default();
    let node = &nodes[1];
    one_pod_held_by_a_budget(s, "db", node).await;
    nms.create(&pp, &maintenance(&s.nm_name("pdb"), node, None))
        .await
        .expect("create NodeMaintenance");
    let blocked = support::wait_for("the PDB to be named", Duration::from_secs(60), || async {
        let nm = nms.get(&s.nm_name("pdb")).await?;
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
    pdbs.patch(
        "db",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "minAvailable": 0 } })),
    )
    .await
    .expect("relax the pdb");
    let relaxed = std::time::Instant::now();
    wait_phase(
        nms,
        &s.nm_name("pdb"),
        MaintenancePhase::Succeeded,
        Duration::from_secs(60),
    )
    .await;
    // Printed, not asserted: the watched budget wakes the drain (its backoff was up to a minute).
    eprintln!(
        "drained {:?} after the budget allowed it",
        relaxed.elapsed()
    );
}

/// A second maintenance for the same node is reported, and changes nothing.
async fn a_second_maintenance_of_the_node_is_reported_and_changes_nothing(s: &Scene) {
    let Scene {
        client, nodes, nms, ..
    } = s;
    let pp = PostParams::default();
    // The node of the step before, still held by its maintenance.
    let node = &nodes[1];
    nms.create(&pp, &maintenance(&s.nm_name("again"), node, None))
        .await
        .expect("create NodeMaintenance");
    let dup = wait_phase(
        nms,
        &s.nm_name("again"),
        MaintenancePhase::Failed,
        Duration::from_secs(30),
    )
    .await;
    assert!(
        drained_message(&dup).contains(&format!("already exists: {}", s.nm_name("pdb"))),
        "{}",
        drained_message(&dup)
    );
    support::delete_and_wait_gone(nms, &s.nm_name("again")).await;
    assert!(
        node_state(client, node).await.drain_taint,
        "the first one still holds it"
    );
    support::delete_and_wait_gone(nms, &s.nm_name("pdb")).await;
}

/// A drain timeout fails clearly and keeps the node cordoned; an admin's cordon stays.
async fn a_drain_timeout_fails_and_an_admins_cordon_stays(s: &Scene) {
    let Scene {
        client, nodes, nms, ..
    } = s;
    let pp = PostParams::default();
    let node = &nodes[2];
    one_pod_held_by_a_budget(s, "cache", node).await;
    // An admin cordons the node.
    support::set_unschedulable(client, node, true).await;
    nms.create(&pp, &maintenance(&s.nm_name("timeout"), node, Some("5s")))
        .await
        .expect("create NodeMaintenance");
    let failed = wait_phase(
        nms,
        &s.nm_name("timeout"),
        MaintenancePhase::Failed,
        Duration::from_secs(60),
    )
    .await;
    let error = failed
        .status
        .as_ref()
        .and_then(|s| s.last_error.clone())
        .unwrap_or_default();
    assert!(
        error.starts_with("the drain did not finish within 5s") && error.contains("cache-"),
        "{error}"
    );
    let st = node_state(client, node).await;
    assert!(st.unschedulable && st.drain_taint);
    support::delete_and_wait_gone(nms, &s.nm_name("timeout")).await;
    let st = node_state(client, node).await;
    assert!(st.unschedulable, "the admin's cordon stays");
    assert!(!st.drain_taint && !st.excluded);
}

/// A controller killed mid-drain resumes.
async fn a_controller_killed_mid_drain_resumes(s: &Scene, controller: &mut ControllerProcess) {
    let Scene {
        nodes, nms, pdbs, ..
    } = s;
    let pp = PostParams::default();
    let node = &nodes[3];
    one_pod_held_by_a_budget(s, "queue", node).await;
    nms.create(&pp, &maintenance(&s.nm_name("crash"), node, None))
        .await
        .expect("create NodeMaintenance");
    support::wait_for("the drain to start", Duration::from_secs(60), || async {
        let nm = nms.get(&s.nm_name("crash")).await?;
        if drained_message(&nm).contains("BlockedByDisruptionBudget") {
            Ok(())
        } else {
            bail!("{}", drained_message(&nm))
        }
    })
    .await;
    controller.kill();
    pdbs.patch(
        "queue",
        &PatchParams::default(),
        &Patch::Merge(json!({ "spec": { "minAvailable": 0 } })),
    )
    .await
    .expect("relax the pdb");
    controller.spawn();
    wait_phase(
        nms,
        &s.nm_name("crash"),
        MaintenancePhase::Succeeded,
        Duration::from_secs(90),
    )
    .await;
    support::delete_and_wait_gone(nms, &s.nm_name("crash")).await;
}

/// One budget: a Plan does not start a node in maintenance, and a maintenance waits for
/// the node's current upgrade step.
async fn a_plan_and_a_maintenance_share_one_budget(s: &Scene) {
    let Scene { ns, nodes, nms, .. } = s;
    let (busy, held) = (&nodes[4], &nodes[5]);
    a_plan_leaves_out_the_node_in_maintenance(s, busy, held).await;
    a_maintenance_waits_for_the_nodes_upgrade_step(s, busy, held).await;
    support::delete_and_wait_gone(nms, &s.nm_name("held")).await;
    support::delete_and_wait_gone(nms, &s.nm_name("busy")).await;
    support::plans::wait_complete(&ns.api::<Plan>(), "os", Duration::from_secs(90)).await;
}

/// With `held` in maintenance, a Plan over `busy` and `held` starts `busy` only.
async fn a_plan_leaves_out_the_node_in_maintenance(s: &Scene, busy: &str, held: &str) {
    let Scene { ns, pool, nms, .. } = s;
    let pp = PostParams::default();
    nms.create(&pp, &maintenance(&s.nm_name("held"), held, None))
        .await
        .expect("create NodeMaintenance");
    wait_phase(
        nms,
        &s.nm_name("held"),
        MaintenancePhase::Succeeded,
        Duration::from_secs(60),
    )
    .await;
    let plan: Plan = serde_saphyr::from_str(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: os
  annotations:
    slipway.test/complete-delay: "15s"
spec:
  concurrency: 2
  version: "2026-11-22"
  nodeSelector:
    matchExpressions:
    - {{key: slipway.test/pool, operator: In, values: ["{pool}"]}}
    - {{key: kubernetes.io/hostname, operator: In, values: ["{busy}", "{held}"]}}
  upgrade:
    image: debian:bookworm-slim
"#
    ))
    .expect("test plan parses");
    ns.api::<Plan>()
        .create(&pp, &plan)
        .await
        .expect("create plan");
    support::wait_for(
        "the Plan to start the free node",
        Duration::from_secs(60),
        || async {
            let p = ns.api::<Plan>().get("os").await?;
            let applying = p
                .status
                .as_ref()
                .map(|s| s.applying.clone())
                .unwrap_or_default();
            if applying == [busy.to_string()] {
                Ok(())
            } else {
                bail!("applying {applying:?}")
            }
        },
    )
    .await;
}

/// A maintenance of `busy`, which the Plan is upgrading, waits for the upgrade step and names the
/// Plan; then drains. The Plan says it waits for `held`.
async fn a_maintenance_waits_for_the_nodes_upgrade_step(s: &Scene, busy: &str, held: &str) {
    let Scene {
        client, ns, nms, ..
    } = s;
    let pp = PostParams::default();
    nms.create(&pp, &maintenance(&s.nm_name("busy"), busy, None))
        .await
        .expect("create NodeMaintenance");
    let waiting = support::wait_for(
        "the maintenance to wait",
        Duration::from_secs(30),
        || async {
            let nm = nms.get(&s.nm_name("busy")).await?;
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
    wait_phase(
        nms,
        &s.nm_name("busy"),
        MaintenancePhase::Succeeded,
        Duration::from_secs(90),
    )
    .await;
    let p = ns.api::<Plan>().get("os").await.expect("get plan");
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
}

/// A maintenance of a node that does not exist fails, saying so.
async fn a_maintenance_of_a_missing_node_fails_saying_so(s: &Scene) {
    let Scene { nms, .. } = s;
    let pp = PostParams::default();
    nms.create(&pp, &maintenance(&s.nm_name("ghost"), "no-such-node", None))
        .await
        .expect("create NodeMaintenance");
    let ghost = wait_phase(
        nms,
        &s.nm_name("ghost"),
        MaintenancePhase::Failed,
        Duration::from_secs(30),
    )
    .await;
    assert!(drained_message(&ghost).contains("no node with name no-such-node"));
    support::delete_and_wait_gone(nms, &s.nm_name("ghost")).await;
}

/// A controller whose Lease namespace does not exist (`--maintenance` without the component's
/// `medik8s-leases` namespace) says so in the maintenance's status and in an Event, and leaves the
/// node untouched (the Lease comes before the cordon).
async fn a_missing_lease_namespace_is_told_on_the_maintenance(
    s: &Scene,
    cluster: &support::Cluster,
) {
    let Scene {
        client, nodes, nms, ..
    } = s;
    let missing = format!("{}-no-leases", s.ns.name());
    let _controller = ControllerProcess::start(
        cluster,
        s.ns.name(),
        &[
            ("SLIPWAY_MAINTENANCE", "true"),
            ("SLIPWAY_MAINTENANCE_LEASE_NAMESPACE", &missing),
        ],
    );
    let name = s.nm_name("no-leases");
    nms.create(&PostParams::default(), &maintenance(&name, &nodes[0], None))
        .await
        .expect("create NodeMaintenance");
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
    let state = node_state(client, &nodes[0]).await;
    assert!(
        !state.unschedulable && !state.drain_taint,
        "no cordon or taint without the Lease"
    );
    support::delete_and_wait_gone(nms, &name).await;
}

/// nodeName is immutable (CEL).
async fn node_name_is_immutable(s: &Scene) {
    let Scene { nodes, nms, .. } = s;
    let pp = PostParams::default();
    let (busy, held) = (&nodes[4], &nodes[5]);
    nms.create(&pp, &maintenance(&s.nm_name("immutable"), held, None))
        .await
        .expect("create NodeMaintenance");
    let refused = nms
        .patch(
            &s.nm_name("immutable"),
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "nodeName": busy } })),
        )
        .await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("spec.nodeName is immutable")),
        "{refused:?}"
    );
    support::delete_and_wait_gone(nms, &s.nm_name("immutable")).await;
}
