//! Where a node the policy started is, as `status.nodes` persists it.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::signals::Signal;
use crate::common::rfc3339;
use crate::node::handoff::{Handoff, Stage};
use crate::reboot_policy::api::{RebootNodeStatus, RebootPhase};

/// The reason in `status.nodes` of a node kured holds.
pub const KURED_HOLDS: &str = "KuredHolds";

/// A node the policy has started on, as persisted in `status.nodes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebootState {
    /// Cordoned and being drained; it runs boot `before`. `cordoned`: an older slipway's status
    /// said it cordoned the node (the node's own cordon record says so now).
    Draining {
        signal: Signal,
        before: String,
        cordoned: bool,
        since: Timestamp,
    },
    /// Drained and told to reboot; in the hand-off (which may have timed out: the node then
    /// holds its slot, failed, until it comes back).
    Rebooting {
        signal: Signal,
        cordoned: bool,
        handoff: Handoff,
    },
    /// The drain did not finish in time: the node was given back (uncordoned if slipway had
    /// cordoned it) and is tried again [`DRAIN_RETRY`] after `since`.
    DrainFailed {
        signal: Signal,
        message: String,
        since: Timestamp,
    },
    /// kured's lock names the node: the policy holds its slot and waits for kured
    /// ([`super::kured`]). `before`: the boot it ran when taken over; `cordoned`: it was
    /// schedulable before kured took it, so kured's cordon is the policy's to give back if kured
    /// does not.
    Kured {
        before: String,
        cordoned: bool,
        since: Timestamp,
    },
}

impl RebootState {
    /// Whether the node counts against the concurrency.
    pub fn holds_slot(&self) -> bool {
        !matches!(self, RebootState::DrainFailed { .. })
    }

    pub fn signal(&self) -> Signal {
        match self {
            RebootState::Draining { signal, .. }
            | RebootState::Rebooting { signal, .. }
            | RebootState::DrainFailed { signal, .. } => *signal,
            RebootState::Kured { .. } => Signal::Kured,
        }
    }

    /// Reads a state written by [`RebootState::to_status`]; `None` for an entry that only
    /// reports a wait (those nodes have not started) or cannot be understood.
    pub fn from_status(s: &RebootNodeStatus, now: Timestamp) -> Option<RebootState> {
        let signal = s.signal?;
        let since = s
            .since
            .as_deref()
            .and_then(|t| t.parse::<Timestamp>().ok())
            .unwrap_or(now);
        let cordoned = s.cordoned.unwrap_or(false);
        let before = || s.boot_id.clone().unwrap_or_default();
        let message = s.message.clone().unwrap_or_default();
        let rebooting = |handoff| RebootState::Rebooting {
            signal,
            cordoned,
            handoff,
        };
        Some(match (s.phase, s.reason.as_deref()) {
            (RebootPhase::Rebooting, Some(KURED_HOLDS)) => RebootState::Kured {
                before: before(),
                cordoned,
                since,
            },
            (RebootPhase::Draining, _) => RebootState::Draining {
                signal,
                before: before(),
                cordoned,
                since,
            },
            (RebootPhase::Rebooting, _) => rebooting(Handoff::AwaitingBoot {
                before: before(),
                since,
            }),
            (RebootPhase::WaitingForHealth, _) => rebooting(Handoff::AwaitingHealth {
                before: before(),
                since,
            }),
            (RebootPhase::Failed, Some(DRAIN_TIMED_OUT)) => RebootState::DrainFailed {
                signal,
                message,
                since,
            },
            (RebootPhase::Failed, Some(reason)) => {
                let stage = if reason == Stage::Health.reason() {
                    Stage::Health
                } else {
                    Stage::Boot
                };
                rebooting(Handoff::TimedOut {
                    stage,
                    before: before(),
                    since,
                    message,
                })
            }
            _ => return None,
        })
    }

    /// The entry of `status.nodes` for `name`, with `message` saying what it waits for.
    pub fn to_status(&self, name: &str, message: String) -> RebootNodeStatus {
        let entry = |phase: RebootPhase, since: Timestamp| RebootNodeStatus {
            name: name.to_string(),
            phase,
            since: Some(rfc3339(since)),
            signal: Some(self.signal()),
            message: Some(message.clone()).filter(|m| !m.is_empty()),
            ..Default::default()
        };
        match self {
            RebootState::Draining {
                before,
                cordoned,
                since,
                ..
            } => RebootNodeStatus {
                boot_id: Some(before.clone()),
                cordoned: legacy(*cordoned),
                ..entry(RebootPhase::Draining, *since)
            },
            RebootState::Rebooting {
                cordoned, handoff, ..
            } => {
                let (phase, since, reason) = match handoff {
                    Handoff::AwaitingBoot { since, .. } => (RebootPhase::Rebooting, *since, None),
                    Handoff::AwaitingHealth { since, .. } => {
                        (RebootPhase::WaitingForHealth, *since, None)
                    }
                    Handoff::TimedOut { stage, since, .. } => (
                        RebootPhase::Failed,
                        *since,
                        Some(stage.reason().to_string()),
                    ),
                    Handoff::Passed => (RebootPhase::Rebooting, Timestamp::UNIX_EPOCH, None),
                };
                RebootNodeStatus {
                    boot_id: handoff.before().map(str::to_string),
                    cordoned: legacy(*cordoned),
                    reason,
                    ..entry(phase, since)
                }
            }
            RebootState::DrainFailed { since, .. } => RebootNodeStatus {
                reason: Some(DRAIN_TIMED_OUT.to_string()),
                ..entry(RebootPhase::Failed, *since)
            },
            RebootState::Kured {
                before,
                cordoned,
                since,
            } => RebootNodeStatus {
                boot_id: Some(before.clone()),
                cordoned: legacy(*cordoned),
                reason: Some(KURED_HOLDS.to_string()),
                ..entry(RebootPhase::Rebooting, *since)
            },
        }
    }
}

/// The policy's record that the cordon is its to give back: an older slipway's that cordoned the
/// node, or kured's cordon of a node that was schedulable, kept until the node is given back.
fn legacy(cordoned: bool) -> Option<bool> {
    cordoned.then_some(true)
}

/// What `status.nodes` says: the nodes in progress, and since when each waiting node waits.
pub fn read_status(
    nodes: &[RebootNodeStatus],
    now: Timestamp,
) -> (BTreeMap<String, RebootState>, BTreeMap<String, Timestamp>) {
    let states: BTreeMap<String, RebootState> = nodes
        .iter()
        .filter_map(|s| RebootState::from_status(s, now).map(|st| (s.name.clone(), st)))
        .collect();
    let wanting_since = nodes
        .iter()
        .filter(|s| !states.contains_key(&s.name))
        .filter_map(|s| Some((s.name.clone(), s.since.as_deref()?.parse().ok()?)))
        .collect();
    (states, wanting_since)
}

/// The reason of a drain that did not finish within its timeout.
pub const DRAIN_TIMED_OUT: &str = "DrainTimedOut";
