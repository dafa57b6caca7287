//! A RebootPolicy's pre-pull (`spec.disruption.prePull`, see [`crate::node::prepull`]): its
//! reboot pod's image is pulled on every node it selects before a node reboots with it, whenever
//! the image changes. The pull is recorded in `status.prePull` under the image; a node that cannot
//! pull holds every new reboot (reboots under way go on).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use super::spec::PolicySpec;
use super::{PolicyInput, RebootEffect};
use crate::common::decision::Event;
use crate::common::naming::safe_concat_name;
use crate::node::prepull::{self, Image, PrePullPhase, PrePullStatus, PullPlan};
use crate::node::reboot::reboot_pod_spec;

/// What the pull did in this decision.
#[derive(Debug, Default)]
pub(super) struct Pulled {
    pub status: Option<PrePullStatus>,
    pub effects: Vec<RebootEffect>,
    pub events: Vec<Event>,
    /// While it keeps new reboots from starting: the reason and message.
    pub holding: Option<(&'static str, String)>,
}

/// The policy's key on its pull pods.
pub fn owner(name: &str) -> String {
    safe_concat_name(&["rebootpolicy", name])
}

/// The pull of the policy's image on the nodes it selects, unless recorded as done for it.
pub(super) fn pull(input: &PolicyInput<'_>, spec: &PolicySpec, namespace: &str) -> Pulled {
    let policy = input.policy;
    let name = policy.metadata.name.as_deref().unwrap_or_default();
    let key = owner(name);
    let previous = policy.status.as_ref().and_then(|s| s.pre_pull.clone());
    let mut out = Pulled {
        status: previous.clone(),
        ..Pulled::default()
    };
    let leftovers = |out: &mut Pulled| {
        let gone = prepull::leftovers(&key, input.pull_pods);
        (out.effects).extend(gone.into_iter().map(RebootEffect::DeletePullPod));
    };
    if !spec.pre_pull {
        out.status = None;
        leftovers(&mut out);
        return out;
    }
    let hash = image_hash(&spec.image);
    let done = previous
        .as_ref()
        .is_some_and(|p| p.hash == hash && p.phase == PrePullPhase::Pulled);
    if done {
        leftovers(&mut out);
        return out;
    }
    let targets: Vec<&str> = (input.nodes.iter())
        .filter(|v| v.selected)
        .map(|v| v.node.name.as_str())
        .collect();
    // The reboot pod's container, as it runs on any node.
    let pod = reboot_pod_spec("", &spec.image, String::new(), None);
    let images: Vec<Image> = prepull::images_of(&pod);
    let pull = PullPlan {
        owner: &key,
        hash: &hash,
        images: &images,
        namespace,
        service_account: None,
        pull_secrets: &[],
        labels: &BTreeMap::new(),
        owner_references: &[],
    };
    let step = prepull::step(&pull, &targets, input.pull_pods);
    (out.effects).extend(step.delete.into_iter().map(RebootEffect::DeletePullPod));
    (out.effects).extend((step.create.into_iter()).map(|p| RebootEffect::PullImages(Box::new(p))));
    out.events
        .extend(prepull::told(previous.as_ref(), &step.status));
    out.holding = prepull::holding(&step.status, "no node reboots");
    out.status = Some(step.status);
    out
}

/// The image as a label value: what the pull is recorded under.
fn image_hash(image: &str) -> String {
    Sha256::digest(image.as_bytes())
        .iter()
        .take(10)
        .map(|b| format!("{b:02x}"))
        .collect()
}
