//! End-to-end scenes of RebootPolicy on the local cluster: nodes ask for a reboot (the annotation
//! `slipway agent` writes, Flatcar's update-agent protocol, or a Node condition), slipway cordons,
//! drains through the real Eviction API, reboots with a reboot pod (or grants `reboot-ok`), and
//! waits for the node to come back. kwok nodes do not reboot, so the scene plays the node: it
//! changes `status.nodeInfo.bootID` once the reboot was asked for.
//!
//! The scenes: a wave of five nodes two at a time across a controller crash; a closed window; a
//! drain's delay; a blocking pod; a node that never comes back; a PodDisruptionBudget holding the
//! drain; Flatcar's protocol; an invalid spec; an unreachable Prometheus; a health check; a Node
//! condition; a Plan and a policy in one budget; the soak between two reboots; an Event of its own
//! per node.
//!
//! RebootPolicies are cluster-scoped and a policy-enabled controller reconciles all of them, so
//! every scene here is in the [`CLUSTER_WIDE`](crate::support::scene::CLUSTER_WIDE) group: one
//! at a time, each with a controller of its own.

use crate::support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::support::TestNamespace;
use crate::support::controller::ControllerProcess;
use crate::support::reboots::{pod_node, reboot_pods};
use crate::support::scene::Scene;
use anyhow::{anyhow, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use slipway::reboot_policy::api::RebootPolicy;

/// FLUO's prefix, written here as FLUO's `pkg/constants/constants.go` has it (not from the library,
/// so a wrong constant there fails these tests).
pub(crate) const FLATCAR: &str = "flatcar-linux-update.v1.flatcar-linux.net/";
/// The controller's setting that turns RebootPolicies on.
const POLICIES_ON: [(&str, &str); 1] = [("SLIPWAY_REBOOT_POLICIES", "true")];
/// The controller's reconciles of RebootPolicies, as its metrics name them.
const KIND: &str = "rebootpolicy";

/// A scene of `nodes` nodes and its policy-enabled controller (with metrics, for
/// [`ControllerProcess::settled`]).
pub(crate) async fn policy_scene(name: &str, nodes: usize) -> Option<(Scene, ControllerProcess)> {
    policy_scene_with(name, nodes, |_| Vec::new()).await
}

/// [`policy_scene`] with more of the controller's environment, given the scene's namespace.
pub(crate) async fn policy_scene_with(
    name: &str,
    nodes: usize,
    env: impl FnOnce(&str) -> Vec<(&'static str, String)>,
) -> Option<(Scene, ControllerProcess)> {
    // Its controller reconciles every RebootPolicy of the cluster.
    let s = Scene::new(name)
        .nodes(nodes)
        .cluster_wide()
        .crds(&["rebootpolicies.slipway.dev"])
        .start()
        .await?;
    let extra = env(s.ns.name());
    let mut all: Vec<(&str, &str)> = POLICIES_ON.to_vec();
    all.extend(extra.iter().map(|(k, v)| (*k, v.as_str())));
    let controller = ControllerProcess::start_metered(&s.cluster, s.ns.name(), &all);
    Some((s, controller))
}

pub(crate) fn policies(s: &Scene) -> Api<RebootPolicy> {
    Api::all(s.client.clone())
}

/// The RebootPolicy `name` over the scene's pool, with `spec` merged into its defaults.
fn policy(name: &str, pool: &str, spec: Value) -> RebootPolicy {
    let mut full = json!({
        "nodeSelector": {"matchLabels": {"slipway.test/pool": pool}},
        "drain": {"timeout": "2m"},
        "timeout": "5m",
    });
    if let (Some(base), Some(extra)) = (full.as_object_mut(), spec.as_object()) {
        for (k, v) in extra {
            base.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "RebootPolicy",
        "metadata": {"name": name},
        "spec": full,
    }))
    .expect("a RebootPolicy")
}

/// Creates the scene's RebootPolicy `<namespace>-<what>` with `spec`; its name.
pub(crate) async fn create_policy(s: &Scene, what: &str, spec: Value) -> String {
    let name = s.name(what);
    let p = policy(&name, &s.pool, spec);
    let api = policies(s);
    // The CRD is Established, but a fresh one may take a moment to be served everywhere.
    support::wait_for(
        "the RebootPolicy to be created",
        Duration::from_secs(60),
        || async { api.create(&PostParams::default(), &p).await },
    )
    .await;
    name
}

pub(crate) async fn node(client: &Client, name: &str) -> Node {
    Api::<Node>::all(client.clone())
        .get(name)
        .await
        .expect("get node")
}

pub(crate) fn cordoned(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

pub(crate) async fn annotate(client: &Client, name: &str, annotations: Value) {
    Api::<Node>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
        )
        .await
        .expect("annotate node");
}

pub(crate) async fn status_of(api: &Api<RebootPolicy>, name: &str) -> Value {
    let p = api.get(name).await.expect("get policy");
    serde_json::to_value(&p.status).unwrap_or_default()
}

pub(crate) fn node_entry<'a>(status: &'a Value, node: &str) -> Option<&'a Value> {
    status["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["name"] == node)
}

async fn wait_node_phase(api: &Api<RebootPolicy>, name: &str, node: &str, phase: &str) -> Value {
    let status = wait_node_field(api, name, node, "phase", phase).await;
    node_entry(&status, node).cloned().unwrap_or_default()
}

