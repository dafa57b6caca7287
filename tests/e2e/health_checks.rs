//! Health checks on the local cluster, a scene each: a Plan whose check on a ConfigMap fails
//! starts no node, also when the controller reads the check again, says which check and why
//! (status, `Complete`, an Event), and rolls out by itself once the ConfigMap's data makes the
//! check hold; a check on a kind the cluster does not serve says so; a RebootPolicy's checks read
//! only what the health checks' account may read, and never say what they read.

use std::time::Duration;

use crate::reboot_policy::{
    create_policy, delete_policy, node_entry, policies, policy_scene, status_of,
};
use crate::support;
use crate::support::checks;
use crate::support::controller::ControllerProcess;
use crate::support::jobwatch::watch_jobs;
use crate::support::plans::{
    complete_message, is_complete, plan_from_yaml, wait_reason, wait_until,
};
use crate::support::reboots::reboot_pods;
use crate::support::scene::Scene;
use anyhow::anyhow;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use slipway::plan::api::Plan;
use slipway::reboot_policy::api::RebootPolicy;

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
    let rules = json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]);
    checks::grant(&s.client, ns.name(), ns.name(), "read-gate", rules).await;
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

/// What the Secret of [`a_check_reads_only_what_its_account_may`] holds, and its base64 (how a
/// Secret's `data` shows it): neither may appear in any status or event.
const SECRET_VALUE: &str = "hunter2-a7f3";
const SECRET_VALUE_B64: &str = "aHVudGVyMi1hN2Yz";

/// A RebootPolicy's checks read only what the health checks' account may read, though the
/// controller (run here with an administrator's rights) may read anything: a check on a Secret
/// and one on the namespace's pods read nothing, say so naming the account and the right, and
/// hold the reboot. Once the account may get the Secret, its check reads it, and its expression
/// (which gives the Secret's data, not a bool) is reported by type: no status or event of the
/// policy ever carries the Secret's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_reads_only_what_its_account_may() {
    let Some((s, _controller)) = policy_scene("hc-account", 1).await else {
        return;
    };
    let (client, ns) = (&s.client, s.ns.name());
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "credentials"}, "stringData": {"password": SECRET_VALUE}
    }))
    .expect("a Secret");
    s.ns.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .expect("create the Secret");
    // A pod that carries the value in its spec, scheduled nowhere.
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "app"},
        "spec": {"nodeSelector": {"slipway.test/nowhere": "true"},
                 "containers": [{"name": "app", "image": "busybox",
                                 "env": [{"name": "PASSWORD", "value": SECRET_VALUE}]}]}
    }))
    .expect("a Pod");
    s.ns.api::<Pod>()
        .create(&PostParams::default(), &pod)
        .await
        .expect("create the Pod");
    let checks = json!([
        {"apiVersion": "v1", "kind": "Secret", "namespace": ns, "name": "credentials",
         "expr": "object.data"},
        {"apiVersion": "v1", "kind": "Pod", "namespace": ns,
         "expr": "spec.containers[0].env[0].value == 'guess'"},
    ]);
    let policy = create_policy(&s, "secret", json!({"healthChecks": checks})).await;
    let policies = policies(&s);
    let node = s.nodes[0].clone();
    support::ask_reboot(client, &node).await;
    let account = format!("account {ns}/system-upgrade-health-checks");
    let held = wait_check_messages(&policies, &policy, |m| {
        m[0].contains(&format!(
            "{account} may not get secrets (core group) in namespace {ns}"
        )) && m[1].contains(&format!(
            "{account} may not list pods (core group) in namespace {ns}"
        ))
    })
    .await;
    let entry = node_entry(&held, &node).cloned().unwrap_or_default();
    assert_eq!(entry["reason"], "HealthCheckFailing", "{held}");
    assert!(
        reboot_pods(ns, client, &policy).await.is_empty(),
        "no reboot while the checks read nothing"
    );
    let rules = json!([{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
                        "resourceNames": ["credentials"]}]);
    checks::grant(client, ns, ns, "read-credentials", rules).await;
    let read = wait_check_messages(&policies, &policy, |m| {
        m[0].contains("gave a map, not a bool")
    })
    .await;
    assert!(
        read["healthChecks"][1]["message"]
            .as_str()
            .is_some_and(|m| m.contains("may not list pods"))
    );
    let told = format!(
        "{}\n{}",
        status_of(&policies, &policy).await,
        notes_about(client, &policy).await
    );
    for value in [SECRET_VALUE, SECRET_VALUE_B64] {
        assert!(
            !told.contains(value),
            "{value} in what the policy says: {told}"
        );
    }
    delete_policy(&policies, &policy).await;
}

/// Waits (up to 60 s) until the messages of `policy`'s health checks satisfy `done`; its status.
async fn wait_check_messages(
    api: &Api<RebootPolicy>,
    policy: &str,
    done: impl Fn(&[String]) -> bool,
) -> Value {
    support::wait_for("the checks' messages", Duration::from_secs(60), || async {
        let status = status_of(api, policy).await;
        let messages: Vec<String> = (status["healthChecks"].as_array().into_iter().flatten())
            .map(|c| c["message"].as_str().unwrap_or_default().to_string())
            .collect();
        match messages.len() == 2 && done(&messages) {
            true => Ok(status),
            false => Err(anyhow!("status: {status}")),
        }
    })
    .await
}

/// The notes of every event about the object named `name`, in any namespace.
async fn notes_about(client: &kube::Client, name: &str) -> String {
    let events = Api::<Event>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("list events");
    (events.items.into_iter())
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter_map(|e| e.note)
        .collect::<Vec<_>>()
        .join("\n")
}
