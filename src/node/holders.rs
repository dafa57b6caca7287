//! One budget for every disruption of a node: which slipway operation holds which node.
//!
//! Plans may share a node (system-upgrade-controller lets two Plans upgrade one node, and Plans
//! written for it rely on that); any other operation (a NodeMaintenance, a RebootPolicy's reboot)
//! holds a node alone: it
//! takes a node only when nothing else holds it, and while it holds it no Plan picks it.
//!
//! The claims live in the process (every controller of the leader shares them), and every
//! decision that takes nodes reads and updates them under one lock, so two controllers never
//! take the same node in a race. They are rebuilt from the cluster after a restart: each Plan
//! claims its `status.applying` on its first reconcile, and until then the callers also read the
//! caches (Plans' `status.applying`, existing NodeMaintenances), which is what survives a crash.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Who holds a node.
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
    /// A node tainted `medik8s.io/drain` by a maintenance slipway does not run (medik8s
    /// node-maintenance-operator, or a slipway of another namespace).
    MaintenanceTaint,
}

impl Holder {
    fn is_plan(&self) -> bool {
        matches!(self, Holder::Plan { .. })
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Holder::Plan { namespace, name } => write!(f, "plan {namespace}/{name}"),
            Holder::Maintenance { name } => write!(f, "nodemaintenance {name}"),
            Holder::Reboot { policy } => write!(f, "rebootpolicy {policy}"),
            Holder::MaintenanceTaint => write!(f, "a node maintenance (medik8s.io/drain taint)"),
        }
    }
}

/// The nodes each operation holds, by node name.
#[derive(Debug, Default)]
pub struct NodeClaims {
    by_node: BTreeMap<String, BTreeSet<Holder>>,
}

impl NodeClaims {
    /// Who holds `node`.
    pub fn holders(&self, node: &str) -> impl Iterator<Item = &Holder> {
        self.by_node.get(node).into_iter().flatten()
    }

    /// Nodes a Plan must not pick, and who holds them: every node held by an operation other
    /// than a Plan.
    pub fn held_against_plans(&self) -> BTreeMap<String, Holder> {
        self.by_node
            .iter()
            .filter_map(|(node, hs)| {
                hs.iter()
                    .find(|h| !h.is_plan())
                    .map(|h| (node.clone(), h.clone()))
            })
            .collect()
    }

    /// Makes `plan` hold exactly `nodes` (its `status.applying` after a decision).
    pub fn set_plan_nodes<'a>(&mut self, plan: &Holder, nodes: impl IntoIterator<Item = &'a str>) {
        self.release_all(plan);
        for node in nodes {
            self.by_node
                .entry(node.to_string())
                .or_default()
                .insert(plan.clone());
        }
    }

    /// Takes `node` for an exclusive holder, or says who holds it.
    pub fn try_hold_alone(&mut self, holder: &Holder, node: &str) -> Result<(), Holder> {
        if let Some(other) = self.holders(node).find(|h| *h != holder) {
            return Err(other.clone());
        }
        self.by_node
            .entry(node.to_string())
            .or_default()
            .insert(holder.clone());
        Ok(())
    }

    /// Lets go of every node `holder` holds.
    pub fn release_all(&mut self, holder: &Holder) {
        self.by_node.retain(|_, hs| {
            hs.remove(holder);
            !hs.is_empty()
        });
    }

    /// Drops the claims of holders that no longer exist.
    pub fn retain_holders(&mut self, mut exists: impl FnMut(&Holder) -> bool) {
        self.by_node.retain(|_, hs| {
            hs.retain(&mut exists);
            !hs.is_empty()
        });
    }
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

    #[test]
    fn plans_share_a_node_and_maintenance_waits_for_them() {
        let mut c = NodeClaims::default();
        c.set_plan_nodes(&plan("server"), ["n1"]);
        c.set_plan_nodes(&plan("agent"), ["n1", "n2"]);
        assert_eq!(c.holders("n1").count(), 2);
        assert_eq!(c.try_hold_alone(&nm("m"), "n1"), Err(plan("agent")));
        assert!(c.held_against_plans().is_empty());
        c.set_plan_nodes(&plan("agent"), ["n2"]);
        c.set_plan_nodes(&plan("server"), []);
        assert_eq!(c.try_hold_alone(&nm("m"), "n1"), Ok(()));
        assert_eq!(c.try_hold_alone(&nm("m"), "n1"), Ok(()), "idempotent");
    }

    #[test]
    fn a_maintained_node_is_held_against_plans_until_released() {
        let mut c = NodeClaims::default();
        assert_eq!(c.try_hold_alone(&nm("m"), "n1"), Ok(()));
        assert_eq!(c.try_hold_alone(&nm("other"), "n1"), Err(nm("m")));
        assert_eq!(
            c.held_against_plans(),
            BTreeMap::from([("n1".to_string(), nm("m"))])
        );
        c.release_all(&nm("m"));
        assert!(c.held_against_plans().is_empty());
        assert_eq!(c.holders("n1").count(), 0);
    }

    #[test]
    fn gone_holders_release_their_nodes() {
        let mut c = NodeClaims::default();
        c.set_plan_nodes(&plan("gone"), ["n1"]);
        c.try_hold_alone(&nm("m"), "n2").ok();
        c.retain_holders(|h| *h != plan("gone"));
        assert_eq!(c.holders("n1").count(), 0);
        assert_eq!(c.holders("n2").count(), 1);
    }

    #[test]
    fn a_reboot_holds_its_node_against_plans_maintenance_and_other_policies() {
        let mut c = NodeClaims::default();
        let reboot = Holder::Reboot {
            policy: "kured".into(),
        };
        assert_eq!(c.try_hold_alone(&reboot, "n1"), Ok(()));
        assert_eq!(c.try_hold_alone(&nm("m"), "n1"), Err(reboot.clone()));
        let other = Holder::Reboot {
            policy: "flatcar".into(),
        };
        assert_eq!(c.try_hold_alone(&other, "n1"), Err(reboot.clone()));
        assert_eq!(
            c.held_against_plans(),
            BTreeMap::from([("n1".to_string(), reboot.clone())])
        );
        c.set_plan_nodes(&plan("k3s"), ["n2"]);
        assert_eq!(c.try_hold_alone(&reboot, "n2"), Err(plan("k3s")));
    }

    #[test]
    fn holders_say_what_they_are() {
        assert_eq!(plan("k3s").to_string(), "plan system-upgrade/k3s");
        assert_eq!(nm("disk").to_string(), "nodemaintenance disk");
    }
}
