//! Taking over from kured: the nodes its lock names are held by the policy that selects them
//! until kured lets them go, and finished by slipway if kured is uninstalled before it does.
//!
//! kured's only record of a reboot under way is its lock, an annotation on its own DaemonSet
//! (`weave.works/kured-node-lock` on `kube-system/kured` by default): one entry
//! `{"nodeID", "metadata": {"unschedulable"}, "created", "TTL"}`, or with `--concurrency` above 1
//! `{"maxOwners", "locks": [entry, ...]}`. `metadata.unschedulable` says whether the node was
//! cordoned before kured took it (then kured leaves the cordon after the reboot). Uninstalling kured
//! deletes the DaemonSet and the lock with it, so the lock is read while kured is still there.
//!
//! A node the lock names is `Kured` in the policy's status: it holds a slot (and the budget sees
//! it held), nothing is done to it. Then:
//! - kured releases it (the DaemonSet stays): kured has uncordoned it if it was its to uncordon;
//!   the policy forgets it;
//! - kured is uninstalled, the node back on a new boot: the reboot's hand-off as for the
//!   policy's own (Ready, health gate), then the cordon kured made is given back;
//! - kured is uninstalled before the node rebooted: the policy drains and reboots it itself, and
//!   gives kured's cordon back after.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use super::Signal;
pub use super::kured_lock::{
    DEFAULT_ANNOTATION, DEFAULT_NAME, DEFAULT_NAMESPACE, KuredLock, KuredView, parse_lock,
};
use super::spec::PolicySettings;
use super::state::RebootState;
use super::steps::{NodeSteps, NodeView, RebootAction, rebooting};
use crate::common::rfc3339;
use crate::node::cordon;
use crate::node::handoff::Handoff;
use crate::reboot_policy::api::RebootRecord;

/// How often a node kured holds is looked at: kured's lock changes trigger nothing.
pub const KURED_RECHECK: std::time::Duration = std::time::Duration::from_secs(10);

/// Takes over the selected nodes kured's lock names that no operation holds and the policy had
/// no state for when the decision began (`states`: a node given back in this decision is not
/// taken again in it).
pub(super) fn take_over(
    settings: &PolicySettings,
    states: &BTreeMap<String, RebootState>,
    nodes: &[NodeView<'_>],
    now: Timestamp,
    d: &mut NodeSteps,
) {
    let KuredView::Holds(held) = &settings.kured else {
        return;
    };
    for view in nodes {
        let name = &view.node.name;
        let Some(was_cordoned) = held.get(name) else {
            continue;
        };
        if !view.selected || view.held_by.is_some() || states.contains_key(name) {
            continue;
        }
        let state = RebootState::Kured {
            before: view.node.boot_id.clone(),
            cordoned: !was_cordoned,
            since: now,
        };
        d.keep(name, state, holding_message());
        d.event(
            name,
            false,
            "KuredHolds",
            format!(
                "kured is rebooting Node {name} (its lock names it): the policy holds its slot \
                 until kured lets it go, and finishes the reboot if kured is uninstalled first"
            ),
        );
        d.recheck(KURED_RECHECK);
    }
}

fn holding_message() -> String {
    "kured is rebooting it (its lock names the node); held until kured lets it go".into()
}

/// A node taken over from kured, as [`RebootState::Kured`] keeps it.
pub(super) struct Taken {
    pub before: String,
    pub cordoned: bool,
    pub since: Timestamp,
}

/// One look at a node taken over from kured.
pub(super) fn advance(
    settings: &PolicySettings,
    name: &str,
    taken: Taken,
    view: &NodeView<'_>,
    now: Timestamp,
    d: &mut NodeSteps,
) {
    let Taken {
        before,
        cordoned,
        since,
    } = taken;
    let rebooted = view.node.boot_id != before;
    match (&settings.kured, settings.kured.holds(name)) {
        (KuredView::Holds(held), Some(true)) => {
            let cordoned = held.get(name).map_or(cordoned, |was| !was);
            let next = RebootState::Kured {
                before,
                cordoned,
                since,
            };
            d.keep(name, next, holding_message());
            d.recheck(KURED_RECHECK);
        }
        (KuredView::Holds(_), _) => released(name, rebooted, view, now, d),
        // Uninstalled after the reboot: the hand-off, then kured's cordon given back.
        (KuredView::Gone, _) if rebooted => {
            let next = RebootState::Rebooting {
                signal: Signal::Kured,
                cordoned,
                handoff: Handoff::start(before, now),
            };
            rebooting(settings, name, next, view, now, d);
            // Not when it finished at once: the uncordon comes before the record would.
            if d.states.contains_key(name) {
                own_cordon(name, cordoned, view, d);
            }
        }
        (KuredView::Gone, _) => {
            own_cordon(name, cordoned, view, d);
            finish_for_kured(name, before, cordoned, view, now, d);
        }
        (KuredView::Off | KuredView::Unreadable(_), _) => {
            let why = match &settings.kured {
                KuredView::Unreadable(why) => why.clone(),
                _ => {
                    "the controller does not read kured's lock (--kured-daemonset is empty)".into()
                }
            };
            let next = RebootState::Kured {
                before,
                cordoned,
                since,
            };
            d.keep(name, next, format!("taken over from kured; waiting: {why}"));
            d.recheck(KURED_RECHECK);
        }
    }
}

/// kured is gone: the cordon it made is the policy's to give back now. The status' `cordoned` says
/// so to the policy; the node's record says so to every operation (a Plan starting there does not
/// take it for an admin's).
fn own_cordon(name: &str, cordoned: bool, view: &NodeView<'_>, d: &mut NodeSteps) {
    if cordoned && view.node.unschedulable && !cordon::has_record(view.node) {
        d.act(name, RebootAction::RecordCordon);
    }
}

/// kured released the node, still installed: it gave its cordon back itself.
fn released(name: &str, rebooted: bool, view: &NodeView<'_>, now: Timestamp, d: &mut NodeSteps) {
    let how = if rebooted {
        "after its reboot"
    } else {
        "without a reboot"
    };
    d.act(
        name,
        RebootAction::Finish {
            signal: Signal::Kured,
            uncordon: false,
            rebooted,
        },
    );
    d.event(
        name,
        false,
        "KuredReleased",
        format!("kured released Node {name} {how}"),
    );
    if rebooted {
        d.rebooted.push(RebootRecord {
            name: name.to_string(),
            at: rfc3339(now),
            signal: Signal::Kured,
            boot_id: Some(view.node.boot_id.clone()).filter(|b| !b.is_empty()),
        });
    }
}

/// kured was uninstalled before the node rebooted: the policy drains and reboots it itself.
fn finish_for_kured(
    name: &str,
    before: String,
    cordoned: bool,
    view: &NodeView<'_>,
    now: Timestamp,
    d: &mut NodeSteps,
) {
    let next = RebootState::Draining {
        signal: Signal::Kured,
        before,
        cordoned,
        since: now,
    };
    let why =
        format!("kured was uninstalled before it rebooted Node {name}; draining and rebooting it");
    d.begin_drain(view.node, next, why, Duration::ZERO);
}
