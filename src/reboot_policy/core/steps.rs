//! One policy's decision on its nodes, as its steps share it: a node as read now
//! ([`NodeView`]), what the controller does for it ([`RebootAction`]), the decision being built
//! ([`NodeSteps`]), and the reboot's hand-off that the policy's own reboots and the ones it takes
//! over from kured both go through.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use super::DRAIN_RECHECK;
pub use super::drain_view::DrainView;
use super::signals::{REBOOT_OK, Signal};
use super::spec::PolicySettings;
use super::state::RebootState;
use crate::common::duration::GoDuration;
use crate::common::rfc3339;
use crate::node::NodeInfo;
use crate::node::drain::PodKey;
use crate::node::handoff::{self, Handoff};
use crate::node::reboot::HealthObservation;
use crate::reboot_policy::api::{RebootNodeStatus, RebootRecord};

/// One node the policy governs (or has a state for), as read now.
#[derive(Debug, Clone)]
pub struct NodeView<'a> {
    pub node: &'a NodeInfo,
    /// The node matches the policy's selector (a node in progress that no longer does is still
    /// finished).
    pub selected: bool,
    /// Another slipway operation holds the node: who.
    pub held_by: Option<String>,
    /// Running pods on the node that match a blocking selector.
    pub blocking_pods: Vec<String>,
    /// For a draining node: what is left; `None` when not looked at.
    pub drain: Option<DrainView>,
    /// For a node in its health gate: the gate's pods.
    pub health: Option<&'a HealthObservation>,
    /// The policy's reboot pod for the node exists: its reboot was asked for, and asking again
    /// (while the node is down, say) would only be refused.
    pub reboot_pod: bool,
}

impl<'a> NodeView<'a> {
    /// A selected node that nothing else holds and nothing was observed on (no pods, no drain,
    /// no reboot pod): what a decision over bare nodes reads.
    pub fn bare(node: &'a NodeInfo) -> NodeView<'a> {
        NodeView {
            node,
            selected: true,
            held_by: None,
            blocking_pods: Vec::new(),
            drain: None,
            health: None,
            reboot_pod: false,
        }
    }
}

impl NodeView<'_> {
    /// Whether the node's reboot by `signal` is already asked for: the pod is there, or the
    /// update agent's `reboot-ok` grant is on the node.
    fn reboot_asked(&self, signal: Signal) -> bool {
        match signal.update_agent() {
            Some(prefix) => {
                self.node
                    .annotations
                    .get(&format!("{prefix}{REBOOT_OK}"))
                    .map(String::as_str)
                    == Some("true")
            }
            None => self.reboot_pod,
        }
    }
}

/// What the controller does for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebootAction {
    /// Record on the node which occurrence of its conditions this reboot handles
    /// ([`CONDITION_HANDLED`]).
    MarkConditions(String),
    /// Set the node's before-reboot labels: it was taken, and waits out the drain's delay
    /// before its cordon (which sets them too).
    Label,
    /// Cordon the node (it was schedulable).
    Cordon,
    /// Record on the node that its cordon is the policy's: one kured made, kured being gone.
    RecordCordon,
    /// Evict the pods the drain still has to move.
    Drain,
    /// Delete these pods: the drain's timeout passed (`onDrainTimeout: DeletePods`).
    DeletePods(Vec<PodKey>),
    /// Have the node reboot from boot `before`: a reboot pod, or `reboot-ok=true` for an
    /// update-agent. Asked again on every look until the node has rebooted (both are idempotent).
    Reboot { signal: Signal, before: String },
    /// The node is back (or gave up): withdraw the grant (`reboot-ok=false`), remove the reboot
    /// pod, and uncordon if slipway cordoned it. `rebooted`: it is back from its reboot (its
    /// after-reboot labels go on).
    Finish {
        signal: Signal,
        uncordon: bool,
        rebooted: bool,
    },
    /// An event on the policy.
    Event {
        warning: bool,
        reason: &'static str,
        message: String,
    },
}

