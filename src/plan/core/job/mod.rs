//! The upgrade Job of one (Plan, node), field for field as SUC's `job.New` and `container.New`
//! build it, so that the scripts inside see exactly what they see under SUC.
//!
//! Differences from SUC, all deliberate:
//! - `parallelism` is always 1: the controller only creates a Job for a node that the persisted
//!   `status.applying` already lists, so SUC's paused (parallelism 0) first pass is not needed.
//! - Volumes named only in `prepare.volumes` also get a pod volume (SUC quirk 10 made such pods
//!   invalid).
//! - ownerReferences are set here rather than by an apply library, and the wrangler
//!   `objectset.rio.cattle.io/*` annotations and label are not written.
//! - The Job carries [`POD_TEMPLATE_HASH_ANNOTATION`], so that a changed template can be
//!   detected without comparing API-server-defaulted specs.

mod containers;
mod drain;
#[cfg(test)]
mod fixtures;
mod metadata;
mod pod;
mod timing;
mod volumes;

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::common::naming::job_name;
use crate::common::selector::SelectionError;
use crate::node::NodeInfo;
use crate::plan::api::{Plan, labels};
use crate::plan::core::config::JobConfig;
use crate::plan::core::settings::PlanSettings;

pub use drain::{drain_args, drain_outlasts_deadline};
pub use metadata::{POD_TEMPLATE_HASH_ANNOTATION, compute_pod_template_hash, pod_template_hash};
pub use timing::active_deadline_seconds;
pub use volumes::secret_mount_path;

use metadata::{job_labels, plan_annotations};
use pod::pod_spec;
use timing::job_ttl;

/// Why a Job cannot be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    #[error("plan has no metadata.name")]
    MissingName,
    #[error("plan {0} has no metadata.uid")]
    MissingUid(String),
    #[error("plan {0} has no status.latestVersion")]
    MissingLatestVersion(String),
    #[error("plan {0} has no status.latestHash")]
    MissingLatestHash(String),
    /// SUC's message, reported for every Windows node while the image is unset.
    #[error("SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE_WINDOWS is required when targeting Windows nodes")]
    MissingWindowsKubectlImage,
    /// SUC's CRD and slipway's accept a Plan without an image (one that only resolves a
    /// version); no Job can run it.
    #[error("spec.{0}.image is empty: a Job needs an image")]
    EmptyImage(&'static str),
    #[error("spec.drain.podSelector: {0}")]
    DrainPodSelector(#[from] SelectionError),
    #[error("cannot encode the pod template: {0}")]
    Encode(String),
}

/// What a Job is for: the Plan's identity, settings and resolved version, and the node.
struct Target<'a> {
    plan: &'a Plan,
    settings: &'a PlanSettings<'a>,
    plan_name: &'a str,
    plan_uid: &'a str,
    latest_version: &'a str,
    latest_hash: &'a str,
    node: &'a NodeInfo,
    windows: bool,
}

impl<'a> Target<'a> {
    fn read(
        plan: &'a Plan,
        settings: &'a PlanSettings<'a>,
        node: &'a NodeInfo,
        config: &JobConfig,
    ) -> Result<Target<'a>, RenderError> {
        let plan_name = plan
            .metadata
            .name
            .as_deref()
            .ok_or(RenderError::MissingName)?;
        let missing = |e: fn(String) -> RenderError| e(plan_name.to_string());
        let plan_uid = plan
            .metadata
            .uid
            .as_deref()
            .ok_or_else(|| missing(RenderError::MissingUid))?;
        let status = plan.status.as_ref();
        let latest_version = status
            .and_then(|s| s.latest_version.as_deref())
            .filter(|v| !v.is_empty())
            .ok_or_else(|| missing(RenderError::MissingLatestVersion))?;
        let latest_hash = status
            .and_then(|s| s.latest_hash.as_deref())
            .filter(|h| !h.is_empty())
            .ok_or_else(|| missing(RenderError::MissingLatestHash))?;
        let empty =
            |c: Option<&crate::plan::api::ContainerSpec>| c.is_some_and(|c| c.image.is_empty());
        for (field, container) in [
            ("upgrade", Some(&plan.spec.upgrade)),
            ("prepare", plan.spec.prepare.as_ref()),
        ] {
            if empty(container) {
                return Err(RenderError::EmptyImage(field));
            }
        }
        let windows = node.is_windows();
        if windows && config.kubectl_image_windows.is_empty() {
            return Err(RenderError::MissingWindowsKubectlImage);
        }
        Ok(Target {
            plan,
            settings,
            plan_name,
            plan_uid,
            latest_version,
            latest_hash,
            node,
            windows,
        })
    }
}

