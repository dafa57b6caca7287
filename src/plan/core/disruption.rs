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

use crate::common::naming::safe_concat_name;
use crate::node::NodeInfo;
use crate::node::prepull::{self, PrePullPhase, PrePullStatus, PullPlan};
use crate::plan::api::{Plan, PlanStatus, labels};

/// The Plan's key on its pull pods.
pub fn owner(plan: &Plan) -> String {
    safe_concat_name(&["plan", plan.metadata.name.as_deref().unwrap_or_default()])
}

/// Before nodes start: pulls the images when a node is about to start (a free slot and a node to
/// take it) and this hash's pull is not recorded as done. `Some(the pull)` while it keeps nodes
/// from starting. Pull pods no longer wanted go.
pub(super) fn pre_pull(
    facts: &mut Facts<'_>,
    eligible: &[&NodeInfo],
    free: &[&NodeInfo],
    steps: &Steps<'_>,
    pods: &[&Pod],
    st: &mut PlanStatus,
    out: &mut Rollout,
) -> Option<PrePullStatus> {
    let owner = owner(facts.plan);
    if !facts.settings.pre_pulls {
        st.pre_pull = None;
        out.delete_pull_pods
            .extend(prepull::leftovers(&owner, pods));
        return None;
    }
    let done = st
        .pre_pull
        .as_ref()
        .is_some_and(|p| p.hash == facts.hash && p.phase == PrePullPhase::Pulled);
    if done || !facts.starting(free, steps) {
        if done {
            out.delete_pull_pods
                .extend(prepull::leftovers(&owner, pods));
        }
        return None;
    }
    // The Jobs differ from node to node, their images do not.
    let first = eligible.first()?;
    let job = match facts.render(first) {
        Ok(job) => job.clone(),
        // The rollout reports a Job it cannot render; nothing to pull for it.
        Err(_) => return None,
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
    let hash = facts.hash.clone();
    let namespace = facts.ctx.namespace.clone();
    let pull = PullPlan {
        owner: &owner,
        hash: &hash,
        images: &images,
        namespace: &namespace,
        service_account: pod.and_then(|p| p.service_account_name.as_deref()),
        pull_secrets: &secrets,
        labels: &pod_labels,
        owner_references: &[],
    };
    let targets: Vec<&str> = eligible.iter().map(|n| n.name.as_str()).collect();
    let step = prepull::step(&pull, &targets, pods);
    out.pull_pods.extend(step.create);
    out.delete_pull_pods.extend(step.delete);
    let before = st.pre_pull.replace(step.status.clone());
    out.events
        .extend(prepull::told(before.as_ref(), &step.status));
    if step.status.phase != PrePullPhase::Pulled {
        out.requeue(RECHECK);
        return Some(step.status);
    }
    None
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
