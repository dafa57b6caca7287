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

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, DownwardAPIVolumeFile, DownwardAPIVolumeSource, EnvVar,
    EnvVarSource, HostPathVolumeSource, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, ObjectFieldSelector, PodAffinityTerm, PodAntiAffinity, PodSpec,
    PodTemplateSpec, SecretVolumeSource, SecurityContext, Toleration, Volume, VolumeMount,
    WindowsSecurityContextOptions,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use sha2::{Digest, Sha256};

use crate::common::duration::GoDuration;
use crate::common::naming::{hex, job_name, secret_volume_name};
use crate::common::selector::SelectionError;
use crate::node::NodeInfo;
use crate::plan::api::{
    ContainerSpec, DrainSpec, DrainTimeout, Plan, SecretSpec, VolumeSpec, labels,
};
use crate::plan::core::config::JobConfig;
use crate::plan::core::image::with_latest_tag;
use crate::plan::core::reboot;
use crate::plan::core::selection::drain_pod_selector;

/// Job annotation with a digest of `spec.template`, written by slipway only.
pub const POD_TEMPLATE_HASH_ANNOTATION: &str = "slipway.dev/pod-template-hash";

const HOST_ROOT_VOLUME: &str = "host-root";
const POD_INFO_VOLUME: &str = "pod-info";
const POD_INFO_PATH: &str = "/run/system-upgrade/pod";
const SECRETS_DIR: &str = "/run/system-upgrade/secrets";
const WINDOWS_SYSTEM_USER: &str = "NT AUTHORITY\\SYSTEM";
const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

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
    #[error("spec.postCompleteDelay {0:?} is not a duration")]
    InvalidPostCompleteDelay(String),
    #[error("spec.drain.podSelector: {0}")]
    DrainPodSelector(#[from] SelectionError),
    #[error("cannot encode the pod template: {0}")]
    Encode(String),
}

/// What a Job is for: the Plan's identity and resolved version, and the node.
struct Target<'a> {
    plan: &'a Plan,
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
        let windows = node.is_windows();
        if windows && config.kubectl_image_windows.is_empty() {
            return Err(RenderError::MissingWindowsKubectlImage);
        }
        Ok(Target {
            plan,
            plan_name,
            plan_uid,
            latest_version,
            latest_hash,
            node,
            windows,
        })
    }

    fn common(&self, config: &'a JobConfig) -> Common<'a> {
        Common {
            plan_name: self.plan_name,
            latest_version: self.latest_version,
            latest_hash: self.latest_hash,
            secrets: self.plan.spec.secrets.as_deref().unwrap_or_default(),
            image_pull_policy: &config.image_pull_policy,
        }
    }
}

