//! Alertmanager silences around each disruption, end to end: a RebootPolicy with
//! `spec.disruption.silence` on kwok nodes, a real Alertmanager on loopback (built by
//! tests/tools/alertmanager/build.sh), the controller as a process. A node taken has a silence
//! with its name; given back, the silence is expired; the controller killed while a node is held
//! and the node given back while it is down: after the restart the silence is expired, and there
//! was never a second one. Without an Alertmanager, the policy is told so once and reboots anyway.
//!
//! kwok nodes do not reboot: the scene plays the node (a new boot ID once the reboot pod is
//! there), as the RebootPolicy scenes do.

use std::time::Duration;

use anyhow::{anyhow, bail};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use slipway::node::silence::{Key, Silence, SilenceState};
use slipway::reboot_policy::api::RebootPolicy;
use slipway::runtime::silences::{Alertmanager, Credentials};

use crate::support;
use crate::support::controller::ControllerProcess;
use crate::support::scene::Scene;

/// A silence is made or expired within a round of the controller's chore (30 s) after the node
/// is taken or given back; this leaves room for a slow cluster.
const ROUND: Duration = Duration::from_secs(120);

/// The scene's silences for `node`, in any state, made by a slipway.
async fn silences_of(am: &Alertmanager, node: &str) -> anyhow::Result<Vec<Silence>> {
    let all = am.list().await?;
    Ok(all
        .into_iter()
        .filter(|s| s.created_by.starts_with("slipway/"))
        .filter(|s| Key::parse(&s.comment).is_some_and(|k| k.node == node))
        .collect())
}

fn live(s: &Silence) -> bool {
    s.status.state != SilenceState::Expired
}

/// Waits until `node` has exactly one silence, live, matching its name; the silence.
async fn wait_live(am: &Alertmanager, node: &str) -> Silence {
    support::wait_for(&format!("a live silence for {node}"), ROUND, || async {
        let found = silences_of(am, node).await?;
        match found.as_slice() {
            [s] if live(s) && s.matchers.iter().any(|m| m.value == node) => Ok(s.clone()),
            _ => bail!("silences: {found:?}"),
        }
    })
    .await
}

/// Waits until silence `id` is expired, and checks that it was `node`'s only one.
async fn wait_expired_alone(am: &Alertmanager, node: &str, id: &str) {
    support::wait_for(&format!("{node}'s silence {id} expired"), ROUND, || async {
        let found = silences_of(am, node).await?;
        match found.as_slice() {
            [s] if s.id == id && !live(s) => Ok(()),
            _ => bail!("silences: {found:?}"),
        }
    })
    .await
}

async fn reboot_pod_on(client: &Client, ns: &str, node: &str) -> anyhow::Result<()> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?;
    let on_node = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node);
    match pods.items.iter().any(on_node) {
        true => Ok(()),
        false => bail!("no reboot pod on {node} yet"),
    }
}

/// Waits until `node` is given back: not cordoned, and out of the policy's `status.nodes`.
async fn wait_given_back(client: &Client, policy: &str, node: &str) {
    let policies = Api::<RebootPolicy>::all(client.clone());
    let nodes = Api::<Node>::all(client.clone());
    support::wait_for(&format!("{node} given back by {policy}"), ROUND, || async {
        let n = nodes.get(node).await?;
        if n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            bail!("{node} is still cordoned");
        }
        let p = policies.get(policy).await?;
        let status = serde_json::to_value(&p.status)?;
        let held = (status["nodes"].as_array().into_iter().flatten()).any(|e| e["name"] == node);
        match held {
            true => Err(anyhow!("status: {status}")),
            false => Ok(()),
        }
    })
    .await
}

/// Creates the scene's RebootPolicy, asking for a silence of each node it reboots; its name.
async fn create_policy(s: &Scene) -> String {
    let name = s.name("silenced");
    let policy: RebootPolicy = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "RebootPolicy",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {"slipway.test/pool": s.pool}},
            "drain": {"timeout": "2m"},
            "timeout": "5m",
            "disruption": {"silence": {
                "matchers": [{"name": "instance", "value": "$(NODE_NAME)"}],
                "maxDuration": "1h",
                "comment": "e2e",
            }},
        },
    }))
    .expect("a RebootPolicy");
    let policies = Api::<RebootPolicy>::all(s.client.clone());
    support::wait_for(
        "the RebootPolicy to be created",
        Duration::from_secs(60),
        || async { policies.create(&PostParams::default(), &policy).await },
    )
    .await;
    name
}

