//! Notifications to chat and incident tools, decided once for every operation: which events are
//! worth telling ([`Kind`], from one table of (object kind, event reason)), the configured
//! targets ([`Target`], checked at start), the text of a message ([`Template`]), the body each
//! format posts ([`payload`]), whether a delivery is retried ([`next_step`]) and the bounded queue
//! of a target ([`Queue`]). Pure: the runtime's notifier (`src/runtime/notify.rs`) sends.
//!
//! The source is the Events operations already publish: a Plan, RebootPolicy, NodeMaintenance or
//! NodeOp that tells something on its object tells the targets too, and nothing else does.

mod config;
mod shoutrrr;
mod template;

use std::collections::VecDeque;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::common::decision::{Event, EventType};

pub use config::{ConfigError, Format, Target, TargetFlags, redacted_url, targets};
pub use shoutrrr::{Body, Method, Request, Service, Shoutrrr, ShoutrrrError};
pub use template::{Markup, Template, TemplateError, escape};

/// What a notification tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    NodeStarted,
    NodeDrained,
    NodeRebooting,
    NodeBack,
    NodeFailed,
    RolloutStopped,
    RolloutCompleted,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::NodeStarted,
        Kind::NodeDrained,
        Kind::NodeRebooting,
        Kind::NodeBack,
        Kind::NodeFailed,
        Kind::RolloutStopped,
        Kind::RolloutCompleted,
    ];

    /// Its name in flags and in the JSON payload.
    pub fn name(self) -> &'static str {
        match self {
            Kind::NodeStarted => "node-started",
            Kind::NodeDrained => "node-drained",
            Kind::NodeRebooting => "node-rebooting",
            Kind::NodeBack => "node-back",
            Kind::NodeFailed => "node-failed",
            Kind::RolloutStopped => "rollout-stopped",
            Kind::RolloutCompleted => "rollout-completed",
        }
    }

    pub fn parse(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The message when a target sets no template of its own.
    fn default_template(self) -> &'static str {
        match self {
            Kind::NodeStarted => "Node {node}: started by {objectKind} {object}. {message}",
            Kind::NodeDrained => "Node {node}: drained by {objectKind} {object}. {message}",
            Kind::NodeRebooting => "Node {node}: rebooting for {objectKind} {object}. {message}",
            Kind::NodeBack => "Node {node}: back from {objectKind} {object}. {message}",
            Kind::NodeFailed => "Node {node}: failed in {objectKind} {object}. {message}",
            Kind::RolloutStopped => "{objectKind} {object} stopped: {message}",
            Kind::RolloutCompleted => "{objectKind} {object} completed: {message}",
        }
    }
}

/// The kinds of objects whose events are told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Plan,
    RebootPolicy,
    NodeMaintenance,
    NodeOp,
}

impl ObjectKind {
    /// From the Kubernetes kind; `None` for kinds that are not told (NodeOpUpgrade...).
    pub fn of(kind: &str) -> Option<ObjectKind> {
        match kind {
            "Plan" => Some(ObjectKind::Plan),
            "RebootPolicy" => Some(ObjectKind::RebootPolicy),
            "NodeMaintenance" => Some(ObjectKind::NodeMaintenance),
            "NodeOp" => Some(ObjectKind::NodeOp),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ObjectKind::Plan => "Plan",
            ObjectKind::RebootPolicy => "RebootPolicy",
            ObjectKind::NodeMaintenance => "NodeMaintenance",
            ObjectKind::NodeOp => "NodeOp",
        }
    }
}

use Kind::*;
use ObjectKind::{NodeMaintenance, NodeOp, Plan, RebootPolicy};

/// The reasons of quiet events ([`Event::quiet`]: told to notifications, never published): the
/// steps of the nodes of an operation that publishes no Event per node (a Plan).
pub mod quiet {
    /// A node's work started.
    pub const NODE_STARTED: &str = "NodeStarted";
    /// A node reboots after its work.
    pub const NODE_REBOOTING: &str = "NodeRebooting";
    /// A node is done: its work over, back from its reboot and health gate.
    pub const NODE_DONE: &str = "NodeDone";
}

