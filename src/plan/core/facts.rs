//! What a Plan decision reads once: the Plan's facts (its version and hash, its Jobs, the Jobs as
//! rendered now) and how one node steps from them; the nodes' steps that the rollout
//! ([`super::plan_nodes`]) and the report ([`super::report`]) both read.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;

use super::PlanInput;
use super::config::JobConfig;
use super::decision::TemplateMemo;
use super::jobs::PlanJobs;
use super::node_labels::NodeLabels;
use super::node_state::{self, JobSeen, NodeAction, NodeState, Observation, PlanContext};
use super::settings::PlanSettings;
use crate::common::naming;
use crate::node::NodeInfo;
use crate::node::budget::Budget;
use crate::node::reboot::HealthObservation;
use crate::plan::api::Plan;
use crate::plan::api::{PlanStatus, labels};
use crate::plan::core::failure::reset_requested;
use crate::plan::core::job;

/// The nodes of this decision: their states, in node-name order, and what they asked for.
pub(super) type Steps<'a> = BTreeMap<&'a str, (&'a NodeInfo, NodeState, Vec<NodeAction>)>;

/// The Plan's facts for this decision, read once.
pub(super) struct Facts<'a> {
    pub(super) plan: &'a Plan,
    /// The nodes other operations hold, and the DisruptionBudgets that limit the Plan.
    pub(super) budget: &'a Budget,
    /// What the health gate's pods look like on nodes that rebooted, by node name.
    pub(super) health: &'a BTreeMap<String, HealthObservation>,
    pub(super) templates: Option<&'a TemplateMemo>,
    pub(super) controller_name: &'a str,
    pub(super) job_config: &'a JobConfig,
    /// The Plan's spec, read and checked once.
    pub(super) settings: &'a PlanSettings<'a>,
    /// Every node's labels, read once.
    pub(super) read: &'a [NodeLabels<'a>],
    pub(super) now: Timestamp,
    pub(super) name: &'a str,
    pub(super) uid: &'a str,
    pub(super) version: String,
    pub(super) hash: String,
    pub(super) ctx: PlanContext,
    pub(super) jobs: PlanJobs<'a>,
    /// The Plan as Jobs are rendered from: its status carries the resolved version and hash.
    pub(super) rendered_from: Plan,
    pub(super) rendered: BTreeMap<String, Result<Job, String>>,
    /// The part of a [`super::TemplateMemo`] key that is the Plan's.
    pub(super) memo_key: String,
    /// Template hashes rendered in this decision that the memo did not have.
    pub(super) learned: super::decision::Learned,
}

