use std::time::Duration;

use serde_json::json;

use super::*;

fn check(expr: &str) -> HealthCheckSpec {
    HealthCheckSpec {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("ops".into()),
        name: Some("gate".into()),
        expr: expr.into(),
        ..Default::default()
    }
}

fn cm(data: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "gate", "namespace": "ops"}, "data": data})
}

fn at(secs: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn cx<'a>(old: &'a [HealthCheckStatus], now: i64, stops: bool) -> GateContext<'a> {
    GateContext {
        old,
        now: at(now),
        stops,
        fresh: false,
        field: "spec.healthChecks",
    }
}

#[test]
fn the_object_and_its_top_level_fields_are_variables() {
    let read = CheckRead::Objects(vec![cm(json!({"state": "ok"}))]);
    assert_eq!(evaluate(&check("data.state == 'ok'"), &read), Ok(()));
    assert_eq!(evaluate(&check("object.data.state == 'ok'"), &read), Ok(()));
    assert_eq!(
        evaluate(
            &check("metadata.name == 'gate' && kind == 'ConfigMap'"),
            &read
        ),
        Ok(())
    );
    let no = evaluate(&check("data.state == 'degraded'"), &read);
    assert_eq!(no, Err("the expression is false".into()));
}

#[test]
fn every_object_must_hold_and_the_failing_one_is_named() {
    let mut c = check("data.state == 'ok'");
    c.name = None;
    let mut bad = cm(json!({"state": "degraded"}));
    bad["metadata"]["name"] = json!("other");
    let read = CheckRead::Objects(vec![cm(json!({"state": "ok"})), bad]);
    let e = evaluate(&c, &read).unwrap_err();
    assert!(e.starts_with("ops/other: "), "{e}");
    assert_eq!(
        evaluate(&c, &CheckRead::Objects(vec![])),
        Err("no object found".into())
    );
}

#[test]
fn a_missing_field_a_non_bool_and_a_refused_read_fail_with_a_reason() {
    let read = CheckRead::Objects(vec![cm(json!({}))]);
    let e = evaluate(&check("status.phase == 'Ready'"), &read).unwrap_err();
    assert!(e.contains("status"), "{e}");
    let e = evaluate(&check("size(data)"), &read).unwrap_err();
    assert!(e.contains("not a bool"), "{e}");
    let forbidden = CheckRead::Forbidden("slipway may not list configmaps".into());
    assert_eq!(
        evaluate(&check("true"), &forbidden),
        Err("slipway may not list configmaps".into())
    );
    assert!(evaluate(&check("true"), &CheckRead::NotRead).is_err());
    assert_eq!(evaluate(&check("false"), &CheckRead::Assumed), Ok(()));
}

#[test]
fn no_failure_says_a_value_it_read() {
    // A check over a Secret must not copy what it read into a status: whatever the expression
    // does with the value, the reason names types and the expression's own words only.
    let secret = "hunter2-s3cret";
    let read = CheckRead::Objects(vec![cm(json!({"password": secret, "n": "7"}))]);
    let cases = [
        ("data", "a map, not a bool"),
        ("data.password", "a string, not a bool"),
        ("[data.password]", "a list, not a bool"),
        ("data.password + 1 == 2", "string and a int"),
        ("data.password < 1", "(string, int)"),
        ("int(data.password) == 1", "int"),
        ("data[data.password] == 'x'", "No such key"),
        (
            "{data.password: 1, data.password: 2}.size() == 1",
            "repeats a key",
        ),
        ("[1][size(data.password)] == 1", "Index out of bounds"),
        ("1 / (size(data.password) - 14) == 1", "Division by zero"),
        ("data.password.nosuch() == 1", "nosuch"),
    ];
    for (expr, says) in cases {
        let e = evaluate(&check(expr), &read).unwrap_err();
        assert!(!e.contains("hunter2"), "{expr}: {e}");
        assert!(e.contains(says), "{expr}: {e}");
    }
    // A key the expression spells is named: it says what is missing without saying anything read.
    let e = evaluate(&check("data.token == 'x'"), &read).unwrap_err();
    assert!(e.contains("token"), "{e}");
}

#[test]
fn validate_names_the_field() {
    let mut c = check("data.x == ");
    let e = validate(std::slice::from_ref(&c), "spec.healthChecks").unwrap_err();
    assert!(
        e.starts_with("spec.healthChecks[0].expr does not compile"),
        "{e}"
    );
    c.expr = "true".into();
    c.timeout = Some("0s".into());
    let e = validate(std::slice::from_ref(&c), "spec.healthChecks").unwrap_err();
    assert_eq!(e, "spec.healthChecks[0].timeout must be positive");
    c.timeout = Some("5m".into());
    c.selector = Some(Default::default());
    let e = validate(std::slice::from_ref(&c), "spec.healthChecks").unwrap_err();
    assert!(e.contains("name or selector"), "{e}");
    c.selector = None;
    assert_eq!(validate(&[c], "spec.healthChecks"), Ok(()));
}

