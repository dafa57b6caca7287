//! What every operation of the process shares: the chores (client, lease, recorder), the node
//! index, and the budget: this process's claims on nodes, and the objects whose own records say
//! which nodes they hold.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use futures::FutureExt;
use jiff::Timestamp;

use super::ReadyFuture;
use super::budget::Budgets;
use super::checks::{CheckAccount, CheckReader};
use super::chores::{Chores, NodePatched};
use super::error::Error;
use super::metrics::Metrics;
use super::watch::NodeTriggers;
use k8s_openapi::api::core::v1::ObjectReference;

use crate::node::NodeInfo;
use crate::node::budget::{Budget, Pool, PoolState, Refusal, reason_of};
use crate::node::change::NodeChange;
use crate::node::disruption::DisruptionSpec;
use crate::node::holders::{Hold, Holder, NodeClaims, counted, held_against};
use crate::node::index::NodeIndex;

/// The objects of one kind whose own records say which nodes they hold: what survives a restart,
/// until each object's first decision claims its nodes again. Each operation's shell gives one.
pub trait HoldSource: Send + Sync {
    /// The nodes the objects hold by their own records.
    fn holds(&self, nodes: &NodeIndex, now: Timestamp) -> Vec<Hold>;
    /// `Some`: `holder` is of this kind, and whether its object still exists; `None`: not of this
    /// kind.
    fn exists(&self, holder: &Holder) -> Option<bool>;
    /// What the records are read from, and when it has its first full list (until then, the
    /// holds of the objects not listed yet are missing).
    fn ready(&self) -> (&'static str, ReadyFuture);
    /// `holder`'s object, if it is of this kind and exists: what it asks around each disruption.
    fn object(&self, holder: &Holder) -> Option<HolderObject>;
}

/// An object that holds nodes, as the chores around each disruption read it.
#[derive(Debug, Clone, PartialEq)]
pub struct HolderObject {
    /// Its `spec.disruption`.
    pub disruption: Option<DisruptionSpec>,
    /// Where an event about it goes.
    pub reference: ObjectReference,
}

impl HolderObject {
    pub fn of<K: kube::Resource<DynamicType = ()>>(
        obj: &K,
        disruption: Option<&DisruptionSpec>,
    ) -> HolderObject {
        HolderObject {
            disruption: disruption.cloned(),
            reference: obj.object_ref(&()),
        }
    }
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
    /// Whose rights every health check reads with (`--health-check-account`).
    pub check_account: CheckAccount,
    nodes: Arc<RwLock<NodeIndex>>,
    claims: Mutex<NodeClaims>,
    sources: HoldSources,
    /// Wakes the objects that wait for a node another lets go of.
    triggers: Arc<NodeTriggers>,
    /// The cluster's DisruptionBudgets; `None`: the process reads none (the budget is then only
    /// who holds which node).
    budgets: Option<Arc<Budgets>>,
    /// Told whenever this process's claims change: the chores around each disruption (silences)
    /// act at once rather than at their next round.
    holds_changed: tokio::sync::Notify,
    /// Each object's next batch (`spec.disruption.preferNoSchedule`), for the chore that taints
    /// them ([`super::next_up`]).
    next: Mutex<BTreeMap<Holder, BTreeSet<String>>>,
    next_changed: tokio::sync::Notify,
}

/// How long after letting go of nodes their readers are woken: the status write that ends the
/// holder's own record must reach the caches first, or the woken decision still finds the node
/// held (and looks again only at its recheck).
const WAKE_DELAY: Duration = Duration::from_secs(1);
/// How long a decision waits for a cache's first full list before its reconcile fails (and is
/// retried).
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

impl Shared {
    pub fn new(
        chores: Chores,
        controller_name: String,
        namespace: String,
        nodes: Arc<RwLock<NodeIndex>>,
        sources: HoldSources,
        triggers: Arc<NodeTriggers>,
        budgets: Option<Arc<Budgets>>,
    ) -> Shared {
        Shared {
            chores,
            controller_name,
            check_account: CheckAccount::in_namespace(&namespace),
            namespace,
            nodes,
            claims: Mutex::default(),
            sources,
            triggers,
            budgets,
            holds_changed: tokio::sync::Notify::new(),
            next: Mutex::default(),
            next_changed: tokio::sync::Notify::new(),
        }
    }

