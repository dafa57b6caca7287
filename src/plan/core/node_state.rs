//! One node's progress through one Plan: a typed state and one pure transition.
//!
//! The state of every node in `status.applying` is persisted in `status.nodes` (its wire shape is
//! [`NodeProgress`]); [`NodeState::from_progress`] and [`NodeState::to_progress`] convert at that
//! boundary only. [`transition`] takes the state, what the controller sees of the node and its
//! Job, and the time, and returns the next state and the actions that get there.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use super::rfc3339;
use crate::node::NodeInfo;
use crate::node::handoff::{self, Handoff, HandoffPolicy, Stage};
use crate::node::reboot::HealthObservation;
use crate::plan::api::{NodePhase, NodeProgress};

/// The reason of a failed Job, in `status.nodes` and the `Complete` condition.
pub const JOB_FAILED: &str = "JobFailed";

/// Where a node is in a Plan. `job` is always the name of the Job the state is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeState {
    /// Selected; its Job is not created yet because an older Job of the node still runs.
    Pending { job: String, since: Timestamp },
    /// Its Job was created at Plan `generation`. `boot` is the boot the node ran before the Job
    /// (for reboots).
    Upgrading {
        job: String,
        boot: Option<String>,
        since: Timestamp,
        generation: Option<i64>,
    },
    /// The Job completed and the node is in its reboot hand-off (never [`Handoff::Passed`]).
    Rebooting {
        job: String,
        handoff: Handoff,
        message: String,
    },
    /// The Job completed (and the node is back); `postCompleteDelay` runs from `since`.
    Waiting { job: String, since: Timestamp },
    /// The Job made at Plan `generation` failed; not retried until the Plan changes.
    Failed {
        job: String,
        message: String,
        generation: Option<i64>,
        since: Timestamp,
    },
    /// Labelled with the hash: the node leaves `status.applying`.
    Done,
}

/// The node's Job for the current hash, as the controller sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobSeen {
    Absent,
    Running {
        template_current: bool,
    },
    Complete {
        at: Option<Timestamp>,
    },
    Failed {
        message: String,
        template_current: bool,
    },
}

/// Everything one transition reads about the node.
#[derive(Debug, Clone)]
pub struct Observation<'a> {
    pub node: &'a NodeInfo,
    /// The name of the node's Job for the current hash.
    pub job_name: &'a str,
    pub job: JobSeen,
    /// Another unfinished Job of this Plan runs on the node (an older hash of this version).
    pub older_job_running: bool,
    /// The health gate's pods on the node, when they were looked at.
    pub health: Option<&'a HealthObservation>,
}

/// What is the same for every node of the Plan.
#[derive(Debug, Clone)]
pub struct PlanContext {
    pub namespace: String,
    pub generation: Option<i64>,
    pub post_complete_delay: Duration,
    /// `Some` when the Plan reboots its nodes after their Job.
    pub reboot: Option<HandoffPolicy>,
    /// The Plan cordons (or drains) nodes, so slipway uncordons them when they are done.
    pub cordons: bool,
}

/// What a transition asks the controller to do for the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeAction {
    /// Create the node's Job (and, for a Plan that reboots, its reboot pod first).
    CreateJob,
    /// Delete the node's Job of the current hash.
    DeleteJob(String),
    /// Label the node done (with the hash and `postCompleteLabels`), uncordoning it if slipway
    /// cordoned it.
    MarkDone { uncordon: bool },
    /// Uncordon now: the Job completed and the node is back, though it is not done yet.
    Uncordon,
    /// A failure to report, once.
    Warn {
        reason: &'static str,
        message: String,
    },
    /// Look again after this long.
    Recheck(Duration),
}

impl NodeState {
    /// A node just selected for `job`.
    pub fn selected(job: &str, now: Timestamp) -> NodeState {
        NodeState::Pending {
            job: job.to_string(),
            since: now,
        }
    }

    pub fn job(&self) -> Option<&str> {
        match self {
            NodeState::Pending { job, .. }
            | NodeState::Upgrading { job, .. }
            | NodeState::Rebooting { job, .. }
            | NodeState::Waiting { job, .. }
            | NodeState::Failed { job, .. } => Some(job),
            NodeState::Done => None,
        }
    }

    /// Failed, by its Job or by a timeout of its hand-off: the node holds its slot.
    pub fn failure(&self) -> Option<(&'static str, &str)> {
        match self {
            NodeState::Failed { message, .. } => Some((JOB_FAILED, message)),
            NodeState::Rebooting {
                handoff: Handoff::TimedOut { stage, message, .. },
                ..
            } => Some((stage.reason(), message)),
            _ => None,
        }
    }

