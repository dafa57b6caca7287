//! slipway's other operations on a pair of the shared cluster's real nodes (see [`crate::real`]):
//! a NodeMaintenance draining pods that really run, a kairos NodeOp writing on the host and
//! rebooting it, and the reboot agent's DaemonSet asking a RebootPolicy for real reboots. Each
//! scene has its controller as a process and takes its pair alone and the cluster-wide kinds alone
//! (its controller reconciles them all).

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use slipway::maintenance::api::{MaintenancePhase, NodeMaintenance};
use slipway::nodeop::api::NodeOp;

use crate::real::node_state;
use crate::support::controller::ControllerProcess;
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
    let workers = s.workers();
    support::ensure_lease_namespace(&s.client).await;
    // One pod on each worker: a cordoned or tainted node leaves the spread (`Honor`), so the
    // evicted pod's replacement may run beside the other.
    s.cluster
        .kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&support::real::sleepers(
                s.ns.name(),
                "web",
                2,
                &format!(
                    "      nodeSelector: {{{POOL_LABEL}: {}}}
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        nodeTaintsPolicy: Honor
        labelSelector: {{matchLabels: {{app: web}}}}",
                    s.pool
                ),
                None,
            )),
        )
        .await
        .expect("apply the workload");
    let (node, other) = (workers[0], workers[1]);
    let first = support::wait_for(
        "a Ready pod on each worker",
        Duration::from_secs(600),
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
    // A pod whose PodDisruptionBudget never allows an eviction: past the drain's timeout, the
    // maintenance deletes it (`onDrainTimeout: DeletePods`), naming it in an Event.
    s.cluster
        .kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&support::real::sleepers(
                s.ns.name(),
                "stuck",
                1,
                &format!("      nodeSelector: {{kubernetes.io/hostname: {node}}}"),
                Some(1),
            )),
        )
        .await
        .expect("apply the stuck workload");
    let stuck = support::wait_for(
        "a Ready stuck pod on the node",
        Duration::from_secs(300),
        || async {
            let ready = ready_pods(&s, "stuck").await?;
            match ready.iter().find(|(_, on)| on.as_str() == node) {
                Some((pod, _)) => Ok(pod.clone()),
                None => bail!("Ready: {ready:?}"),
            }
        },
    )
    .await;

    // A CSI volume attached to the node (no CSI driver runs here: the attach-detach controller's
    // detach is the scene deleting the VolumeAttachment): the drain waits for it.
    let attachments = Api::<VolumeAttachment>::all(s.client.clone());
    let attachment = s.name("csi");
    let va: VolumeAttachment = serde_json::from_value(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "VolumeAttachment",
        "metadata": {"name": attachment},
        "spec": {
            "attacher": "e2e.csi.slipway.test",
            "nodeName": node,
            "source": {"persistentVolumeName": "pv-e2e"},
        },
    }))
    .expect("a VolumeAttachment");
    attachments
        .create(&PostParams::default(), &va)
        .await
        .expect("create the VolumeAttachment");
    let _controller =
        ControllerProcess::start(&s.cluster, s.ns.name(), &[("SLIPWAY_MAINTENANCE", "true")]);
    let started = Instant::now();
    let nms = Api::<NodeMaintenance>::all(s.client.clone());
    let name = s.name("nm");
    let nm: NodeMaintenance = serde_json::from_value(json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
        "kind": "NodeMaintenance",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "reason": "real-node e2e",
            "drainTimeout": "30s",
            "disruption": {"onDrainTimeout": "DeletePods", "waitForVolumeDetach": true},
        },
    }))
    .expect("a NodeMaintenance");
    nms.create(&PostParams::default(), &nm)
        .await
        .expect("create the NodeMaintenance");
    let detaching = support::wait_for(
        "the drain to wait for the volume alone",
        Duration::from_secs(600),
        || async {
            let nm = nms.get(&name).await?;
            let status = nm.status.unwrap_or_default();
            let message = (status.conditions.iter())
                .find(|c| c.type_ == "Drained")
                .map(|c| c.message.clone())
                .unwrap_or_default();
            match message.contains(&format!(
                "waiting for volume attachment {attachment} (pv-e2e)"
            )) {
                true => Ok(status),
                false => bail!("{}", serde_json::to_string(&status)?),
            }
        },
    )
    .await;
    assert_eq!(
        detaching.phase,
        Some(MaintenancePhase::Running),
        "pods gone, the volume still attached: not drained yet"
    );
    attachments
        .delete(&attachment, &DeleteParams::default())
        .await
        .expect("detach the volume");
    let done = support::wait_for(
        "the maintenance drained",
        Duration::from_secs(600),
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
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(s.client.clone(), "default")
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .expect("the maintenance's events");
    let deleted: Vec<String> = (events.items.into_iter())
        .filter(|e| e.reason.as_deref() == Some("DrainDeletedPod"))
        .filter_map(|e| e.message)
        .collect();
    assert!(
        matches!(&deleted[..], [one] if one.contains(&stuck) && one.contains(node)),
        "one Event names the pod deleted past the timeout: {deleted:?}"
    );
    assert!(
        !deleted.iter().any(|m| m.contains(&evicted)),
        "the pod that could be evicted was evicted: {deleted:?}"
    );
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
        Duration::from_secs(120),
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
        Duration::from_secs(240),
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
    support::wait_for("the node given back", Duration::from_secs(240), || async {
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
    let workers = s.workers();
    let node = workers[1];
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

// --- reboots the nodes ask for: the agent's DaemonSet and a RebootPolicy ----------------------

/// The port of the stand-in update engine's bus, on the guest's loopback.
const ENGINE_PORT: u16 = 47_001;

/// A bus of the host's for the stand-in update engine, as dbus-daemon's configuration: the
/// agent's pod reaches it through the host's /run (as a Flatcar agent reaches the system bus), the
/// test's engine through `kubectl port-forward` to the host's loopback, which has no Unix
/// credentials (ANONYMOUS). Anyone may own any name and call anything.
const ENGINE_BUS: &str = r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path=/run/slipway-engine/socket</listen>
  <listen>tcp:host=127.0.0.1,port=47001</listen>
  <auth>EXTERNAL</auth>
  <auth>ANONYMOUS</auth>
  <allow_anonymous/>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#;

/// The agent's DaemonSet on the scene's nodes, as deploy/components/reboot-agent has it with its
/// update-engine and host-command options (kured's sentinel as a command run in the host's
/// namespaces, with the host's `test`, which the agent's image does not have), but with a short
/// period, the scene's ServiceAccount, and the engine's bus under the host's /run (mounted
/// read-only already) instead of the system bus; and, on
/// `engine_node`, a DaemonSet running the stand-in engine's bus on the host (the host's own
/// dbus-daemon, in the host's mount namespace; a DaemonSet, so that drains leave it).
fn agent_manifests(s: &Scene, engine_node: &str) -> String {
    let bus = ENGINE_BUS.replace('\n', "\n      ");
    format!(
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: agent, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {agent}}}
rules:
- {{apiGroups: [""], resources: [nodes], verbs: [get, patch]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {agent}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {agent}}}
subjects: [{{kind: ServiceAccount, name: agent, namespace: {ns}}}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: agent, namespace: {ns}}}
spec:
  selector: {{matchLabels: {{app: agent}}}}
  template:
    metadata: {{labels: {{app: agent}}}}
    spec:
      serviceAccountName: agent
      nodeSelector: {{{POOL_LABEL}: {pool}}}
      hostPID: true
      securityContext:
        runAsNonRoot: false
        runAsUser: 0
        runAsGroup: 0
        seccompProfile: {{type: RuntimeDefault}}
      tolerations: [{{operator: Exists}}]
      containers:
      - name: agent
        image: {image}
        imagePullPolicy: IfNotPresent
        args: [agent, --sentinel-file, /host/var/run/reboot-required]
        env:
        - {{name: SLIPWAY_AGENT_SENTINEL_COMMAND, value: "sh -c 'test -e /var/run/reboot-required'"}}
        - {{name: SLIPWAY_AGENT_SENTINEL_IN_HOST, value: "true"}}
        - {{name: SLIPWAY_AGENT_METRICS_ADDR, value: "0.0.0.0:8080"}}
        - {{name: NODE_NAME, valueFrom: {{fieldRef: {{fieldPath: spec.nodeName}}}}}}
        - {{name: SLIPWAY_AGENT_PERIOD, value: 2s}}
        - {{name: SLIPWAY_AGENT_UPDATE_ENGINE, value: "true"}}
        - {{name: SLIPWAY_AGENT_DBUS_ADDRESS, value: "unix:path=/host/var/run/slipway-engine/socket"}}
        securityContext:
          privileged: true
          allowPrivilegeEscalation: true
          readOnlyRootFilesystem: true
          capabilities: {{drop: [ALL]}}
        volumeMounts:
        - {{name: host-run, mountPath: /host/var/run, readOnly: true}}
      volumes:
      - {{name: host-run, hostPath: {{path: /var/run, type: Directory}}}}
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: engine-bus, namespace: {ns}}}
data:
  bus.conf: |
      {bus}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: engine, namespace: {ns}}}
