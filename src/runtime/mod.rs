//! The controller runtime: the process that runs the operations. It starts the one Node watch and
//! each enabled operation's watches, builds what they share ([`Shared`]: the chores, the node
//! index, the budget), and drives every operation through the same reconcile loop
//! ([`operation::drive`]). With leader election, [`run`] is called only while this replica holds
//! the Lease.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

pub mod chores;
pub mod error;
pub mod health;
pub mod leader;
pub mod metrics;
pub mod operation;
pub mod server;
pub mod shared;
#[cfg(test)]
pub(crate) mod testing;
pub mod watch;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub use chores::{Chores, FIELD_MANAGER};
pub use error::{ApiResult, Error, ErrorKind};
pub use operation::{Operation, drive};
pub use shared::{HoldSources, Shared};

use crate::node::index::NodeIndex;
use crate::plan::core::config::JobConfig;
use health::{Health, Transition};
use leader::LeaseGuard;
use metrics::Metrics;

/// What the controller shares with the rest of the process.
#[derive(Clone)]
pub struct Operations {
    pub metrics: Arc<Metrics>,
    pub health: Health,
    /// Cancelled on SIGTERM/SIGINT: no new reconciles start; running ones finish.
    pub shutdown: CancellationToken,
    /// Whether this replica may write; checked before every write of a reconcile.
    pub guard: LeaseGuard,
    /// A client without kube's retry layer, for evictions (`None`: the main client).
    pub eviction: Option<Client>,
}

/// What the controller is told at start.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--name`: the value of the `upgrade.cattle.io/controller` label on Jobs.
    pub name: String,
    /// `--namespace`: where Plans, Jobs and Secrets are watched.
    pub namespace: String,
    /// Plan reconciles that may run at once.
    pub threads: u16,
    pub job: JobConfig,
    pub polling_interval: Duration,
    /// Install or update the CRDs at start, as SUC does.
    pub install_crd: bool,
    /// Who this process is, for events.
    pub instance: Option<String>,
    /// Reconcile NodeMaintenances (cluster-wide), taking nodes' medik8s Leases as configured.
    pub maintenance: Option<crate::maintenance::core::LeaseSettings>,
    /// Reconcile RebootPolicies (cluster-wide): reboot the nodes that ask for it.
    pub reboot_policies: bool,
}

/// Node annotations the index keeps: the few small ones that decisions read.
fn kept_annotations() -> Vec<&'static str> {
    let mut kept = vec![
        crate::node::cordon::CORDONED_BY,
        crate::node::cordon::LEGACY_UPGRADE_CORDON,
    ];
    kept.extend(crate::reboot_policy::core::SIGNAL_ANNOTATIONS);
    kept
}

/// Runs the controller until `ops.shutdown` is cancelled, then lets running reconciles finish.
///
/// With leader election, call this only while holding the Lease: it installs the CRDs and writes.
pub async fn run(client: Client, settings: Settings, ops: Operations) -> Result<(), Error> {
    ops.health.apply(Transition::Lead);
    let cluster_id = cluster_id(&client).await?;
    if settings.install_crd {
        install_crds(&client, &settings).await?;
    }
    let nodes = Arc::new(RwLock::new(NodeIndex::new()));
    let triggers = watch::NodeTriggers::default();
    let plans = crate::plan::shell::watch(&client, &settings, &triggers);
    let maintenances = settings
        .maintenance
        .is_some()
        .then(|| crate::maintenance::shell::watch(&client));
    let policies = settings
        .reboot_policies
        .then(|| crate::reboot_policy::shell::watch(&client, &triggers));
    let node_watch = watch::nodes(&client, nodes.clone(), kept_annotations(), triggers);
    let mut ready = plans.ready();
    ready.push(("node", watch::index_ready(nodes.clone())));
    spawn_sync_watch(ready, ops.health.clone(), ops.shutdown.clone());
    let chores = Chores::new(
        client.clone(),
        ops.eviction.clone().unwrap_or_else(|| client.clone()),
        ops.guard.clone(),
        Recorder::new(
            client.clone(),
            Reporter {
                controller: settings.name.clone(),
                instance: settings.instance.clone(),
            },
        ),
        ops.metrics.clone(),
    );
    let shared = Arc::new(Shared::new(
        chores,
        settings.name.clone(),
        settings.namespace.clone(),
        nodes,
        HoldSources {
            plans: plans.store(),
            maintenances: maintenances.as_ref().map(|m| m.store()),
            policies: policies.as_ref().map(|p| p.store()),
        },
    ));
    info!(namespace = %settings.namespace, name = %settings.name, "starting controller");
    let shutdown = ops.shutdown.clone();
    let plan = crate::plan::shell::run(
        shared.clone(),
        &settings,
        cluster_id,
        plans,
        shutdown.clone(),
    );
    let nm = async {
        if let (Some(watches), Some(lease)) = (maintenances, settings.maintenance.clone()) {
            crate::maintenance::shell::run(shared.clone(), lease, watches, shutdown.clone()).await;
        }
    };
    let rp = async {
        if let Some(watches) = policies {
            let image = settings.job.reboot_image.clone();
            crate::reboot_policy::shell::run(shared.clone(), image, watches, shutdown.clone())
                .await;
        }
    };
    let nodes = async {
        tokio::select! {
            _ = node_watch => warn!("the node watch stopped"),
            _ = shutdown.cancelled() => {}
        }
    };
    let (plan, ..) = futures::join!(plan, nm, rp, nodes);
    info!("controller stopped");
    plan
}

