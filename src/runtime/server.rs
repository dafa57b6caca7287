//! The operations HTTP server: `/metrics`, `/healthz` and `/readyz` (axum).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::runtime::health::Health;
use crate::runtime::metrics::{CONTENT_TYPE, Metrics};

#[derive(Clone)]
struct Shared {
    metrics: Arc<Metrics>,
    health: Health,
}

/// The routes, without a listener (for tests and [`serve`]).
pub fn router(metrics: Arc<Metrics>, health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(Shared { metrics, health })
}

async fn metrics_handler(State(s): State<Shared>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], s.metrics.render())
}

async fn readyz(State(s): State<Shared>) -> impl IntoResponse {
    let (ready, body) = s.health.phase().readiness();
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, body)
}

/// Binds `addr`; the returned listener is served by [`serve`]. Binding first lets the caller fail
/// fast (and learn the port when it asked for port 0).
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

/// Serves until `shutdown` is cancelled.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    health: Health,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router(metrics, health))
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::health::Transition;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let code = out[9..12].parse().unwrap();
        let body = out.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
        (code, body)
    }

    #[tokio::test]
    async fn serves_health_readiness_and_metrics_until_cancelled() {
        let metrics = Arc::new(Metrics::new());
        let health = Health::default();
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(
            listener,
            metrics.clone(),
            health.clone(),
            stop.clone(),
        ));

        assert_eq!(get(addr, "/healthz").await, (200, "ok".into()));
        assert_eq!(get(addr, "/readyz").await.0, 503);
        health.apply(Transition::WaitForLease);
        let (code, body) = get(addr, "/readyz").await;
        assert_eq!(code, 200);
        assert!(body.contains("standby"), "{body}");
        metrics.set_leader(true);
        let (code, body) = get(addr, "/metrics").await;
        assert_eq!(code, 200);
        assert!(body.contains("slipway_leader 1"), "{body}");
        assert_eq!(get(addr, "/nope").await.0, 404);

        stop.cancel();
        tokio::time::timeout(std::time::Duration::from_secs(5), server)
            .await
            .expect("the server stops")
            .unwrap()
            .unwrap();
    }
}