spec:
  selector: {{matchLabels: {{app: engine}}}}
  template:
    metadata: {{labels: {{app: engine}}}}
    spec:
      nodeSelector: {{kubernetes.io/hostname: {engine_node}, {POOL_LABEL}: {pool}}}
      hostNetwork: true
      hostPID: true
      tolerations: [{{operator: Exists}}]
      terminationGracePeriodSeconds: 2
      containers:
      - name: bus
        image: busybox:1.37
        securityContext: {{privileged: true}}
        command:
        - sh
        - -c
        - >-
          mkdir -p /host-run/slipway-engine && rm -f /host-run/slipway-engine/socket &&
          cp /config/bus.conf /host-run/slipway-engine/bus.conf &&
          exec nsenter -t 1 -m -- dbus-daemon --config-file=/run/slipway-engine/bus.conf
          --nofork --nopidfile --nosyslog
        volumeMounts:
        - {{name: host-run, mountPath: /host-run}}
        - {{name: config, mountPath: /config}}
      volumes:
      - {{name: host-run, hostPath: {{path: /run, type: Directory}}}}
      - {{name: config, configMap: {{name: engine-bus}}}}
"#,
        ns = s.ns.name(),
        agent = s.name("agent"),
        pool = s.pool,
        image = support::real::published_image(),
    )
}

