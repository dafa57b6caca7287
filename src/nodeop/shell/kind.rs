//! kairos-operator's NodeOp (with NodeOpUpgrade) as a kind of node operation: its flag, its
//! watches and run, and its objects listed once.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use super::upgrade::{self, UpgradeWatches};
use super::{NodeOpOperation, NodeOpWatches, hold_source, run, watch};
use crate::nodeop::api::NodeOp;
use crate::runtime::kind::{Foreseen, Kind, Place, list_served};
use crate::runtime::watch::NodeTriggers;
use crate::runtime::{Error, HoldSource, Shared, listed};

/// `slipway run`'s flag of NodeOps.
#[derive(clap::Args, Debug, Clone)]
pub struct NodeOpArgs {
    /// Also reconcile kairos-operator's NodeOps and NodeOpUpgrades (operator.kairos.io, every
    /// namespace): run a command on selected nodes with the host's root mounted, in one budget
    /// with the Plans, NodeMaintenances and RebootPolicies. Do not enable it where
    /// kairos-operator runs.
    #[arg(long, env = "SLIPWAY_NODEOPS", default_value_t = false, action = clap::ArgAction::Set)]
    nodeops: bool,
}

impl NodeOpArgs {
    /// NodeOps reconciled (`slipway explain`).
    pub fn enabled() -> NodeOpArgs {
        NodeOpArgs { nodeops: true }
    }

    /// The kind, when the flag asks for it, rebooting with `reboot_image`.
    pub fn kind(&self, reboot_image: &str) -> Option<NodeOpKind> {
        self.nodeops.then(|| NodeOpKind::new(reboot_image))
    }
}

/// NodeOps and NodeOpUpgrades, in every namespace.
pub struct NodeOpKind {
    image: String,
}

impl NodeOpKind {
    pub fn new(reboot_image: &str) -> NodeOpKind {
        NodeOpKind {
            image: reboot_image.to_string(),
        }
    }
}

impl Kind for NodeOpKind {
    type Op = NodeOpOperation;
    type Watches = (NodeOpWatches, UpgradeWatches);
    type Lists = Store<NodeOp>;

    fn words(&self) -> &'static [&'static str] {
        &["nodeop", "nodeops"]
    }

    fn across_namespaces(&self) -> bool {
        true
    }

    fn crds(&self) -> Vec<CustomResourceDefinition> {
        vec![
            crate::nodeop::api::nodeop_crd(),
            crate::nodeop::api::nodeopupgrade_crd(),
        ]
    }

    fn watch(&self, at: Place<'_>, triggers: &NodeTriggers) -> Self::Watches {
        (watch(at.client, triggers), upgrade::watch(at.client))
    }

    fn holds(&self, (nodeops, _): &Self::Watches) -> Arc<dyn HoldSource> {
        nodeops.holds()
    }

    fn run(
        &self,
        (nodeops, upgrades): Self::Watches,
        shared: Arc<Shared>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), Error>> {
        let upgrades = upgrade::run(shared.clone(), upgrades, shutdown.clone());
        let nodeops = run(shared, self.image.clone(), nodeops, shutdown);
        async move {
            futures::join!(nodeops, upgrades);
            Ok(())
        }
        .boxed()
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
    ) -> Result<Foreseen<NodeOpOperation>, Error> {
        let objects = store.state();
        let op = NodeOpOperation::new(shared, self.image.clone(), store);
        Ok(Foreseen { op, objects })
    }
}
