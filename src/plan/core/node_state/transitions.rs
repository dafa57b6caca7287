//! The transitions of one node: from its state, what is seen of it and its Job, and the time, to
//! its next state and the actions that get there; a failed Job's under the failure policy (retry,
//! quarantine or hold), a reset, and a Plan changed since.

use std::time::Duration;

use jiff::Timestamp;

use super::{
    Attempts, JOB_FAILED, JOB_KILLED_BY_REBOOT, JobSeen, LOST_POD_GRACE, NodeAction, NodeState,
    Observation, PlanContext, QUARANTINED,
};
use crate::node::handoff::{self, Handoff};
use crate::plan::core::failure::{Cause, Outcome};

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
fn pending(
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

/// The node's Job just failed (`state` is [`NodeState::Failed`]): the failure policy says whether
/// it is retried, the node quarantined, or held.
fn job_failed(
    state: NodeState,
    rebooted: bool,
    obs: &Observation<'_>,
    ctx: &PlanContext,
    now: Timestamp,
    actions: &mut Vec<NodeAction>,
) -> NodeState {
    let NodeState::Failed {
        job,
        message,
        generation,
        since,
        attempts,
    } = state
    else {
        return state;
    };
    match ctx
        .failure
        .on_failure(attempts, rebooted, ctx.quarantine_room > 0)
    {
        Outcome::Retry {
            delay,
            attempts,
            cause,
        } => {
            let (why, reason) = retry_note(cause, attempts, delay, ctx);
            let message = format!("{message}; {why}");
            actions.push(NodeAction::DeleteJob(format!("it failed: {why}")));
            actions.push(NodeAction::Warn {
                reason,
                message: message.clone(),
            });
            actions.push(NodeAction::Recheck(delay.max(Duration::from_secs(1))));
            let at = now.checked_add(delay).unwrap_or(now);
            NodeState::Retrying {
                job,
                message,
                generation,
                since,
                at,
                attempts,
            }
        }
        Outcome::Quarantine => quarantine(&message, obs, ctx, actions),
        Outcome::Hold => {
            actions.push(NodeAction::Warn {
                reason: JOB_FAILED,
                message: message.clone(),
            });
            if uncordons_on_failure(obs, ctx) {
                actions.push(NodeAction::Uncordon);
            }
            NodeState::Failed {
                job,
                message,
                generation,
                since,
                attempts,
            }
        }
    }
}

/// Why a failed Job is created again, in words, and the reason of its event.
fn retry_note(
    cause: Cause,
    attempts: Attempts,
    delay: Duration,
    ctx: &PlanContext,
) -> (String, &'static str) {
    match cause {
        Cause::Reboot => (
            format!(
                "the node rebooted while it ran; recreating it ({} of {})",
                attempts.reboots,
                crate::plan::core::failure::MAX_REBOOT_RETRIES
            ),
            JOB_KILLED_BY_REBOOT,
        ),
        Cause::Policy => (
            format!(
                "retry {} of {} in {}",
                attempts.retries,
                ctx.failure.retries,
                crate::common::duration::GoDuration::from_std(delay)
            ),
            JOB_FAILED,
        ),
    }
}

/// The node leaves the rollout, labelled and tainted (the failure is reported once).
fn quarantine(
    message: &str,
    obs: &Observation<'_>,
    ctx: &PlanContext,
    actions: &mut Vec<NodeAction>,
) -> NodeState {
    actions.push(NodeAction::Warn {
        reason: QUARANTINED,
        message: format!("{message}; Node {} quarantined", obs.node.name),
    });
    actions.push(NodeAction::Quarantine {
        uncordon: uncordons_on_failure(obs, ctx),
    });
    NodeState::Quarantined
}

/// The policy uncordons a failed node: its cordon is the Plan's own, or the Job failed before it
/// cordoned the node (the record the Plan wrote goes, so that a later cordon is an admin's).
fn uncordons_on_failure(obs: &Observation<'_>, ctx: &PlanContext) -> bool {
    use crate::node::cordon;
    ctx.failure.uncordon
        && ctx.cordons
        && (cordon::plan_may_uncordon(obs.node)
            || (!obs.node.unschedulable && cordon::has_record(obs.node)))
}

/// The failed Job goes first; at `at` the node's Job is created again. A Plan changed since, or
/// a reset, starts the node's count over.
fn retrying(
    state: NodeState,
    obs: &Observation<'_>,
    ctx: &PlanContext,
    now: Timestamp,
    actions: &mut Vec<NodeAction>,
) -> NodeState {
    let NodeState::Retrying {
        job,
        message,
        generation,
        since,
        mut at,
        mut attempts,
    } = state
    else {
        return state;
    };
    if generation != ctx.generation || ctx.reset {
        attempts = Attempts::default();
        at = now;
    }
    let waiting = |at: Timestamp| NodeState::Retrying {
        job: job.clone(),
        message: message.clone(),
        generation: ctx.generation,
        since,
        at,
        attempts,
    };
    let due = now >= at;
    match &obs.job {
        JobSeen::Failed { .. } => {
            if due {
                actions.push(NodeAction::DeleteJob("it failed: recreating it".into()));
            }
            let left: Duration = at.duration_since(now).try_into().unwrap_or_default();
            actions.push(NodeAction::Recheck(left.max(Duration::from_secs(2))));
            waiting(at)
        }
        JobSeen::Absent if !due => {
            let left: Duration = at.duration_since(now).try_into().unwrap_or_default();
            actions.push(NodeAction::Recheck(left));
            waiting(at)
        }
        JobSeen::Absent if obs.older_job_running => waiting(at),
        JobSeen::Absent => {
            actions.push(NodeAction::CreateJob);
            NodeState::Upgrading {
                job,
                boot: Some(obs.node.boot_id.clone()),
                since: now,
                generation: ctx.generation,
                attempts,
            }
        }
        // Created again by someone else: followed.
        _ => upgrading(
            NodeState::Upgrading {
                job,
                boot: Some(obs.node.boot_id.clone()),
                since: now,
                generation: ctx.generation,
                attempts,
            },
            obs,
            ctx,
            now,
            actions,
        ),
    }
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
    let NodeState::Failed {
        generation,
        job,
        message,
        ..
    } = &state
    else {
        return state;
    };
    let plan_changed = *generation != ctx.generation;
    if ctx.reset && !plan_changed {
        let again = NodeState::Retrying {
            job: job.clone(),
            message: message.clone(),
            generation: ctx.generation,
            since: now,
            at: now,
            attempts: Attempts::default(),
        };
        return retrying(again, obs, ctx, now, actions);
    }
    // Held because the Plan had quarantined as many nodes as it may; one was released since.
    let still_failed = matches!(
        obs.job,
        JobSeen::Absent
            | JobSeen::Failed {
                template_current: true,
                ..
            }
    );
    if !plan_changed
        && still_failed
        && ctx.failure.last == crate::plan::core::failure::Last::Quarantine
        && ctx.quarantine_room > 0
    {
        return quarantine(message, obs, ctx, actions);
    }
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
