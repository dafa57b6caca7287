//! The controller runtime: what every operation runs on, knowing none of them. The one Node watch
//! ([`watch`]), what the operations share ([`Shared`]: the chores, the node index, the budget and
//! the [`HoldSource`]s each operation gives it), the one reconcile loop ([`operation::drive`]),
//! leader election, health, metrics. `slipway run` (`src/cli/run.rs`) names the operations and
//! wires them onto it.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

pub mod budget;
pub mod checks;
pub mod chores;
pub mod clock;
pub mod error;
pub mod health;
pub mod http;
pub mod kind;
pub mod leader;
pub mod lean;
pub mod ledgers;
pub mod metrics;
pub mod next_up;
pub mod notify;
pub mod operation;
mod pruned;
pub mod server;
pub mod shared;
pub mod silences;
#[cfg(test)]
pub(crate) mod testing;
pub mod watch;
pub mod written;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub use chores::{Chores, FIELD_MANAGER};
pub use error::{ApiResult, Error, ErrorKind};
pub use operation::{Operation, drive, predict};
pub use shared::{HoldSource, HoldSources, HolderObject, Shared};

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

/// The uid of kube-system: the cluster's id, as SUC sends it to channel servers.
pub async fn cluster_id(client: &Client) -> Result<String, Error> {
    Api::<Namespace>::all(client.clone())
        .get("kube-system")
        .await?
        .metadata
        .uid
        .ok_or(Error::NoClusterId)
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

/// A cache that has listed `objects` (and is ready): what `slipway explain` decides from, and
/// what the shells' tests read.
pub fn listed<K>(objects: Vec<K>) -> Store<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    let (store, mut writer) = reflector::store();
    writer.apply_watcher_event(&kube::runtime::watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&kube::runtime::watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&kube::runtime::watcher::Event::InitDone);
    store
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
pub fn spawn_sync_watch(
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
