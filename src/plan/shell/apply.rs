//! Applies a [`Rollout`] in the order that keeps the concurrency bound across crashes: labels of
//! finished nodes first (they only release nodes, and a crash after them never re-runs a node),
//! then the status, guarded by the Plan's resourceVersion, then everything else.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use crate::plan::api::{Plan, PlanStatus};
use crate::plan::core::{self as rollout, NodePatch, Rollout};
use crate::runtime::{Context, Error, FIELD_MANAGER};

pub(super) async fn apply(ctx: &Context, plan: &Plan, decision: Rollout) -> Result<(), Error> {
    let name = plan.name_any();
    patch_nodes(ctx, &name, &decision.node_patches).await?;
    if decision.status_changed {
        write_status(ctx, plan, decision.status.clone()).await?;
    }
    let ns = &ctx.settings.namespace;
    let jobs = Api::<Job>::namespaced(ctx.client.clone(), ns);
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), ns);
    for deletion in &decision.delete_jobs {
        info!(plan = %name, job = %deletion.name, "deleting job: {}", deletion.reason);
        if gone_or_done(
            jobs.delete(&deletion.name, &DeleteParams::background())
                .await,
        )? {
            ctx.metrics.job_deleted();
        }
    }
    for pod in &decision.delete_pods {
        info!(plan = %name, pod = %pod, "deleting reboot pod");
        gone_or_done(pods.delete(pod, &DeleteParams::default()).await)?;
    }
    // Reboot pods first: a node's Job must never run before the pod that will reboot it exists.
    for pod in &decision.create_pods {
        if let Some(created) = create(&pods, pod).await? {
            info!(plan = %name, pod = %pod.name_any(), "created reboot pod");
            ctx.expect.created_pod(created);
        }
    }
    for job in &decision.create_jobs {
        if let Some(created) = create(&jobs, job).await? {
            ctx.metrics.job_created();
            ctx.expect.created_job(created);
            info!(plan = %name, job = %job.name_any(), "created job");
        }
    }
    publish_events(ctx, plan, &decision.events).await;
    Ok(())
}

/// The cleanup of a deleted Plan: its Jobs and reboot pods first (nothing starts on a node about
/// to be uncordoned), then the uncordons.
pub(super) async fn clean_up(
    ctx: &Context,
    plan: &str,
    cleanup: &rollout::deletion::Cleanup,
) -> Result<(), Error> {
    let ns = &ctx.settings.namespace;
    let jobs = Api::<Job>::namespaced(ctx.client.clone(), ns);
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), ns);
    for job in &cleanup.delete_jobs {
        info!(plan = %plan, job = %job, "deleting job: its Plan is deleted");
        if gone_or_done(jobs.delete(job, &DeleteParams::background()).await)? {
            ctx.metrics.job_deleted();
        }
    }
    for pod in &cleanup.delete_pods {
        info!(plan = %plan, pod = %pod, "deleting reboot pod: its Plan is deleted");
        gone_or_done(pods.delete(pod, &DeleteParams::default()).await)?;
    }
    patch_nodes(ctx, plan, &cleanup.node_patches).await
}

/// Labels done nodes and uncordons them: only ever releases nodes.
async fn patch_nodes(ctx: &Context, plan: &str, patches: &[NodePatch]) -> Result<(), Error> {
    let nodes = Api::<Node>::all(ctx.client.clone());
    for patch in patches {
        let mut body = json!({ "metadata": { "labels": patch.labels } });
        if !patch.annotations.is_empty() {
            body["metadata"]["annotations"] = json!(patch.annotations);
        }
        if patch.uncordon {
            body["spec"] = json!({ "unschedulable": false });
        }
        info!(plan = %plan, node = %patch.node, labels = ?patch.labels, annotations = ?patch.annotations, uncordon = patch.uncordon, "patching node");
        let patched = nodes
            .patch(&patch.node, &PatchParams::default(), &Patch::Merge(&body))
            .await;
        if gone_or_done(patched)? {
            ctx.metrics.node_patched();
            ctx.expect.patched_node(patch);
        }
    }
    Ok(())
}

/// replace_status carries metadata.resourceVersion: a decision made on a stale Plan is refused
/// with a conflict instead of overwriting a newer applying list.
async fn write_status(ctx: &Context, plan: &Plan, status: PlanStatus) -> Result<(), Error> {
    let mut updated = plan.clone();
    updated.status = Some(status);
    let written = Api::<Plan>::namespaced(ctx.client.clone(), &ctx.settings.namespace)
        .replace_status(&plan.name_any(), &PostParams::default(), &updated)
        .await?;
    ctx.expect.wrote_status(written);
    debug!(plan = %plan.name_any(), "status updated");
    Ok(())
}

/// `Ok(true)` when done, `Ok(false)` when the object was already gone.
fn gone_or_done<T>(result: Result<T, kube::Error>) -> Result<bool, Error> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.is_not_found() => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Creates `object`; `None` when it already exists (a name is a promise: the same object).
async fn create<K>(api: &Api<K>, object: &K) -> Result<Option<K>, Error>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    match api.create(&params, object).await {
        Ok(created) => Ok(Some(created)),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            debug!(name = ?object.meta().name, "already exists");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

async fn publish_events(ctx: &Context, plan: &Plan, events: &[rollout::PlanEvent]) {
    let reference = plan.object_ref(&());
    for event in events {
        let published = ctx
            .recorder
            .publish(
                &Event {
                    type_: match event.type_ {
                        rollout::EventType::Normal => EventType::Normal,
                        rollout::EventType::Warning => EventType::Warning,
                    },
                    reason: event.reason.to_string(),
                    note: Some(event.message.clone()),
                    // kube's recorder folds events with the same action and reason into one series
                    // that keeps the first note; a digest of the note keeps different messages apart.
                    action: format!("{}-{}", event.reason, note_digest(&event.message)),
                    secondary: None,
                },
                &reference,
            )
            .await;
        if let Err(e) = published {
            warn!(plan = %plan.name_any(), reason = event.reason, "cannot publish event: {e}");
        }
    }
}

fn note_digest(note: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(note.as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect()
}
