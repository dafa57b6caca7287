//! End-to-end checks of the local test cluster itself (tests/cluster/): fake nodes become Ready
//! and keep their bootID, and Job pods run, complete, fail or hold as the kwok stages promise.

use crate::support;

use std::time::Duration;

use crate::support::{FAIL_LABEL, HOLD_LABEL, TestNamespace};
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

#[tokio::test]
async fn fake_nodes_are_ready_and_keep_their_boot_id() {
    let Some(cluster) = support::cluster().await else {
        return;
    };
    let client = cluster.client().await;
    let nodes = support::create_nodes(&client, "boot", 2, &[("slipway.test/case", "boot")]).await;
    let api = Api::<Node>::all(client.clone());
    let mut boot_ids = Vec::new();
    for name in &nodes {
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
    support::delete_nodes(&client, &nodes).await;
}

#[tokio::test]
async fn job_pinned_to_a_node_completes_there() {
    let Some(cluster) = support::cluster().await else {
        return;
    };
    let client = cluster.client().await;
    let ns = TestNamespace::create(&cluster, "job-complete").await;
    let nodes = support::create_nodes(&client, "complete", 1, &[]).await;
    let jobs: Api<Job> = ns.api();
    jobs.create(
        &PostParams::default(),
        &pinned_job("ok", &nodes[0], json!({})),
    )
    .await
    .expect("create job");

    let job = wait_job_condition(&jobs, "ok", "Complete").await;
    assert_eq!(job.status.and_then(|s| s.succeeded), Some(1));
    let pods = job_pods(&ns.api(), "ok").await;
    assert_eq!(pods.len(), 1, "{pods:?}");
    let pod = &pods[0];
    assert_eq!(
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()),
        Some(nodes[0].as_str())
    );
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded")
    );

    ns.cleanup().await;
    support::delete_nodes(&client, &nodes).await;
}

#[tokio::test]
async fn job_with_fail_label_fails() {
    let Some(cluster) = support::cluster().await else {
        return;
    };
    let client = cluster.client().await;
    let ns = TestNamespace::create(&cluster, "job-fail").await;
    let nodes = support::create_nodes(&client, "fail", 1, &[]).await;
    let jobs: Api<Job> = ns.api();
    jobs.create(
        &PostParams::default(),
        &pinned_job("bad", &nodes[0], json!({FAIL_LABEL: "true"})),
    )
    .await
    .expect("create job");

    let job = wait_job_condition(&jobs, "bad", "Failed").await;
    assert_eq!(job.status.and_then(|s| s.failed), Some(1));
    let pods = job_pods(&ns.api(), "bad").await;
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

    ns.cleanup().await;
    support::delete_nodes(&client, &nodes).await;
}

#[tokio::test]
async fn job_with_hold_label_stays_active() {
    let Some(cluster) = support::cluster().await else {
        return;
    };
    let client = cluster.client().await;
    let ns = TestNamespace::create(&cluster, "job-hold").await;
    let nodes = support::create_nodes(&client, "hold", 1, &[]).await;
    let jobs: Api<Job> = ns.api();
    jobs.create(
        &PostParams::default(),
        &pinned_job("held", &nodes[0], json!({HOLD_LABEL: "true"})),
    )
    .await
    .expect("create job");

    let pods: Api<Pod> = ns.api();
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
    // A pod without the label completes after ~1 s; this one must still be running well after.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let job = jobs.get("held").await.expect("get job");
    assert_eq!(
        job.status.as_ref().and_then(|s| s.active),
        Some(1),
        "{job:?}"
    );
    assert!(!job_condition(&job, "Complete") && !job_condition(&job, "Failed"));

    ns.cleanup().await;
    support::delete_nodes(&client, &nodes).await;
}

#[tokio::test]
async fn kubectl_helper_talks_to_the_cluster() {
    let Some(cluster) = support::cluster().await else {
        return;
    };
    let out = cluster
        .kubectl(&["get", "namespace", "default", "-o", "name"])
        .await
        .expect("kubectl get namespace");
    assert_eq!(out.trim(), "namespace/default");
}
