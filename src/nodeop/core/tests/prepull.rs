//! A NodeOp's pre-pull: before its first node, every selected node pulls what the NodeOp runs;
//! a node that cannot pull holds every node, and nothing is cordoned.

use super::*;
use crate::node::prepull::{PRE_PULL_FAILED, PRE_PULLING, PrePullPhase};

fn pulling_op() -> NodeOp {
    nodeop(NodeOpSpec {
        image: Some("quay.io/kairos/upgrade:v3".into()),
        concurrency: Some(1),
        cordon: Some(true),
        reboot_on_success: Some(true),
        disruption: Some(DisruptionSpec {
            pre_pull: Some(true),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn created_pods(d: &NodeOpDecision) -> Vec<Pod> {
    (d.effects.iter())
        .filter_map(|e| match e {
            NodeOpEffect::CreatePod(p) => Some(p.as_ref().clone()),
            _ => None,
        })
        .collect()
}

fn deleted_pods(d: &NodeOpDecision) -> Vec<String> {
    (d.effects.iter())
        .filter_map(|e| match e {
            NodeOpEffect::DeletePod(p) => Some(p.clone()),
            _ => None,
        })
        .collect()
}

/// The pods as the kubelet left them: every image there, or `bad` waiting on a pull error.
fn kubelet(mut pods: Vec<Pod>, bad: Option<&str>) -> Vec<Pod> {
    for pod in &mut pods {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let fails = bad.is_some() && node.as_deref() == bad;
        let failure = fails.then_some(("ImagePullBackOff", "manifest unknown"));
        crate::node::prepull::kubelet_done(pod, failure);
    }
    pods
}

#[test]
fn every_selected_node_pulls_before_the_first_starts() {
    let op = pulling_op();
    let d = decide_with(&op, &three(), &Seen::default(), T0);
    let pods = created_pods(&d);
    let nodes: Vec<String> = (pods.iter())
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(nodes, ["n1", "n2", "n3"]);
    assert!(jobs_created(&d).is_empty());
    assert!(
        !(d.effects.iter()).any(|e| matches!(e, NodeOpEffect::Cordon(_))),
        "nothing cordoned before the pull"
    );
    assert!(d.status.node_statuses.is_empty());
    assert_eq!(d.waiting[0].reason, PRE_PULLING);
    let pull = d.status.pre_pull.clone().expect("a pull on record");
    assert_eq!(
        (pull.phase, pull.nodes, pull.hash.as_str()),
        (PrePullPhase::Pulling, 3, "uid-1")
    );
    // What the NodeOp runs: its Job's image and the reboot pod's.
    let images: Vec<String> = (pods[0].spec.iter())
        .flat_map(|s| s.containers.iter().filter_map(|c| c.image.clone()))
        .collect();
    assert_eq!(images, ["quay.io/kairos/upgrade:v3", "busybox:1.36"]);
    // Collected with the NodeOp.
    let owners = pods[0]
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default();
    assert_eq!(owners[0].uid, "uid-1");

    let seen = Seen {
        pull_pods: kubelet(pods, None),
        ..Seen::default()
    };
    let d = decide_with(&with_status(op, &d), &three(), &seen, T0);
    assert_eq!(deleted_pods(&d).len(), 3);
    assert_eq!(jobs_created(&d).len(), 1, "the first node starts at once");
    assert_eq!(
        d.status.pre_pull.as_ref().map(|p| p.phase),
        Some(PrePullPhase::Pulled)
    );
    assert!(d.events.iter().any(|e| e.reason == "PrePulled"));
}

#[test]
fn a_node_that_cannot_pull_holds_every_node() {
    let op = pulling_op();
    let d = decide_with(&op, &three(), &Seen::default(), T0);
    let seen = Seen {
        pull_pods: kubelet(created_pods(&d), Some("n3")),
        ..Seen::default()
    };
    let op = with_status(op, &d);
    let d = decide_with(&op, &three(), &seen, T0);
    assert!(jobs_created(&d).is_empty());
    assert!(d.status.node_statuses.is_empty());
    assert_eq!(d.waiting[0].reason, PRE_PULL_FAILED);
    assert_eq!(d.waiting[0].nodes, ["n1", "n2", "n3"]);
    let message = d.status.message.clone().unwrap_or_default();
    assert!(
        message.contains("node n3 cannot pull image ")
            && message.contains("ImagePullBackOff: manifest unknown"),
        "{message}"
    );
    let warnings = |d: &NodeOpDecision| {
        (d.events.iter())
            .filter(|e| e.reason == PRE_PULL_FAILED)
            .count()
    };
    assert_eq!(warnings(&d), 1);
    let d = decide_with(&with_status(op, &d), &three(), &seen, T0);
    assert_eq!(warnings(&d), 0, "said once");
}

#[test]
fn a_nodeop_under_way_or_deleted_pulls_no_more() {
    let op = pulling_op();
    let d = decide_with(&op, &three(), &Seen::default(), T0);
    let pods = created_pods(&d);
    // A node started (the pull was turned on after): no pull holds it, the pods go.
    let mut started = with_status(op.clone(), &d);
    if let Some(st) = started.status.as_mut() {
        st.pre_pull = None;
        st.node_statuses.insert(
            "n1".into(),
            NodeStatus {
                phase: "Completed".into(),
                ..Default::default()
            },
        );
    }
    let seen = Seen {
        pull_pods: pods.clone(),
        ..Seen::default()
    };
    let d = decide_with(&started, &three(), &seen, T0);
    assert_eq!(deleted_pods(&d).len(), 3);
    assert_eq!(jobs_created(&d).len(), 1);
    // Deleted: its pull pods go with it.
    let mut deleted = with_status(op, &d);
    deleted.metadata.deletion_timestamp = Some(Time(t(T0)));
    let d = decide_with(&deleted, &three(), &seen, T0);
    assert_eq!(deleted_pods(&d).len(), 3);
}
