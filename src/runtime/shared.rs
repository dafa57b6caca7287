//! What every operation of the process shares: the chores (client, lease, recorder), the node
//! index, and the budget: this process's claims on nodes, and the objects whose own records say
//! which nodes they hold.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use jiff::Timestamp;

use super::chores::Chores;
use super::error::Error;
use super::metrics::Metrics;
use super::watch::NodeTriggers;
use crate::node::holders::{Hold, Holder, NodeClaims, held_against};
use crate::node::index::NodeIndex;

/// The objects of one kind whose own records say which nodes they hold: what survives a restart,
/// until each object's first decision claims its nodes again. Each operation's shell gives one.
pub trait HoldSource: Send + Sync {
    /// The nodes the objects hold by their own records.
    fn holds(&self, nodes: &NodeIndex, now: Timestamp) -> Vec<Hold>;
    /// `Some`: `holder` is of this kind, and whether its object still exists; `None`: not of this
    /// kind.
    fn exists(&self, holder: &Holder) -> Option<bool>;
}

/// The hold sources of the operations the process runs, in the order in which [`held_against`]
/// lets their holds keep a node.
pub type HoldSources = Vec<Arc<dyn HoldSource>>;

/// Shared by every reconcile of every operation.
pub struct Shared {
    chores: Chores,
    /// `--name`: the value of the `upgrade.cattle.io/controller` label on what slipway creates.
    pub controller_name: String,
    /// `--namespace`: where Plans, Jobs, Secrets and reboot pods live.
    pub namespace: String,
    nodes: Arc<RwLock<NodeIndex>>,
    claims: Mutex<NodeClaims>,
    sources: HoldSources,
    /// Wakes the objects that wait for a node another lets go of.
    triggers: Arc<NodeTriggers>,
}

/// How long after letting go of nodes their readers are woken: the status write that ends the
/// holder's own record must reach the caches first, or the woken decision still finds the node
/// held (and looks again only at its recheck).
const WAKE_DELAY: Duration = Duration::from_secs(1);

impl Shared {
    pub fn new(
        chores: Chores,
        controller_name: String,
        namespace: String,
        nodes: Arc<RwLock<NodeIndex>>,
        sources: HoldSources,
        triggers: Arc<NodeTriggers>,
    ) -> Shared {
        Shared {
            chores,
            controller_name,
            namespace,
            nodes,
            claims: Mutex::default(),
            sources,
            triggers,
        }
    }

    pub fn chores(&self) -> &Chores {
        &self.chores
    }

    pub fn metrics(&self) -> &Metrics {
        self.chores.metrics()
    }

    pub fn metrics_arc(&self) -> Arc<Metrics> {
        self.chores.metrics_arc()
    }

