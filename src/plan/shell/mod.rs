//! The Plan controller's shell: it reads what [`core::decide`] needs (the candidate nodes from the
//! node index, the Plan's Jobs, reboot pods and Secrets from the caches, the channel's answer, the
//! health gate's pods), and performs the decision's effects. The runtime's one reconcile loop does
//! the rest (finalizer, budget, status, events, backoff).
//!
//! Plans, Jobs and Secrets are watched in the controller's namespace, Nodes cluster-wide (pruned to
//! what decisions read). One watch per kind feeds both the caches and the reconcile triggers.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

pub mod channel;
pub mod kind;
mod lean_job;
mod lean_plan;
pub mod metrics;
mod nodes;
mod observe;
mod owned;
mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::DeleteParams;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::common::check::CheckRead;
use crate::node::NodeInfo;
use crate::node::budget::Budget;
use crate::node::disruption::DisruptionSpec;
use crate::node::holders::Holder;
use crate::node::reboot::HealthObservation;
use crate::plan::api::{Plan, PlanStatus, labels};
use crate::plan::core::config::JobConfig;
use crate::plan::core::promotion::{StagePlan, StageRead};
use crate::plan::core::settled::SettledNodes;
use crate::plan::core::{
    self as core, ChannelAnswer, PlanDecision, PlanEffect, PlanInput, PlanSummary, TemplateMemo,
    deletion,
};
use crate::runtime::checks::CheckReader;
use crate::runtime::metrics::Kind;
use crate::runtime::written::{self, Created, Written};
use crate::runtime::{Error, Operation, Shared, drive};
use channel::{ChannelCache, ChannelClient, ChannelConfig};
use lean_job::LeanJob;
use metrics::{PlanGauges, PlanMetrics};
use owned::Owned;
pub use watch::{JobCache, PlanWatches, hold_source, watch};

/// How often every Plan is looked at even when nothing changes.
const RESYNC: Duration = Duration::from_secs(10 * 60);

/// The Plan controller.
pub struct PlanOperation {
    shared: Arc<Shared>,
    plans: Store<Plan>,
    jobs: JobCache,
    secrets: Store<Secret>,
    reboot_pods: Store<Pod>,
    job_config: JobConfig,
    channels: Arc<ChannelCache<ChannelClient>>,
    /// Plans whose channel answered after their reconcile stopped waiting for it.
    channel_answered: UnboundedSender<ObjectRef<Plan>>,
    /// What this process wrote and the caches have not shown yet: the Plans' statuses, the Jobs
    /// and the reboot pods it created.
    written: Written<Plan>,
    created_jobs: Created<Job>,
    created_pods: Created<Pod>,
    /// Read by every decision, added to after each (never held across one).
    templates: std::sync::RwLock<TemplateMemo>,
    checks: CheckReader,
    metrics: Arc<PlanMetrics>,
    /// What the installed Plan CRD drops, as its watch last saw it.
    pruned: watch::Pruned,
    /// Decisions list every waiting node (`slipway explain`).
    explaining: bool,
}

/// What a Plan's decision reads besides the Plan.
pub struct PlanObserved {
    /// The candidate nodes, with what this process patched and the index has not shown yet; but
    /// for the `settled` ones.
    nodes: Vec<Arc<NodeInfo>>,
    /// The candidates left out of `nodes`, counted.
    settled: Option<SettledNodes>,
    jobs: Vec<Arc<Job>>,
    /// The Jobs of the Plan's hooks.
    hook_jobs: Vec<Arc<Job>>,
    reboot_pods: Vec<Arc<Pod>>,
    /// The Plan's pull pods, listed only while it pre-pulls (or has a pull on record).
    pull_pods: Vec<Pod>,
    health: BTreeMap<String, HealthObservation>,
    secrets: BTreeMap<String, Secret>,
    channel: Option<ChannelAnswer>,
    /// When the channel is to be asked again (or [`RESYNC`]), or sooner, when a write the caches
    /// have not shown stops being laid over them.
    next_look: Duration,
    /// Candidate nodes another Plan holds too.
    shared: BTreeSet<String>,
    /// What each of `spec.healthChecks` names.
    checks: Vec<CheckRead>,
    /// The Plans of `spec.after`.
    stages: Vec<StageRead>,
}

