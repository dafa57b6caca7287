//! End-to-end tests of RebootPolicy on the local cluster: nodes ask for a reboot (the annotation
//! `slipway agent` writes, or Flatcar's update-agent protocol), slipway cordons, drains through
//! the real Eviction API, reboots with a reboot pod (or grants `reboot-ok`), and waits for the
//! node to come back. kwok nodes do not reboot, so the test plays the node: it changes
//! `status.nodeInfo.bootID` once the reboot was asked for.
//!
//! RebootPolicies are cluster-scoped and a policy-enabled controller reconciles all of them, so
//! every scenario runs in one test, one after the other, with one controller.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{anyhow, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use slipway::reboot_policy::api::RebootPolicy;
use support::controller::ControllerProcess;

const FLATCAR: &str = "flatcar-linux-update.v1.flatcar-linux.org/";

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

async fn node(client: &Client, name: &str) -> Node {
    Api::<Node>::all(client.clone())
        .get(name)
        .await
        .expect("get node")
}

fn cordoned(n: &Node) -> bool {
    n.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

async fn annotate(client: &Client, name: &str, annotations: Value) {
    Api::<Node>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": annotations}})),
        )
        .await
        .expect("annotate node");
}

async fn reboot_pods(ns: &str, client: &Client, policy: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("slipway.dev/reboot-policy={policy}")))
        .await
        .expect("list reboot pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

fn pod_node(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

async fn status_of(api: &Api<RebootPolicy>, name: &str) -> Value {
    let p = api.get(name).await.expect("get policy");
    serde_json::to_value(&p.status).unwrap_or_default()
}

fn node_entry<'a>(status: &'a Value, node: &str) -> Option<&'a Value> {
    status["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["name"] == node)
}

async fn wait_node_phase(api: &Api<RebootPolicy>, name: &str, node: &str, phase: &str) -> Value {
    support::wait_for(
        &format!("{node} to be {phase} in {name}"),
        Duration::from_secs(60),
        || async {
            let status = status_of(api, name).await;
            match node_entry(&status, node) {
                Some(n) if n["phase"] == phase => Ok(n.clone()),
                _ => Err(anyhow!("status: {status}")),
            }
        },
    )
    .await
}

/// Until the policy has no node left and every node of `names` is schedulable.
async fn wait_all_done(client: &Client, api: &Api<RebootPolicy>, name: &str, names: &[String]) {
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

/// Counts, every 100 ms, the pool's cordoned nodes; keeps the largest count.
fn watch_cordons(client: Client, names: Vec<String>) -> (Arc<AtomicUsize>, Arc<AtomicBool>) {
    let most = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (m, s) = (most.clone(), stop.clone());
    tokio::spawn(async move {
        let api = Api::<Node>::all(client);
        while !s.load(Ordering::Relaxed) {
            let mut n = 0;
            for name in &names {
                if let Ok(node) = api.get(name).await
                    && cordoned(&node)
                {
                    n += 1;
                }
            }
            m.fetch_max(n, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    (most, stop)
}

async fn create_policy(api: &Api<RebootPolicy>, p: &RebootPolicy) {
    // The controller installs the CRD at start; it may not be served yet.
    support::wait_for(
        "the RebootPolicy to be created",
        Duration::from_secs(60),
        || async { api.create(&PostParams::default(), p).await },
    )
    .await;
}

async fn delete_policy(api: &Api<RebootPolicy>, name: &str) {
    let _ = api.delete(name, &DeleteParams::default()).await;
    support::wait_for("the policy to go", Duration::from_secs(30), || async {
        match api.get_opt(name).await {
            Ok(None) => Ok(()),
            other => Err(anyhow!("{other:?}")),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reboot_policies_reboot_the_nodes_that_ask_within_their_budget() {
    let Some((cluster, ns, nodes, pool)) = support::setup_pool("rbp", 5).await else {
        return;
    };
    let client = ns.client();
    let ctl_env = [("SLIPWAY_REBOOT_POLICIES", "true")];
    let mut controller = ControllerProcess::start(&cluster, ns.name(), &ctl_env);
    let api = Api::<RebootPolicy>::all(client.clone());
    let prefix = ns.name().to_string();
    let pname = |what: &str| format!("{prefix}-{what}");

    // 1. Five nodes ask; at most two are disrupted at once; the controller is killed once in the
    //    middle; every node ends rebooted and uncordoned, the one an admin had cordoned stays so.
    let admin_cordoned = nodes[4].clone();
    Api::<Node>::all(client.clone())
        .patch(
            &admin_cordoned,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("cordon");
    let wave = pname("wave");
    create_policy(&api, &policy(&wave, &pool, json!({"concurrency": 2}))).await;
    let (most, stop) = watch_cordons(
        client.clone(),
        nodes
            .iter()
            .filter(|n| **n != admin_cordoned)
            .cloned()
            .collect(),
    );
    let before: Vec<String> = {
        let mut b = Vec::new();
        for n in &nodes {
            b.push(support::boot_id(&node(&client, n).await));
        }
        b
    };
    for n in &nodes {
        support::ask_reboot(&client, n).await;
    }
    let mut rebooted: BTreeSet<String> = BTreeSet::new();
    let mut killed = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    while rebooted.len() < nodes.len() {
        assert!(
            std::time::Instant::now() < deadline,
            "rebooted so far: {rebooted:?}; status: {}",
            status_of(&api, &wave).await
        );
        let pods = reboot_pods(ns.name(), &client, &wave).await;
        if pods.len() > 2 {
            let names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
            panic!(
                "{names:?} at once, concurrency 2; status: {}",
                status_of(&api, &wave).await
            );
        }
        for p in pods {
            let n = pod_node(&p);
            if !rebooted.insert(n.clone()) {
                continue;
            }
            if killed {
                support::simulate_reboot(&client, &n).await;
            } else {
                // A crash between the reboot pod and the node's return loses nothing.
                controller.kill();
                support::simulate_reboot(&client, &n).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
                controller.restart();
                killed = true;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_all_done(
        &client,
        &api,
        &wave,
        &nodes
            .iter()
            .filter(|n| **n != admin_cordoned)
            .cloned()
            .collect::<Vec<_>>(),
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let most = most.load(Ordering::Relaxed);
    // The watch leaves out the node an admin cordoned.
    assert!(most <= 2, "{most} nodes cordoned at once, concurrency 2");
    assert!(most >= 1, "the watch saw no cordon at all");
    assert!(
        cordoned(&node(&client, &admin_cordoned).await),
        "an admin's cordon stays"
    );
    for (n, b) in nodes.iter().zip(&before) {
        assert_ne!(
            &support::boot_id(&node(&client, n).await),
            b,
            "{n} rebooted"
        );
    }
    assert!(
        reboot_pods(ns.name(), &client, &wave).await.is_empty(),
        "reboot pods are removed once their node is back"
    );
    let history: BTreeSet<String> = status_of(&api, &wave).await["rebooted"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        history,
        nodes.iter().cloned().collect::<BTreeSet<_>>(),
        "status.rebooted names every node"
    );
    Api::<Node>::all(client.clone())
        .patch(
            &admin_cordoned,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": null}})),
        )
        .await
        .expect("uncordon");
    delete_policy(&api, &wave).await;

    // 2. A closed window holds a new reboot and says until when; opening it lets it through.
    let held = pname("held");
    let closed = {
        let hour = (jiff::Timestamp::now()
            .to_zoned(jiff::tz::TimeZone::UTC)
            .hour()
            + 3)
            % 24;
        json!({"days": ["su","mo","tu","we","th","fr","sa"],
               "startTime": format!("{hour:02}:00"), "endTime": format!("{hour:02}:30")})
    };
    create_policy(&api, &policy(&held, &pool, json!({"window": closed}))).await;
    let n0 = nodes[0].clone();
    support::ask_reboot(&client, &n0).await;
    let entry = wait_node_phase(&api, &held, &n0, "WaitingForWindow").await;
    assert!(
        entry["message"]
            .as_str()
            .unwrap_or("")
            .contains("opens next at"),
        "{entry}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!cordoned(&node(&client, &n0).await), "held: not cordoned");

    // 3. A blocking pod on the node holds it, named; once it is gone the reboot starts.
    api.patch(
        &held,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"window": null,
            "blocking": {"podSelectors": [{"matchLabels": {"app": "blocker"}}]}}})),
    )
    .await
    .expect("open the window, add a blocker");
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
    let entry = support::wait_for(
        "the blocker to hold the node",
        Duration::from_secs(60),
        || async {
            let status = status_of(&api, &held).await;
            match node_entry(&status, &n0) {
                Some(n) if n["reason"] == "BlockingPods" => Ok(n.clone()),
                _ => Err(anyhow!("status: {status}")),
            }
        },
    )
    .await;
    assert!(
        entry["message"].as_str().unwrap_or("").contains("blocker"),
        "{entry}"
    );
    pods.delete("blocker", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete blocker");
    support::wait_for("the reboot pod", Duration::from_secs(60), || async {
        let p = reboot_pods(ns.name(), &client, &held).await;
        if p.iter().any(|p| pod_node(p) == n0) {
            Ok(())
        } else {
            Err(anyhow!("none yet"))
        }
    })
    .await;
    assert!(cordoned(&node(&client, &n0).await));

    // 4. A node that never comes back fails the policy, naming it, and keeps its slot; once it
    //    is back it is released.
    api.patch(
        &held,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"timeout": "3s"}})),
    )
    .await
    .expect("a short timeout");
    let n1 = nodes[1].clone();
    support::ask_reboot(&client, &n1).await;
    let failed = wait_node_phase(&api, &held, &n0, "Failed").await;
    assert_eq!(failed["reason"], "RebootTimedOut", "{failed}");
    let status = status_of(&api, &held).await;
    let message = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Progressing"))
        .map(|c| c["message"].to_string())
        .unwrap_or_default();
    assert!(message.contains(&format!("failed: {n0}")), "{status}");
    let waiting = node_entry(&status, &n1).cloned().unwrap_or_default();
    assert_eq!(waiting["reason"], "ConcurrencyReached", "{status}");
    support::simulate_reboot(&client, &n0).await;
    support::wait_for(
        "n1 to start once n0 is back",
        Duration::from_secs(60),
        || async {
            let p = reboot_pods(ns.name(), &client, &held).await;
            if p.iter().any(|p| pod_node(p) == n1) {
                Ok(())
            } else {
                Err(anyhow!("status: {}", status_of(&api, &held).await))
            }
        },
    )
    .await;
    support::simulate_reboot(&client, &n1).await;
    wait_all_done(&client, &api, &held, &[n0.clone(), n1.clone()]).await;
    delete_policy(&api, &held).await;

    // 5. A PodDisruptionBudget holds the drain and the status names it; once it allows, the node
    //    is drained and rebooted.
    let pdb_policy = pname("pdb");
    let n2 = nodes[2].clone();
    let deployments = ns.api::<Deployment>();
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"nodeSelector": {"kubernetes.io/hostname": n2},
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
    create_policy(&api, &policy(&pdb_policy, &pool, json!({}))).await;
    support::ask_reboot(&client, &n2).await;
    let draining = support::wait_for(
        "the drain to name the budget",
        Duration::from_secs(60),
        || async {
            let status = status_of(&api, &pdb_policy).await;
            match node_entry(&status, &n2) {
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
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        reboot_pods(ns.name(), &client, &pdb_policy)
            .await
            .is_empty(),
        "no reboot before the drain: {draining}"
    );
    pdbs.delete("web", &DeleteParams::default())
        .await
        .expect("delete pdb");
    support::wait_for(
        "the reboot pod after the drain",
        Duration::from_secs(60),
        || async {
            let p = reboot_pods(ns.name(), &client, &pdb_policy).await;
            if p.iter().any(|p| pod_node(p) == n2) {
                Ok(())
            } else {
                Err(anyhow!("status: {}", status_of(&api, &pdb_policy).await))
            }
        },
    )
    .await;
    support::simulate_reboot(&client, &n2).await;
    wait_all_done(&client, &api, &pdb_policy, std::slice::from_ref(&n2)).await;
    deployments
        .delete("web", &DeleteParams::default())
        .await
        .expect("delete deployment");
    delete_policy(&api, &pdb_policy).await;

    // 6. A Flatcar node: slipway speaks FLUO's protocol. It grants reboot-ok (no reboot pod), the
    //    agent (played here) reboots and reports back, and slipway withdraws the grant.
    let flatcar = pname("flatcar");
    let n3 = nodes[3].clone();
    create_policy(
        &api,
        &policy(
            &flatcar,
            &pool,
            json!({"signals": {"agent": false, "flatcar": true}}),
        ),
    )
    .await;
    annotate(
        &client,
        &n3,
        json!({
            format!("{FLATCAR}reboot-needed"): "true",
            format!("{FLATCAR}reboot-in-progress"): "false",
            format!("{FLATCAR}reboot-ok"): "false",
        }),
    )
    .await;
    support::wait_for("reboot-ok", Duration::from_secs(60), || async {
        let n = node(&client, &n3).await;
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
        cordoned(&node(&client, &n3).await),
        "drained before the grant"
    );
    assert!(reboot_pods(ns.name(), &client, &flatcar).await.is_empty());
    // The update-agent: in progress, reboot, then back with both flags false.
    annotate(
        &client,
        &n3,
        json!({ format!("{FLATCAR}reboot-in-progress"): "true" }),
    )
    .await;
    support::simulate_reboot(&client, &n3).await;
    annotate(
        &client,
        &n3,
        json!({
            format!("{FLATCAR}reboot-needed"): "false",
            format!("{FLATCAR}reboot-in-progress"): "false",
        }),
    )
    .await;
    support::wait_for("the grant withdrawn", Duration::from_secs(60), || async {
        let n = node(&client, &n3).await;
        let ok = n.annotations().get(&format!("{FLATCAR}reboot-ok")).cloned();
        if ok.as_deref() == Some("false") && !cordoned(&n) {
            Ok(())
        } else {
            Err(anyhow!("reboot-ok {ok:?}, cordoned {}", cordoned(&n)))
        }
    })
    .await;
    wait_all_done(&client, &api, &flatcar, std::slice::from_ref(&n3)).await;
    delete_policy(&api, &flatcar).await;

    // 7. An invalid spec (caught by the controller, not CEL) is reported naming the field.
    let bad = pname("bad");
    create_policy(
        &api,
        &policy(
            &bad,
            &pool,
            json!({"blocking": {"prometheus": {"url": "http://127.0.0.1:9", "alertFilter": "("}}}),
        ),
    )
    .await;
    support::wait_for("Validated False", Duration::from_secs(30), || async {
        let status = status_of(&api, &bad).await;
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
    delete_policy(&api, &bad).await;

    // 8. An unreachable Prometheus holds reboots and says so: fail safe.
    let alerts = pname("alerts");
    create_policy(
        &api,
        &policy(
            &alerts,
            &pool,
            json!({"blocking": {"prometheus": {"url": "http://127.0.0.1:9"}}}),
        ),
    )
    .await;
    let n4 = nodes[4].clone();
    support::ask_reboot(&client, &n4).await;
    let entry = support::wait_for(
        "alerts to hold the node",
        Duration::from_secs(60),
        || async {
            let status = status_of(&api, &alerts).await;
            match node_entry(&status, &n4) {
                Some(n) if n["reason"] == "AlertsFiring" => Ok(n.clone()),
                _ => Err(anyhow!("status: {status}")),
            }
        },
    )
    .await;
    assert!(
        entry["message"]
            .as_str()
            .unwrap_or("")
            .contains("could not be asked"),
        "{entry}"
    );
    assert!(!cordoned(&node(&client, &n4).await));
    delete_policy(&api, &alerts).await;

    // 9. A Node Problem Detector condition asks once per occurrence: the node is rebooted, and
    //    the same condition still True afterwards does not reboot it again.
    let npd = pname("npd");
    let n0 = nodes[0].clone();
    create_policy(
        &api,
        &policy(
            &npd,
            &pool,
            json!({"signals": {"agent": false, "nodeConditions": ["KernelDeadlock"]}}),
        ),
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
    support::wait_for(
        "the condition's reboot pod",
        Duration::from_secs(60),
        || async {
            let p = reboot_pods(ns.name(), &client, &npd).await;
            if p.iter().any(|p| pod_node(p) == n0) {
                Ok(())
            } else {
                Err(anyhow!("status: {}", status_of(&api, &npd).await))
            }
        },
    )
    .await;
    let handled = node(&client, &n0)
        .await
        .annotations()
        .get("slipway.dev/reboot-conditions-handled")
        .cloned()
        .unwrap_or_default();
    assert!(handled.starts_with("KernelDeadlock="), "{handled}");
    support::simulate_reboot(&client, &n0).await;
    wait_all_done(&client, &api, &npd, std::slice::from_ref(&n0)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        reboot_pods(ns.name(), &client, &npd).await.is_empty(),
        "the same occurrence reboots once: {}",
        status_of(&api, &npd).await
    );
    delete_policy(&api, &npd).await;

    // 10. One budget: a Plan upgrades the pool while every node asks for a reboot. No node ever
    //     has a live Job of the Plan and the policy's reboot pod (or cordon) at once, and both
    //     finish.
    let shared = pname("shared");
    let plan: slipway::plan::api::Plan = serde_saphyr::from_str(&format!(
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
    .expect("plan parses");
    let overlap = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let stop_watch = Arc::new(AtomicBool::new(false));
    // (polls that saw a live Job, polls that saw a reboot pod): the check is not vacuous.
    let seen = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
    let watcher = {
        let (client, ns_name, shared) = (client.clone(), ns.name().to_string(), shared.clone());
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
                let pods = reboot_pods(&ns_name, &client, &shared).await;
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
    create_policy(&api, &policy(&shared, &pool, json!({}))).await;
    ns.api::<slipway::plan::api::Plan>()
        .create(&PostParams::default(), &plan)
        .await
        .expect("create the Plan");
    for n in &nodes {
        support::ask_reboot(&client, n).await;
    }
    let mut rebooted = BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        for p in reboot_pods(ns.name(), &client, &shared).await {
            let n = pod_node(&p);
            if rebooted.insert(n.clone()) {
                support::simulate_reboot(&client, &n).await;
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
            status_of(&api, &shared).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_all_done(&client, &api, &shared, &nodes).await;
    stop_watch.store(true, Ordering::Relaxed);
    let _ = watcher.await;
    let overlap = overlap.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(
        overlap.is_empty(),
        "nodes with a live Job and a reboot pod at once: {overlap:?}"
    );
    let (jobs_seen, pods_seen) = (
        seen.0.load(Ordering::Relaxed),
        seen.1.load(Ordering::Relaxed),
    );
    assert!(
        jobs_seen > 0 && pods_seen > 0,
        "the watch saw live Jobs {jobs_seen} times and reboot pods {pods_seen} times"
    );
    delete_policy(&api, &shared).await;

    drop(controller);
    ns.cleanup().await;
    support::delete_nodes(&client, &nodes).await;
}
