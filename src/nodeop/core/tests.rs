use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::api::ObjectMeta;

use super::*;
use crate::node::cordon::CORDONED_BY;
use crate::node::disruption::DisruptionSpec;
use crate::node::drain::OnDrainTimeout;
use crate::nodeop::api::{DrainOptions, NodeOpSpec, NodeStatus, PreflightSpec};

mod prepull;
mod properties;

pub(super) fn t(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

pub(super) const T0: &str = "2026-11-25T10:00:00Z";

pub(super) fn nodeop(spec: NodeOpSpec) -> NodeOp {
    NodeOp {
        metadata: ObjectMeta {
            name: Some("op".into()),
            namespace: Some("default".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: NodeOpSpec {
            command: vec!["sh".into(), "-c".into(), "true".into()],
            ..spec
        },
        status: None,
    }
}

pub(super) fn node(name: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        ready: true,
        boot_id: format!("{name}-boot-1"),
        labels: BTreeMap::from([("kubernetes.io/hostname".to_string(), name.to_string())]),
        ..Default::default()
    }
}

fn control_plane(name: &str) -> NodeInfo {
    let mut n = node(name);
    n.labels
        .insert("node-role.kubernetes.io/control-plane".into(), "".into());
    n
}

/// What the shell would have seen.
#[derive(Default)]
pub(super) struct Seen {
    pub jobs: BTreeMap<String, JobView>,
    pub preflights: BTreeMap<String, PreflightView>,
    pub reboot_pods: BTreeSet<String>,
    pub drains: BTreeMap<String, PodsView>,
    pub budget: Budget,
    pub pull_pods: Vec<Pod>,
}

pub(super) fn decide_with(
    op: &NodeOp,
    nodes: &[NodeInfo],
    seen: &Seen,
    now: &str,
) -> NodeOpDecision {
    let refs: Vec<&NodeInfo> = nodes.iter().collect();
    let pull_pods: Vec<&Pod> = seen.pull_pods.iter().collect();
    decide(
        &NodeOpInput {
            pull_pods: &pull_pods,
            op,
            nodes: &refs,
            jobs: &seen.jobs,
            preflights: &seen.preflights,
            reboot_pods: &seen.reboot_pods,
            drains: &seen.drains,
            reboot_image: "busybox:1.36",
            budget: &seen.budget,
        },
        t(now),
    )
}

fn jobs_created(d: &NodeOpDecision) -> Vec<String> {
    d.effects
        .iter()
        .filter_map(|e| match e {
            NodeOpEffect::CreateJob(j) => j.metadata.name.clone(),
            _ => None,
        })
        .collect()
}

fn with_status(mut op: NodeOp, d: &NodeOpDecision) -> NodeOp {
    op.status = Some(d.status.clone());
    op
}

fn three() -> Vec<NodeInfo> {
    vec![node("n1"), node("n2"), node("n3")]
}

fn node_phase<'a>(d: &'a NodeOpDecision, n: &str) -> &'a str {
    d.status
        .node_statuses
        .get(n)
        .map_or("", |s| s.phase.as_str())
}

#[test]
fn concurrency_zero_starts_every_selected_node_at_once() {
    let op = nodeop(NodeOpSpec::default());
    let d = decide_with(&op, &three(), &Seen::default(), T0);
    assert_eq!(jobs_created(&d).len(), 3);
    assert_eq!(d.holds.len(), 3);
    assert_eq!(d.status.phase.as_deref(), Some("Running"));
    for n in ["n1", "n2", "n3"] {
        let st = &d.status.node_statuses[n];
        assert_eq!(st.phase, "Pending");
        assert_eq!(st.message.as_deref(), Some("Job created"));
        assert_eq!(st.reboot_status.as_deref(), Some("not-requested"));
        assert!(
            st.job_name
                .as_deref()
                .is_some_and(|j| j.starts_with(&format!("op-{n}-")))
        );
    }
    assert!(d.waiting.is_empty());
}

#[test]
fn a_selector_picks_the_nodes_and_control_plane_nodes_go_first() {
    let mut nodes = vec![
        node("a-worker"),
        control_plane("z-server"),
        node("b-worker"),
    ];
    nodes[1].labels.insert("disk".into(), "ssd".into());
    nodes[2].labels.insert("disk".into(), "ssd".into());
    let op = nodeop(NodeOpSpec {
        concurrency: Some(1),
        node_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("disk".into(), "ssd".into())])),
            ..Default::default()
        }),
        ..Default::default()
    });
    let d = decide_with(&op, &nodes, &Seen::default(), T0);
    assert_eq!(
        d.status.node_statuses.keys().collect::<Vec<_>>(),
        ["z-server"]
    );
    assert_eq!(d.waiting.len(), 1);
    assert_eq!(d.waiting[0].reason, "ConcurrencyReached");
    assert_eq!(d.waiting[0].nodes, ["b-worker"]);
    assert!(d.next.is_empty(), "no batch named unless asked");
    let mut asked = op.clone();
    asked.spec.disruption = Some(DisruptionSpec {
        prefer_no_schedule: Some(true),
        ..Default::default()
    });
    let d = decide_with(&asked, &nodes, &Seen::default(), T0);
    assert_eq!(d.next.iter().collect::<Vec<_>>(), ["b-worker"]);
}

