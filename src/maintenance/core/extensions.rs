//! What slipway's extensions of NMO's spec say: `drainTimeout` (when a drain has taken too long)
//! and `disruption` (checked before the node is taken; its silence is held by the runtime).

use jiff::Timestamp;

use super::{DRAINED, MaintenanceInput, Stage, status};
use crate::maintenance::api::NodeMaintenance;
use crate::node::disruption;

/// `Stage::InvalidSpec` when `spec.disruption` cannot be followed. A maintenance that has taken
/// its node goes on (its silence is skipped while the spec is wrong).
pub(super) fn invalid(nm: &NodeMaintenance) -> Option<Stage> {
    let d = nm.spec.disruption.as_ref()?;
    let why = "a NodeMaintenance runs no image: it cordons and drains";
    let message = disruption::validate_without_images(d, "spec.disruption", why).err()?;
    Some(Stage::InvalidSpec { message })
}

/// `Some(timeout)` once `drainTimeout` has passed since the drain started.
pub(super) fn timed_out(input: &MaintenanceInput<'_>, now: Timestamp) -> Option<String> {
    let text = input.maintenance.spec.drain_timeout.as_deref()?;
    let timeout = text
        .parse::<crate::common::duration::GoDuration>()
        .ok()
        .and_then(crate::common::duration::GoDuration::to_std)?;
    let started = input
        .maintenance
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == DRAINED && c.status != "True" && !status::is_waiting(&c.reason))
        .map(|c| &c.last_transition_time)?
        .0;
    let deadline = started.checked_add(timeout).ok()?;
    (now >= deadline).then(|| text.to_string())
}
