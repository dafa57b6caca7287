//! Failure policies on the local cluster, a scene each: what a Plan does when a node's Job fails
//! (`Stop`, `Retry`, `Quarantine`, SUC's `Hold`), uncordoning only its own cordon, retrying a Job
//! killed by its node's reboot, resetting failures with an annotation, and `postCompleteDelay`
//! soaking each node before the next. Every scene shares the cluster.

use crate::support;

use std::time::Duration;

use crate::support::TestNamespace;
use crate::support::controller::ControllerProcess;
use crate::support::jobwatch::{JobWatchGuard, watch_jobs};
use crate::support::plans::{
    complete_message, condition_reason, is_complete, plan_from_yaml, settled, wait_reason,
    wait_until,
};
use crate::support::scene::Scene;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use slipway::plan::api::Plan;

const RESET: &str = "slipway.dev/reset-failures";

/// A Plan over the test's pool whose pods fail on `fail_on` (a node name, or "true" for every
/// node; "" for none), with `policy` as its `failurePolicy` (YAML flow mapping).
fn plan(name: &str, pool: &str, concurrency: i64, fail_on: &str, policy: &str) -> Plan {
    let fail = if fail_on.is_empty() {
        String::new()
    } else {
        format!("  labels:\n    {}: \"{fail_on}\"\n", support::FAIL_LABEL)
    };
    plan_from_yaml(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: {name}
{fail}  annotations:
    slipway.test/complete-delay: "2s"
spec:
  concurrency: {concurrency}
  cordon: true
  version: v1.30.1+k3s1
  serviceAccountName: default
  nodeSelector:
    matchLabels:
      slipway.test/pool: {pool}
  upgrade:
    image: rancher/k3s-upgrade
  failurePolicy: {policy}
"#
    ))
}

async fn start(ns: &TestNamespace, plan: &Plan) -> JobWatchGuard {
    let jobs = watch_jobs(ns.api());
    ns.api::<Plan>()
        .create(&PostParams::default(), plan)
        .await
        .expect("create plan");
    jobs
}

/// How many times the Jobs were created, all names together.
fn creations(jobs: &JobWatchGuard) -> usize {
    jobs.snapshot().uids.values().map(|u| u.len()).sum()
}

async fn node(client: &kube::Client, name: &str) -> Node {
    Api::<Node>::all(client.clone())
        .get(name)
        .await
        .expect("get node")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_starts_no_other_node_and_uncordons_only_its_own_cordon() {
    let Some(s) = Scene::new("fp-stop").nodes(3).start().await else {
        return;
    };
    let (ns, client) = (&s.ns, &s.client);
    let controller = ControllerProcess::builder(s.cluster.kubeconfig_path())
        .namespace(ns.name())
        .envs([("SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT", "0")])
        .metrics_port()
        .start();
    let mut p = plan("stop", &s.pool, 1, "true", "{action: Stop, uncordon: true}");
    p.metadata.annotations =
        Some([("slipway.test/complete-delay".to_string(), "6s".to_string())].into());
    let jobs = start(ns, &p).await;
    // The Job cordons its node (kwok runs no container: the test does it for the Job).
    let started = wait_until(
        &ns.api::<Plan>(),
        "stop",
        "a node started",
        Duration::from_secs(30),
        |p| p.status.as_ref().is_some_and(|s| !s.applying.is_empty()),
    )
    .await;
    let first = started.status.expect("status").applying[0].clone();
    support::set_unschedulable(client, &first, true).await;
    let stopped = wait_reason(&ns.api(), "stop", "RolloutStopped", Duration::from_secs(90)).await;
    let message = complete_message(&stopped);
    assert!(
        message.contains("rollout stopped by failurePolicy Stop"),
        "{message}"
    );
    assert!(message.contains(RESET), "{message}");
    // The first node failed; no other starts, whenever the controller looks again.
    let failed = jobs
        .snapshot()
        .uids
        .into_keys()
        .next()
        .expect("the failed Job");
    settled(&controller, &ns.api(), &failed).await;
    let status = ns
        .api::<Plan>()
        .get("stop")
        .await
        .expect("plan")
        .status
        .unwrap_or_default();
    assert_eq!(creations(&jobs), 1, "{:?}", jobs.snapshot());
    assert_eq!(
        status.applying,
        std::slice::from_ref(&first),
        "the failed node keeps its slot"
    );
    assert!(
        !cordoned(client, &first).await,
        "the Plan's own cordon is undone"
    );
    let reasons = ns.event_reasons().await;
    assert!(reasons.iter().any(|r| r == "RolloutStopped"), "{reasons:?}");

    // An admin cordons the node; a reset (no edit of the spec) starts it over; it fails again,
    // and this time its cordon is the admin's: it stays.
    support::set_unschedulable(client, &first, true).await;
    ns.api::<Plan>()
        .patch(
            "stop",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {RESET: "first"}}})),
        )
        .await
        .expect("annotate");
    support::wait_for(
        "the failed Job created again",
        Duration::from_secs(60),
        || async {
            match creations(&jobs) {
                n if n >= 2 => Ok(()),
                n => Err(anyhow::anyhow!("{n} creations")),
            }
        },
    )
    .await;
    let again = wait_until(
        &ns.api::<Plan>(),
        "stop",
        "stopped again",
        Duration::from_secs(90),
        |p| {
            let st = p.status.clone().unwrap_or_default();
            st.failures_reset.as_deref() == Some("first")
                && condition_reason(p, "Complete").as_deref() == Some("RolloutStopped")
        },
    )
    .await;
    assert_eq!(
        again.status.expect("status").applying,
        std::slice::from_ref(&first)
    );
    assert_eq!(creations(&jobs), 2, "still no other node");
    assert!(cordoned(client, &first).await, "the admin's cordon stays");
}

