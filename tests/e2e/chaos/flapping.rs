//! Nodes flapping Ready/NotReady all through a rollout, as a kubelet on a flaky network does: a
//! node of the pool at random goes NotReady for a moment and comes back, over and over, until
//! every node is done. Each flap is a node change the controller hears of, and the Plan it
//! concerns is queued once however often its nodes flap before its next reconcile.

use std::time::Instant;

use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{ROLLOUT_LIMIT, Random, Row, Sizes, one_rollout};
use crate::support::scene::Scene;

/// Sets the node's Ready condition, as its kubelet would.
async fn set_ready(client: &Client, name: &str, ready: bool) {
    let now = jiff::Timestamp::now().to_string();
    let (status, reason) = match ready {
        true => ("True", "KubeletReady"),
        false => ("False", "KubeletNotReady"),
    };
    let condition = json!({"type": "Ready", "status": status, "reason": reason,
        "message": "chaos: flapping", "lastHeartbeatTime": now, "lastTransitionTime": now});
    let _ = Api::<Node>::all(client.clone())
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [condition]}})),
        )
        .await;
}

pub(super) async fn node_flapping(sizes: Sizes, mut rng: Random) -> Option<Row> {
    let (stage, replicas) = one_rollout(Scene::new("chaos-flap"), sizes, "").await?;
    let client = stage.client();
    let nodes = stage.s.nodes.clone();
    let mut flaps = 0;
    while !stage.is_rolled_out("up").await && stage.started.elapsed() < ROLLOUT_LIMIT {
        let node = &nodes[rng.below(nodes.len())];
        set_ready(&client, node, false).await;
        flaps += 1;
        tokio::time::sleep(rng.millis(100, 800)).await;
        set_ready(&client, node, true).await;
        tokio::time::sleep(rng.millis(50, 300)).await;
    }
    for node in &nodes {
        set_ready(&client, node, true).await;
    }
    let finished = match stage.is_rolled_out("up").await {
        true => Instant::now(),
        false => stage.finish_rollout("up", ROLLOUT_LIMIT).await,
    };
    replicas.stop();
    Some(stage.end(finished, flaps).await)
}
