//! Taking over from the controller slipway replaces, as docs/migrating.md tells an operator to:
//! the records the old controller left are read as they are, and nothing that was done is done
//! again.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use slipway::plan::api::Plan;

use crate::compat;
use crate::support::{self, scene::Scene};

/// What SUC leaves of a Plan it completed: its hash, its Jobs (name and uid: a Job made again has
/// a new uid) and the label it wrote on each node.
#[derive(Debug, PartialEq)]
struct Done {
    hash: Option<String>,
    jobs: BTreeMap<String, String>,
    labels: BTreeMap<String, Option<String>>,
}

/// Each Plan of the namespace that SUC marked `Complete=True`, with what it left.
async fn done_plans(client: &kube::Client, ns: &str, nodes: &[String]) -> BTreeMap<String, Done> {
    let plans = (Api::<Plan>::namespaced(client.clone(), ns).list(&ListParams::default()))
        .await
        .expect("list Plans");
    let jobs = (Api::<Job>::namespaced(client.clone(), ns).list(&ListParams::default()))
        .await
        .expect("list Jobs");
    let mut node_labels = Vec::new();
    for name in nodes {
        let node = Api::<Node>::all(client.clone()).get(name).await;
        node_labels.push((name.clone(), node.expect("get a node").labels().clone()));
    }
    let mut out = BTreeMap::new();
    for p in plans.items {
        let status = p.status.clone().unwrap_or_default();
        let complete =
            (status.conditions.iter()).any(|c| c.type_ == "Complete" && c.status == "True");
        // SUC calls a Plan of concurrency 0 complete with nothing done; slipway says it cannot
        // start (COMPATIBILITY.md, "`concurrency` 0 or unset"): not a Plan SUC finished.
        let runs = p.spec.concurrency.is_some_and(|c| c > 0);
        if !complete || !runs {
            continue;
        }
        let name = p.name_any();
        let of_plan = |j: &&Job| j.labels().get("upgrade.cattle.io/plan") == Some(&name);
        let label = format!("plan.upgrade.cattle.io/{name}");
        out.insert(
            name.clone(),
            Done {
                hash: status.latest_hash.clone(),
                jobs: (jobs.items.iter().filter(of_plan))
                    .map(|j| (j.name_any(), j.uid().unwrap_or_default()))
                    .collect(),
                labels: (node_labels.iter())
                    .map(|(n, l)| (n.clone(), l.get(&label).cloned()))
                    .collect(),
            },
        );
    }
    out
}

/// SUC completes the corpus' Plans and is stopped, its Jobs left until their TTL as its Deployment
/// leaves them; slipway starts on the same Plans (its CRD applied over SUC's, in place) and takes
/// them: each completed Plan is `Ready` under slipway (with no finalizer: it holds no node) with SUC's hash, its Jobs the
/// ones SUC made and its node labels as SUC wrote them. Nothing is upgraded again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slipway_takes_over_the_plans_suc_completed_and_upgrades_nothing_again() {
    if support::cluster().await.is_none() {
        return;
    }
    let suc = tokio::task::spawn_blocking(compat::suc_binary)
        .await
        .expect("build SUC");
    // On the differential test's cluster, for the same reasons (it replaces the Plan CRD).
    let Some(s) = Scene::new("takeover").own_cluster("compat").start().await else {
        return;
    };
    let (client, ns) = (&s.client, s.ns.name());
    let channel = support::channel_server(Arc::new(Mutex::new("v1.30.1+k3s1".into()))).await;
    let by_suc = compat::begin(&s, &suc, &[], &channel, "suc").await;
    compat::settle(client, ns, &by_suc.log).await;
    let before = done_plans(client, ns, &by_suc.nodes).await;
    for plan in ["k3os-latest", "window-open"] {
        assert!(
            before.contains_key(plan),
            "SUC completed no {plan}: {before:?}"
        );
    }
    drop(by_suc.process);

    let slipway = PathBuf::from(env!("CARGO_BIN_EXE_slipway"));
    let log = std::env::temp_dir().join(format!("slipway-takeover-{ns}.log"));
    let process = compat::start(&slipway, &["run"], &s, &log);
    let plans = Api::<Plan>::namespaced(client.clone(), ns);
    support::wait_for(
        "slipway to take the completed Plans",
        Duration::from_secs(120),
        || async {
            let mut waiting = Vec::new();
            for name in before.keys() {
                let p = plans.get(name).await?;
                let ready = (p.status.iter().flat_map(|s| s.conditions.iter()))
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                let finalized = p
                    .finalizers()
                    .iter()
                    .any(|f| f == "slipway.dev/plan-cleanup");
                // Taken, and at rest: a Plan that holds no node carries no finalizer.
                if !ready || finalized {
                    waiting.push(format!("{name} (Ready {ready}, finalizer {finalized})"));
                }
            }
            match waiting.is_empty() {
                true => Ok(()),
                false => Err(anyhow::anyhow!(
                    "{}\n{}",
                    waiting.join(", "),
                    support::log_tail(&log)
                )),
            }
        },
    )
    .await;
    let after = done_plans(client, ns, &by_suc.nodes).await;
    drop(process);
    compat::release_plans(client).await;
    compat::cleanup(client, ns, &by_suc.nodes).await;
    // The scenes after this one expect the committed CRD.
    support::install_crd(client).await;
    assert_eq!(
        before, after,
        "what SUC completed, as slipway left it after taking it over"
    );
}