    /// Whether the node's reboot pod must exist: from before its Job starts until it is back.
    pub fn needs_reboot_pod(&self) -> bool {
        matches!(
            self,
            NodeState::Pending { .. } | NodeState::Upgrading { .. } | NodeState::Rebooting { .. }
        )
    }

    /// The phase name in `status.nodes`.
    pub fn phase(&self) -> NodePhase {
        match self {
            NodeState::Pending { .. } => NodePhase::Pending,
            NodeState::Upgrading { .. } => NodePhase::Upgrading,
            NodeState::Rebooting { handoff, .. } => match handoff {
                Handoff::AwaitingHealth { .. } => NodePhase::WaitingForHealth,
                Handoff::TimedOut { .. } => NodePhase::Failed,
                Handoff::AwaitingBoot { .. } | Handoff::Passed => NodePhase::Rebooting,
            },
            NodeState::Waiting { .. } => NodePhase::Waiting,
            NodeState::Failed { .. } | NodeState::Done => NodePhase::Failed,
        }
    }

    /// Reads a state written by [`NodeState::to_progress`]; `None` for what it cannot understand
    /// (the node then starts over as selected). `boot_now` stands in for a missing boot record.
    pub fn from_progress(p: &NodeProgress, boot_now: &str, now: Timestamp) -> Option<NodeState> {
        let job = p.job.clone()?;
        let since = p
            .since
            .as_deref()
            .and_then(|s| s.parse::<Timestamp>().ok())
            .unwrap_or(now);
        let before = || p.boot_id.clone().unwrap_or_else(|| boot_now.to_string());
        let message = p.message.clone().unwrap_or_default();
        let timed_out = |stage| NodeState::Rebooting {
            job: job.clone(),
            handoff: Handoff::TimedOut {
                stage,
                before: before(),
                since,
                message: message.clone(),
            },
            message: message.clone(),
        };
        Some(match (p.phase, p.reason.as_deref()) {
            (NodePhase::Pending, _) => NodeState::Pending { job, since },
            (NodePhase::Upgrading, _) => NodeState::Upgrading {
                boot: p.boot_id.clone(),
                job,
                since,
                generation: p.generation,
            },
            (NodePhase::Rebooting, _) => NodeState::Rebooting {
                handoff: Handoff::AwaitingBoot {
                    before: before(),
                    since,
                },
                job,
                message,
            },
            (NodePhase::WaitingForHealth, _) => NodeState::Rebooting {
                handoff: Handoff::AwaitingHealth {
                    before: before(),
                    since,
                },
                job,
                message,
            },
            (NodePhase::Waiting, _) => NodeState::Waiting { job, since },
            (NodePhase::Failed, Some("RebootTimedOut")) => timed_out(Stage::Boot),
            (NodePhase::Failed, Some("HealthGateTimedOut")) => timed_out(Stage::Health),
            (NodePhase::Failed, _) => NodeState::Failed {
                job,
                message,
                generation: p.generation,
                since,
            },
            _ => return None,
        })
    }

    /// The entry of `status.nodes` for the node whose hostname is `name`; `None` for [`NodeState::Done`].
    pub fn to_progress(&self, name: &str) -> Option<NodeProgress> {
        let entry = |job: &str, since: Timestamp| NodeProgress {
            name: name.to_string(),
            phase: self.phase(),
            job: Some(job.to_string()),
            since: Some(rfc3339(since)),
            ..Default::default()
        };
        Some(match self {
            NodeState::Pending { job, since } | NodeState::Waiting { job, since } => {
                entry(job, *since)
            }
            NodeState::Upgrading {
                job,
                boot,
                since,
                generation,
            } => NodeProgress {
                boot_id: boot.clone(),
                generation: *generation,
                ..entry(job, *since)
            },
            NodeState::Rebooting {
                job,
                handoff,
                message,
            } => {
                let since = match handoff {
                    Handoff::AwaitingBoot { since, .. }
                    | Handoff::AwaitingHealth { since, .. }
                    | Handoff::TimedOut { since, .. } => *since,
                    Handoff::Passed => Timestamp::UNIX_EPOCH,
                };
                NodeProgress {
                    reason: self.failure().map(|(r, _)| r.to_string()),
                    boot_id: handoff.before().map(str::to_string),
                    message: Some(message.clone()).filter(|m| !m.is_empty()),
                    ..entry(job, since)
                }
            }
            NodeState::Failed {
                job,
                message,
                generation,
                since,
            } => NodeProgress {
                reason: Some(JOB_FAILED.to_string()),
                message: Some(message.clone()),
                generation: *generation,
                ..entry(job, *since)
            },
            NodeState::Done => return None,
        })
    }
}

