//! The Alertmanager silences held while nodes are disrupted, for every operation at once: a chore
//! that, on the leader, reads who holds which node ([`Shared::holders_by_node`]) and what each
//! holder's `spec.disruption.silence` asks, lists slipway's silences in Alertmanager's v2 API,
//! and writes what [`crate::node::silence::reconcile`] decides. Alertmanager being down is
//! retried with backoff, logged and counted; it never holds a decision (nothing waits for it).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;
use reqwest::{StatusCode, Url};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::http::{Past, error_chain, read_bounded};
use super::metrics::Metrics;
use super::shared::{HolderObject, Shared};
use crate::common::decision::Event;
use crate::node::holders::Holder;
use crate::node::silence::{self, Action, HeldSince, Postable, Seen, Silence, Wanted};

/// How often the silences are reconciled besides when a node is taken or given back (a silence
/// ends [`silence::AHEAD`] ahead, and is extended when less than [`silence::RENEW_BELOW`] is left).
pub const PERIOD: Duration = Duration::from_secs(30);
/// The longest wait between attempts while Alertmanager fails.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How long a round waits after a node was taken or given back, for the rest of a burst.
const COALESCE: Duration = Duration::from_millis(500);
/// How soon a round is tried again when the process may not write or its caches are not listed.
const NOT_READY: Duration = Duration::from_secs(2);
/// How long one request to Alertmanager may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where Alertmanager is: `--alertmanager-url`, and `--alertmanager-secret`, a Secret of the
/// controller's namespace with a `token` (bearer), or a `username` and `password` (basic auth),
/// and optionally a `ca.crt` bundle to trust.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertmanagerSettings {
    pub url: String,
    pub secret: Option<String>,
}

impl AlertmanagerSettings {
    /// `--alertmanager-url` and `--alertmanager-secret` (empty: unset); `Err` stops the start.
    pub fn from_flags(
        url: &str,
        secret: &str,
    ) -> Result<Option<AlertmanagerSettings>, AlertmanagerError> {
        let (url, secret) = (url.trim(), secret.trim());
        if url.is_empty() {
            return match secret.is_empty() {
                true => Ok(None),
                false => Err(AlertmanagerError::Url(
                    "--alertmanager-secret is set without --alertmanager-url".into(),
                )),
            };
        }
        match Url::parse(url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => {}
            _ => return Err(AlertmanagerError::Url(url.into())),
        }
        Ok(Some(AlertmanagerSettings {
            url: url.to_string(),
            secret: (!secret.is_empty()).then(|| secret.to_string()),
        }))
    }
}

/// Why a request to Alertmanager failed.
#[derive(Debug, thiserror::Error)]
pub enum AlertmanagerError {
    #[error("the Alertmanager URL is invalid (want http:// or https://): {0}")]
    Url(String),
    #[error("cannot read the Alertmanager secret: {0}")]
    Secret(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
    #[error("{request}: {message}")]
    Request {
        request: &'static str,
        message: String,
    },
    #[error("{request}: Alertmanager answered {status}: {body}")]
    Status {
        request: &'static str,
        status: StatusCode,
        body: String,
    },
}

/// How to authenticate to Alertmanager (its `Debug` shows no secret).
#[derive(Clone, PartialEq, Eq, Default)]
pub enum Credentials {
    #[default]
    None,
    Bearer(String),
    Basic {
        username: String,
        password: String,
    },
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::None => f.write_str("None"),
            Credentials::Bearer(_) => f.write_str("Bearer(..)"),
            Credentials::Basic { username, .. } => write!(f, "Basic({username}, ..)"),
        }
    }
}

