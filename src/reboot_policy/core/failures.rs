//! What a failed reboot does to a RebootPolicy: under `failurePolicy.action: Stop`, no node starts
//! its reboot after one failed, until the policy changes or its failures are reset (the
//! `slipway.dev/reset-failures` annotation, acted on once per value).

use std::collections::BTreeMap;

use super::PolicySpec;
use super::state::RebootState;
use crate::common::decision::Event;
use crate::node::handoff::Handoff;
use crate::reboot_policy::api::{RebootPolicy, RebootPolicyStatus};

/// The reason of a node held because a failure stopped the policy.
pub const STOPPED: &str = "RolloutStopped";

/// Why a failure stops every new reboot, if one does: an earlier stop not reset, or under `Stop`
/// a node failed now.
pub(super) fn stopped(
    settings: &super::PolicySettings,
    states: &BTreeMap<String, RebootState>,
) -> Option<String> {
    settings.stopped.clone().or_else(|| {
        (settings.stop_on_failure)
            .then(|| first_failure(states))
            .flatten()
    })
}

/// The first failed node of `states`, and why, in words.
fn first_failure(states: &BTreeMap<String, RebootState>) -> Option<String> {
    states.iter().find_map(|(name, s)| match s {
        RebootState::DrainFailed { message, .. } => Some(format!("node {name} failed: {message}")),
        RebootState::Rebooting {
            handoff: Handoff::TimedOut { message, .. },
            ..
        } => Some(format!("node {name} failed: {message}")),
        _ => None,
    })
}

pub(super) fn stopped_message(why: &str) -> String {
    format!(
        "{why}; failurePolicy Stop: no node starts its reboot until the policy changes or its failures are reset (annotation {} with a new value)",
        crate::common::labels::RESET_FAILURES
    )
}

/// The new value of the reset annotation, when it was not acted on yet.
pub(super) fn reset_requested(p: &RebootPolicy, previous: &RebootPolicyStatus) -> Option<String> {
    let annotations = p.metadata.annotations.as_ref()?;
    let token = annotations.get(crate::common::labels::RESET_FAILURES)?;
    (previous.failures_reset.as_deref() != Some(token.as_str())).then(|| token.clone())
}

/// An earlier stop that still holds: under `Stop`, until the policy changes or its failures are
/// reset. A reset also gives drains that timed out a new start at once.
pub(super) fn sticky_stop(
    p: &RebootPolicy,
    spec: &PolicySpec,
    previous: &RebootPolicyStatus,
    reset: bool,
    states: &mut BTreeMap<String, RebootState>,
) -> Option<String> {
    if reset {
        states.retain(|_, s| !matches!(s, RebootState::DrainFailed { .. }));
    }
    let changed = previous.observed_generation != p.metadata.generation;
    previous
        .stopped
        .clone()
        .filter(|_| spec.stop_on_failure && !reset && !changed)
}

pub(super) fn events(reset: Option<String>, stopped: Option<String>) -> Vec<Event> {
    let mut events = Vec::new();
    if let Some(token) = reset {
        events.push(Event::normal(
            "FailuresReset",
            format!(
                "Failures reset ({} = {token:?})",
                crate::common::labels::RESET_FAILURES
            ),
        ));
    }
    if let Some(why) = stopped {
        events.push(Event::warning(
            STOPPED,
            format!("{why}; failurePolicy Stop: no node starts its reboot until the policy changes or its failures are reset"),
        ));
    }
    events
}