/// The agent's request on the node: the boot ID it names, if any.
async fn reboot_request(client: &Client, node: &str) -> Option<String> {
    let node = Api::<Node>::all(client.clone())
        .get(node)
        .await
        .unwrap_or_else(|e| panic!("get node {node}: {e}"));
    node.annotations()
        .get(support::REBOOT_REQUIRED_ANNOTATION)
        .cloned()
}

/// The pods of `app` in the scene's namespace: node, phase and why a container waits.
async fn pod_states(s: &Scene, app: &str) -> anyhow::Result<Vec<String>> {
    let list =
        s.ns.api::<Pod>()
            .list(&ListParams::default().labels(&format!("app={app}")))
            .await?;
    Ok((list.items.iter())
        .map(|p| {
            let node = p.spec.as_ref().and_then(|sp| sp.node_name.clone());
            let status = p.status.as_ref();
            let waiting = (status.and_then(|st| st.container_statuses.as_ref()))
                .into_iter()
                .flatten()
                .filter_map(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
                .collect::<Vec<_>>();
            let phase = status.and_then(|st| st.phase.clone());
            format!("{node:?} {phase:?} {waiting:?}")
        })
        .collect())
}

/// Each agent pod as a failure message needs it: node, phase, its container's restarts, state
/// and last state, and the end of its log (read through the kubelet, so bounded in time).
async fn agents_report(s: &Scene) -> String {
    let pods = match (s.ns.api::<Pod>())
        .list(&ListParams::default().labels("app=agent"))
        .await
    {
        Ok(list) => list.items,
        Err(e) => return format!("cannot list the agents: {e}"),
    };
    let mut report = Vec::new();
    for p in pods {
        let node = p.spec.as_ref().and_then(|sp| sp.node_name.clone());
        let status = p.status.clone().unwrap_or_default();
        let container = (status.container_statuses.unwrap_or_default())
            .into_iter()
            .next()
            .map(|c| {
                format!(
                    "restarts {}, state {}, last state {}",
                    c.restart_count,
                    serde_json::to_string(&c.state).unwrap_or_default(),
                    serde_json::to_string(&c.last_state).unwrap_or_default()
                )
            });
        let params = kube::api::LogParams {
            tail_lines: Some(15),
            timestamps: true,
            ..Default::default()
        };
        let log = match tokio::time::timeout(
            Duration::from_secs(20),
            s.ns.api::<Pod>().logs(&p.name_any(), &params),
        )
        .await
        {
            Ok(Ok(log)) => log,
            Ok(Err(e)) => format!("(no log: {e})"),
            Err(_) => "(no log in 20 s)".into(),
        };
        report.push(format!(
            "{} on {node:?}: {:?}, {container:?}; log:\n{log}",
            p.name_any(),
            status.phase
        ));
    }
    report.join("\n")
}

/// The first Running pod of `app` in the scene's namespace on `node`.
async fn running_pod(s: &Scene, app: &str, node: &str) -> String {
    support::wait_for(
        &format!("{app}'s pod running on {node}"),
        Duration::from_secs(360),
        || async {
            let list =
                s.ns.api::<Pod>()
                    .list(&ListParams::default().labels(&format!("app={app}")))
                    .await?;
            (list.items.iter())
                .find(|p| {
                    p.spec.as_ref().and_then(|sp| sp.node_name.as_deref()) == Some(node)
                        && p.status.as_ref().and_then(|st| st.phase.as_deref()) == Some("Running")
                })
                .map(|p| p.name_any())
                .ok_or_else(|| anyhow!("none yet"))
        },
    )
    .await
}

/// The agent's `slipway_reboot_required` sample on `node`, read from its `/metrics` through a
/// port-forward to its pod.
async fn agent_gauge(s: &Scene, node: &str) -> anyhow::Result<String> {
    use crate::support::process::ChildProcess;
    let pod = running_pod(s, "agent", node).await;
    let local = support::free_port();
    let _forward = ChildProcess::new(
        "kubectl",
        std::env::temp_dir().join(support::unique_name("agent-forward.log")),
    )
    .arg("--kubeconfig")
    .arg(s.cluster.kubeconfig_path().display().to_string())
    .args(["-n", s.ns.name(), "port-forward"])
    .arg(format!("pod/{pod}"))
    .arg(format!("{local}:8080"))
    .started();
    let (code, text) =
        support::wait_for("the agent's port-forward", Duration::from_secs(60), || {
            support::controller::http_get(local, "/metrics")
        })
        .await;
    anyhow::ensure!(code == 200, "GET /metrics answered {code}");
    (text.lines())
        .find(|l| l.starts_with("slipway_reboot_required{"))
        .map(str::to_string)
        .ok_or_else(|| anyhow!("no slipway_reboot_required in\n{text}"))
}

/// Waits until the agent on `node` says `value` (`0` or `1`).
async fn wait_for_gauge(s: &Scene, node: &str, value: &str) {
    let want = format!("slipway_reboot_required{{node=\"{node}\"}} {value}");
    support::wait_for(
        &format!("{node}'s agent to say {value}"),
        Duration::from_secs(300),
        || async {
            let line = agent_gauge(s, node).await?;
            match line == want {
                true => Ok(()),
                false => bail!("{line}"),
            }
        },
    )
    .await;
}

/// The agent's DaemonSet on both real workers: on one, a pod writes kured's sentinel
/// `/var/run/reboot-required` on the host, which the agent's command (`test -e`, run in the host's
/// namespaces) finds and its metric shows; on the other, a stand-in of Flatcar's update engine on
/// a bus of the host's says `UPDATE_STATUS_UPDATED_NEED_REBOOT`. Both nodes ask (the agent's
/// annotation names their boot), and a RebootPolicy reboots them for real one at a time: never
/// both cordoned or down at once, each back with a new boot ID, Ready and uncordoned, and no
/// request left (the sentinel went with the reboot, the engine came back with nothing to say).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_policy_reboots_the_real_nodes_that_ask() {
    use crate::agent::update_engine::{Engine, IDLE, NEED_REBOOT};
    use crate::support::process::ChildProcess;
    use slipway::reboot_policy::api::RebootPolicy;

    let Some(s) = Scene::new("real-rbp")
        .real_nodes()
        .cluster_wide()
        .crds(&["rebootpolicies.slipway.dev"])
        .start()
        .await
    else {
        return;
    };
    let workers = s.workers();
    let (sentinel_node, engine_node) = (workers[0], workers[1]);
    let mut before = BTreeMap::new();
    for n in workers {
        before.insert(n, node_state(&s.client, n).await.0);
    }
    s.cluster
        .kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&agent_manifests(&s, engine_node)),
        )
        .await
        .expect("apply the agent and the engine's bus");

    // kured's sentinel, as unattended-upgrades writes it.
    s.cluster
        .kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&format!(
                r#"
apiVersion: v1
kind: Pod
metadata: {{name: sentinel, namespace: {ns}}}
spec:
  nodeName: {sentinel_node}
  restartPolicy: Never
  containers:
  - name: touch
    image: busybox:1.37
    command: [touch, /host-run/reboot-required]
    volumeMounts: [{{name: run, mountPath: /host-run}}]
  volumes: [{{name: run, hostPath: {{path: /run, type: Directory}}}}]
"#,
                ns = s.ns.name(),
            )),
        )
        .await
        .expect("the sentinel's pod");

    // The stand-in engine, on the bus the engine's pod runs on the other host.
    let engine_pod = running_pod(&s, "engine", engine_node).await;
    let local = support::free_port();
    let _forward = ChildProcess::new(
        "kubectl",
        std::env::temp_dir().join(support::unique_name("engine-forward.log")),
    )
    .arg("--kubeconfig")
    .arg(s.cluster.kubeconfig_path().display().to_string())
    .args(["-n", s.ns.name(), "port-forward"])
    .arg(format!("pod/{engine_pod}"))
    .arg(format!("{local}:{ENGINE_PORT}"))
    .started();
    let address = format!("tcp:host=127.0.0.1,port={local}");
    let engine = support::wait_for(
        "the stand-in engine on the host's bus",
        Duration::from_secs(120),
        || Engine::serve_anonymously(&address, IDLE),
    )
    .await;
    engine.announce(NEED_REBOOT).await;

    // Both ask, each naming its current boot.
    for n in workers {
        support::wait_for(
            &format!("{n}'s agent to ask for a reboot"),
            Duration::from_secs(600),
            || async {
                match reboot_request(&s.client, n).await {
                    Some(boot) if boot == before[n] => Ok(()),
                    other => bail!(
                        "annotation {other:?}, boot {}; agents {:?}",
                        before[n],
                        pod_states(&s, "agent").await?
                    ),
                }
            },
        )
        .await;
    }
    // The request shows in the sentinel node's metric, before the reboot.
    wait_for_gauge(&s, sentinel_node, "1").await;
    let _ =
        s.ns.api::<Pod>()
            .delete("sentinel", &DeleteParams::default())
            .await;

    let _controller = ControllerProcess::start(
        &s.cluster,
        s.ns.name(),
        &[("SLIPWAY_REBOOT_POLICIES", "true")],
    );
    let policies = Api::<RebootPolicy>::all(s.client.clone());
    let name = s.name("rbp");
    let policy: RebootPolicy = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "RebootPolicy",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {POOL_LABEL: s.pool}},
            "concurrency": 1,
            "drain": {"timeout": "5m"},
            "timeout": "10m",
        },
    }))
    .expect("a RebootPolicy");
    let started = Instant::now();
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("create the RebootPolicy");

    // Until both are back: a new boot, Ready, uncordoned and asking no more.
    let mut back_at: BTreeMap<&str, Duration> = BTreeMap::new();
    // Since when a node is back but for its request of an earlier boot, which its agent removes.
    let mut stale_since: BTreeMap<&str, Instant> = BTreeMap::new();
    while back_at.len() < workers.len() {
        let mut down = Vec::new();
        let mut cordoned = Vec::new();
        for n in workers {
            let (boot, ready, _) = node_state(&s.client, n).await;
            let (unschedulable, _) = cordon_state(&s.client, n).await;
            if !ready {
                down.push(n);
            }
            if unschedulable {
                cordoned.push(n);
            }
            let asks = reboot_request(&s.client, n).await;
            if boot != before[n] && ready && !unschedulable && asks.is_none() {
                back_at.entry(n).or_insert_with(|| started.elapsed());
            }
            if boot != before[n] && ready && !unschedulable && asks.is_some() {
                let since = *stale_since.entry(n).or_insert_with(Instant::now);
                assert!(
                    since.elapsed() < Duration::from_secs(300),
                    "{n} is back (boot {boot}) but its agent has not withdrawn the request \
                     {asks:?} in 300 s; agents: {}",
                    agents_report(&s).await
                );
            }
        }
        assert!(
            down.len() <= 1 && cordoned.len() <= 1,
            "one node at a time: down {down:?}, cordoned {cordoned:?}"
        );
        let status = policies
            .get(&name)
            .await
            .expect("the RebootPolicy")
            .status
            .unwrap_or_default();
        assert!(
            status.nodes.iter().all(|n| n.phase.as_str() != "Failed"),
            "{}",
            serde_json::to_string(&status).unwrap_or_default()
        );
        assert!(
            started.elapsed() < Duration::from_secs(1200),
            "not both back in time: {back_at:?}; {}; agents: {}",
            serde_json::to_string(&status).unwrap_or_default(),
            agents_report(&s).await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(engine);
    let status = support::wait_for("the policy's records", Duration::from_secs(240), || async {
        let status = policies.get(&name).await?.status.unwrap_or_default();
        match status.nodes.is_empty() && status.rebooted.len() == 2 {
            true => Ok(status),
            false => bail!("status: {}", serde_json::to_string(&status)?),
        }
    })
    .await;
    for n in workers {
        let (boot, ready, _) = node_state(&s.client, n).await;
        assert_ne!(boot, before[n], "{n} rebooted: a new boot ID");
        assert!(ready, "{n} is Ready");
        let record = (status.rebooted.iter())
            .find(|r| r.name == n)
            .unwrap_or_else(|| panic!("{n} in the policy's records"));
        assert_eq!(
            record.boot_id.as_deref(),
            Some(boot.as_str()),
            "{n} came back with the boot it runs"
        );
    }
    // The sentinel went with the reboot (the host's /run is a tmpfs): the metric says so.
    wait_for_gauge(&s, sentinel_node, "0").await;
    eprintln!(
        "real: the RebootPolicy rebooted the nodes that asked, back at {back_at:?}, in {:?}",
        started.elapsed()
    );
}