/// The Job that upgrades `node` to `plan.status.latestVersion`.
pub fn render_job(
    plan: &Plan,
    node: &NodeInfo,
    controller_name: &str,
    config: &JobConfig,
) -> Result<Job, RenderError> {
    let target = Target::read(plan, node, config)?;
    let ttl = job_ttl(plan, config)?;
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

/// `ttlSecondsAfterFinished`: SUC's rule, raised so that a rebooting node's completed Job
/// outlives the reboot and the health gate.
fn job_ttl(plan: &Plan, config: &JobConfig) -> Result<i32, RenderError> {
    let ttl = ttl_seconds_after_finished(
        config.ttl_seconds_after_finished,
        plan.spec.post_complete_delay.as_deref(),
    )?;
    let Some(policy) = reboot::policy(plan, config) else {
        return Ok(ttl);
    };
    let gate = policy
        .health_gate
        .as_ref()
        .map_or(0, |g| g.timeout.as_secs());
    let needed = policy.timeout.as_secs() + gate + 60;
    Ok(ttl.max(i32::try_from(needed).unwrap_or(i32::MAX)))
}

/// The labels of the Job and its pod: SUC's, then the Plan's own except `*cattle.io/*`.
fn job_labels(t: &Target<'_>, controller_name: &str) -> BTreeMap<String, String> {
    let exclusive = t.plan.spec.exclusive.unwrap_or(false);
    let mut job_labels = BTreeMap::from([
        (labels::CONTROLLER.to_string(), controller_name.to_string()),
        (labels::EXCLUSIVE.to_string(), exclusive.to_string()),
        (labels::NODE.to_string(), t.node.name.clone()),
        (labels::PLAN.to_string(), t.plan_name.to_string()),
        (labels::VERSION.to_string(), t.latest_version.to_string()),
        (
            labels::plan_node_label(t.plan_name),
            t.latest_hash.to_string(),
        ),
    ]);
    job_labels.extend(
        t.plan
            .metadata
            .labels
            .iter()
            .flatten()
            .filter(|(k, _)| !k.contains("cattle.io/"))
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    job_labels
}

/// The Plan's annotations that Jobs and pods carry: all but `*cattle.io/*` and kubectl's.
fn plan_annotations(plan: &Plan) -> BTreeMap<String, String> {
    plan.metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| !k.contains("cattle.io/") && !k.contains("kubectl.kubernetes.io/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn host_process() -> SecurityContext {
    SecurityContext {
        windows_options: Some(WindowsSecurityContextOptions {
            host_process: Some(true),
            run_as_user_name: Some(WINDOWS_SYSTEM_USER.to_string()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The init containers before the upgrade: `prepare`, then `cordon` or `drain`.
fn init_containers(t: &Target<'_>, config: &JobConfig) -> Result<Vec<Container>, RenderError> {
    let spec = &t.plan.spec;
    let common = t.common(config);
    let mut init = Vec::new();
    if let Some(prepare) = &spec.prepare {
        let security = if t.windows {
            Some(host_process())
        } else {
            prepare.security_context.clone()
        };
        let volumes = prepare.volumes.as_deref().unwrap_or_default();
        init.push(common.container(
            "prepare",
            prepare,
            Some(t.latest_version),
            volumes,
            security,
        ));
    }
    let kubectl_args = match (&spec.drain, spec.cordon.unwrap_or(false)) {
        (Some(drain), _) => Some(("drain", drain_args(&t.node.name, drain)?)),
        (None, true) => Some(("cordon", vec!["cordon".to_string(), t.node.name.clone()])),
        (None, false) => None,
    };
    if let Some((name, args)) = kubectl_args {
        let image = if t.windows {
            &config.kubectl_image_windows
        } else {
            &config.kubectl_image
        };
        let kubectl = ContainerSpec {
            image: image.clone(),
            args: Some(args),
            ..Default::default()
        };
        let volumes = spec.upgrade.volumes.as_deref().unwrap_or_default();
        init.push(common.container(name, &kubectl, None, volumes, t.windows.then(host_process)));
    }
    Ok(init)
}

/// The upgrade container, privileged with `CAP_SYS_BOOT` unless the Plan says otherwise.
fn upgrade_container(t: &Target<'_>, config: &JobConfig) -> Container {
    let spec = &t.plan.spec;
    let security = match &spec.upgrade.security_context {
        Some(sc) => sc.clone(),
        None if t.windows => host_process(),
        None => SecurityContext {
            privileged: Some(config.privileged),
            capabilities: Some(Capabilities {
                add: Some(vec!["CAP_SYS_BOOT".to_string()]),
                ..Default::default()
            }),
            ..Default::default()
        },
    };
    let volumes = spec.upgrade.volumes.as_deref().unwrap_or_default();
    t.common(config).container(
        "upgrade",
        &spec.upgrade,
        Some(t.latest_version),
        volumes,
        Some(security),
    )
}

/// The pod: on the node's host namespaces, pinned to its hostname, never beside another pod of
/// the Plan (or of any exclusive Plan) on the same node.
fn pod_spec(t: &Target<'_>, config: &JobConfig, job_name: &str) -> Result<PodSpec, RenderError> {
    let spec = &t.plan.spec;
    let mut init = init_containers(t, config)?;
    let upgrade = upgrade_container(t, config);
    let mut volumes = pod_volumes(t.plan);
    // With `spec.reboot`, the upgrade becomes the last init container and the only main container
    // writes the sentinel, so the sentinel exists only if every step before it succeeded.
    let containers = match reboot::policy(t.plan, config) {
        Some(policy) if !t.windows => {
            init.push(upgrade);
            volumes.push(reboot::sentinel_volume(&policy));
            vec![Container {
                name: reboot::SENTINEL_NAME.to_string(),
                image: Some(policy.image.clone()),
                command: Some(reboot::sentinel_step_command(job_name)),
                image_pull_policy: Some(config.image_pull_policy.clone()),
                volume_mounts: Some(vec![reboot::sentinel_mount()]),
                ..Default::default()
            }]
        }
        _ => vec![upgrade],
    };
    let mut tolerations = vec![Toleration {
        key: Some(UNSCHEDULABLE_TAINT.to_string()),
        operator: Some("Exists".to_string()),
        effect: Some("NoSchedule".to_string()),
        ..Default::default()
    }];
    tolerations.extend(spec.tolerations.iter().flatten().cloned());
    Ok(PodSpec {
        host_ipc: Some(true),
        host_pid: Some(true),
        host_network: Some(true),
        dns_policy: Some("ClusterFirstWithHostNet".to_string()),
        priority_class_name: non_empty_string(spec.priority_class_name.as_deref()),
        service_account_name: non_empty_string(spec.service_account_name.as_deref()),
        affinity: Some(affinity(t)),
        tolerations: Some(tolerations),
        restart_policy: Some("Never".to_string()),
        volumes: Some(volumes),
        image_pull_secrets: spec.image_pull_secrets.clone().filter(|s| !s.is_empty()),
        init_containers: (!init.is_empty()).then_some(init),
        containers,
        ..Default::default()
    })
}

fn affinity(t: &Target<'_>) -> Affinity {
    let (key, value) = if t.plan.spec.exclusive.unwrap_or(false) {
        (labels::EXCLUSIVE, "true")
    } else {
        (labels::PLAN, t.plan_name)
    };
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: labels::HOSTNAME.to_string(),
                        operator: "In".to_string(),
                        values: Some(vec![t.node.hostname().to_string()]),
                    }]),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        pod_anti_affinity: Some(PodAntiAffinity {
            required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                label_selector: Some(LabelSelector {
                    match_expressions: Some(vec![LabelSelectorRequirement {
                        key: key.to_string(),
                        operator: "In".to_string(),
                        values: Some(vec![value.to_string()]),
                    }]),
                    ..Default::default()
                }),
                topology_key: labels::HOSTNAME.to_string(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `jobActiveDeadlineSecs`: >0 as is, 0 for no deadline, negative or unset for the controller
/// default; then at most the configured maximum, which also replaces "no deadline".
pub fn active_deadline_seconds(plan_value: Option<i64>, config: &JobConfig) -> Option<i64> {
    let deadline = match plan_value {
        None => Some(config.active_deadline_seconds),
        Some(v) if v < 0 => Some(config.active_deadline_seconds),
        Some(0) => None,
        Some(v) => Some(v),
    };
    let max = config.active_deadline_seconds_max;
    match deadline {
        _ if max <= 0 => deadline,
        None => Some(max),
        Some(d) => Some(d.min(max)),
    }
}

/// The Job TTL: the configured one, raised to `postCompleteDelay + 1m` (whole seconds, truncated)
/// so that the finished Job outlives the delay the controller waits for.
fn ttl_seconds_after_finished(
    config_ttl: i32,
    post_complete_delay: Option<&str>,
) -> Result<i32, RenderError> {
    let Some(delay) = post_complete_delay else {
        return Ok(config_ttl);
    };
    let delay: GoDuration = delay
        .parse()
        .map_err(|_| RenderError::InvalidPostCompleteDelay(delay.to_string()))?;
    let wanted_nanos = i128::from(delay.nanos) + 60_000_000_000;
    if i128::from(config_ttl) * 1_000_000_000 < wanted_nanos {
        // Go converts the float seconds to int32; clamp where Go's result is undefined.
        let secs = wanted_nanos / 1_000_000_000;
        Ok(i32::try_from(secs).unwrap_or(i32::MAX))
    } else {
        Ok(config_ttl)
    }
}

/// The arguments of the `drain` container, flags in SUC's order.
pub fn drain_args(node_name: &str, drain: &DrainSpec) -> Result<Vec<String>, RenderError> {
    let mut args = vec![
        "drain".to_string(),
        node_name.to_string(),
        "--pod-selector".to_string(),
        drain_pod_selector(drain.pod_selector.as_ref())?,
    ];
    if drain.ignore_daemon_sets.unwrap_or(true) {
        args.push("--ignore-daemonsets".to_string());
    }
    if drain.delete_local_data.unwrap_or(true) && drain.delete_emptydir_data.unwrap_or(true) {
        args.push("--delete-emptydir-data".to_string());
    }
    if drain.force.unwrap_or(false) {
        args.push("--force".to_string());
    }
    if let Some(timeout) = &drain.timeout {
        args.push("--timeout".to_string());
        args.push(match timeout {
            DrainTimeout::Nanoseconds(n) => GoDuration { nanos: *n }.to_string(),
            DrainTimeout::Text(s) => s.clone(),
        });
    }
    if let Some(grace) = drain.grace_period {
        args.push("--grace-period".to_string());
        args.push(grace.to_string());
    }
    if drain.disable_eviction.unwrap_or(false) {
        args.push("--disable-eviction=true".to_string());
    }
    if let Some(skip) = drain.skip_wait_for_delete_timeout.filter(|s| *s > 0) {
        args.push("--skip-wait-for-delete-timeout".to_string());
        args.push(skip.to_string());
    }
    Ok(args)
}

/// Whether the drain timeout is longer than the Job may run (SUC logs a warning for this).
pub fn drain_timeout_exceeds_deadline(plan: &Plan, job: &Job) -> bool {
    let timeout = plan.spec.drain.as_ref().and_then(|d| d.timeout.as_ref());
    let deadline = job.spec.as_ref().and_then(|s| s.active_deadline_seconds);
    let (Some(timeout), Some(deadline)) = (timeout, deadline) else {
        return false;
    };
    let nanos = match timeout {
        DrainTimeout::Nanoseconds(n) => *n,
        // An unparseable string counts as zero, as in SUC.
        DrainTimeout::Text(s) => s.parse::<GoDuration>().map(|d| d.nanos).unwrap_or(0),
    };
    i128::from(nanos / 1_000_000) > i128::from(deadline) * 1000
}

/// Where a Plan secret is mounted: an absolute `path` as is, a relative one under
/// `/run/system-upgrade/secrets/`, an empty one at `/run/system-upgrade/secrets/<name>`
/// (the last two cleaned as Go's `filepath.Join` does).
pub fn secret_mount_path(secret: &SecretSpec) -> String {
    if secret.path.is_empty() {
        clean_path(&format!("{SECRETS_DIR}/{}", secret.name))
    } else if secret.path.starts_with('/') {
        secret.path.clone()
    } else {
        clean_path(&format!("{SECRETS_DIR}/{}", secret.path))
    }
}

/// The digest of a pod template that [`POD_TEMPLATE_HASH_ANNOTATION`] records: the first 16 hex
/// digits of the sha256 of its JSON (field order fixed by the types, maps sorted).
pub fn compute_pod_template_hash(template: &PodTemplateSpec) -> Result<String, serde_json::Error> {
    let json = serde_json::to_vec(template)?;
    let mut digest = hex(&Sha256::digest(&json));
    digest.truncate(16);
    Ok(digest)
}

/// The template digest a Job was rendered with, if slipway rendered it.
pub fn pod_template_hash(job: &Job) -> Option<&str> {
    job.metadata
        .annotations
        .as_ref()?
        .get(POD_TEMPLATE_HASH_ANNOTATION)
        .map(String::as_str)
}

/// What every container of one Job shares.
struct Common<'a> {
    plan_name: &'a str,
    latest_version: &'a str,
    latest_hash: &'a str,
    secrets: &'a [SecretSpec],
    image_pull_policy: &'a str,
}

impl Common<'_> {
    /// `container.New` with SUC's options: mounts of the host root, pod info, secrets and then
    /// `volumes`; env of the pod identity, the spec's `envs`, then the plan identity.
    fn container(
        &self,
        name: &str,
        spec: &ContainerSpec,
        latest_tag: Option<&str>,
        volumes: &[VolumeSpec],
        security_context: Option<SecurityContext>,
    ) -> Container {
        let image = match latest_tag {
            Some(version) => with_latest_tag(&spec.image, version),
            None => spec.image.clone(),
        };
        Container {
            name: name.to_string(),
            image: Some(image),
            command: spec.command.clone().filter(|c| !c.is_empty()),
            args: spec.args.clone().filter(|a| !a.is_empty()),
            env: Some(self.env(spec)),
            env_from: spec.env_from.clone().filter(|e| !e.is_empty()),
            volume_mounts: Some(self.mounts(volumes)),
            image_pull_policy: non_empty_string(Some(self.image_pull_policy)),
            security_context,
            ..Default::default()
        }
    }

    /// The pod identity, the spec's `envs`, then the plan identity.
    fn env(&self, spec: &ContainerSpec) -> Vec<EnvVar> {
        let field_env = |name: &str, path: &str| EnvVar {
            name: name.to_string(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: path.to_string(),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let value_env = |name: &str, value: &str| EnvVar {
            name: name.to_string(),
            value: non_empty_string(Some(value)),
            ..Default::default()
        };
        let mut env = vec![
            field_env("SYSTEM_UPGRADE_NODE_NAME", "spec.nodeName"),
            field_env("SYSTEM_UPGRADE_POD_NAME", "metadata.name"),
            field_env("SYSTEM_UPGRADE_POD_UID", "metadata.uid"),
        ];
        env.extend(spec.envs.iter().flatten().cloned());
        env.push(value_env("SYSTEM_UPGRADE_PLAN_NAME", self.plan_name));
        env.push(value_env(
            "SYSTEM_UPGRADE_PLAN_LATEST_HASH",
            self.latest_hash,
        ));
        env.push(value_env(
            "SYSTEM_UPGRADE_PLAN_LATEST_VERSION",
            self.latest_version,
        ));
        env
    }

    /// The host root, pod info, the secrets, then `volumes`.
    fn mounts(&self, volumes: &[VolumeSpec]) -> Vec<VolumeMount> {
        let mut mounts = vec![
            VolumeMount {
                name: HOST_ROOT_VOLUME.to_string(),
                mount_path: "/host".to_string(),
                ..Default::default()
            },
            VolumeMount {
                name: POD_INFO_VOLUME.to_string(),
                mount_path: POD_INFO_PATH.to_string(),
                read_only: Some(true),
                ..Default::default()
            },
        ];
        mounts.extend(self.secrets.iter().map(|s| VolumeMount {
            name: secret_volume_name(&s.name),
            mount_path: secret_mount_path(s),
            read_only: Some(true),
            ..Default::default()
        }));
        mounts.extend(volumes.iter().map(|v| VolumeMount {
            name: v.name.clone(),
            mount_path: v.destination.clone(),
            ..Default::default()
        }));
        mounts
    }
}

/// host-root, pod-info, the secrets, `upgrade.volumes`, then the volumes only `prepare` names.
fn pod_volumes(plan: &Plan) -> Vec<Volume> {
    let host_path = |name: &str, path: &str, type_: Option<&str>| Volume {
        name: name.to_string(),
        host_path: Some(HostPathVolumeSource {
            path: path.to_string(),
            type_: type_.map(str::to_string),
        }),
        ..Default::default()
    };
    let field_file = |path: &str, field: &str| DownwardAPIVolumeFile {
        path: path.to_string(),
        field_ref: Some(ObjectFieldSelector {
            api_version: Some("v1".to_string()),
            field_path: field.to_string(),
        }),
        ..Default::default()
    };
    let mut volumes = vec![
        host_path(HOST_ROOT_VOLUME, "/", Some("Directory")),
        Volume {
            name: POD_INFO_VOLUME.to_string(),
            downward_api: Some(DownwardAPIVolumeSource {
                default_mode: Some(420),
                items: Some(vec![
                    field_file("labels", "metadata.labels"),
                    field_file("annotations", "metadata.annotations"),
                ]),
            }),
            ..Default::default()
        },
    ];
    volumes.extend(plan.spec.secrets.iter().flatten().map(|s| Volume {
        name: secret_volume_name(&s.name),
        secret: Some(SecretVolumeSource {
            secret_name: Some(s.name.clone()),
            default_mode: s.default_mode,
            optional: Some(s.ignore_updates.unwrap_or(false)),
            ..Default::default()
        }),
        ..Default::default()
    }));
    volumes.extend(
        plan.spec
            .upgrade
            .volumes
            .iter()
            .flatten()
            .map(|v| host_path(&v.name, &v.source, None)),
    );
    // SUC mounts prepare.volumes but never creates them, so a name not also in
    // upgrade.volumes made the pod invalid; give such names their own host path.
    let prepare_volumes = plan
        .spec
        .prepare
        .iter()
        .flat_map(|p| p.volumes.iter().flatten());
    for v in prepare_volumes {
        if !volumes.iter().any(|existing| existing.name == v.name) {
            volumes.push(host_path(&v.name, &v.source, None));
        }
    }
    volumes
}

/// Go's `path.Clean` for the rooted paths secrets are mounted at.
fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
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
    use k8s_openapi::api::core::v1::LocalObjectReference;

    const HASH: &str = "a71d41ca3e2c6b5a1d92efcb9449397b0115d7e83e52a5c0055c484e";
    const VERSION: &str = "v1.30.1-k3s1";

    fn plan(spec_yaml: &str) -> Plan {
        let yaml = format!(
            "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata:\n  name: k3s-server\n  namespace: system-upgrade\n  uid: plan-uid\nspec:\n{}",
            spec_yaml
                .lines()
                .map(|l| format!("  {l}\n"))
                .collect::<String>()
        );
        let mut p: Plan = serde_saphyr::from_str(&yaml).expect("test plan parses");
        p.status = Some(PlanStatus {
            latest_version: Some(VERSION.into()),
            latest_hash: Some(HASH.into()),
            ..Default::default()
        });
        p
    }

    fn basic() -> Plan {
        plan("concurrency: 1\nupgrade:\n  image: rancher/k3s-upgrade\n")
    }

    fn node(name: &str) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            uid: format!("uid-{name}"),
            labels: BTreeMap::from([(labels::HOSTNAME.to_string(), name.to_string())]),
            ..Default::default()
        }
    }

    fn windows_node() -> NodeInfo {
        let mut n = node("win-1");
        n.labels.insert(labels::OS.into(), "windows".into());
        n
    }

    fn render(p: &Plan) -> Job {
        render_job(
            p,
            &node("node-1"),
            "system-upgrade-controller",
            &JobConfig::default(),
        )
        .expect("renders")
    }

    fn render_with(p: &Plan, config: &JobConfig) -> Job {
        render_job(p, &node("node-1"), "system-upgrade-controller", config).expect("renders")
    }

    fn pod(job: &Job) -> &PodSpec {
        job.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .expect("pod spec")
    }

    fn init(job: &Job) -> &[Container] {
        pod(job).init_containers.as_deref().unwrap_or_default()
    }

    fn container<'a>(job: &'a Job, name: &str) -> &'a Container {
        init(job)
            .iter()
            .chain(pod(job).containers.iter())
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no container {name}"))
    }

    fn init_names(job: &Job) -> Vec<&str> {
        init(job).iter().map(|c| c.name.as_str()).collect()
    }

    fn mounts(c: &Container) -> Vec<(&str, &str, Option<bool>)> {
        c.volume_mounts
            .iter()
            .flatten()
            .map(|m| (m.name.as_str(), m.mount_path.as_str(), m.read_only))
            .collect()
    }

    fn env_names(c: &Container) -> Vec<&str> {
        c.env.iter().flatten().map(|e| e.name.as_str()).collect()
    }

    fn volume_names(job: &Job) -> Vec<&str> {
        pod(job)
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect()
    }

    fn args(c: &Container) -> Vec<&str> {
        c.args.iter().flatten().map(String::as_str).collect()
    }

    fn deadline(job: &Job) -> Option<i64> {
        job.spec.as_ref().and_then(|s| s.active_deadline_seconds)
    }

    fn with_deadline(secs: Option<i64>) -> Plan {
        let mut p = basic();
        p.spec.job_active_deadline_secs = secs;
        p
    }

    // --- SUC's job_suite_test.go ---

    #[test]
    fn deadline_positive_uses_the_plan_value() {
        assert_eq!(deadline(&render(&with_deadline(Some(12345)))), Some(12345));
    }

    #[test]
    fn deadline_unset_uses_the_controller_default() {
        assert_eq!(deadline(&render(&with_deadline(None))), Some(600));
        let config = JobConfig {
            active_deadline_seconds: 900,
            ..Default::default()
        };
        assert_eq!(
            deadline(&render_with(&with_deadline(None), &config)),
            Some(900)
        );
    }

    #[test]
    fn deadline_zero_means_none() {
        assert_eq!(deadline(&render(&with_deadline(Some(0)))), None);
    }

    #[test]
    fn deadline_negative_uses_the_controller_default() {
        assert_eq!(deadline(&render(&with_deadline(Some(-1)))), Some(600));
    }

    #[test]
    fn deadline_is_clamped_to_the_max() {
        let config = JobConfig {
            active_deadline_seconds_max: 300,
            ..Default::default()
        };
        assert_eq!(
            deadline(&render_with(&with_deadline(Some(600)), &config)),
            Some(300)
        );
        assert_eq!(
            deadline(&render_with(&with_deadline(Some(200)), &config)),
            Some(200)
        );
        // The default 600 is clamped too, and "none" becomes the max.
        assert_eq!(
            deadline(&render_with(&with_deadline(None), &config)),
            Some(300)
        );
        assert_eq!(
            deadline(&render_with(&with_deadline(Some(-5)), &config)),
            Some(300)
        );
        assert_eq!(
            deadline(&render_with(&with_deadline(Some(0)), &config)),
            Some(300)
        );
    }

    #[test]
    fn labels_and_annotations_propagate_without_cattle_keys() {
        let mut p = basic();
        p.metadata.labels = Some(BTreeMap::from([
            ("foo".to_string(), "bar".to_string()),
            ("example.com/team".to_string(), "infra".to_string()),
            ("plan.cattle.io/x".to_string(), "dropped".to_string()),
            (
                "upgrade.cattle.io/controller".to_string(),
                "spoof".to_string(),
            ),
            ("management.cattle.io/y".to_string(), "dropped".to_string()),
        ]));
        p.metadata.annotations = Some(BTreeMap::from([
            ("note".to_string(), "kept".to_string()),
            ("plan.cattle.io/x".to_string(), "dropped".to_string()),
            (labels::DIGEST.to_string(), "spec.concurrency".to_string()),
            (
                "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                "{}".to_string(),
            ),
        ]));
        let job = render(&p);
        let job_labels = job.metadata.labels.as_ref().expect("labels");
        let template = job
            .spec
            .as_ref()
            .expect("spec")
            .template
            .metadata
            .as_ref()
            .expect("meta");
        assert_eq!(template.labels.as_ref(), Some(job_labels));
        assert_eq!(job_labels["foo"], "bar");
        assert_eq!(job_labels["example.com/team"], "infra");
        assert!(!job_labels.contains_key("plan.cattle.io/x"));
        assert!(!job_labels.contains_key("management.cattle.io/y"));
        assert_eq!(job_labels[labels::CONTROLLER], "system-upgrade-controller");
        assert_eq!(job_labels.len(), 8);

        let job_annotations = job.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(job_annotations["note"], "kept");
        assert_eq!(job_annotations[labels::TTL_SECONDS_AFTER_FINISHED], "900");
        assert!(job_annotations.contains_key(POD_TEMPLATE_HASH_ANNOTATION));
        assert_eq!(job_annotations.len(), 3);
        assert_eq!(
            template.annotations,
            Some(BTreeMap::from([("note".to_string(), "kept".to_string())]))
        );
    }

    #[test]
    fn without_plan_annotations_the_pod_has_none() {
        let job = render(&basic());
        let template = job
            .spec
            .as_ref()
            .expect("spec")
            .template
            .metadata
            .as_ref()
            .expect("meta");
        assert_eq!(template.annotations, None);
    }

    // --- SUC's flags_test.go ---

    #[test]
    fn skip_wait_for_delete_timeout_only_when_positive() {
        let with_skip = |n: i64| {
            let drain = DrainSpec {
                skip_wait_for_delete_timeout: Some(n),
                ..Default::default()
            };
            drain_args("n", &drain).expect("args")
        };
        assert!(!with_skip(-1).contains(&"--skip-wait-for-delete-timeout".to_string()));
        assert!(!with_skip(0).contains(&"--skip-wait-for-delete-timeout".to_string()));
        let one = with_skip(1);
        let at = one
            .iter()
            .position(|a| a == "--skip-wait-for-delete-timeout")
            .expect("flag");
        assert_eq!(one[at + 1], "1");
    }

    // --- SUC's container_test.go ---

    #[test]
    fn image_pull_policy_comes_from_the_config() {
        let mut p = basic();
        p.spec.prepare = Some(ContainerSpec {
            image: "alpine:3".into(),
            ..Default::default()
        });
        p.spec.cordon = Some(true);
        let config = JobConfig {
            image_pull_policy: "Always".into(),
            ..Default::default()
        };
        let job = render_with(&p, &config);
        for name in ["prepare", "cordon", "upgrade"] {
            assert_eq!(
                container(&job, name).image_pull_policy.as_deref(),
                Some("Always")
            );
        }
    }

    #[test]
    fn latest_tag_is_added_to_name_only_images_of_prepare_and_upgrade() {
        let mut p = plan(
            "upgrade:\n  image: img.example.com:5000/test/image\nprepare:\n  image: rancher/k3s-upgrade\ndrain: {}\n",
        );
        let config = JobConfig {
            kubectl_image: "rancher/kubectl".into(),
            ..Default::default()
        };
        let job = render_with(&p, &config);
        assert_eq!(
            container(&job, "upgrade").image.as_deref(),
            Some(format!("img.example.com:5000/test/image:{VERSION}").as_str())
        );
        assert_eq!(
            container(&job, "prepare").image.as_deref(),
            Some(format!("rancher/k3s-upgrade:{VERSION}").as_str())
        );
        // The kubectl image is used as configured.
        assert_eq!(
            container(&job, "drain").image.as_deref(),
            Some("rancher/kubectl")
        );

        p.spec.upgrade.image = "img.example.com:5000/test/image:v2".into();
        p.spec.prepare = Some(ContainerSpec {
            image: "docker.io/library/alpine".into(),
            ..Default::default()
        });
        let job = render(&p);
        assert_eq!(
            container(&job, "upgrade").image.as_deref(),
            Some("img.example.com:5000/test/image:v2")
        );
        assert_eq!(
            container(&job, "prepare").image.as_deref(),
            Some(format!("alpine:{VERSION}").as_str())
        );
    }

    #[test]
    fn plan_environment_follows_the_pod_identity_and_plan_envs() {
        let p = plan(
            "upgrade:\n  image: u\n  envs:\n  - {name: A, value: '1'}\n  - {name: B, value: '2'}\nprepare:\n  image: p\n  envs:\n  - {name: P, value: x}\ncordon: true\n",
        );
        let job = render(&p);
        let identity = [
            "SYSTEM_UPGRADE_NODE_NAME",
            "SYSTEM_UPGRADE_POD_NAME",
            "SYSTEM_UPGRADE_POD_UID",
        ];
        let plan_env = [
            "SYSTEM_UPGRADE_PLAN_NAME",
            "SYSTEM_UPGRADE_PLAN_LATEST_HASH",
            "SYSTEM_UPGRADE_PLAN_LATEST_VERSION",
        ];
        let expect = |middle: &[&'static str]| -> Vec<&'static str> {
            identity
                .iter()
                .chain(middle)
                .chain(plan_env.iter())
                .copied()
                .collect()
        };
        assert_eq!(env_names(container(&job, "upgrade")), expect(&["A", "B"]));
        assert_eq!(env_names(container(&job, "prepare")), expect(&["P"]));
        assert_eq!(env_names(container(&job, "cordon")), expect(&[]));

        let env = container(&job, "upgrade").env.as_ref().expect("env");
        let field = |i: usize| {
            env[i]
                .value_from
                .as_ref()
                .and_then(|v| v.field_ref.as_ref())
                .map(|f| (f.field_path.as_str(), f.api_version.as_deref()))
        };
        assert_eq!(field(0), Some(("spec.nodeName", None)));
        assert_eq!(field(1), Some(("metadata.name", None)));
        assert_eq!(field(2), Some(("metadata.uid", None)));
        assert_eq!(env[3].value.as_deref(), Some("1"));
        assert_eq!(env[5].value.as_deref(), Some("k3s-server"));
        assert_eq!(env[6].value.as_deref(), Some(HASH));
        assert_eq!(env[7].value.as_deref(), Some(VERSION));
    }

    #[test]
    fn secrets_are_mounted_read_only_in_every_container() {
        let long = "s".repeat(80);
        let p = plan(&format!(
            "upgrade:\n  image: u\nprepare:\n  image: p\ndrain: {{}}\nsecrets:\n- {{name: tls, path: /etc/tls, defaultMode: 256}}\n- {{name: {long}, path: rel/dir/, ignoreUpdates: true}}\n- {{name: token, path: ''}}\n"
        ));
        let job = render(&p);
        let long_volume = secret_volume_name(&long);
        assert_eq!(long_volume.len(), 63);
        assert!(long_volume.contains(&long[..50]));
        for name in ["prepare", "drain", "upgrade"] {
            let m = mounts(container(&job, name));
            assert_eq!(
                &m[2..5],
                &[
                    ("secret-tls", "/etc/tls", Some(true)),
                    (
                        long_volume.as_str(),
                        "/run/system-upgrade/secrets/rel/dir",
                        Some(true)
                    ),
                    (
                        "secret-token",
                        "/run/system-upgrade/secrets/token",
                        Some(true)
                    ),
                ],
                "{name}"
            );
        }
        let volumes = pod(&job).volumes.as_ref().expect("volumes");
        let secret = |i: usize| volumes[i].secret.as_ref().expect("secret volume");
        assert_eq!(volumes[2].name, "secret-tls");
        assert_eq!(secret(2).secret_name.as_deref(), Some("tls"));
        assert_eq!(secret(2).default_mode, Some(256));
        assert_eq!(secret(2).optional, Some(false));
        assert_eq!(volumes[3].name, long_volume);
        assert_eq!(secret(3).secret_name.as_deref(), Some(long.as_str()));
        assert_eq!(secret(3).default_mode, None);
        assert_eq!(secret(3).optional, Some(true));
        assert_eq!(volumes[4].name, "secret-token");
    }

    #[test]
    fn secret_paths_are_joined_and_cleaned_like_go() {
        let path = |name: &str, path: &str| {
            secret_mount_path(&SecretSpec {
                name: name.into(),
                path: path.into(),
                ..Default::default()
            })
        };
        assert_eq!(path("s", "/abs//path/"), "/abs//path/");
        assert_eq!(path("s", "a"), "/run/system-upgrade/secrets/a");
        assert_eq!(path("s", "./a/./b/"), "/run/system-upgrade/secrets/a/b");
        assert_eq!(path("s", "a/../b"), "/run/system-upgrade/secrets/b");
        assert_eq!(path("s", "../../../../x"), "/x");
        assert_eq!(path("s", ""), "/run/system-upgrade/secrets/s");
    }

    #[test]
    fn security_contexts_are_passed_through() {
        let p = plan(
            "upgrade:\n  image: u\n  securityContext: {runAsUser: 0, privileged: false}\nprepare:\n  image: p\n  securityContext: {privileged: true}\n",
        );
        let job = render(&p);
        assert_eq!(
            container(&job, "upgrade").security_context,
            p.spec.upgrade.security_context
        );
        assert_eq!(
            container(&job, "prepare").security_context,
            p.spec
                .prepare
                .as_ref()
                .and_then(|c| c.security_context.clone())
        );
    }

    #[test]
    fn default_security_contexts() {
        let mut p = basic();
        p.spec.prepare = Some(ContainerSpec {
            image: "p".into(),
            ..Default::default()
        });
        p.spec.cordon = Some(true);
        let job = render(&p);
        let privileged = SecurityContext {
            privileged: Some(true),
            capabilities: Some(Capabilities {
                add: Some(vec!["CAP_SYS_BOOT".into()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            container(&job, "upgrade").security_context,
            Some(privileged)
        );
        // SUC quirk 11: prepare is not privileged unless it asks.
        assert_eq!(container(&job, "prepare").security_context, None);
        assert_eq!(container(&job, "cordon").security_context, None);

        let config = JobConfig {
            privileged: false,
            ..Default::default()
        };
        let job = render_with(&p, &config);
        let sc = container(&job, "upgrade")
            .security_context
            .clone()
            .expect("sc");
        assert_eq!(sc.privileged, Some(false));
    }

    // --- drain and cordon ---

    #[test]
    fn drain_defaults() {
        assert_eq!(
            drain_args("node-1", &DrainSpec::default()).expect("args"),
            vec![
                "drain",
                "node-1",
                "--pod-selector",
                "!upgrade.cattle.io/controller",
                "--ignore-daemonsets",
                "--delete-emptydir-data",
            ]
        );
    }

    #[test]
    fn every_drain_flag_in_suc_order() {
        let drain: DrainSpec = serde_json::from_value(serde_json::json!({
            "timeout": 300000000000i64,
            "gracePeriod": 30,
            "deleteLocalData": true,
            "ignoreDaemonSets": true,
            "force": true,
            "disableEviction": true,
            "skipWaitForDeleteTimeout": 60,
            "podSelector": {"matchExpressions": [
                {"key": "component", "operator": "NotIn", "values": ["sonobuoy"]}
            ]}
        }))
        .expect("drain spec");
        assert_eq!(
            drain_args("node-1", &drain).expect("args"),
            vec![
                "drain",
                "node-1",
                "--pod-selector",
                "component notin (sonobuoy),!upgrade.cattle.io/controller",
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--force",
                "--timeout",
                "5m0s",
                "--grace-period",
                "30",
                "--disable-eviction=true",
                "--skip-wait-for-delete-timeout",
                "60",
            ]
        );
    }

    #[test]
    fn drain_flags_that_can_be_turned_off() {
        let args = |json: serde_json::Value| {
            let drain: DrainSpec = serde_json::from_value(json).expect("drain spec");
            drain_args("n", &drain).expect("args")
        };
        let base = [
            "drain",
            "n",
            "--pod-selector",
            "!upgrade.cattle.io/controller",
        ];
        assert_eq!(
            args(serde_json::json!({"ignoreDaemonSets": false, "deleteLocalData": false})),
            base
        );
        assert_eq!(
            args(serde_json::json!({"ignoreDaemonSets": false, "deleteEmptydirData": false})),
            base
        );
        // Both explicitly true (Validate rejects setting both, but the render rule is SUC's).
        assert_eq!(
            args(
                serde_json::json!({"ignoreDaemonSets": false, "deleteLocalData": true, "deleteEmptydirData": true})
            ),
            [&base[..], &["--delete-emptydir-data"]].concat()
        );
        assert_eq!(
            args(serde_json::json!({"ignoreDaemonSets": false, "deleteEmptydirData": true})),
            [&base[..], &["--delete-emptydir-data"]].concat()
        );
        assert_eq!(
            args(
                serde_json::json!({"force": false, "disableEviction": false, "ignoreDaemonSets": false, "deleteLocalData": false, "gracePeriod": 0})
            ),
            [&base[..], &["--grace-period", "0"]].concat()
        );
        assert_eq!(
            args(
                serde_json::json!({"gracePeriod": -1, "ignoreDaemonSets": false, "deleteLocalData": false})
            ),
            [&base[..], &["--grace-period", "-1"]].concat()
        );
    }

    #[test]
    fn drain_timeouts() {
        let timeout = |t: DrainTimeout| {
            let drain = DrainSpec {
                timeout: Some(t),
                ..Default::default()
            };
            let a = drain_args("n", &drain).expect("args");
            let at = a.iter().position(|x| x == "--timeout").expect("flag");
            a[at + 1].clone()
        };
        assert_eq!(timeout(DrainTimeout::Nanoseconds(300_000_000_000)), "5m0s");
        assert_eq!(timeout(DrainTimeout::Nanoseconds(1_500_000_000)), "1.5s");
        assert_eq!(timeout(DrainTimeout::Nanoseconds(0)), "0s");
        assert_eq!(timeout(DrainTimeout::Text("10m".into())), "10m");
        // Strings are passed verbatim, even ones kubectl will reject.
        assert_eq!(timeout(DrainTimeout::Text("soon".into())), "soon");
    }

    #[test]
    fn an_invalid_drain_pod_selector_is_an_error() {
        let drain: DrainSpec = serde_json::from_value(serde_json::json!({
            "podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}
        }))
        .expect("drain spec");
        assert!(matches!(
            drain_args("n", &drain),
            Err(RenderError::DrainPodSelector(_))
        ));
    }

    #[test]
    fn cordon_drain_and_neither() {
        let mut p = basic();
        let job = render(&p);
        assert!(pod(&job).init_containers.is_none());

        p.spec.cordon = Some(true);
        let job = render(&p);
        assert_eq!(init_names(&job), vec!["cordon"]);
        let cordon = container(&job, "cordon");
        assert_eq!(args(cordon), vec!["cordon", "node-1"]);
        assert_eq!(cordon.command, None);
        assert_eq!(cordon.image.as_deref(), Some("rancher/kubectl:v1.30.3"));

        // Drain cordons anyway, so cordon is ignored.
        p.spec.drain = Some(DrainSpec::default());
        let job = render(&p);
        assert_eq!(init_names(&job), vec!["drain"]);
        let drain = container(&job, "drain");
        assert_eq!(&args(drain)[..2], &["drain", "node-1"]);
        assert_eq!(drain.command, None);

        p.spec.cordon = Some(false);
        p.spec.prepare = Some(ContainerSpec {
            image: "p".into(),
            ..Default::default()
        });
        assert_eq!(init_names(&render(&p)), vec!["prepare", "drain"]);
        p.spec.drain = None;
        assert_eq!(init_names(&render(&p)), vec!["prepare"]);
    }

    #[test]
    fn kubectl_targets_the_node_name() {
        let mut p = basic();
        p.spec.cordon = Some(true);
        let mut n = node("node-1.example.com");
        n.labels.insert(labels::HOSTNAME.into(), "NODE-1".into());
        let job = render_job(&p, &n, "c", &JobConfig::default()).expect("renders");
        assert_eq!(
            args(container(&job, "cordon")),
            vec!["cordon", "node-1.example.com"]
        );
    }

    // --- scheduling ---

    fn anti_affinity(job: &Job) -> (String, Vec<String>, String) {
        let term = &pod(job)
            .affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .expect("anti-affinity")[..];
        assert_eq!(term.len(), 1);
        let expr = &term[0]
            .label_selector
            .as_ref()
            .and_then(|s| s.match_expressions.as_ref())
            .expect("expressions")[..];
        assert_eq!(expr.len(), 1);
        assert_eq!(expr[0].operator, "In");
        (
            expr[0].key.clone(),
            expr[0].values.clone().unwrap_or_default(),
            term[0].topology_key.clone(),
        )
    }

    #[test]
    fn anti_affinity_is_per_plan_or_exclusive() {
        let mut p = basic();
        let job = render(&p);
        assert_eq!(
            anti_affinity(&job),
            (
                labels::PLAN.to_string(),
                vec!["k3s-server".to_string()],
                labels::HOSTNAME.to_string()
            )
        );
        assert_eq!(
            job.metadata.labels.as_ref().expect("labels")[labels::EXCLUSIVE],
            "false"
        );

        p.spec.exclusive = Some(true);
        let job = render(&p);
        assert_eq!(
            anti_affinity(&job),
            (
                labels::EXCLUSIVE.to_string(),
                vec!["true".to_string()],
                labels::HOSTNAME.to_string()
            )
        );
        assert_eq!(
            job.metadata.labels.as_ref().expect("labels")[labels::EXCLUSIVE],
            "true"
        );
    }

    #[test]
    fn builtin_toleration_comes_first() {
        let p = plan(
            "upgrade:\n  image: u\ntolerations:\n- {key: CriticalAddonsOnly, operator: Exists}\n- {key: kubernetes.io/arch, operator: Equal, value: arm64, effect: NoSchedule}\n",
        );
        let tolerations = pod(&render(&p)).tolerations.clone().expect("tolerations");
        assert_eq!(tolerations.len(), 3);
        assert_eq!(
            tolerations[0],
            Toleration {
                key: Some("node.kubernetes.io/unschedulable".into()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            }
        );
        assert_eq!(tolerations[1].key.as_deref(), Some("CriticalAddonsOnly"));
        assert_eq!(tolerations[2].value.as_deref(), Some("arm64"));
        assert_eq!(
            pod(&render(&basic())).tolerations.as_ref().map(Vec::len),
            Some(1)
        );
    }

    #[test]
    fn hostname_pins_the_pod_and_node_name_names_the_job() {
        let p = basic();
        let mut n = node("node-1.example.com");
        n.labels
            .insert(labels::HOSTNAME.into(), "Node-1-Host".into());
        let job = render_job(&p, &n, "c", &JobConfig::default()).expect("renders");
        let required = pod(&job)
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .expect("node affinity");
        assert_eq!(required.node_selector_terms.len(), 1);
        let expr = required.node_selector_terms[0]
            .match_expressions
            .as_ref()
            .expect("expressions");
        assert_eq!(
            expr,
            &vec![NodeSelectorRequirement {
                key: labels::HOSTNAME.into(),
                operator: "In".into(),
                values: Some(vec!["Node-1-Host".into()]),
            }]
        );
        assert_eq!(pod(&job).node_name, None);
        assert_eq!(
            job.metadata.name.as_deref(),
            Some(job_name("k3s-server", "node-1.example.com", HASH).as_str())
        );
        assert!(
            job.metadata
                .name
                .as_deref()
                .expect("name")
                .starts_with("apply-k3s-server-on-node-1-with-")
        );
        let l = job.metadata.labels.as_ref().expect("labels");
        assert_eq!(l[labels::NODE], "node-1.example.com");

        // Without a hostname label the node name is used.
        let mut bare = node("bare");
        bare.labels.clear();
        let job = render_job(&p, &bare, "c", &JobConfig::default()).expect("renders");
        let values = pod(&job)
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .and_then(|s| s.node_selector_terms[0].match_expressions.as_ref())
            .and_then(|e| e[0].values.clone());
        assert_eq!(values, Some(vec!["bare".to_string()]));
    }

    // --- volumes and mounts ---

    #[test]
    fn volumes_and_mounts_in_suc_order() {
        let p = plan(
            "upgrade:\n  image: u\n  volumes:\n  - {name: etc, source: /etc, destination: /host-etc}\n  - {name: shared, source: /var/shared, destination: /shared}\nprepare:\n  image: p\n  volumes:\n  - {name: shared, source: /ignored, destination: /prep-shared}\n  - {name: prep-only, source: /opt/prep, destination: /prep}\ndrain: {}\nsecrets:\n- {name: s, path: s}\n",
        );
        let job = render(&p);
        assert_eq!(
            volume_names(&job),
            vec![
                "host-root",
                "pod-info",
                "secret-s",
                "etc",
                "shared",
                "prep-only"
            ]
        );
        let volumes = pod(&job).volumes.as_ref().expect("volumes");
        assert_eq!(
            volumes[0].host_path,
            Some(HostPathVolumeSource {
                path: "/".into(),
                type_: Some("Directory".into())
            })
        );
        let downward = volumes[1].downward_api.as_ref().expect("downward api");
        assert_eq!(downward.default_mode, Some(420));
        let items: Vec<_> = downward
            .items
            .iter()
            .flatten()
            .map(|i| {
                let f = i.field_ref.as_ref().expect("field ref");
                (
                    i.path.as_str(),
                    f.field_path.as_str(),
                    f.api_version.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            items,
            vec![
                ("labels", "metadata.labels", Some("v1")),
                ("annotations", "metadata.annotations", Some("v1"))
            ]
        );
        let host = |i: usize| volumes[i].host_path.clone().expect("host path");
        assert_eq!(
            host(3),
            HostPathVolumeSource {
                path: "/etc".into(),
                type_: None
            }
        );
        // A name in both keeps upgrade's source, as in SUC.
        assert_eq!(host(4).path, "/var/shared");
        assert_eq!(
            host(5),
            HostPathVolumeSource {
                path: "/opt/prep".into(),
                type_: None
            }
        );

        let common = [
            ("host-root", "/host", None),
            ("pod-info", "/run/system-upgrade/pod", Some(true)),
            ("secret-s", "/run/system-upgrade/secrets/s", Some(true)),
        ];
        let upgrade_mounts = [("etc", "/host-etc", None), ("shared", "/shared", None)];
        let expected_upgrade: Vec<_> = common.iter().chain(&upgrade_mounts).copied().collect();
        assert_eq!(mounts(container(&job, "upgrade")), expected_upgrade);
        assert_eq!(mounts(container(&job, "drain")), expected_upgrade);
        let prepare_mounts = [
            ("shared", "/prep-shared", None),
            ("prep-only", "/prep", None),
        ];
        let expected_prepare: Vec<_> = common.iter().chain(&prepare_mounts).copied().collect();
        assert_eq!(mounts(container(&job, "prepare")), expected_prepare);

        // Every mount has a pod volume.
        let names = volume_names(&job);
        for c in init(&job).iter().chain(pod(&job).containers.iter()) {
            for m in c.volume_mounts.iter().flatten() {
                assert!(names.contains(&m.name.as_str()), "{} in {}", m.name, c.name);
            }
        }
    }

    #[test]
    fn cordon_mounts_upgrade_volumes() {
        let p = plan(
            "upgrade:\n  image: u\n  volumes:\n  - {name: etc, source: /etc, destination: /host-etc}\ncordon: true\n",
        );
        let job = render(&p);
        assert_eq!(
            mounts(container(&job, "cordon")).last(),
            Some(&("etc", "/host-etc", None))
        );
    }

    // --- Windows ---

    #[test]
    fn windows_nodes_need_the_windows_kubectl_image() {
        let err = render_job(&basic(), &windows_node(), "c", &JobConfig::default())
            .expect_err("no image");
        assert_eq!(err, RenderError::MissingWindowsKubectlImage);
        assert_eq!(
            err.to_string(),
            "SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE_WINDOWS is required when targeting Windows nodes"
        );
    }

    #[test]
    fn windows_nodes_get_host_process_containers() {
        let mut p = plan(
            "upgrade:\n  image: u\nprepare:\n  image: p\n  securityContext: {privileged: true}\ndrain: {}\n",
        );
        let config = JobConfig {
            kubectl_image_windows: "example.com/kubectl-windows:v1".into(),
            ..Default::default()
        };
        let host_process = Some(SecurityContext {
            windows_options: Some(WindowsSecurityContextOptions {
                host_process: Some(true),
                run_as_user_name: Some("NT AUTHORITY\\SYSTEM".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        let job = render_job(&p, &windows_node(), "c", &config).expect("renders");
        assert_eq!(
            container(&job, "drain").image.as_deref(),
            Some("example.com/kubectl-windows:v1")
        );
        assert_eq!(container(&job, "drain").security_context, host_process);
        // Prepare's own context is replaced on Windows, as in SUC.
        assert_eq!(container(&job, "prepare").security_context, host_process);
        assert_eq!(container(&job, "upgrade").security_context, host_process);

        // Upgrade keeps a context the plan sets.
        let own = SecurityContext {
            run_as_user: Some(1000),
            ..Default::default()
        };
        p.spec.upgrade.security_context = Some(own.clone());
        p.spec.drain = None;
        p.spec.cordon = Some(true);
        let job = render_job(&p, &windows_node(), "c", &config).expect("renders");
        assert_eq!(container(&job, "upgrade").security_context, Some(own));
        assert_eq!(container(&job, "cordon").security_context, host_process);
        assert_eq!(
            container(&job, "cordon").image.as_deref(),
            Some("example.com/kubectl-windows:v1")
        );
    }

    // --- Job spec and metadata ---

    #[test]
    fn ttl_is_raised_by_post_complete_delay() {
        let ttl = |delay: Option<&str>| {
            let mut p = basic();
            p.spec.post_complete_delay = delay.map(str::to_string);
            let job = render(&p);
            let spec_ttl = job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished);
            let annotation = job.metadata.annotations.as_ref().expect("annotations")
                [labels::TTL_SECONDS_AFTER_FINISHED]
                .clone();
            assert_eq!(spec_ttl.map(|t| t.to_string()), Some(annotation));
            spec_ttl
        };
        assert_eq!(ttl(None), Some(900));
        assert_eq!(ttl(Some("5m")), Some(900));
        assert_eq!(ttl(Some("14m")), Some(900));
        assert_eq!(ttl(Some("14m0.5s")), Some(900));
        assert_eq!(ttl(Some("14m1.5s")), Some(901));
        assert_eq!(ttl(Some("20m")), Some(1260));
        assert_eq!(ttl(Some("-30s")), Some(900));
        assert_eq!(ttl(Some("100000h")), Some(360_000_060));
        assert_eq!(ttl(Some("1000000h")), Some(i32::MAX));

        let mut p = basic();
        p.spec.post_complete_delay = Some("soon".into());
        assert_eq!(
            render_job(&p, &node("n"), "c", &JobConfig::default()),
            Err(RenderError::InvalidPostCompleteDelay("soon".into()))
        );
    }

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
        let mut p = basic();
        p.status = None;
        assert_eq!(
            render_job(&p, &n, "c", &c),
            Err(RenderError::MissingLatestVersion("k3s-server".into()))
        );
        p.status = Some(PlanStatus {
            latest_version: Some(VERSION.into()),
            latest_hash: Some(String::new()),
            ..Default::default()
        });
        assert_eq!(
            render_job(&p, &n, "c", &c),
            Err(RenderError::MissingLatestHash("k3s-server".into()))
        );
        let mut p = basic();
        p.metadata.uid = None;
        assert_eq!(
            render_job(&p, &n, "c", &c),
            Err(RenderError::MissingUid("k3s-server".into()))
        );
        p.metadata.name = None;
        assert_eq!(render_job(&p, &n, "c", &c), Err(RenderError::MissingName));
    }

    // --- pod template hash ---

    #[test]
    fn pod_template_hash_tracks_the_template_only() {
        let job = render(&basic());
        let hash = pod_template_hash(&job).expect("hash").to_string();
        assert_eq!(hash.len(), 16);
        assert!(hash.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(
            hash,
            compute_pod_template_hash(&job.spec.as_ref().expect("spec").template).expect("hash")
        );
        // Deterministic.
        assert_eq!(pod_template_hash(&render(&basic())), Some(hash.as_str()));
        // Not copied into the pod.
        let template_meta = job.spec.as_ref().expect("spec").template.metadata.clone();
        assert!(
            template_meta
                .and_then(|m| m.annotations)
                .is_none_or(|a| !a.contains_key(POD_TEMPLATE_HASH_ANNOTATION))
        );
        // Job-level settings do not change it; the template does.
        let config = JobConfig {
            backoff_limit: 7,
            ttl_seconds_after_finished: 60,
            active_deadline_seconds: 60,
            ..Default::default()
        };
        assert_eq!(
            pod_template_hash(&render_with(&basic(), &config)),
            Some(hash.as_str())
        );
        let mut changed = basic();
        changed.spec.upgrade.args = Some(vec!["exit 0".into()]);
        assert_ne!(pod_template_hash(&render(&changed)), Some(hash.as_str()));
        let mut relabelled = basic();
        relabelled.metadata.labels = Some(BTreeMap::from([("a".into(), "b".into())]));
        assert_ne!(pod_template_hash(&render(&relabelled)), Some(hash.as_str()));

        assert_eq!(pod_template_hash(&Job::default()), None);
    }

    #[test]
    fn drain_timeout_longer_than_the_deadline_is_flagged() {
        let check = |timeout: DrainTimeout, deadline: Option<i64>| {
            let mut p = with_deadline(deadline);
            p.spec.drain = Some(DrainSpec {
                timeout: Some(timeout),
                ..Default::default()
            });
            let job = render(&p);
            drain_timeout_exceeds_deadline(&p, &job)
        };
        assert!(check(DrainTimeout::Text("11m".into()), None));
        assert!(!check(DrainTimeout::Text("10m".into()), None));
        assert!(check(DrainTimeout::Nanoseconds(601_000_000_000), Some(600)));
        assert!(!check(DrainTimeout::Text("1h".into()), Some(0)));
        assert!(!check(DrainTimeout::Text("bogus".into()), Some(1)));
        assert!(!drain_timeout_exceeds_deadline(&basic(), &render(&basic())));
    }
}
