//! Reboots the nodes ask for, under a `RebootPolicy`: which nodes want one, which start now, and
//! what each node in progress does next. Pure: the controller reads the nodes, their pods and the
//! policy's `status.nodes`, calls [`decide`], writes the status it returns, then acts.
//!
//! A node's reboot goes: cordon (recorded, so only slipway's own cordon is undone), drain through
//! the Eviction API, reboot (a reboot pod, or for nodes run by Flatcar's or Container Linux's
//! update-agent the operator's `reboot-ok` grant, after which the agent reboots), then the
//! hand-off Plans use: a new boot ID and Ready, then the health gate. The state is written before
//! the action, so a controller killed at any point finds the node where it left it and never
//! starts more nodes than the concurrency.

pub mod alerts;
pub mod pod;
pub mod request;

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use crate::common::duration::GoDuration;
use crate::common::rfc3339;
use crate::common::selector::Selector;
use crate::common::window::TimeWindow;
use crate::node::NodeInfo;
use crate::node::drain::DrainOptions;
use crate::node::handoff::{self, GatePolicy, Handoff, HandoffPolicy, Stage};
use crate::node::reboot::{
    DEFAULT_HEALTH_TIMEOUT, DEFAULT_TIMEOUT, HealthGate, HealthGateSpec, HealthObservation,
};
use crate::reboot_policy::api::{
    RebootBlockers, RebootDrain, RebootNodeStatus, RebootPolicySpec, RebootRecord, RebootSignals,
};
use alerts::AlertFilter;
use request::REBOOT_REQUIRED_ANNOTATION;

/// The annotation prefix of Flatcar's update operator (FLUO) and its agent.
pub const FLATCAR_PREFIX: &str = "flatcar-linux-update.v1.flatcar-linux.org/";
/// The annotation prefix of Container Linux's update operator (CLUO) and its agent.
pub const CONTAINER_LINUX_PREFIX: &str = "container-linux-update.v1.coreos.com/";
/// Set `"true"` by the update-agent when the node needs a reboot.
pub const REBOOT_NEEDED: &str = "reboot-needed";
/// Set `"true"` by the update-agent from its drain until it is back after the reboot.
pub const REBOOT_IN_PROGRESS: &str = "reboot-in-progress";
/// Written by the operator (here, slipway): `"true"` lets the agent reboot, `"false"` after.
pub const REBOOT_OK: &str = "reboot-ok";
/// Set `"true"` by an admin: the operator leaves the node alone.
pub const REBOOT_PAUSED: &str = "reboot-paused";

/// How many rebooted nodes `status.rebooted` remembers.
pub const REBOOTED_KEPT: usize = 20;

/// `status.rebooted` after this decision: the new records first, then the previous ones, at
/// most [`REBOOTED_KEPT`].
pub fn rebooted_history(previous: &[RebootRecord], new: &[RebootRecord]) -> Vec<RebootRecord> {
    new.iter()
        .rev()
        .chain(previous)
        .take(REBOOTED_KEPT)
        .cloned()
        .collect()
}

/// How soon a node whose drain timed out is tried again.
pub const DRAIN_RETRY: Duration = Duration::from_secs(10 * 60);
/// How often a drain under way is looked at.
pub const DRAIN_RECHECK: Duration = Duration::from_secs(5);
/// How often nodes that want a reboot but wait are looked at, besides node events.
pub const WAIT_RECHECK: Duration = Duration::from_secs(30);

/// Phase names in `status.nodes`.
pub mod phase {
    pub const WANTING: &str = "Wanting";
    pub const WAITING_FOR_WINDOW: &str = "WaitingForWindow";
    pub const BLOCKED: &str = "Blocked";
    pub const DRAINING: &str = "Draining";
    pub const REBOOTING: &str = "Rebooting";
    pub const WAITING_FOR_HEALTH: &str = "WaitingForHealth";
    pub const FAILED: &str = "Failed";
}

