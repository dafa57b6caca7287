//! Draining a node through the Eviction API, with `kubectl drain`'s semantics
//! (`k8s.io/kubectl/pkg/drain`), shared by every slipway operation that empties a node.
//!
//! The pure part decides which pods a drain evicts, skips or refuses ([`plan`]), reads the
//! Eviction API's answers ([`EvictionOutcome::of`]) and says which PodDisruptionBudget holds a pod
//! ([`describe_blocking`]). The thin shell, [`super::shell`], lists a node's pods and asks for
//! the evictions.
//!
//! A drain is a sequence of reconciles, not one long task: each reconcile lists the pods, asks
//! once for the evictions still needed, records the answers, and comes back later. Nothing here
//! sleeps or loops, so a controller killed mid-drain resumes where the cluster stands.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Preconditions};
use kube::ResourceExt;
use kube::api::ObjectMeta;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::decision::Event;
use crate::common::labels;
use crate::common::selector::Selector;

/// kubelet's static pods carry it; their mirror pods cannot be evicted.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// A pod by namespace and name, with its uid when known (an eviction then never hits a pod
/// recreated under the same name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
}

impl PodRef {
    pub fn of(pod: &Pod) -> PodRef {
        PodRef {
            namespace: pod.namespace().unwrap_or_default(),
            name: pod.name_any(),
            uid: pod.uid(),
        }
    }
}

impl fmt::Display for PodRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// kubectl drain's options that change which pods go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainOptions {
    /// Skip pods of DaemonSets (else they refuse the drain).
    pub ignore_daemonsets: bool,
    /// Evict pods with `emptyDir` volumes (their data is lost; else they refuse the drain).
    pub delete_emptydir_data: bool,
    /// Evict pods that no controller recreates, and pods of DaemonSets that are gone.
    pub force: bool,
    /// `None`: the pod's own grace period.
    pub grace_period_seconds: Option<i64>,
    /// Pods deleted longer ago than this are skipped (a node that is gone never confirms them).
    pub skip_wait_for_delete_timeout: Option<Duration>,
    /// Only the pods it selects are the drain's (kubectl's and kured's `--pod-selector`); the
    /// others stay, and go down with the node.
    pub pod_selector: Option<Selector>,
}

impl Default for DrainOptions {
    /// node-maintenance-operator's (and kured's) configuration.
    fn default() -> Self {
        DrainOptions {
            ignore_daemonsets: true,
            delete_emptydir_data: true,
            force: true,
            grace_period_seconds: None,
            skip_wait_for_delete_timeout: None,
            pod_selector: None,
        }
    }
}

/// What a drain does once its timeout has passed with pods still on the node.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum OnDrainTimeout {
    /// The kind's failure (the node is given back, or the operation fails).
    #[default]
    Fail,
    /// Delete the pods left, as `kubectl drain --disable-eviction` would.
    DeletePods,
}

/// The pods a drain past its timeout deletes: those it would evict and that are not going
/// already. None while a pod refuses the drain (kubectl deletes nothing then either).
pub fn to_delete(view: &PodsView) -> Vec<PodKey> {
    if !view.blocked.is_empty() {
        return Vec::new();
    }
    (view.to_evict.iter())
        .filter(|(_, terminating)| !**terminating)
        .map(|(k, _)| k.clone())
        .collect()
}

/// The Event that says a drain deleted `pod` from `node` after `after` (a Go duration).
pub fn deleted_event(pod: &PodKey, node: &str, after: &str) -> Event {
    Event::warning(
        DELETED_POD,
        format!(
            "Deleted pod {pod} from node {node}: the drain did not evict it within {after} \
             (spec.disruption.onDrainTimeout: DeletePods)"
        ),
    )
    .on(node)
}

/// The reason of [`deleted_event`].
pub const DELETED_POD: &str = "DrainDeletedPod";

/// Why a drain leaves a pod where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// It carries the controller label ([`crate::common::labels::CONTROLLER`]): the controller's
    /// own pods, and the pods of the Jobs and reboots it runs. Evicting the controller from the
    /// node it is draining would leave nobody to finish the operation (on a cluster with one
    /// control-plane node its new pod has nowhere else to go), and a Plan's Jobs skip the same
    /// pods (`kubectl drain --pod-selector '!upgrade.cattle.io/controller'`).
    Controller,
    DaemonSet,
    Mirror,
    DeletedLongAgo,
    /// The drain's pod selector does not select it.
    NotSelected,
    /// It ended (`Succeeded` or `Failed`): it runs nothing and holds nothing, so the drain
    /// neither waits for it nor evicts it (kubectl would delete it and wait until it is gone).
    Finished,
}

