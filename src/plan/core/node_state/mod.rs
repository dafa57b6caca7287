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
use crate::node::handoff::{Handoff, HandoffPolicy};
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

mod transitions;
mod wire;

pub use transitions::transition;

#[cfg(test)]
mod tests;
