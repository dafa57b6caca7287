//! Version resolution from `spec.channel`.
//!
//! The answer is read as system-upgrade-controller reads it ([`interpret_response`]): a `302`
//! gives the last path element of its `Location`, any other 2xx/3xx the last path element of the
//! channel URL itself. Unlike SUC, requests have timeouts, bodies are not read beyond a few KiB,
//! and [`ChannelCache`] makes one request per channel URL per polling interval for all Plans that
//! share it, instead of one per reconcile of each Plan.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use reqwest::header::{HeaderValue, LOCATION};
use reqwest::{Url, redirect};
use tokio::time::Instant;

use crate::runtime::http::error_chain;

/// Header with the UID of the `kube-system` Namespace.
pub const HEADER_CLUSTER_ID: &str = "X-SUC-Cluster-ID";
/// Header with the Plan's current `status.latestVersion`, sent only when it is not empty.
pub const HEADER_LATEST_VERSION: &str = "X-SUC-Latest-Version";
pub const USER_AGENT: &str = concat!("slipway/", env!("CARGO_PKG_VERSION"));

/// How long to keep reading a body after the answer is known, so that small bodies free the
/// connection for reuse and large or stalled ones cannot hold the caller.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// The longest an answer is kept (a year), whatever the polling interval says.
const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Why a channel did not give a version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    /// A status outside 200–399, e.g. `unexpected response: HTTP/1.1 404 Not Found` (SUC's text).
    #[error("unexpected response: {proto} {status}")]
    UnexpectedResponse { proto: String, status: String },
    /// Go's `http.ErrNoLocation`.
    #[error("http: no Location header in response")]
    NoLocation,
    #[error("invalid Location {location:?}: {reason}")]
    InvalidLocation { location: String, reason: String },
    #[error("invalid channel URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("invalid {header} header value {value:?}")]
    InvalidHeader { header: &'static str, value: String },
    #[error("request to {url} timed out")]
    Timeout { url: String },
    #[error("request to {url} failed: {reason}")]
    Request { url: String, reason: String },
    #[error("cannot build the HTTP client: {0}")]
    Client(String),
}

/// What of a response decides the version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHead<'a> {
    /// The protocol as Go prints it: `HTTP/1.1`, `HTTP/2.0`.
    pub proto: &'a str,
    pub status: u16,
    /// The reason phrase the server sent; `None` means the standard one for the status.
    pub reason: Option<&'a str>,
    /// The `Location` header, if any.
    pub location: Option<&'a str>,
}

/// SUC's `ResolveChannel` reading of a response to `GET channel_url`. The version is returned as
/// the channel gives it; callers munge it (`+` to `-`) for `status.latestVersion`.
///
/// - `302`: `path.Base` of the decoded path of `Location`, resolved against `channel_url`; the
///   query is ignored.
/// - other 200–399 (redirects are not followed): `path.Base` of `channel_url` as written,
///   query string included (a SUC quirk, kept).
/// - anything else: [`ChannelError::UnexpectedResponse`].
pub fn interpret_response(
    channel_url: &str,
    head: &ResponseHead<'_>,
) -> Result<String, ChannelError> {
    match head.status {
        302 => {
            // Go's `Header.Get` does not tell an empty header from a missing one.
            let location = head
                .location
                .filter(|l| !l.is_empty())
                .ok_or(ChannelError::NoLocation)?;
            let invalid = |reason: String| ChannelError::InvalidLocation {
                location: location.to_string(),
                reason,
            };
            let base = Url::parse(channel_url).map_err(|e| ChannelError::InvalidUrl {
                url: channel_url.to_string(),
                reason: e.to_string(),
            })?;
            let resolved = base.join(location).map_err(|e| invalid(e.to_string()))?;
            let path = unescape_path(resolved.path()).map_err(invalid)?;
            Ok(go_path_base(&path).to_string())
        }
        200..=399 => Ok(go_path_base(channel_url).to_string()),
        code => {
            let reason = head.reason.or_else(|| {
                reqwest::StatusCode::from_u16(code)
                    .ok()
                    .and_then(|s| s.canonical_reason())
            });
            let status = match reason {
                Some(r) if !r.is_empty() => format!("{code} {r}"),
                _ => code.to_string(),
            };
            Err(ChannelError::UnexpectedResponse {
                proto: head.proto.to_string(),
                status,
            })
        }
    }
}

