//! Hooks on the local cluster, a scene each: a Plan's pre hook runs to completion before its first
//! node's Job is created and its post hook once the last node is done; a failed pre hook touches
//! no node (no Job, no label, no cordon, whenever the controller looks again) and says so in
//! `status`, `Complete` and an Event. Both scenes share the cluster.

use crate::support;

use std::time::Duration;

use crate::support::TestNamespace;
use crate::support::controller::ControllerProcess;
use crate::support::plans::{
    complete_message, is_complete, plan_from_yaml, settled, wait_reason, wait_until,
};
use crate::support::scene::Scene;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, PostParams};
use slipway::plan::api::{HookPhase, Plan};

const HOOK: &str = "slipway.dev/hook";

/// A Plan whose hooks' pods carry `pod_labels` (a YAML flow mapping) and run on the scene's own nodes:
/// on another scene's node, deleted when that scene ends, a hook's pod is lost and its Job fails.
fn plan(name: &str, pool: &str, pod_labels: &str) -> Plan {
    plan_from_yaml(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: {name}
spec:
  concurrency: 1
  cordon: true
  version: v1.30.1+k3s1
  serviceAccountName: default
  nodeSelector:
    matchLabels:
      slipway.test/pool: {pool}
  upgrade:
    image: rancher/k3s-upgrade
  hooks:
    pre:
      backoffLimit: 0
      template:
        metadata:
          labels: {pod_labels}
        spec:
          nodeSelector:
            slipway.test/pool: {pool}
          containers:
          - name: snapshot
            image: rancher/k3s
            command: [k3s, etcd-snapshot, save]
    post:
      backoffLimit: 0
      template:
        spec:
          nodeSelector:
            slipway.test/pool: {pool}
          containers:
          - name: notify
            image: curlimages/curl
            args: [https://hooks.example/done]
"#
    ))
}

async fn jobs(ns: &TestNamespace) -> Vec<Job> {
    ns.api::<Job>()
        .list(&ListParams::default())
        .await
        .expect("list jobs")
        .items
}

fn hook_of(job: &Job) -> Option<&str> {
    job.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(HOOK))
        .map(String::as_str)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pre_hook_runs_before_the_first_node_and_the_post_hook_after_the_last() {
    let Some(s) = Scene::new("hooks-ok").nodes(2).start().await else {
        return;
    };
    let ns = &s.ns;
    let _controller = ControllerProcess::start(&s.cluster, ns.name(), &[]);
    ns.api::<Plan>()
        .create(&PostParams::default(), &plan("hooked", &s.pool, "{}"))
        .await
        .expect("create plan");
    let done = wait_until(
        &ns.api::<Plan>(),
        "hooked",
        "hooked: complete, post hook done",
        Duration::from_secs(120),
        |p| {
            is_complete(p)
                && p.status
                    .as_ref()
                    .and_then(|s| s.hooks.as_ref())
                    .and_then(|h| h.post.as_ref())
                    .is_some_and(|h| h.phase == HookPhase::Succeeded)
        },
    )
    .await;
    let hooks = done.status.and_then(|s| s.hooks).expect("status.hooks");
    assert_eq!(hooks.pre.expect("pre").phase, HookPhase::Succeeded);
    let all = jobs(ns).await;
    let pre: Vec<&Job> = all.iter().filter(|j| hook_of(j) == Some("pre")).collect();
    let post: Vec<&Job> = all.iter().filter(|j| hook_of(j) == Some("post")).collect();
    assert_eq!((pre.len(), post.len()), (1, 1), "each hook ran once");
    let pre_done = pre[0]
        .status
        .as_ref()
        .and_then(|s| s.completion_time.clone())
        .expect("the pre hook completed");
    let post_created = post[0]
        .metadata
        .creation_timestamp
        .clone()
        .expect("created");
    let nodes: Vec<&Job> = all.iter().filter(|j| hook_of(j).is_none()).collect();
    assert_eq!(nodes.len(), 2);
    for job in nodes {
        let created = job.metadata.creation_timestamp.clone().expect("created");
        assert!(
            created.0 >= pre_done.0,
            "a node's Job before the pre hook completed"
        );
        let finished = job.status.as_ref().and_then(|s| s.completion_time.clone());
        assert!(
            finished.is_some_and(|f| f.0 <= post_created.0),
            "the post hook before a node was done"
        );
    }
    let reasons = ns.event_reasons().await;
    assert!(reasons.iter().any(|r| r == "HookSucceeded"), "{reasons:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_pre_hook_touches_no_node() {
    let Some(s) = Scene::new("hooks-fail").nodes(2).start().await else {
        return;
    };
    let ns = &s.ns;
    let controller = ControllerProcess::builder(s.cluster.kubeconfig_path())
        .namespace(ns.name())
        .metrics_port()
        .start();
    let labels = format!("{{{}: \"true\"}}", support::FAIL_LABEL);
    ns.api::<Plan>()
        .create(&PostParams::default(), &plan("broken", &s.pool, &labels))
        .await
        .expect("create plan");
    let stopped = wait_reason(
        &ns.api(),
        "broken",
        "PreHookFailed",
        Duration::from_secs(60),
    )
    .await;
    let message = complete_message(&stopped);
    assert!(message.contains("no node is touched"), "{message}");
    let pre = stopped
        .status
        .and_then(|s| s.hooks)
        .and_then(|h| h.pre)
        .expect("status.hooks.pre");
    assert_eq!(pre.phase, HookPhase::Failed);
    // When the controller looks again (the pre hook's Job changed), still nothing on any node.
    let hook = (jobs(ns).await.into_iter())
        .find(|j| hook_of(j) == Some("pre"))
        .and_then(|j| j.metadata.name)
        .expect("the pre hook's Job");
    settled(&controller, &ns.api(), &hook).await;
    let all = jobs(ns).await;
    assert!(
        all.iter().all(|j| hook_of(j) == Some("pre")),
        "only the pre hook ran: {all:?}"
    );
    let api = Api::<Node>::all(ns.client());
    for name in &s.nodes {
        let node = api.get(name).await.expect("node");
        let labels = node.metadata.labels.unwrap_or_default();
        assert!(
            !labels.contains_key("plan.upgrade.cattle.io/broken"),
            "{name} labelled"
        );
        let cordoned = node.spec.and_then(|s| s.unschedulable).unwrap_or(false);
        assert!(!cordoned, "{name} cordoned");
    }
    let reasons = ns.event_reasons().await;
    assert!(reasons.iter().any(|r| r == "HookFailed"), "{reasons:?}");
}