    /// The same, its health checks reading with `account`'s rights.
    pub fn with_check_account(self, account: CheckAccount) -> Shared {
        Shared {
            check_account: account,
            ..self
        }
    }

    /// A reader of health checks' objects, reading what the health checks' account may read.
    pub fn check_reader(&self) -> CheckReader {
        CheckReader::new(self.chores.client().clone(), self.check_account.clone())
    }

    /// Notified when this process's claims on nodes change.
    pub fn holds_changed(&self) -> &tokio::sync::Notify {
        &self.holds_changed
    }

    pub fn chores(&self) -> &Chores {
        &self.chores
    }

    pub fn metrics(&self) -> &Metrics {
        self.chores.metrics()
    }

    pub fn nodes(&self) -> RwLockReadGuard<'_, NodeIndex> {
        self.nodes.read().unwrap_or_else(|e| e.into_inner())
    }

    pub fn nodes_mut(&self) -> RwLockWriteGuard<'_, NodeIndex> {
        self.nodes.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies `change` to its node, and lays the node as the patch left it over the index at
    /// once ([`NodeIndex::written`]): the next decision of every kind reads this process's own
    /// write, though the watch has not brought it back yet, and the objects the change concerns
    /// are woken now rather than by that event. `false`: the node is gone.
    pub async fn patch_node(&self, change: &NodeChange) -> Result<bool, Error> {
        let patched = self.chores.patch_node(change).await?;
        if let NodePatched::Patched(node) = &patched {
            let concerned = {
                let mut index = self.nodes_mut();
                let node = NodeInfo::from_node_keeping(node, index.kept());
                index.written(node)
            };
            self.triggers.send(concerned);
        }
        Ok(patched.is_there())
    }

    /// Waits until every cache the budget is read from has its first full list: the node index,
    /// every kind's records and the DisruptionBudgets. Every decision waits for it (the runtime's
    /// reconcile, `explain`, the ledgers): after a restart the process's claims are empty and the
    /// records are all there is, so a node whose holder is not listed yet (or a Plan's, named by
    /// hostname and found through the index) would look free, and a node missing from an index
    /// that has not listed them all yet is not gone.
    pub async fn synced(&self) -> Result<(), Error> {
        let nodes = super::watch::index_ready(self.nodes.clone());
        let sources = self.sources.iter().map(|s| s.ready());
        let budgets = self
            .budgets
            .iter()
            .map(|b| ("disruption budget", b.ready()));
        for (what, ready) in std::iter::once(("node", nodes))
            .chain(sources)
            .chain(budgets)
        {
            match tokio::time::timeout(SYNC_TIMEOUT, ready).await {
                Ok(Ok(())) => {}
                _ => return Err(Error::CacheStopped(what)),
            }
        }
        Ok(())
    }

    /// Whether every cache the budget is read from has its first full list (see
    /// [`Shared::synced`]), without waiting.
    pub fn is_synced(&self) -> bool {
        self.synced().now_or_never().is_some_and(|r| r.is_ok())
    }

