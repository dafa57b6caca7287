//! What a Plan's decision reads from outside the caches: the channel's answer and the health
//! gate's pods on the nodes that rebooted.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use tracing::warn;

use super::channel::{ChannelCache, ChannelClient};
use crate::common::selector::Selector;
use crate::node::NodeInfo;
use crate::node::reboot::HealthObservation;
use crate::node::shell::gate_pods;
use crate::plan::api::Plan;
use crate::plan::core::config::JobConfig;
use crate::plan::core::{self as core, ChannelAnswer};
use crate::runtime::Error;

/// How long a reconcile waits for a channel server. A slower answer arrives in the background and
/// triggers the Plan again, so a slow or hanging server never holds a reconcile slot (there are
/// only `threads` of them) that other Plans need.
const CHANNEL_WAIT: Duration = Duration::from_millis(250);

/// The channel's answer for a Plan that follows one, and when to look again (at most
/// `resync`). `None` while the channel has not answered: the Plan goes on as it is and is
/// triggered again (through `answered`) once it does.
pub(super) async fn ask_channel(
    plan: &Plan,
    cache: &Arc<ChannelCache<ChannelClient>>,
    metrics: Arc<super::metrics::PlanMetrics>,
    answered: &UnboundedSender<ObjectRef<Plan>>,
    resync: Duration,
) -> (Option<ChannelAnswer>, Duration) {
    let (None, Some(url)) = (
        plan.spec.version.as_deref().filter(|v| !v.is_empty()),
        plan.spec.channel.as_deref().filter(|c| !c.is_empty()),
    ) else {
        return (None, resync);
    };
    let latest = plan
        .status
        .as_ref()
        .and_then(|s| s.latest_version.clone())
        .unwrap_or_default();
    let (cache, url) = (cache.clone(), url.to_string());
    // Spawned, so that giving up the wait does not cancel the request.
    let mut asking = tokio::spawn(async move {
        let asked = std::time::Instant::now();
        let outcome = cache.resolve(&url, &latest).await;
        if outcome.fresh {
            metrics.channel_request(asked.elapsed(), outcome.result.is_ok());
        } else {
            metrics.channel_cache_hit();
        }
        outcome
    });
    let outcome = match tokio::time::timeout(CHANNEL_WAIT, &mut asking).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(e)) => {
            warn!(plan = %plan.name_any(), "channel request task failed: {e}");
            return (None, resync);
        }
        Err(_) => {
            let (answered, plan) = (answered.clone(), ObjectRef::from_obj(plan));
            tokio::spawn(async move {
                if asking.await.is_ok() {
                    // The controller is gone when this fails; nothing is left to trigger.
                    let _ = answered.unbounded_send(plan);
                }
            });
            return (None, resync);
        }
    };
    let answer = match outcome.result {
        Ok(v) => ChannelAnswer::Version(v),
        Err(e) => ChannelAnswer::Failed(e.to_string()),
    };
    (Some(answer), resync.min(outcome.next_poll_in))
}

/// Looks at the health gate's pods on the nodes that are rebooting or waiting for health; only
/// those few nodes (at most `concurrency`) are listed, straight from the API server.
pub(super) async fn health(
    client: &Client,
    plan: &Plan,
    nodes: &[Arc<NodeInfo>],
    job_config: &JobConfig,
) -> Result<BTreeMap<String, HealthObservation>, Error> {
    let mut observed = BTreeMap::new();
    let Some(gate) = core::reboot::settings(plan, job_config).and_then(|p| p.health_gate) else {
        return Ok(observed);
    };
    if Selector::from_label_selector(Some(&gate.pod_selector)).is_err() {
        return Ok(observed);
    }
    let nodes: Vec<&NodeInfo> = nodes.iter().map(AsRef::as_ref).collect();
    for node in core::nodes_awaiting_health(plan, &nodes) {
        observed.insert(
            node.name.clone(),
            gate_pods(client, &gate, &node.name).await?,
        );
    }
    Ok(observed)
}
