//! Why a node that wants a reboot does not start now: the policy (paused, its window, alerts,
//! health checks), the node (another holder, blocking pods), the slots (concurrency, soaking
//! nodes) or a DisruptionBudget.

use std::time::Duration;

use jiff::Timestamp;

use super::spec::PolicySettings;
use super::steps::{NodeSteps, NodeView, elapsed};
use crate::common::rfc3339;
use crate::node::NodeInfo;
use crate::node::budget::{Budget, Refusal};
use crate::reboot_policy::api::RebootPhase;

/// The nodes back from their reboot that keep their slot while they soak (those of this decision
/// too), and until when; the decision looks again when the first soak ends.
pub(super) fn soaking(
    settings: &PolicySettings,
    d: &mut NodeSteps,
    now: Timestamp,
) -> Vec<(String, Timestamp)> {
    let mut soaking = settings.soaking.clone();
    if let Some(soak) = settings.soak {
        let until = now.checked_add(soak).unwrap_or(now);
        soaking.extend(d.rebooted.iter().map(|r| (r.name.clone(), until)));
    }
    soaking.retain(|(n, _)| !d.states.contains_key(n));
    if let Some(first) = soaking.iter().map(|(_, until)| *until).min() {
        d.recheck(elapsed(now, first).max(Duration::from_secs(1)));
    }
    soaking
}

/// Why a node that wants a reboot does not start now: its phase, a reason and a message.
pub(super) fn hold_reason(
    settings: &PolicySettings,
    view: &NodeView<'_>,
    busy: usize,
    soaking: &[(String, Timestamp)],
) -> Option<(RebootPhase, &'static str, String)> {
    if settings.paused {
        return Some((
            RebootPhase::Wanting,
            "Paused",
            "the policy is paused (spec.paused)".into(),
        ));
    }
    if let Some(next) = settings.window_closed {
        let when = next.map_or_else(|| "never".to_string(), rfc3339);
        return Some((
            RebootPhase::WaitingForWindow,
            "OutsideWindow",
            format!("outside spec.window; it opens next at {when}"),
        ));
    }
    if let Some(alerts) = &settings.alerts {
        return Some((RebootPhase::Blocked, "AlertsFiring", alerts.clone()));
    }
    if let Some((reason, message)) = &settings.health_check {
        return Some((RebootPhase::Blocked, reason, message.clone()));
    }
    if let Some((reason, message)) = &settings.pulling {
        return Some((RebootPhase::Blocked, reason, message.clone()));
    }
    if let Some(holder) = &view.held_by {
        return Some((
            RebootPhase::Blocked,
            "NodeBusy",
            format!("{holder} holds the node"),
        ));
    }
    if !view.blocking_pods.is_empty() {
        return Some((
            RebootPhase::Blocked,
            "BlockingPods",
            format!(
                "blocking pods run on the node: {}",
                view.blocking_pods.join(", ")
            ),
        ));
    }
    if busy >= settings.concurrency
        && busy - soaking.len() < settings.concurrency
        && let Some((node, until)) = soaking.iter().min_by_key(|(_, until)| *until)
    {
        return Some((
            RebootPhase::Wanting,
            "Soaking",
            format!(
                "node {node} is back and soaks until {} (spec.soak); waiting for its slot",
                rfc3339(*until)
            ),
        ));
    }
    if busy >= settings.concurrency {
        return Some((
            RebootPhase::Wanting,
            "ConcurrencyReached",
            format!(
                "{busy} of at most {} nodes are being disrupted; waiting for a slot",
                settings.concurrency
            ),
        ));
    }
    None
}

/// A halted (or unreadable) DisruptionBudget holds the node before anything else is looked at:
/// the kill switch says so at once.
pub(super) fn halted(
    budget: &Budget,
    node: &NodeInfo,
) -> Option<(RebootPhase, &'static str, String)> {
    let refusal = budget.stopped(node)?;
    Some((RebootPhase::Blocked, refusal.reason(), refusal.to_string()))
}

/// Why the DisruptionBudgets do not let `node` reboot now, if they do not; takes its room if
/// they do.
pub(super) fn refused(
    budget: &mut Budget,
    node: &NodeInfo,
    now: Timestamp,
    d: &mut NodeSteps,
) -> Option<(RebootPhase, &'static str, String)> {
    let refusal = budget.take(node).err()?;
    if let Some(until) = refusal.until() {
        d.recheck(crate::common::until(now, until).max(Duration::from_secs(1)));
    }
    let phase = match refusal {
        Refusal::Full { .. } => RebootPhase::Wanting,
        _ => RebootPhase::Blocked,
    };
    Some((phase, refusal.reason(), refusal.to_string()))
}

/// The `Progressing` message: what the policy does, or why it waits.
pub(super) fn summary(settings: &PolicySettings, d: &NodeSteps, busy: usize) -> String {
    let failed: Vec<&str> = d
        .nodes
        .iter()
        .filter(|n| n.phase == RebootPhase::Failed)
        .map(|n| n.name.as_str())
        .collect();
    let mut parts = Vec::new();
    if !failed.is_empty() {
        parts.push(format!("failed: {}", failed.join(", ")));
    }
    if d.rebooting > 0 {
        parts.push(format!("{} rebooting", d.rebooting));
    }
    if d.wanting > 0 {
        let why = if let Some(stopped) = &d.stopped {
            format!("stopped: {stopped}")
        } else if settings.paused {
            "paused".to_string()
        } else if settings.window_closed.is_some() {
            "outside the window".to_string()
        } else if let Some(alerts) = &settings.alerts {
            alerts.clone()
        } else if let Some((_, message)) = &settings.health_check {
            message.clone()
        } else if busy >= settings.concurrency {
            format!("{busy} of {} slots taken", settings.concurrency)
        } else {
            "blocked".to_string()
        };
        parts.push(format!("{} waiting ({why})", d.wanting));
    }
    if parts.is_empty() {
        "no node wants a reboot".into()
    } else {
        parts.join("; ")
    }
}