impl Credentials {
    /// What the Secret's data says; `Err` names what is missing or wrong.
    pub fn from_secret(
        data: &BTreeMap<String, Vec<u8>>,
    ) -> Result<(Credentials, Option<Vec<u8>>), AlertmanagerError> {
        let text = |key: &str| -> Result<Option<String>, AlertmanagerError> {
            data.get(key)
                .map(|v| {
                    String::from_utf8(v.clone())
                        .map(|s| s.trim().to_string())
                        .map_err(|_| AlertmanagerError::Secret(format!("{key} is not UTF-8")))
                })
                .transpose()
        };
        let creds = match (text("token")?, text("username")?, text("password")?) {
            (Some(token), None, None) => Credentials::Bearer(token),
            (None, Some(username), Some(password)) => Credentials::Basic { username, password },
            (None, None, None) => Credentials::None,
            (Some(_), _, _) => {
                return Err(AlertmanagerError::Secret(
                    "it has a token and a username or password: give one way".into(),
                ));
            }
            (None, _, _) => {
                return Err(AlertmanagerError::Secret(
                    "basic auth needs both username and password".into(),
                ));
            }
        };
        Ok((creds, data.get("ca.crt").cloned()))
    }
}

/// A client of Alertmanager's v2 silences API.
#[derive(Clone)]
pub struct Alertmanager {
    http: reqwest::Client,
    base: Url,
    credentials: Credentials,
}

/// The answer to a POST of a silence.
#[derive(Deserialize)]
struct PostAnswer {
    #[serde(rename = "silenceID")]
    silence_id: String,
}

