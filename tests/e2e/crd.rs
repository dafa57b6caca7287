//! The committed CRD on a real API server: it is accepted and Established, every example is
//! accepted, every CEL rule rejects what it should with the field named, and `kubectl get plans`
//! shows SUC's columns.

use crate::support;

use std::path::PathBuf;

use crate::support::TestNamespace;
use kube::api::PostParams;
use serde_json::{Value, json};
use slipway::plan::api::Plan;

fn minimal_plan(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "upgrade.cattle.io/v1",
        "kind": "Plan",
        "metadata": {"name": name},
        "spec": spec,
    })
}

/// Creates a raw Plan and returns the API server's error message, if any.
async fn create_raw(ns: &TestNamespace, plan: &Value) -> Result<(), String> {
    let plan: Plan =
        serde_json::from_value(plan.clone()).map_err(|e| format!("client-side: {e}"))?;
    ns.api::<Plan>()
        .create(&PostParams::default(), &plan)
        .await
        .map(|_| ())
        .map_err(|e| match e {
            kube::Error::Api(s) => s.message,
            other => other.to_string(),
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_examples_and_cel_rules_on_a_real_api_server() {
    let Some(cluster) = support::cluster().await else {
        return;
    };
    let client = cluster.client().await;
    support::install_crd(&client).await;
    let ns = TestNamespace::create(&cluster, "crd").await;
    every_example_is_accepted(&ns).await;
    each_cel_rule_rejects_naming_the_field(&cluster, &ns).await;
    a_valid_window_and_the_edge_values_are_accepted(&ns).await;
    kubectl_get_plans_shows_sucs_columns(&cluster, &ns).await;
    ns.cleanup().await;
}

/// An `upgrade` that passes every rule.
fn upgrade() -> Value {
    json!({"image": "x"})
}

/// Every example is accepted, in the test namespace.
async fn every_example_is_accepted(ns: &TestNamespace) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("examples")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut created = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read example");
        for doc in serde_saphyr::from_multiple::<Value>(&text).expect("parse example") {
            // Only the Plans: an example may carry the RBAC a health check needs.
            if doc.is_null() || doc["kind"] != "Plan" {
                continue;
            }
            let mut doc = doc;
            doc["metadata"]["namespace"] = json!(ns.name());
            create_raw(ns, &doc)
                .await
                .unwrap_or_else(|e| panic!("{} rejected: {e}", file.display()));
            created += 1;
        }
    }
    assert!(created >= 8, "created {created} example plans");
}

/// Each CEL rule rejects what it should, naming the field.
async fn each_cel_rule_rejects_naming_the_field(cluster: &support::Cluster, ns: &TestNamespace) {
    let upgrade = upgrade();
    let cases = [
        (
            json!({"concurrency": -1, "upgrade": upgrade}),
            "spec.concurrency",
        ),
        (
            json!({"postCompleteDelay": "-30s", "upgrade": upgrade}),
            "spec.postCompleteDelay",
        ),
        (
            json!({"postCompleteDelay": "soon", "upgrade": upgrade}),
            "spec.postCompleteDelay",
        ),
        (
            json!({"drain": {"deleteLocalData": true, "deleteEmptydirData": true}, "upgrade": upgrade}),
            "spec.drain",
        ),
        (json!({"upgrade": {"image": ""}}), "spec.upgrade.image"),
        (
            json!({"prepare": {"image": ""}, "upgrade": upgrade}),
            "spec.prepare.image",
        ),
        (json!({}), "spec.upgrade"),
        (
            json!({"window": {"days": ["never"], "startTime": "01:00", "endTime": "02:00"}, "upgrade": upgrade}),
            "spec.window.days",
        ),
        (
            json!({"window": {"days": [], "startTime": "01:00", "endTime": "02:00"}, "upgrade": upgrade}),
            "spec.window.days",
        ),
        (
            json!({"window": {"days": ["mo"], "startTime": "25:00", "endTime": "02:00"}, "upgrade": upgrade}),
            "spec.window.startTime",
        ),
        (
            json!({"window": {"days": ["mo"], "startTime": "01:00", "endTime": "3:04pm"}, "upgrade": upgrade}),
            "spec.window.endTime",
        ),
        (
            json!({"window": {"days": ["mo"], "startTime": "01:00"}, "upgrade": upgrade}),
            "spec.window",
        ),
    ];
    for (i, (spec, field)) in cases.iter().enumerate() {
        let plan = minimal_plan(&format!("bad-{i}"), spec.clone());
        let result = if field == &"spec.upgrade" {
            // The client types require `upgrade`; send the raw object.
            cluster
                .kubectl_stdin(
                    &["-n", ns.name(), "create", "-f", "-"],
                    Some(&plan.to_string()),
                )
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        } else {
            create_raw(ns, &plan).await
        };
        let message = result.expect_err(&format!("{spec} must be rejected"));
        assert!(
            message.contains(field),
            "{spec}: the message names {field}: {message}"
        );
    }
}

/// A valid window, and the edge values the rules allow.
async fn a_valid_window_and_the_edge_values_are_accepted(ns: &TestNamespace) {
    let upgrade = upgrade();
    let ok = minimal_plan(
        "window-ok",
        json!({"window": {"days": ["0", "sunday", "sa"], "startTime": "23", "endTime": "03:04pm", "timeZone": "Europe/Berlin"},
               "postCompleteDelay": "1h30m", "concurrency": 0, "upgrade": upgrade}),
    );
    create_raw(ns, &ok).await.expect("a valid plan is accepted");
}

/// `kubectl get plans` shows SUC's printer columns.
async fn kubectl_get_plans_shows_sucs_columns(cluster: &support::Cluster, ns: &TestNamespace) {
    let out = cluster
        .kubectl(&["-n", ns.name(), "get", "plans", "-o", "wide"])
        .await
        .expect("kubectl get plans");
    let header = out.lines().next().unwrap_or_default();
    for column in [
        "NAME", "IMAGE", "CHANNEL", "VERSION", "COMPLETE", "MESSAGE", "APPLYING",
    ] {
        assert!(header.contains(column), "{column} in {header}");
    }
    assert!(out.contains("rancher/k3s-upgrade"), "{out}");
    let narrow = cluster
        .kubectl(&["-n", ns.name(), "get", "plans"])
        .await
        .expect("kubectl get plans");
    assert!(
        !narrow
            .lines()
            .next()
            .unwrap_or_default()
            .contains("APPLYING"),
        "Applying is a wide column"
    );
}
