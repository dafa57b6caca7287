//! The controller runtime: starts the watches and the operations this process runs, and holds what
//! they share (the client, the node index, the budget of who holds which node, the recorder).
//! With leader election, `run` is called only while this replica holds the Lease.

pub mod health;
pub mod leader;
pub mod metrics;
pub mod server;
pub(crate) mod watch;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::maintenance::api::NodeMaintenance;
use crate::node::holders::{Holder, NodeClaims};
use crate::node::index::{NodeIndex, PlanKey};
use crate::plan::api::Plan;
use crate::plan::core::config::JobConfig;
use crate::plan::shell::channel::{ChannelCache, ChannelClient, ChannelConfig, ChannelError};
use crate::plan::shell::expect::Expectations;
use crate::reboot_policy::api::RebootPolicy;
use health::{Health, Transition};
use leader::LeaseGuard;
use metrics::Metrics;

/// The field manager slipway writes with.
pub const FIELD_MANAGER: &str = "slipway";

/// Errors of the controller shell.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("the namespace kube-system has no uid")]
    NoClusterId,
    #[error("a CRD did not become established: {0}")]
    CrdNotEstablished(String),
    #[error("the {0} cache stopped")]
    CacheStopped(&'static str),
    #[error("plan has no {0}")]
    IncompletePlan(&'static str),
    #[error("cannot build the channel client: {0}")]
    Channel(#[from] ChannelError),
    #[error("this replica no longer holds the leader lease")]
    NotLeader,
}

impl Error {
    /// A short, stable name for metrics.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Kube(kube::Error::Api(s)) if s.code == 409 => "conflict",
            Error::Kube(kube::Error::Api(_)) => "api",
            Error::Kube(_) => "transport",
            Error::NoClusterId | Error::CrdNotEstablished(_) => "startup",
            Error::CacheStopped(_) => "cache",
            Error::IncompletePlan(_) => "plan",
            Error::Channel(_) => "channel",
            Error::NotLeader => "not_leader",
        }
    }
}

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
    /// Reconciles that may run at once.
    pub threads: u16,
    pub job: JobConfig,
    pub polling_interval: Duration,
    /// Install or update the CRD at start, as SUC does.
    pub install_crd: bool,
    /// Who this process is, for events.
    pub instance: Option<String>,
    /// Reconcile NodeMaintenances (cluster-wide), taking nodes' medik8s Leases as configured.
    pub maintenance: Option<crate::maintenance::core::LeaseSettings>,
    /// Reconcile RebootPolicies (cluster-wide): reboot the nodes that ask for it.
    pub reboot_policies: bool,
}

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    /// The process's one node index, kept by the Node watch.
    pub nodes: Arc<RwLock<NodeIndex>>,
    pub jobs: Store<Job>,
    pub secrets: Store<Secret>,
    pub reboot_pods: Store<Pod>,
    pub channels: Arc<ChannelCache<ChannelClient>>,
    /// Plans whose channel answered after their reconcile stopped waiting for it.
    pub channel_answered: futures::channel::mpsc::UnboundedSender<ObjectRef<Plan>>,
    pub cluster_id: String,
    pub recorder: Recorder,
    pub plans: Store<Plan>,
    pub metrics: Arc<Metrics>,
    pub guard: LeaseGuard,
    pub expect: Expectations,
    pub templates: crate::plan::core::TemplateMemo,
    /// Which operation holds which node: the one budget of every controller of the process.
    pub claims: Mutex<NodeClaims>,
    /// The NodeMaintenances, when this process reconciles them.
    pub maintenances: Option<Store<NodeMaintenance>>,
    /// Asks for evictions (no retry layer: a 429 comes back at once).
    pub eviction_client: Client,
    /// How long each NodeMaintenance whose evictions a PodDisruptionBudget refuses waits before
    /// asking again (doubling while refused; forgotten on a restart, which only asks sooner).
    pub refusal_backoff: Mutex<std::collections::HashMap<String, std::time::Duration>>,
    /// The RebootPolicies, when this process reconciles them.
    pub reboot_policies: Option<Store<RebootPolicy>>,
    /// Asks Prometheus for the policies' alert blockers (`None`: it could not be built).
    pub http: Option<reqwest::Client>,
}

