//! A mock API server for the shells' tests: it answers each request from a script of (method,
//! path) → answer, and records every request, so that a test can make any write fail the way a
//! real API server fails it (404, 409, 410, 429, 500, a timeout) and see what was sent before and
//! after. With it, the runtime's pieces a reconcile needs: a [`Client`], [`Chores`], a [`Shared`]
//! with a synced node index, and [`Sample`], a resource of the runtime's own tests.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};
use serde_json::{Value, json};

use super::chores::{Chores, Scope};
use super::error::ErrorKind;
use super::leader::LeaseGuard;
use super::metrics::Metrics;
use super::operation::{Operation, reconcile_once};
use super::shared::{HoldSources, Shared};
use crate::node::NodeInfo;
use crate::node::index::NodeIndex;

/// A resource of the runtime's own tests, so that they need no operation's: cluster-scoped, with
/// a status of the shapes operations' statuses have.
#[derive(
    kube::CustomResource,
    serde::Serialize,
    serde::Deserialize,
    Clone,
    Debug,
    Default,
    PartialEq,
    schemars::JsonSchema,
)]
#[kube(
    group = "test.slipway.dev",
    version = "v1",
    kind = "Sample",
    status = "SampleStatus"
)]
pub(crate) struct SampleSpec {
    pub(crate) node: String,
}

#[derive(
    serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SampleStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) progress: Option<u8>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) pending_pods: Vec<String>,
}

/// The namespace of the controller in these tests (Jobs, reboot pods).
pub(crate) const NAMESPACE: &str = "system-upgrade";
/// The controller's name in these tests.
pub(crate) const CONTROLLER: &str = "system-upgrade-controller";

/// How the mock answers a request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// This status code and body.
    Json(u16, Value),
    /// The request's own body, with this status code (a create or a replace that succeeds).
    Echo(u16),
    /// A `Status` failure with this code and reason, as the API server sends it.
    Fail(u16, &'static str),
    /// No answer: the request times out.
    Timeout,
}

impl Answer {
    /// What a successful delete answers.
    pub(crate) fn deleted() -> Answer {
        Answer::Json(200, status_body(200, "Success"))
    }

    /// A list of `items`.
    pub(crate) fn list(items: Vec<Value>) -> Answer {
        let list = json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items});
        Answer::Json(200, list)
    }
}

pub(crate) const NOT_FOUND: Answer = Answer::Fail(404, "NotFound");
/// A write refused because the object changed since it was read (resourceVersion, precondition).
pub(crate) const CONFLICT: Answer = Answer::Fail(409, "Conflict");
/// A create refused because an object of that name exists.
pub(crate) const ALREADY_EXISTS: Answer = Answer::Fail(409, "AlreadyExists");
pub(crate) const GONE: Answer = Answer::Fail(410, "Gone");
pub(crate) const TOO_MANY_REQUESTS: Answer = Answer::Fail(429, "TooManyRequests");
pub(crate) const SERVER_ERROR: Answer = Answer::Fail(500, "InternalError");
pub(crate) const TIMEOUT: Answer = Answer::Timeout;

/// The answers every write is tested under besides success.
pub(crate) const FAILURES: [Answer; 7] = [
    NOT_FOUND,
    CONFLICT,
    ALREADY_EXISTS,
    GONE,
    TOO_MANY_REQUESTS,
    SERVER_ERROR,
    TIMEOUT,
];

/// A failure's `Status` body.
pub(crate) fn status_body(code: u16, reason: &str) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": if code < 400 { "Success" } else { "Failure" },
        "message": format!("mock: {reason}"),
        "reason": reason,
        "code": code,
    })
}

/// One request the mock received.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Sent {
    pub method: String,
    pub path: String,
    pub query: String,
    pub content_type: String,
    /// The body as JSON (`Null` when empty).
    pub body: Value,
    /// Whether a rule of the script answered it (else the mock answered 501).
    pub scripted: bool,
}

impl Sent {
    /// Whether this is a `method` request whose path ends with `path` (see [`ApiServer::on`]).
    pub(crate) fn is(&self, method: &str, path: &str) -> bool {
        self.method == method && path_matches(path, &self.path)
    }

    pub(crate) fn is_event(&self) -> bool {
        self.path.starts_with("/apis/events.k8s.io/")
    }

    /// `METHOD path`, for messages.
    pub(crate) fn line(&self) -> String {
        format!("{} {}", self.method, self.path)
    }
}

/// Whether `path` ends with the segments of `pattern`, `*` matching any one segment.
fn path_matches(pattern: &str, path: &str) -> bool {
    let want: Vec<&str> = pattern.trim_start_matches('/').split('/').collect();
    let have: Vec<&str> = path.split('/').collect();
    have.len() >= want.len()
        && want
            .iter()
            .zip(&have[have.len() - want.len()..])
            .all(|(w, h)| *w == "*" || w == h)
}

/// Which requests a rule answers.
type Matcher = Arc<dyn Fn(&Sent) -> bool + Send + Sync>;

#[derive(Default)]
struct Script {
    rules: Vec<(Matcher, Answer)>,
    sent: Vec<Sent>,
}