#[test]
fn stop_on_failure_starts_no_other_node_once_the_first_failed_and_says_so() {
    let spec = NodeOpSpec {
        concurrency: Some(1),
        stop_on_failure: Some(true),
        ..Default::default()
    };
    let op = nodeop(spec);
    let d1 = decide_with(&op, &three(), &Seen::default(), T0);
    let job = jobs_created(&d1);
    assert_eq!(job.len(), 1);
    let op = with_status(op, &d1);
    let mut seen = Seen::default();
    seen.jobs.insert(
        job[0].clone(),
        JobView::Failed("BackoffLimitExceeded".into()),
    );
    let d2 = decide_with(&op, &three(), &seen, "2026-11-25T10:01:00Z");
    assert!(jobs_created(&d2).is_empty(), "{:?}", d2.effects);
    assert_eq!(d2.status.phase.as_deref(), Some("Failed"));
    assert_eq!(node_phase(&d2, "n1"), "Failed");
    assert_eq!(d2.status.node_statuses.len(), 1);
    assert_eq!(
        d2.status.node_statuses["n1"].reboot_status.as_deref(),
        Some("not-requested")
    );
    let message = d2.status.message.clone().unwrap_or_default();
    assert!(
        message.contains("2 nodes (n2, n3) waits: node n1 failed and spec.stopOnFailure is set"),
        "{message}"
    );
    assert!(d2.holds.is_empty());
    assert!(d2.events.iter().any(|e| e.reason == "NodeFailed"));
    assert!(d2.events.iter().any(|e| e.reason == "Waiting"));
    // Without stopOnFailure the next node starts, and the NodeOp is Failed all the same.
    let mut op2 = nodeop(NodeOpSpec {
        concurrency: Some(1),
        ..Default::default()
    });
    op2.status = op.status.clone();
    let d3 = decide_with(&op2, &three(), &seen, "2026-11-25T10:01:00Z");
    assert_eq!(jobs_created(&d3).len(), 1);
    assert_eq!(d3.status.phase.as_deref(), Some("Failed"));
}

#[test]
fn a_node_another_operation_holds_waits_and_the_status_says_who() {
    let op = nodeop(NodeOpSpec::default());
    let held = BTreeMap::from([(
        "n2".to_string(),
        Holder::Maintenance {
            name: "disk".into(),
        },
    )]);
    let seen = Seen {
        budget: Budget::holds_only(held),
        ..Default::default()
    };
    let d = decide_with(&op, &three(), &seen, T0);
    assert_eq!(jobs_created(&d).len(), 2);
    assert!(!d.holds.contains("n2"));
    assert_eq!(d.waiting[0].reason, "NodeBusy");
    assert_eq!(
        d.status.message.as_deref(),
        Some("node n2 waits: nodemaintenance disk holds the node")
    );
    assert_eq!(d.requeue, Some(PROGRESS_RECHECK));
}

#[test]
fn the_job_runs_the_command_privileged_with_the_host_root_pinned_to_the_node() {
    let op = nodeop(NodeOpSpec {
        backoff_limit: None,
        host_mount_path: Some("/rootfs".into()),
        image: Some("quay.io/kairos/tools:1".into()),
        ..Default::default()
    });
    let d = decide_with(&op, &[node("n1")], &Seen::default(), T0);
    let Some(NodeOpEffect::CreateJob(job)) = d.effects.last() else {
        panic!("a Job: {:?}", d.effects)
    };
    let spec = job.spec.clone().unwrap_or_default();
    assert_eq!(spec.backoff_limit, Some(6));
    let pod = spec.template.spec.unwrap_or_default();
    assert_eq!(pod.node_name.as_deref(), Some("n1"));
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert!(pod.init_containers.is_none());
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("quay.io/kairos/tools:1"));
    assert_eq!(c.command.as_ref(), Some(&op.spec.command));
    assert_eq!(
        c.security_context.as_ref().and_then(|s| s.privileged),
        Some(true)
    );
    let mount = &c.volume_mounts.as_ref().expect("mounts")[0];
    assert_eq!(mount.mount_path, "/rootfs");
    let env = &c.env.as_ref().expect("env")[0];
    assert_eq!(
        (env.name.as_str(), env.value.as_deref()),
        ("HOST_DIR", Some("/rootfs"))
    );
    let volume = &pod.volumes.as_ref().expect("volumes")[0];
    assert_eq!(
        volume.host_path.as_ref().map(|h| h.path.as_str()),
        Some("/")
    );
    let labels = job.metadata.labels.clone().unwrap_or_default();
    assert_eq!(
        labels.get("kairos.io/nodeop").map(String::as_str),
        Some("op")
    );
    assert_eq!(labels.get("kairos.io/node").map(String::as_str), Some("n1"));
    let owner = &job.metadata.owner_references.as_ref().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("NodeOp", Some(true))
    );
}

