//! Conditions of slipway's own resources, as `metav1.Condition` words them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::bounded::{CONDITION_MESSAGE_BYTES, cut};

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
        message: cut(message, CONDITION_MESSAGE_BYTES).into_owned(),
        last_transition_time: kept.unwrap_or(Time(now)),
        observed_generation: generation,
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => *c = condition,
        None => conditions.push(condition),
    }
}
/// Where an object stands, as kstatus (Flux, Fleet, `kubectl wait`, slipway's Argo CD health
/// checks) reads its `Ready`, `Reconciling` and `Stalled` conditions: each with the reason and
/// message that say why. What each means for each kind is docs/gitops.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing<'a> {
    /// Everything the spec asks is done (or, for a standing policy, nothing is under way).
    Ready(&'a str, &'a str),
    /// Work is under way, or waits for something that will come.
    Reconciling(&'a str, &'a str),
    /// Nothing goes on until someone changes something.
    Stalled(&'a str, &'a str),
}

/// Sets `Ready`, `Reconciling` and `Stalled` for `standing`: the one it names `True`, the others
/// `False`, all three with its reason and message (a condition's reason is never empty).
pub fn set_standing(
    conditions: &mut Vec<Condition>,
    standing: Standing<'_>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    let (state, reason, message) = match standing {
        Standing::Ready(r, m) => ("Ready", r, m),
        Standing::Reconciling(r, m) => ("Reconciling", r, m),
        Standing::Stalled(r, m) => ("Stalled", r, m),
    };
    for type_ in ["Ready", "Reconciling", "Stalled"] {
        set_condition(
            conditions,
            type_,
            type_ == state,
            reason,
            message,
            generation,
            now,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> jiff::Timestamp {
        s.parse().expect("a time")
    }

    #[test]
    fn standing_sets_one_of_three_true_with_its_reason_and_keeps_transition_times() {
        let mut c = Vec::new();
        let at = "2026-11-26T00:00:00Z";
        set_standing(
            &mut c,
            Standing::Reconciling("Rebooting", "1 node"),
            Some(2),
            t(at),
        );
        let show = |c: &[Condition]| -> Vec<String> {
            (c.iter())
                .map(|c| {
                    format!(
                        "{}={} {} {:?}",
                        c.type_, c.status, c.reason, c.observed_generation
                    )
                })
                .collect()
        };
        assert_eq!(
            show(&c),
            [
                "Ready=False Rebooting Some(2)",
                "Reconciling=True Rebooting Some(2)",
                "Stalled=False Rebooting Some(2)",
            ]
        );
        let later = "2026-11-26T00:05:00Z";
        set_standing(&mut c, Standing::Ready("Idle", ""), Some(3), t(later));
        let since = |c: &[Condition], ty: &str| {
            (c.iter().find(|c| c.type_ == ty)).map(|c| c.last_transition_time.0)
        };
        assert_eq!(since(&c, "Ready"), Some(t(later)), "Ready turned True");
        assert_eq!(since(&c, "Stalled"), Some(t(at)), "Stalled stayed False");
        set_standing(
            &mut c,
            Standing::Stalled("Invalid", "spec.x"),
            Some(4),
            t(later),
        );
        assert_eq!(
            show(&c),
            [
                "Ready=False Invalid Some(4)",
                "Reconciling=False Invalid Some(4)",
                "Stalled=True Invalid Some(4)",
            ]
        );
    }
}
