//! What a Plan's decision asks for: the effects, in the order the runtime applies them, and the
//! gauges. [`Rollout`] gathers them while the decision is made.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;

use crate::common::decision::{Decision, Effect, Event, EventType};
use crate::node::change::NodeChange;
use crate::plan::api::PlanStatus;

/// The pod-template hash of a node's Job, remembered across decisions. The key holds everything a
/// Job is rendered from besides the process's fixed settings: the Plan (uid, generation, labels
/// and annotations, resolved version and hash) and the node (name, hostname, OS). Plain data: a
/// decision reads it and returns what it learned ([`super::decide_learning`]); whoever keeps it
/// across decisions (the shell) adds that.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TemplateMemo(std::collections::HashMap<String, String>);

/// What a decision learned for the [`TemplateMemo`]: keys and hashes.
pub type Learned = Vec<(String, String)>;

impl TemplateMemo {
    /// A bound on remembered hashes: past it, the memo starts over.
    const MAX: usize = 50_000;

    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Remembers what a decision learned.
    pub fn learn(&mut self, learned: Learned) {
        for (key, hash) in learned {
            if self.0.len() >= Self::MAX {
                self.0.clear();
            }
            self.0.insert(key, hash);
        }
    }
}

/// A Job to delete, and why (for logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDeletion {
    pub name: String,
    pub reason: String,
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

/// One effect of a Plan's decision.
#[derive(Debug, Clone, PartialEq)]
pub enum PlanEffect {
    /// Label a finished node and uncordon it, or record who its cordon belongs to before its Job
    /// starts. Applied before the status: it only gives the node back, or must precede the Job.
    PatchNode(NodeChange),
    DeleteJob(JobDeletion),
    /// A reboot pod, by name.
    DeletePod(String),
    /// A reboot pod: created before any Job (a node's Job never runs before the pod that will
    /// reboot it exists).
    CreatePod(Box<Pod>),
    CreateJob(Box<Job>),
    /// A pod that pulls the Jobs' images on one node before the first node starts.
    PullImages(Box<Pod>),
    /// A pull pod, by name, once its pull is done or no longer wanted.
    DeletePullPod(String),
}

impl Effect for PlanEffect {
    fn before_status(&self) -> bool {
        matches!(self, PlanEffect::PatchNode(_))
    }
}

/// What one decision of a Plan is.
pub type PlanDecision = Decision<PlanStatus, PlanEffect, PlanSummary>;

/// The effects of a decision, by kind.
impl PlanDecision {
    pub fn node_patches(&self) -> Vec<&NodeChange> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                PlanEffect::PatchNode(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    pub fn delete_jobs(&self) -> Vec<&JobDeletion> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                PlanEffect::DeleteJob(d) => Some(d),
                _ => None,
            })
            .collect()
    }

    pub fn delete_pods(&self) -> Vec<&String> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                PlanEffect::DeletePod(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    pub fn create_pods(&self) -> Vec<&Pod> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                PlanEffect::CreatePod(p) => Some(p.as_ref()),
                _ => None,
            })
            .collect()
    }

    pub fn pull_pods(&self) -> Vec<&Pod> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                PlanEffect::PullImages(p) => Some(p.as_ref()),
                _ => None,
            })
            .collect()
    }

    pub fn delete_pull_pods(&self) -> Vec<&String> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                PlanEffect::DeletePullPod(p) => Some(p),
                _ => None,
            })
            .collect()
    }

    pub fn create_jobs(&self) -> Vec<&Job> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                PlanEffect::CreateJob(j) => Some(j.as_ref()),
                _ => None,
            })
            .collect()
    }
}

/// The decision as it is made.
#[derive(Debug, Clone, Default)]
pub(super) struct Rollout {
    pub create_jobs: Vec<Job>,
    pub delete_jobs: Vec<JobDeletion>,
    pub create_pods: Vec<Pod>,
    pub delete_pods: Vec<String>,
    /// Pods that pull the Jobs' images before the first node (`spec.disruption.prePull`).
    pub pull_pods: Vec<Pod>,
    pub delete_pull_pods: Vec<String>,
    pub node_patches: Vec<NodeChange>,
    pub events: Vec<Event>,
    pub requeue_after: Option<Duration>,
    /// The nodes that wait, and why (only when the input asks to explain).
    pub waiting: Vec<crate::common::decision::Waiting>,
    /// The nodes the Plan starts next (`spec.disruption.preferNoSchedule`).
    pub next: BTreeSet<String>,
    /// Template hashes rendered in this decision, for the memo.
    pub learned: Learned,
}

impl Rollout {
    pub(super) fn event(&mut self, type_: EventType, reason: &'static str, message: String) {
        self.events.push(Event {
            type_,
            reason,
            message,
            node: None,
            quiet: false,
        });
    }

    /// An event about `node` (what notifications name).
    pub(super) fn node_event(
        &mut self,
        type_: EventType,
        reason: &'static str,
        message: String,
        node: &str,
    ) {
        self.event(type_, reason, message);
        if let Some(e) = self.events.last_mut() {
            e.node = Some(node.to_string());
        }
    }

    pub(super) fn requeue(&mut self, after: Duration) {
        let after = after.max(Duration::from_secs(1));
        self.requeue_after = Some(self.requeue_after.map_or(after, |r| r.min(after)));
    }

    /// The decision, with its effects in the order the runtime applies them: node patches, then
    /// Job and pod deletions, then pull pods, then reboot pods, then Jobs.
    pub(super) fn into_decision(
        self,
        status: PlanStatus,
        holds: BTreeSet<String>,
        summary: PlanSummary,
    ) -> PlanDecision {
        let effects = (self.node_patches.into_iter().map(PlanEffect::PatchNode))
            .chain(self.delete_jobs.into_iter().map(PlanEffect::DeleteJob))
            .chain(self.delete_pods.into_iter().map(PlanEffect::DeletePod))
            .chain((self.delete_pull_pods.into_iter()).map(PlanEffect::DeletePullPod))
            .chain((self.pull_pods.into_iter()).map(|p| PlanEffect::PullImages(Box::new(p))))
            .chain(
                self.create_pods
                    .into_iter()
                    .map(|p| PlanEffect::CreatePod(Box::new(p))),
            )
            .chain(
                self.create_jobs
                    .into_iter()
                    .map(|j| PlanEffect::CreateJob(Box::new(j))),
            )
            .collect();
        Decision {
            status,
            effects,
            events: self.events,
            holds,
            requeue: self.requeue_after,
            waiting: self.waiting,
            next: self.next,
            report: summary,
        }
    }
}

/// The names of the nodes whose hostname `status.applying` lists, among `nodes` (each with its
/// hostname, read once per decision).
pub(super) fn applying_nodes<'a>(
    applying: &[String],
    nodes: impl IntoIterator<Item = (&'a str, &'a crate::node::NodeInfo)>,
) -> BTreeSet<String> {
    if applying.is_empty() {
        return BTreeSet::new();
    }
    // Looked up once per node of the fleet: a hash set costs one hash, a tree of 100 hostnames
    // seven comparisons of strings that share their prefix.
    let hosts: HashSet<&str> = applying.iter().map(String::as_str).collect();
    nodes
        .into_iter()
        .filter(|(host, _)| hosts.contains(host))
        .map(|(_, n)| n.name.clone())
        .collect()
}
