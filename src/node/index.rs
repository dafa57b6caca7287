//! The one node index of the process: every Node as the decisions see it ([`NodeInfo`]), and for
//! each operation object that asked ([`NodeIndex::candidates`]) the nodes its selector matches,
//! compiled once per object generation.
//!
//! It is pure data: the runtime feeds it the Node watch and asks it which objects a change
//! concerns. A change concerns an object only if the node enters or leaves the object's selector,
//! or a field a decision reads changes on a node the object matches (its hostname or OS label, the
//! object's own label, `unschedulable`, Ready, the boot ID, a kept annotation, the maintenance
//! taint; for an object that reads them, the node's other conditions). An object is also
//! concerned by the nodes it [follows](NodeIndex::follow) outside its selector (a RebootPolicy's
//! nodes in progress). A kubelet heartbeat, a new image list or a label nobody reads concerns
//! nobody.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::NodeInfo;
use super::budget::{Members, Pool};
use super::holders::Holder;
use crate::common::labels;
use crate::common::selector::Selector;

/// What an object reads of the nodes: the nodes its selector matches, and of those, besides what
/// every decision reads, one label of its own (a Plan's `plan.upgrade.cattle.io/<plan>`) and
/// perhaps the conditions other than Ready (a RebootPolicy's node-condition signals).
#[derive(Debug, Clone)]
pub struct Interest {
    pub selector: Selector,
    pub label: Option<String>,
    pub conditions: bool,
}

/// Candidates a decision may count instead of reading (see [`NodeIndex::unsettled`]): those
/// whose label `label` is `value`, that have a hostname and lack the label `unless` (a Plan's
/// nodes at its hash, not quarantined).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub label: String,
    pub value: String,
    pub unless: String,
}

impl Settled {
    pub fn holds(&self, n: &NodeInfo) -> bool {
        n.labels.get(&self.label) == Some(&self.value)
            && n.labels.contains_key(labels::HOSTNAME)
            && !n.labels.contains_key(&self.unless)
    }
}

/// The nodes an object's own records name, by node name and by `kubernetes.io/hostname`: its
/// decision reads them whatever [`Settled`] says.
#[derive(Debug, Default)]
pub struct Named<'a> {
    pub names: BTreeSet<&'a str>,
    pub hostnames: BTreeSet<&'a str>,
}

#[derive(Debug)]
struct Entry {
    uid: String,
    generation: Option<i64>,
    interest: Interest,
    candidates: BTreeSet<String>,
    /// Nodes read outside the selector (see [`NodeIndex::follow`]).
    followed: BTreeSet<String>,
    /// The candidates the last asked rule does not hold for, kept node by node.
    unsettled: Option<(Settled, BTreeSet<String>)>,
}

impl Entry {
    /// What a decision of this object reads of a node it matches.
    fn view<'a>(&self, n: &'a NodeInfo) -> impl PartialEq + 'a {
        (
            n.labels.get(labels::HOSTNAME),
            n.labels.get(labels::OS),
            self.interest
                .label
                .as_ref()
                .and_then(|l| n.labels.get(l))
                .cloned(),
            n.unschedulable,
            n.ready,
            &n.boot_id,
            &n.annotations,
            &n.uid,
            n.in_maintenance,
            self.interest.conditions.then_some(&n.true_conditions),
        )
    }

    /// Whether a decision of this object reads `n` at all.
    fn reads(&self, n: &NodeInfo) -> bool {
        self.interest.selector.matches(&n.labels) || self.followed.contains(&n.name)
    }
}

/// Every node, and the candidate nodes of every object that has asked for them.
#[derive(Debug, Default)]
pub struct NodeIndex {
    nodes: HashMap<String, Arc<NodeInfo>>,
    /// Node names by `kubernetes.io/hostname` (Plans name nodes by hostname in their status).
    hostnames: HashMap<String, String>,
    /// Nodes carrying the maintenance taint.
    tainted: BTreeSet<String>,
    /// Nodes held by the `slipway.dev/hold` annotation, with who holds each.
    annotated: BTreeMap<String, String>,
    entries: BTreeMap<Holder, Entry>,
    /// The members of each DisruptionBudget's pool, by budget name, with the budget read they
    /// were counted for (see [`NodeIndex::keep_pools`]).
    pools: BTreeMap<String, (Arc<Pool>, Members)>,
    /// Nodes seen since a (re-)list started; swapped in when it ends.
    relisting: Option<HashMap<String, Arc<NodeInfo>>>,
    synced: bool,
    /// The annotations a [`NodeInfo`] keeps (see [`NodeInfo::from_node_keeping`]).
    kept: Vec<&'static str>,
}

