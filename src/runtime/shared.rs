//! What every operation of the process shares: the chores (client, lease, recorder), the node
//! index, and the budget: this process's claims on nodes, and the objects whose own records say
//! which nodes they hold.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};

use super::chores::Chores;
use super::error::Error;
use super::metrics::Metrics;
use crate::maintenance::api::NodeMaintenance;
use crate::node::holders::{Hold, Holder, NodeClaims, held_against};
use crate::node::index::NodeIndex;
use crate::plan::api::Plan;
use crate::reboot_policy::api::RebootPolicy;

/// The objects whose own records say which nodes they hold: what survives a restart, until each
/// object's first decision claims its nodes again.
#[derive(Clone)]
pub struct HoldSources {
    pub plans: Store<Plan>,
    pub maintenances: Option<Store<NodeMaintenance>>,
    pub policies: Option<Store<RebootPolicy>>,
}

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
}

impl Shared {
    pub fn new(
        chores: Chores,
        controller_name: String,
        namespace: String,
        nodes: Arc<RwLock<NodeIndex>>,
        sources: HoldSources,
    ) -> Shared {
        Shared {
            chores,
            controller_name,
            namespace,
            nodes,
            claims: Mutex::default(),
            sources,
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

    /// Lets go of every node `me` holds.
    pub fn release(&self, me: &Holder) {
        self.claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .release_all(me);
    }

    /// What each object's own record says it holds: Plans' `status.applying`, then the policies'
    /// nodes in progress, then the NodeMaintenances, oldest first (the order in which
    /// [`held_against`] lets them keep a node: a step under way finishes before a maintenance
    /// starts).
    fn persisted_holds(&self, now: Timestamp) -> Vec<Hold> {
        let mut holds = Vec::new();
        {
            let index = self.nodes();
            for plan in self.sources.plans.state() {
                let holder = plan_holder(&plan);
                for host in crate::plan::core::applying(&plan) {
                    if let Some(node) = index.node_of_hostname(host) {
                        holds.push(Hold {
                            node: node.to_string(),
                            holder: holder.clone(),
                        });
                    }
                }
            }
        }
        for policy in self.sources.policies.iter().flat_map(Store::state) {
            holds.extend(crate::reboot_policy::core::holds(&policy, now));
        }
        if let Some(store) = &self.sources.maintenances {
            holds.extend(crate::maintenance::core::holds(&store.state()));
        }
        holds
    }

    /// Forgets the claims and index entries of objects that are gone.
    pub fn forget_gone(&self) {
        let s = &self.sources;
        let exists = |h: &Holder| match h {
            Holder::Plan { namespace, name } => s
                .plans
                .get(&ObjectRef::new(name).within(namespace))
                .is_some(),
            Holder::Maintenance { name } => s
                .maintenances
                .as_ref()
                .is_some_and(|m| m.get(&ObjectRef::new(name)).is_some()),
            Holder::Reboot { policy } => s
                .policies
                .as_ref()
                .is_some_and(|p| p.get(&ObjectRef::new(policy)).is_some()),
            Holder::MaintenanceTaint => false,
        };
        self.claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain_holders(exists);
        self.nodes_mut().retain(exists);
    }
}

/// The holder of a Plan.
pub fn plan_holder(plan: &Plan) -> Holder {
    Holder::Plan {
        namespace: plan.namespace().unwrap_or_default(),
        name: plan.name_any(),
    }
}
