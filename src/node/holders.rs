//! One budget for every disruption of a node: which slipway operation holds which node.
//!
//! Plans may share a node (system-upgrade-controller lets two Plans upgrade one node, and Plans
//! written for it rely on that); any other operation (a NodeMaintenance, a RebootPolicy's reboot)
//! holds a node alone: it takes a node only when nothing else holds it, and while it holds it no
//! Plan picks it.
//!
//! Two records say who holds a node. The claims ([`NodeClaims`]) live in the process: every
//! decision that takes nodes reads and updates them under one lock, so two controllers never take
//! the same node in a race. What survives a restart is in the objects themselves (a Plan's
//! `status.applying`, a NodeMaintenance, a RebootPolicy's `status.nodes`): each kind says which
//! nodes its objects hold ([`Hold`]), and until an object's first decision claims them again, those
//! count too. [`held_against`] folds both, and the `medik8s.io/drain` taint of a maintenance slipway
//! does not run, into what one holder must not take: the same function for every operation.
//! [`counted`] folds them into what the budgets count unavailable (their room, their ledgers): there
//! an object's record stops counting once it has decided, as the record may lag its claims.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// NMO's taint: a node carrying it is in maintenance (slipway's or node-maintenance-operator's).
pub const MAINTENANCE_TAINT: &str = "medik8s.io/drain";

/// Who holds a node: an operation of slipway's, by kind and name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Holder {
    Plan {
        namespace: String,
        name: String,
    },
    Maintenance {
        name: String,
    },
    /// A RebootPolicy rebooting the node because the node asked for it.
    Reboot {
        policy: String,
    },
    /// A NodeOp (kairos-operator's API) running its command on the node.
    NodeOp {
        namespace: String,
        name: String,
    },
    /// A NodeOpUpgrade: it never holds a node itself (its NodeOp does).
    NodeOpUpgrade {
        namespace: String,
        name: String,
    },
    /// A node tainted `medik8s.io/drain` by a maintenance slipway does not run (medik8s
    /// node-maintenance-operator, or a slipway of another namespace).
    MaintenanceTaint,
    /// A node a person or another controller holds with the `slipway.dev/hold` annotation.
    Hold {
        by: String,
    },
}

impl Holder {
    pub fn is_plan(&self) -> bool {
        matches!(self, Holder::Plan { .. })
    }

    /// Whether `self` and `other` may hold one node at once: only Plans share.
    pub fn shares_with(&self, other: &Holder) -> bool {
        self.is_plan() && other.is_plan()
    }

    /// The holder as a node annotation names it (`plan/<namespace>/<name>`,
    /// `nodemaintenance/<name>`, `rebootpolicy/<name>`, `nodeop/<namespace>/<name>`).
    pub fn key(&self) -> String {
        match self {
            Holder::Plan { namespace, name } => format!("plan/{namespace}/{name}"),
            Holder::Maintenance { name } => format!("nodemaintenance/{name}"),
            Holder::Reboot { policy } => format!("rebootpolicy/{policy}"),
            Holder::NodeOp { namespace, name } => format!("nodeop/{namespace}/{name}"),
            Holder::NodeOpUpgrade { namespace, name } => {
                format!("nodeopupgrade/{namespace}/{name}")
            }
            Holder::MaintenanceTaint => "medik8s.io/drain".to_string(),
            Holder::Hold { by } => format!("hold/{by}"),
        }
    }