fn cordoned_by_op(mut n: NodeInfo) -> NodeInfo {
    n.unschedulable = true;
    n.annotations
        .insert(CORDONED_BY.into(), "nodeop/default/op".into());
    n
}

fn drained_op() -> NodeOp {
    nodeop(NodeOpSpec {
        cordon: Some(true),
        uncordon_on_failure: Some(true),
        drain_options: Some(DrainOptions {
            enabled: Some(true),
            timeout_seconds: Some(300),
            grace_period_seconds: Some(30),
            ..Default::default()
        }),
        ..Default::default()
    })
}

fn pods(names: &[(&str, bool)]) -> PodsView {
    PodsView {
        total: names.len(),
        to_evict: names
            .iter()
            .map(|(n, terminating)| {
                (
                    PodKey {
                        namespace: "shop".into(),
                        name: n.to_string(),
                    },
                    *terminating,
                )
            })
            .collect(),
        blocked: BTreeMap::new(),
        attached: Vec::new(),
    }
}

#[test]
fn cordon_and_drain_come_before_the_job_and_the_cordon_goes_after_it() {
    let op = drained_op();
    let d1 = decide_with(&op, &[node("n1")], &Seen::default(), T0);
    assert!(
        matches!(&d1.effects[..], [NodeOpEffect::Cordon(c)] if c.unschedulable == Some(true)
        && c.annotations.get(CORDONED_BY) == Some(&Some("nodeop/default/op".into())))
    );
    assert_eq!(node_phase(&d1, "n1"), "Pending");
    let op = with_status(op, &d1);
    assert_eq!(to_drain(&op, &BTreeMap::new(), t(T0)), ["n1"]);
    let nodes = [cordoned_by_op(node("n1"))];
    let mut seen = Seen::default();
    seen.drains
        .insert("n1".into(), pods(&[("web-1", false), ("web-2", true)]));
    let d2 = decide_with(&op, &nodes, &seen, "2026-11-25T10:00:10Z");
    assert!(
        matches!(&d2.effects[..], [NodeOpEffect::Evict { pods, grace_period_seconds: Some(30), .. }] if pods.len() == 1 && pods[0].name == "web-1"),
        "{:?}",
        d2.effects
    );
    seen.drains.insert("n1".into(), pods(&[]));
    let d3 = decide_with(&op, &nodes, &seen, "2026-11-25T10:00:20Z");
    assert_eq!(jobs_created(&d3).len(), 1);
    let job = jobs_created(&d3)[0].clone();
    let op = with_status(op, &d3);
    seen.jobs.insert(job.clone(), JobView::Succeeded);
    let d4 = decide_with(&op, &nodes, &seen, "2026-11-25T10:01:00Z");
    assert!(
        matches!(&d4.effects[..], [NodeOpEffect::Uncordon(c)] if c.unschedulable == Some(false))
    );
    assert_eq!(node_phase(&d4, "n1"), "Completed");
    assert_eq!(d4.status.phase.as_deref(), Some("Completed"));
    assert_eq!(
        d4.status.node_statuses["n1"].message.as_deref(),
        Some("Job completed successfully")
    );
    let reasons: Vec<&str> = d4.events.iter().map(|e| e.reason).collect();
    assert_eq!(reasons, ["NodeCompleted", "Completed"]);
    assert_eq!(d4.events[0].node.as_deref(), Some("n1"));
    assert_eq!(d4.events[1].node, None, "about the NodeOp, not a node");
    let again = decide_with(
        &with_status(op.clone(), &d4),
        &nodes,
        &seen,
        "2026-11-25T10:01:10Z",
    );
    assert!(again.events.is_empty(), "told once: {:?}", again.events);
    assert!(d4.holds.is_empty());
}