/// Until the policy has no node left and every node of `names` is schedulable.
pub(crate) async fn wait_all_done(
    client: &Client,
    api: &Api<RebootPolicy>,
    name: &str,
    names: &[String],
) {
    support::wait_for(
        &format!("{name} to finish"),
        Duration::from_secs(90),
        || async {
            let status = status_of(api, name).await;
            if status["nodes"].as_array().is_some_and(|n| !n.is_empty()) {
                bail!("status: {status}");
            }
            for n in names {
                if cordoned(&node(client, n).await) {
                    bail!("{n} still cordoned");
                }
            }
            Ok(())
        },
    )
    .await
}

/// Counts, every 100 ms, the cordoned nodes among `names` of the pool `selector`; keeps the
/// largest count. Each count is of one list, a snapshot of one moment: node-by-node reads could
/// see a node given back and the next one taken as both cordoned.
fn watch_cordons(
    client: Client,
    selector: String,
    names: Vec<String>,
) -> (Arc<AtomicUsize>, Arc<AtomicBool>) {
    let most = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (m, s) = (most.clone(), stop.clone());
    tokio::spawn(async move {
        let api = Api::<Node>::all(client);
        while !s.load(Ordering::Relaxed) {
            if let Ok(list) = api.list(&ListParams::default().labels(&selector)).await {
                let n = (list.items.iter())
                    .filter(|n| names.contains(&n.name_any()) && cordoned(n))
                    .count();
                m.fetch_max(n, Ordering::Relaxed);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (most, stop)
}

pub(crate) async fn delete_policy(api: &Api<RebootPolicy>, name: &str) {
    let _ = api.delete(name, &DeleteParams::default()).await;
    support::wait_for("the policy to go", Duration::from_secs(30), || async {
        match api.get_opt(name).await {
            Ok(None) => Ok(()),
            other => Err(anyhow!("{other:?}")),
        }
    })
    .await;
}

/// Waits (up to 60 s) until `node`'s entry of `policy`'s status has `reason`; the status.
async fn wait_node_reason(
    api: &Api<RebootPolicy>,
    policy: &str,
    node: &str,
    reason: &str,
) -> Value {
    wait_node_field(api, policy, node, "reason", reason).await
}

/// Waits (up to 60 s) until `node`'s entry of `policy`'s status has `value` at `key`; the status.
async fn wait_node_field(
    api: &Api<RebootPolicy>,
    policy: &str,
    node: &str,
    key: &str,
    value: &str,
) -> Value {
    support::wait_for(
        &format!("{node} of {policy}: {key} {value}"),
        Duration::from_secs(60),
        || async {
            let status = status_of(api, policy).await;
            match node_entry(&status, node) {
                Some(n) if n[key] == value => Ok(status.clone()),
                _ => Err(anyhow!("status: {status}")),
            }
        },
    )
    .await
}

/// Waits (up to 60 s) for a reboot pod of `policy` on `node`.
async fn wait_reboot_pod(s: &Scene, policy: &str, node: &str, what: &str) {
    support::wait_for(what, Duration::from_secs(60), || async {
        let p = reboot_pods(s.ns.name(), &s.client, policy).await;
        if p.iter().any(|p| pod_node(p) == node) {
            Ok(())
        } else {
            Err(anyhow!("status: {}", status_of(&policies(s), policy).await))
        }
    })
    .await
}

/// Five nodes ask; at most two are disrupted at once; the controller is killed once in the
/// middle; every node ends rebooted and uncordoned, the one an admin had cordoned stays so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_reboots_every_node_two_at_a_time_across_a_crash() {
    let Some((s, mut controller)) = policy_scene("rbp-wave", 5).await else {
        return;
    };
    let (client, api, nodes) = (&s.client, &policies(&s), &s.nodes);
    let admin_cordoned = nodes[4].clone();
    support::set_unschedulable(client, &admin_cordoned, true).await;
    let wave = create_policy(&s, "wave", json!({"concurrency": 2})).await;
    let others: Vec<String> = nodes
        .iter()
        .filter(|n| **n != admin_cordoned)
        .cloned()
        .collect();
    let (most, stop) = watch_cordons(client.clone(), s.pool_selector(), others.clone());
    let mut before = Vec::new();
    for n in nodes {
        before.push(support::boot_id(&node(client, n).await));
    }
    for n in nodes {
        support::ask_reboot(client, n).await;
    }
    reboot_two_at_a_time_killing_the_controller_once(&s, &mut controller, &wave).await;
    wait_all_done(client, api, &wave, &others).await;
    // Nothing under way: Ready, as kubectl (and GitOps health) reads it.
    s.kubectl_wait(&format!("rebootpolicy/{wave}"), "condition=Ready", 30)
        .await;
    stop.store(true, Ordering::Relaxed);
    let most = most.load(Ordering::Relaxed);
    // The watch leaves out the node an admin cordoned.
    assert!(most <= 2, "{most} nodes cordoned at once, concurrency 2");
    assert!(most >= 1, "the watch saw no cordon at all");
    every_node_rebooted_and_an_admins_cordon_stays(&s, &wave, &admin_cordoned, &before).await;
    support::set_unschedulable(client, &admin_cordoned, false).await;
    delete_policy(api, &wave).await;
}

/// Plays every node of the wave: reboots it once its reboot pod is there, never seeing more than
/// two reboot pods at once; the first time, kills the controller in between (a crash between the
/// reboot pod and the node's return loses nothing).
async fn reboot_two_at_a_time_killing_the_controller_once(
    s: &Scene,
    controller: &mut ControllerProcess,
    wave: &str,
) {
    let (client, api) = (&s.client, &policies(s));
    let mut rebooted: BTreeSet<String> = BTreeSet::new();
    let mut killed = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while rebooted.len() < s.nodes.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "rebooted so far: {rebooted:?}; status: {}",
            status_of(api, wave).await
        );
        let pods = reboot_pods(s.ns.name(), client, wave).await;
        if pods.len() > 2 {
            let names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
            panic!(
                "{names:?} at once, concurrency 2; status: {}",
                status_of(api, wave).await
            );
        }
        for p in pods {
            let n = pod_node(&p);
            if !rebooted.insert(n.clone()) {
                continue;
            }
            if killed {
                support::simulate_reboot(client, &n).await;
            } else {
                // A crash between the reboot pod and the node's return loses nothing: the node
                // comes back while no controller runs.
                controller.kill();
                support::simulate_reboot(client, &n).await;
                controller.restart();
                killed = true;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every node has a new boot ID, no reboot pod is left and `status.rebooted` names every node;
/// the node an admin cordoned is still cordoned.
async fn every_node_rebooted_and_an_admins_cordon_stays(
    s: &Scene,
    wave: &str,
    admin_cordoned: &str,
    boot_ids_before: &[String],
) {
    let client = &s.client;
    assert!(
        cordoned(&node(client, admin_cordoned).await),
        "an admin's cordon stays"
    );
    for (n, b) in s.nodes.iter().zip(boot_ids_before) {
        assert_ne!(&support::boot_id(&node(client, n).await), b, "{n} rebooted");
    }
    assert!(
        reboot_pods(s.ns.name(), client, wave).await.is_empty(),
        "reboot pods are removed once their node is back"
    );
    let history: BTreeSet<String> = status_of(&policies(s), wave).await["rebooted"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        history,
        s.nodes.iter().cloned().collect::<BTreeSet<_>>(),
        "status.rebooted names every node"
    );
}

/// A closed window holds a new reboot and says until when: the node is not even cordoned.
/// Opening it lets the reboot through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_window_holds_a_reboot_and_says_until_when() {
    let Some((s, controller)) = policy_scene("rbp-window", 1).await else {
        return;
    };
    let (client, api) = (&s.client, &policies(&s));
    let closed = {
        let hour = (jiff::Timestamp::now()
            .to_zoned(jiff::tz::TimeZone::UTC)
            .hour()
            + 3)
            % 24;
        json!({"days": ["su","mo","tu","we","th","fr","sa"],
               "startTime": format!("{hour:02}:00"), "endTime": format!("{hour:02}:30")})
    };
    let held = create_policy(&s, "held", json!({"window": closed})).await;
    let n0 = s.nodes[0].clone();
    support::ask_reboot(client, &n0).await;
    let entry = wait_node_phase(api, &held, &n0, "WaitingForWindow").await;
    assert!(
        entry["message"]
            .as_str()
            .unwrap_or("")
            .contains("opens next at"),
        "{entry}"
    );
    // The status says the decision; once every reconcile it led to is done, nothing took the node.
    controller.settled(KIND).await;
    assert!(!cordoned(&node(client, &n0).await), "held: not cordoned");
    api.patch(
        &held,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"window": null}})),
    )
    .await
    .expect("open the window");
    wait_reboot_pod(&s, &held, &n0, "the reboot pod once the window is open").await;
    assert!(cordoned(&node(client, &n0).await));
}

