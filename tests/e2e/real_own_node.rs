//! The controller's own node, on real nodes: the installs' cluster has one control-plane node,
//! where the controller runs as a real pod (deploy/ with the maintenance and reboot-policy
//! components, applied as a user applies an overlay), and a worker: kubeadm's default shape, a
//! single k3s server with agents. A NodeMaintenance of the control-plane node drains it and
//! leaves the controller there; a RebootPolicy over both nodes reboots each, the controller's own
//! node too, with a second replica on the worker (labelled a control-plane node for that part):
//! each reboot takes one replica down with its node, the other leads on (the Lease moves), and
//! neither is ever evicted. Then the worker goes (powered off, its Node deleted) and the cluster has one node, as a
//! single k3s server or a one-node kubeadm cluster has: a Plan with a drain and a reboot of it (a
//! k3s server's Plan), then a RebootPolicy, each drain a workload that has nowhere else to go,
//! reboot the node and give it back. Had slipway's drain evicted the controller, its replacement
//! could run nowhere (the only node is cordoned) and the node would stay cordoned for good.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::bail;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use slipway::maintenance::api::{MaintenancePhase, NodeMaintenance};
use slipway::plan::api::Plan;
use slipway::reboot_policy::api::RebootPolicy;

use crate::real::{controller_pod_runs_on_the_server, node_state};
use crate::support::install::{self, Install};
use crate::support::plans::{complete_message, plan_from_yaml, wait_complete};
use crate::support::real::{CONTROL_PLANE, INSTALL_WORKER};
use crate::support::scene::Scene;

/// The taint NodeMaintenance puts on its node, as medik8s's operator does.
const DRAIN_TAINT: &str = "medik8s.io/drain";
/// The controller's Deployment and Lease (deploy/).
const CONTROLLER: &str = "system-upgrade-controller";
/// The label the controller's Deployment requires of its node.
const CONTROL_PLANE_ROLE: &str = "node-role.kubernetes.io/control-plane";
/// The label of the controller's pods.
const CONTROLLER_PODS: &str = "upgrade.cattle.io/controller=system-upgrade-controller";

/// Whether the node is cordoned or carries the maintenance's taint, read now.
async fn taken(client: &Client, name: &str) -> bool {
    let node = Api::<Node>::all(client.clone())
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get node {name}: {e}"));
    let spec = node.spec.unwrap_or_default();
    spec.unschedulable.unwrap_or(false)
        || (spec.taints.into_iter().flatten()).any(|t| t.key == DRAIN_TAINT)
}

