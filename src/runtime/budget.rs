//! The cluster's DisruptionBudgets in the process: a cache of them, each read once per generation
//! ([`Budgets::pools`]), and the ledger every budget's status keeps ([`keep_ledgers`]).
//!
//! The decisions read the pools through [`super::Shared::decide_and_claim`], under the same lock
//! as the claims, so that the room a decision takes is the room the next one sees.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use jiff::Timestamp;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::error::ErrorKind;
use super::shared::Shared;
use super::watch::{changes, digest};
use super::written::Written;
use super::{ReadyFuture, ready};
use crate::node::budget::api::DisruptionBudgetStatus;
use crate::node::budget::ledger::{self, Holding, LedgerInput};
use crate::node::budget::{DisruptionBudget, Pool, PoolState};
use crate::node::holders::Holder;

/// How often the ledgers are brought up to date when nothing wakes them (a node that goes
/// NotReady or is cordoned does not).
const LEDGER_PERIOD: Duration = Duration::from_secs(5);
/// The shortest time between two rounds of ledger writes.
const LEDGER_FLOOR: Duration = Duration::from_secs(1);

/// A budget read, with the uid and generation it was read at.
type Read = (Option<String>, Option<i64>, Arc<Pool>);

/// The DisruptionBudgets of the cluster.
pub struct Budgets {
    store: Store<DisruptionBudget>,
    /// Each budget read, by name.
    parsed: Mutex<HashMap<String, Read>>,
    /// Woken when a holder takes or lets go of nodes: the ledgers are written again.
    pub(super) changed: Notify,
    /// Each ledger as last written, until the watch shows it: the next ledger is written over
    /// it, not refused for a copy that lags (under load the watch can take longer than the
    /// ledgers' floor, and a hold shorter than two floors then went unwritten).
    written: Written<DisruptionBudget>,
}

/// The watch of DisruptionBudgets: nothing runs until `changes` is polled.
pub struct BudgetWatch {
    pub budgets: Arc<Budgets>,
    /// A budget's spec changed, it appeared or it went.
    pub changes: BoxStream<'static, DisruptionBudget>,
}

/// Starts (lazily) the watch of every DisruptionBudget.
pub fn watch(client: &Client) -> BudgetWatch {
    let (store, writer) = reflector::store();
    let events = watcher(
        Api::<DisruptionBudget>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer);
    let view = |b: &DisruptionBudget| digest((&b.metadata.uid, b.metadata.generation));
    BudgetWatch {
        budgets: Arc::new(Budgets {
            store,
            parsed: Mutex::default(),
            changed: Notify::new(),
            written: Written::default(),
        }),
        changes: changes(events, view).boxed(),
    }
}

impl Budgets {
    /// The budgets of a list (`slipway explain`).
    pub fn listed(budgets: Vec<DisruptionBudget>) -> Arc<Budgets> {
        Arc::new(Budgets {
            store: super::listed(budgets),
            parsed: Mutex::default(),
            changed: Notify::new(),
            written: Written::default(),
        })
    }

    /// Resolves once every budget has been listed.
    pub fn ready(&self) -> ReadyFuture {
        ready(self.store.clone())
    }

    /// Every budget, read (once per generation), in name order.
    pub fn pools(&self) -> Vec<Arc<Pool>> {
        let mut parsed = self.parsed.lock().unwrap_or_else(|e| e.into_inner());
        let mut budgets = self.store.state();
        budgets.sort_by_key(|b| b.name_any());
        let pools: Vec<Arc<Pool>> = budgets
            .iter()
            .map(|b| {
                let (uid, generation) = (b.metadata.uid.clone(), b.metadata.generation);
                match parsed.get(&b.name_any()) {
                    Some((u, g, pool)) if *u == uid && *g == generation => pool.clone(),
                    _ => {
                        let pool = Arc::new(Pool::new(b));
                        parsed.insert(b.name_any(), (uid, generation, pool.clone()));
                        pool
                    }
                }
            })
            .collect();
        parsed.retain(|name, _| pools.iter().any(|p| p.name == *name));
        pools
    }

    /// Whether the cluster has any budget.
    pub fn any(&self) -> bool {
        !self.store.is_empty()
    }

    /// Every budget: the newer of the cache's copy and the one its ledger's last write returned.
    pub fn objects(&self) -> Vec<Arc<DisruptionBudget>> {
        let cached = self.store.state();
        (self.written).prune(|ns, name| {
            (cached.iter()).any(|b| {
                b.metadata.namespace.as_deref().unwrap_or_default() == ns && b.name_any() == name
            })
        });
        (cached.into_iter())
            .map(|b| self.written.latest(b))
            .collect()
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(name: &str, revision: &str) -> DisruptionBudget {
        let mut b = DisruptionBudget::new(name, Default::default());
        b.metadata.uid = Some(format!("uid-{name}"));
        b.metadata.resource_version = Some(revision.into());
        b
    }

    /// A ledger is computed over the copy its last write returned until the watch shows that
    /// write; then over the cache's.
    #[test]
    fn a_ledger_is_written_over_its_last_write_until_the_cache_shows_it() {
        let budgets = Budgets::listed(vec![budget("a", "5"), budget("b", "6")]);
        budgets.written.remember(Arc::new(budget("a", "7")));
        budgets.written.remember(Arc::new(budget("b", "4")));
        let revisions = |budgets: &Budgets| -> BTreeMap<String, String> {
            (budgets.objects().iter())
                .map(|b| (b.name_any(), b.resource_version().unwrap_or_default()))
                .collect()
        };
        assert_eq!(
            revisions(&budgets),
            BTreeMap::from([("a".into(), "7".into()), ("b".into(), "6".into())]),
            "the newer of the two"
        );
        let caught_up = Budgets::listed(vec![budget("a", "7")]);
        caught_up.written.remember(Arc::new(budget("a", "7")));
        assert_eq!(revisions(&caught_up)["a"], "7");
        assert!(
            caught_up.written.is_empty(),
            "forgotten once the cache shows it"
        );
    }
}