/// FLUO removed in the middle of a reboot (docs/reboots.md, "Replacing FLUO"): its update-agent is
/// rebooting `n0` (FLUO's grant `reboot-ok`, `reboot-in-progress`, the node cordoned by the agent)
/// while `n1` waits for a grant. `n0` is down, so with `concurrency: 1` `n1` waits until `n0`'s
/// agent is back; then slipway takes `n1` through FLUO's protocol. `n0` is left to its agent: no
/// grant written or withdrawn, no cordon changed, no entry in the policy's status; FLUO's grant is
/// the operator's to withdraw (the checklist's step 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_fluo_was_rebooting_holds_a_slot_and_is_left_to_its_agent() {
    use crate::reboot_policy::{self as rbp, FLATCAR};
    let Some((s, _controller)) = rbp::policy_scene("fluo-takeover", 2).await else {
        return;
    };
    let (client, api) = (&s.client, &rbp::policies(&s));
    let (n0, n1) = (s.nodes[0].clone(), s.nodes[1].clone());
    let flag = |name: &str| format!("{FLATCAR}{name}");
    let cordon = serde_json::json!({"spec": {"unschedulable": true}});
    (Api::<Node>::all(client.clone()).patch(&n0, &PatchParams::default(), &Patch::Merge(&cordon)))
        .await
        .expect("cordon n0 as FLUO's agent did");
    let fluos = serde_json::json!({
        flag("reboot-needed"): "true",
        flag("reboot-in-progress"): "true",
        flag("reboot-ok"): "true",
        flag("agent-made-unschedulable"): "true",
    });
    rbp::annotate(client, &n0, fluos).await;
    let waiting = serde_json::json!({
        flag("reboot-needed"): "true",
        flag("reboot-in-progress"): "false",
        flag("reboot-ok"): "false",
    });
    rbp::annotate(client, &n1, waiting).await;
    let spec = serde_json::json!({"concurrency": 1, "signals": {"agent": false, "flatcar": true}});
    let policy = rbp::create_policy(&s, "flatcar", spec).await;
    let granted = |n: &Node| n.annotations().get(&flag("reboot-ok")).cloned();
    let n1_waits = || async {
        let status = rbp::status_of(api, &policy).await;
        match rbp::node_entry(&status, &n1).map(|e| e["reason"].clone()) {
            Some(reason) if reason == "ConcurrencyReached" => Ok(()),
            _ => Err(anyhow::anyhow!("status {status}")),
        }
    };
    support::wait_for(
        "n1 to wait for n0's slot",
        Duration::from_secs(60),
        n1_waits,
    )
    .await;
    let n1_now = rbp::node(client, &n1).await;
    assert_eq!(
        granted(&n1_now).as_deref(),
        Some("false"),
        "no grant while n0 is down"
    );
    assert!(!rbp::cordoned(&n1_now), "n1 untouched while n0 is down");
    // n0's agent is back; then n1's grant, and its reboot as its agent does it.
    let back =
        serde_json::json!({flag("reboot-needed"): "false", flag("reboot-in-progress"): "false"});
    support::simulate_reboot(client, &n0).await;
    rbp::annotate(client, &n0, back.clone()).await;
    support::wait_for("n1's grant", Duration::from_secs(60), || async {
        match granted(&rbp::node(client, &n1).await).as_deref() {
            Some("true") => Ok(()),
            other => Err(anyhow::anyhow!("n1's reboot-ok {other:?}")),
        }
    })
    .await;
    let in_progress = serde_json::json!({flag("reboot-in-progress"): "true"});
    rbp::annotate(client, &n1, in_progress).await;
    support::simulate_reboot(client, &n1).await;
    rbp::annotate(client, &n1, back).await;
    rbp::wait_all_done(client, api, &policy, std::slice::from_ref(&n1)).await;
    let n0_now = rbp::node(client, &n0).await;
    assert_eq!(
        granted(&n0_now).as_deref(),
        Some("true"),
        "FLUO's grant on n0"
    );
    assert!(rbp::cordoned(&n0_now), "the agent's cordon on n0");
    let status = rbp::status_of(api, &policy).await;
    assert!(rbp::node_entry(&status, &n0).is_none(), "n0 in {status}");
    let n1_now = rbp::node(client, &n1).await;
    assert_eq!(
        granted(&n1_now).as_deref(),
        Some("false"),
        "n1's grant withdrawn"
    );
    rbp::delete_policy(api, &policy).await;
}

