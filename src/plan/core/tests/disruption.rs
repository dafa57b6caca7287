//! What a Plan does around its disruptions (`spec.disruption`) as a whole Plan decides it: the
//! images are pulled on every node left before the first one starts, a node that cannot pull
//! holds the rollout with nothing touched, a version pulled once is never held by a pull again;
//! the next batch is named for its `PreferNoSchedule` taint.

use super::*;
use crate::node::disruption::DisruptionSpec;
use crate::node::prepull::{PRE_PULL_FAILED, PRE_PULLING, PrePullPhase};

fn pulling_plan(concurrency: i64) -> Plan {
    let mut p = plan(concurrency);
    p.spec.disruption = Some(DisruptionSpec {
        pre_pull: Some(true),
        ..Default::default()
    });
    p
}

/// The kubelet's word on `node`'s pull pod: every image there, or `failed` (its reason) for one.
fn kubelet(w: &mut World, node: &str, failed: Option<&str>) {
    let pod = (w.pull_pods.iter_mut())
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .expect("a pull pod on the node");
    let failure = failed.map(|reason| (reason, "registry.invalid: no such host"));
    crate::node::prepull::kubelet_done(pod, failure);
}

fn pulled_everywhere(w: &mut World) {
    for n in w.nodes.iter().map(|n| n.name.clone()).collect::<Vec<_>>() {
        kubelet(w, &n, None);
    }
}

fn pull_nodes(r: &Rollout) -> Vec<String> {
    (r.pull_pods.iter())
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect()
}

#[test]
fn the_images_are_pulled_on_every_node_left_before_the_first_starts() {
    let mut w = World::new(pulling_plan(1), nodes(3));
    let r = w.step();
    assert_eq!(pull_nodes(&r), ["node-1", "node-2", "node-3"]);
    assert!(r.create_jobs.is_empty(), "no Job before the pull");
    assert!(r.node_patches.is_empty(), "no node touched before the pull");
    assert!(r.status.applying.is_empty());
    let (status, reason, message) = complete(&r.status);
    assert_eq!((status.as_str(), reason.as_str()), ("False", PRE_PULLING));
    assert!(message.contains("0 of 3 nodes have them"), "{message}");
    let pull = r.status.pre_pull.clone().expect("the pull on record");
    assert_eq!(
        (pull.phase, pull.nodes, pull.pulled),
        (PrePullPhase::Pulling, 3, 0)
    );
    assert_eq!(pull.hash, r.status.latest_hash.clone().unwrap_or_default());
    // The Job's images: every container of the node's Job, pulled as its containers pull them.
    let job_images: Vec<String> = {
        let mut plain = World::new(plan(1), nodes(3));
        let job = plain.step().create_jobs.remove(0);
        let spec = job.spec.and_then(|s| s.template.spec).expect("a pod spec");
        crate::node::prepull::images_of(&spec)
            .into_iter()
            .map(|i| i.image)
            .collect()
    };
    let pulled: Vec<String> = (r.pull_pods[0].spec.iter())
        .flat_map(|s| s.containers.iter().filter_map(|c| c.image.clone()))
        .collect();
    assert_eq!(pulled, job_images);

    // Two of three: still held, nothing created again.
    kubelet(&mut w, "node-1", None);
    kubelet(&mut w, "node-2", None);
    let r = w.step();
    assert!(r.pull_pods.is_empty() && r.create_jobs.is_empty());
    assert_eq!(r.status.pre_pull.as_ref().map(|p| p.pulled), Some(2));

    // All three: recorded, the pods go, and the first node starts in the same decision.
    kubelet(&mut w, "node-3", None);
    let r = w.step();
    assert_eq!(r.delete_pull_pods.len(), 3);
    assert_eq!(r.create_jobs.len(), 1);
    assert_eq!(r.status.applying.len(), 1);
    let first = r.status.applying.clone();
    assert_eq!(
        r.status.pre_pull.as_ref().map(|p| p.phase),
        Some(PrePullPhase::Pulled)
    );
    assert!(r.events.iter().any(|e| e.reason == "PrePulled"));
    assert!(w.pull_pods.is_empty());

    // The next nodes never wait for a pull of this version again.
    w.complete_unfinished();
    let r = w.step();
    assert!(r.pull_pods.is_empty());
    assert_eq!(r.status.applying.len(), 1);
    assert_ne!(r.status.applying, first);
}

