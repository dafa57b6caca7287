//! The RebootPolicy controller: gathers what [`policy::decide`] reads (the nodes from the shared
//! index, the pods that block or are drained, the health gate, Prometheus), decides and claims
//! nodes under the budget's lock, writes the status, and only then acts, so a controller killed
//! at any point finds every started node in `status.nodes`.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::common::condition::Condition;
use crate::node::NodeInfo;
use crate::node::drain::PodsView;
use crate::node::holders::Holder;
use crate::node::reboot::HealthObservation;
use crate::node::shell::{evict_all, gate_pods, pods_view};
use crate::reboot_policy::api::{RebootPolicy, RebootPolicyStatus};
use crate::reboot_policy::core::pod::{
    PolicyPod, policy_reboot_pod_name, render_policy_reboot_pod,
};
use crate::reboot_policy::core::{
    self as policy, DrainView, NodeView, PolicyDecision, PolicySpec, REBOOT_OK, RebootAction,
    RebootState,
};
use crate::runtime::{Context, Error};

/// Reconciles every RebootPolicy on its own changes and on every change of a node's pruned view
/// (a signal, Ready, a boot ID), until `shutdown`.
pub(crate) async fn drive(
    ctx: Arc<Context>,
    policies: Store<RebootPolicy>,
    changes: BoxStream<'static, Result<RebootPolicy, watcher::Error>>,
    node_changes: BoxStream<'static, ()>,
    shutdown: CancellationToken,
) {
    Controller::for_stream(changes, policies)
        .reconcile_all_on(node_changes)
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                warn!("rebootpolicy reconcile failed: {e}");
            }
        })
        .await;
}

fn error_policy(p: Arc<RebootPolicy>, error: &Error, _ctx: Arc<Context>) -> Action {
    warn!(rebootpolicy = %p.name_any(), "{error}");
    Action::requeue(Duration::from_secs(5))
}

fn holder(name: &str) -> Holder {
    Holder::Reboot {
        policy: name.to_string(),
    }
}

async fn reconcile(p: Arc<RebootPolicy>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.guard.is_leading() {
        return Err(Error::NotLeader);
    }
    if let Some(store) = &ctx.reboot_policies {
        ctx.metrics
            .retain_policies(|n| store.get(&ObjectRef::new(n)).is_some());
    }
    // A node missing from an index that has not listed them all yet is not gone: wait.
    crate::runtime::index_ready(ctx.nodes.clone())
        .await
        .map_err(|_| Error::CacheStopped("node"))?;
    let name = p.name_any();
    let finalized = p.finalizers().iter().any(|f| f == FINALIZER);
    if p.metadata.deletion_timestamp.is_some() {
        return finalize(&ctx, &p, finalized).await;
    }
    let p = match finalized {
        true => p,
        // Before any node is touched: deleting the policy then gives its nodes back. The patched
        // object carries the resourceVersion the status write below must name.
        false => set_finalizer(&ctx, &p, true)
            .await?
            .map(Arc::new)
            .unwrap_or(p),
    };
    let spec = match policy::read_spec(&p.spec, &ctx.settings.job.reboot_image) {
        Ok(spec) => spec,
        Err(message) => {
            release(&ctx, &name);
            write_invalid(&ctx, &p, &message).await?;
            return Ok(Action::requeue(Duration::from_secs(300)));
        }
    };
    let now = Timestamp::now();
    let seen = observe(&ctx, &p, &spec, now).await?;
    let decision = decide_and_claim(&ctx, &name, &spec, &seen, now);
    // A node leaves `status.nodes` only once it is given back: a crash in between finds it still
    // there and gives it back again (every step of it is idempotent).
    for (node, action) in &decision.actions {
        if let RebootAction::Finish { signal, uncordon } = action {
            finish(&ctx, &name, node, *signal, *uncordon).await?;
        }
    }
    write_status(&ctx, &p, &decision).await?;
    ctx.metrics
        .reboot_policy(&name, decision.wanting, decision.rebooting);
    apply(&ctx, &p, &spec, &decision, &seen.drains).await;
    Ok(decision.recheck.map_or_else(
        || Action::requeue(Duration::from_secs(300)),
        Action::requeue,
    ))
}

