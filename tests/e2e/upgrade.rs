//! An upgrade of slipway over a cluster where an older slipway left nodes cordoned, recorded the
//! way it recorded them (a Plan's `slipway.dev/upgrade-cordon: slipway|admin` annotation, a
//! RebootPolicy's `status.nodes[].cordoned`): every cordon keeps its owner. A cordon slipway made
//! is undone when its operation ends; an admin's stays; the old records are rewritten as the one
//! record every operation now keeps (`slipway.dev/cordoned-by`).
//!
//! Two scenes: a Plan's cordons (Plans only: it shares the cluster), and a RebootPolicy's (its
//! controller reconciles every RebootPolicy of the cluster: the cluster-wide group).

use crate::support;

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::controller::ControllerProcess;
use crate::support::plans::{plan_from_yaml, wait_complete};
use crate::support::scene::Scene;
use anyhow::anyhow;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use slipway::reboot_policy::api::RebootPolicy;

const OLD_PLAN_RECORD: &str = "slipway.dev/upgrade-cordon";
const RECORD: &str = "slipway.dev/cordoned-by";

/// Whether a node is cordoned, and its annotations that record who cordoned it.
async fn cordon_of(client: &kube::Client, name: &str) -> (bool, BTreeMap<String, String>) {
    let node = Api::<Node>::all(client.clone())
        .get(name)
        .await
        .expect("get node");
    let cordoned = node.spec.and_then(|s| s.unschedulable).unwrap_or(false);
    let records = (node.metadata.annotations.unwrap_or_default().into_iter())
        .filter(|(k, _)| k == OLD_PLAN_RECORD || k == RECORD)
        .collect();
    (cordoned, records)
}

/// Leaves `name` cordoned, with `annotations`, as an older slipway (or an admin) left it.
async fn left_cordoned(client: &kube::Client, name: &str, annotations: serde_json::Value) {
    Api::<Node>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": { "annotations": annotations },
                "spec": { "unschedulable": true },
            })),
        )
        .await
        .expect("cordon the node");
}

fn records(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Two nodes an older slipway's Plan was upgrading, one it cordoned and one an admin had: the
/// new controller rolls the Plan out over them, undoes its own cordon and keeps the admin's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_undoes_its_own_cordon_and_keeps_the_admins() {
    let Some(s) = Scene::new("upgrade-plan").nodes(2).start().await else {
        return;
    };
    let (by_a_plan, by_an_admin) = (&s.nodes[0], &s.nodes[1]);
    left_cordoned(&s.client, by_a_plan, json!({ OLD_PLAN_RECORD: "slipway" })).await;
    left_cordoned(&s.client, by_an_admin, json!({ OLD_PLAN_RECORD: "admin" })).await;
    let _controller = ControllerProcess::start(&s.cluster, s.ns.name(), &[]);
    the_plan_rolls_out(&s.ns, &s.pool, by_a_plan, by_an_admin).await;
}

/// Two nodes an older slipway's RebootPolicy was rebooting, one it cordoned and one an admin had:
/// the new controller goes on with both, undoes its own cordon and keeps the admin's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_undoes_its_own_cordon_and_keeps_the_admins() {
    // Its controller reconciles every RebootPolicy of the cluster.
    let Some(s) = Scene::new("upgrade-policy")
        .nodes(2)
        .cluster_wide()
        .crds(&["rebootpolicies.slipway.dev"])
        .start()
        .await
    else {
        return;
    };
    let (by_a_policy, by_another_admin) = (&s.nodes[0], &s.nodes[1]);
    left_cordoned(&s.client, by_a_policy, json!({})).await;
    left_cordoned(&s.client, by_another_admin, json!({})).await;
    let policies = Api::<RebootPolicy>::all(s.client.clone());
    let policy = s.name("policy");
    an_older_slipways_policy_was_rebooting(&policies, &policy, &s.pool, &s.nodes).await;
    let _controller = ControllerProcess::start(
        &s.cluster,
        s.ns.name(),
        &[("SLIPWAY_REBOOT_POLICIES", "true")],
    );
    the_policy_goes_on(&policies, &policy, by_a_policy, by_another_admin).await;
    policies
        .delete(&policy, &Default::default())
        .await
        .expect("delete the policy");
}