/// What asked for a node's reboot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `slipway agent`'s annotation, made at the node's current boot.
    Agent,
    /// FLUO's update-agent: slipway grants `reboot-ok` and the agent reboots.
    Flatcar,
    /// CLUO's update-agent, the same protocol under its own prefix.
    ContainerLinux,
    /// A Node condition the policy names (Node Problem Detector) became `True`.
    NodeCondition,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::Agent => "agent",
            Signal::Flatcar => "flatcar",
            Signal::ContainerLinux => "containerLinux",
            Signal::NodeCondition => "nodeCondition",
        }
    }

    pub fn parse(name: &str) -> Option<Signal> {
        [
            Signal::Agent,
            Signal::Flatcar,
            Signal::ContainerLinux,
            Signal::NodeCondition,
        ]
        .into_iter()
        .find(|s| s.name() == name)
    }

    /// The annotation prefix of the update-agent that reboots the node itself once granted;
    /// `None` when slipway's reboot pod does it.
    pub fn update_agent(self) -> Option<&'static str> {
        match self {
            Signal::Agent | Signal::NodeCondition => None,
            Signal::Flatcar => Some(FLATCAR_PREFIX),
            Signal::ContainerLinux => Some(CONTAINER_LINUX_PREFIX),
        }
    }
}

/// The signals a policy listens to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signals {
    pub agent: bool,
    pub flatcar: bool,
    pub container_linux: bool,
    /// Node condition types that ask for a reboot when `True`.
    pub node_conditions: Vec<String>,
}

impl Signals {
    pub fn of(spec: Option<&RebootSignals>) -> Signals {
        Signals {
            agent: spec.and_then(|s| s.agent).unwrap_or(true),
            flatcar: spec.and_then(|s| s.flatcar).unwrap_or(false),
            container_linux: spec.and_then(|s| s.container_linux).unwrap_or(false),
            node_conditions: spec.map(|s| s.node_conditions.clone()).unwrap_or_default(),
        }
    }
}

/// On a Node: the conditions (`type=lastTransitionTime`, sorted, comma-separated) whose reboot a
/// policy started. A condition asks again only once it changes (Node Problem Detector sets it
/// anew), so a condition that stays `True` after the reboot does not reboot the node in a loop.
pub const CONDITION_HANDLED: &str = "slipway.dev/reboot-conditions-handled";

/// Every node annotation the policies read; the node index keeps these.
pub const SIGNAL_ANNOTATIONS: [&str; 10] = [
    "slipway.dev/reboot-required",
    "slipway.dev/reboot-conditions-handled",
    "flatcar-linux-update.v1.flatcar-linux.org/reboot-needed",
    "flatcar-linux-update.v1.flatcar-linux.org/reboot-in-progress",
    "flatcar-linux-update.v1.flatcar-linux.org/reboot-ok",
    "flatcar-linux-update.v1.flatcar-linux.org/reboot-paused",
    "container-linux-update.v1.coreos.com/reboot-needed",
    "container-linux-update.v1.coreos.com/reboot-in-progress",
    "container-linux-update.v1.coreos.com/reboot-ok",
    "container-linux-update.v1.coreos.com/reboot-paused",
];

fn annotation<'a>(node: &'a NodeInfo, prefix: &str, key: &str) -> Option<&'a str> {
    node.annotations
        .get(&format!("{prefix}{key}"))
        .map(String::as_str)
}

/// The node's `True` conditions among those the policy names, as [`CONDITION_HANDLED`] records
/// them; `None` when none is `True`.
pub fn condition_marker(node: &NodeInfo, signals: &Signals) -> Option<String> {
    let mut seen: Vec<String> = signals
        .node_conditions
        .iter()
        .filter_map(|t| node.true_conditions.get(t).map(|at| format!("{t}={at}")))
        .collect();
    seen.sort();
    seen.dedup();
    (!seen.is_empty()).then(|| seen.join(","))
}

/// Which signal, if any, says the node wants a reboot now.
///
/// The agent's annotation counts only when made at the node's current boot (a request from before
/// the last reboot is stale). An update-agent's `reboot-needed` counts unless an admin paused the
/// node or the agent says a reboot is already in progress (it clears both flags only once it is
/// back, so a node just rebooted is not taken again).
pub fn requested(node: &NodeInfo, signals: &Signals) -> Option<Signal> {
    if signals.agent
        && !node.boot_id.is_empty()
        && node.annotations.get(REBOOT_REQUIRED_ANNOTATION) == Some(&node.boot_id)
    {
        return Some(Signal::Agent);
    }
    let agent = [
        (signals.flatcar, Signal::Flatcar),
        (signals.container_linux, Signal::ContainerLinux),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, s)| s)
    .find(|s| {
        let prefix = s.update_agent().unwrap_or_default();
        annotation(node, prefix, REBOOT_NEEDED) == Some("true")
            && annotation(node, prefix, REBOOT_PAUSED) != Some("true")
            && annotation(node, prefix, REBOOT_IN_PROGRESS) != Some("true")
    });
    agent.or_else(|| {
        let marker = condition_marker(node, signals)?;
        (node.annotations.get(CONDITION_HANDLED) != Some(&marker)).then_some(Signal::NodeCondition)
    })
}

