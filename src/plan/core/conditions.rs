//! Plan conditions, as SUC names and updates them, plus the transition times SUC never sets.

use crate::plan::api::{PlanCondition, PlanStatus};

pub const COMPLETE: &str = "Complete";
pub const VALIDATED: &str = "Validated";
pub const LATEST_RESOLVED: &str = "LatestResolved";

pub const TRUE: &str = "True";
pub const FALSE: &str = "False";
pub const UNKNOWN: &str = "Unknown";

/// The condition of `type_`, if present.
pub fn get<'a>(status: &'a PlanStatus, type_: &str) -> Option<&'a PlanCondition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` has `status`.
pub fn is(status: &PlanStatus, type_: &str, value: &str) -> bool {
    get(status, type_).is_some_and(|c| c.status == value)
}

/// The reason of the condition of `type_`, or "".
pub fn reason<'a>(status: &'a PlanStatus, type_: &str) -> &'a str {
    get(status, type_)
        .and_then(|c| c.reason.as_deref())
        .unwrap_or("")
}

/// The message of the condition of `type_`, or "".
pub fn message<'a>(status: &'a PlanStatus, type_: &str) -> &'a str {
    get(status, type_)
        .and_then(|c| c.message.as_deref())
        .unwrap_or("")
}

/// Adds the condition as `Unknown` if it is missing, as SUC does on the first reconcile.
pub fn ensure(status: &mut PlanStatus, type_: &str, now: &str, generation: Option<i64>) {
    if get(status, type_).is_none() {
        status.conditions.push(PlanCondition {
            type_: type_.to_string(),
            status: UNKNOWN.to_string(),
            last_update_time: Some(now.to_string()),
            last_transition_time: Some(now.to_string()),
            observed_generation: generation,
            ..Default::default()
        });
    }
}

/// Sets a condition. Like SUC, `lastUpdateTime` moves only when status or message change; unlike
/// SUC, `lastTransitionTime` moves when status changes and `observedGeneration` is kept current.
pub fn set(
    status: &mut PlanStatus,
    type_: &str,
    value: &str,
    reason: &str,
    message: &str,
    now: &str,
    generation: Option<i64>,
) {
    ensure(status, type_, now, generation);
    let Some(c) = status.conditions.iter_mut().find(|c| c.type_ == type_) else {
        return;
    };
    let message = (!message.is_empty()).then(|| message.to_string());
    let reason = (!reason.is_empty()).then(|| reason.to_string());
    if c.status != value {
        c.last_transition_time = Some(now.to_string());
    }
    if c.status != value || c.message != message {
        c.last_update_time = Some(now.to_string());
    }
    c.status = value.to_string();
    c.message = message;
    c.reason = reason;
    c.observed_generation = generation;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ensure_adds_unknown_once() {
        let mut s = PlanStatus::default();
        ensure(&mut s, COMPLETE, "t1", Some(1));
        ensure(&mut s, COMPLETE, "t2", Some(1));
        assert_eq!(s.conditions.len(), 1);
        assert_eq!(s.conditions[0].status, UNKNOWN);
        assert_eq!(s.conditions[0].last_update_time.as_deref(), Some("t1"));
    }

    #[test]
    fn times_move_only_on_real_changes() {
        let mut s = PlanStatus::default();
        set(&mut s, COMPLETE, FALSE, "SyncJob", "", "t1", Some(1));
        let c = get(&s, COMPLETE).cloned().expect("set");
        assert_eq!(c.last_transition_time.as_deref(), Some("t1"));
        // A new reason alone touches neither time (SUC's lastUpdateTime rule).
        set(&mut s, COMPLETE, FALSE, "Resolved", "", "t2", Some(1));
        let c = get(&s, COMPLETE).expect("set");
        assert_eq!(c.last_update_time.as_deref(), Some("t1"));
        assert_eq!(c.reason.as_deref(), Some("Resolved"));
        // A new message moves lastUpdateTime, not lastTransitionTime.
        set(&mut s, COMPLETE, FALSE, "JobFailed", "boom", "t3", Some(2));
        let c = get(&s, COMPLETE).expect("set");
        assert_eq!(c.last_update_time.as_deref(), Some("t3"));
        assert_eq!(c.last_transition_time.as_deref(), Some("t1"));
        assert_eq!(c.observed_generation, Some(2));
        // A new status moves both.
        set(&mut s, COMPLETE, TRUE, "Complete", "", "t4", Some(2));
        let c = get(&s, COMPLETE).expect("set");
        assert_eq!(c.last_transition_time.as_deref(), Some("t4"));
        assert_eq!(c.last_update_time.as_deref(), Some("t4"));
        assert!(c.message.is_none());
        assert!(is(&s, COMPLETE, TRUE));
        assert_eq!(reason(&s, COMPLETE), "Complete");
    }
}
