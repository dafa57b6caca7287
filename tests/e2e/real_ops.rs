//! slipway's other operations on the shared cluster's real nodes (`real-1`, `real-2`, see
//! [`crate::real`]): a NodeMaintenance draining pods that really run, a kairos NodeOp writing on the
//! host and rebooting it.
//! Each scene has its controller as a process and takes the real nodes alone (group "real nodes")
//! and the cluster-wide kinds alone (its controller reconciles them all).

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use slipway::maintenance::api::{MaintenancePhase, NodeMaintenance};
use slipway::nodeop::api::NodeOp;

use crate::real::node_state;
use crate::support::controller::ControllerProcess;
use crate::support::real::WORKERS;
use crate::support::scene::{POOL_LABEL, Scene};

/// The taint NodeMaintenance puts on its node, as medik8s's operator does.
const DRAIN_TAINT: &str = "medik8s.io/drain";

/// Whether the node is cordoned, and the keys of its taints, read now.
async fn cordon_state(client: &Client, name: &str) -> (bool, Vec<String>) {
    let node = Api::<Node>::all(client.clone())
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get node {name}: {e}"));
    let spec = node.spec.unwrap_or_default();
    let taints = spec.taints.unwrap_or_default().into_iter().map(|t| t.key);
    (spec.unschedulable.unwrap_or(false), taints.collect())
}

/// The Ready pods of `app` in the scene's namespace that are not terminating: name and node.
async fn ready_pods(s: &Scene, app: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let list =
        s.ns.api::<Pod>()
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await?
            .items;
    Ok((list.into_iter())
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            (p.status.as_ref().and_then(|s| s.conditions.as_ref()))
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
        .map(|p| {
            let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
            (p.name_any(), node.unwrap_or_default())
        })
        .collect())
}

/// A NodeMaintenance of a real node where a pod of a Deployment really runs: the node is cordoned
/// and tainted while in maintenance, the pod is evicted and really ends, its replacement runs on
/// the other node, and deleting the NodeMaintenance gives the node back uncordoned and untainted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_maintenance_drains_a_real_node_and_gives_it_back() {
    let Some(s) = Scene::new("real-nm")
        .real_nodes()
        .cluster_wide()
        .crds(&["nodemaintenances.nodemaintenance.medik8s.io"])
        .start()
        .await
    else {
        return;
    };
    support::ensure_lease_namespace(&s.client).await;
    // One pod on each worker: a cordoned or tainted node leaves the spread (`Honor`), so the
    // evicted pod's replacement may run beside the other.
    s.cluster
        .kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&format!(
                r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      nodeSelector: {{{POOL_LABEL}: {pool}}}
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        nodeTaintsPolicy: Honor
        labelSelector: {{matchLabels: {{app: web}}}}
      terminationGracePeriodSeconds: 5
      containers:
      - name: web
        image: busybox:1.37
        command: [sh, -c, "trap 'exit 0' TERM; while true; do sleep 1; done"]
        readinessProbe: {{exec: {{command: ["true"]}}, periodSeconds: 2}}
"#,
                ns = s.ns.name(),
                pool = s.pool,
            )),
        )
        .await
        .expect("apply the workload");
    let (node, other) = (WORKERS[0], WORKERS[1]);
    let first = support::wait_for(
        "a Ready pod on each worker",
        Duration::from_secs(300),
        || async {
            let ready = ready_pods(&s, "web").await?;
            let on = |n: &str| ready.iter().filter(|(_, on)| on.as_str() == n).count();
            match (on(node), on(other)) {
                (1, 1) => Ok(ready),
                _ => bail!("Ready: {ready:?}"),
            }
        },
    )
    .await;
    let evicted = (first.iter())
        .find(|(_, on)| on.as_str() == node)
        .map(|(p, _)| p.clone())
        .expect("the pod on the node");

    let _controller =
        ControllerProcess::start(&s.cluster, s.ns.name(), &[("SLIPWAY_MAINTENANCE", "true")]);
    let started = Instant::now();
    let nms = Api::<NodeMaintenance>::all(s.client.clone());
    let name = s.name("nm");
    let nm: NodeMaintenance = serde_json::from_value(json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
        "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {"nodeName": node, "reason": "real-node e2e", "drainTimeout": "5m"},
    }))
    .expect("a NodeMaintenance");
    nms.create(&PostParams::default(), &nm)
        .await
        .expect("create the NodeMaintenance");
    let done = support::wait_for(
        "the maintenance drained",
        Duration::from_secs(300),
        || async {
            let nm = nms.get(&name).await?;
            let status = nm.status.unwrap_or_default();
            match status.phase {
                Some(MaintenancePhase::Succeeded) => Ok(status),
                Some(MaintenancePhase::Failed) => Ok(status),
                _ => bail!("status: {}", serde_json::to_string(&status)?),
            }
        },
    )
    .await;
    assert_eq!(
        done.phase,
        Some(MaintenancePhase::Succeeded),
        "{}",
        serde_json::to_string(&done).unwrap_or_default()
    );
    let drained = started.elapsed();
    let (cordoned, taints) = cordon_state(&s.client, node).await;
    assert!(cordoned, "{node} is cordoned while in maintenance");
    assert!(
        taints.iter().any(|t| t == DRAIN_TAINT),
        "{node} carries {DRAIN_TAINT} while in maintenance: {taints:?}"
    );
    // The pod really ended (the kubelet stopped its container and it is gone from the API), and
    // its replacement runs on the other node.
    let pods = s.ns.api::<Pod>();
    support::wait_for(
        &format!("{evicted} (on {node}) to end"),
        Duration::from_secs(60),
        || async {
            match pods.get_opt(&evicted).await? {
                None => Ok(()),
                Some(p) => bail!("still there: {:?}", p.status.and_then(|s| s.phase)),
            }
        },
    )
    .await;
    let now = support::wait_for(
        "two Ready pods on the other worker",
        Duration::from_secs(120),
        || async {
            let ready = ready_pods(&s, "web").await?;
            match ready.values().filter(|n| n.as_str() == other).count() {
                2 if ready.len() == 2 => Ok(ready),
                _ => bail!("Ready: {ready:?}"),
            }
        },
    )
    .await;
    assert!(
        !now.contains_key(&evicted),
        "the evicted pod was replaced: {now:?}"
    );
    let (still_cordoned, _) = cordon_state(&s.client, node).await;
    assert!(still_cordoned, "{node} stays cordoned while in maintenance");

    // Deleting the maintenance gives the node back.
    nms.delete(&name, &DeleteParams::default())
        .await
        .expect("delete the NodeMaintenance");
    support::wait_for("the node given back", Duration::from_secs(120), || async {
        let (cordoned, taints) = cordon_state(&s.client, node).await;
        let gone = nms.get_opt(&name).await?.is_none();
        match (cordoned, taints.iter().any(|t| t == DRAIN_TAINT), gone) {
            (false, false, true) => Ok(()),
            state => bail!("cordoned, tainted, maintenance gone: {state:?}"),
        }
    })
    .await;
    eprintln!(
        "real: {node} drained in {drained:?}, given back in {:?}",
        started.elapsed()
    );
}