    /// Reads [`Holder::key`] back.
    pub fn from_key(key: &str) -> Option<Holder> {
        let mut parts = key.splitn(3, '/');
        match (parts.next()?, parts.next()?, parts.next()) {
            ("plan", namespace, Some(name)) => Some(Holder::Plan {
                namespace: namespace.to_string(),
                name: name.to_string(),
            }),
            ("nodeop", namespace, Some(name)) => Some(Holder::NodeOp {
                namespace: namespace.to_string(),
                name: name.to_string(),
            }),
            ("nodeopupgrade", namespace, Some(name)) => Some(Holder::NodeOpUpgrade {
                namespace: namespace.to_string(),
                name: name.to_string(),
            }),
            ("nodemaintenance", name, None) => Some(Holder::Maintenance {
                name: name.to_string(),
            }),
            ("rebootpolicy", policy, None) => Some(Holder::Reboot {
                policy: policy.to_string(),
            }),
            ("hold", by, None) => Some(Holder::Hold { by: by.to_string() }),
            _ => None,
        }
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Holder::Plan { namespace, name } => write!(f, "plan {namespace}/{name}"),
            Holder::Maintenance { name } => write!(f, "nodemaintenance {name}"),
            Holder::Reboot { policy } => write!(f, "rebootpolicy {policy}"),
            Holder::NodeOp { namespace, name } => write!(f, "nodeop {namespace}/{name}"),
            Holder::NodeOpUpgrade { namespace, name } => {
                write!(f, "nodeopupgrade {namespace}/{name}")
            }
            Holder::MaintenanceTaint => write!(f, "a node maintenance (medik8s.io/drain taint)"),
            Holder::Hold { by } => write!(f, "{by} (slipway.dev/hold annotation)"),
        }
    }
}

/// A node an object holds according to the object itself (what survives a restart).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hold {
    pub node: String,
    pub holder: Holder,
    /// The object keeps the node for itself but has done nothing to it yet (a NodeMaintenance
    /// that waits for a budget or another holder): no other operation takes the node, and the
    /// node does not count unavailable in a budget's pool.
    pub waiting: bool,
}

impl Hold {
    /// A node the object has started on.
    pub fn new(node: impl Into<String>, holder: Holder) -> Hold {
        Hold {
            node: node.into(),
            holder,
            waiting: false,
        }
    }
}

/// The nodes each operation holds in this process, by node name.
#[derive(Debug, Default)]
pub struct NodeClaims {
    by_node: BTreeMap<String, BTreeSet<Holder>>,
    /// The holders that have decided in this process (taken or let go of nodes): their claims
    /// say what they hold, whatever their records, read from a cache that may lag, still say.
    decided: BTreeSet<Holder>,
}

impl NodeClaims {
    /// Who holds `node`.
    pub fn holders(&self, node: &str) -> impl Iterator<Item = &Holder> {
        self.by_node.get(node).into_iter().flatten()
    }

    /// Makes `holder` hold exactly `nodes`, unless a node is held by someone it does not share
    /// with: then nothing changes and the first such node comes back, with its holder.
    pub fn set(
        &mut self,
        holder: &Holder,
        nodes: &BTreeSet<String>,
    ) -> Result<(), (String, Holder)> {
        for node in nodes {
            if let Some(other) = self
                .holders(node)
                .find(|h| *h != holder && !h.shares_with(holder))
            {
                return Err((node.clone(), other.clone()));
            }
        }
        self.release_all(holder);
        for node in nodes {
            self.by_node
                .entry(node.clone())
                .or_default()
                .insert(holder.clone());
        }
        Ok(())
    }

    /// Every node held in this process, with its holders.
    pub fn all(&self) -> impl Iterator<Item = (&str, &BTreeSet<Holder>)> {
        self.by_node.iter().map(|(n, h)| (n.as_str(), h))
    }

