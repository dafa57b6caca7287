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

use super::{Context, Error, FIELD_MANAGER};
use crate::api::Plan;
use crate::rollout::{self, Rollout};

pub(super) async fn apply(ctx: &Context, plan: &Plan, decision: Rollout) -> Result<(), Error> {
    let ns = &ctx.settings.namespace;
    let name = plan.name_any();
    let nodes = Api::<Node>::all(ctx.client.clone());
    for patch in &decision.node_patches {
        let mut body = json!({ "metadata": { "labels": patch.labels } });
        if patch.uncordon {
            body["spec"] = json!({ "unschedulable": false });
        }
        info!(plan = %name, node = %patch.node, labels = ?patch.labels, uncordon = patch.uncordon, "patching node");
        match nodes
            .patch(&patch.node, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => {
                ctx.metrics.node_patched();
                ctx.expect.patched_node(patch);
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }

    if decision.status_changed {
        let mut updated = plan.clone();
        updated.status = Some(decision.status.clone());
        // replace_status carries metadata.resourceVersion: a decision made on a stale Plan is
        // refused with a conflict instead of overwriting a newer applying list.
        let written = Api::<Plan>::namespaced(ctx.client.clone(), ns)
            .replace_status(&name, &PostParams::default(), &updated)
            .await?;
        ctx.expect.wrote_status(written);
        debug!(plan = %name, "status updated");
    }

    let jobs = Api::<Job>::namespaced(ctx.client.clone(), ns);
    for deletion in &decision.delete_jobs {
        info!(plan = %name, job = %deletion.name, "deleting job: {}", deletion.reason);
        match jobs
            .delete(&deletion.name, &DeleteParams::background())
            .await
        {
            Ok(_) => ctx.metrics.job_deleted(),
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }

    let create = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), ns);
    for name_of_pod in &decision.delete_pods {
        info!(plan = %name, pod = %name_of_pod, "deleting reboot pod");
        match pods.delete(name_of_pod, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
    // Reboot pods first: a node's Job must never run before the pod that will reboot it exists.
    for pod in &decision.create_pods {
        let pod_name = pod.name_any();
        match pods.create(&create, pod).await {
            Ok(created) => {
                info!(plan = %name, pod = %pod_name, "created reboot pod");
                ctx.expect.created_pod(created);
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    for job in &decision.create_jobs {
        let job_name = job.name_any();
        match jobs.create(&create, job).await {
            Ok(created) => {
                ctx.metrics.job_created();
                ctx.expect.created_job(created);
                info!(plan = %name, job = %job_name, "created job");
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                debug!(plan = %name, job = %job_name, "job already exists");
            }
            Err(e) => return Err(e.into()),
        }
    }

    let reference = plan.object_ref(&());
    for event in &decision.events {
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
            warn!(plan = %name, reason = event.reason, "cannot publish event: {e}");
        }
    }
    Ok(())
}

fn note_digest(note: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(note.as_bytes())
        .iter()
        .take(4)
        .map(|b| format!("{b:02x}"))
        .collect()
}
