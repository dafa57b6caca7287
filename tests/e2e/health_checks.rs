//! Health checks on the local cluster, a scene each: a Plan whose check on a ConfigMap fails
//! starts no node, also when the controller reads the check again, says which check and why
//! (status, `Complete`, an Event), and rolls out by itself once the ConfigMap's data makes the
//! check hold; a check on a kind the cluster does not serve says so. Both scenes share the
//! cluster.

use std::time::Duration;

use crate::support::controller::ControllerProcess;
use crate::support::jobwatch::watch_jobs;
use crate::support::plans::{
    complete_message, is_complete, plan_from_yaml, wait_reason, wait_until,
};
use crate::support::scene::Scene;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::json;
use slipway::plan::api::Plan;

fn plan(name: &str, pool: &str, check: &str) -> Plan {
    plan_from_yaml(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: {name}
  annotations:
    slipway.test/complete-delay: "2s"
spec:
  concurrency: 1
  version: v1.30.1+k3s1
  serviceAccountName: default
  nodeSelector:
    matchLabels:
      slipway.test/pool: {pool}
  upgrade:
    image: rancher/k3s-upgrade
  healthChecks:
  - {check}
"#
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_on_a_config_map_holds_the_rollout_until_its_data_changes() {
    let Some(s) = Scene::new("hc-cm").nodes(2).start().await else {
        return;
    };
    let ns = &s.ns;
    let gate: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "gate"}, "data": {"state": "rebalancing"}
    }))
    .expect("a ConfigMap");
    ns.api::<ConfigMap>()
        .create(&PostParams::default(), &gate)
        .await
        .expect("create the ConfigMap");
    let controller = ControllerProcess::builder(s.cluster.kubeconfig_path())
        .namespace(ns.name())
        .metrics_port()
        .start();
    let check = format!(
        "{{apiVersion: v1, kind: ConfigMap, namespace: {}, name: gate, expr: \"data.state == 'ok'\"}}",
        ns.name()
    );
    let jobs = watch_jobs(ns.api());
    ns.api::<Plan>()
        .create(&PostParams::default(), &plan("gated", &s.pool, &check))
        .await
        .expect("create plan");
    let held = wait_reason(
        &ns.api(),
        "gated",
        "HealthCheckFailing",
        Duration::from_secs(60),
    )
    .await;
    let message = complete_message(&held);
    assert!(
        message.contains(&format!("ConfigMap {}/gate", ns.name())),
        "{message}"
    );
    let status = held.status.clone().unwrap_or_default();
    assert_eq!(status.health_checks.len(), 1);
    assert!(!status.health_checks[0].healthy);
    assert!(status.applying.is_empty());
    // Read again at its recheck (every 10 s; nothing else changes): it keeps holding, and no Job
    // is ever created.
    controller.reconciled_after("plan", async {}).await;
    assert_eq!(
        jobs.snapshot().uids.len(),
        0,
        "no node starts while the check fails"
    );
    assert!(
        ns.event_reasons()
            .await
            .iter()
            .any(|r| r == "HealthCheckFailing")
    );
    ns.api::<ConfigMap>()
        .patch(
            "gate",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"state": "ok"}})),
        )
        .await
        .expect("patch the ConfigMap");
    let done = wait_until(
        &ns.api::<Plan>(),
        "gated",
        "gated: complete",
        Duration::from_secs(90),
        is_complete,
    )
    .await;
    assert!(done.status.unwrap_or_default().health_checks[0].healthy);
    assert_eq!(
        jobs.snapshot().uids.len(),
        2,
        "both nodes upgraded once the check held"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_on_a_kind_the_cluster_does_not_serve_says_so() {
    let Some(s) = Scene::new("hc-kind").nodes(1).start().await else {
        return;
    };
    let ns = &s.ns;
    let _controller = ControllerProcess::start(&s.cluster, ns.name(), &[]);
    let check = "{apiVersion: ceph.rook.io/v1, kind: CephCluster, name: rook-ceph, expr: \"status.ceph.health == 'HEALTH_OK'\"}";
    ns.api::<Plan>()
        .create(&PostParams::default(), &plan("ceph", &s.pool, check))
        .await
        .expect("create plan");
    let held = wait_reason(
        &ns.api(),
        "ceph",
        "HealthCheckFailing",
        Duration::from_secs(60),
    )
    .await;
    let status = held.status.unwrap_or_default();
    let message = status.health_checks[0].message.clone().unwrap_or_default();
    assert!(message.contains("ceph.rook.io/v1"), "{message}");
    assert!(message.contains("CephCluster"), "{message}");
}
