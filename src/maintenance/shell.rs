//! The NodeMaintenance controller: reads the node, its pods and its medik8s Lease fresh from the
//! API server (a maintenance is about one node; a cache of every pod would cost more than it
//! saves), asks [`maintenance::decide`], and applies the step: finalizer, node, Lease,
//! evictions, status, events, in an order that a crash at any point can resume from.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::maintenance::api::{FINALIZER, NodeMaintenance};
use crate::maintenance::core::{
    self as maintenance, CORDONED_BY, DRAIN_TAINT_KEY, EXCLUDE_LABEL, EXCLUDED_BY, LeaseAction,
    LeaseSettings, LeaseView, MaintenanceInput, NodeChange, NodeFacts, Stage, Step,
};
use crate::node::drain;
use crate::node::holders::Holder;
use crate::node::shell::{evict_all, pods_view};
use crate::runtime::{Context, Error};

/// Reconciles every NodeMaintenance of the cluster until `shutdown`.
pub(crate) async fn drive(
    ctx: Arc<Context>,
    maintenances: Store<NodeMaintenance>,
    changes: futures::stream::BoxStream<'static, Result<NodeMaintenance, watcher::Error>>,
    shutdown: CancellationToken,
) {
    Controller::for_stream(changes, maintenances)
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                warn!("nodemaintenance reconcile failed: {e}");
            }
        })
        .await;
}

fn error_policy(nm: Arc<NodeMaintenance>, error: &Error, _ctx: Arc<Context>) -> Action {
    warn!(nodemaintenance = %nm.name_any(), "{error}");
    Action::requeue(Duration::from_secs(5))
}

fn settings(ctx: &Context) -> &LeaseSettings {
    static DEFAULT: std::sync::OnceLock<LeaseSettings> = std::sync::OnceLock::new();
    ctx.settings
        .maintenance
        .as_ref()
        .unwrap_or_else(|| DEFAULT.get_or_init(LeaseSettings::default))
}

async fn reconcile(nm: Arc<NodeMaintenance>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.guard.is_leading() {
        return Err(Error::NotLeader);
    }
    let name = nm.name_any();
    let node_name = nm.spec.node_name.clone();
    let nodes = Api::<Node>::all(ctx.client.clone());
    let node = nodes.get_opt(&node_name).await?;
    let facts = node.as_ref().map(node_facts);
    let deleting = nm.metadata.deletion_timestamp.is_some();
    let lease = read_lease(&ctx, &node_name).await?;
    let pods = match (&node, deleting) {
        (Some(_), false) => {
            Some(pods_view(&ctx.client, &node_name, &drain::DrainOptions::default()).await?)
        }
        _ => None,
    };
    let me = Holder::Maintenance { name: name.clone() };
    let step = {
        // The decision and the claim on the node are one step in the process's one budget.
        let mut claims = ctx.claims.lock().unwrap_or_else(|e| e.into_inner());
        // The maintenance that holds the node keeps it; else the oldest (creation times have
        // one-second resolution, so two made in one second are told apart by the claim).
        let duplicate_of = claims
            .holders(&node_name)
            .find_map(|h| match h {
                Holder::Maintenance { name: other } if *other != name => Some(other.clone()),
                _ => None,
            })
            .or_else(|| duplicate_of(&ctx, &nm));
        let hostname = facts.as_ref().map(|_| hostname_of(node.as_ref()));
        let busy = claims
            .holders(&node_name)
            .find(|h| matches!(h, Holder::Plan { .. } | Holder::Reboot { .. }))
            .cloned()
            .or_else(|| hostname.and_then(|h| plan_applying(&ctx, &h)))
            .or_else(|| {
                crate::runtime::policies_rebooting(&ctx)
                    .into_iter()
                    .find(|(node, _)| *node == node_name)
                    .map(|(_, policy)| Holder::Reboot { policy })
            });
        let input = MaintenanceInput {
            maintenance: &nm,
            node: facts.as_ref(),
            duplicate_of: duplicate_of.as_deref(),
            busy: busy.as_ref(),
            lease: lease.view.clone(),
            pods: pods.as_ref(),
            now: jiff::Timestamp::now(),
        };
        let step = maintenance::decide(&input);
        if step.hold_node {
            if let Err(other) = claims.try_hold_alone(&me, &node_name) {
                // Only another maintenance of the same node can hold it: the duplicate check
                // of its next reconcile reports it.
                warn!(nodemaintenance = %name, "node {node_name} is held by {other}");
                return Ok(Action::requeue(maintenance::WAIT_RECHECK));
            }
        } else if matches!(step.stage, Stage::Restoring | Stage::LeaseLost { .. }) {
            claims.release_all(&me);
        }
        step
    };
    apply(&ctx, &nm, node.as_ref(), lease, step).await
}