/// A node the policy has started on, as persisted in `status.nodes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebootState {
    /// Cordoned (by slipway when `cordoned`) and being drained; it runs boot `before`.
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
        }
    }

    /// Reads a state written by [`RebootState::to_status`]; `None` for an entry that only
    /// reports a wait (those nodes have not started) or cannot be understood.
    pub fn from_status(s: &RebootNodeStatus, now: Timestamp) -> Option<RebootState> {
        let signal = Signal::parse(s.signal.as_deref()?)?;
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
        Some(match (s.phase.as_str(), s.reason.as_deref()) {
            (phase::DRAINING, _) => RebootState::Draining {
                signal,
                before: before(),
                cordoned,
                since,
            },
            (phase::REBOOTING, _) => rebooting(Handoff::AwaitingBoot {
                before: before(),
                since,
            }),
            (phase::WAITING_FOR_HEALTH, _) => rebooting(Handoff::AwaitingHealth {
                before: before(),
                since,
            }),
            (phase::FAILED, Some(DRAIN_TIMED_OUT)) => RebootState::DrainFailed {
                signal,
                message,
                since,
            },
            (phase::FAILED, Some(reason)) => {
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
        let entry = |phase: &str, since: Timestamp| RebootNodeStatus {
            name: name.to_string(),
            phase: phase.to_string(),
            since: Some(rfc3339(since)),
            signal: Some(self.signal().name().to_string()),
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
                cordoned: Some(*cordoned),
                ..entry(phase::DRAINING, *since)
            },
            RebootState::Rebooting {
                cordoned, handoff, ..
            } => {
                let (phase, since, reason) = match handoff {
                    Handoff::AwaitingBoot { since, .. } => (phase::REBOOTING, *since, None),
                    Handoff::AwaitingHealth { since, .. } => {
                        (phase::WAITING_FOR_HEALTH, *since, None)
                    }
                    Handoff::TimedOut { stage, since, .. } => {
                        (phase::FAILED, *since, Some(stage.reason().to_string()))
                    }
                    Handoff::Passed => (phase::REBOOTING, Timestamp::UNIX_EPOCH, None),
                };
                RebootNodeStatus {
                    boot_id: handoff.before().map(str::to_string),
                    cordoned: Some(*cordoned),
                    reason,
                    ..entry(phase, since)
                }
            }
            RebootState::DrainFailed { since, .. } => RebootNodeStatus {
                reason: Some(DRAIN_TIMED_OUT.to_string()),
                ..entry(phase::FAILED, *since)
            },
        }
    }
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

/// The policy's settings, with defaults applied and the clock read.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicySettings {
    pub concurrency: usize,
    pub paused: bool,
    /// `None` when the window is open (or there is none); else when it opens next.
    pub window_closed: Option<Option<Timestamp>>,
    /// `None`: cordon only; else the drain's timeout.
    pub drain_timeout: Option<Duration>,
    pub handoff: HandoffPolicy,
    /// Set when Prometheus holds every reboot: which alerts fire, or why it could not be asked.
    pub alerts: Option<String>,
}

/// What a drain under way still waits for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainView {
    /// Pods the drain has still to see gone.
    pub remaining: usize,
    /// Why the first of them stay, for the status.
    pub waiting_for: Vec<String>,
}

/// One node the policy governs (or has a state for), as read now.
#[derive(Debug, Clone)]
pub struct NodeView<'a> {
    pub node: &'a NodeInfo,
    /// The node matches the policy's selector (a node in progress that no longer does is still
    /// finished).
    pub selected: bool,
    /// Another slipway operation holds the node: who.
    pub held_by: Option<String>,
    /// Running pods on the node that match a blocking selector.
    pub blocking_pods: Vec<String>,
    /// For a draining node: what is left; `None` when not looked at.
    pub drain: Option<DrainView>,
    /// For a node in its health gate: the gate's pods.
    pub health: Option<&'a HealthObservation>,
}

