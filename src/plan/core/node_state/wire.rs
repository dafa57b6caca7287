//! The wire form of a node's state: `status.nodes` entries ([`NodeProgress`]) in and out.

use jiff::Timestamp;

use super::JOB_FAILED;
use super::NodeState;
use super::rfc3339;
use crate::node::handoff::{Handoff, Stage};
use crate::plan::api::{NodePhase, NodeProgress};
use crate::plan::core::failure::Attempts;

impl NodeState {
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
        let attempts = Attempts {
            retries: p.retries.unwrap_or(0).max(0),
            reboots: p.reboot_retries.unwrap_or(0).max(0),
        };
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
                attempts,
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
                attempts,
            },
            (NodePhase::Retrying, _) => NodeState::Retrying {
                job,
                message,
                generation: p.generation,
                since,
                at: p
                    .retry_at
                    .as_deref()
                    .and_then(|s| s.parse::<Timestamp>().ok())
                    .unwrap_or(now),
                attempts,
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
                attempts,
            } => NodeProgress {
                boot_id: boot.clone(),
                generation: *generation,
                ..counted(entry(job, *since), *attempts)
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
                attempts,
            } => NodeProgress {
                reason: Some(JOB_FAILED.to_string()),
                message: Some(message.clone()),
                generation: *generation,
                ..counted(entry(job, *since), *attempts)
            },
            NodeState::Retrying {
                job,
                message,
                generation,
                since,
                at,
                attempts,
            } => NodeProgress {
                message: Some(message.clone()),
                generation: *generation,
                retry_at: Some(rfc3339(*at)),
                ..counted(entry(job, *since), *attempts)
            },
            NodeState::Done | NodeState::Quarantined => return None,
        })
    }
}

/// `p` with the retries used, written only when there are some.
fn counted(p: NodeProgress, attempts: Attempts) -> NodeProgress {
    let some = |n: i32| (n > 0).then_some(n);
    NodeProgress {
        retries: some(attempts.retries),
        reboot_retries: some(attempts.reboots),
        ..p
    }
}
