//! The agent's `/metrics` (`--metrics-addr`): whether its node asks for a reboot, the gauge kured's
//! dashboards read as `kured_reboot_required`, beside the build and the process metrics.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::http::header;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use slipway::reboot_policy::core::request::Sentinel;
use slipway::runtime::metrics::{CONTENT_TYPE, process::ProcessCollector, register_build_info};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabel {
    node: String,
}

/// The agent's metrics.
pub struct AgentMetrics {
    registry: Registry,
    required: Family<NodeLabel, Gauge>,
    node: NodeLabel,
}

impl AgentMetrics {
    /// The metrics of the agent of `node`: its gauge shown from the start, at 0.
    pub fn new(node: &str) -> AgentMetrics {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        let slipway = registry.sub_registry_with_prefix("slipway");
        register_build_info(slipway);
        let required = Family::<NodeLabel, Gauge>::default();
        slipway.register(
            "reboot_required",
            "1 while the node's sentinel (or its update engine) asks for a reboot, else 0: kured's \
             kured_reboot_required",
            required.clone(),
        );
        let node = NodeLabel {
            node: node.to_string(),
        };
        required.get_or_create(&node).set(0);
        AgentMetrics {
            registry,
            required,
            node,
        }
    }

    /// What the host says now; a host that cannot tell leaves the gauge as it was.
    pub fn saw(&self, wanted: &Sentinel) {
        let value = match wanted {
            Sentinel::Present => 1,
            Sentinel::Absent => 0,
            Sentinel::Unknown(_) => return,
        };
        self.required.get_or_create(&self.node).set(value);
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// Serves `/metrics` on `addr` until the process ends; bound before it returns, so that a bad
/// address fails the start.
pub async fn serve(addr: &str, metrics: Arc<AgentMetrics>) -> anyhow::Result<()> {
    let addr: SocketAddr =
        (addr.parse()).with_context(|| format!("bad --metrics-addr {addr:?} (want host:port)"))?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let metrics = metrics.clone();
            async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.render()) }
        }),
    );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!("the metrics server stopped: {e}");
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gauge_follows_what_the_host_says() {
        let m = AgentMetrics::new("n1");
        let line = |m: &AgentMetrics| {
            (m.render().lines())
                .find(|l| l.starts_with("slipway_reboot_required{"))
                .map(str::to_string)
        };
        assert_eq!(
            line(&m).as_deref(),
            Some("slipway_reboot_required{node=\"n1\"} 0")
        );
        m.saw(&Sentinel::Present);
        assert_eq!(
            line(&m).as_deref(),
            Some("slipway_reboot_required{node=\"n1\"} 1")
        );
        m.saw(&Sentinel::Unknown("exit 2".into()));
        assert_eq!(
            line(&m).as_deref(),
            Some("slipway_reboot_required{node=\"n1\"} 1")
        );
        m.saw(&Sentinel::Absent);
        assert_eq!(
            line(&m).as_deref(),
            Some("slipway_reboot_required{node=\"n1\"} 0")
        );
        assert!(m.render().contains("slipway_build_info{"), "{}", m.render());
    }
}