impl<'a> Facts<'a> {
    pub(super) fn new(
        input: &'a PlanInput<'a>,
        settings: &'a PlanSettings<'a>,
        read: &'a [NodeLabels<'a>],
        now: Timestamp,
        st: &PlanStatus,
    ) -> Facts<'a> {
        let plan = input.plan;
        let mut rendered_from = plan.clone();
        rendered_from.status = Some(st.clone());
        let name = plan.metadata.name.as_deref().unwrap_or_default();
        let hash = st.latest_hash.clone().unwrap_or_default();
        let reset = reset_requested(plan, st).is_some();
        let mut facts = Facts {
            plan,
            budget: input.budget,
            health: input.health,
            templates: input.templates,
            controller_name: input.controller_name,
            job_config: input.job_config,
            settings,
            read,
            now,
            name,
            uid: plan.metadata.uid.as_deref().unwrap_or_default(),
            version: st.latest_version.clone().unwrap_or_default(),
            hash,
            ctx: PlanContext {
                namespace: plan.metadata.namespace.clone().unwrap_or_default(),
                generation: plan.metadata.generation,
                post_complete_delay: settings.post_complete_delay,
                reboot: settings.reboot.as_ref().map(|p| p.handoff()),
                cordons: settings.cordons,
                failure: settings.failure.clone(),
                reset: false,
                quarantine_room: 0,
            },
            jobs: PlanJobs::new(input.jobs),
            memo_key: plan_memo_key(plan, st),
            learned: Vec::new(),
            rendered_from,
            rendered: BTreeMap::new(),
        };
        // A reset releases every node the Plan quarantined, so the room is whole again.
        let quarantined = if reset {
            0
        } else {
            read.iter()
                .filter(|r| r.quarantine == Some(facts.hash.as_str()))
                .count()
        };
        facts.ctx.reset = reset;
        facts.ctx.quarantine_room = facts
            .ctx
            .failure
            .max_quarantined
            .saturating_sub(i32::try_from(quarantined).unwrap_or(i32::MAX));
        facts
    }

    /// Whether a node is about to start: a slot is free and a free node has not stepped yet.
    pub(super) fn starting(&self, free: &[&NodeInfo], steps: &Steps<'_>) -> bool {
        slots_taken(steps) < self.settings.slots()
            && free.iter().any(|n| !steps.contains_key(n.name.as_str()))
    }

    /// The operation that holds `node` against this Plan, if any.
    pub(super) fn holder_of(&self, node: &NodeInfo) -> Option<&'a crate::node::holders::Holder> {
        self.budget.holder_of(&node.name)
    }

    pub(super) fn job_name(&self, node: &NodeInfo) -> String {
        naming::job_name(self.name, &node.name, &self.hash)
    }

    /// The node's Job as the Plan renders it now, rendered once per decision.
    pub(super) fn render(&mut self, node: &NodeInfo) -> Result<&Job, String> {
        let (settings, controller, config) = (self.settings, self.controller_name, self.job_config);
        let plan = &self.rendered_from;
        self.rendered
            .entry(node.name.clone())
            .or_insert_with(|| {
                job::render_job(plan, settings, node, controller, config).map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The pod-template hash the node's Job has when rendered now.
    fn template_hash(&mut self, node: &NodeInfo) -> Option<String> {
        let key = format!(
            "{}|{}|{}|{}",
            self.memo_key,
            node.name,
            node.hostname(),
            node.labels.get(labels::OS).map_or("", String::as_str)
        );
        if let Some(hash) = self.templates.and_then(|m| m.get(&key)) {
            return Some(hash.to_string());
        }
        let hash = self
            .render(node)
            .ok()
            .and_then(job::pod_template_hash)
            .map(str::to_string)?;
        if self.templates.is_some() {
            self.learned.push((key, hash.clone()));
        }
        Some(hash)
    }

    /// One node's transition, from what is known of it and its Job.
    pub(super) fn step(
        &mut self,
        node: &NodeInfo,
        state: NodeState,
    ) -> (NodeState, Vec<NodeAction>) {
        let job_name = self.job_name(node);
        // Only a live, unfinished or failed Job is compared with the template it should have.
        let wanted = match self.jobs.get(&job_name).map(|j| j.outcome.clone()) {
            Some(super::jobs::Outcome::Complete { .. }) | None => None,
            Some(_) => self.template_hash(node),
        };
        let seen = self
            .jobs
            .get(&job_name)
            .map_or(JobSeen::Absent, |j| j.seen(wanted.as_deref()));
        let obs = Observation {
            node,
            job_name: &job_name,
            job: seen,
            older_job_running: self
                .jobs
                .other_running(&node.name, &self.version, &job_name),
            health: self.health.get(&node.name),
        };
        let (next, actions) = node_state::transition(state, &obs, &self.ctx, self.now);
        if next == NodeState::Quarantined {
            self.ctx.quarantine_room -= 1;
        }
        (next, actions)
    }
}

/// How many of the nodes hold a slot.
pub(super) fn slots_taken(steps: &Steps<'_>) -> usize {
    steps.values().filter(|(_, s, _)| s.holds_slot()).count()
}

/// What a Plan's Jobs are rendered from, besides the node and the process's settings.
fn plan_memo_key(plan: &Plan, st: &PlanStatus) -> String {
    use sha2::{Digest, Sha256};
    let meta = serde_json::to_string(&(&plan.metadata.labels, &plan.metadata.annotations))
        .unwrap_or_default();
    let digest: String = Sha256::digest(meta.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!(
        "{}|{:?}|{digest}|{}|{}",
        plan.metadata.uid.as_deref().unwrap_or_default(),
        plan.metadata.generation,
        st.latest_version.as_deref().unwrap_or_default(),
        st.latest_hash.as_deref().unwrap_or_default()
    )
}
