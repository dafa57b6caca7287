//! A mock API server for the shells' tests: it answers each request from a script of (method,
//! path) → answer, and records every request, so that a test can make any write fail the way a
//! real API server fails it (404, 409, 410, 429, 500, a timeout) and see what was sent before and
//! after. With it, a [`Client`] and the [`Chores`] that write through it.

use std::sync::{Arc, Mutex, PoisonError};

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};
use serde_json::{Value, json};

use super::chores::Chores;
use super::leader::LeaseGuard;
use super::metrics::Metrics;

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
