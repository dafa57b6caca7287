//! The failure policies as a whole Plan decides them: which nodes start after a failure, what
//! the nodes get, and what the status says.

use super::*;
use crate::plan::api::{FailureAction, FailurePolicySpec};
use crate::plan::core::failure::{QUARANTINE_PREFIX, RESET_ANNOTATION};

fn with_policy(concurrency: i64, spec: FailurePolicySpec) -> Plan {
    let mut p = plan(concurrency);
    p.spec.failure_policy = Some(spec);
    p
}

fn action(a: FailureAction) -> FailurePolicySpec {
    FailurePolicySpec {
        action: Some(a),
        ..Default::default()
    }
}

fn fail_all_running(w: &mut World) {
    for name in w.job_names() {
        w.finish(&name, "Failed", w.now, "BackoffLimitExceeded", "boom");
    }
}

fn reset(w: &mut World, value: &str) {
    w.plan.metadata.annotations = Some([(RESET_ANNOTATION.to_string(), value.to_string())].into());
}

#[test]
fn stop_starts_no_other_node_after_a_failure_until_a_reset() {
    let mut w = World::new(with_policy(1, action(FailureAction::Stop)), nodes(3));
    w.step();
    fail_all_running(&mut w);
    let r = w.step();
    let (status, reason, message) = complete(&r.status);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RolloutStopped")
    );
    assert!(
        message.contains("rollout stopped by failurePolicy Stop"),
        "{message}"
    );
    assert!(message.contains(RESET_ANNOTATION), "{message}");
    assert!(reasons(&r).contains(&"RolloutStopped"), "{:?}", reasons(&r));
    assert!(r.create_jobs.is_empty());
    for _ in 0..3 {
        w.now += jiff::SignedDuration::from_secs(600);
        let r = w.step();
        assert!(r.create_jobs.is_empty(), "stopped: nothing starts");
        assert_eq!(r.status.applying.len(), 1, "the failed node keeps its slot");
    }
    // A reset: the failed Job goes, the node starts over, and the rollout goes on.
    reset(&mut w, "1");
    let r = w.step();
    assert_eq!(r.status.failures_reset.as_deref(), Some("1"));
    assert!(reasons(&r).contains(&"FailuresReset"));
    assert_eq!(r.delete_jobs.len(), 1);
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 1, "the failed node's Job again");
    for _ in 0..10 {
        w.complete_unfinished();
        w.step();
    }
    assert_eq!(complete(&w.status()).0, "True");
}

#[test]
fn hold_lets_the_other_nodes_go_on_as_suc_does() {
    let mut w = World::new(with_policy(2, action(FailureAction::Hold)), nodes(3));
    w.step();
    let first = w.job_names()[0].clone();
    w.finish(&first, "Failed", w.now, "BackoffLimitExceeded", "boom");
    let r = w.step();
    assert_eq!(complete(&r.status).1, "JobFailed");
    w.complete_unfinished();
    let r = w.step();
    assert_eq!(
        r.create_jobs.len(),
        1,
        "the free slot goes to the third node"
    );
}

#[test]
fn quarantine_labels_and_taints_the_node_and_gives_its_slot_to_the_next() {
    let spec = FailurePolicySpec {
        max_quarantined: Some(1),
        uncordon: Some(true),
        ..action(FailureAction::Quarantine)
    };
    let mut w = World::new(with_policy(1, spec), nodes(3));
    w.step();
    let failed_node = w
        .status()
        .applying
        .first()
        .cloned()
        .expect("a node applying");
    fail_all_running(&mut w);
    let r = w.step();
    let key = format!("{QUARANTINE_PREFIX}p");
    let patch = r
        .node_patches
        .iter()
        .find(|p| p.node == failed_node)
        .expect("quarantine patch");
    let hash = w.status().latest_hash.expect("hash");
    assert_eq!(patch.labels.get(&key), Some(&Some(hash.clone())));
    let taint = patch
        .taint_edits
        .get(&key)
        .cloned()
        .flatten()
        .expect("taint");
    assert_eq!(
        (taint.effect.as_str(), taint.value.as_deref()),
        ("NoSchedule", Some(hash.as_str()))
    );
    assert!(reasons(&r).contains(&"Quarantined"));
    assert_eq!(r.create_jobs.len(), 1, "its slot goes to the next node");
    assert!(!r.status.applying.contains(&failed_node));
    // The second failure finds no room: held, and the rollout stops.
    fail_all_running(&mut w);
    let r = w.step();
    assert_eq!(complete(&r.status).1, "RolloutStopped");
    assert!(r.create_jobs.is_empty());
    // A reset releases the quarantined node and starts the held one over.
    reset(&mut w, "r1");
    let r = w.step();
    assert!(
        r.node_patches.iter().any(|p| p.node == failed_node
            && p.labels.get(&key) == Some(&None)
            && p.taint_edits.get(&key) == Some(&None)),
        "{:?}",
        r.node_patches
    );
    for _ in 0..20 {
        w.complete_unfinished();
        w.step();
    }
    assert_eq!(
        complete(&w.status()).0,
        "True",
        "{:?}",
        complete(&w.status())
    );
}

#[test]
fn a_rollout_that_left_nodes_quarantined_says_so_instead_of_complete() {
    let spec = FailurePolicySpec {
        max_quarantined: Some(5),
        ..action(FailureAction::Quarantine)
    };
    let mut w = World::new(with_policy(3, spec), nodes(3));
    w.step();
    let names = w.job_names();
    w.finish(&names[0], "Failed", w.now, "BackoffLimitExceeded", "boom");
    w.complete_unfinished();
    w.step();
    let r = w.step();
    let (status, reason, message) = complete(&r.status);
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Quarantined"));
    assert!(
        message.starts_with("1 node quarantined after their Job failed: node-"),
        "{message}"
    );
    // A new version lifts the quarantine of the old hash: the node is upgraded like the others.
    w.plan.spec.version = Some("v1.30.2+k3s1".into());
    w.plan.metadata.generation = Some(2);
    let r = w.step();
    assert!(
        r.node_patches
            .iter()
            .any(|p| p.labels.values().any(Option::is_none))
    );
}

#[test]
fn retry_reports_the_node_retrying_and_finishes_when_a_retry_succeeds() {
    let spec = FailurePolicySpec {
        retries: Some(2),
        backoff: Some("30s".into()),
        ..action(FailureAction::Retry)
    };
    let mut w = World::new(with_policy(1, spec), nodes(1));
    w.step();
    fail_all_running(&mut w);
    let r = w.step();
    let (_, reason, message) = complete(&r.status);
    assert_eq!(reason, "Retrying");
    assert!(message.contains("retry 1 of 2 in 30s"), "{message}");
    assert_eq!(r.status.nodes[0].phase, NodePhase::Retrying);
    assert_eq!(r.status.nodes[0].retries, Some(1));
    assert_eq!(r.requeue_after, Some(Duration::from_secs(30)));
    assert_eq!(r.delete_jobs.len(), 1);
    let r = w.step();
    assert!(r.create_jobs.is_empty(), "not before the backoff");
    w.now += jiff::SignedDuration::from_secs(30);
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 1);
    assert_eq!(r.status.nodes[0].phase, NodePhase::Upgrading);
    assert_eq!(
        r.status.nodes[0].retries,
        Some(1),
        "the count survives in the status"
    );
    w.complete_unfinished();
    let r = w.step();
    assert_eq!(complete(&r.status).0, "True");
}