/// The node's hostname label (Plans list nodes by it in `status.applying`).
fn hostname_of(node: Option<&Node>) -> String {
    node.and_then(|n| n.labels().get(crate::plan::api::labels::HOSTNAME).cloned())
        .or_else(|| node.and_then(|n| n.metadata.name.clone()))
        .unwrap_or_default()
}

/// A Plan of this controller that has the node in its `status.applying` (what survives a crash,
/// before the Plan's first reconcile claims the node again).
fn plan_applying(ctx: &Context, hostname: &str) -> Option<Holder> {
    ctx.plans.state().into_iter().find_map(|p| {
        let applying = p.status.as_ref()?.applying.iter().any(|h| h == hostname);
        applying.then(|| Holder::Plan {
            namespace: p.namespace().unwrap_or_default(),
            name: p.name_any(),
        })
    })
}

/// The oldest other live NodeMaintenance of the same node, which owns it.
fn duplicate_of(ctx: &Context, nm: &NodeMaintenance) -> Option<String> {
    let key = |m: &NodeMaintenance| {
        (
            m.metadata.creation_timestamp.clone().map(|t| t.0),
            m.name_any(),
        )
    };
    ctx.maintenances
        .as_ref()?
        .state()
        .into_iter()
        .filter(|m| m.spec.node_name == nm.spec.node_name && m.uid() != nm.uid())
        .filter(|m| m.metadata.deletion_timestamp.is_none())
        .filter(|m| key(m) < key(nm))
        .map(|m| m.name_any())
        .min()
}

fn node_facts(node: &Node) -> NodeFacts {
    let annotations = node.annotations();
    NodeFacts {
        name: node.name_any(),
        uid: node.uid().unwrap_or_default(),
        unschedulable: node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
        drain_taint: taints(node).iter().any(|t| t.key == DRAIN_TAINT_KEY),
        excluded: node.labels().get(EXCLUDE_LABEL).map(String::as_str) == Some("true"),
        cordoned_by: annotations.get(CORDONED_BY).cloned(),
        excluded_by: annotations.get(EXCLUDED_BY).cloned(),
    }
}

fn taints(node: &Node) -> Vec<k8s_openapi::api::core::v1::Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

/// The node's medik8s Lease as read, and what it says.
struct LeaseRead {
    lease: Option<Lease>,
    view: LeaseView,
}

async fn read_lease(ctx: &Context, node: &str) -> Result<LeaseRead, Error> {
    let s = settings(ctx);
    let api = Api::<Lease>::namespaced(ctx.client.clone(), &s.namespace);
    let lease = api.get_opt(&maintenance::lease_name(node)).await?;
    let view = match lease.as_ref().and_then(|l| l.spec.as_ref()) {
        None => LeaseView::Free,
        Some(spec) => {
            let holder = spec.holder_identity.clone().unwrap_or_default();
            let expired = match (&spec.renew_time, spec.lease_duration_seconds) {
                (Some(renewed), Some(secs)) => renewed
                    .0
                    .checked_add(jiff::SignedDuration::from_secs(i64::from(secs)))
                    .is_ok_and(|end| end < jiff::Timestamp::now()),
                _ => true,
            };
            if holder == s.holder {
                LeaseView::Ours
            } else if holder.is_empty() || expired {
                LeaseView::Free
            } else {
                LeaseView::Other { holder }
            }
        }
    };
    Ok(LeaseRead { lease, view })
}