impl Alertmanager {
    /// A client of the Alertmanager at `url` (its root, e.g. `http://alertmanager:9093`, or
    /// under a route prefix). A rustls crypto provider must be installed.
    pub fn new(
        url: &str,
        credentials: Credentials,
        ca: Option<&[u8]>,
    ) -> Result<Alertmanager, AlertmanagerError> {
        let mut base = Url::parse(url).map_err(|_| AlertmanagerError::Url(url.into()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(AlertmanagerError::Url(url.into()));
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            return Err(AlertmanagerError::Client(
                "no rustls crypto provider is installed".into(),
            ));
        }
        let mut builder = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(pem) = ca {
            let certs = reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| AlertmanagerError::Secret(format!("ca.crt: {e}")))?;
            if certs.is_empty() {
                return Err(AlertmanagerError::Secret(
                    "ca.crt holds no PEM certificate".into(),
                ));
            }
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder
            .build()
            .map_err(|e| AlertmanagerError::Client(e.to_string()))?;
        Ok(Alertmanager {
            http,
            base,
            credentials,
        })
    }

    fn url(&self, path: &str) -> Result<Url, AlertmanagerError> {
        self.base
            .join(path)
            .map_err(|_| AlertmanagerError::Url(format!("{}{path}", self.base)))
    }

    fn authed(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.credentials {
            Credentials::None => req,
            Credentials::Bearer(token) => req.bearer_auth(token),
            Credentials::Basic { username, password } => req.basic_auth(username, Some(password)),
        }
    }

    async fn send(
        &self,
        request: &'static str,
        req: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, AlertmanagerError> {
        let failed = |e: reqwest::Error| AlertmanagerError::Request {
            request,
            message: error_chain(&e),
        };
        self.authed(req).send().await.map_err(failed)
    }

    async fn refused(request: &'static str, response: reqwest::Response) -> AlertmanagerError {
        let status = response.status();
        // Only its beginning is said: no more is read.
        let body = read_bounded(response, REFUSAL_BYTES, Past::Truncate)
            .await
            .unwrap_or_default();
        AlertmanagerError::Status {
            request,
            status,
            body: String::from_utf8_lossy(&body).chars().take(512).collect(),
        }
    }

    /// Every silence Alertmanager has (`GET /api/v2/silences`).
    pub async fn list(&self) -> Result<Vec<Silence>, AlertmanagerError> {
        let url = self.url("api/v2/silences")?;
        let response = self.send("list", self.http.get(url)).await?;
        if !response.status().is_success() {
            return Err(Self::refused("list", response).await);
        }
        read_json("list", response).await
    }

    /// Creates `silence`, or updates it when it has an id (`POST /api/v2/silences`): the id of
    /// the silence as it now is (Alertmanager replaces a silence it cannot update in place).
    pub async fn post(
        &self,
        request: &'static str,
        silence: &Postable,
    ) -> Result<String, AlertmanagerError> {
        let url = self.url("api/v2/silences")?;
        let body = serde_json::to_vec(silence).map_err(|e| AlertmanagerError::Request {
            request,
            message: format!("cannot encode the silence: {e}"),
        })?;
        let post = (self.http.post(url))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        let response = self.send(request, post).await?;
        if !response.status().is_success() {
            return Err(Self::refused(request, response).await);
        }
        let answer: PostAnswer = read_json(request, response).await?;
        Ok(answer.silence_id)
    }

    /// Expires silence `id` (`DELETE /api/v2/silence/{id}`); one already gone is done.
    pub async fn expire(&self, id: &str) -> Result<(), AlertmanagerError> {
        let url = self.url(&format!("api/v2/silence/{id}"))?;
        let response = self.send("expire", self.http.delete(url)).await?;
        match response.status() {
            s if s.is_success() || s == StatusCode::NOT_FOUND => Ok(()),
            _ => Err(Self::refused("expire", response).await),
        }
    }
}

async fn read_json<T: serde::de::DeserializeOwned>(
    request: &'static str,
    response: reqwest::Response,
) -> Result<T, AlertmanagerError> {
    let unreadable = |message: String| AlertmanagerError::Request {
        request,
        message: format!("unreadable answer: {message}"),
    };
    let bytes = read_bounded(response, MAX_ANSWER_BYTES, Past::Fail)
        .await
        .map_err(unreadable)?;
    serde_json::from_slice(&bytes).map_err(|e| unreadable(e.to_string()))
}

/// The most bytes of an answer read (a list of every silence of a large Alertmanager is a few MiB).
const MAX_ANSWER_BYTES: usize = 16 << 20;
/// The most bytes of a refusal read, to quote its beginning.
const REFUSAL_BYTES: usize = 4 << 10;

/// What one round did, for the log and the tests.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Round {
    pub created: usize,
    pub extended: usize,
    pub expired: usize,
    /// The writes that failed (the next round tries again).
    pub failed: usize,
}

/// One round against Alertmanager: list, decide, write. `Err` when the list failed (nothing was
/// written); a failed write is counted, logged, and left to the next round. Events about each
/// silence made or expired go to `publish`.
pub async fn round(
    am: &Alertmanager,
    wanted: &[Wanted],
    created_by: &str,
    held_since: &HeldSince,
    metrics: &Metrics,
    now: Timestamp,
    mut publish: impl FnMut(&Holder, Event),
) -> Result<Round, AlertmanagerError> {
    let current = am.list().await;
    metrics.alertmanager_request("list", current.is_ok());
    let current = current?;
    let mut done = Round::default();
    for action in silence::reconcile(wanted, &current, created_by, held_since, now) {
        let key = action.key().clone();
        let (request, result) = match &action {
            Action::Create { silence, .. } => ("create", am.post("create", silence).await),
            Action::Extend { silence, .. } => ("extend", am.post("extend", silence).await),
            Action::Expire { id, .. } => ("expire", am.expire(id).await.map(|()| id.clone())),
        };
        metrics.alertmanager_request(request, result.is_ok());
        let id = match result {
            Ok(id) => id,
            Err(e) => {
                done.failed += 1;
                warn!(holder = %key.holder, node = %key.node, "cannot {request} a silence: {e}");
                continue;
            }
        };
        match &action {
            Action::Create { .. } => done.created += 1,
            Action::Extend { .. } => done.extended += 1,
            Action::Expire { .. } => done.expired += 1,
        }
        debug!(holder = %key.holder, node = %key.node, id, "silence: {request}");
        if let Some(event) = silence::event_of(&action, &id, wanted) {
            info!(holder = %key.holder, node = %key.node, id, "{}", event.message);
            publish(&key.holder, event);
        }
    }
    let listed = match done == Round::default() {
        true => current,
        // The gauge shows what the writes changed.
        false => {
            let again = am.list().await;
            metrics.alertmanager_request("list", again.is_ok());
            again.unwrap_or(current)
        }
    };
    for (state, count) in silence::tally(&listed, created_by) {
        metrics.silences(state.as_str(), count);
    }
    Ok(done)
}

/// The silences wanted now: every node a holder holds whose object asks for one, and the
/// objects that ask (with or without a valid spec).
fn wanted(shared: &Shared) -> (Vec<Wanted>, BTreeSet<Holder>) {
    let mut wanted = Vec::new();
    let mut asking = BTreeSet::new();
    // Each holder's object read once a round, not once per node it holds.
    let mut objects: BTreeMap<Holder, Option<HolderObject>> = BTreeMap::new();
    for (node, holders) in shared.holders_by_node() {
        for holder in holders {
            let object =
                (objects.entry(holder.clone())).or_insert_with(|| shared.holder_object(&holder));
            let Some(spec) = (object.as_ref())
                .and_then(|o| o.disruption.as_ref())
                .and_then(|d| d.silence.as_ref())
            else {
                continue;
            };
            asking.insert(holder.clone());
            wanted.extend(Wanted::of(&holder, &node, spec));
        }
    }
    (wanted, asking)
}

/// The Alertmanager client for this round: built again when the Secret changed.
struct ClientCache {
    settings: AlertmanagerSettings,
    namespace: String,
    built: Option<(Option<String>, Alertmanager)>,
}

impl ClientCache {
    async fn get(&mut self, shared: &Shared) -> Result<Alertmanager, AlertmanagerError> {
        let (version, creds, ca) = match &self.settings.secret {
            None => (None, Credentials::None, None),
            Some(name) => {
                // Listed by name: the controller's role may list the Secrets of its namespace
                // (Plans name them), not get them.
                let api: Api<Secret> = shared.chores().api(Some(&self.namespace));
                let by_name = ListParams::default().fields(&format!("metadata.name={name}"));
                let listed = api
                    .list(&by_name)
                    .await
                    .map_err(|e| AlertmanagerError::Secret(e.to_string()))?;
                let secret = (listed.items.into_iter().next()).ok_or_else(|| {
                    AlertmanagerError::Secret(format!("secret {}/{name} not found", self.namespace))
                })?;
                let data: BTreeMap<String, Vec<u8>> = (secret.data.unwrap_or_default())
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                let (creds, ca) = Credentials::from_secret(&data)?;
                (secret.metadata.resource_version, creds, ca)
            }
        };
        if let Some((v, am)) = &self.built
            && *v == version
        {
            return Ok(am.clone());
        }
        let am = Alertmanager::new(&self.settings.url, creds, ca.as_deref())?;
        self.built = Some((version, am.clone()));
        Ok(am)
    }
}

/// Keeps the silences until `shutdown`. `created_by` names this controller in Alertmanager (the
/// silences it reconciles are those it created). Without `settings`, each object that asks for a
/// silence is told once, in an event, that none is made.
pub async fn keep(
    shared: Arc<Shared>,
    settings: Option<AlertmanagerSettings>,
    created_by: String,
    shutdown: CancellationToken,
) {
    let mut cache = settings.map(|settings| ClientCache {
        settings,
        namespace: shared.namespace.clone(),
        built: None,
    });
    let mut told: BTreeSet<Holder> = BTreeSet::new();
    let mut held_since = HeldSince::new();
    // Until the first round, every hold found was there before the process.
    let mut first = true;
    // The first round at once: after a restart, what was given back meanwhile is expired first.
    let mut wait = Duration::ZERO;
    // Rounds in a row that failed: the wait doubles with each.
    let mut failing: u32 = 0;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
            // A node taken or given back: at once, unless Alertmanager is failing (the backoff
            // holds). A moment's delay folds a burst of changes into one round.
            _ = shared.holds_changed().notified(), if failing == 0 => {
                tokio::time::sleep(COALESCE).await;
            }
        }
        wait = PERIOD;
        if shared.chores().leading().is_err() || !shared.is_synced() {
            wait = NOT_READY;
            continue;
        }
        let (wanted, asking) = wanted(&shared);
        let now = Timestamp::now();
        remember(&mut held_since, &wanted, first, now);
        first = false;
        let Some(cache) = cache.as_mut() else {
            tell_unconfigured(&shared, &asking, &mut told).await;
            continue;
        };
        let result = configured_round(&shared, cache, &wanted, &created_by, &held_since, now).await;
        failing = match &result {
            Ok(done) if done.failed == 0 => 0,
            Ok(_) => failing.saturating_add(1),
            Err(e) => {
                warn!("cannot reconcile the Alertmanager silences: {e}");
                failing.saturating_add(1)
            }
        };
        wait = backoff(failing);
    }
}