/// kured's `--drain-delay`: the node taken is labelled at once and holds its slot, and is cordoned
/// and drained only once `drain.delay` has passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_delay_labels_the_node_first_and_cordons_it_after() {
    let Some((s, _controller)) = policy_scene("rbp-delay", 1).await else {
        return;
    };
    let (client, api) = (&s.client, &policies(&s));
    let delay = Duration::from_secs(20);
    let delayed = create_policy(
        &s,
        "delayed",
        json!({
            "drain": {"timeout": "2m", "delay": "20s"},
            "nodeLabels": {"beforeReboot": {"slipway.test/going": "down"}},
        }),
    )
    .await;
    let n0 = s.nodes[0].clone();
    let asked = std::time::Instant::now();
    support::ask_reboot(client, &n0).await;
    let in_delay = |entry: &Value| {
        entry["phase"] == "Draining"
            && (entry["message"].as_str()).is_some_and(|m| m.ends_with("(spec.drain.delay)"))
    };
    let entry = wait_node_phase(api, &delayed, &n0, "Draining").await;
    assert!(in_delay(&entry), "{entry}");
    // The status is written before the node is patched (a node is claimed before it is touched),
    // so the label follows the status that names the delay.
    let taken = support::wait_for(
        "the label of the delay",
        Duration::from_secs(15),
        || async {
            let taken = node(client, &n0).await;
            match taken.labels().get("slipway.test/going").map(String::as_str) {
                Some("down") => Ok(taken),
                other => Err(anyhow!("label {other:?}")),
            }
        },
    )
    .await;
    // Read within the delay, however late the controller began it: the status still says so
    // after the node was read, and the delay's end is written before the node is cordoned.
    let status = status_of(api, &delayed).await;
    let after = node_entry(&status, &n0).cloned().unwrap_or_default();
    assert!(
        in_delay(&after),
        "the delay ended before the node was read: {after}"
    );
    assert!(!cordoned(&taken), "not cordoned during the delay");
    wait_reboot_pod(&s, &delayed, &n0, "the reboot pod after the delay").await;
    assert!(cordoned(&node(client, &n0).await));
    assert!(
        asked.elapsed() >= delay,
        "cordoned and rebooted before the delay passed"
    );
}

