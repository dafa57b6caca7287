//! What a Plan reports: its `Complete` condition (and why it waits), its events, and the gauges.

use std::collections::BTreeSet;

use super::decision::PlanSummary;
use super::facts::{Facts, Steps};
use super::node_labels::NodeLabels;
use super::node_state::NodeState;
use super::{FAILURE_REASONS, MSG_WAITING_FOR_WINDOW, PlanInput, Rollout, rfc3339};
use crate::common::check::Blocking;
use crate::common::decision::EventType;
use crate::common::phase::{PhaseTally, tally};
use crate::common::selector::Selector;
use crate::common::window::TimeWindow;
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
    let (window, eligible) = (&situation.window, situation.eligible);
    let failure = steps
        .values()
        .find_map(|(_, s, _)| s.failure())
        .map(|(reason, message)| stopped(facts, st, out, situation, reason, message));
    let rebooting = in_progress(steps);
    if let Some((reason, message)) = failure {
        cond::set(st, COMPLETE, FALSE, reason, &message, &now, generation);
    } else if let Some((reason, message)) = rebooting {
        cond::set(st, COMPLETE, FALSE, reason, &message, &now, generation);
    } else if let (true, Some(w), false) = (st.applying.is_empty(), window, eligible.is_empty()) {
        wait_for_window(facts, st, out, w);
    } else if let Some(check) = situation
        .check
        .filter(|_| eligible.len() > st.applying.len())
    {
        wait_for_check(facts, st, out, check);
    } else if let Some(hook) = situation.pre_hook {
        let (reason, message) = pre_hook_message(facts, hook);
        let now = rfc3339(facts.now);
        cond::set(st, COMPLETE, FALSE, reason, &message, &now, generation);
    } else if st.applying.is_empty()
        && (wait_for_held(facts, st, out, eligible) || no_concurrency(facts, st, out, eligible))
    {
        // Nodes wait for something that is not the Plan's; the function that found it said so.
    } else if st.applying.is_empty() && !situation.quarantined.is_empty() {
        let message = quarantined_message(facts, situation.quarantined);
        cond::set(st, COMPLETE, FALSE, QUARANTINED, &message, &now, generation);
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
        || FAILURE_REASONS.contains(&cond::reason(st, COMPLETE))
        || [
            HEALTH_CHECK_FAILING,
            HEALTH_CHECK_TIMED_OUT,
            super::hooks::PRE_HOOK,
            super::hooks::PRE_HOOK_FAILED,
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
                    facts.input.plan.spec.concurrency.unwrap_or(0)
                ),
            );
        }
        cond::set(st, COMPLETE, FALSE, "SyncJob", "", &now, generation);
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

/// What the report reads besides the nodes' steps.
pub(super) struct Situation<'a> {
    /// The window, when it keeps the rollout from starting.
    pub window: Option<TimeWindow>,
    /// The nodes left to upgrade.
    pub eligible: &'a [&'a NodeInfo],
    /// Hostnames of the nodes the failure policy quarantined at this hash.
    pub quarantined: &'a [&'a str],
    /// A failed node stops the rollout (failure policy `Stop`, or `Quarantine` out of room).
    pub stopped: bool,
    /// A health check that keeps new nodes from starting.
    pub check: Option<&'a Blocking>,
    /// The pre hook, while it keeps new nodes from starting.
    pub pre_hook: Option<&'a crate::plan::api::HookStatus>,
}

/// The reason of `Complete=False` while a health check keeps new nodes from starting.
pub const HEALTH_CHECK_FAILING: &str = "HealthCheckFailing";
/// The reason once the check failed past its timeout (under a failure policy that holds).
pub const HEALTH_CHECK_TIMED_OUT: &str = "HealthCheckTimedOut";

/// With nothing applying and nodes left, outside the window: says so (once as an event) and
/// looks again when it may open.
fn wait_for_window(facts: &Facts<'_>, st: &mut PlanStatus, out: &mut Rollout, w: &TimeWindow) {
    let (version, hash) = (&facts.version, &facts.hash);
    if cond::reason(st, COMPLETE) != "Waiting" {
        out.event(
            EventType::Normal,
            "Waiting",
            format!(
                "Waiting for start of Spec.Window to sync Jobs for version {version}. Hash: {hash}"
            ),
        );
    }
    out.requeue(w.next_check(facts.now));
    let now = rfc3339(facts.now);
    let generation = facts.ctx.generation;
    cond::set(
        st,
        COMPLETE,
        FALSE,
        "Waiting",
        MSG_WAITING_FOR_WINDOW,
        &now,
        generation,
    );
}

