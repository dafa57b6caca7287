use super::*;
use crate::node::handoff::{GatePolicy, Stage};
use crate::plan::api::NodeProgress;

fn t(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

const T0: &str = "2026-11-22T10:00:00Z";
const T1: &str = "2026-11-22T10:01:00Z";

fn node() -> NodeInfo {
    NodeInfo {
        name: "n1".into(),
        ready: true,
        boot_id: "b1".into(),
        ..Default::default()
    }
}

fn ctx() -> PlanContext {
    PlanContext {
        namespace: "ns".into(),
        generation: Some(1),
        post_complete_delay: Duration::ZERO,
        reboot: None,
        cordons: false,
        failure: FailurePolicy::default(),
        reset: false,
        quarantine_room: 0,
    }
}

fn rebooting_ctx() -> PlanContext {
    PlanContext {
        reboot: Some(HandoffPolicy {
            timeout: Duration::from_secs(600),
            health_gate: None::<GatePolicy>,
        }),
        ..ctx()
    }
}

fn step(
    state: NodeState,
    node: &NodeInfo,
    job: JobSeen,
    ctx: &PlanContext,
) -> (NodeState, Vec<NodeAction>) {
    let obs = Observation {
        node,
        job_name: "j1",
        job,
        older_job_running: false,
        health: None,
    };
    transition(state, &obs, ctx, t(T1))
}

fn upgrading() -> NodeState {
    NodeState::Upgrading {
        job: "j1".into(),
        boot: Some("b1".into()),
        since: t(T0),
        generation: Some(1),
        attempts: Attempts::default(),
    }
}

fn failed(generation: i64) -> NodeState {
    NodeState::Failed {
        job: "j1".into(),
        message: "m".into(),
        generation: Some(generation),
        since: t(T0),
        attempts: Attempts::default(),
    }
}

#[test]
fn selected_creates_its_job_and_records_the_boot() {
    let (s, a) = step(
        NodeState::selected("j1", t(T0)),
        &node(),
        JobSeen::Absent,
        &ctx(),
    );
    assert_eq!(a, [NodeAction::CreateJob]);
    assert_eq!(
        s,
        NodeState::Upgrading {
            job: "j1".into(),
            boot: Some("b1".into()),
            since: t(T1),
            generation: Some(1),
            attempts: Attempts::default(),
        }
    );
}

#[test]
fn selected_waits_for_an_older_job_of_the_node() {
    let n = node();
    let obs = Observation {
        node: &n,
        job_name: "j1",
        job: JobSeen::Absent,
        older_job_running: true,
        health: None,
    };
    let (s, a) = transition(NodeState::selected("j1", t(T0)), &obs, &ctx(), t(T1));
    assert!(a.is_empty());
    assert_eq!(s, NodeState::selected("j1", t(T0)));
}

#[test]
fn upgrading_follows_its_job() {
    let running = JobSeen::Running {
        template_current: true,
        pods_idle: false,
    };
    assert_eq!(
        step(upgrading(), &node(), running, &ctx()),
        (upgrading(), vec![])
    );
    // Not in the cache (yet): asked again, same since and boot.
    assert_eq!(
        step(upgrading(), &node(), JobSeen::Absent, &ctx()),
        (upgrading(), vec![NodeAction::CreateJob])
    );
    let (s, a) = step(
        upgrading(),
        &node(),
        JobSeen::Running {
            template_current: false,
            pods_idle: false,
        },
        &ctx(),
    );
    assert!(matches!(s, NodeState::Pending { .. }));
    assert_eq!(
        a,
        [NodeAction::DeleteJob("its pod template changed".into())]
    );
}

#[test]
fn a_completed_job_marks_the_node_done_and_uncordons_what_was_cordoned() {
    let mut n = node();
    n.unschedulable = true;
    let cordoning = PlanContext {
        cordons: true,
        ..ctx()
    };
    let (s, a) = step(
        upgrading(),
        &n,
        JobSeen::Complete { at: Some(t(T0)) },
        &cordoning,
    );
    assert_eq!(s, NodeState::Done);
    assert_eq!(a, [NodeAction::MarkDone { uncordon: true }]);
    let (_, a) = step(
        upgrading(),
        &n,
        JobSeen::Complete { at: Some(t(T0)) },
        &ctx(),
    );
    assert_eq!(
        a,
        [NodeAction::MarkDone { uncordon: false }],
        "not cordoned by the Plan"
    );
}

#[test]
fn post_complete_delay_waits_from_the_completion() {
    let mut n = node();
    n.unschedulable = true;
    let delayed = PlanContext {
        post_complete_delay: Duration::from_secs(300),
        cordons: true,
        ..ctx()
    };
    let (s, a) = step(
        upgrading(),
        &n,
        JobSeen::Complete { at: Some(t(T0)) },
        &delayed,
    );
    assert_eq!(
        s,
        NodeState::Waiting {
            job: "j1".into(),
            since: t(T0)
        }
    );
    assert_eq!(
        a,
        [
            NodeAction::Uncordon,
            NodeAction::Recheck(Duration::from_secs(240))
        ]
    );
    let obs = Observation {
        node: &n,
        job_name: "j1",
        job: JobSeen::Absent,
        older_job_running: false,
        health: None,
    };
    let (s, a) = transition(s, &obs, &delayed, t("2026-11-22T10:05:00Z"));
    assert_eq!(
        s,
        NodeState::Done,
        "the Job may be gone: the state knows when it ended"
    );
    assert_eq!(a, [NodeAction::MarkDone { uncordon: true }]);
}

#[test]
fn a_rebooting_plan_waits_for_the_new_boot_before_anything() {
    let (s, a) = step(
        upgrading(),
        &node(),
        JobSeen::Complete { at: Some(t(T0)) },
        &rebooting_ctx(),
    );
    assert!(
        matches!(&s, NodeState::Rebooting { handoff: Handoff::AwaitingBoot { before, .. }, .. } if before == "b1")
    );
    assert_eq!(a, [NodeAction::Recheck(Duration::from_secs(30))]);
    let mut back = node();
    back.boot_id = "b2".into();
    let (s, a) = step(s, &back, JobSeen::Absent, &rebooting_ctx());
    assert_eq!(s, NodeState::Done);
    assert_eq!(a, [NodeAction::MarkDone { uncordon: false }]);
}

#[test]
fn an_older_jobs_reboot_finishes_before_the_next_job() {
    let s = NodeState::Rebooting {
        job: "j0".into(),
        handoff: Handoff::start("b1", t(T0)),
        message: String::new(),
    };
    let (s, a) = step(s, &node(), JobSeen::Absent, &rebooting_ctx());
    assert!(matches!(s, NodeState::Rebooting { ref job, .. } if job == "j0"));
    assert!(!a.contains(&NodeAction::CreateJob));
    let mut back = node();
    back.boot_id = "b2".into();
    let (s, a) = step(s, &back, JobSeen::Absent, &rebooting_ctx());
    assert!(matches!(s, NodeState::Upgrading { ref job, .. } if job == "j1"));
    assert_eq!(a, [NodeAction::CreateJob]);
}

#[test]
fn a_failed_job_is_reported_once_and_held_until_the_plan_changes() {
    let seen = JobSeen::Failed {
        message: "BackoffLimitExceeded: boom".into(),
        template_current: true,
    };
    let (s, a) = step(upgrading(), &node(), seen.clone(), &ctx());
    assert_eq!(
        a,
        [NodeAction::Warn {
            reason: JOB_FAILED,
            message: "Job ns/j1 failed on Node n1: BackoffLimitExceeded: boom".into()
        }]
    );
    assert!(matches!(
        s,
        NodeState::Failed {
            generation: Some(1),
            ..
        }
    ));
    assert_eq!(
        step(failed(1), &node(), seen.clone(), &ctx()),
        (failed(1), vec![])
    );
    assert_eq!(
        step(failed(1), &node(), JobSeen::Absent, &ctx()),
        (failed(1), vec![])
    );
    let changed = PlanContext {
        generation: Some(2),
        ..ctx()
    };
    let (s, a) = step(failed(1), &node(), seen, &changed);
    assert!(matches!(s, NodeState::Pending { .. }));
    assert_eq!(
        a,
        [NodeAction::DeleteJob(
            "it failed and the plan has changed since".into()
        )]
    );
    let (s, a) = step(failed(1), &node(), JobSeen::Absent, &changed);
    assert!(matches!(s, NodeState::Upgrading { .. }));
    assert_eq!(a, [NodeAction::CreateJob]);
}

#[test]
fn a_new_template_replaces_a_failed_job() {
    let seen = JobSeen::Failed {
        message: "x".into(),
        template_current: false,
    };
    let (s, a) = step(failed(1), &node(), seen, &ctx());
    assert!(matches!(s, NodeState::Pending { .. }));
    assert_eq!(
        a,
        [NodeAction::DeleteJob("its pod template changed".into())]
    );
}

/// On SUC's CRD `status.nodes` is pruned: every decision finds the node only selected, and the
/// failed Job of the template before an edit must still be replaced, not adopted as a failure.
#[test]
fn a_failed_job_of_an_earlier_template_is_replaced_without_a_record() {
    let old = || JobSeen::Failed {
        message: "x".into(),
        template_current: false,
    };
    for state in [NodeState::selected("j1", t(T0)), upgrading()] {
        let (s, a) = step(state, &node(), old(), &ctx());
        assert!(matches!(s, NodeState::Pending { .. }), "{s:?}");
        assert_eq!(
            a,
            [NodeAction::DeleteJob("its pod template changed".into())]
        );
    }
    // The Job of the current template that failed is a failure, held.
    let current = JobSeen::Failed {
        message: "x".into(),
        template_current: true,
    };
    let (s, _) = step(NodeState::selected("j1", t(T0)), &node(), current, &ctx());
    assert!(matches!(s, NodeState::Failed { .. }), "{s:?}");
}

#[test]
fn a_state_for_another_job_starts_over() {
    let s = NodeState::Upgrading {
        job: "old".into(),
        boot: None,
        since: t(T0),
        generation: Some(1),
        attempts: Attempts::default(),
    };
    let (s, a) = step(s, &node(), JobSeen::Absent, &ctx());
    assert!(
        matches!(s, NodeState::Upgrading { ref job, since, .. } if job == "j1" && since == t(T1))
    );
    assert_eq!(a, [NodeAction::CreateJob]);
}

#[test]
fn every_state_survives_the_wire() {
    let handoffs = [
        Handoff::AwaitingBoot {
            before: "b1".into(),
            since: t(T0),
        },
        Handoff::AwaitingHealth {
            before: "b1".into(),
            since: t(T0),
        },
        Handoff::TimedOut {
            stage: Stage::Boot,
            before: "b1".into(),
            since: t(T0),
            message: "m".into(),
        },
        Handoff::TimedOut {
            stage: Stage::Health,
            before: "b1".into(),
            since: t(T0),
            message: "m".into(),
        },
    ];
    let mut states = vec![
        NodeState::selected("j1", t(T0)),
        upgrading(),
        NodeState::Waiting {
            job: "j1".into(),
            since: t(T0),
        },
        failed(3),
        NodeState::Retrying {
            job: "j1".into(),
            message: "m".into(),
            generation: Some(2),
            since: t(T0),
            at: t(T1),
            attempts: Attempts {
                retries: 2,
                reboots: 1,
            },
        },
        NodeState::Failed {
            job: "j1".into(),
            message: "m".into(),
            generation: Some(4),
            since: t(T0),
            attempts: Attempts {
                retries: 3,
                reboots: 0,
            },
        },
    ];
    states.extend(handoffs.into_iter().map(|h| NodeState::Rebooting {
        job: "j1".into(),
        handoff: h,
        message: "m".into(),
    }));
    for s in states {
        let wire = s.to_progress("host").expect("not done");
        assert_eq!(wire.name, "host");
        let back = NodeState::from_progress(&wire, "other", t(T1));
        assert_eq!(back.as_ref(), Some(&s), "{wire:?}");
    }
    assert!(NodeState::Done.to_progress("host").is_none());
    let garbage = NodeProgress {
        name: "h".into(),
        phase: NodePhase::Unknown,
        job: Some("j".into()),
        ..Default::default()
    };
    assert!(NodeState::from_progress(&garbage, "b", t(T0)).is_none());
}

fn policy(spec: crate::plan::api::FailurePolicySpec) -> PlanContext {
    PlanContext {
        failure: FailurePolicy::of(Some(&spec)).expect("policy"),
        quarantine_room: 1,
        ..ctx()
    }
}

fn retry_twice() -> PlanContext {
    policy(crate::plan::api::FailurePolicySpec {
        action: Some(crate::plan::api::FailureAction::Retry),
        retries: Some(2),
        backoff: Some("10s".into()),
        ..Default::default()
    })
}

fn job_failed() -> JobSeen {
    JobSeen::Failed {
        message: "BackoffLimitExceeded: ".into(),
        template_current: true,
    }
}

fn at(s: &str) -> Timestamp {
    t(s)
}

#[test]
fn retry_deletes_the_failed_job_and_recreates_it_after_the_backoff() {
    let ctx = retry_twice();
    let (s, a) = step(upgrading(), &node(), job_failed(), &ctx);
    let NodeState::Retrying {
        at: due, attempts, ..
    } = &s
    else {
        panic!("{s:?}");
    };
    assert_eq!((*due, attempts.retries), (at("2026-11-22T10:01:10Z"), 1));
    assert!(matches!(&a[0], NodeAction::DeleteJob(why) if why.contains("retry 1 of 2 in 10s")));
    assert!(matches!(
        &a[1],
        NodeAction::Warn {
            reason: JOB_FAILED,
            ..
        }
    ));
    assert_eq!(a[2], NodeAction::Recheck(Duration::from_secs(10)));
    // Before it is due: the old Job may still show; nothing is asked but a recheck.
    let (same, a) = step(s.clone(), &node(), job_failed(), &ctx);
    assert_eq!(
        (same, a),
        (
            s.clone(),
            vec![NodeAction::Recheck(Duration::from_secs(10))]
        )
    );
    // Due, and the failed Job is still there: deleted again, never adopted.
    let obs_at = at("2026-11-22T10:01:10Z");
    let n = node();
    let obs = |job| Observation {
        node: &n,
        job_name: "j1",
        job,
        older_job_running: false,
        health: None,
    };
    let (again, a) = transition(s.clone(), &obs(job_failed()), &ctx, obs_at);
    assert!(matches!(again, NodeState::Retrying { .. }));
    assert!(matches!(&a[0], NodeAction::DeleteJob(_)));
    // Due and gone: created again, counting the retry.
    let (next, a) = transition(s, &obs(JobSeen::Absent), &ctx, obs_at);
    assert_eq!(a, [NodeAction::CreateJob]);
    assert!(matches!(
        next,
        NodeState::Upgrading { attempts: Attempts { retries: 1, reboots: 0 }, since, .. } if since == obs_at
    ));
}

#[test]
fn retries_used_up_hold_the_node_failed() {
    let ctx = retry_twice();
    let used = NodeState::Upgrading {
        job: "j1".into(),
        boot: Some("b1".into()),
        since: t(T0),
        generation: Some(1),
        attempts: Attempts {
            retries: 2,
            reboots: 0,
        },
    };
    let (s, a) = step(used, &node(), job_failed(), &ctx);
    assert!(matches!(
        s,
        NodeState::Failed {
            attempts: Attempts { retries: 2, .. },
            ..
        }
    ));
    assert!(matches!(
        &a[..],
        [NodeAction::Warn {
            reason: JOB_FAILED,
            ..
        }]
    ));
}

#[test]
fn a_job_killed_by_its_nodes_reboot_is_recreated_even_under_hold() {
    let rebooted = NodeInfo {
        boot_id: "b2".into(),
        ..node()
    };
    let (s, a) = step(upgrading(), &rebooted, job_failed(), &ctx());
    assert!(matches!(
        s,
        NodeState::Retrying { attempts: Attempts { reboots: 1, retries: 0 }, at, .. } if at == t(T1)
    ));
    assert!(matches!(
        &a[1],
        NodeAction::Warn {
            reason: JOB_KILLED_BY_REBOOT,
            ..
        }
    ));
    // Without a reboot, Hold holds.
    let (s, _) = step(upgrading(), &node(), job_failed(), &ctx());
    assert!(matches!(s, NodeState::Failed { .. }));
}

fn idle_job() -> JobSeen {
    JobSeen::Running {
        template_current: true,
        pods_idle: true,
    }
}

/// The node back from a reboot (boot b2), Ready since `since`.
fn back_since(since: &str) -> NodeInfo {
    NodeInfo {
        boot_id: "b2".into(),
        ready_since: Some(t(since)),
        ..node()
    }
}

#[test]
fn a_job_whose_pod_was_lost_in_a_reboot_is_recreated_once_the_node_is_back() {
    let (s, a) = step(upgrading(), &back_since(T0), idle_job(), &ctx());
    assert!(matches!(
        s,
        NodeState::Retrying { attempts: Attempts { reboots: 1, retries: 0 }, at, .. } if at == t(T1)
    ));
    assert!(matches!(&a[0], NodeAction::DeleteJob(_)));
    match &a[1] {
        NodeAction::Warn {
            reason: JOB_KILLED_BY_REBOOT,
            message,
        } => assert!(message.contains("lost when the node rebooted"), "{message}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_node_just_back_gets_the_grace_before_its_pod_counts_as_lost() {
    let (s, a) = step(
        upgrading(),
        &back_since("2026-11-22T10:00:50Z"),
        idle_job(),
        &ctx(),
    );
    assert_eq!(s, upgrading());
    assert_eq!(
        a,
        [NodeAction::Recheck(
            LOST_POD_GRACE - Duration::from_secs(10)
        )]
    );
}

#[test]
fn a_job_with_a_pod_that_ran_or_a_node_not_back_is_left_to_run() {
    let ran = JobSeen::Running {
        template_current: true,
        pods_idle: false,
    };
    // A pod ready or ended since (a replacement pod on the new boot): the Job is alive.
    assert_eq!(
        step(upgrading(), &back_since(T0), ran, &ctx()),
        (upgrading(), vec![])
    );
    // No reboot since the Job was made: a pod waiting for its image, say.
    let same_boot = NodeInfo {
        ready_since: Some(t(T0)),
        ..node()
    };
    assert_eq!(
        step(upgrading(), &same_boot, idle_job(), &ctx()),
        (upgrading(), vec![])
    );
    // Rebooted but not Ready yet.
    let down = NodeInfo {
        ready: false,
        ready_since: None,
        ..back_since(T0)
    };
    assert_eq!(
        step(upgrading(), &down, idle_job(), &ctx()),
        (upgrading(), vec![])
    );
    // The reboot retries are used up: the Job's deadline ends it.
    let used = NodeState::Upgrading {
        job: "j1".into(),
        boot: Some("b1".into()),
        since: t(T0),
        generation: Some(1),
        attempts: Attempts {
            reboots: crate::plan::core::failure::MAX_REBOOT_RETRIES,
            retries: 0,
        },
    };
    assert_eq!(
        step(used.clone(), &back_since(T0), idle_job(), &ctx()),
        (used, vec![])
    );
}

#[test]
fn quarantine_takes_the_node_out_while_the_plan_has_room() {
    let mut ctx = policy(crate::plan::api::FailurePolicySpec {
        action: Some(crate::plan::api::FailureAction::Quarantine),
        ..Default::default()
    });
    let (s, a) = step(upgrading(), &node(), job_failed(), &ctx);
    assert_eq!(s, NodeState::Quarantined);
    assert!(!s.holds_slot() && s.to_progress("n1").is_none());
    assert!(matches!(
        &a[..],
        [
            NodeAction::Warn {
                reason: QUARANTINED,
                ..
            },
            NodeAction::Quarantine { uncordon: false }
        ]
    ));
    ctx.quarantine_room = 0;
    let (s, _) = step(upgrading(), &node(), job_failed(), &ctx);
    assert!(matches!(s, NodeState::Failed { .. }), "no room: held");
    // Room again (a quarantined node was released): the held node goes.
    ctx.quarantine_room = 1;
    let (s, a) = step(failed(1), &node(), job_failed(), &ctx);
    assert_eq!(s, NodeState::Quarantined);
    assert!(a.contains(&NodeAction::Quarantine { uncordon: false }));
}

#[test]
fn uncordon_on_failure_undoes_only_the_plans_own_cordon() {
    let uncordoning = PlanContext {
        cordons: true,
        ..policy(crate::plan::api::FailurePolicySpec {
            uncordon: Some(true),
            ..Default::default()
        })
    };
    let cordoned = NodeInfo {
        unschedulable: true,
        ..node()
    };
    let (_, a) = step(upgrading(), &cordoned, job_failed(), &uncordoning);
    assert!(a.contains(&NodeAction::Uncordon), "{a:?}");
    let admins = NodeInfo {
        annotations: [(
            crate::node::cordon::CORDONED_BY.to_string(),
            crate::node::cordon::ADMIN.to_string(),
        )]
        .into(),
        ..cordoned.clone()
    };
    let (_, a) = step(upgrading(), &admins, job_failed(), &uncordoning);
    assert!(!a.contains(&NodeAction::Uncordon), "{a:?}");
    // Without the policy's word, a failed node stays cordoned (SUC).
    let (_, a) = step(
        upgrading(),
        &cordoned,
        job_failed(),
        &PlanContext {
            cordons: true,
            ..ctx()
        },
    );
    assert!(!a.contains(&NodeAction::Uncordon));
}

#[test]
fn a_reset_starts_a_failed_node_over_once_its_job_is_gone() {
    let resetting = PlanContext {
        reset: true,
        ..ctx()
    };
    let used = NodeState::Failed {
        job: "j1".into(),
        message: "m".into(),
        generation: Some(1),
        since: t(T0),
        attempts: Attempts {
            retries: 3,
            reboots: 1,
        },
    };
    let (s, a) = step(used, &node(), job_failed(), &resetting);
    assert!(matches!(
        s,
        NodeState::Retrying {
            attempts: Attempts {
                retries: 0,
                reboots: 0
            },
            ..
        }
    ));
    assert!(matches!(&a[0], NodeAction::DeleteJob(_)));
    let (s, a) = step(s, &node(), JobSeen::Absent, &resetting);
    assert_eq!(a, [NodeAction::CreateJob]);
    assert!(matches!(s, NodeState::Upgrading { .. }));
}