/// The mock API server. Clones share the script and the record.
#[derive(Clone, Default)]
pub(crate) struct ApiServer {
    script: Arc<Mutex<Script>>,
}

impl ApiServer {
    /// A server that accepts events and answers nothing else until told (an unscripted request is
    /// answered 501 and listed by [`ApiServer::unscripted`]).
    pub(crate) fn new() -> ApiServer {
        let server = ApiServer::default();
        server.on("POST", "events", Answer::Echo(201));
        server.on("PATCH", "events/*", Answer::Echo(200));
        server
    }

    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Answers `method` requests whose path ends with `path` (`*` matches one segment) with
    /// `answer`. A later rule wins over an earlier one, so a test scripts the happy path first and
    /// then the failure under test.
    pub(crate) fn on(&self, method: &str, path: &str, answer: Answer) -> &ApiServer {
        let (method, path) = (method.to_string(), path.to_string());
        self.on_matching(move |sent| sent.is(&method, &path), answer)
    }

    /// Answers the requests `matches` picks with `answer`, from now on (a later rule wins): a
    /// test tells apart two writes of one path by their bodies.
    pub(crate) fn on_matching(
        &self,
        matches: impl Fn(&Sent) -> bool + Send + Sync + 'static,
        answer: Answer,
    ) -> &ApiServer {
        self.script().rules.push((Arc::new(matches), answer));
        self
    }

    /// Every request received, in order.
    pub(crate) fn sent(&self) -> Vec<Sent> {
        self.script().sent.clone()
    }

    /// The requests that change something (not reads, not events), in order.
    pub(crate) fn writes(&self) -> Vec<Sent> {
        self.sent()
            .into_iter()
            .filter(|s| s.method != "GET" && !s.is_event())
            .collect()
    }

    /// The events posted or folded into a series.
    pub(crate) fn events(&self) -> Vec<Sent> {
        self.sent().into_iter().filter(Sent::is_event).collect()
    }

    /// The requests no rule answered.
    pub(crate) fn unscripted(&self) -> Vec<String> {
        self.sent()
            .iter()
            .filter(|s| !s.scripted)
            .map(Sent::line)
            .collect()
    }

    /// A client whose every request this server answers.
    pub(crate) fn client(&self) -> Client {
        let server = self.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let server = server.clone();
            async move { server.serve(request).await }
        });
        Client::new(service, "default")
    }

    async fn serve(
        &self,
        request: Request<Body>,
    ) -> Result<Response<Body>, Box<dyn std::error::Error + Send + Sync>> {
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await?;
        let body: Value = match bytes.is_empty() {
            true => Value::Null,
            false => serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into())),
        };
        let sent = Sent {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            content_type: (parts.headers.get(http::header::CONTENT_TYPE))
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string(),
            body: body.clone(),
            scripted: false,
        };
        let answer = self.record(sent);
        let (code, body) = match answer {
            Some(Answer::Timeout) => {
                let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "mock: timed out");
                return Err(Box::new(e));
            }
            Some(Answer::Echo(code)) => (code, body),
            Some(Answer::Json(code, value)) => (code, value),
            Some(Answer::Fail(code, reason)) => (code, status_body(code, reason)),
            None => (501, status_body(501, "NotImplemented")),
        };
        let response = Response::builder()
            .status(code)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(&body)?))?;
        Ok(response)
    }

    /// Records `sent`; the answer of the last rule that matches it.
    fn record(&self, mut sent: Sent) -> Option<Answer> {
        let mut script = self.script();
        let answer = (script.rules.iter().rev())
            .find(|(matches, _)| matches(&sent))
            .map(|(_, answer)| answer.clone());
        sent.scripted = answer.is_some();
        script.sent.push(sent);
        answer
    }
}

/// The chores of a process that leads (`leading`) or not, writing through `client`.
pub(crate) fn chores_with(client: &Client, guard: LeaseGuard) -> Chores {
    let reporter = Reporter {
        controller: CONTROLLER.into(),
        instance: None,
    };
    Chores::new(
        client.clone(),
        client.clone(),
        guard,
        Recorder::new(client.clone(), reporter),
        Arc::new(Metrics::new()),
    )
}

/// The chores of the leader, writing through `client`.
pub(crate) fn chores(client: &Client) -> Chores {
    chores_with(client, LeaseGuard::always())
}

pub(crate) use super::listed;

/// A node index that has listed `nodes`.
pub(crate) fn node_index(nodes: Vec<NodeInfo>) -> NodeIndex {
    let mut index = NodeIndex::new();
    index.relist_start();
    for node in nodes {
        index.relisted(node);
    }
    index.relist_done();
    index
}

/// No write of that name: a run in which every write succeeds.
pub(crate) const NO_WRITE: &str = "none";

/// What every operation shares, writing through `client`: no object holds a node by its own
/// record, and the node index has listed `nodes`.
pub(crate) fn shared(client: &Client, nodes: Vec<NodeInfo>) -> Arc<Shared> {
    shared_with(client, nodes, HoldSources::new())
}

