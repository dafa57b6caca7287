//! The metrics of the Alertmanager silences held while nodes are disrupted
//! (`runtime::silences`): slipway's silences by state, and the requests that keep them.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// A state of slipway's silences, as Alertmanager lists them.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SilenceLabels {
    pub state: &'static str,
}

/// A request to Alertmanager: `list`, `create`, `extend` or `expire`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AlertmanagerLabels {
    pub request: &'static str,
}

#[derive(Default)]
pub(super) struct SilenceMetrics {
    silences: Family<SilenceLabels, Gauge>,
    requests: Family<AlertmanagerLabels, Counter>,
    errors: Family<AlertmanagerLabels, Counter>,
}

impl SilenceMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "silences",
            "slipway's Alertmanager silences by state (active, pending, expired), as last listed",
            self.silences.clone(),
        );
        registry.register(
            "alertmanager_requests",
            "Requests made to Alertmanager's API, by request (list, create, extend, expire)",
            self.requests.clone(),
        );
        registry.register(
            "alertmanager_request_errors",
            "Requests to Alertmanager's API that failed (unreachable, refused, or an unreadable answer)",
            self.errors.clone(),
        );
    }

    pub(super) fn request(&self, request: &'static str, ok: bool) {
        let labels = AlertmanagerLabels { request };
        self.requests.get_or_create(&labels).inc();
        if !ok {
            self.errors.get_or_create(&labels).inc();
        }
    }

    pub(super) fn set(&self, state: &'static str, count: usize) {
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        self.silences
            .get_or_create(&SilenceLabels { state })
            .set(count);
    }
}