#[test]
fn a_cordon_kairos_operator_made_for_the_nodeop_is_given_back_after_a_takeover() {
    let mut op = drained_op();
    op.spec.drain_options = None;
    let d1 = decide_with(&op, &[node("n1")], &Seen::default(), T0);
    let job = jobs_created(&d1)[0].clone();
    let op = with_status(op, &d1);
    let mut kairos = node("n1");
    kairos.unschedulable = true;
    kairos.annotations.insert(
        crate::node::cordon::KAIROS_CORDONED_BY.into(),
        "default/op@0a1b".into(),
    );
    let mut seen = Seen::default();
    seen.jobs.insert(job, JobView::Succeeded);
    let d = decide_with(&op, &[kairos], &seen, "2026-11-25T10:01:00Z");
    let [NodeOpEffect::Uncordon(c)] = &d.effects[..] else {
        panic!("the cordon goes back: {:?}", d.effects);
    };
    assert_eq!(c.unschedulable, Some(false));
    assert_eq!(
        c.annotations.get(crate::node::cordon::KAIROS_CORDONED_BY),
        Some(&None),
        "with kairos-operator's record"
    );
}

/// Which of kstatus' `Ready`, `Reconciling`, `Stalled` is `True`, with its reason.
fn standing(d: &NodeOpDecision) -> (&str, &str) {
    let on: Vec<_> = (d.status.conditions.iter())
        .filter(|c| c.status == "True")
        .collect();
    assert_eq!(on.len(), 1, "one of the three: {:?}", d.status.conditions);
    (on[0].type_.as_str(), on[0].reason.as_str())
}

#[test]
fn kstatus_conditions_follow_the_phase() {
    let mut op = drained_op();
    op.spec.drain_options = None;
    op.metadata.generation = Some(2);
    let d1 = decide_with(&op, &[node("n1")], &Seen::default(), T0);
    assert_eq!(standing(&d1), ("Reconciling", "Running"));
    assert_eq!(d1.status.observed_generation, Some(2), "what kstatus reads");
    assert!(
        d1.status
            .conditions
            .iter()
            .all(|c| c.observed_generation == Some(2))
    );
    let job = jobs_created(&d1)[0].clone();
    let op = with_status(op, &d1);
    let mut seen = Seen::default();
    seen.jobs.insert(job.clone(), JobView::Succeeded);
    let done = decide_with(&op, &[node("n1")], &seen, "2026-11-25T10:01:00Z");
    assert_eq!(standing(&done), ("Ready", "Completed"));
    seen.jobs.insert(job, JobView::Failed(String::new()));
    let failed = decide_with(&op, &[node("n1")], &seen, "2026-11-25T10:01:00Z");
    assert_eq!(standing(&failed), ("Stalled", "Failed"));
    let mut bad = drained_op();
    bad.spec.node_selector = Some(LabelSelector {
        match_expressions: Some(vec![Default::default()]),
        ..Default::default()
    });
    let invalid = decide_with(&bad, &[node("n1")], &Seen::default(), T0);
    assert_eq!(standing(&invalid).0, "Stalled");
}

#[test]
fn a_drain_past_its_timeout_fails_the_node_and_uncordon_on_failure_gives_the_cordon_back() {
    let op = with_status(
        drained_op(),
        &decide_with(&drained_op(), &[node("n1")], &Seen::default(), T0),
    );
    let nodes = [cordoned_by_op(node("n1"))];
    let mut seen = Seen::default();
    seen.drains.insert("n1".into(), pods(&[("db-0", false)]));
    let d = decide_with(&op, &nodes, &seen, "2026-11-25T10:05:00Z");
    assert_eq!(node_phase(&d, "n1"), "Failed");
    let message = d.status.node_statuses["n1"]
        .message
        .clone()
        .unwrap_or_default();
    assert!(
        message.starts_with("Drain timed out after 300s"),
        "{message}"
    );
    assert!(message.ends_with("shop/db-0"), "{message}");
    assert!(matches!(&d.effects[..], [NodeOpEffect::Uncordon(_)]));
    assert!(jobs_created(&d).is_empty());
}

