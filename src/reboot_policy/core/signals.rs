//! What asks for a node's reboot: `slipway agent`'s annotation, Flatcar's or Container Linux's
//! update-agent, or a Node condition (Node Problem Detector).

use crate::node::NodeInfo;
use crate::reboot_policy::api::RebootSignals;
pub use crate::reboot_policy::api::Signal;

use super::request::REBOOT_REQUIRED_ANNOTATION;

/// The annotation prefix of Flatcar's update operator (FLUO) and its agent (FLUO's
/// `pkg/constants/constants.go`: `.net`, since its 2019 rename from CoreOS's operator).
pub const FLATCAR_PREFIX: &str = "flatcar-linux-update.v1.flatcar-linux.net/";
/// The annotation prefix of Container Linux's update operator (CLUO) and its agent.
pub const CONTAINER_LINUX_PREFIX: &str = "container-linux-update.v1.coreos.com/";
/// Set `"true"` by the update-agent when the node needs a reboot.
pub const REBOOT_NEEDED: &str = "reboot-needed";
/// Set `"true"` by the update-agent from its drain until it is back after the reboot.
pub const REBOOT_IN_PROGRESS: &str = "reboot-in-progress";
/// Written by the operator (here, slipway): `"true"` lets the agent reboot, `"false"` after.
pub const REBOOT_OK: &str = "reboot-ok";
/// Set `"true"` by an admin: the operator leaves the node alone.
pub const REBOOT_PAUSED: &str = "reboot-paused";

impl Signal {
    /// The signal as the status and messages name it.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Agent => "agent",
            Signal::Flatcar => "flatcar",
            Signal::ContainerLinux => "containerLinux",
            Signal::NodeCondition => "nodeCondition",
            Signal::Kured => "kured",
        }
    }

    /// The annotation prefix of the update-agent that reboots the node itself once granted;
    /// `None` when slipway's reboot pod does it.
    pub fn update_agent(self) -> Option<&'static str> {
        match self {
            Signal::Agent | Signal::NodeCondition | Signal::Kured => None,
            Signal::Flatcar => Some(FLATCAR_PREFIX),
            Signal::ContainerLinux => Some(CONTAINER_LINUX_PREFIX),
        }
    }
}

/// The signals a policy listens to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signals {
    pub agent: bool,
    pub flatcar: bool,
    pub container_linux: bool,
    /// Node condition types that ask for a reboot when `True`.
    pub node_conditions: Vec<String>,
}

impl Signals {
    pub fn of(spec: Option<&RebootSignals>) -> Signals {
        Signals {
            agent: spec.and_then(|s| s.agent).unwrap_or(true),
            flatcar: spec.and_then(|s| s.flatcar).unwrap_or(false),
            container_linux: spec.and_then(|s| s.container_linux).unwrap_or(false),
            node_conditions: spec.map(|s| s.node_conditions.clone()).unwrap_or_default(),
        }
    }
}

/// On a Node: the conditions (`type=lastTransitionTime`, sorted, comma-separated) whose reboot a
/// policy started. A condition asks again only once it changes (Node Problem Detector sets it
/// anew), so a condition that stays `True` after the reboot does not reboot the node in a loop.
pub const CONDITION_HANDLED: &str = "slipway.dev/reboot-conditions-handled";

/// Every node annotation the policies read; the node index keeps these.
pub const SIGNAL_ANNOTATIONS: [&str; 10] = [
    "slipway.dev/reboot-required",
    "slipway.dev/reboot-conditions-handled",
    "flatcar-linux-update.v1.flatcar-linux.net/reboot-needed",
    "flatcar-linux-update.v1.flatcar-linux.net/reboot-in-progress",
    "flatcar-linux-update.v1.flatcar-linux.net/reboot-ok",
    "flatcar-linux-update.v1.flatcar-linux.net/reboot-paused",
    "container-linux-update.v1.coreos.com/reboot-needed",
    "container-linux-update.v1.coreos.com/reboot-in-progress",
    "container-linux-update.v1.coreos.com/reboot-ok",
    "container-linux-update.v1.coreos.com/reboot-paused",
];

fn annotation<'a>(node: &'a NodeInfo, prefix: &str, key: &str) -> Option<&'a str> {
    node.annotations
        .get(&format!("{prefix}{key}"))
        .map(String::as_str)
}

/// The node's `True` conditions among those the policy names, as [`CONDITION_HANDLED`] records
/// them; `None` when none is `True`.
pub fn condition_marker(node: &NodeInfo, signals: &Signals) -> Option<String> {
    let mut seen: Vec<String> = signals
        .node_conditions
        .iter()
        .filter_map(|t| node.true_conditions.get(t).map(|at| format!("{t}={at}")))
        .collect();
    seen.sort();
    seen.dedup();
    (!seen.is_empty()).then(|| seen.join(","))
}

/// Whether an enabled update-agent says it is rebooting the node: on a node no policy started,
/// one another coordinator (FLUO, CLUO, left running or removed mid-reboot) granted, which is
/// down all the same.
pub fn agent_rebooting(node: &NodeInfo, signals: &Signals) -> bool {
    [
        (signals.flatcar, Signal::Flatcar),
        (signals.container_linux, Signal::ContainerLinux),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .any(|(_, s)| {
        let prefix = s.update_agent().unwrap_or_default();
        annotation(node, prefix, REBOOT_IN_PROGRESS) == Some("true")
    })
}

/// Which signal, if any, says the node wants a reboot now.
///
/// The agent's annotation counts only when made at the node's current boot (a request from before
/// the last reboot is stale). An update-agent's `reboot-needed` counts unless an admin paused the
/// node or the agent says a reboot is already in progress (it clears both flags only once it is
/// back, so a node just rebooted is not taken again).
pub fn requested(node: &NodeInfo, signals: &Signals) -> Option<Signal> {
    if signals.agent
        && !node.boot_id.is_empty()
        && node.annotations.get(REBOOT_REQUIRED_ANNOTATION) == Some(&node.boot_id)
    {
        return Some(Signal::Agent);
    }
    let agent = [
        (signals.flatcar, Signal::Flatcar),
        (signals.container_linux, Signal::ContainerLinux),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, s)| s)
    .find(|s| {
        let prefix = s.update_agent().unwrap_or_default();
        annotation(node, prefix, REBOOT_NEEDED) == Some("true")
            && annotation(node, prefix, REBOOT_PAUSED) != Some("true")
            && annotation(node, prefix, REBOOT_IN_PROGRESS) != Some("true")
    });
    agent.or_else(|| {
        let marker = condition_marker(node, signals)?;
        (node.annotations.get(CONDITION_HANDLED) != Some(&marker)).then_some(Signal::NodeCondition)
    })
}