/// Why a pod refuses the drain (kubectl then evicts nothing at all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Block {
    DaemonSetManaged,
    LocalStorage,
    NoController,
}

impl fmt::Display for Block {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Block::DaemonSetManaged => "is managed by a DaemonSet (DaemonSet pods are not ignored)",
            Block::LocalStorage => "has local storage (emptyDir) whose data would be lost",
            Block::NoController => "has no controller that would recreate it",
        })
    }
}

/// What a drain does with each pod of the node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainPlan {
    pub evict: Vec<PodRef>,
    pub skipped: Vec<(PodRef, Skip)>,
    pub blocked: Vec<(PodRef, Block)>,
    /// Pods evicted despite a risk (no controller, emptyDir data, an orphan of a DaemonSet).
    pub warnings: Vec<String>,
}

impl DrainPlan {
    /// kubectl refuses the whole drain when any pod refuses it: evict nothing until it is solved.
    pub fn is_blocked(&self) -> bool {
        !self.blocked.is_empty()
    }
}

/// kubectl drain's filters, in its order; the first that keeps or refuses a pod decides.
pub fn plan(
    pods: &[Pod],
    daemonset_exists: impl Fn(&str, &str) -> bool,
    options: &DrainOptions,
    now: Timestamp,
) -> DrainPlan {
    let mut out = DrainPlan::default();
    for pod in pods {
        let r = PodRef::of(pod);
        match filter(pod, &daemonset_exists, options, now) {
            Verdict::Evict(None) => out.evict.push(r),
            Verdict::Evict(Some(warning)) => {
                out.warnings.push(format!("pod {r}: {warning}"));
                out.evict.push(r);
            }
            Verdict::Skip(why) => out.skipped.push((r, why)),
            Verdict::Block(why) => out.blocked.push((r, why)),
        }
    }
    out
}

enum Verdict {
    Evict(Option<&'static str>),
    Skip(Skip),
    Block(Block),
}

fn filter(
    pod: &Pod,
    daemonset_exists: &impl Fn(&str, &str) -> bool,
    options: &DrainOptions,
    now: Timestamp,
) -> Verdict {
    // Before kubectl's filters, as the Jobs' `--pod-selector` is: these pods are not the drain's.
    if pod.labels().contains_key(labels::CONTROLLER) {
        return Verdict::Skip(Skip::Controller);
    }
    // kubectl lists only the pods its selector selects: the others neither go nor refuse.
    if (options.pod_selector.as_ref()).is_some_and(|s| !s.matches(pod.labels())) {
        return Verdict::Skip(Skip::NotSelected);
    }
    if let (Some(limit), Some(deleted)) = (
        options.skip_wait_for_delete_timeout,
        &pod.metadata.deletion_timestamp,
    ) && now.duration_since(deleted.0)
        > jiff::SignedDuration::try_from(limit).unwrap_or_default()
    {
        return Verdict::Skip(Skip::DeletedLongAgo);
    }
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    if finished {
        return Verdict::Skip(Skip::Finished);
    }
    let controller = pod
        .owner_references()
        .iter()
        .find(|o| o.controller == Some(true));
    let mut warning = None;
    if let Some(owner) = controller.filter(|o| o.kind == "DaemonSet") {
        let ns = pod.namespace().unwrap_or_default();
        if !daemonset_exists(&ns, &owner.name) {
            if !options.force {
                return Verdict::Block(Block::NoController);
            }
            warning = Some("its DaemonSet is gone; evicted as an orphan");
        } else if options.ignore_daemonsets {
            return Verdict::Skip(Skip::DaemonSet);
        } else {
            return Verdict::Block(Block::DaemonSetManaged);
        }
    }
    if pod.annotations().contains_key(MIRROR_ANNOTATION) {
        return Verdict::Skip(Skip::Mirror);
    }
    let empty_dir = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .any(|v| v.empty_dir.is_some());
    if empty_dir {
        if !options.delete_emptydir_data {
            return Verdict::Block(Block::LocalStorage);
        }
        warning = warning.or(Some("its emptyDir data is deleted"));
    }
    if controller.is_none() {
        if !options.force {
            return Verdict::Block(Block::NoController);
        }
        warning = warning.or(Some("no controller recreates it"));
    }
    Verdict::Evict(warning)
}

/// What the Eviction API answered for one pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictionOutcome {
    Evicted,
    /// 404: the pod is gone already.
    Gone,
    /// 429: a PodDisruptionBudget allows no disruption now; ask again later.
    Disrupted {
        message: String,
    },
    /// 403 in a terminating namespace: the pod goes with its namespace.
    Terminating,
    /// Anything else, including 500 (several PodDisruptionBudgets select the pod).
    Failed(String),
}

