//! kured's Prometheus blocker: firing alerts hold every reboot of a policy. Asked over the HTTP
//! API (`/api/v1/query?query=ALERTS`, by the shell); a server that cannot be asked, or an answer
//! that cannot be read, holds them too (fail safe).

use regex::Regex;
use serde_json::Value;

use crate::reboot_policy::api::PrometheusBlocker;

/// A blocker with its filter compiled.
#[derive(Debug, Clone)]
pub struct AlertFilter {
    pub url: String,
    filter: Option<Regex>,
    match_only: bool,
    firing_only: bool,
}

impl AlertFilter {
    /// `Err` names the field that does not compile.
    pub fn new(spec: &PrometheusBlocker) -> Result<AlertFilter, String> {
        let filter = spec
            .alert_filter
            .as_deref()
            .filter(|f| !f.is_empty())
            .map(Regex::new)
            .transpose()
            .map_err(|e| format!("spec.blocking.prometheus.alertFilter is invalid: {e}"))?;
        Ok(AlertFilter {
            url: spec.url.trim_end_matches('/').to_string(),
            filter,
            match_only: spec.match_only.unwrap_or(false),
            firing_only: spec.firing_only.unwrap_or(true),
        })
    }

    /// The names of the alerts in a `/api/v1/query` answer that hold reboots, sorted; `Err`
    /// when the answer is not a successful vector query.
    pub fn blocking(&self, answer: &Value) -> Result<Vec<String>, String> {
        if answer["status"] != "success" {
            // Prometheus' own error type (`bad_data`, `timeout`...), never the server's text: the
            // URL is the policy author's, and the answer could be any service's.
            let kind = answer["errorType"].as_str().filter(|t| {
                t.len() <= 32 && t.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            });
            return Err(match kind {
                Some(kind) => format!("the query failed ({kind})"),
                None => "the answer is not a successful Prometheus query".to_string(),
            });
        }
        let samples = answer["data"]["result"]
            .as_array()
            .ok_or("the answer has no data.result")?;
        let mut names: Vec<String> = samples
            .iter()
            .filter(|s| s["value"][1].as_str().is_some_and(|v| v != "0"))
            .filter(|s| !self.firing_only || s["metric"]["alertstate"] == "firing")
            .filter_map(|s| s["metric"]["alertname"].as_str())
            .filter(|name| match &self.filter {
                Some(re) => re.is_match(name) == self.match_only,
                None => true,
            })
            .map(str::to_string)
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// Why reboots are held, from what asking Prometheus gave (the names of the alerts that hold
    /// them, or why it could not be asked); `None` when nothing fires.
    pub fn verdict(&self, asked: Result<Vec<String>, String>) -> Option<String> {
        match asked {
            Ok(names) if names.is_empty() => None,
            Ok(names) => Some(format!(
                "alerts firing in Prometheus at {}: {}",
                self.url,
                names.join(", ")
            )),
            Err(e) => Some(format!(
                "Prometheus at {} could not be asked, so reboots wait: {e}",
                self.url
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(samples: &[(&str, &str, &str)]) -> Value {
        json!({"status": "success", "data": {"resultType": "vector", "result":
            samples.iter().map(|(name, state, value)| json!({
                "metric": {"__name__": "ALERTS", "alertname": name, "alertstate": state},
                "value": [1700000000.0, value],
            })).collect::<Vec<_>>()}})
    }

    fn filter(alert_filter: Option<&str>, match_only: bool, firing_only: bool) -> AlertFilter {
        AlertFilter::new(&PrometheusBlocker {
            url: "http://prom:9090/".into(),
            alert_filter: alert_filter.map(str::to_string),
            match_only: Some(match_only),
            firing_only: Some(firing_only),
        })
        .expect("valid filter")
    }

    #[test]
    fn firing_alerts_block_and_pending_ones_only_when_asked() {
        let a = answer(&[
            ("DiskFull", "firing", "1"),
            ("Watchdog", "pending", "1"),
            ("Gone", "firing", "0"),
        ]);
        assert_eq!(
            filter(None, false, true).blocking(&a),
            Ok(vec!["DiskFull".into()])
        );
        assert_eq!(
            filter(None, false, false).blocking(&a),
            Ok(vec!["DiskFull".into(), "Watchdog".into()])
        );
    }

    #[test]
    fn the_filter_ignores_matching_alerts_or_keeps_only_them() {
        let a = answer(&[("Watchdog", "firing", "1"), ("NodeDown", "firing", "1")]);
        assert_eq!(
            filter(Some("^Watchdog$"), false, true).blocking(&a),
            Ok(vec!["NodeDown".into()])
        );
        assert_eq!(
            filter(Some("^Watchdog$"), true, true).blocking(&a),
            Ok(vec!["Watchdog".into()])
        );
    }

    #[test]
    fn an_answer_that_cannot_be_read_is_an_error() {
        let f = filter(None, false, true);
        // Prometheus' error type is said, never the server's own words.
        assert_eq!(
            f.blocking(&json!({"status": "error", "errorType": "bad_data", "error": "s3cret"})),
            Err("the query failed (bad_data)".into())
        );
        assert_eq!(
            f.blocking(
                &json!({"status": "error", "errorType": "<b>s3cret</b>", "error": "s3cret"})
            ),
            Err("the answer is not a successful Prometheus query".into())
        );
        assert!(
            f.blocking(&json!({"status": "success", "data": {}}))
                .is_err()
        );
        assert!(f.blocking(&json!("garbage")).is_err());
        assert_eq!(f.url, "http://prom:9090");
    }

    #[test]
    fn a_bad_filter_names_the_field() {
        let e = AlertFilter::new(&PrometheusBlocker {
            url: "http://p".into(),
            alert_filter: Some("(".into()),
            ..Default::default()
        })
        .expect_err("invalid regex");
        assert!(e.contains("spec.blocking.prometheus.alertFilter"), "{e}");
    }

    #[test]
    fn an_unreachable_server_holds_reboots() {
        let f = AlertFilter::new(&PrometheusBlocker {
            url: "http://127.0.0.1:9".into(),
            ..Default::default()
        })
        .expect("valid");
        let held = f.verdict(Err("connection refused".into())).expect("held");
        assert!(held.contains("could not be asked"), "{held}");
        assert_eq!(f.verdict(Ok(vec![])), None);
    }
}
