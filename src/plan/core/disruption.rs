//! What a Plan does around its disruptions (`spec.disruption`) that its rollout decides.
//!
//! Pre-pull (see [`crate::node::prepull`]): before the first node of a version starts, the images
//! of its Jobs are pulled on every node left to upgrade. The pull is recorded in `status.prePull`
//! under the Plan's hash: once pulled, a version never waits for a pull again, whatever restarts.
//!
//! The next batch (see [`crate::node::next`]): the nodes it starts next, for their
//! `PreferNoSchedule` taint.

use std::collections::BTreeSet;

use super::Rollout;
use super::facts::{Facts, Steps};
use k8s_openapi::api::core::v1::Pod;

use crate::common::decision::Event;
use crate::common::naming::safe_concat_name;
use crate::node::NodeInfo;
use crate::node::prepull::{self, PrePullPhase, PrePullStatus, PullPlan};
use crate::plan::api::{Plan, PlanStatus, labels};

/// The Plan's key on its pull pods.
pub fn owner(plan: &Plan) -> String {
    safe_concat_name(&["plan", plan.metadata.name.as_deref().unwrap_or_default()])
}

/// What the pull did in this decision: the kinds that pull (a RebootPolicy, a NodeOp) have the
/// same shape.
#[derive(Debug, Default)]
pub(super) struct Pulled {
    /// `status.prePull` after it.
    pub status: Option<PrePullStatus>,
    pub create: Vec<Pod>,
    pub delete: Vec<String>,
    pub events: Vec<Event>,
    /// While it keeps new nodes from starting: the pull.
    pub holding: Option<PrePullStatus>,
}

impl Pulled {
    /// Writes it into the status and the decision (a pull in progress is looked at again soon);
    /// what keeps new nodes from starting, if anything.
    pub(super) fn write(self, st: &mut PlanStatus, out: &mut Rollout) -> Option<PrePullStatus> {
        st.pre_pull = self.status;
        out.delete_pull_pods.extend(self.delete);
        out.pull_pods.extend(self.create);
        out.events.extend(self.events);
        if self.holding.is_some() {
            out.requeue(RECHECK);
        }
        self.holding
    }
}

/// Before nodes start: pulls the images when a node is about to start (a free slot and a node to
/// take it) and this hash's pull is not recorded as done (`recorded`: `status.prePull` as the
/// decision found it). Pull pods no longer wanted go.
pub(super) fn pre_pull(
    facts: &mut Facts<'_>,
    eligible: &[&NodeInfo],
    free: &[&NodeInfo],
    steps: &Steps<'_>,
    pods: &[&Pod],
    recorded: Option<&PrePullStatus>,
) -> Pulled {
    let owner = owner(facts.plan);
    let mut out = Pulled {
        status: recorded.cloned(),
        ..Pulled::default()
    };
    if !facts.settings.pre_pulls {
        out.status = None;
        out.delete = prepull::leftovers(&owner, pods);
        return out;
    }
    let done = recorded.is_some_and(|p| p.hash == facts.hash && p.phase == PrePullPhase::Pulled);
    if done || !facts.starting(free, steps) {
        if done {
            out.delete = prepull::leftovers(&owner, pods);
        }
        return out;
    }
    // The Jobs differ from node to node, their images do not.
    let Some(first) = eligible.first() else {
        return out;
    };
    let job = match facts.render(first) {
        Ok(job) => job.clone(),
        // The rollout reports a Job it cannot render; nothing to pull for it.
        Err(_) => return out,
    };
    let pod = job.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    let images = pod.map(prepull::images_of).unwrap_or_default();
    let secrets: Vec<String> = (pod.iter())
        .flat_map(|p| p.image_pull_secrets.iter().flatten())
        .map(|s| s.name.clone())
        .collect();
    let mut pod_labels = std::collections::BTreeMap::new();
    pod_labels.insert(
        labels::CONTROLLER.to_string(),
        facts.controller_name.to_string(),
    );
    let pull = PullPlan {
        owner: &owner,
        hash: &facts.hash,
        images: &images,
        namespace: &facts.ctx.namespace,
        service_account: pod.and_then(|p| p.service_account_name.as_deref()),
        pull_secrets: &secrets,
        labels: &pod_labels,
        owner_references: &[],
    };
    let targets: Vec<&str> = eligible.iter().map(|n| n.name.as_str()).collect();
    let step = prepull::step(&pull, &targets, pods);
    out.create = step.create;
    out.delete = step.delete;
    out.events.extend(prepull::told(recorded, &step.status));
    out.holding = (step.status.phase != PrePullPhase::Pulled).then(|| step.status.clone());
    out.status = Some(step.status);
    out
}

/// With `spec.disruption.preferNoSchedule`: the nodes that start next, in the Plan's order, as
/// many as its concurrency (those another operation holds wait for it, not for the Plan).
pub(super) fn next_batch(
    facts: &Facts<'_>,
    eligible: &[&NodeInfo],
    steps: &Steps<'_>,
) -> BTreeSet<String> {
    if !facts.settings.taints_next {
        return BTreeSet::new();
    }
    let fresh = (eligible.iter().copied())
        .filter(|n| !steps.contains_key(n.name.as_str()))
        .filter(|n| facts.holder_of(n).is_none());
    let (slots, order) = (facts.settings.slots(), facts.settings.order);
    super::selection::first_in_plan_order(slots, facts.uid, &facts.hash, order, fresh)
        .into_iter()
        .map(|n| n.name.clone())
        .collect()
}

/// How soon a pull in progress is looked at again: its pods are listed, not watched.
const RECHECK: std::time::Duration = std::time::Duration::from_secs(5);