/// Nodes wait for a health check: says which and why (once per reason as an event).
fn wait_for_check(facts: &Facts<'_>, st: &mut PlanStatus, out: &mut Rollout, check: &Blocking) {
    let (reason, message) = check_message(facts, check);
    if cond::reason(st, COMPLETE) != reason {
        let kind = if reason == HEALTH_CHECK_FAILING {
            EventType::Normal
        } else {
            EventType::Warning
        };
        out.event(kind, reason, message.clone());
    }
    let now = rfc3339(facts.now);
    cond::set(
        st,
        COMPLETE,
        FALSE,
        reason,
        &message,
        &now,
        facts.ctx.generation,
    );
}

/// The `Complete` reason and message while the pre hook keeps nodes from starting (its Job's
/// events say when it starts and how it ends).
fn pre_hook_message(
    facts: &Facts<'_>,
    hook: &crate::plan::api::HookStatus,
) -> (&'static str, String) {
    use super::hooks::{PRE_HOOK, PRE_HOOK_FAILED};
    match hook.phase {
        crate::plan::api::HookPhase::Failed => (
            PRE_HOOK_FAILED,
            format!(
                "the pre hook (Job {}) failed: {}; no node is touched: {}",
                hook.job,
                hook.message.as_deref().unwrap_or_default(),
                how_to_go_on(facts)
            ),
        ),
        _ => (
            PRE_HOOK,
            format!(
                "waiting for the pre hook (Job {}) before the first node",
                hook.job
            ),
        ),
    }
}

/// What an operator does to go on after a failure stopped the rollout.
fn how_to_go_on(facts: &Facts<'_>) -> String {
    format!(
        "change the Plan, or reset its failures with `kubectl annotate plan {} {}=<new value> --overwrite`",
        facts.name,
        super::failure::RESET_ANNOTATION
    )
}

/// The `Complete` reason and message while a health check holds the next nodes.
fn check_message(facts: &Facts<'_>, check: &Blocking) -> (&'static str, String) {
    let what = format!(
        "waiting: health check {} fails: {}",
        check.check, check.message
    );
    if check.stopped {
        let message = format!(
            "health check {} timed out ({}); rollout stopped by failurePolicy {}: {}",
            check.check,
            check.message,
            facts.ctx.failure.last.as_str(),
            how_to_go_on(facts)
        );
        (STOPPED, message)
    } else if check.timed_out {
        (HEALTH_CHECK_TIMED_OUT, format!("{what} (past its timeout)"))
    } else {
        (HEALTH_CHECK_FAILING, what)
    }
}