impl EvictionOutcome {
    pub fn of(result: Result<(), &kube::Error>) -> EvictionOutcome {
        match result {
            Ok(()) => EvictionOutcome::Evicted,
            Err(kube::Error::Api(s)) if s.code == 404 => EvictionOutcome::Gone,
            Err(kube::Error::Api(s)) if s.code == 429 => EvictionOutcome::Disrupted {
                message: s.message.clone(),
            },
            Err(kube::Error::Api(s)) if s.code == 403 && s.reason == "NamespaceTerminating" => {
                EvictionOutcome::Terminating
            }
            // A precondition on the uid failed: the pod of that uid is gone.
            Err(kube::Error::Api(s)) if s.code == 409 => EvictionOutcome::Gone,
            Err(e) => EvictionOutcome::Failed(e.to_string()),
        }
    }
}

/// The PodDisruptionBudgets that select `pod`, and what each allows, in words; `None` when none
/// selects it.
pub fn describe_blocking(pod: &Pod, pdbs: &[PodDisruptionBudget]) -> Option<String> {
    let ns = pod.namespace().unwrap_or_default();
    let labels = pod.labels();
    let budgets: Vec<String> = pdbs
        .iter()
        .filter(|b| b.namespace().unwrap_or_default() == ns)
        .filter(|b| {
            let selector = b.spec.as_ref().and_then(|s| s.selector.as_ref());
            Selector::from_label_selector(selector).is_ok_and(|s| s.matches(labels))
        })
        .map(|b| {
            let st = b.status.clone().unwrap_or_default();
            format!(
                "PodDisruptionBudget {ns}/{} allows {} disruption(s) now ({} healthy, {} needed)",
                b.name_any(),
                st.disruptions_allowed,
                st.current_healthy,
                st.desired_healthy
            )
        })
        .collect();
    (!budgets.is_empty()).then(|| budgets.join("; "))
}

/// The Eviction object for `pod`, with a uid precondition when the uid is known.
pub fn eviction(pod: &PodRef, grace_period_seconds: Option<i64>) -> Eviction {
    Eviction {
        metadata: ObjectMeta {
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            ..Default::default()
        },
        delete_options: Some(DeleteOptions {
            grace_period_seconds,
            preconditions: pod.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        }),
    }
}

/// A pod the drain evicts.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for PodKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The node's pods, as the drain sees them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodsView {
    /// Every pod on the node.
    pub total: usize,
    /// Pods that the drain evicts and that are still there, with whether each is already
    /// terminating (evicted, waiting for it to go).
    pub to_evict: BTreeMap<PodKey, bool>,
    /// Pods that stop the drain altogether (kubectl's filters), with why.
    pub blocked: BTreeMap<PodKey, String>,
    /// The node's VolumeAttachments still there, when the drain waits for its volumes to detach
    /// (`spec.disruption.waitForVolumeDetach`): `name (persistent volume)`.
    pub attached: Vec<String>,
}

impl PodsView {
    /// The drain is over: its pods are gone and, when it waits for them, its volumes detached.
    pub fn is_drained(&self) -> bool {
        self.to_evict.is_empty() && self.blocked.is_empty() && self.attached.is_empty()
    }

    /// What the drain waits for once its pods are gone: the volumes still attached, in words.
    pub fn volumes_message(&self) -> Option<String> {
        match &self.attached[..] {
            [] => None,
            [one] => Some(format!("waiting for volume attachment {one} to detach")),
            [first, rest @ ..] => Some(format!(
                "waiting for {} volume attachments to detach: {first} and {} more",
                rest.len() + 1,
                rest.len()
            )),
        }
    }
}

/// The VolumeAttachments of `node`, as [`PodsView::attached`] names them: a CSI driver has the
/// volume attached there until the attach-detach controller detaches it, after the kubelet has
/// unmounted it.
pub fn attached_to(attachments: &[VolumeAttachment], node: &str) -> Vec<String> {
    let mut out: Vec<String> = (attachments.iter())
        .filter(|a| a.spec.node_name == node)
        .map(|a| {
            let name = a.name_any();
            match a.spec.source.persistent_volume_name.as_deref() {
                Some(pv) => format!("{name} ({pv})"),
                None => name,
            }
        })
        .collect();
    out.sort();
    out
}

/// The answer of the Eviction API for one pod, as the status reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EvictionResult {
    /// Evicted, or already gone.
    Accepted,
    /// Refused for now, with why (a PodDisruptionBudget allows no disruption).
    Refused(String),
    /// Failed, with the error.
    Failed(String),
}

#[cfg(test)]
mod tests;
