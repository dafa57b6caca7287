//! Pre-pull: before an operation's first node is taken, the images its Jobs will run are pulled on
//! every node it will take, so that an image that cannot be pulled holds the rollout before any
//! node is cordoned (`spec.disruption.prePull`). Pure: what to create, delete and report.
//!
//! A pull pod per node, pinned there by name, with one container per image whose command does not
//! exist: the kubelet pulls each image (or fails to, and says why in the container's state), then
//! cannot start anything, so nothing of the image runs. A container that got as far as being
//! created or started has its image; one waiting with a pull error does not. Pods of another
//! rollout (another hash) or of a node no longer taken are deleted; all of them once every node
//! has its images. The record of a rollout's pull is the object's status ([`PrePullStatus`]): a
//! restart neither pulls again nor loses a failure.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::decision::Event;
use crate::common::naming::safe_concat_name;

/// On pull pods: whose they are (an operation's key, see [`PullPlan::owner`]).
pub const PRE_PULL_LABEL: &str = "slipway.dev/pre-pull";
/// On pull pods: the rollout (hash) they pull for.
pub const PRE_PULL_HASH_LABEL: &str = "slipway.dev/pre-pull-hash";
/// The reason an operation waits while its images are pulled.
pub const PRE_PULLING: &str = "PrePulling";
/// The reason an operation is held because a node cannot pull an image.
pub const PRE_PULL_FAILED: &str = "PrePullFailed";
/// Pull pods not yet done, at most, per operation: a rollout of thousands of nodes does not ask
/// the registry for thousands of pulls at once.
pub const AT_ONCE: usize = 10;
/// The command of every pull container: it exists in no image, so nothing runs.
pub const NO_COMMAND: &str = "/.slipway-pre-pull/nothing-runs";

/// The kubelet's reasons for a container that waits because its image cannot be pulled.
const PULL_ERRORS: [&str; 6] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "RegistryUnavailable",
    "SignatureValidationFailed",
];

/// `status.prePull` of an operation that pre-pulls: the pull of its current rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrePullStatus {
    /// The rollout the images are pulled for (a Plan's `latestHash`).
    pub hash: String,
    pub phase: PrePullPhase,
    /// Nodes to pull on.
    pub nodes: i64,
    /// Nodes that have every image.
    pub pulled: i64,
    /// What is pulled, or which node cannot pull which image and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Where the pull of a rollout is.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PrePullPhase {
    #[default]
    Pulling,
    /// Every node had every image: the rollout goes on, and is not held by a pull again.
    Pulled,
    /// A node cannot pull an image (it is tried again as the kubelet retries).
    Failed,
}

/// An image a Job runs, with the pull policy its container has.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Image {
    pub image: String,
    pub pull_policy: Option<String>,
}

/// The images of a pod spec (init containers first), each once.
pub fn images_of(spec: &PodSpec) -> Vec<Image> {
    let mut seen = BTreeSet::new();
    (spec.init_containers.iter().flatten())
        .chain(&spec.containers)
        .filter_map(|c| {
            Some(Image {
                image: c.image.clone().filter(|i| !i.is_empty())?,
                pull_policy: c.image_pull_policy.clone(),
            })
        })
        .filter(|i| seen.insert(i.image.clone()))
        .collect()
}

/// Where a node's pull is, as its pull pod shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodePull {
    Pulling,
    Pulled,
    /// The kubelet cannot pull `image`: its reason and message.
    Failed {
        image: String,
        reason: String,
        message: String,
    },
}

/// A pull pod's progress: failed as soon as one image cannot be pulled, pulled once every
/// container was created.
pub fn read_pod(pod: &Pod) -> NodePull {
    let Some(spec) = &pod.spec else {
        return NodePull::Pulling;
    };
    let statuses = (pod.status.iter())
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|s| (s.name.as_str(), s))
        .collect::<BTreeMap<_, _>>();
    let mut all = true;
    for c in &spec.containers {
        let Some(status) = statuses.get(c.name.as_str()) else {
            all = false;
            continue;
        };
        let state = status.state.as_ref();
        let waiting = state.and_then(|s| s.waiting.as_ref());
        match waiting.and_then(|w| w.reason.as_deref()) {
            Some(reason) if PULL_ERRORS.contains(&reason) => {
                return NodePull::Failed {
                    image: c.image.clone().unwrap_or_default(),
                    reason: reason.to_string(),
                    message: (waiting.and_then(|w| w.message.clone())).unwrap_or_default(),
                };
            }
            _ => {}
        }
        // Created (running, or ended because its command does not exist): the image is there.
        let created = state.is_some_and(|s| s.running.is_some() || s.terminated.is_some())
            || (waiting.is_some() && !status.image_id.is_empty());
        all &= created;
    }
    match all {
        true => NodePull::Pulled,
        false => NodePull::Pulling,
    }
}