/// A blocking pod on the node holds it, named; once it is gone the reboot starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_pod_holds_the_node_until_it_is_gone() {
    let Some((s, _controller)) = policy_scene("rbp-blocker", 1).await else {
        return;
    };
    let (client, api, ns) = (&s.client, &policies(&s), &s.ns);
    let n0 = s.nodes[0].clone();
    // The blocker runs before the node asks: otherwise the reboot could start before it exists.
    let blocker: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "blocker", "labels": {"app": "blocker"}},
        "spec": {"nodeName": n0, "containers": [{"name": "c", "image": "busybox"}],
                 "terminationGracePeriodSeconds": 0}
    }))
    .expect("pod");
    let pods = ns.api::<Pod>();
    pods.create(&PostParams::default(), &blocker)
        .await
        .expect("create blocker");
    support::wait_for("the blocker running", Duration::from_secs(30), || async {
        let phase = pods.get("blocker").await?.status.and_then(|s| s.phase);
        match phase.as_deref() {
            Some("Running") => Ok(()),
            other => Err(anyhow!("phase {other:?}")),
        }
    })
    .await;
    let held = create_policy(
        &s,
        "blocked",
        json!({"blocking": {"podSelectors": [{"matchLabels": {"app": "blocker"}}]}}),
    )
    .await;
    support::ask_reboot(client, &n0).await;
    let status = wait_node_reason(api, &held, &n0, "BlockingPods").await;
    let entry = node_entry(&status, &n0).cloned().unwrap_or_default();
    assert!(
        entry["message"].as_str().unwrap_or("").contains("blocker"),
        "{entry}"
    );
    pods.delete("blocker", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete blocker");
    wait_reboot_pod(&s, &held, &n0, "the reboot pod").await;
    assert!(cordoned(&node(client, &n0).await));
}

/// A node that never comes back fails the policy, naming it, and keeps its slot; with
/// `failurePolicy: Stop` the failure outlasts the node's return until the failures are reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_never_returns_fails_the_policy_and_keeps_its_slot() {
    let Some((s, controller)) = policy_scene("rbp-gone", 2).await else {
        return;
    };
    let (client, api) = (&s.client, &policies(&s));
    let (n0, n1) = (s.nodes[0].clone(), s.nodes[1].clone());
    let held = create_policy(&s, "held", json!({})).await;
    support::ask_reboot(client, &n0).await;
    wait_reboot_pod(&s, &held, &n0, "n0's reboot pod").await;
    // n0 never comes back.
    api.patch(
        &held,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"timeout": "3s"}})),
    )
    .await
    .expect("a short timeout");
    support::ask_reboot(client, &n1).await;
    let failed = wait_node_phase(api, &held, &n0, "Failed").await;
    assert_eq!(failed["reason"], "RebootTimedOut", "{failed}");
    let status = wait_node_reason(api, &held, &n1, "ConcurrencyReached").await;
    let message = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Progressing"))
        .map(|c| c["message"].to_string())
        .unwrap_or_default();
    assert!(message.contains(&format!("failed: {n0}")), "{status}");
    let waiting = node_entry(&status, &n1).cloned().unwrap_or_default();
    assert_eq!(waiting["reason"], "ConcurrencyReached", "{status}");
    // failurePolicy Stop, with room for n1: the failure holds it, and the stop outlasts n0's
    // return until the policy's failures are reset.
    api.patch(
        &held,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"concurrency": 2, "failurePolicy": {"action": "Stop"}}})),
    )
    .await
    .expect("failurePolicy Stop");
    let stopped = wait_node_reason(api, &held, &n1, "RolloutStopped").await;
    assert!(
        stopped["stopped"].as_str().unwrap_or("").contains(&n0),
        "{stopped}"
    );
    support::simulate_reboot(client, &n0).await;
    // The status that lets n0 go says what the same decision made of n1.
    let back = support::wait_for("n0 back", Duration::from_secs(30), || async {
        let status = status_of(api, &held).await;
        match node_entry(&status, &n0) {
            None => Ok(status),
            Some(_) => Err(anyhow!("status: {status}")),
        }
    })
    .await;
    assert_eq!(
        node_entry(&back, &n1).map(|n| n["reason"].clone()),
        Some(json!("RolloutStopped")),
        "{back}"
    );
    // And so did every reconcile since.
    controller.settled(KIND).await;
    let status = status_of(api, &held).await;
    assert_eq!(
        node_entry(&status, &n1).map(|n| n["reason"].clone()),
        Some(json!("RolloutStopped")),
        "{status}"
    );
    assert!(
        !(reboot_pods(s.ns.name(), client, &held).await.iter()).any(|p| pod_node(p) == n1),
        "no reboot of n1 while stopped: {status}"
    );
    api.patch(
        &held,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"slipway.dev/reset-failures": "1"}}})),
    )
    .await
    .expect("reset the failures");
    let reset = std::time::Instant::now();
    wait_reboot_pod(&s, &held, &n1, "n1 to start once the failures are reset").await;
    // The reset triggers the policy: n1 starts at once, not at the policy's recheck (~30 s).
    let started = reset.elapsed();
    eprintln!("n1's reboot pod {started:?} after the reset");
    assert!(started < Duration::from_secs(10), "{started:?}");
    assert_eq!(status_of(api, &held).await["failuresReset"], "1");
    support::simulate_reboot(client, &n1).await;
    wait_all_done(client, api, &held, &[n0.clone(), n1.clone()]).await;
    delete_policy(api, &held).await;
}

