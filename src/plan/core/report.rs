//! What a Plan reports: its `Complete` condition (why it waits, in one set of words that `slipway
//! explain` reads too), its events, and the gauges. Each wait says so in the `Complete` condition
//! (and once as an event) and says when to look again.

use std::collections::BTreeSet;
use std::time::Duration;

use super::decision::{PlanSummary, Rollout};
use super::facts::{Facts, Steps};
use super::gates::{
    HEALTH_CHECK_FAILING, HEALTH_CHECK_TIMED_OUT, Held, QUARANTINED, RETRYING, STOPPED, Situation,
};
use super::node_labels::NodeLabels;
use super::node_state::NodeState;
use super::settled::SettledNodes;
use super::{FAILURE_REASONS, MSG_WAITING_FOR_WINDOW, PlanInput};
use crate::common::check::Blocking;
use crate::common::decision::{Event, EventType, Waiting, wait};
use crate::common::phase::{PhaseTally, tally};
use crate::common::selector::Selector;
use crate::node::NodeInfo;
use crate::node::budget::Refusal;
use crate::node::change::NodeChange;
use crate::plan::api::{NodePhase, PlanStatus, labels};
use crate::plan::core::conditions::{self as cond, COMPLETE, FALSE, Stamp, TRUE};

/// What the `Complete` condition says after a decision, and what goes with saying it: the events
/// told once when it changes and when to look again. One value that the status, the events and
/// (through the same words) `slipway explain` read.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Said {
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
    /// Told with it (each once: only when the condition did not say it already).
    pub events: Vec<Event>,
    /// When to look again by itself: what holds the Plan may let go then.
    pub recheck: Option<Duration>,
}

impl Said {
    /// `Complete=False` with `reason`: the Plan is not done.
    pub(super) fn not_done(reason: &'static str, message: String) -> Said {
        Said {
            status: FALSE,
            reason,
            message,
            events: Vec::new(),
            recheck: None,
        }
    }

    /// The same, with an event.
    fn telling(mut self, event: Event) -> Said {
        self.events.push(event);
        self
    }

    /// The same, with an event of its reason when the condition gives another reason now.
    fn telling_once(self, st: &PlanStatus, type_: EventType, note: String) -> Said {
        match cond::reason(st, COMPLETE) != self.reason {
            true => {
                let reason = self.reason;
                self.telling(Event {
                    type_,
                    ..Event::normal(reason, note)
                })
            }
            false => self,
        }
    }

    /// The same, looked at again `after` from now (the sooner of two asks).
    fn recheck(mut self, after: Duration) -> Said {
        let after = after.max(Duration::from_secs(1));
        self.recheck = Some(self.recheck.map_or(after, |r| r.min(after)));
        self
    }

    /// A failure that stops what the decision would do: `Complete=False` with its message, as a
    /// warning once per message.
    pub(super) fn failed(st: &PlanStatus, reason: &'static str, message: String) -> Said {
        let said = Said::not_done(reason, message);
        match cond::message(st, COMPLETE) != said.message {
            true => {
                let event = Event::warning(reason, said.message.clone());
                said.telling(event)
            }
            false => said,
        }
    }

    /// Writes it: the condition into the status, the events and the recheck into the decision.
    pub(super) fn write(self, st: &mut PlanStatus, out: &mut Rollout, at: Stamp<'_>) {
        cond::set(st, at, COMPLETE, self.status, self.reason, &self.message);
        out.events.extend(self.events);
        if let Some(after) = self.recheck {
            out.requeue(after);
        }
    }
}

/// The Plan's report after its nodes stepped: what the `Complete` condition says (`None` leaves it
/// as it was, a rollout going on as before), when to look again for the nodes a budget refused,
/// and a progress event. Events stay bounded per Plan, whatever its size: a rollout's start, a
/// progress event per tenth of the nodes, its end, and a warning per failed node (failed nodes
/// keep their slot, so at most `concurrency` per hash). `st` is the status being written, its
/// condition still as the last decision left it; `patches` the decision's node patches.
pub(super) struct Report {
    pub said: Option<Said>,
    pub recheck: Option<Duration>,
    pub progress: Option<Event>,
}