/// What a pull pod is made from, besides its node: the operation's.
#[derive(Debug, Clone, PartialEq)]
pub struct PullPlan<'a> {
    /// The operation's key on its pods ([`PRE_PULL_LABEL`]): unique among the operations whose
    /// pods share the namespace (a label value).
    pub owner: &'a str,
    /// The rollout: pods of another hash are stale.
    pub hash: &'a str,
    pub images: &'a [Image],
    pub namespace: &'a str,
    /// The pods' ServiceAccount (its pull secrets are the kubelet's), if not the default.
    pub service_account: Option<&'a str>,
    /// The operation's own pull secrets.
    pub pull_secrets: &'a [String],
    /// Labels every pod of the operation carries (the controller's, the owner's).
    pub labels: &'a BTreeMap<String, String>,
    /// The operation's object, where its pods are collected with it.
    pub owner_references: &'a [OwnerReference],
}

/// One step of a pull: the status to record, and the pods to create and delete (by name).
#[derive(Debug, Clone, PartialEq)]
pub struct PullStep {
    pub status: PrePullStatus,
    pub create: Vec<Pod>,
    pub delete: Vec<String>,
}

impl PullStep {
    /// Every node has every image.
    pub fn pulled(&self) -> bool {
        self.status.phase == PrePullPhase::Pulled
    }
}

/// The pull of `plan` on `targets` (node names), from its pods as listed now: creates the missing
/// pods ([`AT_ONCE`] not done at a time), deletes the stale ones, and every one once all are
/// pulled. A failure names the first node (by name) that cannot pull.
pub fn step(plan: &PullPlan<'_>, targets: &[&str], pods: &[&Pod]) -> PullStep {
    let targets: BTreeSet<&str> = targets.iter().copied().collect();
    let mut current: BTreeMap<&str, &Pod> = BTreeMap::new();
    let mut delete = Vec::new();
    for pod in pods.iter().copied().filter(|p| of_owner(p, plan.owner)) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        let hash = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(PRE_PULL_HASH_LABEL));
        // A pod being deleted counts for nothing, and is not deleted again.
        if pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match node.filter(|n| targets.contains(n)) {
            Some(node) if hash.map(String::as_str) == Some(plan.hash) => {
                current.insert(node, pod);
            }
            _ => delete.push(name),
        }
    }
    let reads: BTreeMap<&str, NodePull> = current.iter().map(|(n, p)| (*n, read_pod(p))).collect();
    let pulled = reads.values().filter(|r| **r == NodePull::Pulled).count();
    let failed = reads.iter().find_map(|(node, r)| match r {
        NodePull::Failed {
            image,
            reason,
            message,
        } => Some(format!(
            "node {node} cannot pull image {image}: {reason}{}",
            match message.is_empty() {
                true => String::new(),
                false => format!(": {message}"),
            }
        )),
        _ => None,
    });
    let in_flight = reads.values().filter(|r| **r == NodePull::Pulling).count();
    let missing = targets.iter().filter(|n| !current.contains_key(*n));
    let create: Vec<Pod> = missing
        .take(AT_ONCE.saturating_sub(in_flight))
        .map(|node| pull_pod(plan, node))
        .collect();
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    let images = plan.images.len();
    let (phase, message) = match (failed, pulled == targets.len()) {
        (Some(message), _) => (PrePullPhase::Failed, message),
        (None, true) => {
            delete.extend(current.values().filter_map(|p| p.metadata.name.clone()));
            (
                PrePullPhase::Pulled,
                format!("{images} images pulled on {} nodes", targets.len()),
            )
        }
        (None, false) => (
            PrePullPhase::Pulling,
            format!(
                "pulling {images} images: {pulled} of {} nodes have them",
                targets.len()
            ),
        ),
    };
    PullStep {
        status: PrePullStatus {
            hash: plan.hash.to_string(),
            phase,
            nodes: count(targets.len()),
            pulled: count(pulled),
            message: Some(message),
        },
        create,
        delete,
    }
}

