//! The one shape of every operation's decision: `decide(&Input, now) -> Decision`.
//!
//! A core reads plain data (the object, what the shell observed, who holds which node, what the
//! effects of the previous decision answered) and returns a [`Decision`]: the status to write, the
//! effects to apply in order, the events to publish, the nodes the object holds from now on, and
//! when to look again. The runtime applies every kind's decision the same way: the effects that
//! only give something back ([`Effect::before_status`]) first, then the status (guarded by the
//! object's resourceVersion), then the events, then the effects that take something. So a
//! controller killed at any point finds in the status every node it started, and never a node the
//! status still claims but that was already given back.

use std::collections::BTreeSet;
use std::time::Duration;

/// Whether an event reports something normal or something that needs attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// An event on the decided object. Events with the same reason and different messages are kept
/// apart (the runtime folds only identical messages), so every node can be named in its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub type_: EventType,
    pub reason: &'static str,
    pub message: String,
    /// The node the event is about, when it is about one: what a notification names
    /// (`src/node/notify.rs`). Not part of the Kubernetes Event, whose message names it already.
    pub node: Option<String>,
    /// Told to notifications only, never published as a Kubernetes Event: steps of a Plan's
    /// nodes, which SUC's users read in the Plan's status, not as one Event per node.
    pub quiet: bool,
}

impl Event {
    pub fn normal(reason: &'static str, message: impl Into<String>) -> Event {
        Event {
            type_: EventType::Normal,
            reason,
            message: message.into(),
            node: None,
            quiet: false,
        }
    }

    pub fn warning(reason: &'static str, message: impl Into<String>) -> Event {
        Event {
            type_: EventType::Warning,
            reason,
            message: message.into(),
            node: None,
            quiet: false,
        }
    }

    /// The same event, about `node`.
    pub fn on(self, node: impl Into<String>) -> Event {
        Event {
            node: Some(node.into()),
            ..self
        }
    }

    /// The same event, for notifications only ([`Event::quiet`]).
    pub fn quiet(self) -> Event {
        Event {
            quiet: true,
            ..self
        }
    }
}

/// Nodes a decision does not start, grouped by why: what a status says first, and what
/// `slipway explain` shows. The nodes are in the order they would start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// A short word: `Concurrency`, `DisruptionBudget`, `Halted`, `OutsideWindow`...
    pub reason: &'static str,
    /// What holds them, for people.
    pub message: String,
    pub nodes: Vec<String>,
    /// When the wait ends by the clock alone (a window opens, a soak or a schedule ends).
    pub until: Option<jiff::Timestamp>,
}

/// Adds `node` to the group of `reason` and `message` (made on first use).
pub fn wait(
    groups: &mut Vec<Waiting>,
    node: &str,
    reason: &'static str,
    message: impl FnOnce() -> String,
    until: Option<jiff::Timestamp>,
) {
    let message = message();
    match groups
        .iter_mut()
        .find(|g| g.reason == reason && g.message == message)
    {
        Some(group) => group.nodes.push(node.to_string()),
        None => groups.push(Waiting {
            reason,
            message,
            nodes: vec![node.to_string()],
            until,
        }),
    }
}

/// An effect of a decision, as the runtime orders it.
pub trait Effect {
    /// Applied before the status is written: the effect only gives back (a label on a finished
    /// node, an uncordon, a withdrawn grant). Everything that takes something is applied after
    /// the status names it.
    fn before_status(&self) -> bool;
}

/// What one reconcile of one object decided.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision<S, E, R = ()> {
    /// The object's status after this decision; written when it differs from the one read.
    pub status: S,
    /// What to do, in order (see [`Effect::before_status`]).
    pub effects: Vec<E>,
    pub events: Vec<Event>,
    /// The nodes (by name) the object holds after this decision: its share of the one budget.
    pub holds: BTreeSet<String>,
    /// Look again after this long at the latest; `None`: only when something changes.
    pub requeue: Option<Duration>,
    /// The nodes it does not start, and why (a Plan fills it only when asked to explain).
    pub waiting: Vec<Waiting>,
    /// The nodes it takes next (its next batch), to be tainted `PreferNoSchedule` meanwhile;
    /// filled only when the object asks for it (`spec.disruption.preferNoSchedule`).
    pub next: BTreeSet<String>,
    /// What the kind reports besides its status (gauges, log fields).
    pub report: R,
}

impl<S, E, R: Default> Decision<S, E, R> {
    /// A decision that keeps `status` and does nothing.
    pub fn keep(status: S) -> Self {
        Decision {
            status,
            effects: Vec::new(),
            events: Vec::new(),
            holds: BTreeSet::new(),
            requeue: None,
            waiting: Vec::new(),
            next: BTreeSet::new(),
            report: R::default(),
        }
    }
}

impl<S, E, R> Decision<S, E, R> {
    /// The same decision, reporting `report`.
    pub fn with_report<T>(self, report: T) -> Decision<S, E, T> {
        Decision {
            status: self.status,
            effects: self.effects,
            events: self.events,
            holds: self.holds,
            requeue: self.requeue,
            waiting: self.waiting,
            next: self.next,
            report,
        }
    }

    /// Look again after `after` at the latest (the earliest of every request wins).
    pub fn requeue_within(&mut self, after: Duration) {
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }

    pub fn event(&mut self, event: Event) {
        self.events.push(event);
    }
}