/// kured's lock as it writes it with `--concurrency` above 1: each node with whether it was
/// cordoned before kured took it.
fn kured_lock(nodes: &[(&str, bool)]) -> String {
    let locks: Vec<serde_json::Value> = (nodes.iter())
        .map(|(n, was)| {
            serde_json::json!({"nodeID": n, "metadata": {"unschedulable": was},
                "created": "2026-11-27T08:00:00Z", "TTL": 0})
        })
        .collect();
    serde_json::json!({"maxOwners": 2, "locks": locks}).to_string()
}

/// kured's DaemonSet as its manifest makes it, its lock annotated, on no node of the cluster.
fn kured_daemonset(lock: &str) -> DaemonSet {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "kured", "annotations": {"weave.works/kured-node-lock": lock}},
        "spec": {
            "selector": {"matchLabels": {"name": "kured"}},
            "template": {
                "metadata": {"labels": {"name": "kured"}},
                "spec": {
                    "nodeSelector": {"slipway.test/kured": "nowhere"},
                    "containers": [{"name": "kured", "image": "ghcr.io/kubereboot/kured:1.17.1"}],
                },
            },
        },
    }))
    .expect("kured's DaemonSet")
}

/// kured uninstalled in the middle of its reboots (docs/migrating.md, "From kured"). Its lock
/// names `n0`, schedulable before kured cordoned it, and `n2`, cordoned before kured took it.
/// The policy (`concurrency: 2`) takes both over: nothing is done to them and `n1`, which asks
/// for a reboot, waits for a slot. kured reboots `n2` and releases it: the policy forgets it and
/// its cordon stays (kured's rule, the admin's cordon). With a slot free, `n1` goes through the
/// policy. kured is uninstalled before it rebooted `n0`: the policy drains and reboots `n0`
/// itself and gives kured's cordon back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reboots_kured_started_are_taken_over_and_finished_when_it_is_uninstalled() {
    use crate::reboot_policy as rbp;
    let kured = |ns: &str| vec![("SLIPWAY_KURED_DAEMONSET", format!("{ns}/kured"))];
    let Some((s, _controller)) = rbp::policy_scene_with("kured-takeover", 3, kured).await else {
        return;
    };
    let (client, api) = (&s.client, &rbp::policies(&s));
    let (n0, n1, n2) = (s.nodes[0].clone(), s.nodes[1].clone(), s.nodes[2].clone());
    let nodes = Api::<Node>::all(client.clone());
    let cordon = serde_json::json!({"spec": {"unschedulable": true}});
    for n in [&n0, &n2] {
        (nodes.patch(n, &PatchParams::default(), &Patch::Merge(&cordon)))
            .await
            .expect("cordon as kured (n0) and an admin (n2) did");
    }
    let daemonsets = Api::<DaemonSet>::namespaced(client.clone(), s.ns.name());
    let ds = kured_daemonset(&kured_lock(&[(&n0, false), (&n2, true)]));
    (daemonsets.create(&PostParams::default(), &ds))
        .await
        .expect("install kured's DaemonSet");
    let n0_boot = support::current_boot_id(client, &n0).await;
    let policy = rbp::create_policy(&s, "kured", serde_json::json!({"concurrency": 2})).await;
    support::ask_reboot(client, &n1).await;
    let entry = |status: &serde_json::Value, n: &str, key: &str| {
        rbp::node_entry(status, n).map(|e| e[key].as_str().unwrap_or_default().to_string())
    };
    support::wait_for(
        "kured's nodes held, n1 waiting",
        Duration::from_secs(60),
        || async {
            let st = rbp::status_of(api, &policy).await;
            let held = |n: &str| {
                entry(&st, n, "reason").as_deref() == Some("KuredHolds")
                    && entry(&st, n, "signal").as_deref() == Some("kured")
            };
            let waits = entry(&st, &n1, "reason").as_deref() == Some("ConcurrencyReached");
            match held(&n0) && held(&n2) && waits {
                true => Ok(()),
                false => Err(anyhow::anyhow!("status {st}")),
            }
        },
    )
    .await;
    let policy_pods = |n: String| {
        let (ns, client, policy) = (s.ns.name().to_string(), client.clone(), policy.clone());
        async move {
            (crate::support::reboots::reboot_pods(&ns, &client, &policy)
                .await
                .iter())
            .any(|p| crate::support::reboots::pod_node(p) == n)
        }
    };
    assert!(
        !policy_pods(n0.clone()).await,
        "kured's node is left to kured"
    );
    // kured reboots n2 and lets it go.
    support::simulate_reboot(client, &n2).await;
    let released = serde_json::json!({"metadata": {"annotations": {
        "weave.works/kured-node-lock": kured_lock(&[(&n0, false)])}}});
    (daemonsets.patch("kured", &PatchParams::default(), &Patch::Merge(&released)))
        .await
        .expect("kured releases n2");
    support::wait_for("n2 forgotten", Duration::from_secs(60), || async {
        let st = rbp::status_of(api, &policy).await;
        let recorded = (st["rebooted"].as_array().into_iter().flatten())
            .any(|r| r["name"] == n2.as_str() && r["signal"] == "kured");
        match rbp::node_entry(&st, &n2).is_none() && recorded {
            true => Ok(()),
            false => Err(anyhow::anyhow!("status {st}")),
        }
    })
    .await;
    assert!(
        rbp::cordoned(&rbp::node(client, &n2).await),
        "n2's cordon was there before kured"
    );
    // kured is uninstalled with n0 not rebooted yet; n1 has taken the free slot meanwhile.
    (daemonsets.delete("kured", &DeleteParams::default()))
        .await
        .expect("uninstall kured");
    let mut rebooted = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    // From then until it is uncordoned, kured's cordon on n0 is recorded as the policy's.
    let record = |n: &k8s_openapi::api::core::v1::Node| {
        (n.metadata.annotations.as_ref())
            .and_then(|a| a.get("slipway.dev/cordoned-by"))
            .cloned()
    };
    let mut recorded = false;
    while rebooted.len() < 2 {
        let ns = s.ns.name();
        let n0_now = rbp::node(client, &n0).await;
        recorded |= record(&n0_now) == Some(format!("rebootpolicy/{policy}"));
        crate::support::reboots::play_reboots(ns, client, &policy, &mut rebooted).await;
        assert!(
            std::time::Instant::now() < deadline,
            "rebooted {rebooted:?}; status {}",
            rbp::status_of(api, &policy).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(rebooted, [n0.clone(), n1.clone()].into_iter().collect());
    rbp::wait_all_done(client, api, &policy, &[n0.clone(), n1.clone()]).await;
    assert_ne!(support::current_boot_id(client, &n0).await, n0_boot);
    assert!(recorded, "n0's cordon was never recorded as the policy's");
    let n0_after = rbp::node(client, &n0).await;
    assert!(!rbp::cordoned(&n0_after) && record(&n0_after).is_none());
    assert!(
        rbp::cordoned(&rbp::node(client, &n2).await),
        "n2 stays cordoned"
    );
    let st = rbp::status_of(api, &policy).await;
    let n0_record = (st["rebooted"].as_array().into_iter().flatten())
        .find(|r| r["name"] == n0.as_str())
        .cloned();
    assert_eq!(
        n0_record.map(|r| r["signal"].clone()),
        Some(serde_json::json!("kured")),
        "{st}"
    );
    rbp::delete_policy(api, &policy).await;
}