/// What a step of a pull tells, once: a Warning when a node cannot pull (again when the reason
/// changes), `PrePulled` when every node has the images; `before` is the pull on record.
pub fn told(before: Option<&PrePullStatus>, now: &PrePullStatus) -> Option<Event> {
    let same = before.filter(|b| b.hash == now.hash);
    let message = now.message.clone().unwrap_or_default();
    match now.phase {
        PrePullPhase::Failed if same.and_then(|b| b.message.as_ref()) != now.message.as_ref() => {
            Some(Event::warning(PRE_PULL_FAILED, message))
        }
        PrePullPhase::Pulled if !same.is_some_and(|b| b.phase == PrePullPhase::Pulled) => {
            Some(Event::normal("PrePulled", message))
        }
        _ => None,
    }
}

/// While the pull keeps nodes from starting: the reason, and the message, ending with what waits
/// (`waits`, as "no node starts").
pub fn holding(now: &PrePullStatus, waits: &str) -> Option<(&'static str, String)> {
    let message = now.message.clone().unwrap_or_default();
    match now.phase {
        PrePullPhase::Pulled => None,
        PrePullPhase::Pulling => Some((PRE_PULLING, message)),
        PrePullPhase::Failed => Some((
            PRE_PULL_FAILED,
            format!("{message}; {waits} until every node has the images"),
        )),
    }
}

/// The pull pods of `owner` still there (not being deleted): by name, to delete once the pull is
/// recorded or no longer wanted.
pub fn leftovers(owner: &str, pods: &[&Pod]) -> Vec<String> {
    (pods.iter().copied())
        .filter(|p| of_owner(p, owner) && p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

fn of_owner(pod: &Pod, owner: &str) -> bool {
    let labels = pod.metadata.labels.as_ref();
    labels
        .and_then(|l| l.get(PRE_PULL_LABEL))
        .map(String::as_str)
        == Some(owner)
}

/// The pull pod of `plan` on `node`: `pre-pull-<owner>-on-<node>`.
pub fn pull_pod(plan: &PullPlan<'_>, node: &str) -> Pod {
    let mut labels = plan.labels.clone();
    labels.insert(PRE_PULL_LABEL.into(), plan.owner.into());
    labels.insert(PRE_PULL_HASH_LABEL.into(), plan.hash.into());
    let containers = (plan.images.iter().enumerate())
        .map(|(i, image)| Container {
            name: format!("pull-{i}"),
            image: Some(image.image.clone()),
            image_pull_policy: image.pull_policy.clone(),
            command: Some(vec![NO_COMMAND.to_string()]),
            ..Default::default()
        })
        .collect();
    let secrets = (plan.pull_secrets.iter())
        .map(|name| k8s_openapi::api::core::v1::LocalObjectReference { name: name.clone() })
        .collect::<Vec<_>>();
    Pod {
        metadata: ObjectMeta {
            name: Some(safe_concat_name(&["pre-pull", plan.owner, "on", node])),
            namespace: Some(plan.namespace.to_string()),
            labels: Some(labels),
            owner_references: (!plan.owner_references.is_empty())
                .then(|| plan.owner_references.to_vec()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some(node.to_string()),
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            termination_grace_period_seconds: Some(0),
            service_account_name: plan.service_account.map(str::to_string),
            image_pull_secrets: (!secrets.is_empty()).then_some(secrets),
            // Wherever the operation's Jobs may run: a cordoned or tainted node pulls too.
            tolerations: Some(vec![Toleration {
                operator: Some("Exists".into()),
                ..Default::default()
            }]),
            containers,
            ..Default::default()
        }),
        status: None,
    }
}

/// What the kubelet writes on `pod` once it is done: every container created (its command then
/// fails to start), or with `failure` (reason, message) its last container waiting on its image.
/// For simulations (`slipway render` takes every pull to succeed) and tests.
pub fn kubelet_done(pod: &mut Pod, failure: Option<(&str, &str)>) {
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, PodStatus,
    };
    let names: Vec<String> = (pod.spec.iter())
        .flat_map(|s| s.containers.iter().map(|c| c.name.clone()))
        .collect();
    let last = names.len().saturating_sub(1);
    let statuses = (names.into_iter().enumerate())
        .map(|(i, name)| {
            let failed = failure.filter(|_| i == last);
            let state = match failed {
                Some((reason, message)) => ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(reason.into()),
                        message: Some(message.into()),
                    }),
                    ..Default::default()
                },
                None => ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        reason: Some("StartError".into()),
                        exit_code: 128,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            };
            ContainerStatus {
                name,
                state: Some(state),
                image_id: if failed.is_some() { "" } else { "sha256:x" }.into(),
                ..Default::default()
            }
        })
        .collect();
    pod.status = Some(PodStatus {
        container_statuses: Some(statuses),
        ..Default::default()
    });
}

#[cfg(test)]
mod tests;