/// Node annotations the index keeps: a few small ones that decisions read.
const KEPT_ANNOTATIONS: &[&str] = &[
    crate::node::cordon::UPGRADE_CORDON,
    crate::reboot_policy::core::SIGNAL_ANNOTATIONS[0],
    crate::reboot_policy::core::SIGNAL_ANNOTATIONS[1],
    crate::reboot_policy::core::SIGNAL_ANNOTATIONS[2],
    crate::reboot_policy::core::SIGNAL_ANNOTATIONS[3],
    crate::reboot_policy::core::SIGNAL_ANNOTATIONS[4],
    crate::reboot_policy::core::SIGNAL_ANNOTATIONS[5],
    crate::reboot_policy::core::SIGNAL_ANNOTATIONS[6],
    crate::reboot_policy::core::SIGNAL_ANNOTATIONS[7],
    crate::reboot_policy::core::SIGNAL_ANNOTATIONS[8],
    crate::reboot_policy::core::SIGNAL_ANNOTATIONS[9],
];

/// Runs the controller until `ops.shutdown` is cancelled, then lets running reconciles finish.
///
/// With leader election, call this only while holding the Lease: it installs the CRD and writes.
pub async fn run(client: Client, settings: Settings, ops: Operations) -> Result<(), Error> {
    ops.health.apply(Transition::Lead);
    let cluster_id = Api::<Namespace>::all(client.clone())
        .get("kube-system")
        .await?
        .metadata
        .uid
        .ok_or(Error::NoClusterId)?;
    if settings.install_crd {
        install_crds(&client, &settings).await?;
    }
    let (node_changed, node_changes) = futures::channel::mpsc::unbounded();
    let (caches, streams) = watch::start(&client, &settings, KEPT_ANNOTATIONS, node_changed);
    let maintenances = settings
        .maintenance
        .is_some()
        .then(|| watch::maintenances(&client));
    let reboot_policies = settings
        .reboot_policies
        .then(|| watch::reboot_policies(&client));
    spawn_sync_watch(
        [
            ("plan", ready(caches.plans.clone())),
            ("node", index_ready(caches.nodes.clone())),
            ("job", ready(caches.jobs.clone())),
            ("secret", ready(caches.secrets.clone())),
            ("reboot pod", ready(caches.reboot_pods.clone())),
        ],
        ops.health.clone(),
        ops.shutdown.clone(),
    );
    let (channel_answered, channel_answers) = futures::channel::mpsc::unbounded();
    let reporter = Reporter {
        controller: settings.name.clone(),
        instance: settings.instance.clone(),
    };
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client: client.clone(),
        channels: Arc::new(ChannelCache::new(
            ChannelClient::new(cluster_id.clone(), &ChannelConfig::default())?,
            settings.polling_interval,
        )),
        channel_answered,
        settings: settings.clone(),
        nodes: caches.nodes,
        jobs: caches.jobs,
        secrets: caches.secrets,
        reboot_pods: caches.reboot_pods,
        cluster_id,
        plans: caches.plans,
        metrics: ops.metrics.clone(),
        guard: ops.guard.clone(),
        expect: Expectations::default(),
        templates: crate::plan::core::TemplateMemo::default(),
        claims: Mutex::new(NodeClaims::default()),
        maintenances: maintenances.as_ref().map(|(store, _)| store.clone()),
        eviction_client: ops.eviction.clone().unwrap_or_else(|| client.clone()),
        refusal_backoff: Mutex::default(),
        reboot_policies: reboot_policies.as_ref().map(|(store, _)| store.clone()),
        http: reqwest::Client::builder().build().ok(),
    });
    info!(namespace = %settings.namespace, name = %settings.name, "starting controller");
    let plans =
        crate::plan::shell::drive(ctx.clone(), streams, channel_answers, ops.shutdown.clone());
    let nm = async {
        if let Some((store, changes)) = maintenances {
            info!("reconciling NodeMaintenances");
            crate::maintenance::shell::drive(ctx.clone(), store, changes, ops.shutdown.clone())
                .await;
        }
    };
    let rp = async {
        if let Some((store, changes)) = reboot_policies {
            info!("reconciling RebootPolicies");
            let triggers = node_changes.boxed();
            crate::reboot_policy::shell::drive(
                ctx.clone(),
                store,
                changes,
                triggers,
                ops.shutdown.clone(),
            )
            .await;
        }
    };
    futures::join!(plans, nm, rp);
    info!("controller stopped");
    Ok(())
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

type ReadyFuture = futures::future::BoxFuture<'static, Result<(), reflector::store::WriterDropped>>;

