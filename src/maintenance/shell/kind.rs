//! NodeMaintenance as a kind of node operation: its flags, its watches and run, and its objects
//! listed once.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use super::{MaintenanceOperation, MaintenanceWatches, hold_source, run, watch};
use crate::maintenance::api::NodeMaintenance;
use crate::maintenance::core::LeaseSettings;
use crate::runtime::kind::{Foreseen, Kind, Place, list_served};
use crate::runtime::watch::NodeTriggers;
use crate::runtime::{Error, HoldSource, Shared, listed};

const LEASE_NAMESPACE: &str = "medik8s-leases";
const LEASE_HOLDER: &str = "node-maintenance";

/// `slipway run`'s flags of NodeMaintenances.
#[derive(clap::Args, Debug, Clone)]
pub struct MaintenanceArgs {
    /// Also reconcile NodeMaintenances (nodemaintenance.medik8s.io, cluster-wide), in one budget
    /// with the Plans. Do not enable it where medik8s node-maintenance-operator runs.
    #[arg(long, env = "SLIPWAY_MAINTENANCE", default_value_t = false, action = clap::ArgAction::Set)]
    maintenance: bool,
    /// The namespace of the nodes' medik8s Leases (node-maintenance-operator's LEASE_NAMESPACE).
    #[arg(long, env = "SLIPWAY_MAINTENANCE_LEASE_NAMESPACE", default_value = LEASE_NAMESPACE)]
    maintenance_lease_namespace: String,
    /// The holder identity written in the nodes' medik8s Leases.
    #[arg(long, env = "SLIPWAY_MAINTENANCE_LEASE_HOLDER", default_value = LEASE_HOLDER)]
    maintenance_lease_holder: String,
}

impl MaintenanceArgs {
    /// NodeMaintenances reconciled, with the default Leases (`slipway explain`).
    pub fn enabled() -> MaintenanceArgs {
        MaintenanceArgs {
            maintenance: true,
            maintenance_lease_namespace: LEASE_NAMESPACE.into(),
            maintenance_lease_holder: LEASE_HOLDER.into(),
        }
    }

    /// The kind, when the flags ask for it.
    pub fn kind(&self) -> Option<MaintenanceKind> {
        self.maintenance.then(|| MaintenanceKind {
            lease: LeaseSettings {
                namespace: self.maintenance_lease_namespace.clone(),
                holder: self.maintenance_lease_holder.clone(),
                ..Default::default()
            },
        })
    }
}

/// NodeMaintenances, cluster-wide.
pub struct MaintenanceKind {
    lease: LeaseSettings,
}

impl Kind for MaintenanceKind {
    type Op = MaintenanceOperation;
    type Watches = MaintenanceWatches;
    type Lists = Store<NodeMaintenance>;

    fn words(&self) -> &'static [&'static str] {
        &["nodemaintenance", "nodemaintenances", "nm"]
    }

    fn crds(&self) -> Vec<CustomResourceDefinition> {
        vec![crate::maintenance::api::maintenance_crd()]
    }

    fn watch(&self, at: Place<'_>, triggers: &NodeTriggers) -> MaintenanceWatches {
        watch(at.client, triggers)
    }

    fn holds(&self, watches: &MaintenanceWatches) -> Arc<dyn HoldSource> {
        watches.holds()
    }

    fn run(
        &self,
        watches: MaintenanceWatches,
        shared: Arc<Shared>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), Error>> {
        let lease = self.lease.clone();
        run(shared, lease, watches, shutdown).map(Ok).boxed()
    }

    fn list<'a>(&'a self, at: Place<'a>) -> BoxFuture<'a, Result<Self::Lists, Error>> {
        Box::pin(async move { Ok(listed(list_served(Api::all(at.client.clone())).await?)) })
    }

    fn listed_holds(&self, store: &Self::Lists) -> Arc<dyn HoldSource> {
        hold_source(store.clone())
    }

    fn operation(
        &self,
        store: Self::Lists,
        shared: Arc<Shared>,
    ) -> Result<Foreseen<MaintenanceOperation>, Error> {
        let objects = store.state();
        let op = MaintenanceOperation::new(shared, self.lease.clone(), store);
        Ok(Foreseen { op, objects })
    }
}
