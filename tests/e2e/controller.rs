//! `slipway run` against the local cluster (real API server, job controller, scheduler, kwok
//! nodes), a scene per behaviour with its own controller, namespace and nodes: a rollout two
//! nodes at a time with SUC's hash and labels; crashes mid-rollout that lose and duplicate
//! nothing; a failed Job reported, not retried, and recovered by fixing the Plan; Secrets that
//! re-run the Plan unless ignored, and a disabled node skipped; a Plan following its channel;
//! deleting a Plan undoing its own cordons only, and `concurrency: 0` saying why nothing happens;
//! a namespace deleted with its controller and Plans going all the same. Every scene shares the
//! cluster.

use crate::support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::TestNamespace;
use crate::support::controller::ControllerProcess;
use crate::support::plans::{condition, condition_reason, is_complete, plan_from_yaml, settled};
use crate::support::scene::Scene;
use anyhow::anyhow;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use slipway::plan::api::Plan;

async fn create_plan(ns: &TestNamespace, plan: &Plan) {
    ns.api::<Plan>()
        .create(&PostParams::default(), plan)
        .await
        .expect("create plan");
}

async fn wait_plan(
    ns: &TestNamespace,
    name: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Plan) -> bool,
) -> Plan {
    support::plans::wait_until(&ns.api::<Plan>(), name, what, timeout, done).await
}

async fn node_labels(
    client: &kube::Client,
    names: &[String],
) -> BTreeMap<String, BTreeMap<String, String>> {
    let api = Api::<Node>::all(client.clone());
    let mut out = BTreeMap::new();
    for n in names {
        let node = api.get(n).await.expect("get node");
        out.insert(n.clone(), node.metadata.labels.unwrap_or_default());
    }
    out
}

