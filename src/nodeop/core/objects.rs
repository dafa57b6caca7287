//! The objects a NodeOp creates for a node, as kairos-operator creates them: the Job that runs
//! the command with the host's root mounted, the preflight pod, and (with `rebootOnSuccess`) the
//! reboot pod that waits for the Job's sentinel file, slipway's own (as Plans with
//! `spec.reboot`).
//!
//! Names are derived from the NodeOp's uid and the node, not random: a controller killed after it
//! wrote the status and before it created an object creates the same one again, which the API
//! server refuses as already there. There is never a second Job on a node.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, HostPathVolumeSource, Pod, PodSpec, PodTemplateSpec, SecurityContext,
    Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;
use sha2::{Digest, Sha256};

use super::spec::Settings;
use crate::common::naming::safe_concat_name;
use crate::node::reboot::{
    REBOOT_LABEL, reboot_pod_spec, reboot_script, sentinel_mount, sentinel_step_command,
    sentinel_volume_at,
};
use crate::nodeop::api::NodeOp;

/// kairos-operator's labels on everything a NodeOp creates.
pub const NODEOP_LABEL: &str = "kairos.io/nodeop";
pub const NODE_LABEL: &str = "kairos.io/node";
pub const REBOOT_POD_LABEL: &str = "kairos.io/reboot";
pub const PREFLIGHT_LABEL: &str = "kairos.io/preflight";
/// The preflight pod's container, whose termination message says whether to skip the node.
pub const PREFLIGHT_CONTAINER: &str = "preflight";
/// Where the sentinel files live on the host: kairos-operator's directory, persistent on Kairos.
pub const SENTINEL_PATH: &str = "/usr/local/.kairos";
/// The environment variable that names where the host's root is mounted.
pub const HOST_DIR_ENV: &str = "HOST_DIR";
const HOST_ROOT: &str = "host-root";

/// Who the objects of a NodeOp belong to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

impl Owner {
    pub fn of(op: &NodeOp) -> Owner {
        Owner {
            name: op.metadata.name.clone().unwrap_or_default(),
            namespace: op.metadata.namespace.clone().unwrap_or_default(),
            uid: op.metadata.uid.clone().unwrap_or_default(),
        }
    }

    pub(super) fn reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: "operator.kairos.io/v1alpha1".into(),
            kind: "NodeOp".into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }

    fn meta(&self, name: String, node: &str, extra: &[(&str, &str)]) -> ObjectMeta {
        let mut labels = BTreeMap::from([
            (NODEOP_LABEL.to_string(), self.name.clone()),
            (NODE_LABEL.to_string(), node.to_string()),
        ]);
        labels.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        ObjectMeta {
            name: Some(name),
            namespace: Some(self.namespace.clone()),
            labels: Some(labels),
            owner_references: Some(vec![self.reference()]),
            ..Default::default()
        }
    }

    /// `<nodeop>-<node>-<5 hex digits of the NodeOp's uid and the node>`, made safe.
    fn name(&self, what: Option<&str>, node: &str) -> String {
        let digest = Sha256::digest(format!("{}/{node}", self.uid).as_bytes());
        let hash: String = digest.iter().take(3).map(|b| format!("{b:02x}")).collect();
        let short = node.split('.').next().unwrap_or(node);
        let mut parts = vec![self.name.as_str()];
        parts.extend(what);
        parts.extend([short, &hash[..5]]);
        safe_concat_name(&parts)
    }
}

pub fn job_name(owner: &Owner, node: &str) -> String {
    owner.name(None, node)
}

pub fn preflight_pod_name(owner: &Owner, node: &str) -> String {
    owner.name(Some("preflight"), node)
}

pub fn reboot_pod_name(owner: &Owner, node: &str) -> String {
    owner.name(Some("reboot"), node)
}

fn host_root() -> Volume {
    Volume {
        name: HOST_ROOT.into(),
        host_path: Some(HostPathVolumeSource {
            path: "/".into(),
            type_: None,
        }),
        ..Default::default()
    }
}

fn host_dir(s: &Settings) -> Vec<EnvVar> {
    vec![EnvVar {
        name: HOST_DIR_ENV.into(),
        value: Some(s.host_mount_path.clone()),
        ..Default::default()
    }]
}

