//! The ledger every DisruptionBudget's status keeps: who holds which of its nodes, written by the
//! leader after each change of who holds what ([`keep_ledgers`]), from the budgets' cache
//! ([`super::budget`]) and the holds every operation shares ([`super::shared`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use jiff::Timestamp;
use kube::ResourceExt;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::budget::Budgets;
use super::error::ErrorKind;
use super::shared::Shared;
use crate::node::budget::api::DisruptionBudgetStatus;
use crate::node::budget::ledger::{self, Holding, LedgerInput};
use crate::node::budget::{DisruptionBudget, PoolState};
use crate::node::holders::Holder;

/// How often the ledgers are brought up to date when nothing wakes them (a node that goes
/// NotReady or is cordoned does not).
const LEDGER_PERIOD: Duration = Duration::from_secs(5);

/// The shortest time between two rounds of ledger writes.
const LEDGER_FLOOR: Duration = Duration::from_secs(1);

/// Keeps every budget's status (the ledger) current until `shutdown`: after each change of who
/// holds what, at most once a second, and every few seconds for the nodes' own changes. A change
/// of a budget's spec (a halt, a new limit) wakes every operation to decide again at once.
pub async fn keep_ledgers(
    shared: Arc<Shared>,
    budgets: Arc<Budgets>,
    mut spec_changes: BoxStream<'static, DisruptionBudget>,
    shutdown: CancellationToken,
) {
    info!("keeping the disruption budgets' ledgers");
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = spec_changes.next() => {
                if changed.is_none() {
                    warn!("the disruption budget watch stopped");
                    return;
                }
                shared.wake_all();
            }
            _ = budgets.changed.notified() => {}
            _ = tokio::time::sleep(LEDGER_PERIOD) => {}
        }
        // Counted before every cache has listed, a ledger would show nodes others hold as free
        // (tried again at the next wake, or after `LEDGER_PERIOD`).
        if shared.chores().leading().is_err() || !shared.is_synced() {
            continue;
        }
        if !write_ledgers(&shared, &budgets).await {
            // Written again after the floor, from the copy the watch has by then.
            budgets.changed.notify_one();
        }
        tokio::time::sleep(LEDGER_FLOOR).await;
    }
}

/// Writes every budget's status that changed; false if one was refused because the cached copy
/// it was computed from is older than the object (the watch has not shown the last write yet).
async fn write_ledgers(shared: &Shared, budgets: &Budgets) -> bool {
    let mut all = true;
    for (budget, status) in ledgers(shared, budgets, super::clock::now()) {
        if budget.status.as_ref() == Some(&status) {
            continue;
        }
        match shared.chores().write_status(budget.as_ref(), &status).await {
            Ok(Some(written)) => budgets.written.remember(Arc::new(written)),
            Ok(None) => {}
            Err(e) if e.kind() == ErrorKind::conflict => {
                debug!(budget = %budget.name_any(), "the ledger changed meanwhile; writing it again");
                all = false;
            }
            Err(e) => warn!(budget = %budget.name_any(), "cannot write the ledger: {e}"),
        }
    }
    all
}

/// Every budget with its status (its ledger) as of `now`.
pub fn ledgers(
    shared: &Shared,
    budgets: &Budgets,
    now: Timestamp,
) -> Vec<(Arc<DisruptionBudget>, DisruptionBudgetStatus)> {
    let objects = budgets.objects();
    if objects.is_empty() {
        return Vec::new();
    }
    // One reading of who holds what: the counts and the names agree.
    let holders = shared.holders_by_node();
    let measured = shared.measure_pools_held(&budgets.pools(), &holders, now);
    let index = shared.nodes();
    objects
        .iter()
        .filter_map(|b| {
            let pool = measured.iter().find(|p| p.name == b.name_any())?;
            let nodes: BTreeMap<String, Arc<crate::node::NodeInfo>> = pool
                .unavailable
                .iter()
                .filter_map(|n| index.get(n).map(|i| (n.clone(), i)))
                .collect();
            Some((b.clone(), status_of(b, pool, &nodes, &holders, now)))
        })
        .collect()
}

fn status_of(
    budget: &DisruptionBudget,
    pool: &PoolState,
    nodes: &BTreeMap<String, Arc<crate::node::NodeInfo>>,
    holders: &BTreeMap<String, Vec<Holder>>,
    now: Timestamp,
) -> DisruptionBudgetStatus {
    let nodes: BTreeMap<String, &crate::node::NodeInfo> =
        nodes.iter().map(|(k, v)| (k.clone(), v.as_ref())).collect();
    let holdings: BTreeMap<String, Vec<Holding<'_>>> = holders
        .iter()
        .filter(|(n, _)| pool.unavailable.contains(*n))
        .map(|(n, hs)| {
            let hs = hs.iter().map(|holder| Holding {
                holder,
                message: None,
            });
            (n.clone(), hs.collect())
        })
        .collect();
    let old = budget.status.clone().unwrap_or_default();
    ledger::status(
        &LedgerInput {
            pool,
            nodes: &nodes,
            holders: &holdings,
            old: &old,
            generation: budget.metadata.generation,
        },
        now,
    )
}