fn rollout_plan(name: &str, pool: &str, concurrency: i64, extra: &str) -> Plan {
    plan_from_yaml(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: {name}
  annotations:
    slipway.test/complete-delay: "3s"
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
    command: [sh, -c]
    args: ["echo upgrading"]
{extra}"#
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolls_over_five_nodes_two_at_a_time() {
    let Some(s) = Scene::new("rollout").nodes(5).start().await else {
        return;
    };
    let ns = &s.ns;
    let jobs = support::jobwatch::watch_jobs(ns.api::<Job>());
    let _controller = ControllerProcess::start(&s.cluster, ns.name(), &[]);
    create_plan(ns, &rollout_plan("k3os-like", &s.pool, 2, "")).await;

    let plan = wait_plan(
        ns,
        "k3os-like",
        "the plan to complete",
        Duration::from_secs(120),
        is_complete,
    )
    .await;
    let status = plan.status.clone().expect("status");
    let hash = status.latest_hash.clone().expect("latestHash");
    assert_eq!(status.latest_version.as_deref(), Some("v1.30.1-k3s1"));
    assert_eq!(
        hash,
        slipway::plan::core::hash::latest_hash("v1.30.1-k3s1", "default", &[], &[]),
        "latestHash is SUC's"
    );
    for (node, labels) in node_labels(&s.client, &s.nodes).await {
        assert_eq!(
            labels.get("plan.upgrade.cattle.io/k3os-like"),
            Some(&hash),
            "{node} carries the plan label"
        );
    }
    let cordoned: Vec<Node> = Api::<Node>::all(s.client.clone())
        .list(&ListParams::default().labels(&s.pool_selector()))
        .await
        .expect("list nodes")
        .items
        .into_iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
        .collect();
    assert!(cordoned.is_empty(), "every node is uncordoned again");
    let out = s
        .cluster
        .kubectl(&[
            "-n",
            ns.name(),
            "wait",
            "--for=condition=Complete",
            "plan/k3os-like",
            "--timeout=10s",
        ])
        .await
        .expect("kubectl wait");
    assert!(out.contains("condition met"), "{out}");
    let watch = jobs.snapshot();
    assert!(
        watch.max_unfinished <= 2,
        "at most 2 jobs at once, saw {}",
        watch.max_unfinished
    );
    assert!(
        watch.uids.len() >= 5,
        "one job per node: {:?}",
        watch.uids.keys()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_rollout_loses_nothing_and_duplicates_nothing() {
    let Some(s) = Scene::new("crash").nodes(5).start().await else {
        return;
    };
    let ns = &s.ns;
    let jobs = support::jobwatch::watch_jobs(ns.api::<Job>());
    let mut controller = ControllerProcess::start(&s.cluster, ns.name(), &[]);
    create_plan(ns, &rollout_plan("crashy", &s.pool, 2, "")).await;
    // Kill the controller as soon as it has started some Jobs, twice.
    for round in 0..2 {
        let api = ns.api::<Job>();
        support::wait_for(
            &format!("jobs to start (round {round})"),
            Duration::from_secs(60),
            || async {
                let n = api.list(&ListParams::default()).await?.items.len();
                if n > round * 2 {
                    Ok(())
                } else {
                    Err(anyhow!("{n} jobs"))
                }
            },
        )
        .await;
        controller.restart();
    }
    wait_plan(
        ns,
        "crashy",
        "the plan to complete after crashes",
        Duration::from_secs(180),
        is_complete,
    )
    .await;
    let watch = jobs.snapshot();
    assert!(
        watch.max_unfinished <= 2,
        "at most 2 jobs at once, saw {}",
        watch.max_unfinished
    );
    for (name, uids) in &watch.uids {
        assert_eq!(uids.len(), 1, "job {name} was created more than once");
    }
    let hash = ns
        .api::<Plan>()
        .get("crashy")
        .await
        .expect("plan")
        .status
        .and_then(|s| s.latest_hash);
    for (node, labels) in node_labels(&s.client, &s.nodes).await {
        assert_eq!(
            labels.get("plan.upgrade.cattle.io/crashy"),
            hash.as_ref(),
            "{node}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_is_reported_and_fixing_the_plan_recovers() {
    let Some(s) = Scene::new("fail").nodes(1).start().await else {
        return;
    };
    let ns = &s.ns;
    let controller = ControllerProcess::builder(s.cluster.kubeconfig_path())
        .namespace(ns.name())
        .envs([("SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT", "0")])
        .metrics_port()
        .start();
    let mut plan = rollout_plan("failing", &s.pool, 1, "");
    plan.metadata.labels = Some([(support::FAIL_LABEL.to_string(), "true".to_string())].into());
    create_plan(ns, &plan).await;
    let failed = wait_plan(ns, "failing", "JobFailed", Duration::from_secs(90), |p| {
        condition_reason(p, "Complete").as_deref() == Some("JobFailed")
    })
    .await;
    let complete = condition(&failed, "Complete").expect("Complete");
    let (status, message) = (
        &complete.status,
        complete.message.clone().unwrap_or_default(),
    );
    assert_eq!(status, "False");
    assert!(
        message.starts_with(&format!("Job {}/apply-failing-on-", ns.name())),
        "{message}"
    );
    assert!(
        message.contains(&format!("failed on Node {}", s.nodes[0])),
        "{message}"
    );
    let events = s
        .cluster
        .kubectl(&[
            "-n",
            ns.name(),
            "get",
            "events",
            "-o",
            "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
        ])
        .await
        .expect("events");
    assert!(
        events.lines().any(|r| r == "JobFailed"),
        "JobFailed event: {events}"
    );

    // No automatic retry: the Job stays failed while the Plan is unchanged, whenever the
    // controller looks again.
    let jobs = jobs_of(ns, "failing").await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    settled(&controller, &ns.api(), &jobs[0]).await;
    let still = ns.api::<Plan>().get("failing").await.expect("plan");
    assert!(!is_complete(&still));
    // What GitOps tools and scripts read: the failed rollout is Stalled, with the Job's reason.
    s.kubectl_wait("plan/failing", "condition=Stalled", 60)
        .await;
    assert_eq!(
        condition_reason(&still, "Ready").as_deref(),
        Some("JobFailed")
    );

    // Editing the Plan (here: dropping the label that makes the pod fail) recovers.
    ns.api::<Plan>()
        .patch(
            "failing",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {support::FAIL_LABEL: null}}})),
        )
        .await
        .expect("fix plan");
    wait_plan(
        ns,
        "failing",
        "the fixed plan to complete",
        Duration::from_secs(90),
        is_complete,
    )
    .await;
    s.kubectl_wait("plan/failing", "condition=Ready", 60).await;
    s.kubectl_wait("plan/failing", "condition=Stalled=False", 60)
        .await;
}

/// `kubectl wait --for=<what> plan/failing`, as a script or a GitOps hook runs it.
/// The names of the Plan's Jobs.
async fn jobs_of(ns: &TestNamespace, plan: &str) -> Vec<String> {
    (ns.api::<Job>())
        .list(&ListParams::default().labels(&format!("upgrade.cattle.io/plan={plan}")))
        .await
        .expect("list jobs")
        .items
        .into_iter()
        .filter_map(|j| j.metadata.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_rerun_unless_ignored_and_disabled_nodes_are_skipped() {
    let Some(s) = Scene::new("secrets").nodes(3).start().await else {
        return;
    };
    let (ns, nodes) = (&s.ns, &s.nodes);
    a_disabled_node_and_two_secrets(ns, &s.client, &nodes[2]).await;
    let controller = ControllerProcess::builder(s.cluster.kubeconfig_path())
        .namespace(ns.name())
        .metrics_port()
        .start();
    let plan = rollout_plan(
        "with-secrets",
        &s.pool,
        2,
        "  secrets:\n  - {name: watched, path: watched}\n  - {name: ignored, path: ignored, ignoreUpdates: true}\n",
    );
    create_plan(ns, &plan).await;
    let first = wait_plan(
        ns,
        "with-secrets",
        "first rollout",
        Duration::from_secs(120),
        is_complete,
    )
    .await;
    let first_hash = first.status.and_then(|s| s.latest_hash).expect("hash");
    assert_disabled(&s.client, &nodes[2]).await;
    changing_the_ignored_secret_changes_nothing(ns, &controller, &first_hash).await;
    changing_the_watched_secret_reruns_every_enabled_node(ns, &s.client, nodes, &first_hash).await;
}

/// `disabled` opts out of the Plan `with-secrets`; Secrets `watched` and `ignored`.
async fn a_disabled_node_and_two_secrets(
    ns: &TestNamespace,
    client: &kube::Client,
    disabled: &str,
) {
    Api::<Node>::all(client.clone())
        .patch(
            disabled,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"plan.upgrade.cattle.io/with-secrets": "disabled"}}})),
        )
        .await
        .expect("disable node");
    let secrets = ns.api::<Secret>();
    for name in ["watched", "ignored"] {
        let s: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name}, "stringData": {"v": "1"}
        }))
        .expect("secret");
        secrets
            .create(&PostParams::default(), &s)
            .await
            .expect("create secret");
    }
}

