//! A NodeOp's pre-pull (`spec.disruption.prePull`, see [`crate::node::prepull`]): before its
//! first node starts, the images of its preflight pod, its Job and its reboot pod are pulled on
//! every selected node. A NodeOp runs once: its pull is recorded in `status.prePull` under its
//! uid, and once a node has started it is never held by a pull.

use std::collections::{BTreeMap, BTreeSet};

use super::objects::{self, NODEOP_LABEL, Owner};
use super::spec::Settings;
use super::{NodeOpEffect, NodeOpInput};
use crate::common::decision::Event;
use crate::common::naming::safe_concat_name;
use crate::node::disruption::DisruptionSpec;
use crate::node::prepull::{self, Image, PrePullPhase, PrePullStatus, PullPlan};
use crate::node::reboot::reboot_pod_spec;

/// How soon a pull in progress is looked at again (its pods are listed with the NodeOp's).
pub(super) const RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// What the pull of a NodeOp did in this decision.
#[derive(Debug, Default)]
pub(super) struct Pulled {
    pub status: Option<PrePullStatus>,
    pub effects: Vec<NodeOpEffect>,
    pub events: Vec<Event>,
    /// While the pull keeps the fresh nodes from starting: the reason and message.
    pub holding: Option<(&'static str, String)>,
}

/// The pull before the first node: `started` tells whether a node has started already;
/// `selected` are the nodes it will take, in order.
pub(super) fn before_first(
    input: &NodeOpInput<'_>,
    settings: &Settings,
    owner: &Owner,
    selected: &[String],
    started: bool,
) -> Pulled {
    let op = input.op;
    let key = safe_concat_name(&["nodeop", &owner.name]);
    let previous = op.status.as_ref().and_then(|s| s.pre_pull.clone());
    let mut out = Pulled {
        status: previous.clone(),
        ..Pulled::default()
    };
    let leftovers = |out: &mut Pulled| {
        let gone = prepull::leftovers(&key, input.pull_pods);
        (out.effects).extend(gone.into_iter().map(NodeOpEffect::DeletePod));
    };
    if !DisruptionSpec::pre_pulls(op.spec.disruption.as_ref()) {
        out.status = None;
        leftovers(&mut out);
        return out;
    }
    let done = previous
        .as_ref()
        .is_some_and(|p| p.hash == owner.uid && p.phase == PrePullPhase::Pulled);
    if done || started || selected.is_empty() {
        leftovers(&mut out);
        return out;
    }
    let images = images(owner, settings, &selected[0], input.reboot_image);
    let secrets: Vec<String> = settings
        .pull_secrets
        .iter()
        .map(|s| s.name.clone())
        .collect();
    let labels = BTreeMap::from([(NODEOP_LABEL.to_string(), owner.name.clone())]);
    let references = [owner.reference()];
    let pull = PullPlan {
        owner: &key,
        hash: &owner.uid,
        images: &images,
        namespace: &owner.namespace,
        service_account: None,
        pull_secrets: &secrets,
        labels: &labels,
        owner_references: &references,
    };
    let targets: Vec<&str> = selected.iter().map(String::as_str).collect();
    let step = prepull::step(&pull, &targets, input.pull_pods);
    (out.effects).extend(step.delete.into_iter().map(NodeOpEffect::DeletePod));
    (out.effects).extend((step.create.into_iter()).map(|p| NodeOpEffect::CreatePod(Box::new(p))));
    out.events
        .extend(prepull::told(previous.as_ref(), &step.status));
    out.holding = prepull::holding(&step.status, "no node starts");
    out.status = Some(step.status);
    out
}

/// The images of everything the NodeOp runs on a node: its preflight pod, its Job, its reboot pod.
fn images(owner: &Owner, settings: &Settings, node: &str, reboot_image: &str) -> Vec<Image> {
    let job = objects::job(owner, settings, node, "pre-pull");
    let preflight = objects::preflight_pod(owner, settings, node);
    let reboot = settings
        .reboot
        .then(|| reboot_pod_spec(node, reboot_image, String::new(), None));
    let specs = (preflight.and_then(|p| p.spec).into_iter())
        .chain(job.spec.and_then(|s| s.template.spec))
        .chain(reboot);
    let mut seen = BTreeSet::new();
    specs
        .flat_map(|s| prepull::images_of(&s))
        .filter(|i| seen.insert(i.image.clone()))
        .collect()
}
