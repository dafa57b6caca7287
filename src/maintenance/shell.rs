//! The NodeMaintenance controller's shell: reads the node, its pods and its medik8s Lease fresh
//! from the API server (a maintenance is about one node; a cache of every pod would cost more
//! than it saves), and performs the decision's effects: the node, the Lease, the evictions, whose
//! answers come back as the next decision's input. The runtime's one reconcile loop does the rest.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

pub mod kind;
pub mod metrics;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::{StreamExt, future};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::{DeleteParams, ObjectMeta, Preconditions};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::common::selector::Selector;
use crate::maintenance::api::{FINALIZER, NodeMaintenance, NodeMaintenanceStatus};
use crate::maintenance::core::{
    self as core, DRAIN_TAINT_KEY, EXCLUDE_LABEL, EXCLUDED_BY, EvictionRound, LeaseSettings,
    LeaseView, MaintenanceDecision, MaintenanceEffect, MaintenanceInput, NodeFacts, Stage,
};
use crate::node::NodeInfo;
use crate::node::budget::{Budget, HOLD_ANNOTATION, Refusal};
use crate::node::cordon::CORDONED_BY;
use crate::node::disruption::DisruptionSpec;
use crate::node::drain::{DrainOptions, PodsView};
use crate::node::holders::{Hold, Holder};
use crate::node::index::{Interest, NodeIndex};
use crate::node::shell::{delete_all, evict_all, pods_view};
use crate::runtime::metrics::Kind;
use crate::runtime::watch::{self, NodeTriggers, Triggered, digest};
use crate::runtime::written::Written;
use crate::runtime::{
    ApiResult, Error, HoldSource, HolderObject, Operation, ReadyFuture, Shared, drive, ready,
};

/// The NodeMaintenances of the cluster: a cache, and the changes that trigger their reconciles.
pub struct MaintenanceWatches {
    store: Store<NodeMaintenance>,
    changes: futures::stream::BoxStream<'static, Result<NodeMaintenance, watcher::Error>>,
    /// The PodDisruptionBudgets that allow a disruption (again): each may end a refusal's wait.
    allowing: futures::stream::BoxStream<'static, PodDisruptionBudget>,
    /// The maintenances whose node changed, or that another operation let go of.
    nodes: Triggered,
}

impl MaintenanceWatches {
    /// The nodes NodeMaintenances hold by their own records, for the budget.
    pub fn holds(&self) -> Arc<dyn HoldSource> {
        hold_source(self.store.clone())
    }
}

/// The nodes the NodeMaintenances of `store` hold by their own records.
pub fn hold_source(store: Store<NodeMaintenance>) -> Arc<dyn HoldSource> {
    Arc::new(MaintenanceHolds(store))
}

impl MaintenanceOperation {
    /// The NodeMaintenance controller over the maintenances of `store`.
    pub fn new(
        shared: Arc<Shared>,
        lease: LeaseSettings,
        maintenances: Store<NodeMaintenance>,
    ) -> MaintenanceOperation {
        MaintenanceOperation {
            metrics: shared.metrics().families(),
            shared,
            lease,
            evictions: Mutex::default(),
            asking: Mutex::default(),
            failures: Mutex::default(),
            maintenances,
            written: Written::default(),
        }
    }
}

/// NodeMaintenances as holders of nodes: each its node, until it is deleted (see [`core::holds`]).
struct MaintenanceHolds(Store<NodeMaintenance>);

impl HoldSource for MaintenanceHolds {
    fn holds(&self, _nodes: &NodeIndex, _now: Timestamp) -> Vec<Hold> {
        core::holds(&self.0.state())
    }

    fn exists(&self, holder: &Holder) -> Option<bool> {
        match holder {
            Holder::Maintenance { name } => Some(self.0.get(&ObjectRef::new(name)).is_some()),
            _ => None,
        }
    }
    fn ready(&self) -> (&'static str, ReadyFuture) {
        ("nodemaintenance", ready(self.0.clone()))
    }

