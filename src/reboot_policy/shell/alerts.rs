//! Asking Prometheus which alerts fire, for a policy's blocker.

use std::time::Duration;

use serde_json::Value;

use crate::reboot_policy::core::alerts::AlertFilter;
use crate::runtime::http::{Past, read_bounded};

/// How long one query may take.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of an answer read.
const MAX_BODY: usize = 4 << 20;

/// The client that asks Prometheus. A redirect is not followed (it is an answer that holds
/// reboots): the URL is the policy author's, and a redirect could take the controller's request
/// elsewhere in the cluster.
pub fn client() -> Option<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .ok()
}

/// Why reboots are held now, or `None` when nothing fires.
pub async fn ask(filter: &AlertFilter, http: &reqwest::Client) -> Option<String> {
    filter.verdict(query(filter, http).await)
}

async fn query(filter: &AlertFilter, http: &reqwest::Client) -> Result<Vec<String>, String> {
    let url = format!("{}/api/v1/query?query=ALERTS", filter.url);
    let response = http
        .get(&url)
        .timeout(QUERY_TIMEOUT)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    let body = read_bounded(response, MAX_BODY, Past::Fail).await?;
    let answer: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    filter.blocking(&answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reboot_policy::api::PrometheusBlocker;

    #[tokio::test]
    async fn an_unreachable_server_holds_reboots() {
        let f = AlertFilter::new(&PrometheusBlocker {
            url: "http://127.0.0.1:9".into(),
            ..Default::default()
        })
        .expect("valid");
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = client().expect("client");
        let held = ask(&f, &http).await.expect("held");
        assert!(held.contains("could not be asked"), "{held}");
    }

    #[tokio::test]
    async fn a_redirect_is_not_followed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        // Answers every request with a redirect to a Prometheus that would say nothing fires.
        let server = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut buf = [0u8; 4096];
                let n = conn.read(&mut buf).await.unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).to_string();
                let reply = if request.starts_with("GET /elsewhere") {
                    let body = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    )
                } else {
                    "HTTP/1.1 302 Found\r\nlocation: /elsewhere\r\ncontent-length: 0\r\n\r\n"
                        .to_string()
                };
                let _ = conn.write_all(reply.as_bytes()).await;
            }
        });
        let f = AlertFilter::new(&PrometheusBlocker {
            url: format!("http://{addr}"),
            ..Default::default()
        })
        .expect("valid");
        let _ = rustls::crypto::ring::default_provider().install_default();
        let held = ask(&f, &client().expect("client")).await.expect("held");
        assert!(held.contains("HTTP 302"), "{held}");
        server.abort();
    }
}