async fn delete_policy(client: &Client, name: &str) {
    let policies = Api::<RebootPolicy>::all(client.clone());
    let _ = policies.delete(name, &DeleteParams::default()).await;
    support::wait_for("the policy to go", Duration::from_secs(60), || async {
        match policies.get_opt(name).await {
            Ok(None) => Ok(()),
            other => Err(anyhow!("{:?}", other.map(|p| p.map(|p| p.name_any())))),
        }
    })
    .await;
}

/// The notes of the events on RebootPolicy `policy` with `reason`, each with how many times it was
/// told (a repeated event is one event with a series).
async fn events_of(
    client: &Client,
    policy: &str,
    reason: &str,
) -> anyhow::Result<Vec<(String, i32)>> {
    let events = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    Ok(events
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().is_some_and(|r| {
                r.kind.as_deref() == Some("RebootPolicy") && r.name.as_deref() == Some(policy)
            })
        })
        .filter(|e| e.reason.as_deref() == Some(reason))
        .map(|e| {
            let times = e.series.as_ref().map_or(1, |s| s.count);
            (e.note.unwrap_or_default(), times)
        })
        .collect())
}

/// `nodes` nodes for a scene whose controller reconciles every RebootPolicy of the cluster.
async fn policy_scene(name: &str, nodes: usize) -> Option<Scene> {
    Scene::new(name)
        .nodes(nodes)
        .cluster_wide()
        .crds(&["rebootpolicies.slipway.dev"])
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_holds_a_silence_expired_after_it_even_across_a_controller_kill() {
    let Some(s) = policy_scene("silence", 2).await else {
        return;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let process = support::alertmanager::start().await;
    let am = Alertmanager::new(&process.url, Credentials::None, None).expect("a client");
    let env = [
        ("SLIPWAY_REBOOT_POLICIES", "true"),
        ("SLIPWAY_ALERTMANAGER_URL", process.url.as_str()),
    ];
    let mut controller = ControllerProcess::start_metered(&s.cluster, s.ns.name(), &env);
    let client = &s.client;
    let name = create_policy(&s).await;
    let (n0, n1) = (s.nodes[0].clone(), s.nodes[1].clone());

    // Taken: a silence with the node's name; given back: expired.
    support::ask_reboot(client, &n0).await;
    let ns = s.ns.name();
    support::wait_for("n0's reboot pod", ROUND, || reboot_pod_on(client, ns, &n0)).await;
    let first = wait_live(&am, &n0).await;
    support::simulate_reboot(client, &n0).await;
    wait_given_back(client, &name, &n0).await;
    wait_expired_alone(&am, &n0, &first.id).await;

    // Killed while n1 is held, n1 given back while no controller runs: after the restart its
    // silence is expired, and it never had a second one.
    support::ask_reboot(client, &n1).await;
    support::wait_for("n1's reboot pod", ROUND, || reboot_pod_on(client, ns, &n1)).await;
    let held = wait_live(&am, &n1).await;
    controller.kill();
    support::simulate_reboot(client, &n1).await;
    controller.restart();
    wait_given_back(client, &name, &n1).await;
    wait_expired_alone(&am, &n1, &held.id).await;
    assert_eq!(
        silences_of(&am, &n0).await.expect("a list").len(),
        1,
        "n0 still has its one expired silence"
    );

    delete_policy(client, &name).await;
}

/// No Alertmanager configured: the policy that asks is told so, once, and its reboots go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_alertmanager_the_policy_is_told_once_and_reboots_anyway() {
    let Some(s) = policy_scene("unsilenced", 1).await else {
        return;
    };
    let env = [("SLIPWAY_REBOOT_POLICIES", "true")];
    let _controller = ControllerProcess::start_metered(&s.cluster, s.ns.name(), &env);
    let client = &s.client;
    let name = create_policy(&s).await;
    let n0 = s.nodes[0].clone();
    support::ask_reboot(client, &n0).await;
    let ns = s.ns.name();
    support::wait_for("n0's reboot pod", ROUND, || reboot_pod_on(client, ns, &n0)).await;
    // Told while the node is held: the node is down (a real reboot takes a minute; a reboot
    // simulated at once is over before the silences' task looks, and nobody is told).
    support::wait_for("a SilencesNotConfigured event", ROUND, || async {
        let told = events_of(client, &name, "SilencesNotConfigured").await?;
        match told.is_empty() {
            true => Err(anyhow!("none yet")),
            false => Ok(()),
        }
    })
    .await;
    support::simulate_reboot(client, &n0).await;
    wait_given_back(client, &name, &n0).await;
    let told = events_of(client, &name, "SilencesNotConfigured")
        .await
        .expect("the policy's events");
    assert_eq!(told.len(), 1, "{told:?}");
    assert_eq!(told[0].1, 1, "told once: {told:?}");
    assert!(told[0].0.contains("--alertmanager-url"), "{told:?}");
    delete_policy(client, &name).await;
}