#[test]
fn ids_say_which_objects() {
    let mut c = check("true");
    assert_eq!(id(&c), "ConfigMap ops/gate");
    c.name = None;
    assert_eq!(id(&c), "ConfigMap ops/*");
    c.namespace = None;
    c.selector = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
            match_labels: Some([("app".to_string(), "db".to_string())].into()),
            ..Default::default()
        },
    );
    assert_eq!(id(&c), "ConfigMap [app=db]");
}

#[test]
fn a_failing_check_blocks_keeps_its_since_and_times_out() {
    let mut c = check("data.state == 'ok'");
    c.timeout = Some("60s".into());
    let bad = [CheckRead::Objects(vec![cm(json!({"state": "no"}))])];
    let g = gate(std::slice::from_ref(&c), &bad, &cx(&[], 0, false));
    let b = g.blocking.clone().unwrap();
    assert_eq!(b.check, "ConfigMap ops/gate");
    assert!(!b.timed_out && !b.stopped);
    assert_eq!(g.recheck, Some(RECHECK));
    let since = g.status[0].since.clone();
    // 55 s later: still failing, the same since, read again when the timeout falls.
    let g = gate(std::slice::from_ref(&c), &bad, &cx(&g.status, 55, false));
    assert_eq!(g.status[0].since, since);
    assert_eq!(g.recheck, Some(Duration::from_secs(5)));
    // Past the timeout under a Hold policy: timed out, not stopped.
    let g = gate(std::slice::from_ref(&c), &bad, &cx(&g.status, 61, false));
    let b = g.blocking.clone().unwrap();
    assert!(b.timed_out && !b.stopped);
    // It holds again: nothing blocks any more.
    let good = [CheckRead::Objects(vec![cm(json!({"state": "ok"}))])];
    let g = gate(std::slice::from_ref(&c), &good, &cx(&g.status, 70, false));
    assert_eq!(g.blocking, None);
    assert_eq!(g.recheck, None);
    assert!(g.status[0].healthy && !g.status[0].timed_out);
    assert_eq!(g.status[0].since.as_deref(), Some("2027-01-15T08:01:10Z"));
}

#[test]
fn a_stopping_policy_keeps_a_timed_out_check_stopped_until_fresh() {
    let mut c = check("data.state == 'ok'");
    c.timeout = Some("10s".into());
    let bad = [CheckRead::Objects(vec![cm(json!({"state": "no"}))])];
    let good = [CheckRead::Objects(vec![cm(json!({"state": "ok"}))])];
    let g = gate(std::slice::from_ref(&c), &bad, &cx(&[], 0, true));
    let g = gate(std::slice::from_ref(&c), &bad, &cx(&g.status, 11, true));
    assert!(g.blocking.clone().unwrap().stopped);
    let g = gate(std::slice::from_ref(&c), &good, &cx(&g.status, 20, true));
    let b = g.blocking.clone().unwrap();
    assert!(
        b.stopped,
        "a stopped rollout stays stopped once the check holds"
    );
    assert!(g.status[0].healthy && g.status[0].timed_out);
    let mut fresh = cx(&g.status, 30, true);
    fresh.fresh = true;
    let g = gate(std::slice::from_ref(&c), &good, &fresh);
    assert_eq!(g.blocking, None);
}

#[test]
fn no_checks_no_gate() {
    assert_eq!(gate(&[], &[], &cx(&[], 0, true)), Gate::default());
}

#[test]
fn kubectl_guesses_resources_from_kinds() {
    for (kind, resource) in [
        ("ConfigMap", "configmaps"),
        ("Ingress", "ingresses"),
        ("NetworkPolicy", "networkpolicies"),
        ("Gateway", "gateways"),
        ("CephCluster", "cephclusters"),
    ] {
        assert_eq!(guess_resource(kind), resource);
    }
    assert_eq!(group_of("apps/v1"), "apps");
    assert_eq!(group_of("v1"), "");
}

#[test]
fn numbers_compare_with_int_literals() {
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "coredns"}, "spec": {"replicas": 2},
        "status": {"readyReplicas": 2, "ratio": 0.5, "negative": -1}});
    let read = CheckRead::Objects(vec![deploy]);
    for expr in [
        "status.readyReplicas == spec.replicas",
        "status.readyReplicas >= 2",
        "status.readyReplicas == 2",
        "status.negative < 0",
        "status.ratio < 1.0",
        "has(status.readyReplicas) && status.readyReplicas == spec.replicas",
        "!has(status.unavailableReplicas)",
    ] {
        assert_eq!(evaluate(&check(expr), &read), Ok(()), "{expr}");
    }
}