    pub fn nodes(&self) -> RwLockReadGuard<'_, NodeIndex> {
        self.nodes.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn nodes_mut(&self) -> RwLockWriteGuard<'_, NodeIndex> {
        self.nodes.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until the node index has its first full list: a node missing from an index that has
    /// not listed them all yet is not gone.
    pub async fn nodes_synced(&self) -> Result<(), Error> {
        for _ in 0..600 {
            if self.nodes().is_synced() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(Error::CacheStopped("node"))
    }

    /// Decides, and claims the nodes the decision holds, in one step of the process's one budget
    /// (under the claims' lock, so that no other operation takes a node in between). `decide`
    /// gets the nodes `me` must not take, with who holds each. An object being deleted claims
    /// nothing new (it lets go once its cleanup is done). `Err`: a node the decision holds is
    /// held by another operation; nothing was claimed.
    pub fn decide_and_claim<D>(
        &self,
        me: &Holder,
        deleting: bool,
        decide: impl FnOnce(&BTreeMap<String, Holder>) -> D,
        holds: impl FnOnce(&D) -> &BTreeSet<String>,
    ) -> Result<D, (String, Holder)> {
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        let persisted = self.persisted_holds(Timestamp::now());
        let held = {
            let index = self.nodes();
            held_against(me, &claims, &persisted, index.tainted())
        };
        let decision = decide(&held);
        if !deleting {
            claims.set(me, holds(&decision))?;
        }
        Ok(decision)
    }

    /// The nodes another Plan than `me` holds in this process.
    pub fn held_by_other_plans(&self, me: &Holder) -> BTreeSet<String> {
        self.claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .nodes_held_by(|h| h != me && h.is_plan())
    }

    /// The nodes `me` holds in this process.
    pub fn claimed_by(&self, me: &Holder) -> BTreeSet<String> {
        self.claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .nodes_held_by(|h| h == me)
    }

    /// Wakes, shortly, the other objects that read a node `me` held (`before`) and holds no more:
    /// one that waits for it need not wait for its recheck. A node's own changes wake its readers
    /// through the node watch; letting go of a node may change nothing on it.
    pub fn wake_readers(&self, me: &Holder, before: &BTreeSet<String>) {
        let now = self.claimed_by(me);
        let readers: BTreeSet<Holder> = {
            let index = self.nodes();
            before
                .difference(&now)
                .flat_map(|node| index.readers_of(node, me).cloned().collect::<Vec<_>>())
                .collect()
        };
        if readers.is_empty() {
            return;
        }
        let triggers = self.triggers.clone();
        tokio::spawn(async move {
            tokio::time::sleep(WAKE_DELAY).await;
            triggers.send(readers);
        });
    }

    /// Lets go of every node `me` holds.
    pub fn release(&self, me: &Holder) {
        self.claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release_all(me);
    }

    /// What each object's own record says it holds, source by source.
    fn persisted_holds(&self, now: Timestamp) -> Vec<Hold> {
        let index = self.nodes();
        self.sources
            .iter()
            .flat_map(|source| source.holds(&index, now))
            .collect()
    }

    /// Forgets the claims and index entries of objects that are gone.
    pub fn forget_gone(&self) {
        let exists = |h: &Holder| self.sources.iter().find_map(|s| s.exists(h)) == Some(true);
        self.claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain_holders(exists);
        self.nodes_mut().retain(exists);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::testing::{ApiServer, chores};

    /// The records of one kind of operation: the objects that exist, and the nodes they hold.
    struct Records {
        holds: Vec<Hold>,
        of_kind: fn(&Holder) -> bool,
    }

    impl HoldSource for Records {
        fn holds(&self, _nodes: &NodeIndex, _now: Timestamp) -> Vec<Hold> {
            self.holds.clone()
        }

        fn exists(&self, holder: &Holder) -> Option<bool> {
            (self.of_kind)(holder).then(|| self.holds.iter().any(|h| &h.holder == holder))
        }
    }

    fn plan(name: &str) -> Holder {
        Holder::Plan {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn hold(node: &str, holder: Holder) -> Hold {
        Hold {
            node: node.into(),
            holder,
        }
    }

    fn shared(sources: HoldSources) -> Shared {
        woken(sources, Arc::default())
    }

    fn woken(sources: HoldSources, triggers: Arc<NodeTriggers>) -> Shared {
        let api = ApiServer::new();
        let index = Arc::new(RwLock::new(crate::runtime::testing::node_index(vec![
            crate::node::NodeInfo {
                name: "n1".into(),
                ..Default::default()
            },
        ])));
        Shared::new(
            chores(&api.client()),
            "c".into(),
            "ns".into(),
            index,
            sources,
            triggers,
        )
    }

    fn records() -> HoldSources {
        let maintenance = Holder::Maintenance { name: "m".into() };
        vec![
            Arc::new(Records {
                holds: vec![hold("n1", plan("a"))],
                of_kind: Holder::is_plan,
            }),
            Arc::new(Records {
                holds: vec![hold("n2", maintenance)],
                of_kind: |h| matches!(h, Holder::Maintenance { .. }),
            }),
        ]
    }

    /// What a decision of `me` is told it must not take.
    fn held_against(shared: &Shared, me: &Holder) -> BTreeMap<String, Holder> {
        let decided = |held: &BTreeMap<String, Holder>| (held.clone(), BTreeSet::new());
        shared
            .decide_and_claim(me, false, decided, |(_, nothing)| nothing)
            .expect("claims nothing")
            .0
    }

    fn claim(shared: &Shared, me: &Holder, node: &str) {
        let nodes = BTreeSet::from([node.to_string()]);
        shared
            .decide_and_claim(me, false, |_| nodes, |nodes| nodes)
            .expect("the node is free");
    }

    #[tokio::test]
    async fn every_kind_s_records_count_against_the_others() {
        let shared = shared(records());
        let me = Holder::Reboot { policy: "p".into() };
        let held = held_against(&shared, &me);
        assert_eq!(
            held,
            BTreeMap::from([
                ("n1".to_string(), plan("a")),
                ("n2".to_string(), Holder::Maintenance { name: "m".into() }),
            ])
        );
    }

    #[tokio::test]
    async fn the_claims_of_objects_no_source_knows_any_more_are_forgotten() {
        let shared = shared(records());
        let gone_maintenance = Holder::Maintenance { name: "x".into() };
        claim(&shared, &plan("a"), "n3");
        claim(&shared, &plan("gone"), "n4");
        claim(&shared, &gone_maintenance, "n5");
        claim(
            &shared,
            &Holder::Reboot {
                policy: "no source".into(),
            },
            "n6",
        );
        shared.forget_gone();
        let me = Holder::Maintenance { name: "me".into() };
        let held: Vec<String> = held_against(&shared, &me).into_keys().collect();
        assert_eq!(held, ["n1", "n2", "n3"], "only what existing objects hold");
    }

    #[tokio::test(start_paused = true)]
    async fn letting_go_of_a_node_wakes_its_other_readers_after_the_status_write() {
        use futures::StreamExt;
        let triggers = Arc::new(NodeTriggers::default());
        let mut policies = triggers.concerned(|h| matches!(h, Holder::Reboot { .. }));
        let mut plans = triggers.concerned(Holder::is_plan);
        let shared = woken(HoldSources::new(), triggers);
        let policy = Holder::Reboot { policy: "p".into() };
        for reader in [&policy, &plan("a"), &plan("b")] {
            shared.nodes_mut().candidates(reader, "uid", Some(1), || {
                crate::node::index::Interest {
                    selector: crate::common::selector::Selector::Requirements(Vec::new()),
                    label: None,
                    conditions: false,
                }
            });
        }
        claim(&shared, &plan("a"), "n1");
        let before = shared.claimed_by(&plan("a"));
        shared.wake_readers(&plan("a"), &before);
        tokio::time::sleep(WAKE_DELAY * 2).await;
        assert!(policies.try_recv().is_err(), "still held: nobody woken");
        shared.release(&plan("a"));
        shared.wake_readers(&plan("a"), &before);
        assert!(policies.try_recv().is_err(), "not before the delay");
        tokio::time::sleep(WAKE_DELAY * 2).await;
        assert_eq!(policies.next().await, Some(policy));
        assert_eq!(
            plans.next().await,
            Some(plan("b")),
            "not the Plan that let go"
        );
        assert!(plans.try_recv().is_err());
    }
}
