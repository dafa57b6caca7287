//! A proxy of the test's between the controller and the API server, for faults in the API
//! server's answers: plain HTTP in front (the controller's kubeconfig names it, without
//! credentials), the test's own client behind (its TLS and credentials). It passes requests on,
//! answers them `429 Too Many Requests`, holds them before passing them on, or ends the open
//! watches and answers new ones as the API server answers a watch from a compacted revision
//! (`410 Expired`), as the test tells it; and it can move the `Date` of every answer, as a host
//! whose clock is off sees the API server's time.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use http::HeaderValue;
use http::StatusCode;
use http::header::{
    CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, DATE, HOST, RETRY_AFTER, TRANSFER_ENCODING,
};
use kube::Client;
use tokio::sync::Notify;

use super::{Limits, Replicas, Row, Sizes, Stage, Task, rollout_plan};
use crate::support;
use crate::support::scene::Scene;

/// A rollout of Plan `up` whose one controller talks to the API server through an [`ApiProxy`],
/// its Jobs taking `job` each (so that the controller has work left while the proxy misbehaves).
pub(super) struct Proxied {
    pub(super) stage: Stage,
    pub(super) proxy: ApiProxy,
    replicas: Replicas,
    kubeconfig: std::path::PathBuf,
}

impl Proxied {
    pub(super) async fn start(name: &str, sizes: Sizes, job: &str) -> Option<Proxied> {
        let c = sizes.concurrency;
        let stage = Stage::new(Scene::new(name), sizes, |_| Limits::one_plan("up", c)).await?;
        let proxy = ApiProxy::start(stage.client())
            .await
            .expect("start the proxy in front of the API server");
        let kubeconfig = std::env::temp_dir().join(format!("{}-proxied.kubeconfig", stage.ns()));
        proxy
            .kubeconfig(&kubeconfig)
            .expect("write the proxy's kubeconfig");
        let replicas = Replicas::start(stage.ns(), &[("a", kubeconfig.as_path())], false);
        let mut plan = rollout_plan("up", &stage.s.pool, c, "v1", "");
        (plan.metadata.annotations.get_or_insert_default())
            .insert(support::COMPLETE_DELAY_ANNOTATION.into(), job.into());
        stage.create_plan(&plan).await;
        Some(Proxied {
            stage,
            proxy,
            replicas,
            kubeconfig,
        })
    }

    /// Once the proxy passes everything on again: the rollout finished, the scenario's row.
    pub(super) async fn end(self, faults: usize) -> Row {
        let finished = self.stage.finish_rollout("up", super::ROLLOUT_LIMIT).await;
        self.replicas.stop();
        let _ = std::fs::remove_file(&self.kubeconfig);
        self.stage.end(finished, faults).await
    }
}

/// How long a request is held by [`Mode::Hold`].
pub(super) const SLOW: Duration = Duration::from_millis(1500);
/// The largest request body passed on (a Plan's status is far smaller).
const BODY_LIMIT: usize = 16 << 20;

/// What the proxy does with the controller's requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Mode {
    Pass = 0,
    /// Every new request answered 429 with `Retry-After: 1` (open watches go on).
    Reject = 1,
    /// Every request held [`SLOW`], then passed on.
    Hold = 2,
    /// Open watches ended; every new watch answered `410 Expired` (other requests passed on).
    Expire = 3,
}

/// What the proxy does now, and what it did.
pub(super) struct Answers {
    upstream: Client,
    mode: AtomicU8,
    /// Ends the watches open when the mode changes to [`Mode::Expire`].
    watches_end: Notify,
    generation: AtomicUsize,
    pub(super) rejected: AtomicUsize,
    pub(super) held: AtomicUsize,
    pub(super) expired: AtomicUsize,
    /// Seconds added to the `Date` of every answer.
    date_shift: AtomicI64,
    pub(super) dated: AtomicUsize,
}

/// The proxy on loopback; stops when dropped.
pub(super) struct ApiProxy {
    pub(super) answers: Arc<Answers>,
    port: u16,
    _server: Task,
}

impl ApiProxy {
    pub(super) async fn start(upstream: Client) -> anyhow::Result<ApiProxy> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let answers = Arc::new(Answers {
            upstream,
            mode: AtomicU8::new(Mode::Pass as u8),
            watches_end: Notify::new(),
            generation: AtomicUsize::new(0),
            rejected: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            expired: AtomicUsize::new(0),
            date_shift: AtomicI64::new(0),
            dated: AtomicUsize::new(0),
        });
        let router = axum::Router::new()
            .fallback(forward)
            .with_state(answers.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Ok(ApiProxy {
            answers,
            port,
            _server: Task(server),
        })
    }