/// A PodDisruptionBudget holds the drain and the status names it; once it allows, the node
/// is drained and rebooted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_disruption_budget_holds_the_drain() {
    let Some((s, controller)) = policy_scene("rbp-pdb", 1).await else {
        return;
    };
    let (client, api, ns) = (&s.client, &policies(&s), &s.ns);
    let n0 = s.nodes[0].clone();
    let (deployments, pdbs) = a_web_pod_with_a_budget_on(ns, &n0).await;
    let pdb_policy = create_policy(&s, "pdb", json!({})).await;
    support::ask_reboot(client, &n0).await;
    let draining = support::wait_for(
        "the drain to name the budget",
        Duration::from_secs(60),
        || async {
            let status = status_of(api, &pdb_policy).await;
            match node_entry(&status, &n0) {
                Some(n)
                    if n["phase"] == "Draining"
                        && n["message"].as_str().unwrap_or("").contains("web") =>
                {
                    Ok(n.clone())
                }
                _ => Err(anyhow!("status: {status}")),
            }
        },
    )
    .await;
    controller.settled(KIND).await;
    assert!(
        reboot_pods(ns.name(), client, &pdb_policy).await.is_empty(),
        "no reboot before the drain: {draining}"
    );
    pdbs.delete("web", &DeleteParams::default())
        .await
        .expect("delete pdb");
    wait_reboot_pod(&s, &pdb_policy, &n0, "the reboot pod after the drain").await;
    support::simulate_reboot(client, &n0).await;
    wait_all_done(client, api, &pdb_policy, std::slice::from_ref(&n0)).await;
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete deployment");
    delete_policy(api, &pdb_policy).await;
}

/// A Deployment `web` with one pod on `node`, and a PodDisruptionBudget `web` that allows no
/// eviction of it; once the pod runs.
async fn a_web_pod_with_a_budget_on(
    ns: &TestNamespace,
    node: &str,
) -> (Api<Deployment>, Api<PodDisruptionBudget>) {
    let pods = ns.api::<Pod>();
    let deployments = ns.api::<Deployment>();
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [{"name": "app", "image": "nginx:1.27"}],
                    "terminationGracePeriodSeconds": 1}}}
    }))
    .expect("deployment");
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("create deployment");
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}
    }))
    .expect("pdb");
    let pdbs = ns.api::<PodDisruptionBudget>();
    pdbs.create(&PostParams::default(), &budget)
        .await
        .expect("create pdb");
    support::wait_for("the web pod to run", Duration::from_secs(60), || async {
        let running = pods
            .list(&ListParams::default().labels("app=web"))
            .await?
            .items
            .into_iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == 1 {
            Ok(())
        } else {
            Err(anyhow!("{running} running"))
        }
    })
    .await;
    (deployments, pdbs)
}

/// A Flatcar node: slipway speaks FLUO's protocol. It grants reboot-ok (no reboot pod), the
/// agent (played here) reboots and reports back, and slipway withdraws the grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flatcar_node_is_rebooted_through_fluos_protocol() {
    let Some((s, _controller)) = policy_scene("rbp-flatcar", 1).await else {
        return;
    };
    let (client, api) = (&s.client, &policies(&s));
    let n0 = s.nodes[0].clone();
    let flatcar = create_policy(
        &s,
        "flatcar",
        json!({"signals": {"agent": false, "flatcar": true}}),
    )
    .await;
    annotate(
        client,
        &n0,
        json!({
            format!("{FLATCAR}reboot-needed"): "true",
            format!("{FLATCAR}reboot-in-progress"): "false",
            format!("{FLATCAR}reboot-ok"): "false",
        }),
    )
    .await;
    support::wait_for("reboot-ok", Duration::from_secs(60), || async {
        let n = node(client, &n0).await;
        if n.annotations()
            .get(&format!("{FLATCAR}reboot-ok"))
            .map(String::as_str)
            == Some("true")
        {
            Ok(())
        } else {
            Err(anyhow!("annotations: {:?}", n.annotations()))
        }
    })
    .await;
    assert!(
        cordoned(&node(client, &n0).await),
        "drained before the grant"
    );
    assert!(reboot_pods(s.ns.name(), client, &flatcar).await.is_empty());
    // The update-agent: in progress, reboot, then back with both flags false.
    annotate(
        client,
        &n0,
        json!({ format!("{FLATCAR}reboot-in-progress"): "true" }),
    )
    .await;
    support::simulate_reboot(client, &n0).await;
    annotate(
        client,
        &n0,
        json!({
            format!("{FLATCAR}reboot-needed"): "false",
            format!("{FLATCAR}reboot-in-progress"): "false",
        }),
    )
    .await;
    support::wait_for("the grant withdrawn", Duration::from_secs(60), || async {
        let n = node(client, &n0).await;
        let ok = n.annotations().get(&format!("{FLATCAR}reboot-ok")).cloned();
        if ok.as_deref() == Some("false") && !cordoned(&n) {
            Ok(())
        } else {
            Err(anyhow!("reboot-ok {ok:?}, cordoned {}", cordoned(&n)))
        }
    })
    .await;
    wait_all_done(client, api, &flatcar, std::slice::from_ref(&n0)).await;
    delete_policy(api, &flatcar).await;
}