/// A deleted policy: give its nodes back, then let it go.
async fn finalize(ctx: &Context, p: &RebootPolicy, finalized: bool) -> Result<Action, Error> {
    if finalized {
        clean_up(ctx, p).await?;
        set_finalizer(ctx, p, false).await?;
    }
    release(ctx, &p.name_any());
    Ok(Action::await_change())
}

fn release(ctx: &Context, policy: &str) {
    ctx.claims
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .release_all(&holder(policy));
}

/// Everything the decision reads about the policy's nodes, read before the budget's lock.
struct Observed {
    states: BTreeMap<String, RebootState>,
    wanting_since: BTreeMap<String, Timestamp>,
    /// The governed nodes, and whether the selector matches each.
    nodes: Vec<(Arc<NodeInfo>, bool)>,
    alerts: Option<String>,
    blocking: BTreeMap<String, Vec<String>>,
    drains: BTreeMap<String, PodsView>,
    health: BTreeMap<String, HealthObservation>,
}

async fn observe(
    ctx: &Context,
    p: &RebootPolicy,
    spec: &PolicySpec,
    now: Timestamp,
) -> Result<Observed, Error> {
    let previous = p.status.clone().unwrap_or_default();
    let (states, wanting_since) = policy::read_status(&previous.nodes, now);
    let nodes = governed_nodes(ctx, spec, &states);
    let wanting: Vec<&NodeInfo> = nodes
        .iter()
        .filter(|(_, selected)| *selected)
        .map(|(n, _)| n.as_ref())
        .filter(|n| !states.contains_key(&n.name) && policy::requested(n, &spec.signals).is_some())
        .collect();
    // Prometheus is asked only when a node waits for it.
    let alerts = match (&spec.alerts, wanting.is_empty()) {
        (Some(filter), false) => match ctx.http.as_ref() {
            Some(http) => filter.ask(http).await,
            None => Some("no HTTP client to ask Prometheus with".into()),
        },
        _ => None,
    };
    let mut blocking = BTreeMap::new();
    for node in &wanting {
        blocking.insert(
            node.name.clone(),
            blocking_pods(ctx, spec, &node.name).await?,
        );
    }
    let mut drains = BTreeMap::new();
    let mut health = BTreeMap::new();
    for (name, state) in &states {
        match (state, &spec.drain, &spec.health_gate) {
            (RebootState::Draining { .. }, Some((_, options)), _) => {
                let pods = pods_view(&ctx.client, name, options).await?;
                drains.insert(name.clone(), pods);
            }
            (RebootState::Rebooting { .. }, _, Some(gate)) => {
                let pods = gate_pods(&ctx.client, gate, name).await?;
                health.insert(name.clone(), pods);
            }
            _ => {}
        }
    }
    Ok(Observed {
        states,
        wanting_since,
        nodes,
        alerts,
        blocking,
        drains,
        health,
    })
}

/// Decides, and claims the nodes the decision holds, in one step of the process's one budget
/// (under the claims' lock, so no other operation takes a node in between).
fn decide_and_claim(
    ctx: &Context,
    name: &str,
    spec: &PolicySpec,
    seen: &Observed,
    now: Timestamp,
) -> PolicyDecision {
    let me = holder(name);
    let drain_views: BTreeMap<&str, DrainView> = seen
        .drains
        .iter()
        .map(|(n, v)| (n.as_str(), drain_view(v)))
        .collect();
    let mut claims = ctx.claims.lock().unwrap_or_else(|e| e.into_inner());
    let held = crate::runtime::held_against_reboots(ctx, &claims, &me);
    let views: Vec<NodeView<'_>> = seen
        .nodes
        .iter()
        .map(|(n, selected)| NodeView {
            node: n.as_ref(),
            selected: *selected,
            held_by: held.get(&n.name).map(ToString::to_string),
            blocking_pods: seen.blocking.get(&n.name).cloned().unwrap_or_default(),
            drain: drain_views.get(n.name.as_str()).cloned(),
            health: seen.health.get(&n.name),
        })
        .collect();
    let decision = policy::decide(
        &spec.settings(now, seen.alerts.clone()),
        &spec.signals,
        &seen.states,
        &views,
        &seen.wanting_since,
        now,
    );
    claims.release_all(&me);
    for (node, state) in &decision.states {
        if state.holds_slot() {
            // Cannot fail: a node another operation holds was not started.
            let _ = claims.try_hold_alone(&me, node);
        }
    }
    decision
}