/// Which event of which kind of object is which notification: the one table. A reason not here
/// is not told. Plans publish SUC's events (tests/compat compares them): their nodes' steps are
/// quiet events, told here and never published ([`quiet`]).
pub const TABLE: &[(ObjectKind, &str, Kind)] = &[
    (Plan, quiet::NODE_STARTED, NodeStarted),
    (Plan, quiet::NODE_REBOOTING, NodeRebooting),
    (Plan, quiet::NODE_DONE, NodeBack),
    (Plan, "JobFailed", NodeFailed),
    (Plan, "Quarantined", NodeFailed),
    (Plan, "RebootTimedOut", NodeFailed),
    (Plan, "HealthGateTimedOut", NodeFailed),
    (Plan, "RolloutStopped", RolloutStopped),
    (Plan, "Complete", RolloutCompleted),
    (RebootPolicy, "Draining", NodeStarted),
    (RebootPolicy, "Drained", NodeDrained),
    (RebootPolicy, "Rebooting", NodeRebooting),
    (RebootPolicy, "Rebooted", NodeBack),
    (RebootPolicy, "DrainTimedOut", NodeFailed),
    (RebootPolicy, "RebootTimedOut", NodeFailed),
    (RebootPolicy, "HealthGateTimedOut", NodeFailed),
    (RebootPolicy, "RolloutStopped", RolloutStopped),
    (NodeMaintenance, "BeginMaintenance", NodeStarted),
    (NodeMaintenance, "SucceedMaintenance", NodeDrained),
    (NodeMaintenance, "UncordonNode", NodeBack),
    (NodeMaintenance, "FailedMaintenance", NodeFailed),
    (NodeOp, "NodeStarted", NodeStarted),
    (NodeOp, "Rebooting", NodeRebooting),
    (NodeOp, "NodeCompleted", NodeBack),
    (NodeOp, "NodeFailed", NodeFailed),
    (NodeOp, "RebootTimedOut", NodeFailed),
    (NodeOp, "Completed", RolloutCompleted),
];

/// The notification kind of `reason` on an object of `kind`.
pub fn kind_of(kind: ObjectKind, reason: &str) -> Option<Kind> {
    TABLE
        .iter()
        .find(|(k, r, _)| *k == kind && *r == reason)
        .map(|(_, _, n)| *n)
}

/// The object an event was published on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    pub kind: ObjectKind,
    pub namespace: Option<String>,
    pub name: String,
}

/// One thing to tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    pub kind: Kind,
    pub object: Object,
    pub node: Option<String>,
    pub reason: &'static str,
    pub message: String,
    pub warning: bool,
    pub time: Timestamp,
}

/// The notification of `event`, published on `object` (its Kubernetes kind, namespace and name)
/// at `time`; `None` when the event is not told.
pub fn notification(
    kind: &str,
    namespace: Option<&str>,
    name: &str,
    event: &Event,
    time: Timestamp,
) -> Option<Notification> {
    let object_kind = ObjectKind::of(kind)?;
    let kind = kind_of(object_kind, event.reason)?;
    Some(Notification {
        kind,
        object: Object {
            kind: object_kind,
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        },
        node: event.node.clone(),
        reason: event.reason,
        message: event.message.clone(),
        warning: event.type_ == EventType::Warning,
        time,
    })
}

/// The object as people name it: `namespace/name`, or `name` for cluster-scoped kinds.
pub fn object_name(o: &Object) -> String {
    match &o.namespace {
        Some(ns) => format!("{ns}/{}", o.name),
        None => o.name.clone(),
    }
}