impl Report {
    /// Writes it: the condition into the status, the events and the rechecks into the decision.
    pub(super) fn write(self, st: &mut PlanStatus, out: &mut Rollout, at: Stamp<'_>) {
        if let Some(said) = self.said {
            said.write(st, out, at);
        }
        if let Some(after) = self.recheck {
            out.requeue(after);
        }
        out.events.extend(self.progress);
    }
}

pub(super) fn report(
    facts: &Facts<'_>,
    old: &PlanStatus,
    st: &PlanStatus,
    steps: &Steps<'_>,
    situation: &Situation<'_>,
    patches: &[NodeChange],
) -> Report {
    let refused_until = (situation.refused.iter())
        .filter_map(|(_, r)| r.until())
        .min();
    Report {
        said: complete(facts, old, st, steps, situation),
        recheck: refused_until.map(|after| crate::common::until(facts.now, after)),
        progress: progress_event(facts, situation.settled, patches),
    }
}

/// What the `Complete` condition says after this decision, with the events of a change; `None`
/// leaves it as it was, a rollout going on as before.
fn complete(
    facts: &Facts<'_>,
    old: &PlanStatus,
    st: &PlanStatus,
    steps: &Steps<'_>,
    situation: &Situation<'_>,
) -> Option<Said> {
    let (version, hash) = (&facts.version, &facts.hash);
    let failure = steps
        .values()
        .find_map(|(_, s, _)| s.failure())
        .map(|(reason, message)| stopped(facts, st, situation, reason, message));
    let waits = failure
        .or_else(|| in_progress(steps))
        .or_else(|| waiting(facts, st, situation));
    if waits.is_some() {
        return waits;
    }
    if st.applying.is_empty() {
        let message = selects_nothing(facts, situation.settled).unwrap_or_default();
        let mut said = Said {
            status: TRUE,
            ..Said::not_done("Complete", message.clone())
        };
        if !cond::is(st, COMPLETE, TRUE) {
            let done = format!("Jobs complete for version {version}. Hash: {hash}");
            said = said.telling(Event::normal("Complete", done));
        }
        if !message.is_empty() && cond::message(st, COMPLETE) != message {
            said = said.telling(Event::normal(NO_NODES, message));
        }
        return Some(said);
    }
    let refused = refused_message(situation.refused);
    let said = cond::reason(st, COMPLETE);
    let changed = st.applying != old.applying
        || cond::message(st, COMPLETE) != refused
        || FAILURE_REASONS.contains(&said)
        || [
            HEALTH_CHECK_FAILING,
            HEALTH_CHECK_TIMED_OUT,
            super::hooks::PRE_HOOK,
            super::hooks::PRE_HOOK_FAILED,
            crate::node::prepull::PRE_PULLING,
            crate::node::prepull::PRE_PULL_FAILED,
        ]
        .contains(&said)
        || is_rebooting_reason(said);
    if !changed {
        return None;
    }
    let syncing = Said::not_done("SyncJob", refused);
    if !old.applying.is_empty() {
        return Some(syncing);
    }
    let start = format!(
        "Rolling out version {version} to {} nodes, {} at a time. Hash: {hash}",
        situation.eligible.len(),
        facts.settings.concurrency
    );
    Some(syncing.telling(Event::normal("SyncJob", start)))
}

/// A node on its way that the `Complete` condition names: one whose Job is about to be created
/// again, else one in its reboot hand-off.
fn in_progress(steps: &Steps<'_>) -> Option<Said> {
    let named = |n: &NodeInfo, message: &str| format!("node {}: {message}", n.hostname());
    let retrying = steps.values().find_map(|(n, s, _)| match s {
        NodeState::Retrying { message, .. } => Some(Said::not_done(RETRYING, named(n, message))),
        _ => None,
    });
    retrying.or_else(|| {
        steps.values().find_map(|(n, s, _)| match s {
            NodeState::Rebooting { message, .. } => {
                Some(Said::not_done(s.phase().as_str(), named(n, message)))
            }
            _ => None,
        })
    })
}