fn host_mount(s: &Settings, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: HOST_ROOT.into(),
        mount_path: s.host_mount_path.clone(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

/// The Job of `node`: the command in a privileged container with the host's root at
/// `hostMountPath`, pinned to the node. With a reboot, the command runs first (an init
/// container) and the one container writes the sentinel, so the file exists only if the command
/// succeeded. `name`: [`job_name`], or the name a NodeOp's status already gives the node's Job
/// (kairos-operator's own, for a NodeOp it started).
pub fn job(owner: &Owner, s: &Settings, node: &str, name: &str) -> Job {
    let name = name.to_string();
    let command = Container {
        name: "nodeop".into(),
        image: Some(s.image.clone()),
        command: Some(s.command.clone()),
        env: Some(host_dir(s)),
        security_context: Some(SecurityContext {
            privileged: Some(true),
            ..Default::default()
        }),
        volume_mounts: Some(vec![host_mount(s, false)]),
        ..Default::default()
    };
    let mut volumes = vec![host_root()];
    let (init, main) = if s.reboot {
        volumes.push(sentinel_volume_at(SENTINEL_PATH));
        let sentinel = Container {
            name: "sentinel-creator".into(),
            image: Some(s.image.clone()),
            command: Some(sentinel_step_command(&name)),
            volume_mounts: Some(vec![sentinel_mount()]),
            ..Default::default()
        };
        (Some(vec![command]), sentinel)
    } else {
        (None, command)
    };
    Job {
        metadata: owner.meta(name, node, &[]),
        spec: Some(JobSpec {
            backoff_limit: Some(s.backoff_limit),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(BTreeMap::from([
                        (NODEOP_LABEL.to_string(), owner.name.clone()),
                        (NODE_LABEL.to_string(), node.to_string()),
                    ])),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    node_name: Some(node.to_string()),
                    image_pull_secrets: Some(s.pull_secrets.clone()).filter(|p| !p.is_empty()),
                    init_containers: init,
                    containers: vec![main],
                    volumes: Some(volumes),
                    restart_policy: Some("Never".into()),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

/// The preflight pod of `node`: the check with the host's root mounted read-only, bounded by
/// `activeDeadlineSeconds`; its termination message says whether to skip the node.
pub fn preflight_pod(owner: &Owner, s: &Settings, node: &str) -> Option<Pod> {
    let p = s.preflight.as_ref()?;
    let name = preflight_pod_name(owner, node);
    Some(Pod {
        metadata: owner.meta(name, node, &[(PREFLIGHT_LABEL, "true")]),
        spec: Some(PodSpec {
            node_name: Some(node.to_string()),
            restart_policy: Some("OnFailure".into()),
            active_deadline_seconds: Some(p.deadline_seconds),
            image_pull_secrets: Some(s.pull_secrets.clone()).filter(|p| !p.is_empty()),
            containers: vec![Container {
                name: PREFLIGHT_CONTAINER.into(),
                image: Some(p.image.clone()),
                command: Some(p.command.clone()),
                termination_message_policy: Some("File".into()),
                env: Some(host_dir(s)),
                volume_mounts: Some(vec![host_mount(s, true)]),
                ..Default::default()
            }],
            volumes: Some(vec![host_root()]),
            ..Default::default()
        }),
        status: None,
    })
}

/// The reboot pod of `node`: waits for the sentinel of the node's Job `job`, then reboots the
/// host once (it remembers the boot it left on the host).
pub fn reboot_pod(owner: &Owner, node: &str, image: &str, job: &str) -> Pod {
    let name = reboot_pod_name(owner, node);
    let script = reboot_script(job);
    Pod {
        metadata: owner.meta(
            name,
            node,
            &[(REBOOT_POD_LABEL, "true"), (REBOOT_LABEL, "true")],
        ),
        spec: Some(PodSpec {
            volumes: Some(vec![sentinel_volume_at(SENTINEL_PATH)]),
            ..reboot_pod_spec(node, image, script, Some(vec![sentinel_mount()]))
        }),
        status: None,
    }
}