/// What the Plan controller is told at start, besides what every operation shares.
#[derive(Clone, Default)]
pub struct PlanSettings {
    /// SUC's `SYSTEM_UPGRADE_JOB_*`: what every Job gets.
    pub job: JobConfig,
    /// SUC's `SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL`: how often a channel is asked.
    pub polling_interval: Duration,
    /// Plan reconciles that may run at once.
    pub threads: u16,
    /// The uid of kube-system, sent to channel servers as SUC does.
    pub cluster_id: String,
}

/// Runs the Plan controller until `shutdown`.
pub async fn run(
    shared: Arc<Shared>,
    settings: PlanSettings,
    watches: PlanWatches,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let (channel_answered, channel_answers) = futures::channel::mpsc::unbounded();
    let threads = settings.threads;
    let stores = (
        watches.plans.clone(),
        watches.jobs.clone(),
        watches.secrets.clone(),
    );
    let op = PlanOperation::new(shared, settings, stores, watches.reboot_pods.clone())?;
    let op = Arc::new(PlanOperation {
        channel_answered,
        pruned: watches.pruned.clone(),
        ..op
    });
    // What the watches bring back is in the caches by then (the reflectors come first).
    let (jobs_seen, pods_seen) = (op.clone(), op.clone());
    let watches = PlanWatches {
        job_changes: (watches.job_changes)
            .inspect(move |job| job.iter().for_each(|j| jobs_seen.created_jobs.watched(j)))
            .boxed(),
        pod_changes: (watches.pod_changes)
            .inspect(move |pod| pod.iter().for_each(|p| pods_seen.created_pods.watched(p)))
            .boxed(),
        ..watches
    };
    let controller = controller(&op.shared.namespace, watches, channel_answers);
    drive(op, controller, threads, shutdown).await;
    Ok(())
}

/// Reconciles Plans on their own changes and on the changes of what they own or read.
fn controller(
    namespace: &str,
    w: PlanWatches,
    channel_answers: futures::channel::mpsc::UnboundedReceiver<ObjectRef<Plan>>,
) -> Controller<Plan> {
    let (job_ns, pod_ns) = (namespace.to_string(), namespace.to_string());
    let by_secret = w.plans.clone();
    Controller::for_stream(w.plan_changes, w.plans.clone())
        .watches_stream(w.job_changes, move |job: Job| {
            let labels = job.labels();
            (labels.get(labels::PLAN))
                .or_else(|| labels.get(core::hooks::HOOK_PLAN_LABEL))
                .map(|plan| ObjectRef::new(plan).within(&job_ns))
        })
        .watches_stream(w.pod_changes, move |pod: Pod| {
            pod.labels()
                .get(core::reboot::REBOOT_PLAN_LABEL)
                .map(|plan| ObjectRef::new(plan).within(&pod_ns))
        })
        .reconcile_on(PlanWatches::node_triggers(w.nodes))
        .reconcile_on(channel_answers)
        .watches_stream(w.secret_changes, move |secret: Secret| {
            plans_reading(&by_secret, &secret.name_any())
        })
        .reconcile_all_on(w.crd_changes)
}

/// The Plans whose hash reads `secret`.
fn plans_reading(plans: &Store<Plan>, secret: &str) -> Vec<ObjectRef<Plan>> {
    plans
        .state()
        .into_iter()
        .filter(|p| {
            p.spec
                .secrets
                .iter()
                .flatten()
                .any(|s| s.name == secret && !s.ignore_updates.unwrap_or(false))
        })
        .map(|p| ObjectRef::from_obj(p.as_ref()))
        .collect()
}

/// The caches a Plan's decision reads: Plans, Jobs, Secrets (reboot pods apart).
pub type PlanStores = (Store<Plan>, JobCache, Store<Secret>);