#[test]
fn a_drain_past_its_timeout_deletes_the_pods_left_when_asked_then_runs_the_job() {
    let mut op = drained_op();
    op.spec.disruption = Some(DisruptionSpec {
        on_drain_timeout: Some(OnDrainTimeout::DeletePods),
        wait_for_volume_detach: Some(true),
        ..Default::default()
    });
    let op = with_status(
        op.clone(),
        &decide_with(&op, &[node("n1")], &Seen::default(), T0),
    );
    let nodes = [cordoned_by_op(node("n1"))];
    let mut seen = Seen::default();
    seen.drains
        .insert("n1".into(), pods(&[("db-0", false), ("db-1", true)]));
    let early = decide_with(&op, &nodes, &seen, "2026-11-25T10:04:59Z");
    assert!(matches!(&early.effects[..], [NodeOpEffect::Evict { .. }]));
    let d = decide_with(&op, &nodes, &seen, "2026-11-25T10:05:00Z");
    assert_eq!(node_phase(&d, "n1"), "Pending", "the node goes on");
    assert!(
        matches!(&d.effects[..], [NodeOpEffect::DeletePods { pods, grace_period_seconds: Some(30), .. }]
            if pods.len() == 1 && pods[0].name == "db-0"),
        "only the pod not going already: {:?}",
        d.effects
    );
    let events: Vec<(&str, &str)> = (d.events.iter())
        .map(|e| (e.reason, e.message.as_str()))
        .collect();
    assert_eq!(
        events,
        [(
            "DrainDeletedPod",
            "Deleted pod shop/db-0 from node n1: the drain did not evict it within 300s \
             (spec.disruption.onDrainTimeout: DeletePods)"
        )]
    );
    // The pods are gone, a volume is still attached: no Job yet, and past the timeout the
    // volume is waited for (it cannot be deleted).
    let mut volumes = pods(&[]);
    volumes.attached = vec!["csi-1 (pv-a)".into()];
    seen.drains.insert("n1".into(), volumes);
    for at in ["2026-11-25T10:04:00Z", "2026-11-25T10:05:10Z"] {
        let d = decide_with(&op, &nodes, &seen, at);
        assert!(
            jobs_created(&d).is_empty() && d.effects.is_empty(),
            "{:?}",
            d.effects
        );
        assert_eq!(node_phase(&d, "n1"), "Pending");
    }
    // With Fail, past the timeout the node fails naming the volume.
    let mut failing = op.clone();
    failing.spec.disruption = None;
    failing.spec.disruption = Some(DisruptionSpec {
        on_drain_timeout: None,
        wait_for_volume_detach: Some(true),
        ..Default::default()
    });
    let d = decide_with(&failing, &nodes, &seen, "2026-11-25T10:05:10Z");
    assert_eq!(node_phase(&d, "n1"), "Failed");
    let message = d.status.node_statuses["n1"].message.clone();
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.ends_with("volume attachment csi-1 (pv-a)")),
        "{message:?}"
    );
    seen.drains.insert("n1".into(), pods(&[]));
    let d = decide_with(&op, &nodes, &seen, "2026-11-25T10:04:00Z");
    assert_eq!(jobs_created(&d).len(), 1, "drained: the Job runs");
}

#[test]
fn a_failed_node_stays_cordoned_unless_uncordon_on_failure_and_an_admins_cordon_always_stays() {
    let mut op = drained_op();
    op.spec.drain_options = None;
    op.spec.uncordon_on_failure = Some(false);
    let d1 = decide_with(&op, &[node("n1")], &Seen::default(), T0);
    let job = jobs_created(&d1)[0].clone();
    let op = with_status(op, &d1);
    let mut seen = Seen::default();
    seen.jobs.insert(job, JobView::Failed(String::new()));
    let d = decide_with(
        &op,
        &[cordoned_by_op(node("n1"))],
        &seen,
        "2026-11-25T10:01:00Z",
    );
    assert!(d.effects.is_empty(), "{:?}", d.effects);
    assert_eq!(
        d.status.node_statuses["n1"].message.as_deref(),
        Some("Job failed")
    );
    // An admin's cordon: the NodeOp does not record it as its own, and leaves it.
    let mut admin = node("n2");
    admin.unschedulable = true;
    let mut op2 = drained_op();
    op2.spec.drain_options = None;
    let d2 = decide_with(&op2, &[admin.clone()], &Seen::default(), T0);
    assert!(
        !d2.effects
            .iter()
            .any(|e| matches!(e, NodeOpEffect::Cordon(_)))
    );
    let op2 = with_status(op2, &d2);
    let mut seen = Seen::default();
    seen.jobs
        .insert(jobs_created(&d2)[0].clone(), JobView::Succeeded);
    let d3 = decide_with(&op2, &[admin], &seen, "2026-11-25T10:01:00Z");
    assert!(d3.effects.is_empty(), "{:?}", d3.effects);
}

fn rebooting_op() -> NodeOp {
    nodeop(NodeOpSpec {
        cordon: Some(true),
        reboot_on_success: Some(true),
        ..Default::default()
    })
}