/// The Plan over the two nodes rolls out; then each cordon is its owner's.
async fn the_plan_rolls_out(
    ns: &support::TestNamespace,
    pool: &str,
    by_a_plan: &str,
    by_an_admin: &str,
) {
    let client = ns.client();
    let plan = plan_from_yaml(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: k3s
spec:
  concurrency: 2
  cordon: true
  version: v1.30.1+k3s1
  serviceAccountName: default
  nodeSelector:
    matchLabels:
      slipway.test/pool: {pool}
    matchExpressions:
    - {{key: kubernetes.io/hostname, operator: In, values: [{by_a_plan}, {by_an_admin}]}}
  upgrade:
    image: rancher/k3s-upgrade
"#
    ));
    ns.api()
        .create(&PostParams::default(), &plan)
        .await
        .expect("create the Plan");
    wait_complete(&ns.api(), "k3s", Duration::from_secs(120)).await;
    assert_eq!(
        cordon_of(&client, by_a_plan).await,
        (false, records(&[])),
        "the older slipway's cordon is undone, and its record with it"
    );
    assert_eq!(
        cordon_of(&client, by_an_admin).await,
        (true, records(&[(RECORD, "admin")])),
        "the admin's cordon stays, its record rewritten"
    );
}

/// A policy an older slipway was rebooting two nodes for: it had cordoned one, an admin the other
/// (`status.nodes[].cordoned`, the record of that slipway).
async fn an_older_slipways_policy_was_rebooting(
    policies: &Api<RebootPolicy>,
    name: &str,
    pool: &str,
    nodes: &[String],
) {
    let policy: RebootPolicy = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "RebootPolicy",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"matchLabels": {"slipway.test/pool": pool}},
            "concurrency": 2,
            "drain": {"enabled": false},
            "timeout": "5m",
        },
    }))
    .expect("a RebootPolicy");
    policies
        .create(&PostParams::default(), &policy)
        .await
        .expect("create the policy");
    let client = policies.clone().into_client();
    let mut entries = Vec::new();
    for (node, cordoned) in nodes.iter().zip([true, false]) {
        entries.push(json!({
            "name": node,
            "phase": "Draining",
            "since": "2026-11-23T00:00:00Z",
            "signal": "agent",
            "bootId": support::current_boot_id(&client, node).await,
            "cordoned": cordoned,
        }));
    }
    policies
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "rebooting": 2, "nodes": entries } })),
        )
        .await
        .expect("write the older slipway's status");
}

/// The policy goes on with both nodes: each reboots, then its cordon goes back to its owner.
async fn the_policy_goes_on(
    policies: &Api<RebootPolicy>,
    name: &str,
    by_a_policy: &str,
    by_another_admin: &str,
) {
    let client = policies.clone().into_client();
    for node in [by_a_policy, by_another_admin] {
        support::simulate_reboot(&client, node).await;
    }
    let done = support::wait_for("both nodes rebooted", Duration::from_secs(120), || async {
        let p = policies.get(name).await?;
        let status = p.status.unwrap_or_default();
        match (status.rebooted.len(), status.nodes.is_empty()) {
            (2, true) => Ok(status),
            _ => Err(anyhow!("status: {status:?}")),
        }
    })
    .await;
    assert_eq!(done.rebooting, 0);
    assert_eq!(
        cordon_of(&client, by_a_policy).await,
        (false, records(&[])),
        "the older slipway's cordon is undone"
    );
    assert_eq!(
        cordon_of(&client, by_another_admin).await,
        (true, records(&[])),
        "the admin's cordon stays"
    );
}
