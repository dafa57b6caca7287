//! The imperative shell: watches Plans, Jobs, Secrets and Nodes, gathers what [`rollout::decide`]
//! needs, and applies its decision.
//!
//! Plans, Jobs and Secrets are watched in the controller's namespace, Nodes cluster-wide (pruned to
//! what decisions read). One watch per kind feeds both the caches and the reconcile triggers.

mod apply;
pub mod expect;
mod maintenance;
mod reboot_policy;
mod watch;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::{Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::api::maintenance::NodeMaintenance;
use crate::api::reboot_policy::RebootPolicy;
use crate::api::{Plan, labels};
use crate::budget::{Holder, NodeClaims};
use crate::channel::{ChannelCache, ChannelClient, ChannelConfig, ChannelError};
use crate::config::JobConfig;
use crate::health::{Health, Transition};
use crate::leader::LeaseGuard;
use crate::metrics::Metrics;
use crate::node::NodeInfo;
use crate::node_index::{NodeIndex, PlanKey};
use crate::reboot::{self, HealthObservation};
use crate::rollout::{self, ChannelAnswer, RolloutInput, deletion};
use crate::selection;
use expect::Expectations;
use serde_json::json;

/// The field manager slipway writes with.
pub const FIELD_MANAGER: &str = "slipway";

/// How often every Plan is looked at even when nothing changes.
const RESYNC: Duration = Duration::from_secs(10 * 60);

/// How long a reconcile waits for a channel server. A slower answer arrives in the background and
/// triggers the Plan again, so a slow or hanging server never holds a reconcile slot (there are
/// only `threads` of them) that other Plans need.
const CHANNEL_WAIT: Duration = Duration::from_millis(250);

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
    pub maintenance: Option<crate::maintenance::LeaseSettings>,
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
    pub templates: rollout::TemplateMemo,
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
    crate::rollout::cordon::UPGRADE_CORDON,
    reboot::policy::SIGNAL_ANNOTATIONS[0],
    reboot::policy::SIGNAL_ANNOTATIONS[1],
    reboot::policy::SIGNAL_ANNOTATIONS[2],
    reboot::policy::SIGNAL_ANNOTATIONS[3],
    reboot::policy::SIGNAL_ANNOTATIONS[4],
    reboot::policy::SIGNAL_ANNOTATIONS[5],
    reboot::policy::SIGNAL_ANNOTATIONS[6],
    reboot::policy::SIGNAL_ANNOTATIONS[7],
    reboot::policy::SIGNAL_ANNOTATIONS[8],
    reboot::policy::SIGNAL_ANNOTATIONS[9],
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
        templates: rollout::TemplateMemo::default(),
        claims: Mutex::new(NodeClaims::default()),
        maintenances: maintenances.as_ref().map(|(store, _)| store.clone()),
        eviction_client: ops.eviction.clone().unwrap_or_else(|| client.clone()),
        refusal_backoff: Mutex::default(),
        reboot_policies: reboot_policies.as_ref().map(|(store, _)| store.clone()),
        http: reqwest::Client::builder().build().ok(),
    });
    info!(namespace = %settings.namespace, name = %settings.name, "starting controller");
    let plans = drive(ctx.clone(), streams, channel_answers, ops.shutdown.clone());
    let nm = async {
        if let Some((store, changes)) = maintenances {
            info!("reconciling NodeMaintenances");
            maintenance::drive(ctx.clone(), store, changes, ops.shutdown.clone()).await;
        }
    };
    let rp = async {
        if let Some((store, changes)) = reboot_policies {
            info!("reconciling RebootPolicies");
            let triggers = node_changes.boxed();
            reboot_policy::drive(ctx.clone(), store, changes, triggers, ops.shutdown.clone()).await;
        }
    };
    futures::join!(plans, nm, rp);
    info!("controller stopped");
    Ok(())
}