/// The Job that upgrades `node` to `plan.status.latestVersion`: the Plan's containers and volumes
/// copied from its spec, its durations and reboot from `settings` (the spec as read and checked).
pub fn render_job(
    plan: &Plan,
    settings: &PlanSettings<'_>,
    node: &NodeInfo,
    controller_name: &str,
    config: &JobConfig,
) -> Result<Job, RenderError> {
    let target = Target::read(plan, settings, node, config)?;
    let ttl = job_ttl(settings, config);
    let job_labels = job_labels(&target, controller_name);
    let plan_annotations = plan_annotations(plan);
    let name = job_name(target.plan_name, &node.name, target.latest_hash);
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(job_labels.clone()),
            annotations: non_empty_map(plan_annotations.clone()),
            ..Default::default()
        }),
        spec: Some(pod_spec(&target, config, &name)?),
    };
    let mut job_annotations = BTreeMap::from([(
        labels::TTL_SECONDS_AFTER_FINISHED.to_string(),
        ttl.to_string(),
    )]);
    job_annotations.extend(plan_annotations);
    job_annotations.insert(
        POD_TEMPLATE_HASH_ANNOTATION.to_string(),
        compute_pod_template_hash(&template).map_err(|e| RenderError::Encode(e.to_string()))?,
    );
    Ok(Job {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: plan.metadata.namespace.clone(),
            labels: Some(job_labels),
            annotations: Some(job_annotations),
            owner_references: Some(vec![crate::plan::api::plan_owner_reference(
                target.plan_name,
                target.plan_uid,
            )]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            completions: Some(1),
            parallelism: Some(1),
            backoff_limit: Some(config.backoff_limit),
            active_deadline_seconds: active_deadline_seconds(
                plan.spec.job_active_deadline_secs,
                config,
            ),
            ttl_seconds_after_finished: Some(ttl),
            pod_replacement_policy: Some(config.pod_replacement_policy.clone()),
            template,
            ..Default::default()
        }),
        status: None,
    })
}

/// Go drops empty strings (`omitempty`) when it sends an object.
fn non_empty_string(s: Option<&str>) -> Option<String> {
    s.filter(|s| !s.is_empty()).map(str::to_string)
}