/// The controller's pod `uid`: still there, not being deleted, on the control-plane node.
async fn same_controller(client: &Client, pod: &Pod) {
    let now = Api::<Pod>::namespaced(client.clone(), install::NS)
        .get_opt(&pod.name_any())
        .await
        .expect("get the controller's pod");
    let now = now.unwrap_or_else(|| panic!("the controller's pod {} is gone", pod.name_any()));
    assert_eq!(now.uid(), pod.uid(), "the same controller pod");
    assert!(
        now.metadata.deletion_timestamp.is_none(),
        "the controller's pod is being deleted (evicted)"
    );
    assert_eq!(
        now.spec.and_then(|s| s.node_name).as_deref(),
        Some(CONTROL_PLANE)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_controllers_own_node_is_maintained_and_rebooted_and_given_back() {
    let Some(s) = Scene::new("own-node-real")
        .own_cluster(support::real::INSTALLS)
        .real_nodes()
        .start()
        .await
    else {
        return;
    };
    support::install::wait_for_earlier_removal(&s.cluster).await;
    let started = Instant::now();
    let client = &s.client;
    let mut install = Install::new(&s.cluster).await;
    let overlay = install::overlay(&[
        "deploy/components/maintenance",
        "deploy/components/reboot-policy",
    ]);
    let manifest = s
        .cluster
        .kubectl(&["kustomize", &overlay.display().to_string()])
        .await
        .expect("kubectl kustomize the overlay");
    let _ = std::fs::remove_dir_all(&overlay);
    install
        .apply_air_gapped(&s.cluster, &manifest, "overlay with two components")
        .await;
    support::ensure_lease_namespace(client).await;
    let controller = controller_pod_runs_on_the_server(&s).await;

    // A NodeMaintenance of the controller's node: drained, the controller left where it is.
    let nms = Api::<NodeMaintenance>::all(client.clone());
    let nm_name = s.name("nm");
    let nm: NodeMaintenance = serde_json::from_value(json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
        "kind": "NodeMaintenance",
        "metadata": {"name": nm_name},
        "spec": {"nodeName": CONTROL_PLANE, "reason": "the controller's own node"},
    }))
    .expect("a NodeMaintenance");
    nms.create(&PostParams::default(), &nm)
        .await
        .expect("create the NodeMaintenance");
    let done = support::wait_for(
        "the maintenance of the controller's node",
        Duration::from_secs(600),
        || async {
            let status = nms.get(&nm_name).await?.status.unwrap_or_default();
            match status.phase {
                Some(MaintenancePhase::Succeeded) => Ok(status),
                _ => bail!("status: {}", serde_json::to_string(&status)?),
            }
        },
    )
    .await;
    // Drained means taken: cordoned and tainted before the status said so.
    assert!(taken(client, CONTROL_PLANE).await, "{done:?}");
    same_controller(client, &controller).await;
    nms.delete(&nm_name, &DeleteParams::default())
        .await
        .expect("end the maintenance");
    support::wait_for(
        "the controller's node given back",
        Duration::from_secs(300),
        || async {
            let gone = nms.get_opt(&nm_name).await?.is_none();
            match gone && !taken(client, CONTROL_PLANE).await {
                true => Ok(()),
                false => bail!("maintenance left: {gone:?}"),
            }
        },
    )
    .await;
    let maintained = started.elapsed();

    // A RebootPolicy over both nodes, each asking: the controller's node reboots too, with a
    // second replica on the worker. Each reboot takes a replica down; the leader's hands over.
    let second = second_replica_on_the_worker(&s).await;
    let nodes = [CONTROL_PLANE.to_string(), INSTALL_WORKER.to_string()];
    let rebooting = Instant::now();
    let (back_at, leaders) = reboot_by_a_policy(&s, &nodes, &[&controller, &second]).await;
    let policy_took = rebooting.elapsed();
    assert!(
        leaders.len() >= 2,
        "the Lease moved when its leader's node rebooted: {leaders:?}"
    );
    back_to_one_replica(&s, &second).await;

    // From here the cluster has one node, as a single k3s server or a one-node kubeadm cluster
    // has: the worker is powered off and its Node deleted (the scene's clean-up starts it again
    // when a later scene wants it), and what a drain evicts has nowhere else to go.
    support::real::kill(&s.cluster, INSTALL_WORKER);
    let node_api = Api::<Node>::all(client.clone());
    node_api
        .delete(INSTALL_WORKER, &DeleteParams::default())
        .await
        .expect("delete the worker's Node");
    support::wait_for(
        "a cluster of one node",
        Duration::from_secs(120),
        || async {
            let names: Vec<String> = (node_api.list(&ListParams::default()).await?.items.iter())
                .map(|n| n.name_any())
                .collect();
            match names == [CONTROL_PLANE] {
                true => Ok(()),
                false => bail!("nodes: {names:?}"),
            }
        },
    )
    .await;
    let lone = lone_pod(&s, None).await;

    // A Plan of the controller's node alone, with a drain and a reboot, as a k3s server's Plan:
    // its Job drains the node (the controller's pod left, by SUC's label) and its reboot takes the
    // controller down with the node; back, the controller finishes the Plan and gives the node back.
    let plans = Api::<Plan>::namespaced(client.clone(), install::NS);
    let plan_name = s.name("plan");
    let boot = node_state(client, CONTROL_PLANE).await.0;
    let plan = plan_from_yaml(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: {plan_name}
spec:
  concurrency: 1
  version: v1
  serviceAccountName: system-upgrade
  nodeSelector:
    matchLabels:
      kubernetes.io/hostname: {CONTROL_PLANE}
  tolerations:
  - {{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}}
  drain:
    force: true
  upgrade:
    image: busybox:1.37
    command: [sh, -c, "true"]
  reboot:
    timeout: 10m
"#
    ));
    let planning = Instant::now();
    plans
        .create(&PostParams::default(), &plan)
        .await
        .expect("create the Plan");
    let done = wait_complete(&plans, &plan_name, Duration::from_secs(1200)).await;
    let (after, ready, _) = node_state(client, CONTROL_PLANE).await;
    assert_ne!(after, boot, "the Plan rebooted the controller's node");
    assert!(ready, "{}", complete_message(&done));
    assert!(
        !taken(client, CONTROL_PLANE).await,
        "the controller's node is given back: {}",
        complete_message(&done)
    );
    let back = controller_pod_runs_on_the_server(&s).await;
    assert_eq!(
        back.uid(),
        controller.uid(),
        "the same controller pod, never evicted"
    );
    let _ = plans.delete(&plan_name, &DeleteParams::default()).await;
    let planned = planning.elapsed();
    // The Plan's drain evicted the workload; its replacement waited for the node and runs there.
    let lone = lone_pod(&s, Some(&lone)).await;

    // A RebootPolicy over the one node: drained (the workload again), rebooted, given back.
    let alone = Instant::now();
    reboot_by_a_policy(&s, &[CONTROL_PLANE.to_string()], &[&controller]).await;
    lone_pod(&s, Some(&lone)).await;
    eprintln!(
        "real: the controller's own node maintained in {maintained:?}; both nodes rebooted by the policy under two replicas, back at {back_at:?}, the Lease held by {leaders:?} (policy done in {policy_took:?}); on one node, the Plan's drain and reboot in {planned:?}, a policy's in {:?}; in {:?}",
        alone.elapsed(),
        started.elapsed()
    );
}