/// What the controller does for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebootAction {
    /// Record on the node which occurrence of its conditions this reboot handles
    /// ([`CONDITION_HANDLED`]).
    MarkConditions(String),
    /// Cordon the node (it was schedulable).
    Cordon,
    /// Evict the pods the drain still has to move.
    Drain,
    /// Have the node reboot from boot `before`: a reboot pod, or `reboot-ok=true` for an
    /// update-agent. Asked again on every look until the node has rebooted (both are idempotent).
    Reboot { signal: Signal, before: String },
    /// The node is back (or gave up): withdraw the grant (`reboot-ok=false`), remove the reboot
    /// pod, and uncordon if slipway cordoned it.
    Finish { signal: Signal, uncordon: bool },
    /// An event on the policy.
    Event {
        warning: bool,
        reason: &'static str,
        message: String,
    },
}

/// The whole decision for one policy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyDecision {
    /// The states to persist, by node name.
    pub states: BTreeMap<String, RebootState>,
    /// What to do, in order, after the states are persisted.
    pub actions: Vec<(String, RebootAction)>,
    /// `status.nodes`, by name.
    pub nodes: Vec<RebootNodeStatus>,
    /// Nodes that came back in this decision, in the order they were looked at.
    pub rebooted: Vec<RebootRecord>,
    pub wanting: usize,
    pub rebooting: usize,
    /// The `Progressing` condition's message.
    pub summary: String,
    /// Look again after this long at the latest.
    pub recheck: Option<Duration>,
}

impl PolicyDecision {
    fn recheck(&mut self, after: Duration) {
        self.recheck = Some(self.recheck.map_or(after, |r| r.min(after)));
    }

    /// `node` stays in progress in `state`; `message` says what it waits for.
    fn keep(&mut self, node: &str, state: RebootState, message: String) {
        self.nodes.push(state.to_status(node, message));
        self.states.insert(node.to_string(), state);
    }

    fn act(&mut self, node: &str, action: RebootAction) {
        self.actions.push((node.to_string(), action));
    }

    fn event(&mut self, node: &str, warning: bool, reason: &'static str, message: String) {
        self.act(
            node,
            RebootAction::Event {
                warning,
                reason,
                message,
            },
        );
    }
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    now.duration_since(since).try_into().unwrap_or_default()
}