/// What this process saw of each wanted hold (see [`Seen`]), kept for the holds still wanted:
/// those of its `first` round were there before it.
fn remember(held_since: &mut HeldSince, wanted: &[Wanted], first: bool, now: Timestamp) {
    held_since.retain(|k, _| wanted.iter().any(|w| w.holder == k.0 && w.node == k.1));
    let seen = match first {
        true => Seen::AtStart,
        false => Seen::Began(now),
    };
    for w in wanted {
        held_since
            .entry((w.holder.clone(), w.node.clone()))
            .or_insert(seen);
    }
}

/// One round against the configured Alertmanager, and the events it gives on their objects.
async fn configured_round(
    shared: &Shared,
    cache: &mut ClientCache,
    wanted: &[Wanted],
    created_by: &str,
    held_since: &HeldSince,
    now: Timestamp,
) -> Result<Round, AlertmanagerError> {
    let am = cache.get(shared).await?;
    let mut events = Vec::new();
    let publish = |h: &Holder, e: Event| events.push((h.clone(), e));
    let metrics = shared.metrics();
    let result = round(&am, wanted, created_by, held_since, metrics, now, publish).await;
    for (holder, event) in events {
        if let Some(object) = shared.holder_object(&holder) {
            shared
                .chores()
                .publish_to(&object.reference, &[event])
                .await;
        }
    }
    result
}

