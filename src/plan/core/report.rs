//! What a Plan reports: its `Complete` condition (and why it waits), its events, and the gauges.

use std::collections::BTreeSet;

use super::decision::PlanSummary;
use super::facts::{Facts, Steps};
use super::gates::{
    HEALTH_CHECK_FAILING, HEALTH_CHECK_TIMED_OUT, RETRYING, STOPPED, Situation, how_to_go_on,
    refused_message,
};
use super::node_labels::NodeLabels;
use super::node_state::NodeState;
use super::waits;
use super::{FAILURE_REASONS, PlanInput, Rollout, rfc3339};
use crate::common::decision::EventType;
use crate::common::phase::{PhaseTally, tally};
use crate::common::selector::Selector;
use crate::node::NodeInfo;
use crate::node::change::NodeChange;
use crate::plan::api::{NodePhase, PlanStatus, labels};
use crate::plan::core::conditions::{self as cond, COMPLETE, FALSE, TRUE};

/// The `Complete` condition and the Plan's events. Events stay bounded per Plan, whatever its
/// size: a rollout's start, a progress event per tenth of the nodes, its end, and a warning per
/// failed node (failed nodes keep their slot, so at most `concurrency` per hash).
pub(super) fn report(
    facts: &Facts<'_>,
    old: &PlanStatus,
    st: &mut PlanStatus,
    out: &mut Rollout,
    steps: &Steps<'_>,
    situation: &Situation<'_>,
) {
    let now = rfc3339(facts.now);
    let generation = facts.ctx.generation;
    let (version, hash) = (&facts.version, &facts.hash);
    let eligible = situation.eligible;
    let failure = steps
        .values()
        .find_map(|(_, s, _)| s.failure())
        .map(|(reason, message)| stopped(facts, st, out, situation, reason, message));
    let rebooting = in_progress(steps);
    if let Some((reason, message)) = failure {
        cond::set(st, COMPLETE, FALSE, reason, &message, &now, generation);
    } else if let Some((reason, message)) = rebooting {
        cond::set(st, COMPLETE, FALSE, reason, &message, &now, generation);
    } else if waits::waiting(facts, st, out, situation) {
        // The function said what the nodes wait for.
    } else if st.applying.is_empty() {
        if !cond::is(st, COMPLETE, TRUE) {
            out.event(
                EventType::Normal,
                "Complete",
                format!("Jobs complete for version {version}. Hash: {hash}"),
            );
        }
        let message = selects_nothing(facts).unwrap_or_default();
        if !message.is_empty() && cond::message(st, COMPLETE) != message {
            out.event(EventType::Normal, NO_NODES, message.clone());
        }
        cond::set(st, COMPLETE, TRUE, "Complete", &message, &now, generation);
    } else if st.applying != old.applying
        || cond::message(st, COMPLETE) != refused_message(situation.refused)
        || FAILURE_REASONS.contains(&cond::reason(st, COMPLETE))
        || [
            HEALTH_CHECK_FAILING,
            HEALTH_CHECK_TIMED_OUT,
            super::hooks::PRE_HOOK,
            super::hooks::PRE_HOOK_FAILED,
            crate::node::prepull::PRE_PULLING,
            crate::node::prepull::PRE_PULL_FAILED,
        ]
        .contains(&cond::reason(st, COMPLETE))
        || is_rebooting_reason(cond::reason(st, COMPLETE))
    {
        if old.applying.is_empty() {
            out.event(
                EventType::Normal,
                "SyncJob",
                format!(
                    "Rolling out version {version} to {} nodes, {} at a time. Hash: {hash}",
                    eligible.len(),
                    facts.settings.concurrency
                ),
            );
        }
        let waiting = refused_message(situation.refused);
        cond::set(st, COMPLETE, FALSE, "SyncJob", &waiting, &now, generation);
    }
    if let Some(after) = situation
        .refused
        .iter()
        .filter_map(|(_, r)| r.until())
        .min()
    {
        out.requeue(crate::common::until(facts.now, after));
    }
    progress_event(facts, out);
}

/// A node on its way that the `Complete` condition names: one whose Job is about to be created
/// again, else one in its reboot hand-off.
fn in_progress(steps: &Steps<'_>) -> Option<(&'static str, String)> {
    let named = |n: &NodeInfo, message: &str| format!("node {}: {message}", n.hostname());
    let retrying = steps.values().find_map(|(n, s, _)| match s {
        NodeState::Retrying { message, .. } => Some((RETRYING, named(n, message))),
        _ => None,
    });
    retrying.or_else(|| {
        steps.values().find_map(|(n, s, _)| match s {
            NodeState::Rebooting { message, .. } => Some((s.phase().as_str(), named(n, message))),
            _ => None,
        })
    })
}

