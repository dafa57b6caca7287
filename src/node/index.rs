//! The one node index of the process: every Node as the decisions see it ([`NodeInfo`]), and for
//! each Plan the nodes its selector matches, compiled once per Plan generation.
//!
//! It is pure data: the controller feeds it the Node watch and asks it which Plans a change
//! concerns. A change concerns a Plan only if the node enters or leaves the Plan's selector, or a
//! field a decision reads changes on a node the Plan matches (its hostname or OS label, the
//! Plan's own label, `unschedulable`, Ready, the boot ID, a kept annotation, the maintenance taint). A kubelet heartbeat,
//! a new image list or a label no Plan reads concerns nobody.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::common::selector::Selector;
use crate::node::NodeInfo;
use crate::plan::api::{Plan, labels};

/// A Plan, by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PlanKey {
    pub namespace: String,
    pub name: String,
}

impl PlanKey {
    pub fn of(plan: &Plan) -> PlanKey {
        PlanKey {
            namespace: plan.metadata.namespace.clone().unwrap_or_default(),
            name: plan.metadata.name.clone().unwrap_or_default(),
        }
    }
}

#[derive(Debug)]
struct PlanEntry {
    uid: String,
    generation: Option<i64>,
    /// The Plan's `nodeSelector`; an invalid one selects nothing (the decision reports it).
    selector: Selector,
    plan_label: String,
    candidates: BTreeSet<String>,
}

impl PlanEntry {
    /// What a decision of this Plan reads of a node it matches.
    fn view<'a>(&self, n: &'a NodeInfo) -> impl PartialEq + 'a {
        (
            n.labels.get(labels::HOSTNAME),
            n.labels.get(labels::OS),
            n.labels.get(&self.plan_label).cloned(),
            n.unschedulable,
            n.ready,
            &n.boot_id,
            &n.annotations,
            &n.uid,
            n.in_maintenance,
        )
    }
}

/// Every node, and the candidate nodes of every Plan that has been registered.
#[derive(Debug, Default)]
pub struct NodeIndex {
    nodes: HashMap<String, Arc<NodeInfo>>,
    plans: BTreeMap<PlanKey, PlanEntry>,
    /// Nodes seen since a (re-)list started; swapped in when it ends.
    relisting: Option<HashMap<String, Arc<NodeInfo>>>,
    synced: bool,
}