    /// The nodes a holder that `which` picks holds.
    pub fn nodes_held_by(&self, mut which: impl FnMut(&Holder) -> bool) -> BTreeSet<String> {
        self.by_node
            .iter()
            .filter(|(_, hs)| hs.iter().any(&mut which))
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Lets go of every node `holder` holds.
    pub fn release_all(&mut self, holder: &Holder) {
        self.by_node.retain(|_, hs| {
            hs.remove(holder);
            !hs.is_empty()
        });
        self.decided.insert(holder.clone());
    }

    /// Whether `holder` has decided in this process: its claims are what it holds.
    pub fn decided(&self, holder: &Holder) -> bool {
        self.decided.contains(holder)
    }

    /// Drops the claims of holders that no longer exist.
    pub fn retain_holders(&mut self, mut exists: impl FnMut(&Holder) -> bool) {
        self.by_node.retain(|_, hs| {
            hs.retain(&mut exists);
            !hs.is_empty()
        });
        self.decided.retain(exists);
    }
}

/// Every node a slipway operation holds, with its holders, as a budget counts them (its pools'
/// `unavailable`, its ledger): this process's claims, then the objects' own records, then
/// maintenance taints (`tainted`). A record counts only until its object decides in this process
/// (after a restart the records are all there is): from then on its claims say what it holds,
/// and its record, read from a cache, may still name a node it let go of a moment ago. A record
/// that waits never counts: its object has done nothing to the node.
pub fn counted<'a>(
    claims: &NodeClaims,
    persisted: &[Hold],
    tainted: impl IntoIterator<Item = &'a str>,
) -> BTreeMap<String, Vec<Holder>> {
    let mut by_node: BTreeMap<String, Vec<Holder>> = BTreeMap::new();
    let mut add = |node: &str, holder: &Holder| {
        let holders = by_node.entry(node.to_string()).or_default();
        if !holders.contains(holder) {
            holders.push(holder.clone());
        }
    };
    for (node, holders) in claims.all() {
        holders.iter().for_each(|h| add(node, h));
    }
    for hold in persisted
        .iter()
        .filter(|h| !h.waiting && !claims.decided(&h.holder))
    {
        add(&hold.node, &hold.holder);
    }
    for node in tainted {
        add(node, &Holder::MaintenanceTaint);
    }
    by_node
}