async fn cordoned(client: &kube::Client, name: &str) -> bool {
    node(client, name)
        .await
        .spec
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_recreates_a_failed_job_with_backoff_until_it_succeeds() {
    let Some(s) = Scene::new("fp-retry").nodes(1).start().await else {
        return;
    };
    let ns = &s.ns;
    let _controller = ControllerProcess::start(
        &s.cluster,
        ns.name(),
        &[("SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT", "0")],
    );
    let p = plan(
        "retry",
        &s.pool,
        1,
        "true",
        "{action: Retry, retries: 4, backoff: 3s}",
    );
    let jobs = start(ns, &p).await;
    // Two failed attempts at one generation: the policy, not an edit, made the second.
    support::wait_for("a second attempt", Duration::from_secs(90), || async {
        match creations(&jobs) {
            n if n >= 2 => Ok(()),
            n => Err(anyhow::anyhow!("{n} creations")),
        }
    })
    .await;
    let retrying = wait_reason(&ns.api(), "retry", "Retrying", Duration::from_secs(60)).await;
    let progress = &retrying.status.as_ref().expect("status").nodes[0];
    assert!(progress.retries.unwrap_or(0) >= 1, "{progress:?}");
    assert_eq!(
        retrying.metadata.generation,
        Some(1),
        "nobody edited the spec"
    );
    // The cause of the failures goes away: the next attempt succeeds and the Plan completes.
    ns.api::<Plan>()
        .patch(
            "retry",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {support::FAIL_LABEL: null}}})),
        )
        .await
        .expect("fix");
    let done = wait_until(
        &ns.api::<Plan>(),
        "retry",
        "retry to complete",
        Duration::from_secs(120),
        is_complete,
    )
    .await;
    assert!(done.status.expect("status").applying.is_empty());
    let reasons = ns.event_reasons().await;
    assert!(
        reasons.iter().filter(|r| *r == "JobFailed").count() >= 2,
        "{reasons:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_takes_the_failing_node_out_and_finishes_the_others() {
    let Some(s) = Scene::new("fp-quarantine").nodes(3).start().await else {
        return;
    };
    let (ns, client, nodes) = (&s.ns, &s.client, &s.nodes);
    let bad = nodes[1].clone();
    let _controller = ControllerProcess::start(
        &s.cluster,
        ns.name(),
        &[("SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT", "0")],
    );
    let p = plan(
        "quarantine",
        &s.pool,
        1,
        &bad,
        "{action: Quarantine, maxQuarantined: 1}",
    );
    let _jobs = start(ns, &p).await;
    let left = wait_reason(
        &ns.api(),
        "quarantine",
        "Quarantined",
        Duration::from_secs(120),
    )
    .await;
    let message = complete_message(&left);
    assert!(
        message.starts_with(&format!("1 node quarantined after their Job failed: {bad}")),
        "{message}"
    );
    let hash = left
        .status
        .as_ref()
        .and_then(|s| s.latest_hash.clone())
        .expect("hash");
    let key = "quarantine.slipway.dev/quarantine";
    let q = node(client, &bad).await;
    assert_eq!(
        q.metadata.labels.as_ref().and_then(|l| l.get(key)),
        Some(&hash)
    );
    let taints = q.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(
        taints
            .iter()
            .any(|t| t.key == key && t.effect == "NoSchedule" && t.value.as_ref() == Some(&hash)),
        "{taints:?}"
    );
    for n in nodes.iter().filter(|n| **n != bad) {
        let labels = node(client, n).await.metadata.labels.unwrap_or_default();
        assert_eq!(
            labels.get("plan.upgrade.cattle.io/quarantine"),
            Some(&hash),
            "{n} upgraded"
        );
    }
    let reasons = ns.event_reasons().await;
    assert!(reasons.iter().any(|r| r == "Quarantined"), "{reasons:?}");

    // Deleting the Plan releases the node: nothing else would ever lift the taint.
    ns.api::<Plan>()
        .delete("quarantine", &Default::default())
        .await
        .expect("delete plan");
    support::wait_for("the quarantine lifted", Duration::from_secs(60), || async {
        let n = node(client, &bad).await;
        let tainted = n
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == key);
        let labelled = n.metadata.labels.unwrap_or_default().contains_key(key);
        if tainted || labelled {
            Err(anyhow::anyhow!("tainted {tainted}, labelled {labelled}"))
        } else {
            Ok(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_killed_by_its_nodes_reboot_is_retried_under_hold() {
    let Some(s) = Scene::new("fp-reboot").nodes(1).start().await else {
        return;
    };
    let ns = &s.ns;
    let _controller = ControllerProcess::start(
        &s.cluster,
        ns.name(),
        &[("SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT", "0")],
    );
    // No failurePolicy: SUC's Hold. The pod stays Running (the hold label) until the test
    // reboots the node and fails it, as a reboot in the middle of the upgrade would.
    let mut p = plan("reboot", &s.pool, 1, "", "null");
    p.metadata.labels = Some([("slipway.test/hold".to_string(), "true".to_string())].into());
    let jobs = start(ns, &p).await;
    let pods = ns.api::<Pod>();
    let pod = support::wait_for("the Job's pod running", Duration::from_secs(60), || async {
        let list = pods.list(&ListParams::default()).await?;
        list.items
            .into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .and_then(|p| p.metadata.name)
            .ok_or_else(|| anyhow::anyhow!("no running pod"))
    })
    .await;
    support::simulate_reboot(&s.client, &s.nodes[0]).await;
    pods.patch_status(
        &pod,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Failed", "reason": "NodeReboot", "message": "the node rebooted"}})),
    )
    .await
    .expect("fail the pod");
    let again = support::wait_for("the Job created again", Duration::from_secs(90), || async {
        match creations(&jobs) {
            n if n >= 2 => {
                let plan = ns.api::<Plan>().get("reboot").await?;
                Ok(plan)
            }
            n => Err(anyhow::anyhow!("{n} creations")),
        }
    })
    .await;
    assert_ne!(
        condition_reason(&again, "Complete").as_deref(),
        Some("JobFailed")
    );
    let reasons = ns.event_reasons().await;
    assert!(
        reasons.iter().any(|r| r == "JobKilledByReboot"),
        "{reasons:?}"
    );
    let recorded = wait_until(
        &ns.api::<Plan>(),
        "reboot",
        "the reboot retry in the status",
        Duration::from_secs(30),
        |p| {
            p.status
                .as_ref()
                .is_some_and(|s| s.nodes.iter().any(|n| n.reboot_retries == Some(1)))
        },
    )
    .await;
    assert!(!is_complete(&recorded));
}

/// Before the next node starts: `postCompleteDelay` is the soak. The node keeps its slot that long
/// after its Job completed, so the next node's Job is created at least that long after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_complete_delay_soaks_each_node_before_the_next_starts() {
    let Some(s) = Scene::new("fp-soak").nodes(2).start().await else {
        return;
    };
    let ns = &s.ns;
    let _controller = ControllerProcess::start(&s.cluster, ns.name(), &[]);
    let mut p = plan("soak", &s.pool, 1, "", "null");
    // The delay is the subject: long enough that a next node started without it could not pass
    // for one that waited, even on a loaded machine.
    p.spec.post_complete_delay = Some("8s".into());
    let _jobs = start(ns, &p).await;
    wait_until(
        &ns.api::<Plan>(),
        "soak",
        "soak to complete",
        Duration::from_secs(120),
        is_complete,
    )
    .await;
    let mut jobs = ns
        .api::<k8s_openapi::api::batch::v1::Job>()
        .list(&ListParams::default())
        .await
        .expect("jobs")
        .items;
    jobs.sort_by_key(|j| j.metadata.creation_timestamp.clone().map(|t| t.0));
    assert_eq!(jobs.len(), 2);
    let first_done = jobs[0]
        .status
        .as_ref()
        .and_then(|s| s.completion_time.clone())
        .expect("the first Job completed")
        .0;
    let second_created = jobs[1]
        .metadata
        .creation_timestamp
        .clone()
        .expect("created")
        .0;
    let gap = second_created.duration_since(first_done);
    // Timestamps have whole seconds.
    assert!(
        gap >= jiff::SignedDuration::from_secs(7),
        "the second node started {gap:?} after the first was done"
    );
}