fn non_empty_map(m: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!m.is_empty()).then_some(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::api::PlanStatus;
    use crate::plan::core::job::fixtures::*;
    use k8s_openapi::api::core::v1::{LocalObjectReference, PodSpec};

    // --- Windows ---

    #[test]
    fn windows_nodes_need_the_windows_kubectl_image() {
        let err =
            render_on(&basic(), &windows_node(), &JobConfig::default()).expect_err("no image");
        assert_eq!(err, RenderError::MissingWindowsKubectlImage);
        assert_eq!(
            err.to_string(),
            "SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE_WINDOWS is required when targeting Windows nodes"
        );
    }

    #[test]
    fn a_plan_without_an_image_renders_no_job() {
        for (spec, field) in [
            ("upgrade:\n  image: ''\n", "upgrade"),
            ("upgrade:\n  image: u\nprepare:\n  image: ''\n", "prepare"),
        ] {
            let err =
                render_on(&plan(spec), &node("n1"), &JobConfig::default()).expect_err("no image");
            assert_eq!(err, RenderError::EmptyImage(field));
            assert_eq!(
                err.to_string(),
                format!("spec.{field}.image is empty: a Job needs an image")
            );
        }
    }

    // --- Job spec and metadata ---

    #[test]
    fn job_spec_and_pod_settings() {
        let p = plan(
            "upgrade:\n  image: u\nserviceAccountName: system-upgrade\npriorityClassName: system-node-critical\nimagePullSecrets:\n- {name: regcred}\n",
        );
        let config = JobConfig {
            backoff_limit: 99,
            pod_replacement_policy: "Failed".into(),
            ..Default::default()
        };
        let job = render_with(&p, &config);
        let spec = job.spec.as_ref().expect("spec");
        assert_eq!(spec.completions, Some(1));
        assert_eq!(spec.parallelism, Some(1));
        assert_eq!(spec.backoff_limit, Some(99));
        assert_eq!(spec.pod_replacement_policy.as_deref(), Some("Failed"));
        let pod = pod(&job);
        assert_eq!(pod.host_ipc, Some(true));
        assert_eq!(pod.host_pid, Some(true));
        assert_eq!(pod.host_network, Some(true));
        assert_eq!(pod.dns_policy.as_deref(), Some("ClusterFirstWithHostNet"));
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        assert_eq!(pod.service_account_name.as_deref(), Some("system-upgrade"));
        assert_eq!(
            pod.priority_class_name.as_deref(),
            Some("system-node-critical")
        );
        assert_eq!(
            pod.image_pull_secrets,
            Some(vec![LocalObjectReference {
                name: "regcred".into()
            }])
        );
        assert_eq!(pod.containers.len(), 1);
        assert_eq!(pod.containers[0].name, "upgrade");

        let bare = pod_spec_of(&render(&basic()));
        assert_eq!(bare.service_account_name, None);
        assert_eq!(bare.priority_class_name, None);
        assert_eq!(bare.image_pull_secrets, None);
    }

    fn pod_spec_of(job: &Job) -> PodSpec {
        pod(job).clone()
    }

    #[test]
    fn metadata_labels_and_owner() {
        let job = render(&basic());
        assert_eq!(job.metadata.namespace.as_deref(), Some("system-upgrade"));
        assert_eq!(
            job.metadata.name.as_deref(),
            Some("apply-k3s-server-on-node-1-with-a71d41ca3e2c6b5a1d92efcb9-61926")
        );
        assert_eq!(
            job.metadata.labels,
            Some(BTreeMap::from([
                (
                    labels::CONTROLLER.to_string(),
                    "system-upgrade-controller".to_string()
                ),
                (labels::EXCLUSIVE.to_string(), "false".to_string()),
                (labels::NODE.to_string(), "node-1".to_string()),
                (labels::PLAN.to_string(), "k3s-server".to_string()),
                (labels::VERSION.to_string(), VERSION.to_string()),
                (
                    "plan.upgrade.cattle.io/k3s-server".to_string(),
                    HASH.to_string()
                ),
            ]))
        );
        assert_eq!(
            job.metadata.owner_references,
            Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: "upgrade.cattle.io/v1".into(),
                    kind: "Plan".into(),
                    name: "k3s-server".into(),
                    uid: "plan-uid".into(),
                    controller: Some(true),
                    block_owner_deletion: Some(false),
                }
            ])
        );
    }

    #[test]
    fn an_unresolved_plan_cannot_be_rendered() {
        let n = node("n");
        let c = JobConfig::default();
        // The settings of a valid Plan: one without a name has none.
        let valid = basic();
        let settings = settings_of(&valid, &c);
        let render_on = |p: &Plan, n: &NodeInfo, c: &JobConfig| render_job(p, &settings, n, "c", c);
        let mut p = basic();
        p.status = None;
        assert_eq!(
            render_on(&p, &n, &c),
            Err(RenderError::MissingLatestVersion("k3s-server".into()))
        );
        p.status = Some(PlanStatus {
            latest_version: Some(VERSION.into()),
            latest_hash: Some(String::new()),
            ..Default::default()
        });
        assert_eq!(
            render_on(&p, &n, &c),
            Err(RenderError::MissingLatestHash("k3s-server".into()))
        );
        let mut p = basic();
        p.metadata.uid = None;
        assert_eq!(
            render_on(&p, &n, &c),
            Err(RenderError::MissingUid("k3s-server".into()))
        );
        p.metadata.name = None;
        assert_eq!(render_on(&p, &n, &c), Err(RenderError::MissingName));
    }
}