/// The reason of `Complete=False` once a failure stopped the rollout.
pub const STOPPED: &str = "RolloutStopped";
/// The reason of `Complete=False` when every node is done but those quarantined.
pub const QUARANTINED: &str = "Quarantined";
/// The reason of `Complete=False` while a node's failed Job waits to be recreated.
pub const RETRYING: &str = "Retrying";

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
    if !situation.stopped || reason != super::node_state::JOB_FAILED {
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

/// The `Complete` message while quarantined nodes are all that is left.
fn quarantined_message(facts: &Facts<'_>, quarantined: &[&str]) -> String {
    let mut names: Vec<&str> = quarantined.to_vec();
    names.sort_unstable();
    names.dedup();
    format!(
        "{} quarantined after their Job failed: {} (label and taint {}); reset with `kubectl annotate plan {} {}=<new value> --overwrite`",
        if names.len() == 1 {
            "1 node".to_string()
        } else {
            format!("{} nodes", names.len())
        },
        names.join(", "),
        super::failure::quarantine_key(facts.name),
        facts.name,
        super::failure::RESET_ANNOTATION
    )
}

/// The reason of `Complete=False` while nodes wait and `concurrency` is 0 (SUC says `Complete`).
const NO_CONCURRENCY: &str = "NoConcurrency";
/// The event of a Plan whose selector matches no node.
const NO_NODES: &str = "NoNodes";

/// With nothing applying, nodes left and `concurrency` 0 or less, no node ever starts: says so
/// (SUC reports the Plan complete, a trap of its issues #217 and #285). `false` otherwise.
fn no_concurrency(
    facts: &Facts<'_>,
    st: &mut PlanStatus,
    out: &mut Rollout,
    eligible: &[&NodeInfo],
) -> bool {
    let concurrency = facts.input.plan.spec.concurrency.unwrap_or(0);
    if concurrency > 0 || eligible.is_empty() {
        return false;
    }
    let message = format!(
        "spec.concurrency is {concurrency}: none of the {} nodes to upgrade starts; set it to 1 or more",
        eligible.len()
    );
    if cond::reason(st, COMPLETE) != NO_CONCURRENCY {
        out.event(EventType::Warning, NO_CONCURRENCY, message.clone());
    }
    let now = rfc3339(facts.now);
    cond::set(
        st,
        COMPLETE,
        FALSE,
        NO_CONCURRENCY,
        &message,
        &now,
        facts.ctx.generation,
    );
    true
}

/// `Some(message)` when the Plan's selector matches no node that has a hostname: complete, with
/// nothing done, which deserves a word (SUC issues #217, #285).
fn selects_nothing(facts: &Facts<'_>) -> Option<String> {
    if facts.read.iter().any(|r| r.selected && r.host.is_some()) {
        return None;
    }
    let plan = facts.input.plan;
    let selector = Selector::from_label_selector(plan.spec.node_selector.as_ref()).ok()?;
    Some(match selector {
        Selector::Nothing => {
            "spec.nodeSelector is not set: such a Plan selects no node (as in SUC)".to_string()
        }
        selector if selector.to_string().is_empty() => {
            "no node with a kubernetes.io/hostname label".to_string()
        }
        selector => format!("no node matches spec.nodeSelector {selector}"),
    })
}

/// The reason of `Complete=False` while the only nodes left are held by another operation.
const WAITING_FOR_NODES: &str = "WaitingForNodes";
const HELD_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// With nothing applying and nodes left that another operation holds: says so (once as an
/// event) and looks again later. `false` when no node is held.
fn wait_for_held(
    facts: &Facts<'_>,
    st: &mut PlanStatus,
    out: &mut Rollout,
    eligible: &[&NodeInfo],
) -> bool {
    let Some(message) = held_message(facts.input, eligible) else {
        return false;
    };
    if cond::reason(st, COMPLETE) != WAITING_FOR_NODES {
        out.event(EventType::Normal, WAITING_FOR_NODES, message.clone());
    }
    // A taint going away triggers a reconcile; a hold without one is looked at again.
    out.requeue(HELD_RECHECK);
    let now = rfc3339(facts.now);
    cond::set(
        st,
        COMPLETE,
        FALSE,
        WAITING_FOR_NODES,
        &message,
        &now,
        facts.ctx.generation,
    );
    true
}

/// The operation that holds `node` against this Plan, if any.
pub(super) fn holder_of(
    input: &PlanInput<'_>,
    node: &NodeInfo,
) -> Option<crate::node::holders::Holder> {
    input.held.get(&node.name).cloned()
}

/// What the Plan waits for when nodes it still has to upgrade are held by another operation.
fn held_message(input: &PlanInput<'_>, eligible: &[&NodeInfo]) -> Option<String> {
    let held: Vec<String> = eligible
        .iter()
        .filter_map(|n| {
            let holder = holder_of(input, n)?;
            Some(format!("node {} is held by {holder}", n.hostname()))
        })
        .collect();
    let first = held.first()?;
    Some(match held.len() {
        1 => format!("waiting: {first}"),
        n => format!("waiting: {first} (and {} more nodes)", n - 1),
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
    let (targeted, upgraded) = upgraded(facts.read, facts.name, &facts.hash, &out.node_patches);
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
/// and how many of them carry `hash`, counting this decision's labels.
fn upgraded(
    read: &[NodeLabels<'_>],
    plan: &str,
    hash: &str,
    patches: &[NodeChange],
) -> (usize, usize) {
    let plan_label = labels::plan_node_label(plan);
    let patched: BTreeSet<&str> = patches
        .iter()
        .filter(|p| p.labels.get(&plan_label).and_then(Option::as_deref) == Some(hash))
        .map(|p| p.node.as_str())
        .collect();
    let mut targeted = 0;
    let mut upgraded = 0;
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
    let (targeted, upgraded) = upgraded(
        read,
        input.plan.metadata.name.as_deref().unwrap_or_default(),
        st.latest_hash.as_deref().unwrap_or_default(),
        patches,
    );
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
