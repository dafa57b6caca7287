//! Sends notifications (`src/node/notify`) to their targets, never holding up a decision:
//! [`Notifier::tell`] only puts a notification in each interested target's queue; one task per
//! target sends its queue in order, each notification until the target takes it (or refuses it
//! for good), with backoff between attempts. A full queue drops its oldest notification.
//!
//! The events a notification comes from are published by the leader only (`Chores::publish`), so
//! only the leader tells. The queues live in memory: what waits when the process stops is lost.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::http::error_chain;
use super::metrics::{Delivery, Metrics};
use crate::common::decision::Event;
use crate::node::notify::{
    Answer, Method, Next, Notification, Outgoing, Queue, Sending, Target, Turn, failing, next_step,
    object_name, outgoing, redacted_url,
};

/// The reason of the Warning Event on an object whose notification a target has not taken for
/// longer than [`NotifySettings::failing_after`].
pub const NOTIFICATION_FAILING: &str = "NotificationFailing";

/// Where the notifier says that a target does not answer: the leader's Events, as every other
/// Event ([`super::chores::Chores`], which also feeds the notifier: the notifier takes this, not
/// the chores, so that neither file imports the other).
pub trait Warnings: Send + Sync {
    /// Publishes `event` on the object `reference` names.
    fn publish_on(
        &self,
        reference: &ObjectReference,
        event: &Event,
    ) -> impl std::future::Future<Output = ()> + Send;
}

/// How notifications are sent.
#[derive(Debug, Clone)]
pub struct NotifySettings {
    pub targets: Vec<Target>,
    /// Notifications each target's queue holds at most.
    pub queue: usize,
    /// A target whose oldest notification waited this long is failing.
    pub failing_after: Duration,
    /// One attempt's time limit.
    pub timeout: Duration,
}