/// Held while the policy exists; released once the nodes it took are given back.
pub const FINALIZER: &str = "slipway.dev/reboot-policy-cleanup";

async fn set_finalizer(
    ctx: &Context,
    p: &RebootPolicy,
    present: bool,
) -> Result<Option<RebootPolicy>, Error> {
    if !ctx.guard.is_leading() {
        return Err(Error::NotLeader);
    }
    let mut finalizers: Vec<&str> = p
        .finalizers()
        .iter()
        .map(String::as_str)
        .filter(|f| *f != FINALIZER)
        .collect();
    if present {
        finalizers.push(FINALIZER);
    }
    let body = json!({
        "metadata": { "finalizers": finalizers, "resourceVersion": p.resource_version() }
    });
    match Api::<RebootPolicy>::all(ctx.client.clone())
        .patch(&p.name_any(), &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Ok(patched) => Ok(Some(patched)),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// A deleted policy gives back every node it started: its cordon undone, an update-agent's grant
/// withdrawn, its reboot pod removed. A node in the middle of its reboot comes back on its own.
async fn clean_up(ctx: &Context, p: &RebootPolicy) -> Result<(), Error> {
    let name = p.name_any();
    let nodes = p
        .status
        .as_ref()
        .map(|s| s.nodes.as_slice())
        .unwrap_or_default();
    let (states, _) = policy::read_status(nodes, Timestamp::now());
    for (node, state) in states {
        let cordoned = match &state {
            RebootState::Draining { cordoned, .. } | RebootState::Rebooting { cordoned, .. } => {
                *cordoned
            }
            RebootState::DrainFailed { .. } => false,
        };
        finish(ctx, &name, &node, state.signal(), cordoned).await?;
    }
    Ok(())
}

/// The nodes the policy governs (selected) and the nodes it has a state for that no longer match.
fn governed_nodes(
    ctx: &Context,
    spec: &PolicySpec,
    states: &BTreeMap<String, RebootState>,
) -> Vec<(Arc<NodeInfo>, bool)> {
    let index = ctx.nodes.read().unwrap_or_else(|e| e.into_inner());
    let mut nodes: Vec<(Arc<NodeInfo>, bool)> = index
        .all()
        .filter(|n| spec.selector.matches(&n.labels))
        .map(|n| (n.clone(), true))
        .collect();
    for name in states.keys() {
        if let Some(n) = index.get(name)
            && !spec.selector.matches(&n.labels)
        {
            nodes.push((n, false));
        }
    }
    nodes
}

/// Running pods on the node that a blocking selector matches, as `namespace/name`.
async fn blocking_pods(ctx: &Context, spec: &PolicySpec, node: &str) -> Result<Vec<String>, Error> {
    let mut found = Vec::new();
    let api = Api::<Pod>::all(ctx.client.clone());
    for selector in &spec.blocking_pods {
        let params = ListParams::default()
            .fields(&format!(
                "spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed,status.phase!=Unknown"
            ))
            .labels(&selector.to_string())
            .limit(10);
        for pod in api.list(&params).await?.items {
            found.push(format!(
                "{}/{}",
                pod.namespace().unwrap_or_default(),
                pod.name_any()
            ));
        }
    }
    found.sort();
    found.dedup();
    Ok(found)
}

fn drain_view(pods: &PodsView) -> DrainView {
    let mut waiting_for: Vec<String> = pods
        .blocked
        .iter()
        .map(|(p, why)| format!("{p} {why}"))
        .collect();
    waiting_for.extend(pods.to_evict.keys().take(5).map(|p| p.to_string()));
    DrainView {
        remaining: pods.to_evict.len() + pods.blocked.len(),
        waiting_for,
    }
}

fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: type_.to_string(),
        status: if ok { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: Some(Time(Timestamp::now())),
        observed_generation: generation,
    }
}

/// Keeps a condition's transition time while its status does not change.
fn merged(previous: &[Condition], mut next: Vec<Condition>) -> Vec<Condition> {
    for c in &mut next {
        if let Some(old) = previous.iter().find(|o| o.type_ == c.type_)
            && old.status == c.status
        {
            c.last_transition_time = old.last_transition_time.clone();
        }
    }
    next
}

async fn patch_status(
    ctx: &Context,
    p: &RebootPolicy,
    status: RebootPolicyStatus,
) -> Result<(), Error> {
    if !ctx.guard.is_leading() {
        return Err(Error::NotLeader);
    }
    if p.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api = Api::<RebootPolicy>::all(ctx.client.clone());
    // resourceVersion: a status written from a stale read is refused, and the reconcile runs again.
    // A merge patch leaves out what the status leaves out: an emptied list must be sent empty.
    let mut body = json!({
        "metadata": { "resourceVersion": p.resource_version() },
        "status": status,
    });
    body["status"]["nodes"] = json!(status.nodes);
    api.patch_status(&p.name_any(), &PatchParams::default(), &Patch::Merge(&body))
        .await?;
    Ok(())
}

async fn write_invalid(ctx: &Context, p: &RebootPolicy, message: &str) -> Result<(), Error> {
    let previous = p.status.clone().unwrap_or_default();
    let generation = p.metadata.generation;
    let status = RebootPolicyStatus {
        observed_generation: generation,
        conditions: merged(
            &previous.conditions,
            vec![condition(
                "Validated",
                false,
                "Invalid",
                message,
                generation,
            )],
        ),
        ..previous.clone()
    };
    if previous
        .conditions
        .iter()
        .all(|c| c.type_ != "Validated" || c.message != message)
    {
        publish(ctx, p, true, "ValidationFailed", message).await;
    }
    patch_status(ctx, p, status).await
}

async fn write_status(ctx: &Context, p: &RebootPolicy, d: &PolicyDecision) -> Result<(), Error> {
    let previous = p.status.clone().unwrap_or_default();
    let generation = p.metadata.generation;
    let progressing = d.rebooting > 0;
    let status = RebootPolicyStatus {
        observed_generation: generation,
        wanting: i64::try_from(d.wanting).unwrap_or(i64::MAX),
        rebooting: i64::try_from(d.rebooting).unwrap_or(i64::MAX),
        nodes: d.nodes.clone(),
        rebooted: policy::rebooted_history(&previous.rebooted, &d.rebooted),
        conditions: merged(
            &previous.conditions,
            vec![
                condition("Validated", true, "Valid", "", generation),
                condition(
                    "Progressing",
                    progressing,
                    if progressing { "Rebooting" } else { "Idle" },
                    &d.summary,
                    generation,
                ),
            ],
        ),
    };
    patch_status(ctx, p, status).await
}

/// Applies the actions in order. A failure is logged and left to the next reconcile, which finds
/// the node in the state just written and asks again.
async fn apply(
    ctx: &Context,
    p: &RebootPolicy,
    spec: &PolicySpec,
    d: &PolicyDecision,
    drains: &BTreeMap<String, PodsView>,
) {
    let name = p.name_any();
    for (node, action) in &d.actions {
        if !ctx.guard.is_leading() {
            return;
        }
        match action {
            RebootAction::Cordon
            | RebootAction::Finish { .. }
            | RebootAction::MarkConditions(_) => {
                info!(rebootpolicy = %name, node = %node, "{action:?}");
            }
            // Asked again on every look until the node has rebooted.
            RebootAction::Reboot { .. } => debug!(rebootpolicy = %name, node = %node, "{action:?}"),
            RebootAction::Drain | RebootAction::Event { .. } => {}
        }
        let done = match action {
            RebootAction::MarkConditions(marker) => {
                set_annotation(ctx, node, policy::CONDITION_HANDLED, marker).await
            }
            RebootAction::Cordon => set_unschedulable(ctx, node, true).await,
            RebootAction::Drain => {
                if let (Some(pods), Some((_, options))) = (drains.get(node), &spec.drain) {
                    let left: Vec<_> = pods
                        .to_evict
                        .iter()
                        .filter(|(_, terminating)| !**terminating)
                        .map(|(k, _)| k.clone())
                        .collect();
                    evict_all(
                        &ctx.client,
                        &ctx.eviction_client,
                        &left,
                        options.grace_period_seconds,
                    )
                    .await;
                }
                Ok(())
            }
            RebootAction::Reboot { signal, before } => match signal.update_agent() {
                Some(prefix) => {
                    set_annotation(ctx, node, &format!("{prefix}{REBOOT_OK}"), "true").await
                }
                None => create_reboot_pod(ctx, p, spec, node, before).await,
            },
            // Done before the status was written.
            RebootAction::Finish { .. } => Ok(()),
            RebootAction::Event {
                warning,
                reason,
                message,
            } => {
                publish(ctx, p, *warning, reason, message).await;
                Ok(())
            }
        };
        if let Err(e) = done {
            warn!(rebootpolicy = %name, node = %node, "{action:?} failed: {e}");
        }
    }
}

async fn finish(
    ctx: &Context,
    policy: &str,
    node: &str,
    signal: policy::Signal,
    uncordon: bool,
) -> Result<(), Error> {
    if let Some(prefix) = signal.update_agent() {
        set_annotation(ctx, node, &format!("{prefix}{REBOOT_OK}"), "false").await?;
    }
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), &ctx.settings.namespace);
    match pods
        .delete(
            &policy_reboot_pod_name(policy, node),
            &DeleteParams::default(),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    let still_cordoned = ctx
        .nodes
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(node)
        .is_some_and(|n| n.unschedulable);
    if uncordon && still_cordoned {
        set_unschedulable(ctx, node, false).await?;
    }
    Ok(())
}

