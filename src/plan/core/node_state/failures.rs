//! The transitions of a node whose Job failed: the failure policy's retry, quarantine or hold,
//! a reset, and a Plan changed since.

use std::time::Duration;

use jiff::Timestamp;

use super::{
    Attempts, JOB_FAILED, JOB_KILLED_BY_REBOOT, JobSeen, NodeAction, NodeState, Observation,
    PlanContext, QUARANTINED, pending, upgrading,
};
use crate::plan::core::failure::{Cause, Outcome};

/// The node's Job just failed (`state` is [`NodeState::Failed`]): the failure policy says whether
/// it is retried, the node quarantined, or held.
pub(super) fn job_failed(
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
pub(super) fn retrying(
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
pub(super) fn failed(
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