/// The name of the one Ready pod of the workload `lone` on the control-plane node, other than
/// `evicted` (the pod a drain since evicted); applies the workload first when there is none.
async fn lone_pod(s: &Scene, evicted: Option<&str>) -> String {
    if evicted.is_none() {
        let placement = format!(
            "      nodeSelector: {{kubernetes.io/hostname: {CONTROL_PLANE}}}
      tolerations:
      - {{key: node-role.kubernetes.io/control-plane, operator: Exists, effect: NoSchedule}}"
        );
        s.cluster
            .kubectl_stdin(
                &["apply", "-f", "-"],
                Some(&support::real::sleepers(
                    s.ns.name(),
                    "lone",
                    1,
                    &placement,
                    None,
                )),
            )
            .await
            .expect("apply the workload");
    }
    support::wait_for(
        "the workload's pod Ready on the one node",
        Duration::from_secs(600),
        || async {
            let pods =
                s.ns.api::<Pod>()
                    .list(&ListParams::default().labels("app=lone"))
                    .await?;
            let serving = (pods.items.iter()).find(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && Some(p.name_any().as_str()) != evicted
                    && ready(p)
            });
            match serving {
                Some(p) => Ok(p.name_any()),
                None => bail!(
                    "pods: {:?}",
                    (pods.items.iter())
                        .map(|p| (
                            p.name_any(),
                            p.status.as_ref().and_then(|s| s.phase.clone())
                        ))
                        .collect::<Vec<_>>()
                ),
            }
        },
    )
    .await
}

/// Asks each of `nodes` to reboot and has a RebootPolicy over them reboot one at a time (never
/// two down or cordoned at once); returns when each was back, from the policy's creation, and
/// the controller's Lease holders in the order they held it. Each of the `controllers` (the
/// first on the control-plane node) stays the same pod through its node's reboot.
async fn reboot_by_a_policy(
    s: &Scene,
    nodes: &[String],
    controllers: &[&Pod],
) -> (BTreeMap<String, Duration>, Vec<String>) {
    let client = &s.client;
    let mut before = BTreeMap::new();
    for n in nodes {
        before.insert(n.clone(), node_state(client, n).await.0);
        support::ask_reboot(client, n).await;
    }
    let policies = Api::<RebootPolicy>::all(client.clone());
    let name = s.name(&format!("rbp{}", nodes.len()));
    let policy: RebootPolicy = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "RebootPolicy",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]},
            "concurrency": 1,
            "drain": {"timeout": "5m"},
            "timeout": "10m",
        },
    }))
    .expect("a RebootPolicy");
    let rebooting = Instant::now();
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("create the RebootPolicy");
    let mut back_at: BTreeMap<String, Duration> = BTreeMap::new();
    let leases = Api::<Lease>::namespaced(client.clone(), install::NS);
    let mut leaders: Vec<String> = Vec::new();
    while back_at.len() < nodes.len() {
        let holder = (leases.get_opt(CONTROLLER).await.ok().flatten())
            .and_then(|l| l.spec?.holder_identity)
            .filter(|h| !h.is_empty());
        if let Some(holder) = holder
            && leaders.last() != Some(&holder)
        {
            eprintln!(
                "real: the controller's Lease held by {holder} at {:?}",
                rebooting.elapsed()
            );
            leaders.push(holder);
        }
        let (mut down, mut cordoned) = (Vec::new(), Vec::new());
        for n in nodes {
            let (boot, ready, _) = node_state(client, n).await;
            let held = taken(client, n).await;
            if !ready {
                down.push(n);
            }
            if held {
                cordoned.push(n);
            }
            if boot != before[n] && ready && !held {
                back_at.entry(n.clone()).or_insert(rebooting.elapsed());
            }
        }
        assert!(
            down.len() <= 1 && cordoned.len() <= 1,
            "one node at a time: down {down:?}, cordoned {cordoned:?}"
        );
        let status = (policies.get(&name).await)
            .expect("the RebootPolicy")
            .status
            .unwrap_or_default();
        assert!(
            status.nodes.iter().all(|n| n.phase.as_str() != "Failed"),
            "{}",
            serde_json::to_string(&status).unwrap_or_default()
        );
        assert!(
            rebooting.elapsed() < Duration::from_secs(1200),
            "not all back in time: {back_at:?}; {}",
            serde_json::to_string(&status).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let status = support::wait_for("the policy's records", Duration::from_secs(240), || async {
        let status = policies.get(&name).await?.status.unwrap_or_default();
        match status.nodes.is_empty() && status.rebooted.len() == nodes.len() {
            true => Ok(status),
            false => bail!("status: {}", serde_json::to_string(&status)?),
        }
    })
    .await;
    for n in nodes {
        let (boot, _, _) = node_state(client, n).await;
        let record = (status.rebooted.iter()).find(|r| &r.name == n);
        assert_eq!(
            record.and_then(|r| r.boot_id.as_deref()),
            Some(boot.as_str()),
            "{n} came back with the boot it runs"
        );
    }
    // Each replica went down with its node and came back with it: the same pod, restarted.
    let back = controller_pod_runs_on_the_server(s).await;
    assert_eq!(back.uid(), controllers[0].uid(), "the same controller pod");
    for pod in &controllers[1..] {
        same_pod_ready(client, pod).await;
    }
    let _ = policies.delete(&name, &DeleteParams::default()).await;
    support::wait_for("the policy to go", Duration::from_secs(120), || async {
        match policies.get_opt(&name).await? {
            None => Ok(()),
            Some(_) => bail!("still there"),
        }
    })
    .await;
    (back_at, leaders)
}

/// A second controller replica, on the worker: the worker labelled a control-plane node (the
/// Deployment requires one; its anti-affinity prefers another node than the first replica's),
/// the Deployment scaled to 2. Returns the new pod once Ready (a standby is Ready).
async fn second_replica_on_the_worker(s: &Scene) -> Pod {
    let client = &s.client;
    worker_role(client, Some("")).await;
    scale_controller(client, 2).await;
    let pods = Api::<Pod>::namespaced(client.clone(), install::NS);
    support::wait_for(
        "the second replica Ready on the worker",
        Duration::from_secs(600),
        || async {
            let list = pods
                .list(&ListParams::default().labels(CONTROLLER_PODS))
                .await?;
            let on_worker = (list.items.iter()).find(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(INSTALL_WORKER)
                    && ready(p)
            });
            match on_worker {
                Some(p) => Ok(p.clone()),
                None => bail!(
                    "pods: {:?}",
                    (list.items.iter())
                        .map(|p| (
                            p.name_any(),
                            p.spec.as_ref().and_then(|s| s.node_name.clone())
                        ))
                        .collect::<Vec<_>>()
                ),
            }
        },
    )
    .await
}