#[test]
fn a_node_that_cannot_pull_holds_the_rollout_naming_node_image_and_reason() {
    let mut w = World::new(pulling_plan(2), nodes(3));
    w.step();
    kubelet(&mut w, "node-1", None);
    kubelet(&mut w, "node-2", Some("ErrImagePull"));
    kubelet(&mut w, "node-3", None);
    let r = w.step();
    assert!(r.create_jobs.is_empty() && r.node_patches.is_empty());
    assert!(r.status.applying.is_empty());
    let (status, reason, message) = complete(&r.status);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", PRE_PULL_FAILED)
    );
    assert!(
        message.starts_with("node node-2 cannot pull image ")
            && message.contains(": ErrImagePull: registry.invalid: no such host"),
        "{message}"
    );
    let warned = |r: &Rollout| {
        (r.events.iter())
            .filter(|e| e.reason == PRE_PULL_FAILED)
            .count()
    };
    assert_eq!(warned(&r), 1);
    // Said once; the pods stay, for the kubelet tries again.
    let r = w.step();
    assert_eq!(warned(&r), 0);
    assert!(r.delete_pull_pods.is_empty());
    // The kubelet got it after all: the rollout goes on.
    kubelet(&mut w, "node-2", None);
    let r = w.step();
    assert_eq!(r.status.applying.len(), 2);
}

#[test]
fn a_new_version_is_pulled_again() {
    let mut w = World::new(pulling_plan(3), nodes(2));
    w.step();
    pulled_everywhere(&mut w);
    w.step();
    w.complete_unfinished();
    w.step();
    w.step();
    assert!(
        cond::is(&w.status(), COMPLETE, TRUE),
        "{:?}",
        complete(&w.status())
    );
    w.plan.spec.version = Some("v1.31.0+k3s1".into());
    w.plan.metadata.generation = Some(2);
    let r = w.step();
    assert_eq!(pull_nodes(&r), ["node-1", "node-2"]);
    assert!(r.create_jobs.is_empty());
    let pull = r.status.pre_pull.expect("a pull");
    assert_eq!(Some(pull.hash), r.status.latest_hash);
    assert_eq!(pull.phase, PrePullPhase::Pulling);
}

#[test]
fn without_pre_pull_nothing_is_pulled_and_leftovers_go() {
    let mut w = World::new(plan(1), nodes(2));
    let r = w.step();
    assert!(r.pull_pods.is_empty() && r.status.pre_pull.is_none());
    assert_eq!(r.create_jobs.len(), 1);
    // Turned off while pulling: its pods go, and its record.
    let mut w = World::new(pulling_plan(1), nodes(2));
    w.step();
    w.plan.spec.disruption = None;
    w.plan.metadata.generation = Some(2);
    let r = w.step();
    assert_eq!(r.delete_pull_pods.len(), 2);
    assert!(r.status.pre_pull.is_none());
    assert_eq!(r.create_jobs.len(), 1);
}

#[test]
fn a_deleted_plan_takes_its_pull_pods_with_it() {
    let mut w = World::new(pulling_plan(1), nodes(2));
    w.step();
    w.plan.metadata.deletion_timestamp = Some(Time(now()));
    let r = w.step();
    assert_eq!(r.delete_pull_pods.len(), 2);
}

#[test]
fn the_next_batch_is_named_for_its_taint_and_moves_on() {
    let mut p = plan(1);
    p.spec.disruption = Some(DisruptionSpec {
        prefer_no_schedule: Some(true),
        ..Default::default()
    });
    let mut w = World::new(p, nodes(3));
    let r = w.step();
    assert_eq!(r.status.applying.len(), 1);
    assert_eq!(r.next.len(), 1, "as many as the concurrency");
    assert!(!r.status.applying.contains(r.next.first().expect("one")));
    let next = r.next.clone();
    w.complete_unfinished();
    let r = w.step();
    // The next node started: it is no longer next; the last one is.
    assert_eq!(
        r.status.applying.iter().cloned().collect::<BTreeSet<_>>(),
        next
    );
    assert_eq!(r.next.len(), 1);
    assert!(r.next.is_disjoint(&next));
    w.complete_unfinished();
    w.step();
    w.complete_unfinished();
    let r = w.step();
    assert!(r.next.is_empty(), "nothing left to start");
    // Without the field, no batch is named.
    let mut plain = World::new(plan(1), nodes(3));
    assert!(plain.step().next.is_empty());
}