/// As [`shared`], the objects of `sources` holding nodes by their records (and existing).
pub(crate) fn shared_with(
    client: &Client,
    nodes: Vec<NodeInfo>,
    sources: HoldSources,
) -> Arc<Shared> {
    Arc::new(Shared::new(
        chores(client),
        CONTROLLER.into(),
        NAMESPACE.into(),
        Arc::new(RwLock::new(node_index(nodes))),
        sources,
        Arc::default(),
        None,
    ))
}

/// Runs one reconcile of `obj` by `op`: `Ok`, or the kind of its error.
pub(crate) async fn reconcile<O>(op: &O, obj: O::Object) -> Result<(), ErrorKind>
where
    O: Operation,
    <O::Object as kube::Resource>::Scope: Scope,
{
    reconcile_once(op, Arc::new(obj))
        .await
        .map(|_| ())
        .map_err(|e| e.kind())
}

/// The writes `api` received, in order, each named by `name` (or `METHOD path`), separated by
/// spaces: what a table row expects.
pub(crate) fn named_writes(
    api: &ApiServer,
    name: impl Fn(&Sent) -> Option<&'static str>,
) -> String {
    let names: Vec<String> = (api.writes().iter())
        .map(|s| name(s).map_or_else(|| s.line(), str::to_string))
        .collect();
    names.join(" ")
}

/// A row of an operation's table: in a scene, the API server answers one write (by name) with an
/// answer; the reconcile comes back as the outcome, having sent these writes (by name, in order).
pub(crate) type Row<S> = (S, &'static str, Answer, Result<(), ErrorKind>, &'static str);

/// Checks every row with `run` (one reconcile in the scene, the write answered with the answer:
/// its result and the writes sent).
pub(crate) async fn check_rows<S, F>(rows: &[Row<S>], run: impl Fn(S, &'static str, Answer) -> F)
where
    S: std::fmt::Debug + Copy,
    F: std::future::Future<Output = (Result<(), ErrorKind>, String)>,
{
    for (scene, write, answer, outcome, writes) in rows {
        let sent = run(*scene, write, answer.clone()).await;
        let row = format!("{scene:?}: {write} answered {answer:?}");
        assert_eq!(sent, (*outcome, writes.to_string()), "{row}");
    }
}

/// Checks rows whose last column names the writes that must not be sent.
pub(crate) async fn check_not_sent<S, F>(
    rows: &[Row<S>],
    run: impl Fn(S, &'static str, Answer) -> F,
) where
    S: std::fmt::Debug + Copy,
    F: std::future::Future<Output = (Result<(), ErrorKind>, String)>,
{
    for (scene, write, answer, outcome, forbidden) in rows {
        let (result, sent) = run(*scene, write, answer.clone()).await;
        let row = format!("{scene:?}: {write} answered {answer:?}, sent {sent}");
        assert_eq!(result, *outcome, "{row}");
        let sent: Vec<&str> = sent.split(' ').collect();
        let wrong: Vec<&str> = (forbidden.split(' '))
            .filter(|w| sent.contains(w))
            .collect();
        assert!(wrong.is_empty(), "{row}: {wrong:?} must not be sent");
    }
}

/// The status a write sent (the status patch's `status`).
pub(crate) fn status_sent(api: &ApiServer) -> Option<Value> {
    (api.writes().iter())
        .find(|s| s.method == "PATCH" && s.path.ends_with("/status"))
        .map(|s| s.body["status"].clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::error::{ErrorKind, kind_of};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::Api;

    #[test]
    fn paths_match_by_their_last_segments() {
        assert!(path_matches("/nodes/n1", "/api/v1/nodes/n1"));
        assert!(!path_matches("/nodes/n1", "/api/v1/nodes/n1/status"));
        assert!(path_matches(
            "events/*",
            "/apis/events.k8s.io/v1/namespaces/x/events/e"
        ));
        assert!(!path_matches("a/b/c/d", "/b/c/d"));
    }

    #[tokio::test]
    async fn the_script_answers_and_the_record_keeps_every_request() {
        let api = ApiServer::new();
        let cm = json!({"metadata": {"name": "a", "namespace": "ns"}});
        api.on("GET", "configmaps/a", Answer::Json(200, cm));
        api.on("GET", "configmaps/b", NOT_FOUND);
        api.on("GET", "configmaps/c", TIMEOUT);
        let configmaps = Api::<ConfigMap>::namespaced(api.client(), "ns");
        assert!(configmaps.get_opt("a").await.expect("a").is_some());
        assert!(configmaps.get_opt("b").await.expect("b").is_none());
        let timeout = configmaps.get("c").await.expect_err("c");
        assert_eq!(kind_of(&timeout), ErrorKind::timeout, "{timeout:?}");
        let unscripted = configmaps.get("d").await.expect_err("d");
        assert_eq!(kind_of(&unscripted), ErrorKind::server);
        assert_eq!(api.unscripted(), ["GET /api/v1/namespaces/ns/configmaps/d"]);
        assert_eq!(api.sent().len(), 4);
    }
}
