//! The watches of the RebootPolicy controller: every RebootPolicy, reduced to the changes a
//! decision reads, its reboot pods (a cache only), the node changes that concern a policy, and
//! the policies as holders of nodes.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};

use crate::node::holders::{Hold, Holder};
use crate::node::index::NodeIndex;
use crate::reboot_policy::api::RebootPolicy;
use crate::reboot_policy::core::pod::REBOOT_POLICY_LABEL;
use crate::reboot_policy::core::{self as core};
use crate::runtime::watch::{NodeTriggers, Triggered, changes, digest};
use crate::runtime::{HoldSource, HolderObject, ReadyFuture, ready};

/// The RebootPolicies of the cluster: a cache, and the changes that trigger their reconciles.
pub struct PolicyWatches {
    pub(super) store: Store<RebootPolicy>,
    /// A policy's spec and deletion (not its status: a reconcile that finds nothing to change
    /// writes nothing, and its own writes trigger nothing).
    pub(super) changes: BoxStream<'static, Result<RebootPolicy, watcher::Error>>,
    /// The policies a node change concerns (a signal, Ready, a boot ID on a node a policy
    /// governs), and those another operation woke by letting go of a node they wait for.
    pub(super) nodes: Triggered,
    /// The policies' reboot pods (their metadata): which reboots were asked for.
    pub(super) pods: Store<Pod>,
    pub(super) pod_events: BoxStream<'static, ()>,
}

impl PolicyWatches {
    /// The nodes RebootPolicies hold by their own records, for the budget.
    pub fn holds(&self) -> Arc<dyn HoldSource> {
        hold_source(self.store.clone())
    }
}

/// The nodes the RebootPolicies of `store` hold by their own records.
pub fn hold_source(store: Store<RebootPolicy>) -> Arc<dyn HoldSource> {
    Arc::new(PolicyHolds(store))
}

/// RebootPolicies as holders of nodes: those their `status.nodes` says are in progress.
struct PolicyHolds(Store<RebootPolicy>);

impl HoldSource for PolicyHolds {
    fn holds(&self, _nodes: &NodeIndex, now: Timestamp) -> Vec<Hold> {
        self.0
            .state()
            .iter()
            .flat_map(|policy| core::holds(policy, now))
            .collect()
    }

    fn exists(&self, holder: &Holder) -> Option<bool> {
        match holder {
            Holder::Reboot { policy } => Some(self.0.get(&ObjectRef::new(policy)).is_some()),
            _ => None,
        }
    }
    fn ready(&self) -> (&'static str, ReadyFuture) {
        ("reboot policy", ready(self.0.clone()))
    }

    fn object(&self, holder: &Holder) -> Option<HolderObject> {
        let Holder::Reboot { policy } = holder else {
            return None;
        };
        let p = self.0.get(&ObjectRef::new(policy))?;
        Some(HolderObject::of(p.as_ref(), p.spec.disruption.as_ref()))
    }
}

/// Starts (lazily) the watch of every RebootPolicy, and of their reboot pods in `namespace`.
pub fn watch(
    client: &Client,
    namespace: &str,
    controller_name: &str,
    triggers: &NodeTriggers,
) -> PolicyWatches {
    let (pods, pod_writer) = reflector::store();
    let pod_events = watcher(
        Api::<Pod>::namespaced(client.clone(), namespace),
        watcher::Config::default().labels(&format!(
            "{}={controller_name},{REBOOT_POLICY_LABEL}",
            crate::common::labels::CONTROLLER
        )),
    )
    .default_backoff()
    .modify(|pod| {
        pod.metadata.managed_fields = None;
        pod.spec = None;
        pod.status = None;
    })
    .reflect(pod_writer)
    .map(|_| ())
    .boxed();
    let (store, writer) = reflector::store();
    let events = watcher(
        Api::<RebootPolicy>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer);
    PolicyWatches {
        store,
        changes: changes(events, policy_view).map(Ok).boxed(),
        nodes: triggers.concerned(|h| matches!(h, Holder::Reboot { .. })),
        pods,
        pod_events,
    }
}

/// What triggers a RebootPolicy: its spec, its annotations (a reset of its failures) and its
/// deletion, not its status.
pub(super) fn policy_view(p: &RebootPolicy) -> u64 {
    let m = &p.metadata;
    digest((
        &m.uid,
        m.generation,
        &m.annotations,
        m.deletion_timestamp.is_some(),
    ))
}