/// The next state of one node, and the actions that get it there.
pub fn transition(
    state: NodeState,
    obs: &Observation<'_>,
    ctx: &PlanContext,
    now: Timestamp,
) -> (NodeState, Vec<NodeAction>) {
    let mut actions = Vec::new();
    let next = match state {
        // A hand-off of an older Job finishes before the node's next Job starts.
        NodeState::Rebooting { job, handoff, .. } => {
            rebooting(job, handoff, obs, ctx, now, &mut actions)
        }
        s if s.job() != Some(obs.job_name) => pending(
            NodeState::selected(obs.job_name, now),
            obs,
            ctx,
            now,
            &mut actions,
        ),
        s @ NodeState::Pending { .. } => pending(s, obs, ctx, now, &mut actions),
        s @ NodeState::Upgrading { .. } => upgrading(s, obs, ctx, now, &mut actions),
        NodeState::Waiting { job, since } => waiting(job, since, obs, ctx, now, &mut actions),
        s @ NodeState::Failed { .. } => failed(s, obs, ctx, now, &mut actions),
        NodeState::Done => NodeState::Done,
    };
    (next, actions)
}

/// Selected, no Job of this hash yet (or one that is not ours to keep).
fn pending(
    state: NodeState,
    obs: &Observation<'_>,
    ctx: &PlanContext,
    now: Timestamp,
    actions: &mut Vec<NodeAction>,
) -> NodeState {
    match &obs.job {
        JobSeen::Absent if obs.older_job_running => state,
        JobSeen::Absent => {
            actions.push(NodeAction::CreateJob);
            NodeState::Upgrading {
                job: obs.job_name.to_string(),
                boot: Some(obs.node.boot_id.clone()),
                since: now,
                generation: ctx.generation,
            }
        }
        // Adopted (made before a restart, or by SUC): the boot seen now is the one before.
        _ => upgrading(
            NodeState::Upgrading {
                job: obs.job_name.to_string(),
                boot: Some(obs.node.boot_id.clone()),
                since: now,
                generation: ctx.generation,
            },
            obs,
            ctx,
            now,
            actions,
        ),
    }
}

/// The Job was created: follow it.
fn upgrading(
    state: NodeState,
    obs: &Observation<'_>,
    ctx: &PlanContext,
    now: Timestamp,
    actions: &mut Vec<NodeAction>,
) -> NodeState {
    let NodeState::Upgrading {
        job,
        boot,
        since,
        generation,
    } = state
    else {
        return state;
    };
    let same = |job, boot, since| NodeState::Upgrading {
        job,
        boot,
        since,
        generation,
    };
    match &obs.job {
        // Created but not seen yet, or its creation failed: ask again (a conflict is harmless).
        JobSeen::Absent if !obs.older_job_running => {
            actions.push(NodeAction::CreateJob);
            same(job, boot, since)
        }
        JobSeen::Absent => NodeState::Pending { job, since },
        JobSeen::Running {
            template_current: false,
        } => {
            actions.push(NodeAction::DeleteJob("its pod template changed".into()));
            NodeState::Pending { job, since: now }
        }
        JobSeen::Running { .. } => same(job, boot, since),
        JobSeen::Complete { at } => {
            let before = boot.unwrap_or_else(|| obs.node.boot_id.clone());
            completed(job, before, at.unwrap_or(now), obs, ctx, now, actions)
        }
        JobSeen::Failed { message, .. } => {
            let message = format!(
                "Job {}/{job} failed on Node {}: {message}",
                ctx.namespace, obs.node.name
            );
            actions.push(NodeAction::Warn {
                reason: JOB_FAILED,
                message: message.clone(),
            });
            NodeState::Failed {
                job,
                message,
                generation,
                since: now,
            }
        }
    }
}

