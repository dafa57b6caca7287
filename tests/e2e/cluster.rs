//! End-to-end checks of the local test cluster itself (tests/cluster/): fake nodes become Ready
//! and keep their bootID, and Job pods run, complete, fail or hold as the kwok stages promise;
//! the tests' kubectl reaches the cluster. One shared scene each, on nodes of its own.

use crate::support;

use std::time::Duration;

use crate::support::scene::Scene;
use crate::support::{FAIL_LABEL, HOLD_LABEL};
use anyhow::anyhow;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

const TIMEOUT: Duration = Duration::from_secs(60);

/// A Job with one pod pinned to `node` by required node affinity, backoffLimit 0.
fn pinned_job(name: &str, node: &str, pod_labels: serde_json::Value) -> Job {
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": {
                    "restartPolicy": "Never",
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [{
                            "key": "kubernetes.io/hostname", "operator": "In", "values": [node],
                        }]}],
                    }}},
                    "containers": [{
                        "name": "main",
                        "image": "busybox:1.36",
                        "command": ["sh", "-c", "true"],
                    }],
                },
            },
        },
    }))
    .expect("valid Job literal")
}

fn job_condition(job: &Job, type_: &str) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == type_ && c.status == "True"))
}

async fn job_pods(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .expect("listing job pods")
        .items
}

/// Waits until the Job has condition `type_` (Complete or Failed).
async fn wait_job_condition(jobs: &Api<Job>, name: &str, type_: &str) -> Job {
    support::wait_for(&format!("job {name} to be {type_}"), TIMEOUT, || async {
        let job = jobs.get(name).await?;
        if job_condition(&job, type_) {
            Ok(job)
        } else {
            Err(anyhow!("status: {:?}", job.status))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_nodes_are_ready_and_keep_their_boot_id() {
    let Some(s) = Scene::new("boot")
        .nodes(2)
        .label("slipway.test/case", "boot")
        .start()
        .await
    else {
        return;
    };
    let api = Api::<Node>::all(s.client.clone());
    let mut boot_ids = Vec::new();
    for name in &s.nodes {
        let node = api.get(name).await.expect("get node");
        let info = node.status.and_then(|s| s.node_info).expect("nodeInfo");
        assert_eq!(info.kubelet_version, "v1.34.4");
        assert_eq!(
            info.boot_id.len(),
            36,
            "bootID {:?} on {name}",
            info.boot_id
        );
        let labels = node.metadata.labels.unwrap_or_default();
        assert_eq!(labels.get("kubernetes.io/hostname"), Some(name));
        assert_eq!(
            labels.get("slipway.test/case").map(String::as_str),
            Some("boot")
        );
        boot_ids.push(info.boot_id);
    }
    assert_ne!(boot_ids[0], boot_ids[1], "bootIDs must differ per node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_pinned_to_a_node_completes_there() {
    let Some(s) = Scene::new("job-complete").nodes(1).start().await else {
        return;
    };
    let jobs: Api<Job> = s.ns.api();
    jobs.create(
        &PostParams::default(),
        &pinned_job("ok", &s.nodes[0], json!({})),
    )
    .await
    .expect("create job");

    let job = wait_job_condition(&jobs, "ok", "Complete").await;
    assert_eq!(job.status.and_then(|s| s.succeeded), Some(1));
    let pods = job_pods(&s.ns.api(), "ok").await;
    assert_eq!(pods.len(), 1, "{pods:?}");
    let pod = &pods[0];
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(s.nodes[0].as_str())
    );
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_with_fail_label_fails() {
    let Some(s) = Scene::new("job-fail").nodes(1).start().await else {
        return;
    };
    let jobs: Api<Job> = s.ns.api();
    jobs.create(
        &PostParams::default(),
        &pinned_job("bad", &s.nodes[0], json!({FAIL_LABEL: "true"})),
    )
    .await
    .expect("create job");

    let job = wait_job_condition(&jobs, "bad", "Failed").await;
    assert_eq!(job.status.and_then(|s| s.failed), Some(1));
    let pods = job_pods(&s.ns.api(), "bad").await;
    assert_eq!(pods.len(), 1, "{pods:?}");
    let status = pods[0].status.clone().expect("pod status");
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    let terminated = status
        .container_statuses
        .and_then(|c| c.into_iter().next())
        .and_then(|c| c.state)
        .and_then(|s| s.terminated)
        .expect("terminated container state");
    assert_eq!(terminated.exit_code, 1);
    assert_eq!(terminated.reason.as_deref(), Some("Error"));
}

/// A held pod stays Running: a Job without the label, started on the same node after the held
/// pod runs, completes (kwok's delay has passed for both) while the held one is still active.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_with_hold_label_stays_active() {
    let Some(s) = Scene::new("job-hold").nodes(1).start().await else {
        return;
    };
    let jobs: Api<Job> = s.ns.api();
    jobs.create(
        &PostParams::default(),
        &pinned_job("held", &s.nodes[0], json!({HOLD_LABEL: "true"})),
    )
    .await
    .expect("create job");

    let pods: Api<Pod> = s.ns.api();
    support::wait_for("the held pod to be Running", TIMEOUT, || async {
        let phases: Vec<_> = job_pods(&pods, "held")
            .await
            .into_iter()
            .map(|p| p.status.and_then(|s| s.phase))
            .collect();
        if phases == [Some("Running".to_owned())] {
            Ok(())
        } else {
            Err(anyhow!("pod phases: {phases:?}"))
        }
    })
    .await;
    // The yardstick: the same Job without the label, on the same node, started later.
    jobs.create(
        &PostParams::default(),
        &pinned_job("unheld", &s.nodes[0], json!({})),
    )
    .await
    .expect("create job");
    wait_job_condition(&jobs, "unheld", "Complete").await;
    let job = jobs.get("held").await.expect("get job");
    assert_eq!(
        job.status.as_ref().and_then(|s| s.active),
        Some(1),
        "{job:?}"
    );
    assert!(!job_condition(&job, "Complete") && !job_condition(&job, "Failed"));
    let phases: Vec<_> = job_pods(&pods, "held")
        .await
        .into_iter()
        .map(|p| p.status.and_then(|s| s.phase))
        .collect();
    assert_eq!(phases, [Some("Running".to_owned())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_helper_talks_to_the_cluster() {
    let Some(s) = Scene::new("kubectl").start().await else {
        return;
    };
    let out = s
        .cluster
        .kubectl(&["get", "namespace", "default", "-o", "name"])
        .await
        .expect("kubectl get namespace");
    assert_eq!(out.trim(), "namespace/default");
}