/// The nodes `me` must not start, each with the holder in its way.
///
/// A node's holders come in order: this process's claims first, then the objects' own records
/// (`persisted`, in the order given: a kind lists its oldest first), then a maintenance taint
/// (`tainted`: nodes carrying [`MAINTENANCE_TAINT`]), which counts only when no slipway
/// maintenance holds the node, then the `slipway.dev/hold` annotation (`annotated`: node and who
/// holds it). The first holder that does not share with `me` holds the node against it, unless
/// `me` comes first: what an operation already holds stays its own.
pub fn held_against<'a>(
    me: &Holder,
    claims: &NodeClaims,
    persisted: impl IntoIterator<Item = &'a Hold>,
    tainted: impl IntoIterator<Item = &'a str>,
    annotated: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> BTreeMap<String, Holder> {
    let mut order: BTreeMap<&str, Vec<&Holder>> = BTreeMap::new();
    for (node, holders) in &claims.by_node {
        order.entry(node).or_default().extend(holders);
    }
    for hold in persisted {
        order.entry(&hold.node).or_default().push(&hold.holder);
    }
    let taint = Holder::MaintenanceTaint;
    for node in tainted {
        let holders = order.entry(node).or_default();
        if !holders
            .iter()
            .any(|h| matches!(h, Holder::Maintenance { .. }))
        {
            holders.push(&taint);
        }
    }
    let annotated: Vec<(&str, Holder)> = annotated
        .into_iter()
        .map(|(node, by)| (node, Holder::Hold { by: by.to_string() }))
        .collect();
    for (node, holder) in &annotated {
        order.entry(node).or_default().push(holder);
    }
    order
        .into_iter()
        .filter_map(|(node, holders)| {
            let first = holders
                .into_iter()
                .find(|h| *h == me || !h.shares_with(me))?;
            (first != me).then(|| (node.to_string(), first.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(name: &str) -> Holder {
        Holder::Plan {
            namespace: "system-upgrade".into(),
            name: name.into(),
        }
    }

    fn nm(name: &str) -> Holder {
        Holder::Maintenance { name: name.into() }
    }

    fn reboot(policy: &str) -> Holder {
        Holder::Reboot {
            policy: policy.into(),
        }
    }

    fn nodes(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn hold(node: &str, holder: Holder) -> Hold {
        Hold::new(node, holder)
    }

    fn against(me: &Holder, c: &NodeClaims, persisted: &[Hold], tainted: &[&str]) -> Vec<String> {
        held_against(me, c, persisted, tainted.iter().copied(), [])
            .into_iter()
            .map(|(n, h)| format!("{n}:{}", h.key()))
            .collect()
    }

    #[test]
    fn plans_share_a_node_and_maintenance_waits_for_them() {
        let mut c = NodeClaims::default();
        assert_eq!(c.set(&plan("server"), &nodes(&["n1"])), Ok(()));
        assert_eq!(c.set(&plan("agent"), &nodes(&["n1", "n2"])), Ok(()));
        assert_eq!(c.holders("n1").count(), 2);
        assert!(against(&plan("server"), &c, &[], &[]).is_empty());
        assert_eq!(
            c.set(&nm("m"), &nodes(&["n1"])),
            Err(("n1".into(), plan("agent")))
        );
        assert_eq!(
            against(&nm("m"), &c, &[], &[]),
            [
                "n1:plan/system-upgrade/agent",
                "n2:plan/system-upgrade/agent"
            ]
        );
        c.set(&plan("agent"), &nodes(&["n2"])).ok();
        c.set(&plan("server"), &nodes(&[])).ok();
        assert_eq!(c.set(&nm("m"), &nodes(&["n1"])), Ok(()));
        assert_eq!(c.set(&nm("m"), &nodes(&["n1"])), Ok(()), "idempotent");
    }

    #[test]
    fn a_maintained_or_rebooting_node_is_held_against_everyone_else() {
        let mut c = NodeClaims::default();
        c.set(&nm("m"), &nodes(&["n1"])).ok();
        c.set(&reboot("kured"), &nodes(&["n2"])).ok();
        assert_eq!(
            against(&plan("k3s"), &c, &[], &[]),
            ["n1:nodemaintenance/m", "n2:rebootpolicy/kured"]
        );
        assert_eq!(
            against(&nm("other"), &c, &[], &[])[0],
            "n1:nodemaintenance/m"
        );
        assert_eq!(against(&reboot("flatcar"), &c, &[], &[]).len(), 2);
        assert_eq!(
            against(&reboot("kured"), &c, &[], &[]),
            ["n1:nodemaintenance/m"]
        );
        c.release_all(&nm("m"));
        assert_eq!(c.holders("n1").count(), 0);
    }

    #[test]
    fn persisted_holds_count_until_claimed_and_the_first_holder_keeps_the_node() {
        let c = NodeClaims::default();
        // After a restart: a Plan's status.applying, then two maintenances of one node, oldest
        // first. The Plan keeps its node; the older maintenance waits for it; the younger is
        // behind both.
        let persisted = [
            hold("n1", plan("k3s")),
            hold("n1", nm("old")),
            hold("n1", nm("young")),
            hold("n2", nm("young")),
        ];
        assert_eq!(
            against(&plan("k3s"), &c, &persisted, &[]),
            ["n2:nodemaintenance/young"]
        );
        assert_eq!(
            against(&nm("old"), &c, &persisted, &[]),
            ["n1:plan/system-upgrade/k3s", "n2:nodemaintenance/young"]
        );
        let without_plan = &persisted[1..];
        assert_eq!(
            against(&nm("young"), &c, without_plan, &[]),
            ["n1:nodemaintenance/old"]
        );
        assert!(against(&nm("old"), &c, without_plan, &[]).len() == 1);
    }

    #[test]
    fn a_claim_comes_before_what_the_objects_say() {
        let mut c = NodeClaims::default();
        c.set(&nm("young"), &nodes(&["n1"])).ok();
        let persisted = [hold("n1", nm("old"))];
        assert!(against(&nm("young"), &c, &persisted, &[]).is_empty());
        assert_eq!(
            against(&nm("old"), &c, &persisted, &[]),
            ["n1:nodemaintenance/young"]
        );
    }

    #[test]
    fn a_maintenance_taint_holds_unless_a_slipway_maintenance_does() {
        let c = NodeClaims::default();
        let persisted = [hold("n2", nm("m"))];
        assert_eq!(
            against(&plan("k3s"), &c, &persisted, &["n1", "n2"]),
            ["n1:medik8s.io/drain", "n2:nodemaintenance/m"]
        );
        assert_eq!(
            against(&nm("m"), &c, &persisted, &["n1", "n2"]),
            ["n1:medik8s.io/drain"]
        );
    }

    #[test]
    fn a_hold_annotation_holds_the_node_against_every_operation() {
        let c = NodeClaims::default();
        let persisted = [hold("n2", plan("k3s"))];
        let annotated = [("n1", "storage-team"), ("n2", "storage-team")];
        let held = |me: &Holder| {
            held_against(me, &c, &persisted, [], annotated)
                .into_iter()
                .map(|(n, h)| format!("{n}:{}", h.key()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            held(&nm("m")),
            ["n1:hold/storage-team", "n2:plan/system-upgrade/k3s"]
        );
        assert_eq!(
            held(&plan("k3s")),
            ["n1:hold/storage-team"],
            "a node the Plan holds already stays its own"
        );
    }

    #[test]
    fn a_record_counts_until_its_object_decides_here_and_never_while_it_waits() {
        let mut c = NodeClaims::default();
        let persisted = [
            hold("n1", plan("k3s")),
            hold("n2", nm("m")),
            Hold {
                waiting: true,
                ..hold("n3", nm("waits"))
            },
        ];
        let count = |c: &NodeClaims| -> Vec<String> {
            counted(c, &persisted, ["n4"])
                .into_iter()
                .flat_map(|(n, hs)| hs.into_iter().map(move |h| format!("{n}:{}", h.key())))
                .collect()
        };
        assert_eq!(
            count(&c),
            [
                "n1:plan/system-upgrade/k3s",
                "n2:nodemaintenance/m",
                "n4:medik8s.io/drain"
            ],
            "after a restart the records are all there is"
        );
        c.set(&plan("k3s"), &nodes(&["n5"])).ok();
        c.release_all(&nm("m"));
        assert_eq!(
            count(&c),
            ["n4:medik8s.io/drain", "n5:plan/system-upgrade/k3s"],
            "what the objects let go of is not held, whatever their records still say"
        );
        assert!(
            held_against(&plan("other"), &c, &persisted, [], []).contains_key("n3"),
            "a waiting record still keeps its node from the others"
        );
        c.retain_holders(|h| *h != nm("m"));
        assert!(!c.decided(&nm("m")), "a gone object is forgotten");
    }

    #[test]
    fn gone_holders_release_their_nodes() {
        let mut c = NodeClaims::default();
        c.set(&plan("gone"), &nodes(&["n1"])).ok();
        c.set(&nm("m"), &nodes(&["n2"])).ok();
        c.retain_holders(|h| *h != plan("gone"));
        assert_eq!(c.holders("n1").count(), 0);
        assert_eq!(c.holders("n2").count(), 1);
    }

    #[test]
    fn holders_say_what_they_are_and_read_back() {
        assert_eq!(plan("k3s").to_string(), "plan system-upgrade/k3s");
        assert_eq!(nm("disk").to_string(), "nodemaintenance disk");
        let hold = Holder::Hold {
            by: "storage-team".into(),
        };
        let nodeop = Holder::NodeOp {
            namespace: "default".into(),
            name: "upgrade".into(),
        };
        assert_eq!(nodeop.key(), "nodeop/default/upgrade");
        for h in [plan("k3s"), nm("disk"), reboot("kured"), hold, nodeop] {
            assert_eq!(Holder::from_key(&h.key()), Some(h));
        }
        assert_eq!(Holder::from_key("admin"), None);
        assert_eq!(Holder::from_key("plan/only-namespace"), None);
    }
}