/// The NodeOp's node status of `node`, as JSON for messages.
fn nodeop_status(op: &NodeOp) -> String {
    serde_json::to_string(&op.status).unwrap_or_default()
}

/// A kairos NodeOp on one real node, with `hostMountPath` and `rebootOnSuccess`: its script writes
/// the host's OS name through the mount, the node reboots for real (a new boot ID) and its kubelet
/// reports the new name, and the NodeOp completes with the reboot done and the node uncordoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodeop_writes_on_the_host_and_reboots_it() {
    let Some(s) = Scene::new("real-nodeop")
        .real_nodes()
        .cluster_wide()
        .crds(&["nodeops.operator.kairos.io"])
        .start()
        .await
    else {
        return;
    };
    let node = WORKERS[1];
    let (before, _, _) = node_state(&s.client, node).await;
    let _controller =
        ControllerProcess::start(&s.cluster, s.ns.name(), &[("SLIPWAY_NODEOPS", "true")]);
    let os = format!("Debian GNU/Linux 12 (nodeop {})", s.ns.name());
    // Through the NodeOp's mount (not the default /host), read by the kubelet when it starts
    // again after the reboot: the node reporting it shows both the write and the reboot.
    let script = format!(
        "rm -f /rootfs/etc/os-release && sed 's|^PRETTY_NAME=.*|PRETTY_NAME=\"{os}\"|' \
         \"$HOST_DIR/usr/lib/os-release\" > /rootfs/etc/os-release && grep PRETTY_NAME /rootfs/etc/os-release"
    );
    let op: NodeOp = serde_json::from_value(json!({
        "apiVersion": "operator.kairos.io/v1alpha1",
        "kind": "NodeOp",
        "metadata": {"name": "os"},
        "spec": {
            "nodeSelector": {"matchLabels": {"kubernetes.io/hostname": node}},
            "image": "busybox:1.37",
            "hostMountPath": "/rootfs",
            "command": ["sh", "-c", script],
            "cordon": true,
            "rebootOnSuccess": true,
            "backoffLimit": 0,
        },
    }))
    .expect("a NodeOp");
    let ops = s.ns.api::<NodeOp>();
    let started = Instant::now();
    ops.create(&PostParams::default(), &op)
        .await
        .expect("create the NodeOp");
    let done = support::wait_for("the NodeOp done", Duration::from_secs(600), || async {
        let op = ops.get("os").await?;
        match op.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Completed" | "Failed") => Ok(op),
            _ => Err(anyhow!("status: {}", nodeop_status(&op))),
        }
    })
    .await;
    let took = started.elapsed();
    let status = done.status.clone().unwrap_or_default();
    assert_eq!(
        status.phase.as_deref(),
        Some("Completed"),
        "{}",
        nodeop_status(&done)
    );
    let of_node = status
        .node_statuses
        .get(node)
        .unwrap_or_else(|| panic!("{node}'s status: {}", nodeop_status(&done)));
    assert_eq!(of_node.phase, "Completed", "{}", nodeop_status(&done));
    assert_eq!(
        of_node.reboot_status.as_deref(),
        Some("completed"),
        "{}",
        nodeop_status(&done)
    );
    let (boot, ready, reported) = node_state(&s.client, node).await;
    assert_ne!(boot, before, "{node} rebooted: a new boot ID");
    assert!(ready, "{node} is Ready");
    assert_eq!(reported, os, "{node} reports the OS name the NodeOp wrote");
    let (cordoned, _) = cordon_state(&s.client, node).await;
    assert!(!cordoned, "{node} is uncordoned once done");
    eprintln!("real: the NodeOp on {node} wrote, rebooted and completed in {took:?}");
}