/// The `Complete` reason and message of a failed node; when the failure stops the rollout, says
/// so and how to go on (once as an event).
fn stopped(
    facts: &Facts<'_>,
    st: &PlanStatus,
    out: &mut Rollout,
    situation: &Situation<'_>,
    reason: &'static str,
    message: &str,
) -> (&'static str, String) {
    if !situation.gates.stopped || reason != super::node_state::JOB_FAILED {
        return (reason, message.to_string());
    }
    let message = format!(
        "{message}; rollout stopped by failurePolicy {}: {}",
        facts.ctx.failure.last.as_str(),
        how_to_go_on(facts)
    );
    if cond::reason(st, COMPLETE) != STOPPED {
        out.event(EventType::Warning, STOPPED, message.clone());
    }
    (STOPPED, message)
}

/// The event of a Plan whose selector matches no node.
const NO_NODES: &str = "NoNodes";

/// `Some(message)` when the Plan's selector matches no node that has a hostname: complete, with
/// nothing done, which deserves a word (SUC issues #217, #285).
fn selects_nothing(facts: &Facts<'_>) -> Option<String> {
    let settled = facts.input.settled.is_some_and(|s| s.count > 0);
    if settled || facts.read.iter().any(|r| r.selected && r.host.is_some()) {
        return None;
    }
    Some(match &facts.settings.selector {
        Selector::Nothing => {
            "spec.nodeSelector is not set: such a Plan selects no node (as in SUC)".to_string()
        }
        selector if selector.to_string().is_empty() => {
            "no node with a kubernetes.io/hostname label".to_string()
        }
        selector => format!("no node matches spec.nodeSelector {selector}"),
    })
}

fn is_rebooting_reason(reason: &str) -> bool {
    reason == NodePhase::Rebooting.as_str() || reason == NodePhase::WaitingForHealth.as_str()
}

/// A `Progress` event each time the upgraded nodes pass another tenth of the targeted ones.
fn progress_event(facts: &Facts<'_>, out: &mut Rollout) {
    let plan_label = labels::plan_node_label(facts.name);
    let labelled_now = out
        .node_patches
        .iter()
        .filter(|p| p.labels.contains_key(&plan_label))
        .count();
    let (targeted, upgraded) = upgraded(facts.input, facts.read, &facts.hash, &out.node_patches);
    if targeted == 0 || labelled_now == 0 || upgraded >= targeted {
        return;
    }
    let before = upgraded.saturating_sub(labelled_now);
    if before * 10 / targeted != upgraded * 10 / targeted {
        out.event(
            EventType::Normal,
            "Progress",
            format!(
                "Upgraded {} of {targeted} nodes to version {}",
                upgraded, facts.version
            ),
        );
    }
}

/// (targeted, upgraded): nodes the Plan's selector matches with a hostname and not `disabled`,
/// and how many of them carry `hash`, counting this decision's labels and the settled nodes.
fn upgraded(
    input: &PlanInput<'_>,
    read: &[NodeLabels<'_>],
    hash: &str,
    patches: &[NodeChange],
) -> (usize, usize) {
    let plan = input.plan.metadata.name.as_deref().unwrap_or_default();
    let plan_label = labels::plan_node_label(plan);
    let patched: BTreeSet<&str> = patches
        .iter()
        .filter(|p| p.labels.get(&plan_label).and_then(Option::as_deref) == Some(hash))
        .map(|p| p.node.as_str())
        .collect();
    let settled = input.settled.map_or(0, |s| s.count);
    let mut targeted = settled;
    let mut upgraded = match input.settled {
        Some(s) if !hash.is_empty() && s.hash == hash => settled,
        _ => 0,
    };
    for r in read.iter().filter(|r| r.targeted()) {
        targeted += 1;
        if !hash.is_empty() && (r.plan == Some(hash) || patched.contains(r.node.name.as_str())) {
            upgraded += 1;
        }
    }
    (targeted, upgraded)
}

pub(super) fn fail_complete(
    st: &mut PlanStatus,
    out: &mut Rollout,
    reason: &'static str,
    message: String,
    now: &str,
    input: &PlanInput<'_>,
) {
    if cond::get(st, COMPLETE).and_then(|c| c.message.as_deref()) != Some(message.as_str()) {
        out.event(EventType::Warning, reason, message.clone());
    }
    cond::set(
        st,
        COMPLETE,
        FALSE,
        reason,
        &message,
        now,
        input.plan.metadata.generation,
    );
}

/// The gauges' view of the decision.
pub(super) fn summary(
    input: &PlanInput<'_>,
    read: &[NodeLabels<'_>],
    st: &PlanStatus,
    patches: &[NodeChange],
) -> PlanSummary {
    let hash = st.latest_hash.as_deref().unwrap_or_default();
    let (targeted, upgraded) = upgraded(input, read, hash, patches);
    PlanSummary {
        complete: cond::is(st, COMPLETE, TRUE),
        applying: st.applying.len(),
        failed: st
            .nodes
            .iter()
            .filter(|p| p.phase == NodePhase::Failed)
            .count(),
        upgraded,
        targeted,
    }
}

/// The per-phase gauges of a Plan's nodes (`status.nodes`).
pub fn phases(status: Option<&PlanStatus>) -> Vec<PhaseTally> {
    let nodes = status.map(|st| st.nodes.as_slice()).unwrap_or_default();
    tally(nodes.iter().map(|n| (n.phase.as_str(), n.since.as_deref())))
}