/// An invalid spec (caught by the controller, not CEL) is reported naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_spec_is_reported_naming_the_field() {
    let Some((s, _controller)) = policy_scene("rbp-invalid", 0).await else {
        return;
    };
    let api = &policies(&s);
    let bad = create_policy(
        &s,
        "bad",
        json!({"blocking": {"prometheus": {"url": "http://127.0.0.1:9", "alertFilter": "("}}}),
    )
    .await;
    support::wait_for("Validated False", Duration::from_secs(30), || async {
        let status = status_of(api, &bad).await;
        let validated = status["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Validated").cloned())
            .unwrap_or_default();
        if validated["status"] == "False"
            && validated["message"]
                .as_str()
                .unwrap_or("")
                .contains("spec.blocking.prometheus.alertFilter")
        {
            Ok(())
        } else {
            Err(anyhow!("status: {status}"))
        }
    })
    .await;
    delete_policy(api, &bad).await;
}

/// An unreachable Prometheus holds reboots and says so: fail safe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_prometheus_holds_reboots() {
    let Some((s, _controller)) = policy_scene("rbp-alerts", 1).await else {
        return;
    };
    let (client, api) = (&s.client, &policies(&s));
    let alerts = create_policy(
        &s,
        "alerts",
        json!({"blocking": {"prometheus": {"url": "http://127.0.0.1:9"}}}),
    )
    .await;
    let n0 = s.nodes[0].clone();
    support::ask_reboot(client, &n0).await;
    let status = wait_node_reason(api, &alerts, &n0, "AlertsFiring").await;
    let entry = node_entry(&status, &n0).cloned().unwrap_or_default();
    assert!(
        entry["message"]
            .as_str()
            .unwrap_or("")
            .contains("could not be asked"),
        "{entry}"
    );
    assert!(!cordoned(&node(client, &n0).await));
    delete_policy(api, &alerts).await;
}

/// A health check on a ConfigMap holds every new reboot, saying which check and why, until the
/// ConfigMap's data makes it hold; then the node that asked is rebooted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_health_check_holds_reboots_until_it_holds() {
    let Some((s, _controller)) = policy_scene("rbp-check", 1).await else {
        return;
    };
    let (client, api, ns) = (&s.client, &policies(&s), &s.ns);
    let gate: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "reboot-gate"}, "data": {"state": "rebalancing"}
    }))
    .expect("a ConfigMap");
    let maps = ns.api::<ConfigMap>();
    maps.create(&PostParams::default(), &gate)
        .await
        .expect("create the ConfigMap");
    let rules = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]);
    support::checks::grant(client, ns.name(), ns.name(), "read-gate", rules).await;
    let check = json!({"apiVersion": "v1", "kind": "ConfigMap", "namespace": ns.name(),
        "name": "reboot-gate", "expr": "data.state == 'ok'"});
    let checked = create_policy(&s, "checked", json!({"healthChecks": [check]})).await;
    let n0 = s.nodes[0].clone();
    support::ask_reboot(client, &n0).await;
    let entry = wait_node_reason(api, &checked, &n0, "HealthCheckFailing").await;
    let message = node_entry(&entry, &n0).map(|n| n["message"].to_string());
    assert!(
        message.as_deref().unwrap_or("").contains("reboot-gate"),
        "{entry}"
    );
    assert_eq!(entry["healthChecks"][0]["healthy"], false, "{entry}");
    assert!(!cordoned(&node(client, &n0).await));
    maps.patch(
        "reboot-gate",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"state": "ok"}})),
    )
    .await
    .expect("patch the ConfigMap");
    wait_reboot_pod(&s, &checked, &n0, "the reboot pod once the check holds").await;
    support::simulate_reboot(client, &n0).await;
    wait_all_done(client, api, &checked, std::slice::from_ref(&n0)).await;
    assert_eq!(
        status_of(api, &checked).await["healthChecks"][0]["healthy"],
        true
    );
    delete_policy(api, &checked).await;
}

/// A Node Problem Detector condition asks once per occurrence: the node is rebooted, and
/// the same condition still True afterwards does not reboot it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_condition_asks_once_per_occurrence() {
    let Some((s, controller)) = policy_scene("rbp-npd", 1).await else {
        return;
    };
    let (client, api) = (&s.client, &policies(&s));
    let n0 = s.nodes[0].clone();
    let npd = create_policy(
        &s,
        "npd",
        json!({"signals": {"agent": false, "nodeConditions": ["KernelDeadlock"]}}),
    )
    .await;
    let since = jiff::Timestamp::now().to_string();
    Api::<Node>::all(client.clone())
        .patch_status(
            &n0,
            &PatchParams::default(),
            &Patch::Strategic(json!({"status": {"conditions": [{
                "type": "KernelDeadlock", "status": "True", "reason": "DockerHung",
                "message": "task docker:7 blocked for more than 300 seconds",
                "lastTransitionTime": since, "lastHeartbeatTime": since}]}})),
        )
        .await
        .expect("set the condition");
    wait_reboot_pod(&s, &npd, &n0, "the condition's reboot pod").await;
    let handled = node(client, &n0)
        .await
        .annotations()
        .get("slipway.dev/reboot-conditions-handled")
        .cloned()
        .unwrap_or_default();
    assert!(handled.starts_with("KernelDeadlock="), "{handled}");
    support::simulate_reboot(client, &n0).await;
    wait_all_done(client, api, &npd, std::slice::from_ref(&n0)).await;
    // The node's return and its uncordon trigger reconciles of their own: once they are done,
    // the condition, still True, has asked for nothing more.
    controller.settled(KIND).await;
    let status = status_of(api, &npd).await;
    assert!(
        reboot_pods(s.ns.name(), client, &npd).await.is_empty()
            && node_entry(&status, &n0).is_none(),
        "the same occurrence reboots once: {status}"
    );
    delete_policy(api, &npd).await;
}