    pub(super) fn answer(&self, mode: Mode) {
        self.answers.mode.store(mode as u8, Ordering::SeqCst);
        if mode == Mode::Expire {
            self.answers.generation.fetch_add(1, Ordering::SeqCst);
            self.answers.watches_end.notify_waiters();
        }
    }

    /// Moves the `Date` of every answer from now on by `seconds`.
    pub(super) fn shift_dates(&self, seconds: i64) {
        self.answers.date_shift.store(seconds, Ordering::SeqCst);
    }

    /// A kubeconfig for the proxy: plain HTTP, no credentials of its own.
    pub(super) fn kubeconfig(&self, path: &std::path::Path) -> std::io::Result<()> {
        std::fs::write(
            path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster: {{server: \"http://127.0.0.1:{}\"}}\nusers:\n- name: anonymous\n  user: {{}}\ncontexts:\n- name: proxy\n  context: {{cluster: proxy, user: anonymous}}\ncurrent-context: proxy\n",
                self.port
            ),
        )
    }
}

fn is_watch(request: &Request) -> bool {
    (request.uri().query().unwrap_or_default().split('&'))
        .any(|p| p == "watch=true" || p == "watch=1")
}

/// What the API server sends a watch that starts from a revision etcd compacted away.
fn expired() -> Response {
    let event = serde_json::json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
        "metadata": {}, "status": "Failure", "message": "too old resource version: 1 (2)",
        "reason": "Expired", "code": 410}});
    ([(CONTENT_TYPE, "application/json")], format!("{event}\n")).into_response()
}

/// An HTTP date moved by `seconds`, in the same form.
fn shifted(date: &HeaderValue, seconds: i64) -> Option<HeaderValue> {
    let at = jiff::fmt::rfc2822::parse(date.to_str().ok()?)
        .ok()?
        .timestamp();
    let moved = at
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .ok()?;
    let text = jiff::fmt::rfc2822::DateTimePrinter::new()
        .timestamp_to_rfc9110_string(&moved)
        .ok()?;
    HeaderValue::from_str(&text).ok()
}

fn too_many() -> Response {
    let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": "Too many requests, please try again later.",
        "reason": "TooManyRequests", "details": {"retryAfterSeconds": 1}, "code": 429});
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(RETRY_AFTER, "1"), (CONTENT_TYPE, "application/json")],
        status.to_string(),
    )
        .into_response()
}

/// One request of the controller: refused, held, and passed on as the proxy is told.
async fn forward(State(answers): State<Arc<Answers>>, request: Request) -> Response {
    let watch = is_watch(&request);
    match answers.mode.load(Ordering::SeqCst) {
        m if m == Mode::Reject as u8 => {
            answers.rejected.fetch_add(1, Ordering::Relaxed);
            return too_many();
        }
        m if m == Mode::Hold as u8 => {
            answers.held.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(SLOW).await;
        }
        m if m == Mode::Expire as u8 && watch => {
            answers.expired.fetch_add(1, Ordering::Relaxed);
            return expired();
        }
        _ => {}
    }
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, BODY_LIMIT).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut upstream = http::Request::builder().method(parts.method).uri(target);
    for (name, value) in &parts.headers {
        if ![HOST, CONTENT_LENGTH, CONNECTION, TRANSFER_ENCODING].contains(name) {
            upstream = upstream.header(name, value);
        }
    }
    let Ok(upstream) = upstream.body(kube::client::Body::from(body.to_vec())) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let answer = match answers.upstream.send(upstream).await {
        Ok(answer) => answer,
        Err(e) => return (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    };
    let (mut parts, body) = answer.into_parts();
    for hop in [CONTENT_LENGTH, CONNECTION, TRANSFER_ENCODING] {
        parts.headers.remove(hop);
    }
    let shift = answers.date_shift.load(Ordering::SeqCst);
    if shift != 0 {
        let moved = (parts.headers.get(DATE)).and_then(|d| shifted(d, shift));
        if let Some(moved) = moved {
            parts.headers.insert(DATE, moved);
            answers.dated.fetch_add(1, Ordering::Relaxed);
        }
    }
    let body = Body::new(body);
    if !watch {
        return Response::from_parts(parts, body);
    }
    // A watch goes on until the proxy ends the watches open.
    let generation = answers.generation.load(Ordering::SeqCst);
    let events = futures::stream::unfold(
        (body.into_data_stream(), answers),
        move |(mut events, answers)| async move {
            let ended = answers.watches_end.notified();
            if answers.generation.load(Ordering::SeqCst) != generation {
                return None;
            }
            tokio::select! {
                next = events.next() => next.map(|chunk| (chunk, (events, answers))),
                () = ended => None,
            }
        },
    );
    Response::from_parts(parts, Body::from_stream(events))
}
