//! The node's medik8s Lease: other medik8s operators (remediation) see a node whose Lease a
//! maintenance holds as taken. What the Lease says, and how it is renewed or taken over.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

/// How the maintenance takes the node's medik8s Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    /// NMO's default is `medik8s-leases` (its `LEASE_NAMESPACE`).
    pub namespace: String,
    /// NMO's is `node-maintenance`; other medik8s operators see the node as taken by it.
    pub holder: String,
    /// NMO requests 3600 s.
    pub duration: Duration,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        LeaseSettings {
            namespace: "medik8s-leases".into(),
            holder: "node-maintenance".into(),
            duration: Duration::from_secs(3600),
        }
    }
}

/// The Lease name of a node, as medik8s names it.
pub fn lease_name(node: &str) -> String {
    format!("node-{node}")
}

/// What the node's medik8s Lease says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseView {
    /// No Lease, or one that expired: it can be taken.
    Free,
    Ours,
    Other {
        holder: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseAction {
    /// Create, renew or take over the Lease.
    Hold,
    /// Delete the Lease if it is ours.
    Release,
}

/// What the node's Lease says, for `holder` (slipway's identity in medik8s Leases), at `now`.
pub fn lease_view(lease: Option<&Lease>, holder: &str, now: Timestamp) -> LeaseView {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return LeaseView::Free;
    };
    let current = spec.holder_identity.clone().unwrap_or_default();
    let expired = match (&spec.renew_time, spec.lease_duration_seconds) {
        (Some(renewed), Some(secs)) => renewed
            .0
            .checked_add(jiff::SignedDuration::from_secs(i64::from(secs)))
            .is_ok_and(|end| end < now),
        _ => true,
    };
    if current == holder {
        LeaseView::Ours
    } else if current.is_empty() || expired {
        LeaseView::Free
    } else {
        LeaseView::Other { holder: current }
    }
}

/// The Lease renewed (or taken over) by `holder` at `now`; `None` when it is ours and was
/// renewed within the last minute (a maintenance reconciles every few seconds).
pub fn renewed_lease(
    current: &Lease,
    holder: &str,
    duration: i32,
    now: Timestamp,
) -> Option<Lease> {
    let mut lease = current.clone();
    let spec = lease.spec.get_or_insert_with(Default::default);
    let ours = spec.holder_identity.as_deref() == Some(holder);
    let fresh = spec
        .renew_time
        .as_ref()
        .is_some_and(|t| now.duration_since(t.0) < jiff::SignedDuration::from_secs(60));
    if ours && fresh {
        return None;
    }
    if !ours {
        spec.holder_identity = Some(holder.to_string());
        spec.acquire_time = Some(MicroTime(now));
        spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    spec.lease_duration_seconds = Some(duration);
    spec.renew_time = Some(MicroTime(now));
    Some(lease)
}