/// One budget: a Plan upgrades the pool while every node asks for a reboot. No node ever
/// has a live Job of the Plan and the policy's reboot pod (or cordon) at once, and both
/// finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_and_a_policy_share_one_budget() {
    let Some((s, _controller)) = policy_scene("rbp-shared", 2).await else {
        return;
    };
    let (client, api, ns) = (&s.client, &policies(&s), &s.ns);
    let watch = OverlapWatch::start(client.clone(), ns.name().to_string(), s.name("shared"));
    let shared = create_policy(&s, "shared", json!({})).await;
    ns.api::<slipway::plan::api::Plan>()
        .create(&PostParams::default(), &shared_plan(&s.pool))
        .await
        .expect("create the Plan");
    for n in &s.nodes {
        support::ask_reboot(client, n).await;
    }
    reboot_and_upgrade_every_node(&s, &shared).await;
    wait_all_done(client, api, &shared, &s.nodes).await;
    let (overlap, jobs_seen, pods_seen) = watch.stop().await;
    assert!(
        overlap.is_empty(),
        "nodes with a live Job and a reboot pod at once: {overlap:?}"
    );
    assert!(
        jobs_seen > 0 && pods_seen > 0,
        "the watch saw live Jobs {jobs_seen} times and reboot pods {pods_seen} times"
    );
    delete_policy(api, &shared).await;
}

/// The soak between two reboots, in seconds: long enough for the scene to see the second node
/// wait for it.
const SOAK: i64 = 6;

/// `soak`: the second node starts at least the soak after the first is back, and waits saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_separates_two_reboots() {
    let Some((s, _controller)) = policy_scene("rbp-soak", 2).await else {
        return;
    };
    let api = &policies(&s);
    let pair = [s.nodes[0].clone(), s.nodes[1].clone()];
    let name = create_policy(
        &s,
        "soak",
        json!({"concurrency": 1, "soak": format!("{SOAK}s")}),
    )
    .await;
    for n in &pair {
        support::ask_reboot(&s.client, n).await;
    }
    let first = support::wait_for("a first reboot pod", Duration::from_secs(60), || async {
        let pods = reboot_pods(s.ns.name(), &s.client, &name).await;
        match pods.first() {
            Some(p) => Ok(pod_node(p)),
            None => Err(anyhow!("status: {}", status_of(api, &name).await)),
        }
    })
    .await;
    let second = pair
        .iter()
        .find(|n| **n != first)
        .expect("the other node")
        .clone();
    support::simulate_reboot(&s.client, &first).await;
    // The status that has the first node back has the second soaking.
    let back = support::wait_for(
        "the first node back, the second soaking",
        Duration::from_secs(60),
        || async {
            let status = status_of(api, &name).await;
            let at = (status["rebooted"].as_array().into_iter().flatten())
                .find(|r| r["name"] == first.as_str())
                .and_then(|r| r["at"].as_str()?.parse::<jiff::Timestamp>().ok());
            match (at, node_entry(&status, &second)) {
                (Some(at), Some(n)) if n["reason"] == "Soaking" => Ok(at),
                _ => Err(anyhow!("status: {status}")),
            }
        },
    )
    .await;
    wait_reboot_pod(&s, &name, &second, "the second reboot pod").await;
    // The controller's record of the first node's return against the API server's creation time of
    // the second reboot pod, which is in whole seconds: up to a second early.
    let created = (reboot_pods(s.ns.name(), &s.client, &name).await.iter())
        .find(|p| pod_node(p) == second)
        .and_then(|p| p.metadata.creation_timestamp.clone())
        .expect("the second reboot pod's creation")
        .0;
    assert!(
        created >= back + jiff::SignedDuration::from_secs(SOAK - 1),
        "the second reboot started at {created}, the first node was back at {back}"
    );
    support::simulate_reboot(&s.client, &second).await;
    wait_all_done(&s.client, api, &name, &pair).await;
    delete_policy(api, &name).await;
}

/// kube's event recorder folds events of the same reason and action into one series that keeps
/// only the first message. A policy that reboots four nodes, two at a time, must leave a
/// `Rebooting` and a `Rebooted` message of its own for each node, each naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rebooted_node_has_events_of_its_own() {
    let Some((s, _controller)) = policy_scene("rbp-events", 4).await else {
        return;
    };
    let api = &policies(&s);
    let name = create_policy(&s, "events", json!({"concurrency": 2})).await;
    for n in &s.nodes {
        support::ask_reboot(&s.client, n).await;
    }
    reboot_every_node_once(&s, &name).await;
    wait_all_done(&s.client, api, &name, &s.nodes).await;
    each_node_has_its_own_event(&s.client, &name, &s.nodes, "Rebooting").await;
    each_node_has_its_own_event(&s.client, &name, &s.nodes, "Rebooted").await;
    delete_policy(api, &name).await;
}