/// The node's label of the Plan `with-secrets` says `disabled` still.
async fn assert_disabled(client: &kube::Client, node: &str) {
    let labels = node_labels(client, &[node.to_string()]).await;
    assert_eq!(
        labels[node]
            .get("plan.upgrade.cattle.io/with-secrets")
            .map(String::as_str),
        Some("disabled")
    );
}

/// Changing the ignored Secret changes nothing, when the controller looks at the Plan again.
async fn changing_the_ignored_secret_changes_nothing(
    ns: &TestNamespace,
    controller: &ControllerProcess,
    first_hash: &str,
) {
    let secrets = ns.api::<Secret>();
    secrets
        .patch(
            "ignored",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"v": "2"}})),
        )
        .await
        .expect("patch ignored secret");
    let jobs = jobs_of(ns, "with-secrets").await;
    settled(controller, &ns.api(), &jobs[0]).await;
    let after_ignored = ns.api::<Plan>().get("with-secrets").await.expect("plan");
    assert_eq!(
        after_ignored.status.and_then(|s| s.latest_hash).as_ref(),
        Some(&first_hash.to_string())
    );
}

/// Changing the watched Secret re-runs the Plan on every enabled node.
async fn changing_the_watched_secret_reruns_every_enabled_node(
    ns: &TestNamespace,
    client: &kube::Client,
    nodes: &[String],
    first_hash: &str,
) {
    let secrets = ns.api::<Secret>();
    secrets
        .patch(
            "watched",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"v": "2"}})),
        )
        .await
        .expect("patch watched secret");
    let second = wait_plan(
        ns,
        "with-secrets",
        "rollout after the secret changed",
        Duration::from_secs(120),
        |p| {
            is_complete(p)
                && p.status.as_ref().and_then(|s| s.latest_hash.as_ref())
                    != Some(&first_hash.to_string())
        },
    )
    .await;
    let second_hash = second.status.and_then(|s| s.latest_hash).expect("hash");
    let labels = node_labels(client, nodes).await;
    for n in &nodes[..2] {
        assert_eq!(
            labels[n].get("plan.upgrade.cattle.io/with-secrets"),
            Some(&second_hash),
            "{n}"
        );
    }
    assert_disabled(client, &nodes[2]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_plan_follows_its_channel() {
    let Some(s) = Scene::new("channel").nodes(2).start().await else {
        return;
    };
    let (ns, client) = (&s.ns, &s.client);
    let target = Arc::new(Mutex::new("v1.30.1+k3s1".to_string()));
    let url = support::channel_server(target.clone()).await;
    let _controller = ControllerProcess::start(
        &s.cluster,
        ns.name(),
        &[("SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL", "61s")],
    );
    let mut plan = rollout_plan("follow", &s.pool, 2, "");
    plan.spec.version = None;
    plan.spec.channel = Some(url);
    create_plan(ns, &plan).await;
    let first = wait_plan(
        ns,
        "follow",
        "the channel version to roll out",
        Duration::from_secs(90),
        is_complete,
    )
    .await;
    let status = first.status.expect("status");
    assert_eq!(status.latest_version.as_deref(), Some("v1.30.1-k3s1"));
    assert_eq!(
        current_reason(ns, "follow", "LatestResolved").await,
        "Channel"
    );

    *target.lock().expect("lock") = "v1.31.0+k3s1".to_string();
    let second = wait_plan(
        ns,
        "follow",
        "the new channel version to roll out",
        Duration::from_secs(150),
        |p| {
            is_complete(p)
                && p.status.as_ref().and_then(|s| s.latest_version.as_deref())
                    == Some("v1.31.0-k3s1")
        },
    )
    .await;
    let hash = second.status.and_then(|s| s.latest_hash).expect("hash");
    assert_ne!(Some(&hash), status.latest_hash.as_ref());
    for (node, labels) in node_labels(client, &s.nodes).await {
        assert_eq!(
            labels.get("plan.upgrade.cattle.io/follow"),
            Some(&hash),
            "{node} ran again"
        );
    }
}

async fn current_reason(ns: &TestNamespace, plan: &str, type_: &str) -> String {
    let p = ns.api::<Plan>().get(plan).await.expect("plan");
    condition_reason(&p, type_).unwrap_or_default()
}

/// Who cordoned a node, as slipway records it on the node.
const CORDONED_BY: &str = "slipway.dev/cordoned-by";

async fn node_cordon(client: &kube::Client, name: &str) -> (bool, Option<String>) {
    let node = Api::<Node>::all(client.clone())
        .get(name)
        .await
        .expect("get node");
    let unschedulable = node.spec.and_then(|s| s.unschedulable).unwrap_or(false);
    let record = node
        .metadata
        .annotations
        .and_then(|a| a.get(CORDONED_BY).cloned());
    (unschedulable, record)
}

/// SUC #71 and #341: deleting a Plan whose Jobs failed uncordons the node its Job cordoned (and
/// deletes its Jobs), but never a node an admin cordoned before the Plan; and a Plan with
/// `concurrency: 0` says why nothing happens instead of claiming it is complete (SUC #217).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_plan_undoes_its_cordons_and_only_those() {
    let Some(s) = Scene::new("delete").nodes(2).start().await else {
        return;
    };
    let (ns, client) = (&s.ns, &s.client);
    let (mine, admins) = (&s.nodes[0], &s.nodes[1]);
    support::set_unschedulable(client, admins, true).await;
    let _controller = ControllerProcess::start(
        &s.cluster,
        ns.name(),
        &[("SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT", "0")],
    );

    let idle = rollout_plan("idle", &s.pool, 0, "");
    create_plan(ns, &idle).await;
    let idle = wait_plan(ns, "idle", "NoConcurrency", Duration::from_secs(60), |p| {
        condition_reason(p, "Complete").as_deref() == Some("NoConcurrency")
    })
    .await;
    let complete = condition(&idle, "Complete").expect("Complete");
    let (status, message) = (
        &complete.status,
        complete.message.clone().unwrap_or_default(),
    );
    assert_eq!(status, "False");
    assert!(message.starts_with("spec.concurrency is 0"), "{message}");
    ns.api::<Plan>()
        .delete("idle", &Default::default())
        .await
        .expect("delete the idle Plan");

    let mut plan = rollout_plan("failing", &s.pool, 2, "");
    plan.metadata.labels = Some([(support::FAIL_LABEL.to_string(), "true".to_string())].into());
    create_plan(ns, &plan).await;
    let failed = wait_plan(ns, "failing", "JobFailed", Duration::from_secs(90), |p| {
        condition_reason(p, "Complete").as_deref() == Some("JobFailed")
            && p.status.as_ref().is_some_and(|s| s.applying.len() == 2)
    })
    .await;
    assert!(
        failed
            .metadata
            .finalizers
            .unwrap_or_default()
            .contains(&"slipway.dev/plan-cleanup".to_string())
    );
    // Recorded before the Jobs were created.
    assert_eq!(
        node_cordon(client, mine).await,
        (false, Some(format!("plan/{}/failing", ns.name())))
    );
    assert_eq!(
        node_cordon(client, admins).await,
        (true, Some("admin".into()))
    );
    // What the Job's cordon container does on a real node (kwok runs no process).
    support::set_unschedulable(client, mine, true).await;

    ns.api::<Plan>()
        .delete("failing", &Default::default())
        .await
        .expect("delete the failing Plan");
    support::wait_for("the Plan to go", Duration::from_secs(60), || async {
        match ns.api::<Plan>().get_opt("failing").await? {
            None => Ok(()),
            Some(p) => Err(anyhow!("still there: {:?}", p.metadata.finalizers)),
        }
    })
    .await;
    assert_eq!(
        node_cordon(client, mine).await,
        (false, None),
        "the Job's cordon is undone, the record forgotten"
    );
    assert_eq!(
        node_cordon(client, admins).await,
        (true, Some("admin".into())),
        "the admin's cordon stays"
    );
    let jobs = ns
        .api::<Job>()
        .list(&ListParams::default().labels("upgrade.cattle.io/plan=failing"))
        .await
        .expect("list jobs");
    assert!(
        jobs.items
            .iter()
            .all(|j| j.metadata.deletion_timestamp.is_some()),
        "its Jobs are deleted: {:?}",
        jobs.items
            .iter()
            .map(|j| &j.metadata.name)
            .collect::<Vec<_>>()
    );
}