/// Go's `path.Base`: the last element after trailing slashes are removed; `.` for an empty
/// string, `/` for a string of slashes.
pub fn go_path_base(path: &str) -> &str {
    if path.is_empty() {
        return ".";
    }
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return "/";
    }
    match trimmed.rfind('/') {
        Some(i) => &trimmed[i + 1..],
        None => trimmed,
    }
}

/// Go's `url.URL.Path` from an escaped path: `%XX` decoded (`+` stays), a malformed escape is an
/// error as in Go.
fn unescape_path(escaped: &str) -> Result<String, String> {
    let bytes = escaped.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = |j: usize| bytes.get(j).and_then(|b| (*b as char).to_digit(16));
            match (hex(i + 1), hex(i + 2)) {
                (Some(hi), Some(lo)) => {
                    out.push((hi * 16 + lo) as u8);
                    i += 3;
                }
                _ => {
                    let bad = &escaped[i..escaped.len().min(i + 3)];
                    return Err(format!("invalid URL escape {bad:?}"));
                }
            }
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Settings of [`ChannelClient`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelConfig {
    pub connect_timeout: Duration,
    /// For the whole request, body included.
    pub timeout: Duration,
    /// At most this much of a body is read (and then thrown away).
    pub max_body_bytes: usize,
    /// Use `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY` and `NO_PROXY` (and their lower-case forms).
    pub env_proxy: bool,
}

impl Default for ChannelConfig {
    fn default() -> Self {
        ChannelConfig {
            connect_timeout: Duration::from_secs(5),
            timeout: Duration::from_secs(15),
            max_body_bytes: 4096,
            env_proxy: true,
        }
    }
}

/// Something that asks a channel for its version; [`ChannelClient`], or a fake in tests.
pub trait ChannelFetch: Send + Sync + 'static {
    fn fetch(
        &self,
        channel_url: &str,
        latest_version: &str,
    ) -> impl Future<Output = Result<String, ChannelError>> + Send;
}

/// Asks channel servers over HTTP, as SUC does: `GET` without following redirects, with the
/// cluster ID and the current latest version in headers.
#[derive(Debug, Clone)]
pub struct ChannelClient {
    http: reqwest::Client,
    cluster_id: String,
    max_body_bytes: usize,
}

impl ChannelClient {
    /// A client that sends `cluster_id` (the UID of `kube-system`) with every request.
    ///
    /// A rustls crypto provider must be installed first (the binary installs ring); without one
    /// this is an error rather than reqwest's panic.
    pub fn new(
        cluster_id: impl Into<String>,
        config: &ChannelConfig,
    ) -> Result<ChannelClient, ChannelError> {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            return Err(ChannelError::Client(
                "no rustls crypto provider is installed".into(),
            ));
        }
        // reqwest reads the proxy variables itself (its `system-proxy` feature only adds macOS
        // and Windows settings). Unlike Go, it also reads ALL_PROXY and does not exempt loopback.
        let mut builder = reqwest::Client::builder()
            .redirect(redirect::Policy::none())
            .connect_timeout(config.connect_timeout)
            .timeout(config.timeout)
            .user_agent(USER_AGENT);
        if !config.env_proxy {
            builder = builder.no_proxy();
        }
        let http = builder
            .build()
            .map_err(|e| ChannelError::Client(error_chain(&e)))?;
        Ok(ChannelClient {
            http,
            cluster_id: cluster_id.into(),
            max_body_bytes: config.max_body_bytes,
        })
    }

    /// One request to the channel; the version as the channel gives it.
    pub async fn fetch(
        &self,
        channel_url: &str,
        latest_version: &str,
    ) -> Result<String, ChannelError> {
        let url = Url::parse(channel_url).map_err(|e| ChannelError::InvalidUrl {
            url: channel_url.to_string(),
            reason: e.to_string(),
        })?;
        let mut request = self.http.get(url);
        // Like SUC, each header is left out when its value is empty.
        for (header, value) in [
            (HEADER_CLUSTER_ID, self.cluster_id.as_str()),
            (HEADER_LATEST_VERSION, latest_version),
        ] {
            if !value.is_empty() {
                let value =
                    HeaderValue::from_str(value).map_err(|_| ChannelError::InvalidHeader {
                        header,
                        value: value.to_string(),
                    })?;
                request = request.header(header, value);
            }
        }
        let mut response = request.send().await.map_err(|e| {
            if e.is_timeout() {
                ChannelError::Timeout {
                    url: channel_url.to_string(),
                }
            } else {
                ChannelError::Request {
                    url: channel_url.to_string(),
                    reason: error_chain(&e.without_url()),
                }
            }
        })?;
        let proto = format!("{:?}", response.version());
        let reason = response
            .extensions()
            .get::<hyper::ext::ReasonPhrase>()
            .map(|r| String::from_utf8_lossy(r.as_bytes()).into_owned());
        let status = response.status().as_u16();
        let location = location_text(&response, status)?;
        let head = ResponseHead {
            proto: &proto,
            status,
            reason: reason.as_deref(),
            location: location.as_deref(),
        };
        let result = interpret_response(channel_url, &head);
        self.drain(&mut response).await;
        result
    }

    /// Reads and discards up to `max_body_bytes` of the body, for at most [`DRAIN_GRACE`]; what
    /// is left is dropped with the connection.
    async fn drain(&self, response: &mut reqwest::Response) {
        let max = self.max_body_bytes;
        let read_some = async {
            let mut read = 0usize;
            while read < max {
                match response.chunk().await {
                    Ok(Some(chunk)) => read += chunk.len(),
                    _ => break,
                }
            }
        };
        // The version is already known; a slow or broken body changes nothing.
        let _ = tokio::time::timeout(DRAIN_GRACE, read_some).await;
    }
}