#[test]
fn reboot_on_success_uses_the_sentinel_and_waits_for_a_new_boot_and_ready() {
    let op = rebooting_op();
    let d1 = decide_with(&op, &[node("n1")], &Seen::default(), T0);
    let created: Vec<&str> = d1
        .effects
        .iter()
        .map(|e| match e {
            NodeOpEffect::Cordon(_) => "cordon",
            NodeOpEffect::CreatePod(_) => "reboot pod",
            NodeOpEffect::CreateJob(_) => "job",
            _ => "other",
        })
        .collect();
    assert_eq!(
        created,
        ["cordon", "job"],
        "no reboot pod beside a running Job: it would reboot before the Job is seen complete"
    );
    let Some(NodeOpEffect::CreateJob(job)) = d1.effects.get(1) else {
        panic!("{:?}", d1.effects)
    };
    let job_name = job.metadata.name.clone().unwrap_or_default();
    let job_pod = job
        .spec
        .clone()
        .unwrap_or_default()
        .template
        .spec
        .unwrap_or_default();
    assert_eq!(
        job_pod.init_containers.as_ref().map(|c| c[0].name.as_str()),
        Some("nodeop")
    );
    assert!(
        job_pod.containers[0].command.clone().unwrap_or_default()[2]
            .starts_with(&format!("touch /sentinel/{job_name}"))
    );
    assert_eq!(
        d1.status.node_statuses["n1"].reboot_status.as_deref(),
        Some("pending")
    );
    assert_eq!(
        d1.status.node_statuses["n1"].boot_id.as_deref(),
        Some("n1-boot-1")
    );

    let op = with_status(op, &d1);
    let mut seen = Seen::default();
    seen.jobs.insert(job_name.clone(), JobView::Succeeded);
    let nodes = [cordoned_by_op(node("n1"))];
    let d2 = decide_with(&op, &nodes, &seen, "2026-11-25T10:01:00Z");
    let [NodeOpEffect::CreatePod(pod)] = &d2.effects[..] else {
        panic!("the reboot pod once the Job succeeded: {:?}", d2.effects)
    };
    let script = pod
        .spec
        .as_ref()
        .map(|s| {
            s.containers[0]
                .command
                .clone()
                .unwrap_or_default()
                .join(" ")
        })
        .unwrap_or_default();
    assert!(
        script.contains(&format!("/sentinel/{job_name}")),
        "{script}"
    );
    seen.reboot_pods.insert("n1".into());
    let d2 = decide_with(&op, &nodes, &seen, "2026-11-25T10:01:00Z");
    assert_eq!(node_phase(&d2, "n1"), "Completed");
    assert_eq!(
        d2.status.node_statuses["n1"].reboot_status.as_deref(),
        Some("pending")
    );
    assert_eq!(
        d2.status.phase.as_deref(),
        Some("Running"),
        "a pending reboot is not done"
    );
    assert!(d2.holds.contains("n1"));
    assert!(
        d2.effects.is_empty(),
        "the cordon stays until the node is back"
    );

    let op = with_status(op, &d2);
    // Down (not Ready), then up on the same boot: still waiting.
    let mut down = nodes[0].clone();
    down.ready = false;
    let d3 = decide_with(&op, &[down], &seen, "2026-11-25T10:02:00Z");
    assert_eq!(
        d3.status.node_statuses["n1"].reboot_status.as_deref(),
        Some("pending")
    );
    let mut back = nodes[0].clone();
    back.boot_id = "n1-boot-2".into();
    let d4 = decide_with(&op, &[back], &seen, "2026-11-25T10:03:00Z");
    assert_eq!(
        d4.status.node_statuses["n1"].reboot_status.as_deref(),
        Some("completed")
    );
    assert_eq!(
        d4.status.node_statuses["n1"].message.as_deref(),
        Some("Job and reboot completed successfully")
    );
    assert_eq!(d4.status.phase.as_deref(), Some("Completed"));
    assert!(
        matches!(&d4.effects[..], [NodeOpEffect::Uncordon(_), NodeOpEffect::CallOffReboot(p)] if p.starts_with("op-reboot-n1-"))
    );
}

#[test]
fn a_node_that_does_not_come_back_keeps_its_slot_and_says_so_once() {
    let op = rebooting_op();
    let mut status = NodeOpStatus::default();
    status.node_statuses.insert(
        "n1".into(),
        NodeStatus {
            phase: "Completed".into(),
            job_name: Some("op-n1-abcde".into()),
            reboot_status: Some("pending".into()),
            boot_id: Some("n1-boot-1".into()),
            since: Some(Time(t(T0))),
            ..Default::default()
        },
    );
    let op = NodeOp {
        status: Some(status),
        ..op
    };
    let d = decide_with(&op, &[node("n1")], &Seen::default(), "2026-11-25T10:20:00Z");
    let message = d.status.node_statuses["n1"]
        .message
        .clone()
        .unwrap_or_default();
    assert!(
        message.contains("did not come back from its reboot within 15m"),
        "{message}"
    );
    assert!(d.events.iter().any(|e| e.reason == "RebootTimedOut"));
    assert!(d.holds.contains("n1"));
    let op = with_status(op, &d);
    let again = decide_with(&op, &[node("n1")], &Seen::default(), "2026-11-25T10:30:00Z");
    assert!(!again.events.iter().any(|e| e.reason == "RebootTimedOut"));
}