/// The wait before the next round after `failing` failed rounds in a row: [`PERIOD`], then
/// shorter at first (a blip), doubling up to [`MAX_BACKOFF`]. A silence that lapses while
/// Alertmanager is unreachable is made again when it answers.
fn backoff(failing: u32) -> Duration {
    match failing {
        0 => PERIOD,
        n => (Duration::from_secs(5) * 2u32.saturating_pow(n - 1)).min(MAX_BACKOFF),
    }
}

/// Tells each object that asks for a silence, once per process, that no Alertmanager is
/// configured.
async fn tell_unconfigured(
    shared: &Shared,
    asking: &BTreeSet<Holder>,
    told: &mut BTreeSet<Holder>,
) {
    told.retain(|h| asking.contains(h));
    let new: Vec<&Holder> = asking.iter().filter(|h| !told.contains(*h)).collect();
    for holder in new {
        let Some(object) = shared.holder_object(holder) else {
            continue;
        };
        let event = Event::warning(
            "SilencesNotConfigured",
            "spec.disruption.silence asks for Alertmanager silences, but the controller has no \
             --alertmanager-url: none is made (the rollout goes on)",
        );
        shared
            .chores()
            .publish_to(&object.reference, &[event])
            .await;
        told.insert(holder.clone());
    }
}

#[cfg(test)]
mod fake;
#[cfg(test)]
mod tests;