/// Reconciles Plans on their own changes and on the changes of what they own or read, until
/// `shutdown`.
async fn drive(
    ctx: Arc<Context>,
    streams: watch::Streams,
    channel_answers: futures::channel::mpsc::UnboundedReceiver<ObjectRef<Plan>>,
    shutdown: CancellationToken,
) {
    let ns = ctx.settings.namespace.clone();
    let (job_ns, pod_ns) = (ns.clone(), ns);
    let by_secret = ctx.plans.clone();
    Controller::for_stream(streams.plans, ctx.plans.clone())
        .with_config(kube::runtime::controller::Config::default().concurrency(ctx.settings.threads))
        .watches_stream(streams.jobs, move |job: Job| {
            job.labels()
                .get(labels::PLAN)
                .map(|plan| ObjectRef::new(plan).within(&job_ns))
        })
        .watches_stream(streams.reboot_pods, move |pod: Pod| {
            pod.labels()
                .get(reboot::REBOOT_PLAN_LABEL)
                .map(|plan| ObjectRef::new(plan).within(&pod_ns))
        })
        .reconcile_on(streams.node_triggers)
        .reconcile_on(channel_answers)
        .watches_stream(streams.secrets, move |secret: Secret| {
            let name = secret.name_any();
            by_secret
                .state()
                .into_iter()
                .filter(|p| {
                    p.spec
                        .secrets
                        .iter()
                        .flatten()
                        .any(|s| s.name == name && !s.ignore_updates.unwrap_or(false))
                })
                .map(|p| ObjectRef::from_obj(p.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                warn!("reconcile failed: {e}");
            }
        })
        .await;
}

/// The Plan CRD, and the CRDs of the operations this process runs.
async fn install_crds(client: &Client, settings: &Settings) -> Result<(), Error> {
    install_crd(client, crate::api::crd::plan_crd()).await?;
    if settings.maintenance.is_some() {
        install_crd(client, crate::api::maintenance::maintenance_crd()).await?;
    }
    if settings.reboot_policies {
        install_crd(client, crate::api::reboot_policy::reboot_policy_crd()).await?;
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

fn ready<K>(store: Store<K>) -> ReadyFuture
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
fn index_ready(index: Arc<RwLock<NodeIndex>>) -> ReadyFuture {
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

async fn reconcile(plan: Arc<Plan>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconcile_started();
    let started = std::time::Instant::now();
    let result = reconcile_plan(plan, &ctx).await;
    ctx.metrics.reconcile_finished(
        started.elapsed(),
        result.as_ref().err().map(Error::category),
    );
    result
}

async fn reconcile_plan(plan: Arc<Plan>, ctx: &Context) -> Result<Action, Error> {
    if !ctx.guard.is_leading() {
        return Err(Error::NotLeader);
    }
    forget_gone_plans(ctx);
    for (store, what) in [
        (index_ready(ctx.nodes.clone()).await, "node"),
        (ready(ctx.jobs.clone()).await, "job"),
        (ready(ctx.secrets.clone()).await, "secret"),
        (ready(ctx.reboot_pods.clone()).await, "reboot pod"),
    ] {
        store.map_err(|_| Error::CacheStopped(what))?;
    }
    let plan = ctx.expect.plan(plan);
    let name = plan
        .metadata
        .name
        .clone()
        .ok_or(Error::IncompletePlan("name"))?;
    if plan.metadata.deletion_timestamp.is_some() || !deletion::has_finalizer(&plan) {
        return finalize(ctx, &plan, &name).await;
    }
    let candidates = ctx
        .nodes
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .candidates(&plan);
    let overlaid = expect::overlay_nodes(&candidates, &ctx.expect);
    let nodes: Vec<&NodeInfo> = candidates
        .iter()
        .map(|n| overlaid.get(&n.name).unwrap_or(n))
        .collect();
    let (jobs, reboot_pods) = owned_by(ctx, &name);
    let jobs: Vec<&Job> = jobs.iter().map(AsRef::as_ref).collect();
    let reboot_pods: Vec<&Pod> = reboot_pods.iter().map(AsRef::as_ref).collect();
    let health = observe_health(&ctx.client, &plan, &nodes, &ctx.settings.job).await?;
    let secrets: BTreeMap<String, Secret> = ctx
        .secrets
        .state()
        .iter()
        .map(|s| (s.name_any(), s.as_ref().clone()))
        .collect();
    let (channel, mut requeue) = ask_channel(&plan, ctx).await;
    let now = jiff::Timestamp::now();
    let decision = decide_and_claim(ctx, &name, &nodes, |held| {
        rollout::decide(&RolloutInput {
            plan: &plan,
            nodes: &nodes,
            jobs: &jobs,
            reboot_pods: &reboot_pods,
            health: &health,
            secrets: &secrets,
            channel,
            now,
            controller_name: &ctx.settings.name,
            job_config: &ctx.settings.job,
            held,
            templates: Some(&ctx.templates),
        })
    });
    if let Some(after) = decision.requeue_after {
        requeue = requeue.min(after);
    }
    let summary = decision.summary;
    // The lease may have been lost while the inputs were gathered (a channel request can be slow).
    if !ctx.guard.is_leading() {
        return Err(Error::NotLeader);
    }
    apply::apply(ctx, &plan, decision).await?;
    ctx.metrics.plan(&ctx.settings.namespace, &name, &summary);
    Ok(Action::requeue(requeue))
}

/// A Plan being deleted is cleaned up and let go; a Plan without slipway's finalizer gets it
/// first (its status is written with its resourceVersion: it is decided on with the finalizer).
async fn finalize(ctx: &Context, plan: &Plan, name: &str) -> Result<Action, Error> {
    if plan.metadata.deletion_timestamp.is_none() {
        set_finalizer(ctx, plan, name, true).await?;
    } else if deletion::has_finalizer(plan) {
        clean_up_deleted(ctx, plan, name).await?;
    }
    Ok(Action::await_change())
}

/// Undoes what the deleted Plan was doing (see [`deletion`]), then lets it go.
async fn clean_up_deleted(ctx: &Context, plan: &Plan, name: &str) -> Result<(), Error> {
    let candidates = ctx
        .nodes
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .candidates(plan);
    let nodes: Vec<&NodeInfo> = candidates.iter().map(AsRef::as_ref).collect();
    let (jobs, reboot_pods) = owned_by(ctx, name);
    let jobs: Vec<&Job> = jobs.iter().map(AsRef::as_ref).collect();
    let reboot_pods: Vec<&Pod> = reboot_pods.iter().map(AsRef::as_ref).collect();
    let holder = Holder::Plan {
        namespace: ctx.settings.namespace.clone(),
        name: name.to_string(),
    };
    let cleanup = {
        let claims = ctx.claims.lock().unwrap_or_else(|e| e.into_inner());
        deletion::cleanup(plan, &nodes, &jobs, &reboot_pods, |node| {
            claims
                .holders(node)
                .any(|h| *h != holder && matches!(h, Holder::Plan { .. }))
        })
    };
    apply::clean_up(ctx, name, &cleanup).await?;
    set_finalizer(ctx, plan, name, false).await?;
    ctx.claims
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .release_all(&holder);
    info!(plan = %name, uncordoned = cleanup.node_patches.len(), jobs = cleanup.delete_jobs.len(), "plan deleted: cleaned up");
    Ok(())
}

/// Adds or removes slipway's finalizer, keeping the others, guarded by the resourceVersion.
async fn set_finalizer(ctx: &Context, plan: &Plan, name: &str, present: bool) -> Result<(), Error> {
    let mut finalizers: Vec<&str> = plan
        .finalizers()
        .iter()
        .map(String::as_str)
        .filter(|f| *f != deletion::FINALIZER)
        .collect();
    if present {
        finalizers.push(deletion::FINALIZER);
    }
    let body = json!({
        "metadata": { "finalizers": finalizers, "resourceVersion": plan.resource_version() }
    });
    let api = Api::<Plan>::namespaced(ctx.client.clone(), &ctx.settings.namespace);
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
        Ok(_) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Decides, and claims the nodes the decision applies, in one step of the process's one budget
/// (under the claims' lock, so no other operation takes a node in between).
fn decide_and_claim(
    ctx: &Context,
    plan: &str,
    nodes: &[&NodeInfo],
    decide: impl FnOnce(&BTreeMap<String, Holder>) -> rollout::Rollout,
) -> rollout::Rollout {
    let mut claims = ctx.claims.lock().unwrap_or_else(|e| e.into_inner());
    let held = held_against_plans(ctx, &claims);
    let decision = decide(&held);
    let holder = Holder::Plan {
        namespace: ctx.settings.namespace.clone(),
        name: plan.to_string(),
    };
    let applying: std::collections::BTreeSet<&str> = decision
        .status
        .applying
        .iter()
        .map(String::as_str)
        .collect();
    claims.set_plan_nodes(
        &holder,
        nodes
            .iter()
            .filter(|n| applying.contains(n.hostname()))
            .map(|n| n.name.as_str()),
    );
    decision
}

/// The Plan's Jobs and reboot pods: the caches' and those created but not in the caches yet.
/// Shared, not copied: a Plan of thousands of nodes has thousands of Jobs for a while.
fn owned_by(ctx: &Context, plan: &str) -> (Vec<Arc<Job>>, Vec<Arc<Pod>>) {
    let of_plan = |labels: &BTreeMap<String, String>, key: &str| {
        labels.get(key).map(String::as_str) == Some(plan)
    };
    let jobs = ctx
        .jobs
        .state()
        .into_iter()
        .filter(|j| of_plan(j.labels(), labels::PLAN))
        .collect();
    let pods = ctx
        .reboot_pods
        .state()
        .into_iter()
        .filter(|p| of_plan(p.labels(), reboot::REBOOT_PLAN_LABEL))
        .collect();
    (ctx.expect.jobs(jobs, plan), ctx.expect.pods(pods, plan))
}

/// Nodes no Plan may start: held by a maintenance in the budget, or with a NodeMaintenance that
/// has not reconciled yet (after a restart, before it claims its node again).
fn held_against_plans(ctx: &Context, claims: &NodeClaims) -> BTreeMap<String, Holder> {
    let mut held = claims.held_against_plans();
    for nm in ctx.maintenances.iter().flat_map(Store::state) {
        let failed = nm
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .is_some_and(|p| p == crate::api::maintenance::MaintenancePhase::Failed);
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
fn policies_rebooting(ctx: &Context) -> Vec<(String, String)> {
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
                    reboot::policy::RebootState::from_status(n, now).is_some_and(|s| s.holds_slot())
                })
                .map(|n| (n.name.clone(), name.clone()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Who holds each node, as a RebootPolicy `me` must see it: every other holder in the budget,
/// the Plans' `status.applying` and the NodeMaintenances and policies not reconciled yet, and
/// nodes in a maintenance slipway does not run (the `medik8s.io/drain` taint).
fn held_against_reboots(
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
fn forget_gone_plans(ctx: &Context) {
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

/// The channel's answer for a Plan that follows one, and when to ask again. `None` while the
/// channel has not answered: the Plan goes on as it is and is triggered again once it does.
async fn ask_channel(plan: &Plan, ctx: &Context) -> (Option<ChannelAnswer>, Duration) {
    let (None, Some(url)) = (
        plan.spec.version.as_deref().filter(|v| !v.is_empty()),
        plan.spec.channel.as_deref().filter(|c| !c.is_empty()),
    ) else {
        return (None, RESYNC);
    };
    let latest = plan
        .status
        .as_ref()
        .and_then(|s| s.latest_version.clone())
        .unwrap_or_default();
    let (cache, metrics, url) = (ctx.channels.clone(), ctx.metrics.clone(), url.to_string());
    // Spawned, so that giving up the wait does not cancel the request.
    let mut asking = tokio::spawn(async move {
        let asked = std::time::Instant::now();
        let outcome = cache.resolve(&url, &latest).await;
        if outcome.fresh {
            metrics.channel_request(asked.elapsed(), outcome.result.is_ok());
        } else {
            metrics.channel_cache_hit();
        }
        outcome
    });
    let outcome = match tokio::time::timeout(CHANNEL_WAIT, &mut asking).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(e)) => {
            warn!(plan = %plan.name_any(), "channel request task failed: {e}");
            return (None, RESYNC);
        }
        Err(_) => {
            let (answered, plan) = (ctx.channel_answered.clone(), ObjectRef::from_obj(plan));
            tokio::spawn(async move {
                if asking.await.is_ok() {
                    // The controller is gone when this fails; nothing is left to trigger.
                    let _ = answered.unbounded_send(plan);
                }
            });
            return (None, RESYNC);
        }
    };
    let answer = match outcome.result {
        Ok(v) => ChannelAnswer::Version(v),
        Err(e) => ChannelAnswer::Failed(e.to_string()),
    };
    (Some(answer), RESYNC.min(outcome.next_poll_in))
}

/// Looks at the health gate's pods on the nodes that are rebooting or waiting for health; only those
/// few nodes (at most `concurrency`) are listed, straight from the API server.
async fn observe_health(
    client: &Client,
    plan: &Plan,
    nodes: &[&NodeInfo],
    job_config: &crate::config::JobConfig,
) -> Result<BTreeMap<String, HealthObservation>, Error> {
    let mut observed = BTreeMap::new();
    let Some(gate) = reboot::policy(plan, job_config).and_then(|p| p.health_gate) else {
        return Ok(observed);
    };
    if selection::Selector::from_label_selector(Some(&gate.pod_selector)).is_err() {
        return Ok(observed);
    }
    for node in rollout::nodes_awaiting_health(plan, nodes) {
        observed.insert(
            node.name.clone(),
            gate_pods(client, &gate, &node.name).await?,
        );
    }
    Ok(observed)
}

/// The health gate's pods on one node.
async fn gate_pods(
    client: &Client,
    gate: &reboot::HealthGate,
    node: &str,
) -> Result<HealthObservation, Error> {
    let selector = selection::Selector::from_label_selector(Some(&gate.pod_selector))
        .unwrap_or(selection::Selector::Nothing);
    let api: Api<Pod> = match &gate.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let params = ListParams::default()
        .fields(&format!("spec.nodeName={node}"))
        .labels(&selector.to_string());
    let pods = api.list(&params).await?;
    Ok(HealthObservation::of_pods(&pods.items))
}

fn error_policy(plan: Arc<Plan>, error: &Error, _ctx: Arc<Context>) -> Action {
    warn!(plan = %plan.name_any(), "reconcile failed: {error}");
    // A conflict means the Plan moved on: decide again from the new one soon.
    match error.category() {
        "conflict" => Action::requeue(Duration::from_secs(1)),
        _ => Action::requeue(Duration::from_secs(5)),
    }
}