impl ChannelFetch for ChannelClient {
    fn fetch(
        &self,
        channel_url: &str,
        latest_version: &str,
    ) -> impl Future<Output = Result<String, ChannelError>> + Send {
        ChannelClient::fetch(self, channel_url, latest_version)
    }
}

/// The `Location` header as text. Go would take the bytes as they are; a version is text, so a
/// `302` whose `Location` is not UTF-8 is an error here rather than a version with replacement
/// characters (for other statuses the header is not read).
fn location_text(
    response: &reqwest::Response,
    status: u16,
) -> Result<Option<String>, ChannelError> {
    let Some(bytes) = response.headers().get(LOCATION).map(HeaderValue::as_bytes) else {
        return Ok(None);
    };
    match std::str::from_utf8(bytes) {
        Ok(text) => Ok(Some(text.to_string())),
        Err(_) if status == 302 => Err(ChannelError::InvalidLocation {
            location: String::from_utf8_lossy(bytes).into_owned(),
            reason: "not UTF-8".into(),
        }),
        Err(_) => Ok(None),
    }
}

/// Counters for metrics, updated by [`ChannelCache`].
#[derive(Debug, Default)]
pub struct ChannelMetrics {
    /// Requests made to channel servers.
    pub requests: AtomicU64,
    /// Requests that gave no version.
    pub errors: AtomicU64,
    /// Answers served from the cache.
    pub cache_hits: AtomicU64,
    /// Duration of the latest request, in microseconds.
    pub last_latency_micros: AtomicU64,
}

/// What [`ChannelCache::resolve`] knows about a channel.
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelOutcome {
    /// The version as the channel gives it (not munged), or why there is none.
    pub result: Result<String, ChannelError>,
    /// When that answer arrived.
    pub fetched_at: Instant,
    /// When the cached answer goes stale: requeue the Plan after this for a newer one.
    pub next_poll_in: Duration,
    /// Whether this call made the request (otherwise the answer is another caller's).
    pub fresh: bool,
}

