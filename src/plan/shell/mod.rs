//! The imperative shell: watches Plans, Jobs, Secrets and Nodes, gathers what [`rollout::decide`]
//! needs, and applies its decision.
//!
//! Plans, Jobs and Secrets are watched in the controller's namespace, Nodes cluster-wide (pruned to
//! what decisions read). One watch per kind feeds both the caches and the reconcile triggers.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

mod apply;
pub mod channel;
pub mod expect;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::common::selector::Selector;
use crate::node::NodeInfo;
use crate::node::holders::Holder;
use crate::node::reboot::HealthObservation;
use crate::node::shell::gate_pods;
use crate::plan::api::{Plan, labels};
use crate::plan::core::{self as rollout, ChannelAnswer, RolloutInput, deletion, reboot};
use crate::runtime::watch;
use crate::runtime::{Context, Error, forget_gone_plans, held_against_plans, index_ready, ready};

/// How often every Plan is looked at even when nothing changes.
const RESYNC: Duration = Duration::from_secs(10 * 60);

/// How long a reconcile waits for a channel server. A slower answer arrives in the background and
/// triggers the Plan again, so a slow or hanging server never holds a reconcile slot (there are
/// only `threads` of them) that other Plans need.
const CHANNEL_WAIT: Duration = Duration::from_millis(250);

/// Reconciles Plans on their own changes and on the changes of what they own or read, until
/// `shutdown`.
pub(crate) async fn drive(
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
    job_config: &crate::plan::core::config::JobConfig,
) -> Result<BTreeMap<String, HealthObservation>, Error> {
    let mut observed = BTreeMap::new();
    let Some(gate) = reboot::policy(plan, job_config).and_then(|p| p.health_gate) else {
        return Ok(observed);
    };
    if Selector::from_label_selector(Some(&gate.pod_selector)).is_err() {
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

fn error_policy(plan: Arc<Plan>, error: &Error, _ctx: Arc<Context>) -> Action {
    warn!(plan = %plan.name_any(), "reconcile failed: {error}");
    // A conflict means the Plan moved on: decide again from the new one soon.
    match error.category() {
        "conflict" => Action::requeue(Duration::from_secs(1)),
        _ => Action::requeue(Duration::from_secs(5)),
    }
}