    /// Decides, and claims the nodes the decision holds, in one step of the process's one budget
    /// (under the claims' lock, so that no other operation takes a node in between). `decide`
    /// gets the [`Budget`]: the nodes `me` must not take, with who holds each, and the
    /// DisruptionBudgets that limit it. The nodes the decision newly holds are checked against
    /// that budget again here, whatever the kind's core did. An object being deleted claims nothing
    /// new (it lets go once its cleanup is done). `Err`: a node the decision holds may not be
    /// taken, and why; nothing was claimed.
    pub fn decide_and_claim<D>(
        &self,
        me: &Holder,
        deleting: bool,
        decide: impl FnOnce(&Budget) -> D,
        holds: impl FnOnce(&D) -> &BTreeSet<String>,
    ) -> Result<D, (String, Refusal)> {
        let mut claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        let now = super::clock::now();
        let persisted = self.persisted_holds(now);
        let budget = self.budget_of(me, &claims, &persisted, now);
        let decision = decide(&budget);
        if deleting {
            return Ok(decision);
        }
        let wanted = holds(&decision);
        let mine: BTreeSet<&str> = claims
            .all()
            .filter(|(_, hs)| hs.contains(me))
            .map(|(n, _)| n)
            // Its record too, lagging or not: a maintenance that waits for its node reserves it
            // through its record, and must not be refused the node it waits for.
            .chain(
                (persisted.iter())
                    .filter(|h| h.holder == *me)
                    .map(|h| h.node.as_str()),
            )
            .collect();
        let mut check = budget;
        for node in mine.iter().filter(|n| !wanted.contains(**n)) {
            check.release(node);
        }
        let index = self.nodes();
        for node in wanted.iter().filter(|n| !mine.contains(n.as_str())) {
            let info = index.get(node);
            let taken = match &info {
                Some(info) => check.take(info),
                None => check
                    .holder_of(node)
                    .map_or(Ok(()), |h| Err(Refusal::Held(h.clone()))),
            };
            taken.map_err(|refusal| (node.clone(), refusal))?;
        }
        drop(index);
        let changed =
            mine.len() != wanted.len() || wanted.iter().any(|n| !mine.contains(n.as_str()));
        claims
            .set(me, wanted)
            .map_err(|(node, holder)| (node, Refusal::Held(holder)))?;
        if changed {
            self.holds_changed.notify_one();
        }
        if changed && let Some(b) = &self.budgets {
            b.changed.notify_one();
        }
        Ok(decision)
    }

    /// What a decision of `me` may take now (`slipway explain` decides with it, claiming nothing).
    pub fn budget_for(&self, me: &Holder) -> Budget {
        let claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        let now = super::clock::now();
        let persisted = self.persisted_holds(now);
        self.budget_of(me, &claims, &persisted, now)
    }

    fn budget_of(
        &self,
        me: &Holder,
        claims: &NodeClaims,
        persisted: &[Hold],
        now: Timestamp,
    ) -> Budget {
        let pools = self.budgets.as_ref().map(|b| b.pools()).unwrap_or_default();
        let index = self.nodes_keeping(&pools);
        let held = held_against(me, claims, persisted, index.tainted(), index.annotated());
        let pools = measured(me, &pools, &index, claims, persisted, now);
        match reason_of(me) {
            Some(reason) if !pools.is_empty() => Budget::new(held, &pools, reason),
            _ => Budget::holds_only(held),
        }
    }

    /// The pools of every DisruptionBudget, measured now (for a decision or a ledger).
    pub fn measure_pools(&self, pools: &[Arc<Pool>], now: Timestamp) -> Vec<PoolState> {
        self.measure_pools_held(pools, &self.holders_by_node(), now)
    }

    /// The pools of every DisruptionBudget with `holders` ([`Shared::holders_by_node`]) holding
    /// their nodes: a ledger counts and names the holders of one reading.
    pub fn measure_pools_held(
        &self,
        pools: &[Arc<Pool>],
        holders: &BTreeMap<String, Vec<Holder>>,
        now: Timestamp,
    ) -> Vec<PoolState> {
        let index = self.nodes_keeping(pools);
        let held: BTreeSet<String> = holders.keys().cloned().collect();
        let none = BTreeSet::new();
        (pools.iter())
            .map(|p| measure(p, &index, &held, &none, now))
            .collect()
    }