/// Plays the nodes of the policy: each is rebooted once its reboot pod is there, until all are.
async fn reboot_every_node_once(s: &Scene, policy: &str) {
    let mut rebooted = BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while rebooted.len() < s.nodes.len() {
        for p in reboot_pods(s.ns.name(), &s.client, policy).await {
            let n = pod_node(&p);
            if rebooted.insert(n.clone()) {
                support::simulate_reboot(&s.client, &n).await;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rebooted {rebooted:?}; policy: {}",
            status_of(&policies(s), policy).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The policy's Events (events.k8s.io/v1, in any namespace) of `reason` carry one distinct
/// message per node of `nodes`, each naming its node.
async fn each_node_has_its_own_event(
    client: &Client,
    policy: &str,
    nodes: &[String],
    reason: &str,
) {
    let events = Api::<Event>::all(client.clone());
    support::wait_for(
        &format!("a {reason} event of {policy} naming each of {nodes:?}"),
        Duration::from_secs(30),
        || async {
            let messages: BTreeSet<String> = events
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .filter(|e| {
                    e.regarding.as_ref().is_some_and(|r| {
                        r.kind.as_deref() == Some("RebootPolicy")
                            && r.name.as_deref() == Some(policy)
                    })
                })
                .filter(|e| e.reason.as_deref() == Some(reason))
                .filter_map(|e| e.note)
                .collect();
            let not_named_once: Vec<&String> = nodes
                .iter()
                .filter(|n| messages.iter().filter(|m| m.contains(n.as_str())).count() != 1)
                .collect();
            if messages.len() == nodes.len() && not_named_once.is_empty() {
                Ok(())
            } else {
                Err(anyhow!(
                    "{} distinct {reason} messages for {} nodes; nodes not named by exactly one: \
                     {not_named_once:?}; messages: {messages:?}",
                    messages.len(),
                    nodes.len()
                ))
            }
        },
    )
    .await
}

/// A Plan `shared` over the pool, one node at a time.
fn shared_plan(pool: &str) -> slipway::plan::api::Plan {
    serde_saphyr::from_str(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: shared
  annotations:
    slipway.test/complete-delay: "2s"
spec:
  concurrency: 1
  version: v1
  serviceAccountName: default
  nodeSelector:
    matchLabels:
      slipway.test/pool: {pool}
  upgrade:
    image: rancher/k3s-upgrade
    command: [sh, -c]
    args: ["echo upgrading"]
"#
    ))
    .expect("plan parses")
}

/// Plays the nodes until every node has been rebooted (once its reboot pod is there) and
/// upgraded by the Plan `shared`.
async fn reboot_and_upgrade_every_node(s: &Scene, shared: &str) {
    let (client, api, ns, nodes, pool) = (&s.client, &policies(s), &s.ns, &s.nodes, &s.pool);
    let (mut seen, mut rebooted) = (BTreeSet::new(), BTreeSet::new());
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        for p in reboot_pods(ns.name(), client, shared).await {
            let n = pod_node(&p);
            // Rebooted when seen a second time, a loop (200 ms) later: a reboot pod then lives
            // longer than the overlap watch's poll (150 ms), which must see one.
            if !seen.insert(n.clone()) && rebooted.insert(n.clone()) {
                support::simulate_reboot(client, &n).await;
            }
        }
        let upgraded = Api::<Node>::all(client.clone())
            .list(&ListParams::default().labels(&format!("slipway.test/pool={pool}")))
            .await
            .expect("list nodes")
            .items
            .iter()
            .filter(|n| n.labels().contains_key("plan.upgrade.cattle.io/shared"))
            .count();
        if rebooted.len() == nodes.len() && upgraded == nodes.len() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rebooted {rebooted:?}, {upgraded} upgraded; policy: {}",
            status_of(api, shared).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls, every 150 ms, the nodes with a live Job in the namespace and those with a reboot pod of
/// the policy, and keeps the nodes seen with both at once.
struct OverlapWatch {
    overlap: Arc<std::sync::Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    /// (polls that saw a live Job, polls that saw a reboot pod): the check is not vacuous.
    seen: Arc<(AtomicUsize, AtomicUsize)>,
    task: tokio::task::JoinHandle<()>,
}

impl OverlapWatch {
    fn start(client: Client, ns_name: String, policy: String) -> Self {
        let overlap = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let stop_watch = Arc::new(AtomicBool::new(false));
        let seen = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
        let task = {
            let (overlap, stop, seen) = (overlap.clone(), stop_watch.clone(), seen.clone());
            tokio::spawn(async move {
                let jobs =
                    Api::<k8s_openapi::api::batch::v1::Job>::namespaced(client.clone(), &ns_name);
                while !stop.load(Ordering::Relaxed) {
                    let live: BTreeSet<String> = jobs
                        .list(&ListParams::default())
                        .await
                        .map(|l| l.items)
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|j| j.status.as_ref().and_then(|s| s.active).unwrap_or(0) > 0)
                        .filter_map(|j| j.labels().get("upgrade.cattle.io/node").cloned())
                        .collect();
                    let pods = reboot_pods(&ns_name, &client, &policy).await;
                    if !live.is_empty() {
                        seen.0.fetch_add(1, Ordering::Relaxed);
                    }
                    if !pods.is_empty() {
                        seen.1.fetch_add(1, Ordering::Relaxed);
                    }
                    for p in pods {
                        let n = pod_node(&p);
                        if live.contains(&n) {
                            overlap.lock().unwrap_or_else(|e| e.into_inner()).push(n);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(150)).await;
                }
            })
        };
        OverlapWatch {
            overlap,
            stop: stop_watch,
            seen,
            task,
        }
    }

    /// Stops the watch: the nodes seen with both, the polls that saw a live Job, and those that
    /// saw a reboot pod.
    async fn stop(self) -> (Vec<String>, usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.task.await;
        let overlap = self
            .overlap
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        (
            overlap,
            self.seen.0.load(Ordering::Relaxed),
            self.seen.1.load(Ordering::Relaxed),
        )
    }
}