/// Back to one replica, the one on the control-plane node: the worker's pod is the one the
/// ReplicaSet removes (its deletion cost is the lowest), then the worker's role label goes.
async fn back_to_one_replica(s: &Scene, second: &Pod) {
    let client = &s.client;
    let pods = Api::<Pod>::namespaced(client.clone(), install::NS);
    pods.patch(
        &second.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
            "controller.kubernetes.io/pod-deletion-cost": "-1000"
        }}})),
    )
    .await
    .expect("the worker's replica goes first");
    scale_controller(client, 1).await;
    support::wait_for(
        "the worker's replica gone",
        Duration::from_secs(300),
        || async {
            match pods.get_opt(&second.name_any()).await? {
                None => Ok(()),
                Some(_) => bail!("still there"),
            }
        },
    )
    .await;
    worker_role(client, None).await;
}

/// Labels the worker a control-plane node (`Some("")`) or takes the label away (`None`).
async fn worker_role(client: &Client, value: Option<&str>) {
    Api::<Node>::all(client.clone())
        .patch(
            INSTALL_WORKER,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {CONTROL_PLANE_ROLE: value}}})),
        )
        .await
        .unwrap_or_else(|e| panic!("the worker's role label to {value:?}: {e}"));
}

async fn scale_controller(client: &Client, replicas: i32) {
    Api::<Deployment>::namespaced(client.clone(), install::NS)
        .patch(
            CONTROLLER,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .unwrap_or_else(|e| panic!("scale the controller to {replicas}: {e}"));
}

fn ready(pod: &Pod) -> bool {
    (pod.status.as_ref().and_then(|st| st.conditions.as_ref()))
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// `pod` is still there, the same pod (never evicted), and Ready again.
async fn same_pod_ready(client: &Client, pod: &Pod) {
    let pods = Api::<Pod>::namespaced(client.clone(), install::NS);
    let name = pod.name_any();
    let now = support::wait_for(
        "the replica Ready again",
        Duration::from_secs(300),
        || async {
            match pods.get_opt(&name).await? {
                Some(p) if ready(&p) => Ok(p),
                other => bail!("{name}: {:?}", other.and_then(|p| p.status)),
            }
        },
    )
    .await;
    assert_eq!(now.uid(), pod.uid(), "the same replica {name}");
    assert!(
        now.metadata.deletion_timestamp.is_none(),
        "the replica {name} is being deleted (evicted)"
    );
}