#[test]
fn a_failed_job_cancels_the_reboot() {
    let op = rebooting_op();
    let d1 = decide_with(&op, &[node("n1")], &Seen::default(), T0);
    let op = with_status(op, &d1);
    let mut seen = Seen::default();
    seen.reboot_pods.insert("n1".into());
    seen.jobs
        .insert(jobs_created(&d1)[0].clone(), JobView::Failed(String::new()));
    let d = decide_with(
        &op,
        &[cordoned_by_op(node("n1"))],
        &seen,
        "2026-11-25T10:01:00Z",
    );
    assert_eq!(
        d.status.node_statuses["n1"].reboot_status.as_deref(),
        Some("cancelled")
    );
    assert!(
        matches!(&d.effects[..], [NodeOpEffect::CallOffReboot(p)] if p.starts_with("op-reboot-n1-"))
    );
}

fn preflight_op() -> NodeOp {
    nodeop(NodeOpSpec {
        cordon: Some(true),
        concurrency: Some(1),
        preflight: Some(PreflightSpec {
            command: vec!["sh".into(), "-c".into(), "check".into()],
            image: None,
            active_deadline_seconds: None,
        }),
        ..Default::default()
    })
}

#[test]
fn preflight_skips_proceeds_or_fails_a_node_before_anything_is_done_to_it() {
    let op = preflight_op();
    let d1 = decide_with(&op, &three(), &Seen::default(), T0);
    let [NodeOpEffect::CreatePod(pod)] = &d1.effects[..] else {
        panic!("{:?}", d1.effects)
    };
    let spec = pod.spec.clone().unwrap_or_default();
    assert_eq!(spec.active_deadline_seconds, Some(120));
    assert_eq!(
        spec.containers[0].termination_message_policy.as_deref(),
        Some("File")
    );
    assert_eq!(spec.containers[0].image.as_deref(), Some("busybox:latest"));
    assert_eq!(node_phase(&d1, "n1"), "Preflight");
    assert_eq!(d1.waiting[0].reason, "ConcurrencyReached");
    let op = with_status(op, &d1);

    let mut seen = Seen::default();
    seen.preflights
        .insert("n1".into(), PreflightView::Skip("already at v3".into()));
    let d2 = decide_with(&op, &three(), &seen, "2026-11-25T10:01:00Z");
    let st = &d2.status.node_statuses["n1"];
    assert_eq!(
        (st.phase.as_str(), st.job_name.as_deref()),
        ("Completed", None)
    );
    assert_eq!(
        st.message.as_deref(),
        Some("Skipped by preflight: already at v3")
    );
    assert!(
        !d2.effects
            .iter()
            .any(|e| matches!(e, NodeOpEffect::Cordon(_) | NodeOpEffect::CreateJob(_)))
    );
    assert_eq!(
        node_phase(&d2, "n2"),
        "Preflight",
        "the slot went to the next node"
    );

    seen.preflights.insert("n1".into(), PreflightView::Proceed);
    let d3 = decide_with(&op, &three(), &seen, "2026-11-25T10:01:00Z");
    assert_eq!(node_phase(&d3, "n1"), "Pending");
    assert!(
        d3.effects
            .iter()
            .any(|e| matches!(e, NodeOpEffect::Cordon(_)))
    );
    assert_eq!(jobs_created(&d3).len(), 1);
    assert!(
        !d3.status.node_statuses.contains_key("n2"),
        "n1 keeps its slot"
    );

    seen.preflights.insert(
        "n1".into(),
        PreflightView::Failed("DeadlineExceeded".into()),
    );
    let d4 = decide_with(&op, &three(), &seen, "2026-11-25T10:03:00Z");
    assert_eq!(
        d4.status.node_statuses["n1"].message.as_deref(),
        Some("Preflight failed: DeadlineExceeded")
    );
    assert_eq!(d4.status.phase.as_deref(), Some("Failed"));
}

#[test]
fn a_controller_killed_after_the_status_creates_the_same_job_again_never_a_second() {
    let op = nodeop(NodeOpSpec::default());
    let d1 = decide_with(&op, &[node("n1")], &Seen::default(), T0);
    let first = jobs_created(&d1);
    // The status was written, the Job was not created.
    let op = with_status(op, &d1);
    let d2 = decide_with(&op, &[node("n1")], &Seen::default(), "2026-11-25T10:00:30Z");
    assert_eq!(jobs_created(&d2), first);
    // A node kairos-operator itself started keeps the Job name its status gives.
    let mut theirs = op.clone();
    if let Some(st) = theirs
        .status
        .as_mut()
        .and_then(|s| s.node_statuses.get_mut("n1"))
    {
        st.job_name = Some("op-n1-x7k2p".into());
    }
    let d2b = decide_with(
        &theirs,
        &[node("n1")],
        &Seen::default(),
        "2026-11-25T10:00:30Z",
    );
    assert_eq!(jobs_created(&d2b), ["op-n1-x7k2p"]);
    // The Job exists: nothing is created.
    let mut seen = Seen::default();
    seen.jobs.insert(first[0].clone(), JobView::Running);
    let d3 = decide_with(&op, &[node("n1")], &seen, "2026-11-25T10:00:40Z");
    assert!(d3.effects.is_empty());
    assert_eq!(node_phase(&d3, "n1"), "Running");
    // A Running node whose Job is gone failed, as in kairos-operator.
    let op = with_status(op, &d3);
    let d4 = decide_with(&op, &[node("n1")], &Seen::default(), "2026-11-25T10:01:00Z");
    assert_eq!(
        d4.status.node_statuses["n1"].message.as_deref(),
        Some("Job not found")
    );
}