async fn set_unschedulable(ctx: &Context, node: &str, on: bool) -> Result<(), Error> {
    let value = if on { json!(true) } else { json!(null) };
    patch_node(ctx, node, json!({ "spec": { "unschedulable": value } })).await
}

async fn set_annotation(ctx: &Context, node: &str, key: &str, value: &str) -> Result<(), Error> {
    patch_node(
        ctx,
        node,
        json!({ "metadata": { "annotations": { key: value } } }),
    )
    .await
}

/// A merge patch of the node; a node that is gone has nothing left to change.
async fn patch_node(ctx: &Context, node: &str, body: serde_json::Value) -> Result<(), Error> {
    match Api::<Node>::all(ctx.client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn create_reboot_pod(
    ctx: &Context,
    p: &RebootPolicy,
    spec: &PolicySpec,
    node: &str,
    before: &str,
) -> Result<(), Error> {
    let Some(uid) = p.uid() else {
        return Ok(());
    };
    let pod = render_policy_reboot_pod(
        &PolicyPod {
            policy: &p.name_any(),
            policy_uid: &uid,
            namespace: &ctx.settings.namespace,
            controller: &ctx.settings.name,
            image: &spec.image,
        },
        node,
        before,
    );
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), &ctx.settings.namespace);
    match pods.create(&PostParams::default(), &pod).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn publish(ctx: &Context, p: &RebootPolicy, warning: bool, reason: &str, message: &str) {
    let published = ctx
        .recorder
        .publish(
            &Event {
                type_: if warning {
                    EventType::Warning
                } else {
                    EventType::Normal
                },
                reason: reason.to_string(),
                note: Some(message.to_string()),
                action: reason.to_string(),
                secondary: None,
            },
            &p.object_ref(&()),
        )
        .await;
    if let Err(e) = published {
        warn!(rebootpolicy = %p.name_any(), reason, "cannot publish event: {e}");
    }
}