impl PlanOperation {
    /// The Plan controller over `stores` (a channel that answers late triggers nothing).
    pub fn new(
        shared: Arc<Shared>,
        settings: PlanSettings,
        (plans, jobs, secrets): PlanStores,
        reboot_pods: Store<Pod>,
    ) -> Result<PlanOperation, Error> {
        let client = ChannelClient::new(settings.cluster_id, &ChannelConfig::default())
            .map_err(|e| Error::Startup(format!("cannot build the channel client: {e}")))?;
        let checks = shared.check_reader();
        let metrics = shared.metrics().families();
        Ok(PlanOperation {
            shared,
            plans,
            jobs,
            secrets,
            reboot_pods,
            job_config: settings.job,
            channels: Arc::new(ChannelCache::new(client, settings.polling_interval)),
            channel_answered: futures::channel::mpsc::unbounded().0,
            written: Written::default(),
            created_jobs: Created::default(),
            created_pods: Created::default(),
            templates: Default::default(),
            checks,
            metrics,
            pruned: watch::Pruned::default(),
            explaining: false,
        })
    }

    /// The same, deciding as `slipway explain` does: every waiting node listed.
    pub fn explaining(self) -> PlanOperation {
        PlanOperation {
            explaining: true,
            ..self
        }
    }

    /// Gauges, index entries, claims and remembered writes of deleted Plans go.
    fn forget_gone_plans(&self) {
        let exists =
            |ns: &str, name: &str| self.plans.get(&ObjectRef::new(name).within(ns)).is_some();
        self.metrics.retain_plans(exists);
        self.shared.forget_gone();
        self.forget_channels(None);
    }

    /// Forgets the channels no Plan but `gone` (being deleted) reads: a Plan that moved to
    /// another channel, or is gone, leaves its URL's answer behind. Each Plan reads one channel
    /// at most: only more URLs than Plans asks which.
    fn forget_channels(&self, gone: Option<&Plan>) {
        let plans = self.plans.state();
        if gone.is_none() && self.channels.url_count() <= plans.len() {
            return;
        }
        let gone = gone.and_then(|p| p.metadata.uid.as_deref());
        self.channels.retain(|url| {
            (plans.iter())
                .filter(|p| gone.is_none() || p.metadata.uid.as_deref() != gone)
                .any(|p| p.spec.channel.as_deref() == Some(url))
        });
    }

    /// Waits until every cache a Plan's decision reads has its first full list (the node index
    /// and the records of every kind are the runtime's to wait for).
    async fn caches_synced(&self) -> Result<(), Error> {
        for (ready, what) in [
            (crate::runtime::ready(self.jobs.store.clone()), "job"),
            (crate::runtime::ready(self.secrets.clone()), "secret"),
            (
                crate::runtime::ready(self.reboot_pods.clone()),
                "reboot pod",
            ),
        ] {
            ready.await.map_err(|_| Error::CacheStopped(what))?;
        }
        Ok(())
    }
}

impl Operation for PlanOperation {
    type Object = Plan;
    type Status = PlanStatus;
    type Effect = PlanEffect;
    type Report = PlanSummary;
    type Observed = PlanObserved;

    const KIND: Kind = Kind("plan");
    const FINALIZER: &'static str = deletion::FINALIZER;

    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn holder(&self, plan: &Plan) -> Holder {
        core::holder(plan)
    }

    async fn prepare(&self, plan: Arc<Plan>) -> Result<Arc<Plan>, Error> {
        self.forget_gone_plans();
        self.caches_synced().await?;
        Ok(plan)
    }

