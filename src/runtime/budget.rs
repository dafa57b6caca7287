//! The cluster's DisruptionBudgets in the process: a cache of them, each read once per generation
//! ([`Budgets::pools`]); the ledger every budget's status keeps is [`super::ledgers`]'s.
//!
//! The decisions read the pools through [`super::Shared::decide_and_claim`], under the same lock
//! as the claims, so that the room a decision takes is the room the next one sees.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::Notify;

use super::watch::{changes, digest};
use super::written::Written;
use super::{ReadyFuture, ready};
use crate::node::budget::{DisruptionBudget, Pool};

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
    pub(super) written: Written<DisruptionBudget>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

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
