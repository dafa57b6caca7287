//! The decision on the nodes of one policy: which node that wants a reboot starts now and why the
//! others wait, and the next step of every node in progress.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use super::failures::{STOPPED, stopped, stopped_message};
use super::signals::{
    CONDITION_HANDLED, Signal, Signals, agent_rebooting, condition_marker, requested,
};
use super::spec::PolicySettings;
use super::state::{DRAIN_TIMED_OUT, RebootState};
use super::steps::{DrainView, NodeSteps, NodeView, RebootAction};
use super::steps::{delayed_drain, elapsed, rebooting};
use super::waiting::{halted, hold_reason, refused, soaking, summary};
use super::{DRAIN_RECHECK, DRAIN_RETRY, WAIT_RECHECK};
use crate::common::duration::GoDuration;
use crate::common::rfc3339;
use crate::node::NodeInfo;
use crate::node::budget::Budget;
use crate::node::drain::{self, OnDrainTimeout};
use crate::node::handoff::Handoff;
use crate::reboot_policy::api::{RebootNodeStatus, RebootPhase};

/// The slots of the concurrency taken: the policy's own nodes in progress and soaking, the
/// selected nodes another operation holds, and those an update-agent is rebooting under another
/// coordinator's grant.
fn slots_taken(signals: &Signals, d: &NodeSteps, soaking: usize, nodes: &[NodeView<'_>]) -> usize {
    let others = nodes
        .iter()
        .filter(|v| v.selected && !d.states.contains_key(&v.node.name))
        .filter(|v| v.held_by.is_some() || agent_rebooting(v.node, signals))
        .count();
    d.states.values().filter(|s| s.holds_slot()).count() + soaking + others
}

/// Decides the next step of every node of one policy.
///
/// `states` are the nodes in progress, as persisted; `nodes` every node the policy governs or has
/// a state for (with who else holds each); `budget` the DisruptionBudgets a reboot must fit in;
/// `wanting_since` the first time each waiting node was reported waiting.
pub fn decide_nodes(
    settings: &PolicySettings,
    signals: &Signals,
    states: &BTreeMap<String, RebootState>,
    nodes: &[NodeView<'_>],
    budget: &Budget,
    wanting_since: &BTreeMap<String, Timestamp>,
    now: Timestamp,
) -> NodeSteps {
    let mut d = NodeSteps::default();
    let by_name: BTreeMap<&str, &NodeView<'_>> =
        nodes.iter().map(|v| (v.node.name.as_str(), v)).collect();

    for (name, state) in states {
        match by_name.get(name.as_str()) {
            Some(view) => advance(settings, signals, name, state.clone(), view, now, &mut d),
            None => d.event(
                name,
                true,
                "NodeGone",
                format!("Node {name} was deleted during its reboot; it is forgotten"),
            ),
        }
    }
    super::kured::take_over(settings, states, nodes, now, &mut d);

    let soaking = soaking(settings, &mut d, now);
    let mut busy = slots_taken(signals, &d, soaking.len(), nodes);
    d.stopped = stopped(settings, &d.states);
    let mut waiting = nodes
        .iter()
        .filter(|v| v.selected && !d.states.contains_key(&v.node.name))
        .filter_map(|v| requested(v.node, signals).map(|s| (v, s)))
        .collect::<Vec<_>>();
    waiting.sort_by(|a, b| a.0.node.name.cmp(&b.0.node.name));
    let mut budget = budget.clone();
    // The nodes whose reboot ended in this decision give their room back.
    budget.keep_only(|n| d.states.get(n).is_some_and(RebootState::holds_slot));
    for (view, signal) in waiting {
        let name = &view.node.name;
        let hold = match &d.stopped {
            Some(why) => Some((RebootPhase::Wanting, STOPPED, stopped_message(why))),
            None => halted(&budget, view.node)
                .or_else(|| hold_reason(settings, view, busy, &soaking))
                .or_else(|| refused(&mut budget, view.node, now, &mut d)),
        };
        let Some((waiting_phase, reason, message)) = hold else {
            start(
                name,
                view.node,
                signal,
                signals,
                settings.drain_delay,
                now,
                &mut d,
            );
            busy += 1;
            continue;
        };
        d.wanting += 1;
        if !["NodeBusy", "Paused", STOPPED].contains(&reason) {
            d.next_up.push(name.clone());
        }
        crate::common::decision::wait(&mut d.waiting, name, reason, || message.clone(), None);
        d.nodes.push(RebootNodeStatus {
            name: name.clone(),
            phase: waiting_phase,
            since: Some(rfc3339(*wanting_since.get(name).unwrap_or(&now))),
            signal: Some(signal),
            reason: Some(reason.to_string()),
            message: Some(message),
            ..Default::default()
        });
        d.recheck(WAIT_RECHECK);
    }
    d.nodes.sort_by(|a, b| a.name.cmp(&b.name));
    d.rebooting = d.states.values().filter(|s| s.holds_slot()).count();
    d.summary = summary(settings, &d, busy);
    d
}

fn start(
    name: &str,
    node: &NodeInfo,
    signal: Signal,
    signals: &Signals,
    delay: Duration,
    now: Timestamp,
    d: &mut NodeSteps,
) {
    let state = RebootState::Draining {
        signal,
        before: node.boot_id.clone(),
        // Who cordoned the node is recorded on the node (the Cordon effect).
        cordoned: false,
        since: now,
    };
    if signal == Signal::NodeCondition
        && let Some(marker) = condition_marker(node, signals)
    {
        // Recorded before anything else: this occurrence of the conditions is being handled.
        d.act(name, RebootAction::MarkConditions(marker));
    }
    let why = format!(
        "Node {name} asked for a reboot ({}); draining it",
        signal.name()
    );
    d.begin_drain(node, state, why, delay);
}

/// One node in progress.
fn advance(
    settings: &PolicySettings,
    signals: &Signals,
    name: &str,
    state: RebootState,
    view: &NodeView<'_>,
    now: Timestamp,
    d: &mut NodeSteps,
) {
    match state {
        s @ RebootState::Draining { .. } => draining(settings, signals, name, s, view, now, d),
        s @ RebootState::Rebooting { .. } => rebooting(settings, name, s, view, now, d),
        RebootState::Kured {
            before,
            cordoned,
            since,
        } => {
            let taken = super::kured::Taken {
                before,
                cordoned,
                since,
            };
            super::kured::advance(settings, name, taken, view, now, d);
        }
        RebootState::DrainFailed {
            signal,
            message,
            since,
        } => {
            if elapsed(since, now) >= DRAIN_RETRY {
                return;
            }
            let next = RebootState::DrainFailed {
                signal,
                message: message.clone(),
                since,
            };
            d.keep(name, next, message);
            d.recheck(DRAIN_RETRY - elapsed(since, now));
        }
    }
}

/// Cordoned and draining: on to the reboot once drained (or rebooted meanwhile), given back
/// once the drain's timeout passes, else evict again.
fn draining(
    settings: &PolicySettings,
    signals: &Signals,
    name: &str,
    state: RebootState,
    view: &NodeView<'_>,
    now: Timestamp,
    d: &mut NodeSteps,
) {
    let RebootState::Draining {
        signal,
        before,
        cordoned,
        since,
    } = state
    else {
        return;
    };
    // The drain starts once its delay has passed (a node kured took first was kured's to delay).
    let delay = match signal {
        Signal::Kured => Duration::ZERO,
        _ => settings.drain_delay,
    };
    let start = since.checked_add(delay).unwrap_or(since);
    if now < start && view.node.boot_id == before {
        let next = RebootState::Draining {
            signal,
            before,
            cordoned,
            since,
        };
        let left = elapsed(now, start);
        d.keep(name, next, delayed_drain(left));
        d.recheck(left);
        return;
    }
    if !delay.is_zero() && !view.node.unschedulable {
        d.act(name, RebootAction::Cordon);
    }
    let drained = settings.drain_timeout.is_none()
        || view.drain.as_ref().is_some_and(|v| v.remaining == 0)
        || view.node.boot_id != before;
    if drained {
        // The hand-off asks for the reboot while the boot is unchanged.
        if view.node.boot_id == before {
            if settings.drain_timeout.is_some() {
                d.event(name, false, "Drained", format!("Node {name} drained"));
            }
            ask_again(signals, name, signal, view, d);
        }
        let next = RebootState::Rebooting {
            signal,
            cordoned,
            handoff: Handoff::start(before, now),
        };
        d.event(name, false, "Rebooting", format!("Rebooting Node {name}"));
        return rebooting(settings, name, next, view, now, d);
    }
    let timeout = settings.drain_timeout.unwrap_or_default();
    let late = elapsed(start, now) >= timeout;
    if late && settings.on_drain_timeout == OnDrainTimeout::Fail {
        return drain_timed_out(name, signal, cordoned, timeout, view, now, d);
    }
    let waiting = drain_waiting(view);
    ask_again(signals, name, signal, view, d);
    let message = match view.drain.as_ref().filter(|_| late) {
        Some(drain) => drain_past_timeout(name, drain, timeout, waiting, d),
        None => {
            d.act(name, RebootAction::Drain);
            waiting
        }
    };
    let next = RebootState::Draining {
        signal,
        before,
        cordoned,
        since,
    };
    d.keep(name, next, message);
    d.recheck(DRAIN_RECHECK);
}

/// What a drain under way waits for, as the node's status says it.
fn drain_waiting(view: &NodeView<'_>) -> String {
    match &view.drain {
        Some(v) if v.volumes_only => v.waiting_for.join("; "),
        Some(v) if !v.waiting_for.is_empty() => format!(
            "{} pods left to evict: {}",
            v.remaining,
            v.waiting_for.join("; ")
        ),
        Some(v) => format!("{} pods left to evict", v.remaining),
        None => "draining".into(),
    }
}

/// A drain past its timeout (`onDrainTimeout: Delete`): the pods eviction could not move are
/// deleted, each told in an event; the message says so, then what the drain is still `waiting` for.
fn drain_past_timeout(
    name: &str,
    drain: &DrainView,
    timeout: Duration,
    waiting: String,
    d: &mut NodeSteps,
) -> String {
    let after = GoDuration::from_std(timeout).to_string();
    for pod in &drain.to_delete {
        let e = drain::deleted_event(pod, name, &after);
        d.event(name, true, e.reason, e.message);
    }
    if !drain.to_delete.is_empty() {
        d.act(name, RebootAction::DeletePods(drain.to_delete.clone()));
    }
    // Volumes are not deleted: they are waited for.
    let doing = if drain.volumes_only { "" } else { "deleting " };
    format!("the drain did not finish within {after}; {doing}{waiting}")
}

/// What a node's start asked for, asked again while the node does not show it (the patch may
/// have failed after the state was written): the cordon, and the record of the conditions this
/// reboot handles (without it, a condition that stays `True` would reboot the node again).
fn ask_again(
    signals: &Signals,
    name: &str,
    signal: Signal,
    view: &NodeView<'_>,
    d: &mut NodeSteps,
) {
    let node = view.node;
    if signal == Signal::NodeCondition
        && let Some(marker) = condition_marker(node, signals)
        && node.annotations.get(CONDITION_HANDLED) != Some(&marker)
    {
        d.act(name, RebootAction::MarkConditions(marker));
    }
    if !node.unschedulable {
        d.act(name, RebootAction::Cordon);
    }
}

/// The drain took too long: the node is given back, named with what stayed, and retried later.
fn drain_timed_out(
    name: &str,
    signal: Signal,
    cordoned: bool,
    timeout: Duration,
    view: &NodeView<'_>,
    now: Timestamp,
    d: &mut NodeSteps,
) {
    let left = view
        .drain
        .as_ref()
        .map(|v| v.waiting_for.join("; "))
        .unwrap_or_default();
    let message = format!(
        "the drain of Node {name} did not finish within {}: {left}; retrying after {}",
        GoDuration::from_std(timeout),
        GoDuration::from_std(DRAIN_RETRY)
    );
    d.act(
        name,
        RebootAction::Finish {
            signal,
            uncordon: cordoned,
            rebooted: false,
        },
    );
    d.event(name, true, DRAIN_TIMED_OUT, message.clone());
    let next = RebootState::DrainFailed {
        signal,
        message: message.clone(),
        since: now,
    };
    d.keep(name, next, message);
    d.recheck(DRAIN_RETRY);
}