#[derive(Debug, Default)]
struct Entry {
    last: Option<Cached>,
    /// Failed requests in a row, for the backoff.
    failures: u32,
}

#[derive(Debug)]
struct Cached {
    result: Result<String, ChannelError>,
    fetched_at: Instant,
    stale_at: Instant,
}

/// Channel answers shared by every Plan: one request per distinct URL per polling interval.
///
/// Callers for a URL whose request is in flight wait for it and share its answer; callers for
/// other URLs are not held up. Failures are cached too and retried after a backoff that starts at
/// `error_backoff` and doubles up to the interval, so a failing server is not hammered. Time is
/// `tokio::time`, so tests can pause it.
#[derive(Debug)]
pub struct ChannelCache<F = ChannelClient> {
    fetcher: F,
    interval: Duration,
    error_backoff: Duration,
    entries: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Entry>>>>,
    metrics: ChannelMetrics,
}

impl<F: ChannelFetch> ChannelCache<F> {
    /// A cache that polls each URL every `interval` (SUC's `SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL`).
    pub fn new(fetcher: F, interval: Duration) -> Self {
        ChannelCache {
            fetcher,
            interval,
            error_backoff: Duration::from_secs(10),
            entries: Mutex::default(),
            metrics: ChannelMetrics::default(),
        }
    }

    /// The first retry delay after a failure (default 10 s).
    pub fn with_error_backoff(mut self, first_retry: Duration) -> Self {
        self.error_backoff = first_retry;
        self
    }

    pub fn interval(&self) -> Duration {
        self.interval
    }

    pub fn metrics(&self) -> &ChannelMetrics {
        &self.metrics
    }

    /// The channel's answer: cached while fresh, else from a new request.
    ///
    /// `latest_version` goes into the request's `X-SUC-Latest-Version`; when several Plans share
    /// a URL, the request carries the value of the one whose call made it.
    pub async fn resolve(&self, url: &str, latest_version: &str) -> ChannelOutcome {
        let entry = {
            let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(entries.entry(url.to_string()).or_default())
        };
        // Held across the request: that is what makes concurrent callers share it.
        let mut entry = entry.lock().await;
        let now = Instant::now();
        if let Some(cached) = &entry.last
            && now < cached.stale_at
        {
            self.metrics.cache_hits.fetch_add(1, Ordering::Relaxed);
            return ChannelOutcome {
                result: cached.result.clone(),
                fetched_at: cached.fetched_at,
                next_poll_in: cached.stale_at - now,
                fresh: false,
            };
        }
        let result = self.fetcher.fetch(url, latest_version).await;
        let fetched_at = Instant::now();
        let latency = u64::try_from((fetched_at - now).as_micros()).unwrap_or(u64::MAX);
        self.metrics
            .last_latency_micros
            .store(latency, Ordering::Relaxed);
        self.metrics.requests.fetch_add(1, Ordering::Relaxed);
        let wait = match &result {
            Ok(_) => {
                entry.failures = 0;
                self.interval
            }
            Err(_) => {
                self.metrics.errors.fetch_add(1, Ordering::Relaxed);
                entry.failures = entry.failures.saturating_add(1);
                let doublings = entry.failures.saturating_sub(1).min(31);
                self.error_backoff
                    .saturating_mul(1 << doublings)
                    .min(self.interval)
            }
        };
        // A polling interval from the environment can be absurdly long; keep the addition sane.
        let wait = wait.min(MAX_WAIT);
        entry.last = Some(Cached {
            result: result.clone(),
            fetched_at,
            stale_at: fetched_at + wait,
        });
        ChannelOutcome {
            result,
            fetched_at,
            next_poll_in: wait,
            fresh: true,
        }
    }

    /// Forgets the URLs for which `keep` is false (channels no Plan uses any more).
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|url, _| keep(url));
    }

    /// How many URLs the cache knows.
    pub fn url_count(&self) -> usize {
        (self.entries.lock().unwrap_or_else(PoisonError::into_inner)).len()
    }

    /// The URLs the cache knows.
    pub fn urls(&self) -> Vec<String> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests;
