//! Conditions of slipway's own resources, as `metav1.Condition` words them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// A condition, `metav1.Condition`.
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// Sets the condition `type_` in `conditions`, keeping its transition time while its status does
/// not change.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    ok: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    let status = if ok { "True" } else { "False" };
    let kept = conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone());
    let condition = Condition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        last_transition_time: kept.unwrap_or(Time(now)),
        observed_generation: generation,
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => *c = condition,
        None => conditions.push(condition),
    }
}