impl NodeIndex {
    pub fn new() -> NodeIndex {
        NodeIndex::default()
    }

    /// An index whose nodes keep the annotations named in `kept`, whoever reads the Nodes into
    /// it (the watch, or a write's answer).
    pub fn keeping(kept: Vec<&'static str>) -> NodeIndex {
        NodeIndex {
            kept,
            ..NodeIndex::default()
        }
    }

    /// The annotations its nodes keep.
    pub fn kept(&self) -> &[&'static str] {
        &self.kept
    }

    /// Whether the first full list has been seen.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<Arc<NodeInfo>> {
        self.nodes.get(name).cloned()
    }

    /// Every node, in no particular order.
    pub fn all(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.nodes.values()
    }

    /// The name of the node whose `kubernetes.io/hostname` is `hostname`.
    pub fn node_of_hostname(&self, hostname: &str) -> Option<&str> {
        self.hostnames.get(hostname).map(String::as_str)
    }

    /// The nodes that carry the maintenance taint.
    pub fn tainted(&self) -> impl Iterator<Item = &str> {
        self.tainted.iter().map(String::as_str)
    }

    /// The nodes held by the `slipway.dev/hold` annotation, each with who holds it.
    pub fn annotated(&self) -> impl Iterator<Item = (&str, &str)> {
        self.annotated
            .iter()
            .map(|(n, by)| (n.as_str(), by.as_str()))
    }

    /// Every object that asked for its candidates.
    pub fn readers(&self) -> impl Iterator<Item = &Holder> {
        self.entries.keys()
    }

    /// A node was added or changed; returns the objects it concerns.
    pub fn apply(&mut self, node: NodeInfo) -> Vec<Holder> {
        // An event older than what the index holds of the same node: the index already has this
        // process's own later write of it (see [`NodeIndex::written`]), which includes it.
        if let Some(held) = self.nodes.get(&node.name)
            && held.uid == node.uid
            && let (Some(held), Some(new)) = (held.revision, node.revision)
            && new < held
        {
            return Vec::new();
        }
        let node = Arc::new(node);
        let old = self.nodes.insert(node.name.clone(), node.clone());
        self.forget_lookups(old.as_deref());
        self.hostnames
            .insert(node.hostname().to_string(), node.name.clone());
        if node.in_maintenance {
            self.tainted.insert(node.name.clone());
        }
        if let Some(by) = node.held_by() {
            self.annotated.insert(node.name.clone(), by.to_string());
        }
        self.count(old.as_deref(), Some(&node));
        self.concerned(old.as_deref(), Some(&node))
    }

    /// `node` as this process's own write (a patch) left it, laid over the index before the watch
    /// brings it back, so that the next decision of every kind reads its own write: deciding on
    /// the copy before it would patch the node again, or decide as if the write had not been
    /// made. Kept only over the same node (its uid), when newer: a node deleted meanwhile is not
    /// brought back, and the watch's events older than the write no longer replace it (its event
    /// of the write itself then changes nothing). Returns the objects the change concerns.
    pub fn written(&mut self, node: NodeInfo) -> Vec<Holder> {
        let newer = self.nodes.get(&node.name).is_some_and(|held| {
            held.uid == node.uid
                && matches!((held.revision, node.revision), (Some(h), Some(n)) if n > h)
        });
        match newer {
            true => self.apply(node),
            false => Vec::new(),
        }
    }

    /// A node was deleted; returns the objects it concerns.
    pub fn delete(&mut self, name: &str) -> Vec<Holder> {
        let old = self.nodes.remove(name);
        self.forget_lookups(old.as_deref());
        self.count(old.as_deref(), None);
        self.concerned(old.as_deref(), None)
    }

    fn count(&mut self, old: Option<&NodeInfo>, new: Option<&NodeInfo>) {
        for (pool, members) in self.pools.values_mut() {
            members.change(pool, old, new);
        }
    }

    /// Whether the pools kept are those of `pools` (the same reads of the same budgets).
    pub fn pools_kept(&self, pools: &[Arc<Pool>]) -> bool {
        self.pools.len() == pools.len()
            && (pools.iter()).all(|p| {
                self.pools
                    .get(&p.name)
                    .is_some_and(|(k, _)| Arc::ptr_eq(k, p))
            })
    }

    /// Keeps the members of `pools` from now on, node by node, and forgets other budgets'. A
    /// budget read again (a new generation) is counted again over every node, once.
    pub fn keep_pools(&mut self, pools: &[Arc<Pool>]) {
        self.pools.retain(|name, (kept, _)| {
            pools
                .iter()
                .any(|p| Arc::ptr_eq(p, kept) && p.name == *name)
        });
        for pool in pools {
            if !self.pools.contains_key(&pool.name) {
                let members = Members::of(pool, self.nodes.values().map(AsRef::as_ref));
                self.pools
                    .insert(pool.name.clone(), (pool.clone(), members));
            }
        }
    }

    /// The members of budget `name`'s pool, if they are kept.
    pub fn pool_members(&self, name: &str) -> Option<&Members> {
        self.pools.get(name).map(|(_, m)| m)
    }

    /// Whether `node` exists and `pool` selects it.
    pub fn in_pool(&self, pool: &Pool, node: &str) -> bool {
        self.nodes
            .get(node)
            .is_some_and(|n| pool.selector.matches(&n.labels))
    }

    fn forget_lookups(&mut self, old: Option<&NodeInfo>) {
        if let Some(old) = old {
            if self.hostnames.get(old.hostname()) == Some(&old.name) {
                self.hostnames.remove(old.hostname());
            }
            self.tainted.remove(&old.name);
            self.annotated.remove(&old.name);
        }
    }

    /// The watch starts a (re-)list: nodes seen from now until [`NodeIndex::relist_done`] replace all.
    pub fn relist_start(&mut self) {
        self.relisting = Some(HashMap::new());
    }

    pub fn relisted(&mut self, node: NodeInfo) {
        self.relisting
            .get_or_insert_with(HashMap::new)
            .insert(node.name.clone(), Arc::new(node));
    }

    /// The (re-)list ended: nodes not seen are gone. Returns the objects the differences concern.
    pub fn relist_done(&mut self) -> Vec<Holder> {
        let fresh = self.relisting.take().unwrap_or_default();
        let mut concerned = BTreeSet::new();
        let gone: Vec<String> = self
            .nodes
            .keys()
            .filter(|n| !fresh.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            concerned.extend(self.delete(&name));
        }
        for node in fresh.into_values() {
            if self.nodes.get(&node.name) != Some(&node) {
                concerned.extend(self.apply(Arc::unwrap_or_clone(node)));
            }
        }
        self.synced = true;
        concerned.into_iter().collect()
    }

    /// The candidate nodes of `who` (those its interest's selector matches), in name order. The
    /// interest is built (`interest`), and the candidates found, once per object generation
    /// (`uid`, `generation`); after that the watch keeps them current.
    pub fn candidates(
        &mut self,
        who: &Holder,
        uid: &str,
        generation: Option<i64>,
        interest: impl FnOnce() -> Interest,
    ) -> Vec<Arc<NodeInfo>> {
        self.refresh(who, uid, generation, interest);
        let names = self
            .entries
            .get(who)
            .into_iter()
            .flat_map(|e| e.candidates.iter());
        names.filter_map(|n| self.nodes.get(n).cloned()).collect()
    }

    /// The candidates of `who` (as [`NodeIndex::candidates`]) that `rule` does not hold for, and
    /// those of `named` it holds for, in name order as
    /// [`NodeIndex::candidates`] gives them; and how many candidates are left out. The unsettled are kept node by node for the last
    /// rule asked: a reconcile costs what is not settled, not the whole fleet; a new rule (a new
    /// hash) looks at every candidate once.
    pub fn unsettled(
        &mut self,
        who: &Holder,
        uid: &str,
        generation: Option<i64>,
        interest: impl FnOnce() -> Interest,
        rule: &Settled,
        named: &Named<'_>,
    ) -> (Vec<Arc<NodeInfo>>, usize) {
        self.refresh(who, uid, generation, interest);
        let by_hostname = (named.hostnames.iter()).filter_map(|h| self.hostnames.get(*h));
        let named: BTreeSet<&str> = (named.names.iter().copied())
            .chain(by_hostname.map(String::as_str))
            .collect();
        let nodes = &self.nodes;
        let Some(entry) = self.entries.get_mut(who) else {
            return (Vec::new(), 0);
        };
        if entry
            .unsettled
            .as_ref()
            .is_none_or(|(kept, _)| kept != rule)
        {
            let open = (entry.candidates.iter())
                .filter(|n| nodes.get(*n).is_none_or(|n| !rule.holds(n)))
                .cloned()
                .collect();
            entry.unsettled = Some((rule.clone(), open));
        }
        let open = entry.unsettled.as_ref().map(|(_, o)| o);
        let is_open = |n: &str| open.is_some_and(|o| o.contains(n));
        let named_settled: Vec<&str> = (named.iter().copied())
            .filter(|n| entry.candidates.contains(*n) && !is_open(n))
            .collect();
        let open_count = open.map_or(0, BTreeSet::len);
        let left_out = (entry.candidates.len())
            .saturating_sub(open_count)
            .saturating_sub(named_settled.len());
        let mut found: Vec<Arc<NodeInfo>> = (open.into_iter().flatten().map(String::as_str))
            .chain(named_settled)
            .filter_map(|n| nodes.get(n).cloned())
            .collect();
        found.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        (found, left_out)
    }

    /// Builds the entry of `who` anew for a new object or generation.
    fn refresh(
        &mut self,
        who: &Holder,
        uid: &str,
        generation: Option<i64>,
        interest: impl FnOnce() -> Interest,
    ) {
        let current = self
            .entries
            .get(who)
            .is_some_and(|e| e.uid == uid && e.generation == generation);
        if !current {
            let interest = interest();
            let candidates = self
                .nodes
                .values()
                .filter(|n| interest.selector.matches(&n.labels))
                .map(|n| n.name.clone())
                .collect();
            let followed = self
                .entries
                .remove(who)
                .map(|e| e.followed)
                .unwrap_or_default();
            let entry = Entry {
                uid: uid.to_string(),
                generation,
                interest,
                candidates,
                followed,
                unsettled: None,
            };
            self.entries.insert(who.clone(), entry);
        }
    }

    /// Makes changes of `nodes` concern `who` whether or not its selector matches them (the nodes
    /// a RebootPolicy has in progress stay its own when their labels change). Replaces what `who`
    /// followed before; `who` must have asked for its [candidates](NodeIndex::candidates).
    pub fn follow(&mut self, who: &Holder, nodes: BTreeSet<String>) {
        if let Some(entry) = self.entries.get_mut(who) {
            entry.followed = nodes;
        }
    }

    /// The objects that read `node` (it is their candidate or they follow it), but `except`.
    pub fn readers_of<'a>(
        &'a self,
        node: &'a str,
        except: &'a Holder,
    ) -> impl Iterator<Item = &'a Holder> + 'a {
        self.entries
            .iter()
            .filter(move |(h, e)| {
                *h != except && (e.candidates.contains(node) || e.followed.contains(node))
            })
            .map(|(h, _)| h)
    }

    /// Forgets `who` (it is gone).
    pub fn forget(&mut self, who: &Holder) {
        self.entries.remove(who);
    }

    /// Forgets the objects for which `exists` is false.
    pub fn retain(&mut self, mut exists: impl FnMut(&Holder) -> bool) {
        self.entries.retain(|k, _| exists(k));
    }

    fn concerned(&mut self, old: Option<&NodeInfo>, new: Option<&NodeInfo>) -> Vec<Holder> {
        let mut out = Vec::new();
        for (key, entry) in &mut self.entries {
            let was = old.is_some_and(|n| entry.reads(n));
            let is = new.is_some_and(|n| entry.reads(n));
            let changed = match (old.filter(|_| was), new.filter(|_| is)) {
                (Some(o), Some(n)) => entry.view(o) != entry.view(n),
                (None, None) => false,
                _ => true,
            };
            if let Some(n) = old.or(new) {
                let candidate = new.filter(|n| entry.interest.selector.matches(&n.labels));
                match candidate {
                    Some(_) => entry.candidates.insert(n.name.clone()),
                    None => entry.candidates.remove(&n.name),
                };
                if let Some((rule, open)) = &mut entry.unsettled {
                    match candidate.is_some_and(|c| !rule.holds(c)) {
                        true => open.insert(n.name.clone()),
                        false => open.remove(&n.name),
                    };
                }
            }
            if changed {
                out.push(key.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn node(name: &str, pool: &str) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            uid: format!("uid-{name}"),
            labels: BTreeMap::from([
                (labels::HOSTNAME.to_string(), name.to_string()),
                ("pool".to_string(), pool.to_string()),
            ]),
            ready: true,
            boot_id: "b1".into(),
            ..Default::default()
        }
    }

    fn key(name: &str) -> Holder {
        Holder::Plan {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    /// The candidates of Plan `name` selecting `pool=<pool>`, at `generation`.
    fn ask(i: &mut NodeIndex, name: &str, pool: &str, generation: i64) -> Vec<Arc<NodeInfo>> {
        let selector = if pool.contains('!') {
            Selector::Nothing
        } else {
            Selector::from_label_selector(Some(&LabelSelector {
                match_labels: Some(BTreeMap::from([("pool".to_string(), pool.to_string())])),
                ..Default::default()
            }))
            .unwrap_or(Selector::Nothing)
        };
        i.candidates(&key(name), &format!("uid-{name}"), Some(generation), || {
            Interest {
                selector,
                label: Some(format!("plan.upgrade.cattle.io/{name}")),
                conditions: false,
            }
        })
    }

    fn names(v: &[Arc<NodeInfo>]) -> Vec<&str> {
        v.iter().map(|n| n.name.as_str()).collect()
    }

    fn index() -> NodeIndex {
        let mut i = NodeIndex::new();
        i.relist_start();
        for (n, pool) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
            i.relisted(node(n, pool));
        }
        i.relist_done();
        i
    }

    /// `node(name, pool)` at `revision`, cordoned or not.
    fn node_at(name: &str, pool: &str, revision: u64, cordoned: bool) -> NodeInfo {
        NodeInfo {
            revision: Some(revision),
            unschedulable: cordoned,
            ..node(name, pool)
        }
    }

    fn cordoned(i: &NodeIndex, name: &str) -> bool {
        i.get(name).is_some_and(|n| n.unschedulable)
    }

    #[test]
    fn a_write_is_read_back_before_the_watch_brings_it_and_older_events_do_not_hide_it() {
        let mut i = index();
        ask(&mut i, "pa", "a", 1);
        i.apply(node_at("a1", "a", 10, false));
        // This process cordons a1: the patch's answer is at revision 12.
        assert_eq!(
            i.written(node_at("a1", "a", 12, true)),
            [key("pa")],
            "a change it reads"
        );
        assert!(cordoned(&i, "a1"));
        // The watch then brings an event from before the write (someone else's, at 11): the
        // write's answer includes it, and stays.
        assert!(i.apply(node_at("a1", "a", 11, false)).is_empty());
        assert!(cordoned(&i, "a1"));
        // The watch's event of the write itself changes nothing; a later one is believed.
        assert!(i.apply(node_at("a1", "a", 12, true)).is_empty());
        assert_eq!(i.apply(node_at("a1", "a", 13, false)), [key("pa")]);
        assert!(!cordoned(&i, "a1"));
        // A write answered before an event already held is not laid over it.
        assert!(i.written(node_at("a1", "a", 12, true)).is_empty());
        assert!(!cordoned(&i, "a1"));
    }

    #[test]
    fn a_write_never_brings_back_a_node_deleted_or_replaced_meanwhile() {
        let mut i = index();
        i.delete("a1");
        assert!(i.written(node_at("a1", "a", 12, true)).is_empty());
        assert!(
            i.get("a1").is_none(),
            "deleted before the write's answer came"
        );
        // Another node of that name (a new uid): its events are believed whatever their revision,
        // and a write to the old one is not laid over it.
        i.apply(NodeInfo {
            uid: "uid-old".into(),
            ..node_at("b1", "b", 20, false)
        });
        i.apply(node_at("b1", "b", 15, false));
        assert_eq!(
            i.get("b1").map(|n| n.uid.clone()).as_deref(),
            Some("uid-b1")
        );
        assert!(
            (i.written(NodeInfo {
                uid: "uid-old".into(),
                ..node_at("b1", "b", 30, true)
            }))
            .is_empty()
        );
        assert!(!cordoned(&i, "b1"));
        // A revision that is not a number: the write is not laid over the watch's copy.
        i.apply(NodeInfo {
            revision: None,
            ..node_at("a2", "a", 0, false)
        });
        assert!(i.written(node_at("a2", "a", 5, true)).is_empty());
    }

    #[test]
    fn a_relist_from_before_a_write_does_not_hide_it() {
        let mut i = index();
        i.apply(node_at("a1", "a", 10, false));
        i.written(node_at("a1", "a", 12, true));
        i.relist_start();
        i.relisted(node_at("a1", "a", 11, false));
        i.relisted(node_at("a2", "a", 11, false));
        i.relisted(node_at("b1", "b", 11, false));
        i.relist_done();
        assert!(cordoned(&i, "a1"), "the list was taken before the write");
    }

    #[test]
    fn candidates_are_the_nodes_the_selector_matches() {
        let mut i = index();
        assert!(i.is_synced());
        assert_eq!(names(&ask(&mut i, "pa", "a", 1)), ["a1", "a2"]);
        assert_eq!(names(&ask(&mut i, "pb", "b", 1)), ["b1"]);
        assert!(ask(&mut i, "none", "z", 1).is_empty());
    }

    #[test]
    fn changes_no_decision_reads_concern_no_plan() {
        let mut i = index();
        ask(&mut i, "pa", "a", 1);
        let mut n = node("a1", "a");
        n.labels.insert("churn".into(), "1".into());
        assert!(i.apply(n).is_empty(), "an unrelated label");
        assert!(i.apply(node("a1", "a")).is_empty(), "no change at all");
    }

    #[test]
    fn changes_a_decision_reads_concern_the_plans_that_match() {
        let mut i = index();
        ask(&mut i, "pa", "a", 1);
        ask(&mut i, "pb", "b", 1);
        let mut n = node("a1", "a");
        n.boot_id = "b2".into();
        assert_eq!(i.apply(n.clone()), [key("pa")]);
        n.unschedulable = true;
        assert_eq!(i.apply(n.clone()), [key("pa")]);
        n.ready = false;
        assert_eq!(i.apply(n.clone()), [key("pa")]);
        n.labels
            .insert("plan.upgrade.cattle.io/pa".into(), "h".into());
        assert_eq!(i.apply(n.clone()), [key("pa")]);
        // Another Plan's label is not this Plan's business.
        n.labels
            .insert("plan.upgrade.cattle.io/pb".into(), "h".into());
        assert!(i.apply(n).is_empty());
    }

    #[test]
    fn entering_and_leaving_a_selector_moves_candidates() {
        let mut i = index();
        ask(&mut i, "pa", "a", 1);
        ask(&mut i, "pb", "b", 1);
        assert_eq!(i.apply(node("a1", "b")), [key("pa"), key("pb")]);
        assert_eq!(names(&ask(&mut i, "pa", "a", 1)), ["a2"]);
        assert_eq!(names(&ask(&mut i, "pb", "b", 1)), ["a1", "b1"]);
        assert_eq!(i.apply(node("new", "a")), [key("pa")]);
        assert_eq!(i.delete("a2"), [key("pa")]);
        assert_eq!(names(&ask(&mut i, "pa", "a", 1)), ["new"]);
    }

    #[test]
    fn a_new_generation_compiles_the_selector_again() {
        let mut i = index();
        assert_eq!(names(&ask(&mut i, "p", "a", 1)), ["a1", "a2"]);
        assert_eq!(names(&ask(&mut i, "p", "b", 2)), ["b1"]);
    }

    #[test]
    fn a_relist_finds_deleted_and_changed_nodes() {
        let mut i = index();
        ask(&mut i, "pa", "a", 1);
        i.relist_start();
        i.relisted(node("a1", "a"));
        let mut changed = node("b1", "a");
        changed.boot_id = "b9".into();
        i.relisted(changed);
        assert_eq!(i.relist_done(), [key("pa")]);
        assert_eq!(names(&ask(&mut i, "pa", "a", 1)), ["a1", "b1"]);
        assert_eq!(i.len(), 2);
    }

    #[test]
    fn a_selector_that_selects_nothing_has_no_candidates() {
        let mut i = index();
        assert!(ask(&mut i, "bad", "!", 1).is_empty());
    }

    #[test]
    fn hostnames_and_taints_are_looked_up_without_a_scan() {
        let mut i = index();
        assert_eq!(i.node_of_hostname("a1"), Some("a1"));
        let mut renamed = node("a1", "a");
        renamed
            .labels
            .insert(labels::HOSTNAME.into(), "host-a1".into());
        renamed.in_maintenance = true;
        i.apply(renamed);
        assert_eq!(i.node_of_hostname("a1"), None);
        assert_eq!(i.node_of_hostname("host-a1"), Some("a1"));
        assert_eq!(i.tainted().collect::<Vec<_>>(), ["a1"]);
        i.delete("a1");
        assert_eq!(i.node_of_hostname("host-a1"), None);
        assert_eq!(i.tainted().count(), 0);
    }

    #[test]
    fn conditions_concern_only_objects_that_read_them() {
        let mut i = index();
        ask(&mut i, "pa", "a", 1);
        let policy = Holder::Reboot { policy: "r".into() };
        i.candidates(&policy, "uid-r", Some(1), || Interest {
            selector: Selector::Requirements(Vec::new()),
            label: None,
            conditions: true,
        });
        let mut n = node("a1", "a");
        n.true_conditions
            .insert("KernelDeadlock".into(), "2026-01-01T00:00:00Z".into());
        assert_eq!(i.apply(n), [policy]);
    }

    #[test]
    fn followed_nodes_concern_their_reader_outside_its_selector() {
        let mut i = index();
        ask(&mut i, "pa", "a", 1);
        i.follow(&key("pa"), BTreeSet::from(["b1".to_string()]));
        let mut n = node("b1", "b");
        n.boot_id = "b2".into();
        assert_eq!(i.apply(n.clone()), [key("pa")]);
        assert_eq!(
            names(&ask(&mut i, "pa", "a", 1)),
            ["a1", "a2"],
            "not a candidate"
        );
        assert_eq!(
            i.readers_of("b1", &key("other")).collect::<Vec<_>>(),
            [&key("pa")]
        );
        assert_eq!(i.readers_of("b1", &key("pa")).count(), 0, "not itself");
        i.follow(&key("pa"), BTreeSet::new());
        n.boot_id = "b3".into();
        assert!(i.apply(n).is_empty());
    }

    #[test]
    fn forgotten_plans_are_not_concerned() {
        let mut i = index();
        ask(&mut i, "pa", "a", 1);
        i.retain(|_| false);
        let mut n = node("a1", "a");
        n.boot_id = "b2".into();
        assert!(i.apply(n).is_empty());
    }

    fn at(hash: &str) -> Settled {
        Settled {
            label: "plan.upgrade.cattle.io/pa".into(),
            value: hash.into(),
            unless: "quarantine.slipway.dev/pa".into(),
        }
    }

    /// Plan `pa`'s (pool `a`) unsettled candidates at `hash` and those of `named`, and the count
    /// of the others.
    fn unsettled(i: &mut NodeIndex, hash: &str, named: &[&str]) -> (Vec<String>, usize) {
        ask(i, "pa", "a", 1);
        let named = Named {
            names: named.iter().copied().collect(),
            ..Named::default()
        };
        let (nodes, left) = i.unsettled(
            &key("pa"),
            "uid-pa",
            Some(1),
            || unreachable!("asked before"),
            &at(hash),
            &named,
        );
        (nodes.iter().map(|n| n.name.clone()).collect(), left)
    }

    fn labelled(name: &str, pool: &str, labels: &[(&str, &str)]) -> NodeInfo {
        let mut n = node(name, pool);
        for (k, v) in labels {
            n.labels.insert(k.to_string(), v.to_string());
        }
        n
    }

    #[test]
    fn settled_candidates_are_counted_and_the_rest_kept_node_by_node() {
        let mut i = index();
        let h1 = ("plan.upgrade.cattle.io/pa", "h1");
        i.apply(labelled("a1", "a", &[h1]));
        assert_eq!(unsettled(&mut i, "h1", &[]), (vec!["a2".into()], 1));
        let named = unsettled(&mut i, "h1", &["a1", "b1"]);
        assert_eq!(
            named,
            (vec!["a1".into(), "a2".into()], 0),
            "b1 is no candidate"
        );
        i.apply(labelled("a2", "a", &[h1]));
        assert_eq!(unsettled(&mut i, "h1", &[]), (vec![], 2));
        i.apply(labelled(
            "a2",
            "a",
            &[h1, ("quarantine.slipway.dev/pa", "h1")],
        ));
        assert_eq!(unsettled(&mut i, "h1", &[]), (vec!["a2".into()], 1));
        assert_eq!(unsettled(&mut i, "h2", &[]).1, 0, "a new hash settles none");
        i.apply(labelled("a3", "a", &[h1]));
        i.apply(labelled("a1", "b", &[h1]));
        assert_eq!(
            unsettled(&mut i, "h1", &[]),
            (vec!["a2".into()], 1),
            "a1 left"
        );
        let mut nameless = labelled("a4", "a", &[h1]);
        nameless.labels.remove(labels::HOSTNAME);
        i.apply(nameless);
        assert_eq!(
            unsettled(&mut i, "h1", &[]),
            (vec!["a2".into(), "a4".into()], 1)
        );
    }

    fn pool_of(name: &str, pool: &str) -> Arc<Pool> {
        let budget: crate::node::budget::DisruptionBudget =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "spec": {"maxUnavailable": 1, "nodeSelector": {"matchLabels": {"pool": pool}}},
            }))
            .unwrap_or_default();
        Arc::new(Pool::new(&budget))
    }

    /// What the index keeps of each pool is what counting every node again gives.
    fn assert_kept_is_counted(i: &NodeIndex, pools: &[Arc<Pool>]) {
        assert!(i.pools_kept(pools));
        for p in pools {
            let counted = Members::of(p, i.all().map(AsRef::as_ref));
            assert_eq!(i.pool_members(&p.name), Some(&counted), "{}", p.name);
        }
    }

    #[test]
    fn pools_are_kept_node_by_node_and_counted_again_for_a_new_read() {
        let mut i = index();
        let pools = vec![pool_of("a", "a"), pool_of("b", "b")];
        assert!(!i.pools_kept(&pools));
        i.keep_pools(&pools);
        assert_kept_is_counted(&i, &pools);
        assert_eq!(i.pool_members("a").map(|m| m.count), Some(2));
        let mut down = node("a1", "a");
        down.ready = false;
        i.apply(down);
        let mut moved = node("a2", "b");
        moved.unschedulable = true;
        i.apply(moved);
        i.delete("b1");
        assert_kept_is_counted(&i, &pools);
        assert_eq!(
            i.pool_members("b").map(|m| m.down.clone()),
            Some(BTreeSet::from(["a2".to_string()]))
        );
        // The same budget read again (a new generation): counted afresh; a budget gone: forgotten.
        let again = vec![pool_of("a", "b")];
        assert!(!i.pools_kept(&again));
        i.keep_pools(&again);
        assert_kept_is_counted(&i, &again);
        assert_eq!(i.pool_members("b"), None);
    }

    /// `info` deleted (`op` 0), seen in a re-list (1) or applied.
    fn change(i: &mut NodeIndex, info: NodeInfo, op: u8) {
        match op {
            0 => {
                i.delete(&info.name);
            }
            1 => {
                let others: Vec<NodeInfo> = (i.all())
                    .filter(|o| o.name != info.name)
                    .map(|o| NodeInfo::clone(o))
                    .collect();
                i.relist_start();
                others.into_iter().for_each(|o| i.relisted(o));
                i.relisted(info);
                i.relist_done();
            }
            _ => {
                i.apply(info);
            }
        }
    }

    proptest::proptest! {
        /// After any sequence of node changes, deletions and re-lists, the unsettled candidates
        /// kept are a recount's.
        #[test]
        fn kept_unsettled_match_a_recount(
            steps in proptest::collection::vec((0..6usize, 0..2usize, 0..16u8, 0..4u8), 1..40)
        ) {
            let mut i = index();
            unsettled(&mut i, "h1", &[]);
            for (n, pool, state, op) in steps {
                let name = format!("n{n}");
                let mut info = node(&name, ["a", "b"][pool]);
                let value = ["h1", "h0"][usize::from(state & 1)];
                if state & 2 == 0 {
                    info.labels.insert("plan.upgrade.cattle.io/pa".into(), value.into());
                }
                if state & 4 != 0 {
                    info.labels.insert("quarantine.slipway.dev/pa".into(), "h1".into());
                }
                if state & 8 != 0 {
                    info.labels.remove(labels::HOSTNAME);
                }
                change(&mut i, info, op);
                let all = ask(&mut i, "pa", "a", 1);
                let open: Vec<String> = (all.iter())
                    .filter(|n| !at("h1").holds(n))
                    .map(|n| n.name.clone())
                    .collect();
                let left = all.len() - open.len();
                proptest::prop_assert_eq!(unsettled(&mut i, "h1", &[]), (open, left));
            }
        }

        /// After any sequence of node changes, deletions and re-lists, the kept members are a
        /// recount's.
        #[test]
        fn kept_pools_match_a_recount(
            steps in proptest::collection::vec((0..6usize, 0..3usize, 0..4u8, 0..4u8), 1..40)
        ) {
            let mut i = index();
            let pools = vec![pool_of("a", "a"), pool_of("b", "b"), pool_of("c", "c")];
            i.keep_pools(&pools);
            for (n, pool, state, op) in steps {
                let name = format!("n{n}");
                let mut info = node(&name, ["a", "b", "c"][pool]);
                info.ready = state & 1 == 0;
                info.unschedulable = state & 2 != 0;
                change(&mut i, info, op);
                assert_kept_is_counted(&i, &pools);
            }
        }
    }
}
