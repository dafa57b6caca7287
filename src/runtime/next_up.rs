//! The chore that keeps `slipway.dev/next:PreferNoSchedule` on the nodes the operations take next
//! ([`crate::node::next`] decides where), on the leader only. It acts shortly after a decision
//! changes a next batch, and looks again every half minute (a node patched by someone else, a
//! node taken). A new leader first lets every object decide once: until then it knows no next
//! batch and would take the taint off nodes that keep it (but off a node taken at once).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::shared::Shared;
use crate::node::next;

/// How often the taints are looked at without a change.
const PERIOD: Duration = Duration::from_secs(30);
/// How long a burst of decisions is folded into one round.
const COALESCE: Duration = Duration::from_secs(1);
/// How long a new leader lets its objects decide before it takes a taint off.
const SETTLE: Duration = Duration::from_secs(20);

/// Keeps the taint where the decisions want it, until `shutdown` (the taints then stay, for the
/// next leader).
pub async fn keep(shared: Arc<Shared>, shutdown: CancellationToken) {
    let mut leading_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(PERIOD) => {}
            _ = shared.next_changed().notified() => tokio::time::sleep(COALESCE).await,
        }
        if shared.chores().leading().is_err() || !shared.is_synced() {
            leading_since = None;
            continue;
        }
        let since = *leading_since.get_or_insert_with(tokio::time::Instant::now);
        let settled = since.elapsed() >= SETTLE;
        let (wanted, held) = shared.next_and_held();
        let (tainted, known): (BTreeSet<String>, BTreeSet<String>) = {
            let index = shared.nodes();
            let tainted = (index.all().filter(|n| n.next_up))
                .map(|n| n.name.clone())
                .collect();
            let known = (wanted.iter())
                .filter(|n| index.get(n).is_some())
                .cloned()
                .collect();
            (tainted, known)
        };
        for change in next::changes(&wanted, &held, &tainted, |n| known.contains(n)) {
            let adds = change.taint_edits.values().any(Option::is_some);
            // A node taken is no longer next, whatever the others decide.
            if !adds && !settled && !held.contains(&change.node) {
                continue;
            }
            let what = match adds {
                true => "next up: tainted PreferNoSchedule",
                false => "no longer next up: taint removed",
            };
            match shared.patch_node(&change).await {
                Ok(_) => info!(node = %change.node, "{what}"),
                Err(e) => warn!(node = %change.node, "{what} failed: {e}"),
            }
        }
    }
}