/// The `Complete` reason and message of a failed node; when the failure stops the rollout, says
/// so and how to go on (once as an event).
fn stopped(
    facts: &Facts<'_>,
    st: &PlanStatus,
    situation: &Situation<'_>,
    reason: &'static str,
    message: &str,
) -> Said {
    if !situation.gates.stopped || reason != super::node_state::JOB_FAILED {
        return Said::not_done(reason, message.to_string());
    }
    let message = format!(
        "{message}; rollout stopped by failurePolicy {}: {}",
        facts.ctx.failure.last.as_str(),
        how_to_go_on(facts)
    );
    Said::not_done(STOPPED, message.clone()).telling_once(st, EventType::Warning, message)
}

/// With nodes left to start that something outside the rollout keeps waiting: what the
/// `Complete` condition says of it; `None` when nothing does.
fn waiting(facts: &Facts<'_>, st: &PlanStatus, situation: &Situation<'_>) -> Option<Said> {
    let eligible = situation.eligible;
    let left = eligible.len() > st.applying.len();
    let idle = st.applying.is_empty();
    let held = situation.holds().find(|held| match held {
        Held::Window(_) => idle && !eligible.is_empty(),
        // The failed node that stopped the rollout is what the condition names.
        Held::Stopped => false,
        Held::Check(_) | Held::Stage(_) => left,
        Held::Pulling(_) | Held::PreHook(_) => true,
    });
    if let Some(held) = held {
        return Some(wait_for(facts, st, &held));
    }
    if !idle {
        return None;
    }
    // Nodes wait for something that is not the Plan's.
    wait_for_budget(st, situation.refused)
        .or_else(|| wait_for_held(facts, st, eligible))
        .or_else(|| no_concurrency(facts, st, eligible))
        .or_else(|| {
            let quarantined = situation.quarantined;
            (!quarantined.is_empty())
                .then(|| Said::not_done(QUARANTINED, quarantined_message(facts, quarantined)))
        })
}

/// New nodes wait for what holds the whole Plan: says so (once per reason as an event) and looks
/// again when it may have let go.
fn wait_for(facts: &Facts<'_>, st: &PlanStatus, held: &Held<'_>) -> Said {
    let (reason, message) = held_words(facts, held);
    let said = Said::not_done(reason, message.clone());
    match held {
        Held::Window(w) => {
            let (version, hash) = (&facts.version, &facts.hash);
            let note = format!(
                "Waiting for start of Spec.Window to sync Jobs for version {version}. Hash: {hash}"
            );
            said.recheck(w.next_check(facts.now))
                .telling_once(st, EventType::Normal, note)
        }
        Held::Check(_) if reason == HEALTH_CHECK_FAILING => {
            said.telling_once(st, EventType::Normal, message)
        }
        Held::Check(_) => said.telling_once(st, EventType::Warning, message),
        // The other Plan's progress wakes none: looked at again at most 30 seconds away.
        Held::Stage(stage) => {
            let said = said.recheck(BUDGET_RECHECK);
            let said = match stage.until {
                Some(until) => said.recheck(crate::common::until(facts.now, until)),
                None => said,
            };
            said.telling_once(st, EventType::Normal, message)
        }
        // Their Jobs' and pods' events say how they go.
        Held::Stopped | Held::Pulling(_) | Held::PreHook(_) => said,
    }
}

/// The `Complete` reason and message of what holds the whole Plan.
fn held_words(facts: &Facts<'_>, held: &Held<'_>) -> (&'static str, String) {
    match held {
        Held::Window(_) => ("Waiting", MSG_WAITING_FOR_WINDOW.to_string()),
        Held::Stopped => (
            STOPPED,
            format!("a failed node stopped the rollout: {}", how_to_go_on(facts)),
        ),
        Held::Check(check) => check_message(facts, check),
        Held::Stage(stage) => (super::promotion::WAITING_FOR_PLAN, stage.message.clone()),
        Held::Pulling(pull) => pull_message(pull),
        Held::PreHook(hook) => pre_hook_message(facts, hook),
    }
}

