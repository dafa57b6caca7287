//! The committed CRD on a real API server: it is accepted and Established (every scene installs
//! it), every example is accepted, what SUC's CRD refuses is refused with the field named and what
//! it accepts is accepted, the opt-in strict policy refuses the rest naming the field, a valid
//! window and the edge values pass, and `kubectl get plans` shows SUC's columns. Shared scenes:
//! Plans in a namespace of their own, and no controller.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use crate::support::TestNamespace;
use crate::support::scene::Scene;
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
async fn every_example_is_accepted() {
    let Some(s) = Scene::new("crd-examples").start().await else {
        return;
    };
    every_example_is_accepted_in(&s.ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_cel_rule_rejects_naming_the_field() {
    let Some(s) = Scene::new("crd-cel").start().await else {
        return;
    };
    each_cel_rule_rejects_naming_the_field_in(&s.cluster, &s.ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_window_and_the_edge_values_are_accepted() {
    let Some(s) = Scene::new("crd-edges").start().await else {
        return;
    };
    a_valid_window_and_the_edge_values_are_accepted_in(&s.ns).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_get_plans_shows_sucs_columns() {
    let Some(s) = Scene::new("crd-columns").start().await else {
        return;
    };
    kubectl_get_plans_shows_sucs_columns_in(&s.cluster, &s.ns).await;
}

/// An `upgrade` that passes every rule.
fn upgrade() -> Value {
    json!({"image": "x"})
}

/// Every example is accepted, in the test namespace.
async fn every_example_is_accepted_in(ns: &TestNamespace) {
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

/// What SUC's CRD accepts and no controller can run: accepted by slipway's CRD (the controller
/// reports it), refused by the opt-in strict policy naming the field. `(name, spec, field)`.
fn strict_cases() -> Vec<(String, Value, &'static str)> {
    let upgrade = upgrade();
    let window = |w: Value| json!({"window": w, "upgrade": upgrade});
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
        (
            window(json!({"days": ["mo"], "startTime": "25:00", "endTime": "02:00"})),
            "spec.window.startTime",
        ),
        (
            window(json!({"days": ["mo"], "startTime": "01:00", "endTime": "3:04pm"})),
            "spec.window.endTime",
        ),
        (
            window(json!({"days": ["mo"], "startTime": "01:00"})),
            "spec.window",
        ),
        (
            window(json!({"startTime": "01:00", "endTime": "02:00"})),
            "spec.window.days",
        ),
    ];
    let mut out: Vec<(String, Value, &'static str)> = (cases.into_iter().enumerate())
        .map(|(i, (spec, field))| (format!("strict-{i}"), spec, field))
        .collect();
    out.push((
        format!("n{}", "x".repeat(63)),
        json!({"upgrade": upgrade}),
        "metadata.name",
    ));
    out
}

/// The schema refuses what SUC's refuses too, naming the field; it accepts what SUC's accepts.
async fn each_cel_rule_rejects_naming_the_field_in(cluster: &support::Cluster, ns: &TestNamespace) {
    let upgrade = upgrade();
    let cases = [
        (
            json!({"window": {"days": ["never"], "startTime": "01:00", "endTime": "02:00"}, "upgrade": upgrade}),
            "spec.window.days",
        ),
        (
            json!({"window": {"days": [], "startTime": "01:00", "endTime": "02:00"}, "upgrade": upgrade}),
            "spec.window.days",
        ),
        (json!({}), "spec.upgrade"),
        (
            json!({"reboot": {"sentinelPath": "relative"}, "upgrade": upgrade}),
            "spec.reboot.sentinelPath",
        ),
        (
            json!({"failurePolicy": {"then": "Retry"}, "upgrade": upgrade}),
            "spec.failurePolicy.then",
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
    for (name, spec, field) in strict_cases() {
        create_raw(ns, &minimal_plan(&name, spec))
            .await
            .unwrap_or_else(|e| panic!("{field}: SUC's CRD accepts it, slipway's refused it: {e}"));
    }
}

/// The opt-in strict policy, as deploy/components/strict-plans ships it but bound to the scene's
/// namespace only (the cluster is shared): once the API server has it, each strict case is
/// refused naming the field, a valid Plan is accepted, and a Plan admitted before the policy can
/// still have its metadata written (its finalizer) and be deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_strict_policy_refuses_naming_the_field() {
    let Some(s) = Scene::new("strict").start().await else {
        return;
    };
    let ns = &s.ns;
    let before = minimal_plan(
        "admitted-before",
        json!({"concurrency": -1, "upgrade": upgrade()}),
    );
    create_raw(ns, &before)
        .await
        .expect("accepted without the policy");
    let name = support::strict::install(&s.cluster, ns).await;
    let cases = strict_cases();
    for (plan, spec, field) in &cases {
        let message = create_raw(ns, &minimal_plan(plan, spec.clone()))
            .await
            .expect_err(&format!("{plan}: {spec} must be refused"));
        assert!(message.contains(field), "{spec}: names {field}: {message}");
        assert!(
            message.contains(&name),
            "{spec}: names the policy: {message}"
        );
    }
    create_raw(
        ns,
        &minimal_plan("valid", json!({"concurrency": 1, "upgrade": upgrade()})),
    )
    .await
    .expect("a valid Plan passes the policy");
    // A Plan admitted before the policy keeps its metadata writes: its finalizer, on and off.
    for finalizers in [r#"["slipway.dev/plan-cleanup"]"#, "null"] {
        let patch = format!(r#"{{"metadata":{{"finalizers":{finalizers}}}}}"#);
        s.cluster
            .kubectl(&[
                "-n",
                ns.name(),
                "patch",
                "plan",
                "admitted-before",
                "--type=merge",
                "-p",
                &patch,
            ])
            .await
            .unwrap_or_else(|e| panic!("finalizers {finalizers}: {e}"));
    }
    // Its type checking, once the API server has looked at this generation of it.
    let status = support::wait_for(
        "the policy's type checking",
        Duration::from_secs(60),
        || async {
            let jsonpath = "jsonpath={.status.observedGeneration}|{.status.typeChecking}";
            let seen = (s.cluster)
                .kubectl(&["get", "validatingadmissionpolicy", &name, "-o", jsonpath])
                .await?;
            match seen.split_once('|') {
                Some((generation, checking)) if !generation.is_empty() => Ok(checking.to_string()),
                _ => Err(anyhow::anyhow!("not checked yet: {seen:?}")),
            }
        },
    )
    .await;
    assert!(
        !status.contains("expressionWarnings"),
        "type checking: {status}"
    );
    support::strict::remove(&s.cluster, &name).await;
}

/// A valid window, and the edge values the rules allow.
async fn a_valid_window_and_the_edge_values_are_accepted_in(ns: &TestNamespace) {
    let upgrade = upgrade();
    let ok = minimal_plan(
        "window-ok",
        json!({"window": {"days": ["0", "sunday", "sa"], "startTime": "23", "endTime": "03:04pm", "timeZone": "Europe/Berlin"},
               "postCompleteDelay": "1h30m", "concurrency": 0, "upgrade": upgrade}),
    );
    create_raw(ns, &ok).await.expect("a valid plan is accepted");
}

/// `kubectl get plans` shows SUC's printer columns, of the k3s example.
async fn kubectl_get_plans_shows_sucs_columns_in(cluster: &support::Cluster, ns: &TestNamespace) {
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/k3s-stable.yaml");
    let text = std::fs::read_to_string(&example).expect("read the k3s example");
    for doc in serde_saphyr::from_multiple::<Value>(&text).expect("parse the k3s example") {
        if doc["kind"] == "Plan" {
            let mut doc = doc;
            doc["metadata"]["namespace"] = json!(ns.name());
            create_raw(ns, &doc).await.expect("the k3s example");
        }
    }
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
