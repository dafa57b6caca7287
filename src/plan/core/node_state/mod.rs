//! One node's progress through one Plan: a typed state and one pure transition.
//!
//! The state of every node in `status.applying` is persisted in `status.nodes` (its wire shape is
//! [`NodeProgress`]); [`NodeState::from_progress`] and [`NodeState::to_progress`] convert at that
//! boundary only. [`transition`] takes the state, what the controller sees of the node and its
//! Job, and the time, and returns the next state and the actions that get there.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use super::failure::{Attempts, FailurePolicy};
use super::rfc3339;
use crate::node::NodeInfo;
use crate::node::handoff::{self, Handoff, HandoffPolicy};
use crate::node::reboot::HealthObservation;
use crate::plan::api::NodePhase;

/// The reason of a failed Job, in `status.nodes` and the `Complete` condition.
pub const JOB_FAILED: &str = "JobFailed";
/// The event of a Job killed by its own node's reboot (and recreated).
pub const JOB_KILLED_BY_REBOOT: &str = "JobKilledByReboot";
/// How long a node back from a reboot has before its Job's lost pod counts as lost: the kubelet
/// reports its pods and the job controller its counts well within it.
pub const LOST_POD_GRACE: Duration = Duration::from_secs(30);
/// The event of a node quarantined by the failure policy.
pub const QUARANTINED: &str = "Quarantined";

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
        attempts: Attempts,
    },
    /// The Job completed and the node is in its reboot hand-off (never [`Handoff::Passed`]).
    Rebooting {
        job: String,
        handoff: Handoff,
        message: String,
    },
    /// The Job completed (and the node is back); `postCompleteDelay` runs from `since`.
    Waiting { job: String, since: Timestamp },
    /// The Job made at Plan `generation` failed; not retried until the Plan changes (or its
    /// failures are reset).
    Failed {
        job: String,
        message: String,
        generation: Option<i64>,
        since: Timestamp,
        attempts: Attempts,
    },
    /// The Job failed at `since` and is recreated at `at`, once the failed one is gone.
    Retrying {
        job: String,
        message: String,
        generation: Option<i64>,
        since: Timestamp,
        at: Timestamp,
        attempts: Attempts,
    },
    /// Labelled with the hash: the node leaves `status.applying`.
    Done,
    /// Labelled and tainted by the failure policy: the node leaves `status.applying`.
    Quarantined,
}

/// The node's Job for the current hash, as the controller sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobSeen {
    Absent,
    Running {
        template_current: bool,
        /// No pod of the Job is ready and none has ended (`status.ready`, `failed` and
        /// `succeeded` all 0): nothing has run since the Job's first pod, or its pod was lost.
        pods_idle: bool,
    },
    Complete {
        at: Option<Timestamp>,
    },
    Failed {
        message: String,
        template_current: bool,
    },
}

impl JobSeen {
    /// A Job of an earlier pod template (a failed one too: on SUC's CRD, which prunes
    /// `status.nodes`, no record of the failure's generation says the Plan changed since).
    pub fn outdated(&self) -> bool {
        matches!(
            self,
            JobSeen::Running {
                template_current: false,
                ..
            } | JobSeen::Failed {
                template_current: false,
                ..
            }
        )
    }
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
    pub failure: FailurePolicy,
    /// The Plan's failures are being reset (`slipway.dev/reset-failures`): failed nodes start over.
    pub reset: bool,
    /// How many more nodes the failure policy may quarantine in this decision.
    pub quarantine_room: i32,
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
    /// Label and taint the node as quarantined (and uncordon it if slipway cordoned it and the
    /// policy says so).
    Quarantine { uncordon: bool },
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
            | NodeState::Failed { job, .. }
            | NodeState::Retrying { job, .. } => Some(job),
            NodeState::Done | NodeState::Quarantined => None,
        }
    }

    /// Whether the node is still in the rollout (in `status.applying`), holding a slot.
    pub fn holds_slot(&self) -> bool {
        !matches!(self, NodeState::Done | NodeState::Quarantined)
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

    /// Whether the node's reboot pod may exist: from when its Job completed until it is back.
    pub fn needs_reboot_pod(&self) -> bool {
        matches!(self, NodeState::Rebooting { .. })
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
            NodeState::Retrying { .. } => NodePhase::Retrying,
            NodeState::Failed { .. } | NodeState::Done | NodeState::Quarantined => {
                NodePhase::Failed
            }
        }
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
        s @ NodeState::Retrying { .. } => retrying(s, obs, ctx, now, &mut actions),
        s @ (NodeState::Done | NodeState::Quarantined) => s,
    };
    (next, actions)
}