    async fn observe(&self, plan: &Plan, now: Timestamp) -> Result<PlanObserved, Error> {
        let name = plan
            .metadata
            .name
            .as_deref()
            .ok_or(Error::Incomplete("name"))?;
        let secrets: BTreeMap<String, Secret> = (self.secrets.state().iter())
            .map(|s| (s.name_any(), s.as_ref().clone()))
            .collect();
        let (channel, next_look) = observe::ask_channel(
            plan,
            &self.channels,
            self.metrics.clone(),
            &self.channel_answered,
            RESYNC,
        )
        .await;
        let ns = plan.metadata.namespace.as_deref().unwrap_or_default();
        let pulls = DisruptionSpec::pre_pulls(plan.spec.disruption.as_ref())
            || plan.status.as_ref().is_some_and(|s| s.pre_pull.is_some());
        let pull_pods = match pulls {
            true => {
                let client = self.shared.chores().client();
                crate::node::shell::pull_pods(client, ns, &core::pull_owner(plan)).await?
            }
            false => Vec::new(),
        };
        // Explained, a decision lists every node: it reads every candidate and every Job.
        let target = core::settled::target(plan, &secrets, channel.as_ref(), &self.job_config, now)
            .filter(|_| !self.explaining);
        let Owned {
            mut jobs,
            hook_jobs,
            reboot_pods,
        } = self.owned_by(name, target.as_ref());
        let hash = target.as_ref().map(|t| t.hash.clone());
        let (nodes, settled) = self.nodes_read(plan, hash, &jobs, &reboot_pods, &pull_pods);
        jobs.extend(self.quiet_jobs(name, target.as_ref(), &nodes));
        let overlaid = self.look_again(name);
        let health = observe::health(
            self.shared.chores().client(),
            plan,
            &nodes,
            &self.job_config,
        )
        .await?;
        let next_look = overlaid.map_or(next_look, |o| o.min(next_look));
        let shared = self.shared.held_by_other_plans(&core::holder(plan));
        let checks = match plan.spec.health_checks.as_deref() {
            Some(checks) if !checks.is_empty() => self.checks.read_all(checks).await,
            _ => Vec::new(),
        };
        Ok(PlanObserved {
            stages: self.stages(plan, ns),
            checks,
            hook_jobs,
            nodes,
            settled,
            jobs,
            reboot_pods,
            pull_pods,
            health,
            secrets,
            channel,
            next_look,
            shared,
        })
    }

    fn decide(
        &self,
        plan: &Plan,
        o: &PlanObserved,
        budget: &Budget,
        now: Timestamp,
    ) -> PlanDecision {
        let nodes: Vec<&NodeInfo> = o.nodes.iter().map(AsRef::as_ref).collect();
        let jobs: Vec<&Job> = o.jobs.iter().map(AsRef::as_ref).collect();
        let hook_jobs: Vec<&Job> = o.hook_jobs.iter().map(AsRef::as_ref).collect();
        let reboot_pods: Vec<&Pod> = o.reboot_pods.iter().map(AsRef::as_ref).collect();
        let pull_pods: Vec<&Pod> = o.pull_pods.iter().collect();
        let pruned = self.pruned.get();
        let memo = self
            .templates
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let (mut decision, learned) = core::decide_learning(
            &PlanInput {
                plan,
                nodes: &nodes,
                settled: o.settled.as_ref(),
                jobs: &jobs,
                hook_jobs: &hook_jobs,
                reboot_pods: &reboot_pods,
                pull_pods: &pull_pods,
                health: &o.health,
                secrets: &o.secrets,
                channel: o.channel.clone(),
                controller_name: &self.shared.controller_name,
                job_config: &self.job_config,
                budget,
                shared: &o.shared,
                checks: &o.checks,
                stages: Some(&o.stages),
                templates: Some(&memo),
                explain: self.explaining,
                pruned: pruned.as_deref(),
            },
            now,
        );
        drop(memo);
        if !learned.is_empty() {
            let mut memo = self
                .templates
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            memo.learn(learned);
        }
        decision.requeue_within(o.next_look);
        // What it writes is laid over the caches until they show it: should no watch event come
        // (a Job deleted before the watch showed it), the Plan is looked at again when that ends.
        let laid_over =
            |e: &PlanEffect| matches!(e, PlanEffect::CreatePod(_) | PlanEffect::CreateJob(_));
        if decision.effects.iter().any(laid_over) {
            decision.requeue_within(written::LOOK_AGAIN);
        }
        decision
    }

