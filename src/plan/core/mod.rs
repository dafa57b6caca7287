//! The rollout decision: from a Plan, its candidate nodes, its Jobs and Secrets, the channel's
//! answer and the time, decide the Plan's next status and what to create, delete, patch and report.
//!
//! It composes three pure parts: the status handler ([`status`]: validation, version, hash), one
//! typed state machine per node ([`node_state`]), and the Plan-level rules around them: which
//! nodes hold a slot (the concurrency bound), which Jobs no node owns, the `Complete` condition
//! and a bounded set of events. It never talks to the cluster; `controller` gathers the inputs and
//! applies the [`Rollout`] in a safe order: node labels of finished nodes first (they only release
//! nodes), then the status (guarded by the Plan's resourceVersion), and only then Jobs. Jobs are
//! created only for nodes in the `status.applying` being written, so a Job never starts before its
//! node counts against `concurrency`, even across a crash.
//!
//! **One key for a node: its name** (`metadata.name`). It is unique and immutable, and it is what
//! Jobs (`upgrade.cattle.io/node`), reboot pods, node patches and health observations name. The
//! `kubernetes.io/hostname` label appears only on the wire, in `status.applying` and
//! `status.nodes[].name`, because SUC writes hostnames there; it is translated when the status is
//! read and written, nowhere else.

pub mod conditions;
pub mod config;
pub mod deletion;
pub mod expansion;
pub mod hash;
pub mod image;
pub mod job;
mod jobs;
pub mod lint;
pub mod node_state;
mod plan_nodes;
pub mod reboot;
pub mod render;
pub mod selection;
mod status;

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};

use crate::node::NodeInfo;
use crate::node::holders::Holder;
use crate::node::reboot::HealthObservation;
use crate::plan::api::{Plan, PlanStatus};
use crate::plan::core::conditions::{self as cond, COMPLETE, FALSE};
use crate::plan::core::config::JobConfig;

pub use node_state::{NodeState, phase};
pub use status::validate;

/// SUC's message when neither `version` nor `channel` is set.
pub const ERR_UNRESOLVABLE: &str = "cannot resolve plan: missing channel and version";
/// SUC's message while a rollout waits for its window.
pub const MSG_WAITING_FOR_WINDOW: &str = "current time is not within configured window";
/// SUC's message when the Plan cannot roll out.
pub const MSG_NOT_READY: &str = "plan is not valid and resolved";
/// Reasons of `Complete=False` that a failed node holds.
pub const FAILURE_REASONS: [&str; 3] = ["JobFailed", "RebootTimedOut", "HealthGateTimedOut"];

/// What the channel said, for a Plan that follows one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelAnswer {
    /// The raw version (not yet munged).
    Version(String),
    Failed(String),
}

/// Everything the decision reads.
pub struct RolloutInput<'a> {
    pub plan: &'a Plan,
    /// The Plan's candidate nodes: at least every node its `nodeSelector` matches (the node index
    /// gives exactly those); other nodes are ignored.
    pub nodes: &'a [&'a NodeInfo],
    /// The Jobs of this Plan made by this controller.
    pub jobs: &'a [&'a Job],
    /// The reboot pods of this Plan made by this controller.
    pub reboot_pods: &'a [&'a Pod],
    /// For Plans with a health gate: what the gate's pods look like on nodes that rebooted, by
    /// node name (see [`nodes_awaiting_health`]).
    pub health: &'a BTreeMap<String, HealthObservation>,
    /// Secrets of the Plan's namespace, by name.
    pub secrets: &'a BTreeMap<String, Secret>,
    /// The channel's latest answer; `None` when the Plan has no channel or it was not asked yet.
    pub channel: Option<ChannelAnswer>,
    pub now: Timestamp,
    pub controller_name: &'a str,
    pub job_config: &'a JobConfig,
    /// Nodes that another slipway operation holds alone (a NodeMaintenance), by node name: the
    /// Plan does not start them (nodes it already runs finish their step) and says it waits.
    pub held: &'a BTreeMap<String, Holder>,
    /// Pod-template hashes of Jobs rendered by earlier decisions, to check live Jobs against
    /// without rendering them again; `None` renders every time. It changes no decision.
    pub templates: Option<&'a TemplateMemo>,
}

/// The pod-template hash of a node's Job, remembered across decisions. The key holds everything a
/// Job is rendered from besides the process's fixed settings: the Plan (uid, generation, labels
/// and annotations, resolved version and hash) and the node (name, hostname, OS).
#[derive(Debug, Default)]
pub struct TemplateMemo(std::sync::Mutex<std::collections::HashMap<String, String>>);