/// The Job completed at `at`: reboot first if the Plan says so, then wait out the delay.
fn completed(
    job: String,
    before: String,
    at: Timestamp,
    obs: &Observation<'_>,
    ctx: &PlanContext,
    now: Timestamp,
    actions: &mut Vec<NodeAction>,
) -> NodeState {
    match &ctx.reboot {
        Some(_) => rebooting(job, Handoff::start(before, now), obs, ctx, now, actions),
        None => waiting(job, at, obs, ctx, now, actions),
    }
}

/// In the reboot hand-off. A node that never comes back fails, holding its slot, and may recover.
fn rebooting(
    job: String,
    handoff: Handoff,
    obs: &Observation<'_>,
    ctx: &PlanContext,
    now: Timestamp,
    actions: &mut Vec<NodeAction>,
) -> NodeState {
    let Some(policy) = &ctx.reboot else {
        return waiting(job, now, obs, ctx, now, actions);
    };
    let seen = handoff::Observation {
        node: &obs.node.name,
        ready: obs.node.ready,
        boot_id: &obs.node.boot_id,
        health: obs.health,
    };
    let step = handoff::step(&handoff, &seen, policy, now);
    if let Some((reason, message)) = step.timed_out.clone() {
        actions.push(NodeAction::Warn { reason, message });
    }
    if let Some(after) = step.recheck_after {
        actions.push(NodeAction::Recheck(after));
    }
    if step.state == Handoff::Passed {
        // The hand-off of an older Job: the node is free for its current one.
        if job != obs.job_name {
            return pending(
                NodeState::selected(obs.job_name, now),
                obs,
                ctx,
                now,
                actions,
            );
        }
        return waiting(job, now, obs, ctx, now, actions);
    }
    NodeState::Rebooting {
        job,
        message: step.state.describe(&seen, policy),
        handoff: step.state,
    }
}

/// Done with its Job (and reboot): labelled once `postCompleteDelay` has passed since `since`.
/// Like SUC, the node is uncordoned as soon as its Job is over, during the delay too; unlike SUC,
/// not if an admin cordoned it before the Job (see [`crate::node::cordon`]).
fn waiting(
    job: String,
    since: Timestamp,
    obs: &Observation<'_>,
    ctx: &PlanContext,
    now: Timestamp,
    actions: &mut Vec<NodeAction>,
) -> NodeState {
    let uncordon = ctx.cordons && crate::node::cordon::plan_may_uncordon(obs.node);
    let waited: Duration = now.duration_since(since).try_into().unwrap_or_default();
    if waited >= ctx.post_complete_delay {
        actions.push(NodeAction::MarkDone { uncordon });
        return NodeState::Done;
    }
    if uncordon {
        actions.push(NodeAction::Uncordon);
    }
    actions.push(NodeAction::Recheck(ctx.post_complete_delay - waited));
    NodeState::Waiting { job, since }
}

/// The Job failed. It stays failed while the Plan is unchanged; a new generation (or a new pod
/// template) replaces the Job.
fn failed(
    state: NodeState,
    obs: &Observation<'_>,
    ctx: &PlanContext,
    now: Timestamp,
    actions: &mut Vec<NodeAction>,
) -> NodeState {
    let NodeState::Failed { generation, .. } = &state else {
        return state;
    };
    let plan_changed = *generation != ctx.generation;
    match &obs.job {
        JobSeen::Failed {
            template_current, ..
        } if plan_changed || !template_current => {
            actions.push(NodeAction::DeleteJob(if plan_changed {
                "it failed and the plan has changed since".into()
            } else {
                "its pod template changed".into()
            }));
            NodeState::selected(obs.job_name, now)
        }
        // Still failed, or gone after its TTL while the Plan is unchanged: never retried.
        JobSeen::Failed { .. } => state,
        JobSeen::Absent if !plan_changed => state,
        _ => pending(
            NodeState::selected(obs.job_name, now),
            obs,
            ctx,
            now,
            actions,
        ),
    }
}

/// The labels a done node gets: `postCompleteLabels` (expanded), then the Plan's label.
pub fn done_labels(
    plan_label: &str,
    hash: &str,
    post_complete: BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut labels = post_complete;
    labels.insert(plan_label.to_string(), hash.to_string());
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::handoff::GatePolicy;

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
        }
    }

    fn failed(generation: i64) -> NodeState {
        NodeState::Failed {
            job: "j1".into(),
            message: "m".into(),
            generation: Some(generation),
            since: t(T0),
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

    #[test]
    fn a_state_for_another_job_starts_over() {
        let s = NodeState::Upgrading {
            job: "old".into(),
            boot: None,
            since: t(T0),
            generation: Some(1),
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
}