    /// The node index, keeping the members of `pools` (counted once per budget read, then kept
    /// node by node by the watch), so that measuring a pool costs its held nodes, not the fleet.
    fn nodes_keeping(&self, pools: &[Arc<Pool>]) -> RwLockReadGuard<'_, NodeIndex> {
        let index = self.nodes();
        if index.pools_kept(pools) {
            return index;
        }
        drop(index);
        self.nodes_mut().keep_pools(pools);
        self.nodes()
    }

    /// Every node a slipway operation holds, with its holders, as a budget counts them
    /// ([`counted`]).
    pub fn holders_by_node(&self) -> BTreeMap<String, Vec<Holder>> {
        let claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        let persisted = self.persisted_holds(super::clock::now());
        let index = self.nodes();
        counted(&claims, &persisted, index.tainted())
    }

    /// The object behind `holder`, if it exists (and is an operation's).
    pub fn holder_object(&self, holder: &Holder) -> Option<HolderObject> {
        self.sources.iter().find_map(|s| s.object(holder))
    }

    /// Wakes every object that reads nodes: a budget changed.
    pub fn wake_all(&self) {
        let readers: Vec<Holder> = self.nodes().readers().cloned().collect();
        self.triggers.send(readers);
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
        let released: Vec<&String> = before.difference(&now).collect();
        if released.is_empty() {
            return;
        }
        if let Some(b) = &self.budgets {
            b.changed.notify_one();
        }
        let readers: BTreeSet<Holder> = {
            let index = self.nodes();
            match self.budgets.as_ref().is_some_and(|b| b.any()) {
                // The room a node leaves in its pools may be what any other object waits for.
                true => index.readers().filter(|h| *h != me).cloned().collect(),
                false => released
                    .iter()
                    .flat_map(|node| index.readers_of(node, me).cloned().collect::<Vec<_>>())
                    .collect(),
            }
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

    /// Lets go of every node `me` holds (and of its next batch).
    pub fn release(&self, me: &Holder) {
        self.claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release_all(me);
        self.holds_changed.notify_one();
        self.set_next(me, BTreeSet::new());
    }

    /// `me`'s next batch, as its last decision named it.
    pub fn set_next(&self, me: &Holder, nodes: BTreeSet<String>) {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let changed = match nodes.is_empty() {
            true => next.remove(me).is_some(),
            false => next.insert(me.clone(), nodes.clone()) != Some(nodes),
        };
        if changed {
            self.next_changed.notify_one();
        }
    }

    /// Every object's next batch together, and the nodes this process's objects hold.
    pub fn next_and_held(&self) -> (BTreeSet<String>, BTreeSet<String>) {
        let next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let union = next.values().flatten().cloned().collect();
        let claims = self.claims.lock().unwrap_or_else(|e| e.into_inner());
        let held = claims.all().map(|(n, _)| n.to_string()).collect();
        (union, held)
    }

    /// Notified when a next batch changes.
    pub fn next_changed(&self) -> &tokio::sync::Notify {
        &self.next_changed
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

/// The pools of `pools`, as `me` decides on them.
fn measured(
    me: &Holder,
    pools: &[Arc<Pool>],
    index: &NodeIndex,
    claims: &NodeClaims,
    persisted: &[Hold],
    now: Timestamp,
) -> Vec<PoolState> {
    if pools.is_empty() {
        return Vec::new();
    }
    let (mut others, mut mine) = (BTreeSet::new(), BTreeSet::new());
    for (node, holders) in counted(claims, persisted, index.tainted()) {
        for holder in holders {
            match holder == *me {
                true => mine.insert(node.clone()),
                false => others.insert(node.clone()),
            };
        }
    }
    (pools.iter())
        .map(|p| measure(p, index, &others, &mine, now))
        .collect()
}

/// One pool from the members the index keeps (or, not kept, from every node).
fn measure(
    pool: &Pool,
    index: &NodeIndex,
    held: &BTreeSet<String>,
    mine: &BTreeSet<String>,
    now: Timestamp,
) -> PoolState {
    match index.pool_members(&pool.name) {
        Some(kept) => pool.measure_kept(kept, |n| index.in_pool(pool, n), held, mine, now),
        None => pool.measure_for(index.all().map(AsRef::as_ref), held, mine, now),
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

        fn ready(&self) -> (&'static str, ReadyFuture) {
            ("records", Box::pin(async { Ok(()) }))
        }

        fn object(&self, _holder: &Holder) -> Option<HolderObject> {
            None
        }
    }

    fn plan(name: &str) -> Holder {
        Holder::Plan {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn hold(node: &str, holder: Holder) -> Hold {
        Hold::new(node, holder)
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
            None,
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
        let decided = |budget: &Budget| (budget.held().clone(), BTreeSet::new());
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

    #[tokio::test]
    async fn the_budget_counts_an_object_s_claims_once_it_decided_not_its_lagging_record() {
        let shared = shared(records());
        let a = plan("a");
        // Plan a's cached record still says n1; its decision here let go of n1 and took n3.
        claim(&shared, &a, "n3");
        let counted: Vec<(String, Vec<Holder>)> = shared.holders_by_node().into_iter().collect();
        assert_eq!(
            counted,
            [
                (
                    "n2".to_string(),
                    vec![Holder::Maintenance { name: "m".into() }]
                ),
                ("n3".to_string(), vec![a.clone()]),
            ]
        );
        let me = Holder::Reboot { policy: "p".into() };
        assert_eq!(
            held_against(&shared, &me).get("n1"),
            Some(&a),
            "until the record catches up, no other operation takes the node"
        );
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

    #[tokio::test]
    async fn a_node_patch_is_read_back_at_once_by_every_kind() {
        let api = ApiServer::new();
        let answered = |rv: &str| {
            serde_json::json!({
                "metadata": {"name": "n1", "uid": "u1", "resourceVersion": rv},
                "spec": {"unschedulable": true},
            })
        };
        api.on(
            "PATCH",
            "nodes/n1",
            crate::runtime::testing::Answer::Json(200, answered("7")),
        );
        let triggers = Arc::new(NodeTriggers::default());
        let mut policies = triggers.concerned(|h| matches!(h, Holder::Reboot { .. }));
        let before = |rv: u64| NodeInfo {
            name: "n1".into(),
            uid: "u1".into(),
            revision: Some(rv),
            ..Default::default()
        };
        let shared = Shared::new(
            chores(&api.client()),
            "c".into(),
            "ns".into(),
            Arc::new(RwLock::new(crate::runtime::testing::node_index(vec![
                before(5),
            ]))),
            HoldSources::new(),
            triggers,
            None,
        );
        let policy = Holder::Reboot { policy: "p".into() };
        shared
            .nodes_mut()
            .candidates(&policy, "uid", Some(1), || crate::node::index::Interest {
                selector: crate::common::selector::Selector::Requirements(Vec::new()),
                label: None,
                conditions: false,
            });
        // A Plan cordons n1: a RebootPolicy that reads it is woken, and reads the cordon, before
        // the watch brings the node back.
        let cordon = NodeChange::of("n1").cordon(true);
        assert!(matches!(shared.patch_node(&cordon).await, Ok(true)));
        assert_eq!(policies.try_recv().ok(), Some(policy));
        let read = shared.nodes().get("n1").expect("n1");
        assert!(read.unschedulable && read.revision == Some(7), "{read:?}");
        // The watch's event from before the patch does not hide it.
        shared.nodes_mut().apply(before(6));
        assert!(shared.nodes().get("n1").is_some_and(|n| n.unschedulable));
        // Gone meanwhile: told so, and nothing is brought back.
        api.on(
            "PATCH",
            "nodes/n1",
            crate::runtime::testing::Answer::Fail(404, "NotFound"),
        );
        shared.nodes_mut().delete("n1");
        assert!(matches!(shared.patch_node(&cordon).await, Ok(false)));
        assert!(shared.nodes().get("n1").is_none());
    }
}