#[test]
fn a_deleted_nodeop_gives_back_its_cordons_and_calls_off_its_reboots() {
    let op = rebooting_op();
    let d1 = decide_with(&op, &[node("n1")], &Seen::default(), T0);
    let mut op = with_status(op, &d1);
    op.metadata.deletion_timestamp = Some(Time(t(T0)));
    let mut seen = Seen::default();
    seen.reboot_pods.insert("n1".into());
    let d = decide_with(
        &op,
        &[cordoned_by_op(node("n1"))],
        &seen,
        "2026-11-25T10:00:30Z",
    );
    assert!(matches!(
        &d.effects[..],
        [NodeOpEffect::Uncordon(_), NodeOpEffect::CallOffReboot(_)]
    ));
    assert!(d.holds.is_empty());
}

#[test]
fn a_halted_budget_or_a_full_one_makes_nodes_wait() {
    let op = nodeop(NodeOpSpec::default());
    let d = decide_with(&op, &three(), &Seen::default(), T0);
    assert!(d.waiting.is_empty());
    let mut bad = nodeop(NodeOpSpec::default());
    bad.spec.node_selector = Some(LabelSelector {
        match_labels: Some(BTreeMap::from([("bad key!".into(), "x".into())])),
        ..Default::default()
    });
    let d = decide_with(&bad, &three(), &Seen::default(), T0);
    assert_eq!(d.status.phase.as_deref(), Some("Failed"));
    assert!(
        d.status
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with("spec.nodeSelector"))
    );
    assert!(d.effects.is_empty());
}

#[test]
fn kairos_operators_own_status_is_read_and_kept() {
    let mut status = NodeOpStatus {
        phase: Some("Running".into()),
        ..Default::default()
    };
    status.node_statuses.insert(
        "n1".into(),
        NodeStatus {
            phase: "Running".into(),
            job_name: Some("op-n1-x7k2p".into()),
            message: Some("Job is running".into()),
            reboot_status: Some("not-requested".into()),
            last_updated: Some(Time(t(T0))),
            ..Default::default()
        },
    );
    let op = NodeOp {
        status: Some(status),
        ..nodeop(NodeOpSpec {
            concurrency: Some(1),
            ..Default::default()
        })
    };
    let mut seen = Seen::default();
    seen.jobs.insert("op-n1-x7k2p".into(), JobView::Running);
    let d = decide_with(&op, &three(), &seen, "2026-11-25T10:05:00Z");
    assert!(d.effects.is_empty(), "{:?}", d.effects);
    assert_eq!(
        d.status.node_statuses["n1"].last_updated,
        Some(Time(t(T0))),
        "an entry that did not change keeps its time"
    );
    assert_eq!(holds(&op, t(T0)), [Hold::new("n1", holder(&op))]);
}

#[test]
fn the_phase_gauges_count_nodes_by_kairos_phase_with_their_oldest_time() {
    let op = nodeop(NodeOpSpec::default());
    let d = decide_with(&op, &three(), &Seen::default(), T0);
    let tallies = phases(Some(&d.status));
    assert_eq!(tallies.len(), 1);
    assert_eq!((tallies[0].phase, tallies[0].nodes), ("Pending", 3));
    assert_eq!(tallies[0].oldest_since, Some(t(T0)));
    assert!(phases(None).is_empty());
}

#[test]
fn a_silence_without_matchers_is_an_invalid_spec_and_starts_nothing() {
    let op = nodeop(NodeOpSpec {
        disruption: Some(crate::node::disruption::DisruptionSpec {
            silence: Some(Default::default()),
            ..Default::default()
        }),
        ..Default::default()
    });
    let d = decide_with(&op, &three(), &Seen::default(), T0);
    assert!(jobs_created(&d).is_empty());
    assert!(d.holds.is_empty());
    assert_eq!(
        d.status.message.as_deref(),
        Some("spec.disruption.silence.matchers must name at least one matcher")
    );
    assert!(d.events.iter().any(|e| e.reason == "InvalidSpec"));
}
