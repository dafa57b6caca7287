//! Health checks as a whole Plan decides them: no node starts while one fails, running nodes
//! finish, the status and the `Complete` condition name the check, and a timed-out check meets
//! the failure policy.

use serde_json::json;

use super::*;
use crate::common::check::{CheckRead, HealthCheckSpec};
use crate::plan::api::{FailureAction, FailurePolicySpec};
use crate::plan::core::failure::RESET_ANNOTATION;

fn checked(concurrency: i64, timeout: Option<&str>) -> Plan {
    let mut p = plan(concurrency);
    p.spec.health_checks = Some(vec![HealthCheckSpec {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("ops".into()),
        name: Some("gate".into()),
        expr: "data.state == 'ok'".into(),
        timeout: timeout.map(str::to_string),
        ..Default::default()
    }]);
    p
}

fn state(w: &mut World, value: &str) {
    w.checks = vec![CheckRead::Objects(vec![json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "gate", "namespace": "ops"},
        "data": {"state": value}
    })])];
}

#[test]
fn a_failing_check_starts_no_node_and_says_which_check() {
    let mut w = World::new(checked(2, None), nodes(3));
    state(&mut w, "rebalancing");
    let r = w.step();
    assert!(
        r.create_jobs.is_empty(),
        "no node starts while the check fails"
    );
    assert!(r.status.applying.is_empty());
    let (status, reason, message) = complete(&r.status);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "HealthCheckFailing")
    );
    assert!(message.contains("ConfigMap ops/gate"), "{message}");
    assert!(message.contains("the expression is false"), "{message}");
    assert!(reasons(&r).contains(&"HealthCheckFailing"));
    let check = &r.status.health_checks[0];
    assert_eq!(
        (check.name.as_str(), check.healthy),
        ("ConfigMap ops/gate", false)
    );
    assert_eq!(r.requeue_after, Some(std::time::Duration::from_secs(10)));
    // Still failing: no second event.
    w.now += jiff::SignedDuration::from_secs(10);
    let r = w.step();
    assert!(!reasons(&r).contains(&"HealthCheckFailing"));
    // The check holds: the rollout starts.
    state(&mut w, "ok");
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 2);
    assert!(r.status.health_checks[0].healthy);
    assert_eq!(complete(&r.status).1, "SyncJob");
}

#[test]
fn running_nodes_finish_while_the_check_holds_the_next_ones() {
    let mut w = World::new(checked(1, None), nodes(3));
    state(&mut w, "ok");
    assert_eq!(w.step().create_jobs.len(), 1);
    state(&mut w, "degraded");
    w.complete_unfinished();
    let r = w.step();
    assert!(
        r.create_jobs.is_empty(),
        "the next node waits for the check"
    );
    assert_eq!(r.node_patches.len(), 1, "the finished node is labelled");
    assert_eq!(complete(&r.status).1, "HealthCheckFailing");
    for _ in 0..5 {
        w.now += jiff::SignedDuration::from_secs(10);
        assert!(w.step().create_jobs.is_empty());
    }
    state(&mut w, "ok");
    for _ in 0..10 {
        w.complete_unfinished();
        w.step();
    }
    assert_eq!(complete(&w.status()).0, "True");
}

#[test]
fn a_check_past_its_timeout_under_hold_waits_and_warns() {
    let mut w = World::new(checked(1, Some("1m")), nodes(2));
    state(&mut w, "no");
    w.step();
    w.now += jiff::SignedDuration::from_secs(61);
    let r = w.step();
    let (_, reason, message) = complete(&r.status);
    assert_eq!(reason, "HealthCheckTimedOut");
    assert!(message.contains("past its timeout"), "{message}");
    assert!(reasons(&r).contains(&"HealthCheckTimedOut"));
    assert!(r.status.health_checks[0].timed_out);
    // Under Hold, the check holding again lets the rollout go on by itself.
    state(&mut w, "ok");
    assert_eq!(w.step().create_jobs.len(), 1);
}

#[test]
fn a_check_past_its_timeout_under_stop_stops_until_a_reset() {
    let mut p = checked(1, Some("1m"));
    p.spec.failure_policy = Some(FailurePolicySpec {
        action: Some(FailureAction::Stop),
        ..Default::default()
    });
    let mut w = World::new(p, nodes(2));
    state(&mut w, "no");
    w.step();
    w.now += jiff::SignedDuration::from_secs(61);
    let r = w.step();
    let (_, reason, message) = complete(&r.status);
    assert_eq!(reason, "RolloutStopped");
    assert!(message.contains("timed out"), "{message}");
    assert!(message.contains(RESET_ANNOTATION), "{message}");
    assert!(reasons(&r).contains(&"RolloutStopped"));
    state(&mut w, "ok");
    w.now += jiff::SignedDuration::from_secs(10);
    let r = w.step();
    assert!(
        r.create_jobs.is_empty(),
        "stopped, even once the check holds"
    );
    assert!(complete(&r.status).2.contains("it holds now"));
    w.plan.metadata.annotations = Some([(RESET_ANNOTATION.to_string(), "1".to_string())].into());
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 1, "a reset lets the rollout go on");
    assert!(!r.status.health_checks[0].timed_out);
}

#[test]
fn a_plan_without_checks_has_no_check_status() {
    let mut w = World::new(plan(1), nodes(1));
    let r = w.step();
    assert!(r.status.health_checks.is_empty());
    assert_eq!(r.create_jobs.len(), 1);
}
