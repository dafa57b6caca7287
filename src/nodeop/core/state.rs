//! Where each node of a NodeOp stands, as a typed state, read from and written to kairos-operator's
//! `status.nodeStatuses` (its phase and reboot-status words, plus slipway's `bootID` and `since`).

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::nodeop::api::NodeStatus;

/// kairos-operator's words.
pub mod words {
    pub const PREFLIGHT: &str = "Preflight";
    pub const PENDING: &str = "Pending";
    pub const RUNNING: &str = "Running";
    pub const COMPLETED: &str = "Completed";
    pub const FAILED: &str = "Failed";
    pub const NOT_REQUESTED: &str = "not-requested";
    pub const REBOOT_PENDING: &str = "pending";
    pub const CANCELLED: &str = "cancelled";
    pub const REBOOTED: &str = "completed";
}

/// One node of a NodeOp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeState {
    /// The preflight pod decides whether the node needs the operation.
    Preflight { since: Timestamp },
    /// Cordoned (if asked) and draining (if asked); the Job `job` is created once the drain is
    /// over. `before` is the boot the node ran then.
    Pending {
        job: String,
        before: String,
        since: Timestamp,
    },
    /// The Job runs.
    Running { job: String, before: String },
    /// The Job succeeded and the node reboots: waiting for a boot other than `before`, and Ready.
    Rebooting {
        job: String,
        before: String,
        since: Timestamp,
        /// The hand-off's timeout passed: the node keeps its slot, and may still come back.
        late: Option<String>,
    },
    /// Done: the Job succeeded (and the node came back from its reboot), or the preflight
    /// skipped it.
    Completed {
        job: Option<String>,
        message: String,
        rebooted: bool,
    },
    Failed {
        job: Option<String>,
        message: String,
    },
}

impl NodeState {
    /// Whether the node holds one of the NodeOp's slots (and the node in the budget).
    pub fn in_flight(&self) -> bool {
        !matches!(self, NodeState::Completed { .. } | NodeState::Failed { .. })
    }

    pub fn job(&self) -> Option<&str> {
        match self {
            NodeState::Preflight { .. } => None,
            NodeState::Pending { job, .. }
            | NodeState::Running { job, .. }
            | NodeState::Rebooting { job, .. } => Some(job),
            NodeState::Completed { job, .. } | NodeState::Failed { job, .. } => job.as_deref(),
        }
    }

    /// Reads a node's entry; `None` when it cannot be followed (a phase no one writes).
    pub fn read(status: &NodeStatus, now: Timestamp) -> Option<NodeState> {
        let since = status
            .since
            .as_ref()
            .or(status.last_updated.as_ref())
            .map_or(now, |t| t.0);
        let job = status.job_name.clone().filter(|j| !j.is_empty());
        let before = status.boot_id.clone().unwrap_or_default();
        let message = status.message.clone().unwrap_or_default();
        let reboot = status.reboot_status.as_deref();
        Some(match status.phase.as_str() {
            words::PREFLIGHT => NodeState::Preflight { since },
            words::PENDING => NodeState::Pending {
                job: job?,
                before,
                since,
            },
            words::RUNNING => NodeState::Running { job: job?, before },
            words::COMPLETED if reboot == Some(words::REBOOT_PENDING) => NodeState::Rebooting {
                job: job?,
                before,
                since,
                late: None,
            },
            words::COMPLETED => NodeState::Completed {
                job,
                message,
                rebooted: reboot == Some(words::REBOOTED),
            },
            words::FAILED => NodeState::Failed { job, message },
            _ => return None,
        })
    }

    /// The node's entry; `reboot`: whether the NodeOp asks for reboots. `previous` keeps the
    /// time of an entry that did not change.
    pub fn write(&self, reboot: bool, previous: Option<&NodeStatus>, now: Timestamp) -> NodeStatus {
        let mut s = self.entry(reboot);
        let unchanged = previous.is_some_and(|p| {
            NodeStatus {
                last_updated: None,
                ..p.clone()
            } == s
        });
        s.last_updated = match (unchanged, previous) {
            (true, Some(p)) => p.last_updated.clone(),
            _ => Some(Time(now)),
        };
        s
    }

    /// The entry, without its time.
    fn entry(&self, reboot: bool) -> NodeStatus {
        let requested =
            |yes: &str| Some(if reboot { yes } else { words::NOT_REQUESTED }.to_string());
        match self {
            NodeState::Preflight { since } => NodeStatus {
                phase: words::PREFLIGHT.into(),
                message: Some("Preflight in progress".into()),
                reboot_status: Some(words::NOT_REQUESTED.into()),
                since: Some(Time(*since)),
                ..Default::default()
            },
            NodeState::Pending { job, before, since } => NodeStatus {
                phase: words::PENDING.into(),
                job_name: Some(job.clone()),
                message: Some("Job created".into()),
                reboot_status: requested(words::REBOOT_PENDING),
                boot_id: Some(before.clone()).filter(|b| !b.is_empty()),
                since: Some(Time(*since)),
                ..Default::default()
            },
            NodeState::Running { job, before } => NodeStatus {
                phase: words::RUNNING.into(),
                job_name: Some(job.clone()),
                message: Some("Job is running".into()),
                reboot_status: requested(words::REBOOT_PENDING),
                boot_id: Some(before.clone()).filter(|b| !b.is_empty()),
                ..Default::default()
            },
            NodeState::Rebooting {
                job,
                before,
                since,
                late,
            } => NodeStatus {
                phase: words::COMPLETED.into(),
                job_name: Some(job.clone()),
                message: Some(late.clone().unwrap_or_else(|| {
                    "Job completed successfully; waiting for the node to reboot".into()
                })),
                reboot_status: Some(words::REBOOT_PENDING.into()),
                boot_id: Some(before.clone()),
                since: Some(Time(*since)),
                ..Default::default()
            },
            NodeState::Completed {
                job,
                message,
                rebooted,
            } => NodeStatus {
                phase: words::COMPLETED.into(),
                job_name: job.clone(),
                message: Some(message.clone()),
                reboot_status: Some(
                    if *rebooted {
                        words::REBOOTED
                    } else {
                        words::NOT_REQUESTED
                    }
                    .into(),
                ),
                ..Default::default()
            },
            NodeState::Failed { job, message } => NodeStatus {
                phase: words::FAILED.into(),
                job_name: job.clone(),
                message: Some(message.clone()),
                reboot_status: requested(words::CANCELLED),
                ..Default::default()
            },
        }
    }
}