/// The uid of kube-system: the cluster's id, as SUC sends it to channel servers.
async fn cluster_id(client: &Client) -> Result<String, Error> {
    Api::<Namespace>::all(client.clone())
        .get("kube-system")
        .await?
        .metadata
        .uid
        .ok_or(Error::NoClusterId)
}

/// The Plan CRD, and the CRDs of the operations this process runs.
async fn install_crds(client: &Client, settings: &Settings) -> Result<(), Error> {
    install_crd(client, crate::plan::api::crd::plan_crd()).await?;
    if settings.maintenance.is_some() {
        install_crd(client, crate::maintenance::api::maintenance_crd()).await?;
    }
    if settings.reboot_policies {
        install_crd(client, crate::reboot_policy::api::reboot_policy_crd()).await?;
    }
    Ok(())
}

/// Creates or updates a CRD and waits until the API server serves it.
pub async fn install_crd(client: &Client, crd: CustomResourceDefinition) -> Result<(), Error> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let name = crd.name_any();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await?;
    let established = kube::runtime::wait::await_condition(
        api,
        &name,
        kube::runtime::wait::conditions::is_crd_established(),
    );
    match tokio::time::timeout(Duration::from_secs(60), established).await {
        Ok(Ok(_)) => {
            info!(crd = %name, "CRD installed");
            Ok(())
        }
        Ok(Err(e)) => Err(Error::CrdNotEstablished(e.to_string())),
        Err(_) => Err(Error::CrdNotEstablished("timed out after 60s".into())),
    }
}

/// Resolves once a cache has its first full list.
pub type ReadyFuture = BoxFuture<'static, Result<(), reflector::store::WriterDropped>>;

/// Resolves once `store` has its first full list.
pub fn ready<K>(store: Store<K>) -> ReadyFuture
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone + Send + Sync,
{
    // Polled again and again: kube-runtime's `wait_until_ready` wakes only the last of several
    // concurrent waiters (the Controller waits on the same store too), so a single wait can hang
    // after the store is ready. A new poll sees the memoized readiness at once.
    Box::pin(async move {
        loop {
            if let Ok(ready) =
                tokio::time::timeout(Duration::from_millis(250), store.wait_until_ready()).await
            {
                return ready;
            }
        }
    })
}

/// Marks the process ready once every cache has its first full list.
fn spawn_sync_watch(
    stores: Vec<(&'static str, ReadyFuture)>,
    health: Health,
    shutdown: CancellationToken,
) {
    tokio::spawn(async move {
        let all = futures::future::join_all(stores.into_iter().map(|(what, ready)| async move {
            ready.await.map_err(|_| what)?;
            debug!("the {what} cache is synced");
            Ok::<(), &'static str>(())
        }));
        tokio::select! {
            _ = shutdown.cancelled() => {}
            results = all => {
                if let Some(Err(what)) = results.into_iter().find(Result::is_err) {
                    warn!("the {what} cache stopped before it synced");
                } else {
                    info!("caches synced");
                    health.apply(Transition::CachesSynced);
                }
            }
        }
    });
}