/// The finalizer (before anything is changed) and, as NMO, a non-controller owner reference to
/// the Node, so that deleting the Node deletes the maintenance (its finalizer still runs first).
async fn own_and_finalize(
    api: &Api<NodeMaintenance>,
    nm: &NodeMaintenance,
    node: Option<&Node>,
    add_finalizer: bool,
) -> Result<(), Error> {
    let name = nm.name_any();
    let owner = node
        .filter(|_| nm.metadata.deletion_timestamp.is_none())
        .filter(|n| {
            !nm.owner_references()
                .iter()
                .any(|o| Some(&o.uid) == n.uid().as_ref())
        })
        .map(|n| OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: n.name_any(),
            uid: n.uid().unwrap_or_default(),
            ..Default::default()
        });
    if add_finalizer || owner.is_some() {
        let mut finalizers = nm.finalizers().to_vec();
        if add_finalizer {
            finalizers.push(FINALIZER.to_string());
        }
        let mut owners = nm.owner_references().to_vec();
        owners.extend(owner);
        let body = json!({ "metadata": {
            "finalizers": finalizers,
            "ownerReferences": owners,
            "resourceVersion": nm.resource_version(),
        } });
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
    }
    Ok(())
}

/// Applies a step: the finalizer before anything is changed, the node and the Lease, then the
/// evictions, then the status; the finalizer goes last, after the node is restored.
async fn apply(
    ctx: &Context,
    nm: &NodeMaintenance,
    node: Option<&Node>,
    lease: LeaseRead,
    mut step: Step,
) -> Result<Action, Error> {
    let name = nm.name_any();
    let api = Api::<NodeMaintenance>::all(ctx.client.clone());
    own_and_finalize(&api, nm, node, step.add_finalizer).await?;
    if step.lease == Some(LeaseAction::Hold) {
        hold_lease(ctx, nm, node, lease.lease.as_ref()).await?;
    }
    if let Some(node) = node {
        patch_node(ctx, &name, node, &step.node).await?;
    }
    if step.lease == Some(LeaseAction::Release) {
        release_lease(ctx, lease.lease.as_ref()).await?;
    }
    let results = if step.evict.is_empty() {
        Vec::new()
    } else {
        evict_all(&ctx.client, &ctx.eviction_client, &step.evict, None).await
    };
    {
        let mut backoff = ctx
            .refusal_backoff
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if maintenance::any_refused(&results) {
            let wait = maintenance::refusal_backoff(backoff.get(&name).copied());
            backoff.insert(name.clone(), wait);
            step.requeue_after = Some(wait);
        } else {
            backoff.remove(&name);
        }
    }
    if !results.is_empty() {
        maintenance::record_evictions(
            &mut step,
            &results,
            jiff::Timestamp::now(),
            nm.metadata.generation,
        );
    }
    maintenance::stamp(&mut step, nm.status.as_ref(), jiff::Timestamp::now());
    if !step.remove_finalizer && nm.status.as_ref() != Some(&step.status) {
        let body = json!({ "status": status_patch(nm.status.as_ref(), &step.status) });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
    }
    publish(ctx, nm, &step).await;
    if step.remove_finalizer {
        let finalizers: Vec<&String> = nm.finalizers().iter().filter(|f| *f != FINALIZER).collect();
        let body = json!({ "metadata": { "finalizers": finalizers, "resourceVersion": nm.resource_version() } });
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Ok(_) => {}
            Err(e) => return Err(e.into()),
        }
        info!(nodemaintenance = %name, node = %nm.spec.node_name, "maintenance removed");
    }
    Ok(match step.requeue_after {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    })
}

/// The new status as a merge patch over the old one: fields the new status leaves out (an emptied
/// list of pending pods, a cleared error) are set to null, so that they go.
fn status_patch(
    old: Option<&crate::maintenance::api::NodeMaintenanceStatus>,
    new: &crate::maintenance::api::NodeMaintenanceStatus,
) -> serde_json::Value {
    let mut patch = serde_json::to_value(new).unwrap_or_else(|_| json!({}));
    let old = old.and_then(|o| serde_json::to_value(o).ok());
    if let (Some(serde_json::Value::Object(old)), serde_json::Value::Object(map)) =
        (old, &mut patch)
    {
        for key in old.keys() {
            map.entry(key.clone()).or_insert(serde_json::Value::Null);
        }
    }
    patch
}