/// Decides the next step of every node of one policy.
///
/// `states` are the nodes in progress, as persisted; `nodes` every node the policy governs or has
/// a state for; `held_elsewhere` counts the governed nodes another slipway operation holds (they
/// use the same budget); `wanting_since` the first time each waiting node was reported waiting.
pub fn decide(
    settings: &PolicySettings,
    signals: &Signals,
    states: &BTreeMap<String, RebootState>,
    nodes: &[NodeView<'_>],
    wanting_since: &BTreeMap<String, Timestamp>,
    now: Timestamp,
) -> PolicyDecision {
    let mut d = PolicyDecision::default();
    let by_name: BTreeMap<&str, &NodeView<'_>> =
        nodes.iter().map(|v| (v.node.name.as_str(), v)).collect();

    for (name, state) in states {
        match by_name.get(name.as_str()) {
            Some(view) => advance(settings, name, state.clone(), view, now, &mut d),
            None => d.event(
                name,
                true,
                "NodeGone",
                format!("Node {name} was deleted during its reboot; it is forgotten"),
            ),
        }
    }

    let mut busy = d.states.values().filter(|s| s.holds_slot()).count()
        + nodes
            .iter()
            .filter(|v| v.selected && v.held_by.is_some() && !d.states.contains_key(&v.node.name))
            .count();
    let mut waiting = nodes
        .iter()
        .filter(|v| v.selected && !d.states.contains_key(&v.node.name))
        .filter_map(|v| requested(v.node, signals).map(|s| (v, s)))
        .collect::<Vec<_>>();
    waiting.sort_by(|a, b| a.0.node.name.cmp(&b.0.node.name));
    for (view, signal) in waiting {
        let name = &view.node.name;
        let hold = hold_reason(settings, view, busy);
        let Some((waiting_phase, reason, message)) = hold else {
            start(name, view.node, signal, signals, now, &mut d);
            busy += 1;
            continue;
        };
        d.wanting += 1;
        d.nodes.push(RebootNodeStatus {
            name: name.clone(),
            phase: waiting_phase.to_string(),
            since: Some(rfc3339(*wanting_since.get(name).unwrap_or(&now))),
            signal: Some(signal.name().to_string()),
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

/// Why a node that wants a reboot does not start now: its phase, a reason and a message.
fn hold_reason(
    settings: &PolicySettings,
    view: &NodeView<'_>,
    busy: usize,
) -> Option<(&'static str, &'static str, String)> {
    if settings.paused {
        return Some((
            phase::WANTING,
            "Paused",
            "the policy is paused (spec.paused)".into(),
        ));
    }
    if let Some(next) = settings.window_closed {
        let when = next.map_or_else(|| "never".to_string(), rfc3339);
        return Some((
            phase::WAITING_FOR_WINDOW,
            "OutsideWindow",
            format!("outside spec.window; it opens next at {when}"),
        ));
    }
    if let Some(alerts) = &settings.alerts {
        return Some((phase::BLOCKED, "AlertsFiring", alerts.clone()));
    }
    if let Some(holder) = &view.held_by {
        return Some((
            phase::BLOCKED,
            "NodeBusy",
            format!("{holder} holds the node"),
        ));
    }
    if !view.blocking_pods.is_empty() {
        return Some((
            phase::BLOCKED,
            "BlockingPods",
            format!(
                "blocking pods run on the node: {}",
                view.blocking_pods.join(", ")
            ),
        ));
    }
    if busy >= settings.concurrency {
        return Some((
            phase::WANTING,
            "ConcurrencyReached",
            format!(
                "{busy} of at most {} nodes are being disrupted; waiting for a slot",
                settings.concurrency
            ),
        ));
    }
    None
}

fn start(
    name: &str,
    node: &NodeInfo,
    signal: Signal,
    signals: &Signals,
    now: Timestamp,
    d: &mut PolicyDecision,
) {
    let state = RebootState::Draining {
        signal,
        before: node.boot_id.clone(),
        cordoned: !node.unschedulable,
        since: now,
    };
    d.nodes
        .push(state.to_status(name, "cordoning and draining".into()));
    d.states.insert(name.to_string(), state);
    if signal == Signal::NodeCondition
        && let Some(marker) = condition_marker(node, signals)
    {
        // Recorded before anything else: this occurrence of the conditions is being handled.
        d.act(name, RebootAction::MarkConditions(marker));
    }
    if !node.unschedulable {
        d.act(name, RebootAction::Cordon);
    }
    d.act(name, RebootAction::Drain);
    d.event(
        name,
        false,
        "Draining",
        format!(
            "Node {name} asked for a reboot ({}); draining it",
            signal.name()
        ),
    );
    d.recheck(DRAIN_RECHECK);
}

/// One node in progress.
fn advance(
    settings: &PolicySettings,
    name: &str,
    state: RebootState,
    view: &NodeView<'_>,
    now: Timestamp,
    d: &mut PolicyDecision,
) {
    match state {
        s @ RebootState::Draining { .. } => draining(settings, name, s, view, now, d),
        s @ RebootState::Rebooting { .. } => rebooting(settings, name, s, view, now, d),
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
    name: &str,
    state: RebootState,
    view: &NodeView<'_>,
    now: Timestamp,
    d: &mut PolicyDecision,
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
    let drained = settings.drain_timeout.is_none()
        || view.drain.as_ref().is_some_and(|v| v.remaining == 0)
        || view.node.boot_id != before;
    if drained {
        let next = RebootState::Rebooting {
            signal,
            cordoned,
            handoff: Handoff::start(before, now),
        };
        // The hand-off asks for the reboot while the boot is unchanged.
        d.event(name, false, "Rebooting", format!("Rebooting Node {name}"));
        return rebooting(settings, name, next, view, now, d);
    }
    let timeout = settings.drain_timeout.unwrap_or_default();
    if elapsed(since, now) >= timeout {
        return drain_timed_out(name, signal, cordoned, timeout, view, now, d);
    }
    let message = match &view.drain {
        Some(v) if !v.waiting_for.is_empty() => format!(
            "{} pods left to evict: {}",
            v.remaining,
            v.waiting_for.join("; ")
        ),
        Some(v) => format!("{} pods left to evict", v.remaining),
        None => "draining".into(),
    };
    d.act(name, RebootAction::Drain);
    let next = RebootState::Draining {
        signal,
        before,
        cordoned,
        since,
    };
    d.keep(name, next, message);
    d.recheck(DRAIN_RECHECK);
}

/// The drain took too long: the node is given back, named with what stayed, and retried later.
fn drain_timed_out(
    name: &str,
    signal: Signal,
    cordoned: bool,
    timeout: Duration,
    view: &NodeView<'_>,
    now: Timestamp,
    d: &mut PolicyDecision,
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

fn rebooting(
    settings: &PolicySettings,
    name: &str,
    state: RebootState,
    view: &NodeView<'_>,
    now: Timestamp,
    d: &mut PolicyDecision,
) {
    let RebootState::Rebooting {
        signal,
        cordoned,
        handoff,
    } = state
    else {
        return;
    };
    let seen = handoff::Observation {
        node: name,
        ready: view.node.ready,
        boot_id: &view.node.boot_id,
        health: view.health,
    };
    let step = handoff::step(&handoff, &seen, &settings.handoff, now);
    if let Some((reason, message)) = step.timed_out.clone() {
        d.event(name, true, reason, message);
    }
    if let Some(after) = step.recheck_after {
        d.recheck(after);
    }
    if step.state == Handoff::Passed {
        d.act(
            name,
            RebootAction::Finish {
                signal,
                uncordon: cordoned,
            },
        );
        d.event(
            name,
            false,
            "Rebooted",
            format!("Node {name} rebooted and is back"),
        );
        d.rebooted.push(RebootRecord {
            name: name.to_string(),
            at: rfc3339(now),
            signal: signal.name().to_string(),
            boot_id: Some(view.node.boot_id.clone()).filter(|b| !b.is_empty()),
        });
        return;
    }
    if let Handoff::AwaitingBoot { before, .. } = &step.state
        && view.node.boot_id == *before
    {
        d.act(
            name,
            RebootAction::Reboot {
                signal,
                before: before.clone(),
            },
        );
    }
    let message = step.state.describe(&seen, &settings.handoff);
    let next = RebootState::Rebooting {
        signal,
        cordoned,
        handoff: step.state,
    };
    d.keep(name, next, message);
}

/// The `Progressing` message: what the policy does, or why it waits.
fn summary(settings: &PolicySettings, d: &PolicyDecision, busy: usize) -> String {
    let failed: Vec<&str> = d
        .nodes
        .iter()
        .filter(|n| n.phase == phase::FAILED)
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
        let why = if settings.paused {
            "paused".to_string()
        } else if settings.window_closed.is_some() {
            "outside the window".to_string()
        } else if let Some(alerts) = &settings.alerts {
            alerts.clone()
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

/// How long a drain may take unless the policy says otherwise.
pub const DEFAULT_DRAIN_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// A policy's spec, read and checked once per reconcile.
#[derive(Debug, Clone)]
pub struct PolicySpec {
    pub selector: Selector,
    pub concurrency: usize,
    pub paused: bool,
    pub window: Option<TimeWindow>,
    pub signals: Signals,
    /// `None`: cordon only.
    pub drain: Option<(Duration, DrainOptions)>,
    pub timeout: Duration,
    pub health_gate: Option<HealthGate>,
    pub blocking_pods: Vec<Selector>,
    pub alerts: Option<AlertFilter>,
    pub image: String,
}

fn duration_field(text: Option<&str>, field: &str, default: Duration) -> Result<Duration, String> {
    let Some(text) = text.filter(|t| !t.is_empty()) else {
        return Ok(default);
    };
    text.parse::<GoDuration>()
        .ok()
        .and_then(GoDuration::to_std)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{field} must be a positive duration such as 15m, not {text:?}"))
}

/// Reads `spec`; `Err` names the first field that is wrong (the CRD's rules catch most of them
/// at `kubectl apply`; this is for what CEL cannot see, and for a CRD older than the controller).
pub fn read_spec(spec: &RebootPolicySpec, default_image: &str) -> Result<PolicySpec, String> {
    let selector = match &spec.node_selector {
        None => Selector::everything(),
        Some(s) => Selector::from_label_selector(Some(s))
            .map_err(|e| format!("spec.nodeSelector is invalid: {e}"))?,
    };
    let concurrency = match spec.concurrency {
        None => 1,
        Some(c) if c >= 1 => usize::try_from(c).unwrap_or(usize::MAX),
        Some(c) => return Err(format!("spec.concurrency must be at least 1, not {c}")),
    };
    let window = spec
        .window
        .as_ref()
        .map(TimeWindow::new)
        .transpose()
        .map_err(|e| format!("spec.window is invalid: {e}"))?;
    let drain = read_drain(spec.drain.clone().unwrap_or_default())?;
    let health_gate = spec
        .health_gate
        .as_ref()
        .map(read_health_gate)
        .transpose()?;
    let (blocking_pods, alerts) = read_blockers(&spec.blocking.clone().unwrap_or_default())?;
    Ok(PolicySpec {
        selector,
        concurrency,
        paused: spec.paused.unwrap_or(false),
        window,
        signals: Signals::of(spec.signals.as_ref()),
        drain,
        timeout: duration_field(spec.timeout.as_deref(), "spec.timeout", DEFAULT_TIMEOUT)?,
        health_gate,
        blocking_pods,
        alerts,
        image: spec
            .image
            .clone()
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| default_image.to_string()),
    })
}

/// `spec.drain`: `None` when disabled (cordon only), else the timeout and kured's options.
fn read_drain(drain: RebootDrain) -> Result<Option<(Duration, DrainOptions)>, String> {
    if drain.enabled == Some(false) {
        return Ok(None);
    }
    let timeout = duration_field(
        drain.timeout.as_deref(),
        "spec.drain.timeout",
        DEFAULT_DRAIN_TIMEOUT,
    )?;
    let options = DrainOptions {
        grace_period_seconds: drain.grace_period_seconds,
        delete_emptydir_data: drain.delete_emptydir_data.unwrap_or(true),
        force: drain.force.unwrap_or(true),
        ..DrainOptions::default()
    };
    Ok(Some((timeout, options)))
}

fn read_health_gate(gate: &HealthGateSpec) -> Result<HealthGate, String> {
    Selector::from_label_selector(Some(&gate.pod_selector))
        .map_err(|e| format!("spec.healthGate.podSelector is invalid: {e}"))?;
    Ok(HealthGate {
        pod_selector: gate.pod_selector.clone(),
        namespace: gate.namespace.clone().filter(|n| !n.is_empty()),
        timeout: duration_field(
            gate.timeout.as_deref(),
            "spec.healthGate.timeout",
            DEFAULT_HEALTH_TIMEOUT,
        )?,
    })
}

/// `spec.blocking`: the pod selectors, and the Prometheus filter.
fn read_blockers(
    blockers: &RebootBlockers,
) -> Result<(Vec<Selector>, Option<AlertFilter>), String> {
    let pods = blockers
        .pod_selectors
        .iter()
        .enumerate()
        .map(|(i, s)| {
            Selector::from_label_selector(Some(s))
                .map_err(|e| format!("spec.blocking.podSelectors[{i}] is invalid: {e}"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let alerts = blockers
        .prometheus
        .as_ref()
        .map(AlertFilter::new)
        .transpose()?;
    Ok((pods, alerts))
}

impl PolicySpec {
    /// The settings one decision reads, at `now`; `alerts` is the Prometheus blocker's answer.
    pub fn settings(&self, now: Timestamp, alerts: Option<String>) -> PolicySettings {
        PolicySettings {
            concurrency: self.concurrency,
            paused: self.paused,
            window_closed: self
                .window
                .as_ref()
                .filter(|w| !w.contains(now))
                .map(|w| w.next_opening(now)),
            drain_timeout: self.drain.as_ref().map(|(t, _)| *t),
            handoff: HandoffPolicy {
                timeout: self.timeout,
                health_gate: self.health_gate.as_ref().map(|g| GatePolicy {
                    timeout: g.timeout,
                    pods: g.describe_pods(),
                }),
            },
            alerts,
        }
    }
}

#[cfg(test)]
mod tests;