impl Default for NotifySettings {
    fn default() -> Self {
        NotifySettings {
            targets: Vec::new(),
            queue: 1000,
            failing_after: Duration::from_secs(300),
            timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Clone)]
struct Pending {
    notification: Notification,
    object: ObjectReference,
    since: Instant,
}

struct Lane {
    target: Target,
    queue: Mutex<Queue<Pending>>,
    wake: Notify,
}

/// The targets' queues, shared by every operation's chores.
#[derive(Clone)]
pub struct Notifier {
    lanes: Arc<Vec<Lane>>,
    metrics: Arc<Metrics>,
    failing_after: Duration,
    http: reqwest::Client,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client for notifications: {0}")]
pub struct ClientError(String);

impl Notifier {
    /// A rustls crypto provider must be installed first (the binary installs ring).
    pub fn new(settings: NotifySettings, metrics: Arc<Metrics>) -> Result<Notifier, ClientError> {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            return Err(ClientError("no rustls crypto provider is installed".into()));
        }
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(settings.timeout)
            .user_agent(concat!("slipway/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError(e.to_string()))?;
        let lanes = settings
            .targets
            .into_iter()
            .map(|target| {
                metrics.notifications().target(&target.name);
                Lane {
                    target,
                    queue: Mutex::new(Queue::new(settings.queue)),
                    wake: Notify::new(),
                }
            })
            .collect();
        Ok(Notifier {
            lanes: Arc::new(lanes),
            metrics,
            failing_after: settings.failing_after,
            http,
        })
    }

    /// Queues `event` of the object `object` (kind, namespace, name) for every target that wants
    /// it. Never waits.
    pub fn tell(&self, object: &ObjectReference, event: &Event) {
        let Some(n) = crate::node::notify::notification(
            object.kind.as_deref().unwrap_or_default(),
            object.namespace.as_deref(),
            object.name.as_deref().unwrap_or_default(),
            event,
            crate::runtime::clock::now(),
        ) else {
            return;
        };
        for lane in self.lanes.iter().filter(|l| l.target.wants(n.kind)) {
            let pending = Pending {
                notification: n.clone(),
                object: object.clone(),
                since: Instant::now(),
            };
            let (dropped, length) = {
                let mut queue = lane.queue.lock().unwrap_or_else(PoisonError::into_inner);
                (queue.push(pending), queue.len())
            };
            if let Some(d) = dropped {
                self.metrics
                    .notifications()
                    .count(&lane.target.name, Delivery::Dropped);
                warn!(
                    target_name = %lane.target.name,
                    kind = d.notification.kind.name(),
                    object = %object_name(&d.notification.object),
                    "notification queue full: dropped the oldest notification"
                );
            }
            self.metrics
                .notifications()
                .queue(&lane.target.name, length);
            lane.wake.notify_one();
        }
    }

    /// Sends every target's queue until `shutdown`; `chores` publish the Warning Event of a
    /// failing target.
    pub async fn run(self, chores: impl Warnings, shutdown: CancellationToken) {
        let lanes = (0..self.lanes.len()).map(|i| self.send_lane(i, &chores, &shutdown));
        futures::future::join_all(lanes).await;
    }

    async fn send_lane(&self, i: usize, chores: &impl Warnings, shutdown: &CancellationToken) {
        let lane = &self.lanes[i];
        let name = &lane.target.name;
        let mut sending = Sending::default();
        let mut failing_since: Option<Instant> = None;
        loop {
            let front = {
                let queue = lane.queue.lock().unwrap_or_else(PoisonError::into_inner);
                queue.front().map(|(id, p)| (id, p.clone()))
            };
            let Some((id, pending)) = front else {
                tokio::select! {
                    _ = lane.wake.notified() => continue,
                    _ = shutdown.cancelled() => return,
                }
            };
            let requests = outgoing(&lane.target, &pending.notification);
            let (part, attempt) = match sending.turn(id, requests.len()) {
                Turn::Send { part, attempt } => (part, attempt),
                Turn::Done { refused } => {
                    let length = {
                        let mut queue = lane.queue.lock().unwrap_or_else(PoisonError::into_inner);
                        queue.done(id);
                        queue.len()
                    };
                    self.metrics.notifications().queue(name, length);
                    let counted = match refused {
                        true => Delivery::Failed,
                        false => Delivery::Delivered,
                    };
                    self.metrics.notifications().count(name, counted);
                    continue;
                }
            };
            let Some(request) = requests.get(part) else {
                continue;
            };
            let (answer, detail) = self.send(request).await;
            let next = next_step(answer, attempt);
            sending.answered(next);
            match next {
                Next::Delivered => {
                    if failing_since.take().is_some() {
                        self.metrics.notifications().failing(name, false);
                        info!(target_name = %name, "notification target delivers again");
                    }
                }
                Next::GiveUp => {
                    let request = match requests.len() {
                        1 => String::new(),
                        count => format!(" (request {} of {count})", part + 1),
                    };
                    warn!(
                        target_name = %name,
                        url = %redacted_url(&lane.target.url),
                        kind = pending.notification.kind.name(),
                        object = %object_name(&pending.notification.object),
                        "notification refused{request}, not sent again: {detail}"
                    );
                }
                Next::Retry(wait) => {
                    self.metrics.notifications().count(name, Delivery::Retried);
                    let waited = Instant::now().saturating_duration_since(pending.since);
                    if failing_since.is_none() && failing(Some(waited), self.failing_after) {
                        failing_since = Some(Instant::now());
                        self.report_failing(lane, &pending, waited, &detail, chores)
                            .await;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {}
                        _ = shutdown.cancelled() => return,
                    }
                }
            }
        }
    }

    /// One attempt of one request: what the target answered, and in words.
    async fn send(&self, request: &Outgoing) -> (Answer, String) {
        let method = match request.method {
            Method::Post => reqwest::Method::POST,
            Method::Put => reqwest::Method::PUT,
            Method::Patch => reqwest::Method::PATCH,
        };
        let mut builder = self
            .http
            .request(method, &request.url)
            .body(request.body.clone());
        for (header, value) in &request.headers {
            builder = builder.header(header, value);
        }
        if let Some((user, password)) = &request.basic_auth {
            builder = builder.basic_auth(user, Some(password));
        }
        match builder.send().await {
            Ok(response) => {
                let status = response.status();
                (Answer::Status(status.as_u16()), format!("HTTP {status}"))
            }
            // Without the URL: webhook services put their token in it.
            Err(e) => (Answer::Unreachable, error_chain(&e.without_url())),
        }
    }

    /// Said once per failing spell: in the log, the gauge, and a Warning Event on the object
    /// whose notification waits (where `kubectl describe` and event alerts look).
    async fn report_failing(
        &self,
        lane: &Lane,
        pending: &Pending,
        waited: Duration,
        detail: &str,
        chores: &impl Warnings,
    ) {
        let name = &lane.target.name;
        self.metrics.notifications().failing(name, true);
        let length = lane
            .queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len();
        let message = format!(
            "Notification target {name} ({}) has not taken a notification for {}s ({detail}); \
             {length} waiting, sent in order once it answers",
            redacted_url(&lane.target.url),
            waited.as_secs()
        );
        warn!(target_name = %name, "{message}");
        chores
            .publish_on(
                &pending.object,
                &Event::warning(NOTIFICATION_FAILING, message),
            )
            .await;
    }
}

#[cfg(test)]
mod tests;