/// Cordon, taint, label and annotations in one merge patch. When it changes the taints (a
/// list, replaced whole) it carries the node's resourceVersion, so a change made since the node
/// was read is not overwritten: the patch is refused and the reconcile runs again.
async fn patch_node(
    ctx: &Context,
    nm: &str,
    node: &Node,
    change: &NodeChange,
) -> Result<(), Error> {
    if change.is_empty() {
        return Ok(());
    }
    let mut body = json!({ "metadata": { "annotations": change.annotations } });
    if let Some(unschedulable) = change.unschedulable {
        body["spec"]["unschedulable"] = json!(unschedulable);
    }
    if let Some(add) = change.drain_taint {
        let mut taints: Vec<_> = taints(node)
            .into_iter()
            .filter(|t| t.key != DRAIN_TAINT_KEY)
            .collect();
        if add {
            taints.push(k8s_openapi::api::core::v1::Taint {
                key: DRAIN_TAINT_KEY.into(),
                effect: "NoSchedule".into(),
                value: None,
                time_added: None,
            });
        }
        body["spec"]["taints"] = json!(taints);
        body["metadata"]["resourceVersion"] = json!(node.resource_version());
    }
    if let Some(add) = change.exclude_label {
        body["metadata"]["labels"] = json!({ EXCLUDE_LABEL: add.then_some("true") });
    }
    info!(nodemaintenance = %nm, node = %node.name_any(), ?change, "patching node");
    Api::<Node>::all(ctx.client.clone())
        .patch(
            &node.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&body),
        )
        .await?;
    ctx.metrics.node_patched();
    Ok(())
}

/// Creates, renews or takes over the node's Lease (`resourceVersion` guards the takeover).
async fn hold_lease(
    ctx: &Context,
    nm: &NodeMaintenance,
    node: Option<&Node>,
    current: Option<&Lease>,
) -> Result<(), Error> {
    let s = settings(ctx);
    let Some(node) = node else { return Ok(()) };
    let api = Api::<Lease>::namespaced(ctx.client.clone(), &s.namespace);
    let now = MicroTime(jiff::Timestamp::now());
    let duration = i32::try_from(s.duration.as_secs()).unwrap_or(i32::MAX);
    match current {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(maintenance::lease_name(&node.name_any())),
                    namespace: Some(s.namespace.clone()),
                    owner_references: Some(vec![OwnerReference {
                        api_version: "v1".into(),
                        kind: "Node".into(),
                        name: node.name_any(),
                        uid: node.uid().unwrap_or_default(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(s.holder.clone()),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    ..Default::default()
                }),
            };
            api.create(&PostParams::default(), &lease).await?;
            info!(nodemaintenance = %nm.name_any(), lease = %lease.name_any(), "took the node's lease");
        }
        Some(lease) => {
            let mut lease = lease.clone();
            let spec = lease.spec.get_or_insert_with(Default::default);
            let ours = spec.holder_identity.as_deref() == Some(s.holder.as_str());
            // Renew at most once a minute: a maintenance reconciles every few seconds.
            let fresh = spec.renew_time.as_ref().is_some_and(|t| {
                jiff::Timestamp::now().duration_since(t.0) < jiff::SignedDuration::from_secs(60)
            });
            if ours && fresh {
                return Ok(());
            }
            if !ours {
                spec.holder_identity = Some(s.holder.clone());
                spec.acquire_time = Some(now.clone());
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            spec.lease_duration_seconds = Some(duration);
            spec.renew_time = Some(now);
            api.replace(&lease.name_any(), &PostParams::default(), &lease)
                .await?;
        }
    }
    Ok(())
}

/// Deletes the Lease if it is ours (medik8s invalidates a lease by deleting it).
async fn release_lease(ctx: &Context, current: Option<&Lease>) -> Result<(), Error> {
    let s = settings(ctx);
    let Some(lease) = current else { return Ok(()) };
    let holder = lease
        .spec
        .as_ref()
        .and_then(|l| l.holder_identity.as_deref());
    if holder != Some(s.holder.as_str()) {
        return Ok(());
    }
    let api = Api::<Lease>::namespaced(ctx.client.clone(), &s.namespace);
    let precondition = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: lease.uid(),
            resource_version: lease.resource_version(),
        }),
        ..Default::default()
    };
    match api.delete(&lease.name_any(), &precondition).await {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Ok(_) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

async fn publish(ctx: &Context, nm: &NodeMaintenance, step: &Step) {
    let reference = nm.object_ref(&());
    for event in &step.events {
        let published = ctx
            .recorder
            .publish(
                &Event {
                    type_: if event.warning {
                        EventType::Warning
                    } else {
                        EventType::Normal
                    },
                    reason: event.reason.to_string(),
                    note: Some(event.message.clone()),
                    action: event.reason.to_string(),
                    secondary: None,
                },
                &reference,
            )
            .await;
        if let Err(e) = published {
            warn!(nodemaintenance = %nm.name_any(), reason = event.reason, "cannot publish event: {e}");
        }
    }
}