/// The text `target` says for `n`: its template for the kind, else the default one.
pub fn text(target: &Target, n: &Notification) -> String {
    let markup = match (&target.service, target.format) {
        (Some(s), _) => s.service.markup(),
        (None, Format::Slack) => Markup::Slack,
        (None, Format::Teams) => Markup::Teams,
        (None, Format::Json) => Markup::Plain,
    };
    match target.templates.get(&n.kind) {
        Some(t) => t.render_for(n, markup),
        None => match Template::parse(n.kind.default_template()) {
            Ok(t) => t.render_for(n, markup),
            // The defaults are checked by a test; a message is still better than none.
            Err(_) => escape(markup, &n.message),
        },
    }
}

/// The JSON body `target` is posted for `n`.
pub fn payload(target: &Target, n: &Notification) -> Value {
    let text = text(target, n);
    match target.format {
        Format::Slack => json!({ "text": text }),
        // What Teams' Workflows ("Send webhook alerts to a channel") accept: a message with one
        // Adaptive Card attachment.
        Format::Teams => json!({
            "type": "message",
            "attachments": [{
                "contentType": "application/vnd.microsoft.card.adaptive",
                "contentUrl": null,
                "content": {
                    "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                    "type": "AdaptiveCard",
                    "version": "1.4",
                    "body": [{
                        "type": "TextBlock",
                        "text": text,
                        "wrap": true,
                        "color": if n.warning { "Attention" } else { "Default" },
                    }],
                },
            }],
        }),
        Format::Json => json!({
            "kind": n.kind.name(),
            "object": {
                "kind": n.object.kind.name(),
                "namespace": n.object.namespace,
                "name": n.object.name,
            },
            "node": n.node,
            "reason": n.reason,
            "message": n.message,
            "warning": n.warning,
            "time": n.time.to_string(),
            "text": text,
        }),
    }
}

/// One HTTP request of a notification, as it goes on the wire.
#[derive(Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub method: Method,
    pub url: String,
    /// Sent as HTTP basic authentication.
    pub basic_auth: Option<(String, String)>,
    /// `Content-Type` first, then the service's headers, then the target's own
    /// (`--notify-header`).
    pub headers: Vec<(String, String)>,
    pub body: String,
}

// The URL, the credentials and the header values may be secrets.
impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outgoing")
            .field("method", &self.method)
            .field("url", &redacted_url(&self.url))
            .field("basic_auth", &self.basic_auth.is_some())
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// The requests that tell `n` to `target`, in order: one for an http(s) webhook (its format's
/// [`payload`]), one per request of a shoutrrr URL (the service's body around [`text`]). Each is
/// delivered (or refused) before the next is sent.
pub fn outgoing(target: &Target, n: &Notification) -> Vec<Outgoing> {
    let own = target.headers.iter().cloned();
    match &target.service {
        None => vec![Outgoing {
            method: Method::Post,
            url: target.url.clone(),
            basic_auth: None,
            headers: std::iter::once(("Content-Type".into(), "application/json".into()))
                .chain(own)
                .collect(),
            body: payload(target, n).to_string(),
        }],
        Some(service) => {
            let text = text(target, n);
            service
                .requests
                .iter()
                .map(|r| Outgoing {
                    method: r.method,
                    url: r.url.clone(),
                    basic_auth: r.basic_auth.clone(),
                    headers: std::iter::once(("Content-Type".into(), r.content_type.clone()))
                        .chain(r.headers.iter().cloned())
                        .chain(own.clone())
                        .collect(),
                    body: r.body.render(&text),
                })
                .collect()
        }
    }
}

/// What a delivery attempt got back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// An HTTP status.
    Status(u16),
    /// No answer: the connection was refused or reset, or the request timed out.
    Unreachable,
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Delivered,
    /// Try the same notification again after this long: nothing after it goes first.
    Retry(Duration),
    /// The target refuses it for good (a 4xx other than 408 and 429): logged and counted.
    GiveUp,
}