    async fn perform(
        &self,
        plan: &Plan,
        _: &PlanObserved,
        effect: &PlanEffect,
    ) -> Result<(), Error> {
        let chores = self.shared.chores();
        let ns = Some(self.shared.namespace.as_str());
        let name = plan.name_any();
        match effect {
            PlanEffect::PatchNode(change) => {
                info!(plan = %name, node = %change.node, labels = ?change.labels, annotations = ?change.annotations, cordon = ?change.unschedulable, "patching node");
                self.shared.patch_node(change).await?;
            }
            PlanEffect::DeleteJob(job) => {
                info!(plan = %name, job = %job.name, "deleting job: {}", job.reason);
                if chores
                    .delete::<Job>(ns, &job.name, &DeleteParams::background())
                    .await?
                {
                    chores.metrics().job_deleted();
                }
            }
            PlanEffect::DeletePod(pod) => {
                info!(plan = %name, pod = %pod, "deleting reboot pod");
                chores
                    .delete::<Pod>(ns, pod, &DeleteParams::default())
                    .await?;
            }
            PlanEffect::CreatePod(pod) => {
                if let Some(created) = chores.create(pod.as_ref()).await? {
                    info!(plan = %name, pod = %pod.name_any(), "created reboot pod");
                    self.created_pods.created(created);
                }
            }
            PlanEffect::PullImages(pod) => {
                if chores.create(pod.as_ref()).await?.is_some() {
                    info!(plan = %name, pod = %pod.name_any(), "created pull pod");
                }
            }
            PlanEffect::DeletePullPod(pod) => {
                info!(plan = %name, pod = %pod, "deleting pull pod");
                chores
                    .delete::<Pod>(ns, pod, &DeleteParams::default())
                    .await?;
            }
            PlanEffect::CreateJob(job) => {
                // Its answer decoded as the Job watch decodes Jobs: the expectation keeps it.
                let lean = LeanJob(job.as_ref().clone());
                if let Some(LeanJob(created)) = chores.create(&lean).await? {
                    chores.metrics().job_created();
                    self.created_jobs.created(created);
                    info!(plan = %name, job = %job.name_any(), "created job");
                }
            }
        }
        Ok(())
    }

    /// Every candidate, settled or not: the interval stays the Plan's size's, as before the
    /// settled nodes were left out (fewer nodes to read makes a reconcile cheaper, not more
    /// frequent).
    fn size(&self, observed: &PlanObserved) -> usize {
        observed.nodes.len() + observed.settled.as_ref().map_or(0, |s| s.count)
    }

    fn written(&self) -> &Written<Plan> {
        &self.written
    }

    fn applied(&self, plan: &Plan, summary: &PlanSummary) {
        let ns = plan.namespace().unwrap_or_default();
        let gauges = PlanGauges {
            complete: summary.complete,
            applying: summary.applying,
            failed: summary.failed,
            upgraded: summary.upgraded,
            targeted: summary.targeted,
        };
        let metrics = &self.metrics;
        metrics.plan(&ns, &plan.name_any(), gauges);
        // The applied status: the one written, or the one read when it did not change.
        metrics.plan_phases(&ns, &plan.name_any(), &core::phases(plan.status.as_ref()));
    }

    fn holds(&self, plan: &Plan, decision: &PlanDecision, observed: &PlanObserved) -> bool {
        let nodes: Vec<&NodeInfo> = observed.nodes.iter().map(AsRef::as_ref).collect();
        let pods = observed.reboot_pods.len() + observed.pull_pods.len();
        deletion::holds(plan, decision, &nodes, pods)
    }

    fn forget(&self, plan: &Plan) {
        let (ns, name) = (plan.namespace().unwrap_or_default(), plan.name_any());
        (self.metrics).retain_plans(|n, p| (n, p) != (ns.as_str(), name.as_str()));
        self.forget_created(&name);
        self.forget_channels(Some(plan));
    }
}

impl PlanOperation {
    /// The Plans this one comes after (`spec.after`), as found in namespace `ns`.
    fn stages(&self, plan: &Plan, ns: &str) -> Vec<StageRead> {
        (plan.spec.after.iter().flatten())
            .map(|a| StageRead {
                plan: a.plan.clone(),
                found: (self.plans.get(&ObjectRef::new(&a.plan).within(ns)))
                    .map(|p| StagePlan::of(&p)),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
