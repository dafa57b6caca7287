//! A fake Alertmanager for the shell's tests: the v2 silences API with Alertmanager's shapes and
//! rules (a silence's state from its times; an update in place only of an active silence whose
//! matchers and start are unchanged, else the old one expired and a new one made; an unknown id
//! answered 404; expiring an expired silence is fine), an optional bearer token it requires, and a
//! switch that makes it answer 503.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use jiff::Timestamp;
use serde_json::json;

use crate::node::silence::{Postable, Silence, SilenceState, SilenceStatus};

#[derive(Default)]
struct Inner {
    silences: Vec<Silence>,
    next_id: u32,
    down: bool,
    token: Option<String>,
    requests: Vec<String>,
}

/// A running fake; dropped, its server stops with the test's runtime.
#[derive(Clone, Default)]
pub struct FakeAlertmanager {
    inner: Arc<Mutex<Inner>>,
}

impl FakeAlertmanager {
    /// Serves on a loopback port; the URL to reach it.
    pub async fn start(&self) -> String {
        let app = Router::new()
            .route("/api/v2/silences", get(list).post(post))
            .route("/api/v2/silence/{id}", delete(expire))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}")
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn set_down(&self, down: bool) {
        self.lock().down = down;
    }

    pub fn require_token(&self, token: &str) {
        self.lock().token = Some(token.into());
    }

    /// The silences as they are now (states as of now).
    pub fn silences(&self) -> Vec<Silence> {
        let now = Timestamp::now();
        (self.lock().silences.iter())
            .map(|s| with_state(s.clone(), now))
            .collect()
    }

    /// A silence someone else made.
    pub fn add(&self, silence: Silence) {
        self.lock().silences.push(silence);
    }

    /// Every request, as `METHOD path`.
    pub fn requests(&self) -> Vec<String> {
        self.lock().requests.clone()
    }

    fn gate(&self, headers: &HeaderMap, what: String) -> Option<Response> {
        let mut inner = self.lock();
        inner.requests.push(what);
        if inner.down {
            return Some((StatusCode::SERVICE_UNAVAILABLE, "down").into_response());
        }
        let wanted = inner.token.as_ref().map(|t| format!("Bearer {t}"));
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        match wanted {
            Some(w) if given != Some(w.as_str()) => {
                Some((StatusCode::UNAUTHORIZED, "unauthorized").into_response())
            }
            _ => None,
        }
    }
}

fn with_state(mut s: Silence, now: Timestamp) -> Silence {
    s.status.state = match (s.starts_at > now, s.ends_at <= now) {
        (_, true) => SilenceState::Expired,
        (true, false) => SilenceState::Pending,
        (false, false) => SilenceState::Active,
    };
    s
}

fn json_response(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn list(State(fake): State<FakeAlertmanager>, headers: HeaderMap) -> Response {
    if let Some(refused) = fake.gate(&headers, "GET /api/v2/silences".into()) {
        return refused;
    }
    json_response(StatusCode::OK, json!(fake.silences()))
}

async fn post(State(fake): State<FakeAlertmanager>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(refused) = fake.gate(&headers, "POST /api/v2/silences".into()) {
        return refused;
    }
    let Ok(p) = serde_json::from_slice::<Postable>(&body) else {
        return (StatusCode::BAD_REQUEST, "unreadable silence").into_response();
    };
    let now = Timestamp::now();
    if p.matchers.is_empty() || p.ends_at <= p.starts_at || p.ends_at < now {
        return (StatusCode::BAD_REQUEST, "invalid silence").into_response();
    }
    let mut inner = fake.lock();
    let previous = match &p.id {
        None => None,
        Some(id) => match inner.silences.iter().position(|s| &s.id == id) {
            Some(i) => Some(i),
            None => return (StatusCode::NOT_FOUND, "silence not found").into_response(),
        },
    };
    if let Some(i) = previous {
        let old = with_state(inner.silences[i].clone(), now);
        let in_place = old.status.state == SilenceState::Active
            && old.matchers == p.matchers
            && old.starts_at.as_second() == p.starts_at.as_second();
        if in_place {
            let s = &mut inner.silences[i];
            s.ends_at = p.ends_at;
            s.comment = p.comment;
            s.created_by = p.created_by;
            let id = s.id.clone();
            return json_response(StatusCode::OK, json!({ "silenceID": id }));
        }
        if old.status.state != SilenceState::Expired {
            inner.silences[i].ends_at = now;
        }
    }
    inner.next_id += 1;
    let id = format!("fake-{}", inner.next_id);
    inner.silences.push(Silence {
        id: id.clone(),
        status: SilenceStatus {
            state: SilenceState::Active,
        },
        matchers: p.matchers,
        starts_at: p.starts_at.max(now),
        ends_at: p.ends_at,
        created_by: p.created_by,
        comment: p.comment,
    });
    json_response(StatusCode::OK, json!({ "silenceID": id }))
}

async fn expire(
    State(fake): State<FakeAlertmanager>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    if let Some(refused) = fake.gate(&headers, format!("DELETE /api/v2/silence/{id}")) {
        return refused;
    }
    let now = Timestamp::now();
    let mut inner = fake.lock();
    let Some(s) = inner.silences.iter_mut().find(|s| s.id == id) else {
        return (StatusCode::NOT_FOUND, "silence not found").into_response();
    };
    if s.ends_at > now {
        s.starts_at = s.starts_at.min(now);
        s.ends_at = now;
    }
    StatusCode::OK.into_response()
}