pub(crate) fn ready<K>(store: Store<K>) -> ReadyFuture
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: std::hash::Hash + Eq + Clone + Send + Sync,
{
    // Polled again and again: kube-runtime's `wait_until_ready` wakes only the last of several
    // concurrent waiters (the Controller waits on the Plan store too), so a single wait can hang
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

/// Resolves once the node index has its first full list.
pub(crate) fn index_ready(index: Arc<RwLock<NodeIndex>>) -> ReadyFuture {
    Box::pin(async move {
        loop {
            if index.read().unwrap_or_else(|e| e.into_inner()).is_synced() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// Marks the process ready once every cache has its first full list.
fn spawn_sync_watch(
    stores: [(&'static str, ReadyFuture); 5],
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

/// Nodes no Plan may start: held by a maintenance in the budget, or with a NodeMaintenance that
/// has not reconciled yet (after a restart, before it claims its node again).
pub(crate) fn held_against_plans(ctx: &Context, claims: &NodeClaims) -> BTreeMap<String, Holder> {
    let mut held = claims.held_against_plans();
    for nm in ctx.maintenances.iter().flat_map(Store::state) {
        let failed = nm
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .is_some_and(|p| p == crate::maintenance::api::MaintenancePhase::Failed);
        if !failed {
            held.entry(nm.spec.node_name.clone())
                .or_insert_with(|| Holder::Maintenance {
                    name: nm.name_any(),
                });
        }
    }
    for (node, policy) in policies_rebooting(ctx) {
        held.entry(node).or_insert(Holder::Reboot { policy });
    }
    held
}

/// Nodes the RebootPolicies' statuses say are rebooting (what survives a restart, before each
/// policy's first reconcile claims its nodes again), with their policy.
pub(crate) fn policies_rebooting(ctx: &Context) -> Vec<(String, String)> {
    let now = jiff::Timestamp::now();
    ctx.reboot_policies
        .iter()
        .flat_map(Store::state)
        .flat_map(|p| {
            let name = p.name_any();
            p.status
                .iter()
                .flat_map(|s| s.nodes.iter())
                .filter(|n| {
                    crate::reboot_policy::core::RebootState::from_status(n, now)
                        .is_some_and(|s| s.holds_slot())
                })
                .map(|n| (n.name.clone(), name.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Who holds each node, as a RebootPolicy `me` must see it: every other holder in the budget,
/// the Plans' `status.applying` and the NodeMaintenances and policies not reconciled yet, and
/// nodes in a maintenance slipway does not run (the `medik8s.io/drain` taint).
pub(crate) fn held_against_reboots(
    ctx: &Context,
    claims: &NodeClaims,
    me: &Holder,
) -> BTreeMap<String, Holder> {
    let mut held = held_against_plans(ctx, claims);
    held.retain(|_, h| h != me);
    let index = ctx.nodes.read().unwrap_or_else(|e| e.into_inner());
    for node in index.all() {
        if let Some(h) = claims.holders(&node.name).find(|h| *h != me) {
            held.entry(node.name.clone()).or_insert_with(|| h.clone());
        }
        if node.in_maintenance {
            held.entry(node.name.clone())
                .or_insert(Holder::MaintenanceTaint);
        }
    }
    let by_hostname: BTreeMap<&str, &str> = index
        .all()
        .map(|n| (n.hostname(), n.name.as_str()))
        .collect::<Vec<_>>()
        .into_iter()
        .collect();
    let mut from_plans = Vec::new();
    for p in ctx.plans.state() {
        for host in p.status.iter().flat_map(|s| s.applying.iter()) {
            if let Some(node) = by_hostname.get(host.as_str()) {
                from_plans.push((
                    node.to_string(),
                    Holder::Plan {
                        namespace: p.namespace().unwrap_or_default(),
                        name: p.name_any(),
                    },
                ));
            }
        }
    }
    drop(index);
    for (node, h) in from_plans {
        held.entry(node).or_insert(h);
    }
    held.retain(|_, h| h != me);
    held
}

/// Gauges, index entries and remembered writes of deleted Plans go with the next reconcile.
pub(crate) fn forget_gone_plans(ctx: &Context) {
    let exists = |ns: &str, name: &str| ctx.plans.get(&ObjectRef::new(name).within(ns)).is_some();
    ctx.metrics.retain_plans(exists);
    ctx.nodes
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .retain_plans(|k| exists(&k.namespace, &k.name));
    ctx.expect
        .retain_plans(|k: &PlanKey| exists(&k.namespace, &k.name));
    let maintained = |name: &str| {
        ctx.maintenances
            .as_ref()
            .is_some_and(|m| m.get(&ObjectRef::new(name)).is_some())
    };
    ctx.claims
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain_holders(|h| match h {
            Holder::Plan { namespace, name } => exists(namespace, name),
            Holder::Maintenance { name } => maintained(name),
            Holder::Reboot { policy } => ctx
                .reboot_policies
                .as_ref()
                .is_some_and(|p| p.get(&ObjectRef::new(policy)).is_some()),
            Holder::MaintenanceTaint => false,
        });
}
