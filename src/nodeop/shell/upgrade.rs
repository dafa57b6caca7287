//! The NodeOpUpgrade controller's shell: reads the upgrade's NodeOp, asks
//! [`core::upgrade::decide_upgrade`], and creates the NodeOp. The NodeOp (owned by the upgrade)
//! triggers its upgrade when it changes.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use jiff::Timestamp;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::node::budget::Budget;
use crate::node::holders::Holder;
use crate::nodeop::api::{NodeOp, NodeOpUpgrade, NodeOpUpgradeStatus};
use crate::nodeop::core::upgrade::{self, UPGRADE_LABEL, UpgradeDecision, UpgradeEffect};
use crate::runtime::metrics::Kind;
use crate::runtime::watch::{changes, digest};
use crate::runtime::written::Written;
use crate::runtime::{Error, Operation, Shared, drive};

/// Held while a NodeOpUpgrade exists (it has nothing to give back; its NodeOp is owned by it).
pub const FINALIZER: &str = "slipway.dev/nodeopupgrade";

/// The NodeOpUpgrades of the cluster: a cache, and the changes that trigger their reconciles.
pub struct UpgradeWatches {
    store: Store<NodeOpUpgrade>,
    changes: BoxStream<'static, Result<NodeOpUpgrade, watcher::Error>>,
    client: Client,
}

/// Starts (lazily) the watch of every NodeOpUpgrade.
pub fn watch(client: &Client) -> UpgradeWatches {
    let (store, writer) = reflector::store();
    let events = watcher(
        Api::<NodeOpUpgrade>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer);
    UpgradeWatches {
        store,
        changes: changes(events, upgrade_view).map(Ok).boxed(),
        client: client.clone(),
    }
}

/// What triggers a NodeOpUpgrade: its spec and deletion, not its status.
fn upgrade_view(u: &NodeOpUpgrade) -> u64 {
    let m = &u.metadata;
    digest((&m.uid, m.generation, m.deletion_timestamp.is_some()))
}

/// Reconciles every NodeOpUpgrade until `shutdown`; a change of an upgrade's NodeOp triggers it.
pub async fn run(shared: Arc<Shared>, watches: UpgradeWatches, shutdown: CancellationToken) {
    let op = Arc::new(UpgradeOperation {
        shared,
        written: Written::default(),
    });
    let nodeops = Api::<NodeOp>::all(watches.client.clone());
    let controller = Controller::for_stream(watches.changes, watches.store)
        .owns(nodeops, watcher::Config::default().labels(UPGRADE_LABEL));
    drive(op, controller, 0, shutdown).await;
}

/// The NodeOpUpgrade controller.
pub struct UpgradeOperation {
    shared: Arc<Shared>,
    written: Written<NodeOpUpgrade>,
}

impl UpgradeOperation {
    pub fn new(shared: Arc<Shared>) -> UpgradeOperation {
        UpgradeOperation {
            shared,
            written: Written::default(),
        }
    }
}

impl Operation for UpgradeOperation {
    type Object = NodeOpUpgrade;
    type Status = NodeOpUpgradeStatus;
    type Effect = UpgradeEffect;
    type Report = ();
    /// The upgrade's NodeOp, if it exists.
    type Observed = Option<NodeOp>;

    const KIND: Kind = Kind("nodeopupgrade");
    const FINALIZER: &'static str = FINALIZER;

    fn shared(&self) -> &Shared {
        &self.shared
    }

    /// It reads its NodeOp, not nodes.
    fn size(&self, _: &Option<NodeOp>) -> usize {
        1
    }

    fn written(&self) -> &Written<NodeOpUpgrade> {
        &self.written
    }

    fn holder(&self, u: &NodeOpUpgrade) -> Holder {
        upgrade::upgrade_holder(u)
    }

    async fn prepare(&self, u: Arc<NodeOpUpgrade>) -> Result<Arc<NodeOpUpgrade>, Error> {
        Ok(u)
    }

    async fn observe(&self, u: &NodeOpUpgrade, _now: Timestamp) -> Result<Option<NodeOp>, Error> {
        let ns = u.namespace().unwrap_or_default();
        let api = Api::<NodeOp>::namespaced(self.shared.chores().client().clone(), &ns);
        Ok(api.get_opt(&u.name_any()).await?)
    }

    fn decide(
        &self,
        u: &NodeOpUpgrade,
        nodeop: &Option<NodeOp>,
        _budget: &Budget,
        now: Timestamp,
    ) -> UpgradeDecision {
        upgrade::decide_upgrade(u, nodeop.as_ref(), now)
    }

    async fn perform(
        &self,
        u: &NodeOpUpgrade,
        _nodeop: &Option<NodeOp>,
        effect: &UpgradeEffect,
    ) -> Result<(), Error> {
        match effect {
            UpgradeEffect::CreateNodeOp(op) => {
                if self.shared.chores().create(op.as_ref()).await?.is_some() {
                    info!(nodeopupgrade = %u.name_any(), "created its NodeOp");
                }
            }
        }
        Ok(())
    }
}