/// The first wait before a retry, doubled on each failed attempt up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// After `answer` to attempt number `attempt` (1 for the first).
pub fn next_step(answer: Answer, attempt: u32) -> Next {
    match answer {
        Answer::Status(s) if (200..300).contains(&s) => Next::Delivered,
        Answer::Status(408 | 429) | Answer::Unreachable => Next::Retry(backoff(attempt)),
        Answer::Status(s) if s >= 500 => Next::Retry(backoff(attempt)),
        // 1xx and 3xx (redirects are not followed) are no delivery either, and will not become one.
        Answer::Status(_) => Next::GiveUp,
    }
}

/// The wait after the `attempt`th failed attempt: 1 s, 2 s, 4 s ... at most [`MAX_BACKOFF`].
pub fn backoff(attempt: u32) -> Duration {
    let doubled = 1u32
        .checked_shl(attempt.saturating_sub(1))
        .unwrap_or(u32::MAX);
    FIRST_BACKOFF.saturating_mul(doubled).min(MAX_BACKOFF)
}

/// How a target's front notification is being sent: which of its requests goes next, that
/// request's attempts, and whether one of them was refused for good. A notification of several
/// requests (a shoutrrr URL with several Telegram chats) sends each once: a request delivered or
/// refused is not sent again for a later one's sake.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sending {
    id: Option<u64>,
    part: usize,
    attempt: u32,
    refused: bool,
}

/// What a target does with its front notification now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Send its request `part`, attempt number `attempt` (1 for the first).
    Send { part: usize, attempt: u32 },
    /// Every request was answered for good: it leaves the queue, refused if any request was.
    Done { refused: bool },
}

impl Sending {
    /// The turn of the front notification `id`, of `requests` requests. Another `id` than the
    /// last starts over: the last one was done, or dropped from a full queue while it was sent.
    pub fn turn(&mut self, id: u64, requests: usize) -> Turn {
        if self.id != Some(id) {
            *self = Sending {
                id: Some(id),
                ..Sending::default()
            };
        }
        if self.part >= requests {
            self.id = None;
            return Turn::Done {
                refused: self.refused,
            };
        }
        self.attempt = self.attempt.saturating_add(1);
        Turn::Send {
            part: self.part,
            attempt: self.attempt,
        }
    }

    /// What the request of the last [`Turn::Send`] came to.
    pub fn answered(&mut self, next: Next) {
        match next {
            Next::Retry(_) => {}
            Next::Delivered | Next::GiveUp => {
                self.refused |= next == Next::GiveUp;
                self.part += 1;
                self.attempt = 0;
            }
        }
    }
}

/// Whether a target whose oldest undelivered notification has waited `waited` is failing: said
/// in the log, a gauge and an Event once it is.
pub fn failing(waited: Option<Duration>, after: Duration) -> bool {
    waited.is_some_and(|w| w >= after)
}

/// A target's queue: first in, first out, at most `capacity`; when full, the oldest goes (and is
/// counted) so that a target down for long keeps the newest news, and publishing never waits.
#[derive(Debug, Clone)]
pub struct Queue<T> {
    items: VecDeque<(u64, T)>,
    capacity: usize,
    next_id: u64,
}

impl<T> Queue<T> {
    pub fn new(capacity: usize) -> Queue<T> {
        Queue {
            items: VecDeque::new(),
            capacity: capacity.max(1),
            next_id: 0,
        }
    }

    /// Adds `item` last; the oldest item when the queue was full.
    pub fn push(&mut self, item: T) -> Option<T> {
        let dropped = if self.items.len() >= self.capacity {
            self.items.pop_front().map(|(_, t)| t)
        } else {
            None
        };
        self.items.push_back((self.next_id, item));
        self.next_id += 1;
        dropped
    }

    /// The oldest item and its id.
    pub fn front(&self) -> Option<(u64, &T)> {
        self.items.front().map(|(id, t)| (*id, t))
    }

    /// Removes item `id` if it is still the oldest (it may have been dropped while it was sent).
    pub fn done(&mut self, id: u64) -> Option<T> {
        match self.items.front() {
            Some((front, _)) if *front == id => self.items.pop_front().map(|(_, t)| t),
            _ => None,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[cfg(test)]
mod tests;