/// The whole decision for one policy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeSteps {
    /// The states to persist, by node name.
    pub states: BTreeMap<String, RebootState>,
    /// What to do, in order, after the states are persisted.
    pub actions: Vec<(String, RebootAction)>,
    /// `status.nodes`, by name.
    pub nodes: Vec<RebootNodeStatus>,
    /// Nodes that came back in this decision, in the order they were looked at.
    pub rebooted: Vec<RebootRecord>,
    pub wanting: usize,
    pub rebooting: usize,
    /// The `Progressing` condition's message.
    pub summary: String,
    /// Look again after this long at the latest.
    pub recheck: Option<Duration>,
    /// Set when a failure stops every new reboot: why.
    pub stopped: Option<String>,
    /// The nodes that want a reboot and wait, grouped by why.
    pub waiting: Vec<crate::common::decision::Waiting>,
    /// The nodes that wait for their turn (not for another holder, nor a pause or a stop), in
    /// the order they start.
    pub next_up: Vec<String>,
}

impl NodeSteps {
    pub(super) fn recheck(&mut self, after: Duration) {
        self.recheck = Some(self.recheck.map_or(after, |r| r.min(after)));
    }

    /// `node` stays in progress in `state`; `message` says what it waits for.
    pub(super) fn keep(&mut self, node: &str, state: RebootState, message: String) {
        self.nodes.push(state.to_status(node, message));
        self.states.insert(node.to_string(), state);
    }

    /// `node` starts draining in `state`: cordoned unless it is, its pods evicted, told in a
    /// `Draining` event saying `why`. With a `delay`, only its before-reboot labels are set now;
    /// the cordon and the drain wait until the delay has passed ([`delayed_drain`]).
    pub(super) fn begin_drain(
        &mut self,
        node: &NodeInfo,
        state: RebootState,
        why: String,
        delay: Duration,
    ) {
        let name = &node.name;
        if !delay.is_zero() {
            self.act(name, RebootAction::Label);
            let after = GoDuration::from_std(delay);
            self.event(name, false, "Draining", format!("{why} in {after}"));
            self.keep(name, state, delayed_drain(delay));
            self.recheck(delay);
            return;
        }
        if !node.unschedulable {
            self.act(name, RebootAction::Cordon);
        }
        self.act(name, RebootAction::Drain);
        self.event(name, false, "Draining", why);
        self.keep(name, state, "cordoning and draining".into());
        self.recheck(DRAIN_RECHECK);
    }

    pub(super) fn act(&mut self, node: &str, action: RebootAction) {
        self.actions.push((node.to_string(), action));
    }

    pub(super) fn event(
        &mut self,
        node: &str,
        warning: bool,
        reason: &'static str,
        message: String,
    ) {
        self.act(
            node,
            RebootAction::Event {
                warning,
                reason,
                message,
            },
        );
    }
}

/// What a node taken waits for until its drain starts.
pub(super) fn delayed_drain(left: Duration) -> String {
    let left = GoDuration::from_std(Duration::from_secs(left.as_secs().max(1)));
    format!("cordoning and draining in {left} (spec.drain.delay)")
}

pub(super) fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    now.duration_since(since).try_into().unwrap_or_default()
}

pub(super) fn rebooting(
    settings: &PolicySettings,
    name: &str,
    state: RebootState,
    view: &NodeView<'_>,
    now: Timestamp,
    d: &mut NodeSteps,
) {
    let RebootState::Rebooting {
        signal,
        cordoned,
        handoff,
    } = state
    else {
        return;
    };
    let seen = handoff::Observation {
        node: name,
        ready: view.node.ready,
        boot_id: &view.node.boot_id,
        health: view.health,
    };
    let step = handoff::step(&handoff, &seen, &settings.handoff, now);
    if let Some((reason, message)) = step.timed_out.clone() {
        d.event(name, true, reason, message);
    }
    if let Some(after) = step.recheck_after {
        d.recheck(after);
    }
    if step.state == Handoff::Passed {
        d.act(
            name,
            RebootAction::Finish {
                signal,
                uncordon: cordoned,
                rebooted: true,
            },
        );
        d.event(
            name,
            false,
            "Rebooted",
            format!("Node {name} rebooted and is back"),
        );
        d.rebooted.push(RebootRecord {
            name: name.to_string(),
            at: rfc3339(now),
            signal,
            boot_id: Some(view.node.boot_id.clone()).filter(|b| !b.is_empty()),
        });
        return;
    }
    if let Handoff::AwaitingBoot { before, .. } = &step.state
        && view.node.boot_id == *before
        && !view.reboot_asked(signal)
    {
        d.act(
            name,
            RebootAction::Reboot {
                signal,
                before: before.clone(),
            },
        );
    }
    let message = step.state.describe(&seen, &settings.handoff);
    let next = RebootState::Rebooting {
        signal,
        cordoned,
        handoff: step.state,
    };
    d.keep(name, next, message);
}