impl NodeIndex {
    pub fn new() -> NodeIndex {
        NodeIndex::default()
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

    /// A node was added or changed; returns the Plans it concerns.
    pub fn apply(&mut self, node: NodeInfo) -> Vec<PlanKey> {
        let node = Arc::new(node);
        let old = self.nodes.insert(node.name.clone(), node.clone());
        self.concerned(old.as_deref(), Some(&node))
    }

    /// A node was deleted; returns the Plans it concerns.
    pub fn delete(&mut self, name: &str) -> Vec<PlanKey> {
        let old = self.nodes.remove(name);
        self.concerned(old.as_deref(), None)
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

    /// The (re-)list ended: nodes not seen are gone. Returns the Plans the differences concern.
    pub fn relist_done(&mut self) -> Vec<PlanKey> {
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

    /// The Plan's candidate nodes (those its selector matches), in name order. The selector is
    /// compiled, and the candidates found, once per Plan generation; after that the watch keeps
    /// them current.
    pub fn candidates(&mut self, plan: &Plan) -> Vec<Arc<NodeInfo>> {
        let key = PlanKey::of(plan);
        let uid = plan.metadata.uid.clone().unwrap_or_default();
        let generation = plan.metadata.generation;
        let current = self
            .plans
            .get(&key)
            .is_some_and(|e| e.uid == uid && e.generation == generation);
        if !current {
            let selector = Selector::from_label_selector(plan.spec.node_selector.as_ref())
                .unwrap_or(Selector::Nothing);
            let candidates = self
                .nodes
                .values()
                .filter(|n| selector.matches(&n.labels))
                .map(|n| n.name.clone())
                .collect();
            let entry = PlanEntry {
                uid,
                generation,
                selector,
                plan_label: labels::plan_node_label(&key.name),
                candidates,
            };
            self.plans.insert(key.clone(), entry);
        }
        self.plans
            .get(&key)
            .into_iter()
            .flat_map(|e| e.candidates.iter())
            .filter_map(|n| self.nodes.get(n).cloned())
            .collect()
    }

    /// Forgets the Plans for which `exists` is false.
    pub fn retain_plans(&mut self, mut exists: impl FnMut(&PlanKey) -> bool) {
        self.plans.retain(|k, _| exists(k));
    }

    fn concerned(&mut self, old: Option<&NodeInfo>, new: Option<&NodeInfo>) -> Vec<PlanKey> {
        let mut out = Vec::new();
        for (key, entry) in &mut self.plans {
            let was = old.is_some_and(|n| entry.selector.matches(&n.labels));
            let is = new.is_some_and(|n| entry.selector.matches(&n.labels));
            let changed = match (old.filter(|_| was), new.filter(|_| is)) {
                (Some(o), Some(n)) => entry.view(o) != entry.view(n),
                (None, None) => false,
                _ => true,
            };
            if let Some(n) = old.or(new) {
                if is {
                    entry.candidates.insert(n.name.clone());
                } else {
                    entry.candidates.remove(&n.name);
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

    fn plan(name: &str, pool: &str, generation: i64) -> Plan {
        let mut p: Plan = serde_json::from_value(serde_json::json!({
            "apiVersion": "upgrade.cattle.io/v1",
            "kind": "Plan",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"nodeSelector": {"matchLabels": {"pool": pool}}, "upgrade": {"image": "i"}}
        }))
        .expect("plan");
        p.metadata.generation = Some(generation);
        p
    }

    fn key(name: &str) -> PlanKey {
        PlanKey {
            namespace: "ns".into(),
            name: name.into(),
        }
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

    #[test]
    fn candidates_are_the_nodes_the_selector_matches() {
        let mut i = index();
        assert!(i.is_synced());
        assert_eq!(names(&i.candidates(&plan("pa", "a", 1))), ["a1", "a2"]);
        assert_eq!(names(&i.candidates(&plan("pb", "b", 1))), ["b1"]);
        assert!(i.candidates(&plan("none", "z", 1)).is_empty());
    }

    #[test]
    fn changes_no_decision_reads_concern_no_plan() {
        let mut i = index();
        i.candidates(&plan("pa", "a", 1));
        let mut n = node("a1", "a");
        n.labels.insert("churn".into(), "1".into());
        assert!(i.apply(n).is_empty(), "an unrelated label");
        assert!(i.apply(node("a1", "a")).is_empty(), "no change at all");
    }

    #[test]
    fn changes_a_decision_reads_concern_the_plans_that_match() {
        let mut i = index();
        i.candidates(&plan("pa", "a", 1));
        i.candidates(&plan("pb", "b", 1));
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
        i.candidates(&plan("pa", "a", 1));
        i.candidates(&plan("pb", "b", 1));
        assert_eq!(i.apply(node("a1", "b")), [key("pa"), key("pb")]);
        assert_eq!(names(&i.candidates(&plan("pa", "a", 1))), ["a2"]);
        assert_eq!(names(&i.candidates(&plan("pb", "b", 1))), ["a1", "b1"]);
        assert_eq!(i.apply(node("new", "a")), [key("pa")]);
        assert_eq!(i.delete("a2"), [key("pa")]);
        assert_eq!(names(&i.candidates(&plan("pa", "a", 1))), ["new"]);
    }

    #[test]
    fn a_new_generation_compiles_the_selector_again() {
        let mut i = index();
        assert_eq!(names(&i.candidates(&plan("p", "a", 1))), ["a1", "a2"]);
        assert_eq!(names(&i.candidates(&plan("p", "b", 2))), ["b1"]);
    }

    #[test]
    fn a_relist_finds_deleted_and_changed_nodes() {
        let mut i = index();
        i.candidates(&plan("pa", "a", 1));
        i.relist_start();
        i.relisted(node("a1", "a"));
        let mut changed = node("b1", "a");
        changed.boot_id = "b9".into();
        i.relisted(changed);
        assert_eq!(i.relist_done(), [key("pa")]);
        assert_eq!(names(&i.candidates(&plan("pa", "a", 1))), ["a1", "b1"]);
        assert_eq!(i.len(), 2);
    }

    #[test]
    fn an_invalid_selector_selects_nothing() {
        let mut i = index();
        let mut p = plan("bad", "a", 1);
        if let Some(s) = p.spec.node_selector.as_mut() {
            s.match_labels = Some(BTreeMap::from([("bad key!".into(), "x".into())]));
        }
        assert!(i.candidates(&p).is_empty());
    }

    #[test]
    fn forgotten_plans_are_not_concerned() {
        let mut i = index();
        i.candidates(&plan("pa", "a", 1));
        i.retain_plans(|_| false);
        let mut n = node("a1", "a");
        n.boot_id = "b2".into();
        assert!(i.apply(n).is_empty());
    }
}