/// When what holds the whole Plan lets go by itself, if it says.
fn held_until(facts: &Facts<'_>, held: &Held<'_>) -> Option<jiff::Timestamp> {
    match held {
        Held::Window(w) => w.next_opening(facts.now),
        Held::Stage(stage) => stage.until,
        _ => None,
    }
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

/// With nothing applying, nodes left and `concurrency` 0 or less, no node ever starts: says so
/// (SUC reports the Plan complete, a trap of its issues #217 and #285).
fn no_concurrency(facts: &Facts<'_>, st: &PlanStatus, eligible: &[&NodeInfo]) -> Option<Said> {
    let concurrency = facts.settings.concurrency;
    if concurrency > 0 || eligible.is_empty() {
        return None;
    }
    let message = format!(
        "spec.concurrency is {concurrency}: none of the {} nodes to upgrade starts; set it to 1 or more",
        eligible.len()
    );
    let said = Said::not_done(NO_CONCURRENCY, message.clone());
    Some(said.telling_once(st, EventType::Warning, message))
}

/// How long a Plan that a DisruptionBudget holds back waits before it looks again (letting go of
/// a node wakes it sooner).
const BUDGET_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// With nothing applying and nodes a DisruptionBudget refused: says which budget and why (once
/// per reason as an event).
fn wait_for_budget(st: &PlanStatus, refused: &[(&NodeInfo, Refusal)]) -> Option<Said> {
    let (_, first) = refused.first()?;
    let message = refused_message(refused);
    let said = Said::not_done(first.reason(), message.clone()).recheck(BUDGET_RECHECK);
    Some(said.telling_once(st, EventType::Normal, message))
}

/// The reason of `Complete=False` while the only nodes left are held by another operation.
const WAITING_FOR_NODES: &str = "WaitingForNodes";

const HELD_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// With nothing applying and nodes left that another operation holds: says so (once as an
/// event) and looks again later.
fn wait_for_held(facts: &Facts<'_>, st: &PlanStatus, eligible: &[&NodeInfo]) -> Option<Said> {
    let message = held_message(facts, eligible)?;
    // A taint going away triggers a reconcile; a hold without one is looked at again.
    let said = Said::not_done(WAITING_FOR_NODES, message.clone()).recheck(HELD_RECHECK);
    Some(said.telling_once(st, EventType::Normal, message))
}

/// What the Plan waits for when nodes it still has to upgrade are held by another operation.
fn held_message(facts: &Facts<'_>, eligible: &[&NodeInfo]) -> Option<String> {
    let held: Vec<String> = eligible
        .iter()
        .filter_map(|n| {
            let holder = facts.holder_of(n)?;
            Some(format!("node {} is held by {holder}", n.hostname()))
        })
        .collect();
    let first = held.first()?;
    Some(match held.len() {
        1 => format!("waiting: {first}"),
        n => format!("waiting: {first} (and {} more nodes)", n - 1),
    })
}

/// Every eligible node this decision does not start, grouped by why, in the Plan's order (what
/// `slipway explain` shows; the controller does not ask for it).
pub(super) fn explain(
    facts: &Facts<'_>,
    steps: &super::facts::Steps<'_>,
    situation: &Situation<'_>,
) -> Vec<Waiting> {
    let left: Vec<&NodeInfo> = (situation.eligible.iter().copied())
        .filter(|n| !steps.contains_key(n.name.as_str()))
        .collect();
    let order = super::selection::first_in_plan_order(
        left.len(),
        facts.uid,
        &facts.hash,
        facts.settings.order,
        left,
    );
    let mut groups = Vec::new();
    let whole = situation.holds().next().map(|held| {
        let (reason, message) = held_words(facts, &held);
        (reason, message, held_until(facts, &held))
    });
    let concurrency = facts.settings.concurrency;
    for node in order {
        let name = node.hostname();
        if let Some((reason, message, until)) = &whole {
            wait(&mut groups, name, reason, || message.clone(), *until);
        } else if let Some(holder) = facts.holder_of(node) {
            wait(
                &mut groups,
                name,
                "HeldByOther",
                || format!("held by {holder}"),
                None,
            );
        } else if let Some((_, refusal)) =
            situation.refused.iter().find(|(n, _)| n.name == node.name)
        {
            wait(
                &mut groups,
                name,
                refusal.reason(),
                || refusal.to_string(),
                refusal.until(),
            );
        } else if concurrency <= 0 {
            let message = || format!("spec.concurrency is {concurrency}");
            wait(&mut groups, name, NO_CONCURRENCY, message, None);
        } else {
            let message = || format!("all {concurrency} slots are taken");
            wait(&mut groups, name, "Concurrency", message, None);
        }
    }
    groups
}

/// What an operator does to go on after a failure stopped the rollout.
fn how_to_go_on(facts: &Facts<'_>) -> String {
    format!(
        "change the Plan, or reset its failures with `kubectl annotate plan {} {}=<new value> --overwrite`",
        facts.name,
        super::failure::RESET_ANNOTATION
    )
}

/// The `Complete` reason and message while the pull of the images keeps nodes from starting.
fn pull_message(pull: &crate::node::prepull::PrePullStatus) -> (&'static str, String) {
    use crate::node::prepull::{PRE_PULL_FAILED, PRE_PULLING, PrePullPhase};
    let what = pull.message.as_deref().unwrap_or_default();
    match pull.phase {
        PrePullPhase::Failed => (
            PRE_PULL_FAILED,
            format!(
                "{what}; no node is touched until every node has the images \
                 (spec.disruption.prePull): the kubelet tries again, or change the Plan's image"
            ),
        ),
        _ => (
            PRE_PULLING,
            format!("{what}; the first node starts once every node has them"),
        ),
    }
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

/// `waiting: node a: <why> (and N more nodes)`; empty when no node was refused.
fn refused_message(refused: &[(&NodeInfo, Refusal)]) -> String {
    let Some((node, why)) = refused.first() else {
        return String::new();
    };
    let first = format!("waiting: node {}: {why}", node.hostname());
    match refused.len() {
        1 => first,
        n => format!("{first} (and {} more nodes)", n - 1),
    }
}

/// The event of a Plan whose selector matches no node.
const NO_NODES: &str = "NoNodes";

/// `Some(message)` when the Plan's selector matches no node that has a hostname: complete, with
/// nothing done, which deserves a word (SUC issues #217, #285).
fn selects_nothing(facts: &Facts<'_>, settled: Option<&SettledNodes>) -> Option<String> {
    let settled = settled.is_some_and(|s| s.count > 0);
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
fn progress_event(
    facts: &Facts<'_>,
    settled: Option<&SettledNodes>,
    patches: &[NodeChange],
) -> Option<Event> {
    let plan_label = labels::plan_node_label(facts.name);
    let labelled_now = (patches.iter())
        .filter(|p| p.labels.contains_key(&plan_label))
        .count();
    let (targeted, upgraded) = upgraded(facts.name, settled, facts.read, &facts.hash, patches);
    if targeted == 0 || labelled_now == 0 || upgraded >= targeted {
        return None;
    }
    let before = upgraded.saturating_sub(labelled_now);
    (before * 10 / targeted != upgraded * 10 / targeted).then(|| {
        let message = format!(
            "Upgraded {upgraded} of {targeted} nodes to version {}",
            facts.version
        );
        Event::normal("Progress", message)
    })
}

/// (targeted, upgraded): nodes the Plan's selector matches with a hostname and not `disabled`,
/// and how many of them carry `hash`, counting this decision's labels and the settled nodes.
fn upgraded(
    plan: &str,
    settled: Option<&SettledNodes>,
    read: &[NodeLabels<'_>],
    hash: &str,
    patches: &[NodeChange],
) -> (usize, usize) {
    let plan_label = labels::plan_node_label(plan);
    let patched: BTreeSet<&str> = patches
        .iter()
        .filter(|p| p.labels.get(&plan_label).and_then(Option::as_deref) == Some(hash))
        .map(|p| p.node.as_str())
        .collect();
    let mut targeted = settled.map_or(0, |s| s.count);
    let mut upgraded = match settled {
        Some(s) if !hash.is_empty() && s.hash == hash => s.count,
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

/// The gauges' view of the decision.
pub(super) fn summary(
    input: &PlanInput<'_>,
    read: &[NodeLabels<'_>],
    st: &PlanStatus,
    patches: &[NodeChange],
) -> PlanSummary {
    let hash = st.latest_hash.as_deref().unwrap_or_default();
    let name = input.plan.metadata.name.as_deref().unwrap_or_default();
    let (targeted, upgraded) = upgraded(name, input.settled, read, hash, patches);
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

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-12-01T10:00:00Z";

    fn saying(reason: &str, message: &str) -> PlanStatus {
        let mut st = PlanStatus::default();
        cond::set(
            &mut st,
            Stamp::new(NOW, Some(1)),
            COMPLETE,
            FALSE,
            reason,
            message,
        );
        st
    }

    #[test]
    fn a_wait_is_told_once_per_reason_whatever_its_message() {
        let st = saying("Waiting", "the window");
        let again = Said::not_done("Waiting", "another message".into());
        let again = again.telling_once(&st, EventType::Normal, "note".into());
        assert!(again.events.is_empty());
        let new = Said::not_done(NO_CONCURRENCY, "none starts".into());
        let new = new.telling_once(&st, EventType::Warning, "none starts".into());
        assert_eq!(new.events.len(), 1);
        assert_eq!(new.events[0].type_, EventType::Warning);
        assert_eq!(new.events[0].reason, NO_CONCURRENCY);
    }

    #[test]
    fn a_failure_is_told_once_per_message() {
        let st = saying("ValidationFailed", "cannot render");
        assert!(
            Said::failed(&st, "ValidationFailed", "cannot render".into())
                .events
                .is_empty()
        );
        let other = Said::failed(&st, "ValidationFailed", "cannot render either".into());
        assert_eq!(other.events.len(), 1);
        assert_eq!(other.events[0].type_, EventType::Warning);
        assert_eq!(other.events[0].message, "cannot render either");
    }

    #[test]
    fn the_sooner_recheck_wins_and_none_is_under_a_second() {
        let said = Said::not_done("Waiting", String::new());
        let said = said
            .recheck(Duration::from_secs(30))
            .recheck(Duration::from_secs(5));
        assert_eq!(said.recheck, Some(Duration::from_secs(5)));
        let said = Said::not_done("Waiting", String::new()).recheck(Duration::ZERO);
        assert_eq!(said.recheck, Some(Duration::from_secs(1)));
    }

    #[test]
    fn writing_a_report_sets_the_condition_then_hands_on_its_events_and_rechecks() {
        let mut st = saying("SyncJob", "");
        let mut out = Rollout::default();
        out.requeue(Duration::from_secs(60));
        let said = Said::not_done(WAITING_FOR_NODES, "held".into())
            .recheck(HELD_RECHECK)
            .telling_once(&st, EventType::Normal, "held".into());
        let report = Report {
            said: Some(said),
            recheck: Some(Duration::from_secs(10)),
            progress: Some(Event::normal("Progress", "Upgraded 1 of 10 nodes")),
        };
        report.write(&mut st, &mut out, Stamp::new(NOW, Some(2)));
        let c = cond::get(&st, COMPLETE).expect("the condition");
        assert_eq!(c.reason.as_deref(), Some(WAITING_FOR_NODES));
        assert_eq!(c.message.as_deref(), Some("held"));
        assert_eq!(c.observed_generation, Some(2));
        let reasons: Vec<&str> = out.events.iter().map(|e| e.reason).collect();
        assert_eq!(reasons, [WAITING_FOR_NODES, "Progress"]);
        assert_eq!(out.requeue_after, Some(Duration::from_secs(10)));
    }
}
