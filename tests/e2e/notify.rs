//! Notifications end to end: `slipway run --notify` pointed at a webhook the test serves on
//! loopback. The webhook is down (nothing listens: connections are refused) for a minute while a
//! NodeMaintenance drains a node and gives it back; then it comes up and takes every notification,
//! in order, none lost; and the node's steps were not held up by the outage: they all happened
//! inside it (the Drained condition's time, the node uncordoned), not after it.
//!
//! NodeMaintenances are cluster-scoped: the scene is in the cluster-wide group, with a controller
//! of its own.

use crate::support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use slipway::maintenance::api::{MaintenancePhase, NodeMaintenance};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::controller::ControllerProcess;
use crate::support::scene::Scene;

/// How long the webhook stays down.
const OUTAGE: Duration = Duration::from_secs(60);

/// Serves a webhook on `addr` that answers 200 and keeps every JSON body, in arrival order.
async fn webhook(addr: SocketAddr, taken: Arc<Mutex<Vec<Value>>>) {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("the webhook's port is still free");
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let taken = taken.clone();
            tokio::spawn(async move {
                let Some(body) = request_body(&mut sock).await else {
                    return;
                };
                let value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                taken.lock().expect("webhook lock").push(value);
                let reply = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
}

async fn request_body(sock: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
        let length: usize = (head.lines())
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())?;
        while buf.len() < end + 4 + length {
            let n = sock.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        return Some(buf[end + 4..end + 4 + length].to_vec());
    }
}

fn deployment(name: &str, node: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": name },
        "spec": {
            "replicas": 1,
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

fn maintenance(name: &str, node: &str) -> NodeMaintenance {
    serde_json::from_value(json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1",
        "kind": "NodeMaintenance",
        "metadata": { "name": name },
        "spec": { "nodeName": node, "reason": "e2e notifications" },
    }))
    .expect("a NodeMaintenance")
}

async fn unschedulable(client: &kube::Client, node: &str) -> bool {
    let n = Api::<Node>::all(client.clone())
        .get(node)
        .await
        .expect("get node");
    n.spec.and_then(|s| s.unschedulable).unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_down_for_a_minute_loses_no_notification_and_holds_up_no_node() {
    let Some(s) = Scene::new("notify")
        .nodes(1)
        .cluster_wide()
        .crds(&["nodemaintenances.nodemaintenance.medik8s.io"])
        .start()
        .await
    else {
        return;
    };
    support::ensure_lease_namespace(&s.client).await;
    let node = &s.nodes[0];
    let port = support::free_port();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    // Down from here: nothing listens on the port.
    let down_at = jiff::Timestamp::now();
    let controller = ControllerProcess::builder(s.cluster.kubeconfig_path())
        .namespace(s.ns.name())
        .envs([("SLIPWAY_MAINTENANCE", "true")])
        .args([
            format!("--notify=hook=http://{addr}/hook"),
            "--notify-failing-after=15s".to_string(),
        ])
        .metrics_port()
        .start();

    let pods = s.ns.api::<Pod>();
    s.ns.api::<Deployment>()
        .create(&PostParams::default(), &deployment("web", node))
        .await
        .expect("create deployment");
    support::wait_for("the pod to run", Duration::from_secs(60), || async {
        let running = (pods.list(&ListParams::default()).await?.items.iter())
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == 1 {
            Ok(())
        } else {
            Err(anyhow!("{running} running"))
        }
    })
    .await;

    // The node's steps, all while the webhook is down.
    let nms = Api::<NodeMaintenance>::all(s.client.clone());
    let name = s.name("down");
    nms.create(&PostParams::default(), &maintenance(&name, node))
        .await
        .expect("create NodeMaintenance");
    let done = support::wait_for("the drain", Duration::from_secs(60), || async {
        let nm = nms.get(&name).await?;
        match nm.status.as_ref().and_then(|s| s.phase) {
            Some(MaintenancePhase::Succeeded) => Ok(nm),
            _ => Err(anyhow!("status: {}", serde_json::to_string(&nm.status)?)),
        }
    })
    .await;
    let drained_at = (done.status.iter().flat_map(|s| &s.conditions))
        .find(|c| c.type_ == "Drained" && c.status == "True")
        .map(|c| c.last_transition_time.0)
        .expect("the Drained condition");
    support::delete_and_wait_gone(&nms, &name).await;
    assert!(!unschedulable(&s.client, node).await, "given back");
    let back_at = jiff::Timestamp::now();

    // The target keeps failing: said in the gauge.
    let failing = "slipway_notification_target_failing{target=\"hook\"}";
    support::wait_for("the target failing", Duration::from_secs(60), || async {
        match controller.metric(failing).await? {
            1.0 => Ok(()),
            v => bail!("{failing} = {v}"),
        }
    })
    .await;
    let delivered = "slipway_notifications_delivered_total{target=\"hook\"}";
    assert_eq!(controller.metric(delivered).await.ok(), Some(0.0));
    let elapsed = jiff::Timestamp::now().duration_since(down_at);
    let rest = OUTAGE.saturating_sub(elapsed.try_into().unwrap_or_default());
    tokio::time::sleep(rest).await;

    // Up.
    let up_at = jiff::Timestamp::now();
    let taken = Arc::new(Mutex::new(Vec::new()));
    webhook(addr, taken.clone()).await;
    // The sender's backoff is at most 30 s.
    support::wait_for("every notification", Duration::from_secs(90), || async {
        let got = taken.lock().expect("webhook lock").len();
        if got >= 3 {
            Ok(())
        } else {
            Err(anyhow!("{got} taken"))
        }
    })
    .await;
    let bodies = taken.lock().expect("webhook lock").clone();
    let told: Vec<(&str, &str, &str)> = (bodies.iter())
        .map(|b| {
            (
                b["kind"].as_str().unwrap_or("?"),
                b["node"].as_str().unwrap_or("?"),
                b["object"]["name"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    assert_eq!(
        told,
        [
            ("node-started", node.as_str(), name.as_str()),
            ("node-drained", node.as_str(), name.as_str()),
            ("node-back", node.as_str(), name.as_str()),
        ],
        "every notification, in order, once: {bodies:#?}"
    );
    assert!(
        bodies
            .iter()
            .all(|b| b["object"]["kind"] == "NodeMaintenance")
    );
    // The node did not wait for the webhook: drained and given back inside the outage.
    assert!(
        down_at <= drained_at + jiff::SignedDuration::from_secs(1) && drained_at < up_at,
        "drained at {drained_at}, outage {down_at} .. {up_at}"
    );
    assert!(back_at < up_at, "given back at {back_at}, up at {up_at}");
    support::wait_for(
        "the target healthy again",
        Duration::from_secs(30),
        || async {
            match controller.metric(failing).await? {
                0.0 => Ok(()),
                v => bail!("{failing} = {v}"),
            }
        },
    )
    .await;
    assert_eq!(controller.metric(delivered).await.ok(), Some(3.0));
}