impl TemplateMemo {
    /// A bound on remembered hashes: past it, the memo starts over.
    const MAX: usize = 50_000;

    fn get(&self, key: &str) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    fn put(&self, key: String, hash: String) {
        let mut m = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if m.len() >= Self::MAX {
            m.clear();
        }
        m.insert(key, hash);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// An event about the Plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanEvent {
    pub type_: EventType,
    pub reason: &'static str,
    pub message: String,
}

/// A Job to delete, and why (for logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDeletion {
    pub name: String,
    pub reason: String,
}

/// Labels to set on a node, annotations to set (`Some`) or remove (`None`), and whether to
/// uncordon it; applied as a patch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodePatch {
    pub node: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, Option<String>>,
    pub uncordon: bool,
}

impl NodePatch {
    /// The node as it is once the patch is applied.
    pub fn apply_to(&self, node: &mut NodeInfo) {
        node.labels
            .extend(self.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        for (k, v) in &self.annotations {
            match v {
                Some(v) => node.annotations.insert(k.clone(), v.clone()),
                None => node.annotations.remove(k),
            };
        }
        node.unschedulable &= !self.uncordon;
    }
}

/// What the Plan's gauges show after a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlanSummary {
    /// `Complete` is `True`.
    pub complete: bool,
    /// Nodes holding a slot (`status.applying`).
    pub applying: usize,
    /// Nodes failed by their Job or a reboot timeout.
    pub failed: usize,
    /// Nodes the Plan's selector matches that carry the latest hash, counting this decision's labels.
    pub upgraded: usize,
    /// Nodes the Plan's selector matches that have a hostname and are not `disabled`.
    pub targeted: usize,
}

/// The decision.
#[derive(Debug, Clone, Default)]
pub struct Rollout {
    /// The status to write when it differs from the current one.
    pub status: PlanStatus,
    pub status_changed: bool,
    pub create_jobs: Vec<Job>,
    pub delete_jobs: Vec<JobDeletion>,
    /// Reboot pods to create; the controller creates them before any Job.
    pub create_pods: Vec<Pod>,
    /// Reboot pods to delete, by name.
    pub delete_pods: Vec<String>,
    pub node_patches: Vec<NodePatch>,
    pub events: Vec<PlanEvent>,
    /// Look again after this long even if nothing changes.
    pub requeue_after: Option<Duration>,
    pub summary: PlanSummary,
}

impl Rollout {
    fn event(&mut self, type_: EventType, reason: &'static str, message: String) {
        self.events.push(PlanEvent {
            type_,
            reason,
            message,
        });
    }

    fn requeue(&mut self, after: Duration) {
        let after = after.max(Duration::from_secs(1));
        self.requeue_after = Some(self.requeue_after.map_or(after, |r| r.min(after)));
    }
}

pub use crate::common::rfc3339;

/// Decides the next step of one Plan.
pub fn decide(input: &RolloutInput<'_>) -> Rollout {
    let plan = input.plan;
    let now = rfc3339(input.now);
    let old = plan.status.clone().unwrap_or_default();
    let mut st = old.clone();
    let mut out = Rollout::default();
    if status::handle(input, &mut st, &mut out, &now) {
        plan_nodes::roll(input, &old, &mut st, &mut out);
    } else {
        cond::set(
            &mut st,
            COMPLETE,
            FALSE,
            "NotReady",
            MSG_NOT_READY,
            &now,
            plan.metadata.generation,
        );
        plan_nodes::sweep_only(input, &st, &mut out);
    }
    st.observed_generation = plan.metadata.generation;
    out.summary = plan_nodes::summary(input, &st, &out);
    out.status_changed = st != old;
    out.status = st;
    out
}

/// The nodes (by name) whose health gate the controller must look at before the next decision:
/// those rebooted or rebooting, and those whose gate timed out (they may still recover).
pub fn nodes_awaiting_health<'a>(plan: &Plan, nodes: &[&'a NodeInfo]) -> Vec<&'a NodeInfo> {
    let waiting: Vec<&str> = plan
        .status
        .iter()
        .flat_map(|s| s.nodes.iter())
        .filter(|p| {
            p.phase == phase::REBOOTING
                || p.phase == phase::WAITING_FOR_HEALTH
                || p.reason.as_deref() == Some("HealthGateTimedOut")
        })
        .map(|p| p.name.as_str())
        .collect();
    nodes
        .iter()
        .copied()
        .filter(|n| waiting.contains(&n.hostname()))
        .collect()
}

#[cfg(test)]
mod tests;