    fn object(&self, holder: &Holder) -> Option<HolderObject> {
        let Holder::Maintenance { name } = holder else {
            return None;
        };
        let nm = self.0.get(&ObjectRef::new(name))?;
        Some(HolderObject::of(nm.as_ref(), nm.spec.disruption.as_ref()))
    }
}

/// Starts (lazily) the watch of every NodeMaintenance.
pub fn watch(client: &Client, triggers: &NodeTriggers) -> MaintenanceWatches {
    let (store, writer) = reflector::store();
    let changes = watcher(
        Api::<NodeMaintenance>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .touched_objects()
    .boxed();
    let budgets = watcher(
        Api::<PodDisruptionBudget>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff();
    let allowing = watch::changes(budgets, budget_view)
        .filter(|pdb| future::ready(allows_disruption(pdb)))
        .boxed();
    MaintenanceWatches {
        store,
        changes,
        allowing,
        nodes: triggers.concerned(|h| matches!(h, Holder::Maintenance { .. })),
    }
}

/// The maintenance a node trigger names.
fn woken(holder: Holder) -> Option<ObjectRef<NodeMaintenance>> {
    match holder {
        Holder::Maintenance { name } => Some(ObjectRef::new(&name)),
        _ => None,
    }
}

/// What wakes a refused drain of a budget: whether it allows a disruption now.
fn budget_view(pdb: &PodDisruptionBudget) -> u64 {
    digest((&pdb.metadata.uid, allows_disruption(pdb)))
}

fn allows_disruption(pdb: &PodDisruptionBudget) -> bool {
    pdb.status
        .as_ref()
        .is_some_and(|s| s.disruptions_allowed > 0)
}

/// Reconciles every NodeMaintenance of the cluster until `shutdown`.
pub async fn run(
    shared: Arc<Shared>,
    lease: LeaseSettings,
    watches: MaintenanceWatches,
    shutdown: CancellationToken,
) {
    let op = Arc::new(MaintenanceOperation::new(
        shared,
        lease,
        watches.store.clone(),
    ));
    // A budget that allows a disruption again wakes the drains it refused (they would otherwise
    // wait out their backoff, up to a minute).
    let waker = op.clone();
    let unblocked = watches
        .allowing
        .flat_map(move |pdb| futures::stream::iter(waker.unblocked(&pdb)));
    // A maintenance that waits for its node starts as soon as its holder lets go of it (not at
    // its next recheck).
    let woken = watches.nodes.filter_map(|h| future::ready(woken(h)));
    let controller = Controller::for_stream(watches.changes, watches.store)
        .reconcile_on(unblocked)
        .reconcile_on(woken);
    drive(op, controller, 0, shutdown).await;
}

/// The NodeMaintenance controller.
pub struct MaintenanceOperation {
    shared: Arc<Shared>,
    lease: LeaseSettings,
    /// The answers of each maintenance's last round of evictions: its next decision's input
    /// (forgotten on a restart, which only asks again sooner).
    evictions: Mutex<HashMap<String, EvictionRound>>,
    /// The rounds of evictions being asked now, by maintenance (see [`core::Asking`]).
    asking: Mutex<HashMap<String, core::Asking>>,
    /// Why each maintenance's last effects failed: its next status says it.
    failures: Mutex<HashMap<String, String>>,
    /// The cache: which maintenances still exist (their gauges go with them).
    maintenances: Store<NodeMaintenance>,
    written: Written<NodeMaintenance>,
    metrics: Arc<metrics::MaintenanceMetrics>,
}

impl MaintenanceOperation {
    /// The maintenances whose last round `pdb` may have refused, their wait ended, and those
    /// whose round is being asked now (the API server may have checked `pdb`'s old status).
    fn unblocked(&self, pdb: &PodDisruptionBudget) -> Vec<ObjectRef<NodeMaintenance>> {
        let namespace = pdb.namespace().unwrap_or_default();
        let mut woken: Vec<_> = lock(&self.evictions)
            .iter_mut()
            .filter_map(|(name, round)| {
                round
                    .budget_allows(&namespace)
                    .then(|| ObjectRef::new(name))
            })
            .collect();
        // Reconciled again once the round is back, which then asks at once.
        woken.extend(lock(&self.asking).iter_mut().filter_map(|(name, asking)| {
            asking
                .budget_allows(&namespace)
                .then(|| ObjectRef::new(name))
        }));
        woken
    }
}

/// What a maintenance's decision reads besides the NodeMaintenance.
pub struct Observed {
    node: Option<Node>,
    facts: Option<NodeFacts>,
    lease: Option<Lease>,
    lease_view: LeaseView,
    pods: Option<PodsView>,
    evictions: Option<EvictionRound>,
    last_error: Option<String>,
}

impl Operation for MaintenanceOperation {
    type Object = NodeMaintenance;
    type Status = NodeMaintenanceStatus;
    type Effect = MaintenanceEffect;
    type Report = Stage;
    type Observed = Observed;

    const KIND: Kind = Kind("nodemaintenance");
    const FINALIZER: &'static str = FINALIZER;

    fn shared(&self) -> &Shared {
        &self.shared
    }

    /// One node.
    fn size(&self, _: &Observed) -> usize {
        1
    }

    fn written(&self) -> &Written<NodeMaintenance> {
        &self.written
    }

    fn holder(&self, nm: &NodeMaintenance) -> Holder {
        core::holder(nm)
    }

    async fn prepare(&self, nm: Arc<NodeMaintenance>) -> Result<Arc<NodeMaintenance>, Error> {
        let maintenances = &self.maintenances;
        let exists = |n: &str| maintenances.get(&ObjectRef::new(n)).is_some();
        self.metrics.retain_maintenances(exists);
        // A maintenance whose finalizer someone else removed is never reconciled deleted.
        lock(&self.evictions).retain(|n, _| exists(n));
        lock(&self.asking).retain(|n, _| exists(n));
        lock(&self.failures).retain(|n, _| exists(n));
        self.shared.forget_gone();
        Ok(nm)
    }

    async fn observe(&self, nm: &NodeMaintenance, now: Timestamp) -> Result<Observed, Error> {
        self.follow_node(nm);
        let client = self.shared.chores().client();
        let node_name = &nm.spec.node_name;
        let node = Api::<Node>::all(client.clone()).get_opt(node_name).await?;
        let lease = Api::<Lease>::namespaced(client.clone(), &self.lease.namespace)
            .get_opt(&core::lease_name(node_name))
            .await?;
        let pods = match (&node, nm.metadata.deletion_timestamp.is_some()) {
            (Some(_), false) => {
                let volumes = DisruptionSpec::waits_for_volumes(nm.spec.disruption.as_ref());
                let options = DrainOptions::default();
                Some(
                    pods_view(
                        client,
                        node_name,
                        &options,
                        volumes,
                        crate::runtime::clock::now(),
                    )
                    .await?,
                )
            }
            _ => None,
        };
        let lease_view = core::lease_view(lease.as_ref(), &self.lease.holder, now);
        let evictions = lock(&self.evictions).get(&nm.name_any()).cloned();
        let last_error = lock(&self.failures).get(&nm.name_any()).cloned();
        Ok(Observed {
            facts: node.as_ref().map(node_facts),
            node,
            lease,
            lease_view,
            pods,
            evictions,
            last_error,
        })
    }

    fn decide(
        &self,
        nm: &NodeMaintenance,
        o: &Observed,
        budget: &Budget,
        now: Timestamp,
    ) -> MaintenanceDecision {
        // Who holds the node is `held_by`; the budgets' other refusals come apart.
        let refusal = (o.node.as_ref())
            .map(|n| NodeInfo::from_node_keeping(n, &[HOLD_ANNOTATION]))
            .and_then(|info| budget.check(&info).err())
            .filter(|r| !matches!(r, Refusal::Held(_)));
        core::decide(
            &MaintenanceInput {
                maintenance: nm,
                node: o.facts.as_ref(),
                held_by: budget.holder_of(&nm.spec.node_name),
                refusal: refusal.as_ref(),
                lease: o.lease_view.clone(),
                pods: o.pods.as_ref(),
                evictions: o.evictions.as_ref(),
                last_error: o.last_error.as_deref(),
            },
            now,
        )
    }

    async fn perform(
        &self,
        nm: &NodeMaintenance,
        o: &Observed,
        effect: &MaintenanceEffect,
    ) -> Result<(), Error> {
        let done = self.perform_one(nm, o, effect).await;
        if let Err(e) = &done {
            let what = match effect {
                MaintenanceEffect::RestoreNode(_) => "cannot restore the node",
                MaintenanceEffect::TakeNode(_) => "cannot cordon and taint the node",
                MaintenanceEffect::OwnedByNode { .. } => "cannot own the maintenance by its node",
                MaintenanceEffect::HoldLease => "cannot take the node's lease",
                MaintenanceEffect::ReleaseLease => "cannot release the node's lease",
                MaintenanceEffect::Evict(_) => "cannot evict",
                MaintenanceEffect::Delete(_) => "cannot delete the pods left",
            };
            lock(&self.failures).insert(nm.name_any(), format!("{what}: {e}"));
        }
        done
    }

    fn applied(&self, nm: &NodeMaintenance, stage: &Stage) {
        let name = nm.name_any();
        lock(&self.failures).remove(&name);
        let restoring = *stage == Stage::Restoring;
        let phase = core::phase(nm.status.as_ref()).filter(|_| !restoring);
        (self.metrics).maintenance(&name, &nm.spec.node_name, phase);
        if restoring {
            lock(&self.evictions).remove(&name);
            info!(nodemaintenance = %name, node = %nm.spec.node_name, "maintenance removed");
        }
    }

    fn forget(&self, nm: &NodeMaintenance) {
        let name = nm.name_any();
        lock(&self.evictions).remove(&name);
        lock(&self.asking).remove(&name);
        lock(&self.failures).remove(&name);
        self.metrics.retain_maintenances(|n| n != name);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl MaintenanceOperation {
    /// Makes the maintenance a reader of its node in the index: its changes, and another
    /// operation letting go of it ([`Shared::wake_readers`]), trigger the maintenance.
    fn follow_node(&self, nm: &NodeMaintenance) {
        let me = core::holder(nm);
        let mut index = self.shared.nodes_mut();
        let uid = nm.metadata.uid.as_deref().unwrap_or_default();
        index.candidates(&me, uid, nm.metadata.generation, || Interest {
            selector: Selector::Nothing,
            label: None,
            conditions: false,
        });
        index.follow(&me, BTreeSet::from([nm.spec.node_name.clone()]));
    }

    async fn perform_one(
        &self,
        nm: &NodeMaintenance,
        o: &Observed,
        effect: &MaintenanceEffect,
    ) -> Result<(), Error> {
        let chores = self.shared.chores();
        match effect {
            MaintenanceEffect::RestoreNode(change) | MaintenanceEffect::TakeNode(change) => {
                info!(nodemaintenance = %nm.name_any(), node = %change.node, ?change, "patching node");
                self.shared.patch_node(change).await?;
            }
            MaintenanceEffect::OwnedByNode { node, uid } => {
                let mut owners = nm.owner_references().to_vec();
                owners.push(OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: node.clone(),
                    uid: uid.clone(),
                    ..Default::default()
                });
                chores
                    .patch(nm, json!({ "metadata": { "ownerReferences": owners } }))
                    .await?;
            }
            MaintenanceEffect::HoldLease => self.hold_lease(nm, o).await?,
            MaintenanceEffect::ReleaseLease => self.release_lease(o.lease.as_ref()).await?,
            MaintenanceEffect::Evict(pods) => {
                let name = nm.name_any();
                lock(&self.asking).insert(name.clone(), core::Asking::of(pods));
                let results =
                    evict_all(chores.client(), chores.eviction_client(), pods, None).await;
                let asking = lock(&self.asking).remove(&name).unwrap_or_default();
                let mut rounds = lock(&self.evictions);
                let round =
                    EvictionRound::next(rounds.get(&name), results, crate::runtime::clock::now());
                rounds.insert(name, asking.answered(round));
            }
            MaintenanceEffect::Delete(pods) => delete_all(chores.client(), pods, None).await?,
        }
        Ok(())
    }

    /// Creates, renews or takes over the node's Lease (`resourceVersion` guards the takeover).
    async fn hold_lease(&self, nm: &NodeMaintenance, o: &Observed) -> Result<(), Error> {
        let Some(node) = &o.node else { return Ok(()) };
        let s = &self.lease;
        let now = crate::runtime::clock::now();
        let duration = i32::try_from(s.duration.as_secs()).unwrap_or(i32::MAX);
        let chores = self.shared.chores();
        let Some(current) = &o.lease else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(core::lease_name(&node.name_any())),
                    namespace: Some(s.namespace.clone()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: node.name_any(),
                        uid: node.uid().unwrap_or_default(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(s.holder.clone()),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    ..Default::default()
                }),
            };
            // Not `create`: a Lease of that name already there is another holder's (or an
            // expired one of ours), and the next decision reads which.
            chores.leading()?;
            chores
                .api::<Lease>(Some(&s.namespace))
                .create(&Default::default(), &lease)
                .await?;
            info!(nodemaintenance = %nm.name_any(), lease = %lease.name_any(), "took the node's lease");
            return Ok(());
        };
        let Some(renewed) = core::renewed_lease(current, &s.holder, duration, now) else {
            return Ok(());
        };
        chores.leading()?;
        chores
            .api::<Lease>(Some(&s.namespace))
            .replace(&renewed.name_any(), &Default::default(), &renewed)
            .await?;
        Ok(())
    }

    /// Deletes the Lease if it is ours (medik8s invalidates a lease by deleting it).
    async fn release_lease(&self, current: Option<&Lease>) -> Result<(), Error> {
        let Some(lease) = current else { return Ok(()) };
        let holder = lease
            .spec
            .as_ref()
            .and_then(|l| l.holder_identity.as_deref());
        if holder != Some(self.lease.holder.as_str()) {
            return Ok(());
        }
        let precondition = DeleteParams {
            preconditions: Some(Preconditions {
                uid: lease.uid(),
                resource_version: lease.resource_version(),
            }),
            ..Default::default()
        };
        let chores = self.shared.chores();
        chores.leading()?;
        chores
            .api::<Lease>(Some(&self.lease.namespace))
            .delete(&lease.name_any(), &precondition)
            .await
            .found()?;
        Ok(())
    }
}

fn node_facts(node: &Node) -> NodeFacts {
    let annotations = node.annotations();
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    NodeFacts {
        name: node.name_any(),
        uid: node.uid().unwrap_or_default(),
        unschedulable: node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
        drain_taint: taints.iter().any(|t| t.key == DRAIN_TAINT_KEY),
        excluded: node.labels().get(EXCLUDE_LABEL).map(String::as_str) == Some("true"),
        cordoned_by: annotations.get(CORDONED_BY).cloned(),
        excluded_by: annotations.get(EXCLUDED_BY).cloned(),
        other_taints: taints
            .into_iter()
            .filter(|t| t.key != DRAIN_TAINT_KEY)
            .collect(),
        resource_version: node.resource_version(),
    }
}

#[cfg(test)]
mod tests;
