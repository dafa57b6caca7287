//! Asking Prometheus which alerts fire, for a policy's blocker.

use std::time::Duration;

use serde_json::Value;

use crate::reboot_policy::core::alerts::AlertFilter;

/// How long one query may take.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// The most bytes of an answer read.
const MAX_BODY: usize = 4 << 20;

/// Why reboots are held now, or `None` when nothing fires.
pub async fn ask(filter: &AlertFilter, http: &reqwest::Client) -> Option<String> {
    filter.verdict(query(filter, http).await)
}

async fn query(filter: &AlertFilter, http: &reqwest::Client) -> Result<Vec<String>, String> {
    let url = format!("{}/api/v1/query?query=ALERTS", filter.url);
    let mut response = http
        .get(&url)
        .timeout(QUERY_TIMEOUT)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !response.status().is_success() {
        return Err(format!("HTTP {}", response.status()));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(format!("the answer is larger than {MAX_BODY} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
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
        let http = reqwest::Client::builder().build().expect("client");
        let held = ask(&f, &http).await.expect("held");
        assert!(held.contains("could not be asked"), "{held}");
    }
}