/// Selected, no Job of this hash yet (or one that is not ours to keep).
pub(super) fn pending(
    state: NodeState,
    obs: &Observation<'_>,
    ctx: &PlanContext,
    now: Timestamp,
    actions: &mut Vec<NodeAction>,
) -> NodeState {
    match &obs.job {
        JobSeen::Absent if obs.older_job_running => state,
        // A reset starts over a node whose Job failed (one the Plan had quarantined): the failed
        // Job goes first.
        JobSeen::Failed { .. } if ctx.reset => retrying(
            NodeState::Retrying {
                job: obs.job_name.to_string(),
                message: "its failures were reset".into(),
                generation: ctx.generation,
                since: now,
                at: now,
                attempts: Attempts::default(),
            },
            obs,
            ctx,
            now,
            actions,
        ),
        JobSeen::Absent => {
            actions.push(NodeAction::CreateJob);
            NodeState::Upgrading {
                job: obs.job_name.to_string(),
                boot: Some(obs.node.boot_id.clone()),
                since: now,
                generation: ctx.generation,
                attempts: Attempts::default(),
            }
        }
        // Adopted (made before a restart, or by SUC): the boot seen now is the one before.
        _ => upgrading(
            NodeState::Upgrading {
                job: obs.job_name.to_string(),
                boot: Some(obs.node.boot_id.clone()),
                since: now,
                generation: ctx.generation,
                attempts: Attempts::default(),
            },
            obs,
            ctx,
            now,
            actions,
        ),
    }
}

/// The Job was created: follow it.
pub(super) fn upgrading(
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
        attempts,
    } = state
    else {
        return state;
    };
    let same = |job, boot, since| NodeState::Upgrading {
        job,
        boot,
        since,
        generation,
        attempts,
    };
    match &obs.job {
        // Created but not seen yet, or its creation failed: ask again (a conflict is harmless).
        JobSeen::Absent if !obs.older_job_running => {
            actions.push(NodeAction::CreateJob);
            same(job, boot, since)
        }
        JobSeen::Absent => NodeState::Pending { job, since },
        // Running or failed, a Job of an earlier template goes: a failure is its template's.
        seen if seen.outdated() => {
            actions.push(NodeAction::DeleteJob("its pod template changed".into()));
            NodeState::Pending { job, since: now }
        }
        // The node rebooted since the Job was created (a power cut, a kernel panic, someone's
        // reboot) and its pod has not run since: the kubelet never starts a `restartPolicy:
        // Never` pod that ran on an earlier boot again, and the Job would wait for its deadline.
        JobSeen::Running {
            pods_idle: true, ..
        } if obs.node.ready
            && attempts.reboots < crate::plan::core::failure::MAX_REBOOT_RETRIES
            && boot.as_ref().is_some_and(|b| *b != obs.node.boot_id) =>
        {
            let back: Duration = (obs.node.ready_since)
                .and_then(|t| now.duration_since(t).try_into().ok())
                .unwrap_or_default();
            if back < LOST_POD_GRACE {
                actions.push(NodeAction::Recheck(LOST_POD_GRACE - back));
                return same(job, boot, since);
            }
            let lost = lost_pod(job, generation, attempts, obs, ctx, now);
            job_failed(lost, true, obs, ctx, now, actions)
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
            let rebooted = boot.is_some_and(|b| b != obs.node.boot_id);
            let failed = NodeState::Failed {
                job,
                message,
                generation,
                since: now,
                attempts,
            };
            job_failed(failed, rebooted, obs, ctx, now, actions)
        }
    }
}

/// The node's Job whose pod was lost in a reboot, as a failure the reboot retries recreate.
fn lost_pod(
    job: String,
    generation: Option<i64>,
    attempts: Attempts,
    obs: &Observation<'_>,
    ctx: &PlanContext,
    now: Timestamp,
) -> NodeState {
    let message = format!(
        "Job {}/{job} on Node {}: its pod was lost when the node rebooted and has not run since \
         it is back",
        ctx.namespace, obs.node.name
    );
    NodeState::Failed {
        job,
        message,
        generation,
        since: now,
        attempts,
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

mod failures;
mod wire;

use failures::{failed, job_failed, retrying};

#[cfg(test)]
mod tests;
