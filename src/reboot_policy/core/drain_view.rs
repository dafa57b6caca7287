//! What a RebootPolicy reads of a drain under way.

use crate::node::drain::PodKey;

/// What a drain under way still waits for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainView {
    /// Pods the drain has still to see gone.
    pub remaining: usize,
    /// Why the first of them stay, for the status.
    pub waiting_for: Vec<String>,
    /// The pods to ask the Eviction API for (those not already terminating).
    pub to_evict: Vec<PodKey>,
    /// The pods a drain past its timeout deletes ([`crate::node::drain::to_delete`]).
    pub to_delete: Vec<PodKey>,
    /// Only volumes still attached keep the drain from its end (nothing to delete).
    pub volumes_only: bool,
}

impl DrainView {
    /// The drain of a node whose pods are `pods`.
    pub fn of(pods: &crate::node::drain::PodsView) -> DrainView {
        let mut waiting_for: Vec<String> = pods
            .blocked
            .iter()
            .map(|(p, why)| format!("{p} {why}"))
            .collect();
        waiting_for.extend(pods.to_evict.keys().take(5).map(|p| p.to_string()));
        waiting_for.extend(pods.volumes_message());
        let pods_left = pods.to_evict.len() + pods.blocked.len();
        DrainView {
            volumes_only: pods_left == 0 && !pods.attached.is_empty(),
            remaining: pods_left + pods.attached.len(),
            waiting_for,
            to_evict: pods
                .to_evict
                .iter()
                .filter(|(_, terminating)| !**terminating)
                .map(|(k, _)| k.clone())
                .collect(),
            to_delete: crate::node::drain::to_delete(pods),
        }
    }
}