/// Whether the Plan carries slipway's finalizer.
fn finalized(plan: &Plan) -> bool {
    (plan.metadata.finalizers.iter().flatten()).any(|f| f == "slipway.dev/plan-cleanup")
}

/// Uninstalled with its Plans (`kubectl delete -f dist/slipway.yaml`, the namespace deleted, SUC's
/// own e2e suite at the end of each spec): the namespace goes although the controller goes with
/// it. A Plan at rest holds no finalizer (one that cordons and rolled out; one whose Job failed
/// without a cordon); one that holds a node its Job cordoned gives it back while the controller
/// is still there, and then lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_deleted_with_its_controller_and_plans_goes() {
    let Some(s) = Scene::new("uninstall").nodes(3).start().await else {
        return;
    };
    let (ns, client) = (&s.ns, &s.client);
    let mut controller = ControllerProcess::start(&s.cluster, ns.name(), &[]);
    create_plan(ns, &rollout_plan("done", &s.pool, 3, "")).await;
    let done = wait_plan(
        ns,
        "done",
        "rolled out, holding nothing",
        Duration::from_secs(120),
        |p| is_complete(p) && !finalized(p),
    )
    .await;
    assert!(done.status.is_some_and(|s| s.applying.is_empty()));
    let mut failing = rollout_plan("failing", &s.pool, 1, "");
    failing.spec.cordon = Some(false);
    failing.metadata.labels = Some([(support::FAIL_LABEL.to_string(), "true".to_string())].into());
    create_plan(ns, &failing).await;
    let failed = wait_plan(ns, "failing", "JobFailed", Duration::from_secs(90), |p| {
        condition_reason(p, "Complete").as_deref() == Some("JobFailed")
    })
    .await;
    assert!(
        !finalized(&failed),
        "a Plan that cordons nothing holds nothing"
    );
    // Its Job runs for a long time: the node stays cordoned, held by the Plan.
    let mut holding = rollout_plan("holding", &s.pool, 1, "");
    holding.metadata.annotations = Some(
        [(
            support::COMPLETE_DELAY_ANNOTATION.to_string(),
            "600s".to_string(),
        )]
        .into(),
    );
    holding.spec.version = Some("v1.31.0+k3s1".into());
    create_plan(ns, &holding).await;
    let held = wait_plan(ns, "holding", "a node held", Duration::from_secs(90), |p| {
        finalized(p) && p.status.as_ref().is_some_and(|s| s.applying.len() == 1)
    })
    .await;
    let node = held
        .status
        .map(|s| s.applying[0].clone())
        .unwrap_or_default();
    let record = format!("plan/{}/holding", ns.name());
    assert_eq!(node_cordon(client, &node).await.1, Some(record));
    support::set_unschedulable(client, &node, true).await;

    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
    namespaces
        .delete(ns.name(), &Default::default())
        .await
        .expect("delete the namespace");
    support::wait_for(
        "the held node given back",
        Duration::from_secs(60),
        || async {
            match node_cordon(client, &node).await {
                (false, None) => Ok(()),
                other => Err(anyhow!("{node}: {other:?}")),
            }
        },
    )
    .await;
    // The controller goes with its namespace, as its pod would.
    controller.kill();
    support::wait_for("the namespace gone", Duration::from_secs(120), || async {
        match namespaces.get_opt(ns.name()).await? {
            None => Ok(()),
            Some(n) => Err(anyhow!(
                "{:?}, Plans left: {:?}",
                n.status.and_then(|s| s.phase),
                ns.api::<Plan>()
                    .list(&ListParams::default())
                    .await
                    .map(|l| l
                        .items
                        .iter()
                        .map(|p| (p.name_any(), p.metadata.finalizers.clone()))
                        .collect::<Vec<_>>())
            )),
        }
    })
    .await;
}
