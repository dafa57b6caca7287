//! Plan conditions, as SUC names and updates them, plus the transition times SUC never sets, and
//! the `Ready`, `Reconciling` and `Stalled` conditions that kstatus (Flux, Fleet, `kubectl wait`,
//! and the Argo CD health check in gitops/argocd) reads, derived from SUC's. What each standing
//! means to those tools, and why, is docs/gitops.md.

use crate::common::bounded::{CONDITION_MESSAGE_BYTES, cut};
use crate::plan::api::{PlanCondition, PlanStatus};

pub const COMPLETE: &str = "Complete";
pub const VALIDATED: &str = "Validated";
pub const LATEST_RESOLVED: &str = "LatestResolved";
/// kstatus: `True` once every selected node is done, or while the rollout is held on purpose
/// ([`DEFERRED_REASONS`]).
pub const READY: &str = "Ready";
/// kstatus: `True` while the rollout is under way or waits for something that will come.
pub const RECONCILING: &str = "Reconciling";
/// kstatus: `True` while the rollout cannot go on without someone changing something.
pub const STALLED: &str = "Stalled";

/// `Complete=False` reasons that need someone to act (change the Plan, reset its failures, fix a
/// node or a check): the rollout is stalled, not under way.
const STALLED_REASONS: [&str; 7] = [
    "JobFailed",
    "RebootTimedOut",
    "HealthGateTimedOut",
    "RolloutStopped",
    "Quarantined",
    "HealthCheckTimedOut",
    "NoConcurrency",
];

/// `Complete=False` reasons of a rollout held on purpose, by its author or an operator: a closed
/// window (SUC's `Waiting`), a halted DisruptionBudget, a DisruptionBudget's schedule that allows
/// no node now (a freeze), a channel version younger than `spec.minVersionAge`. It goes on by itself and nothing is wrong, so kstatus reads it `Ready`
/// (the reason and message saying what it waits for): a Flux `wait` over a Plan whose window opens
/// in three days must not fail every reconcile until then. Argo CD's health check shows these
/// `Suspended`.
pub const DEFERRED_REASONS: [&str; 4] = ["Waiting", "Halted", "Frozen", "VersionTooNew"];

pub const TRUE: &str = "True";
pub const FALSE: &str = "False";
pub const UNKNOWN: &str = "Unknown";

/// `LatestResolved`'s reason when the Plan has neither version nor channel (SUC's), unlike a
/// channel that did not answer (`ResolveFailed`).
pub const UNRESOLVABLE: &str = "Error";

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

/// When a decision writes the Plan's conditions, and the generation of the Plan it decided on:
/// every condition it writes carries both.
#[derive(Debug, Clone, Copy)]
pub struct Stamp<'a> {
    pub now: &'a str,
    pub generation: Option<i64>,
}

impl<'a> Stamp<'a> {
    pub fn new(now: &'a str, generation: Option<i64>) -> Stamp<'a> {
        Stamp { now, generation }
    }
}

/// Adds the condition as `Unknown` if it is missing, as SUC does on the first reconcile.
pub fn ensure(status: &mut PlanStatus, type_: &str, at: Stamp<'_>) {
    let Stamp { now, generation } = at;
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
    at: Stamp<'_>,
    type_: &str,
    value: &str,
    reason: &str,
    message: &str,
) {
    ensure(status, type_, at);
    let Stamp { now, generation } = at;
    let Some(c) = status.conditions.iter_mut().find(|c| c.type_ == type_) else {
        return;
    };
    let message = (!message.is_empty()).then(|| cut(message, CONDITION_MESSAGE_BYTES).into_owned());
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

/// Sets `Ready`, `Reconciling` and `Stalled` from `Validated`, `LatestResolved` and `Complete`, as
/// kstatus reads them: an invalid Plan, one with neither version nor channel, or a rollout stopped
/// by a failure is `Stalled`, a finished one or one held on purpose `Ready`, anything else
/// `Reconciling` (a channel that does not answer may answer later); `Ready=False` carries the same
/// reason and message.
pub fn kstatus(status: &mut PlanStatus, at: Stamp<'_>) {
    let (state, reason, message) = if is(status, VALIDATED, FALSE) {
        let reason = match reason(status, VALIDATED) {
            "" => "Invalid",
            r => r,
        };
        (
            STALLED,
            reason.to_string(),
            message(status, VALIDATED).to_string(),
        )
    } else if is(status, LATEST_RESOLVED, FALSE) && reason(status, LATEST_RESOLVED) == UNRESOLVABLE
    {
        (
            STALLED,
            "Unresolvable".to_string(),
            message(status, LATEST_RESOLVED).to_string(),
        )
    } else if is(status, COMPLETE, TRUE) {
        (
            READY,
            "Complete".to_string(),
            message(status, COMPLETE).to_string(),
        )
    } else if let Some((reason, message)) = deferred(status) {
        (READY, reason.to_string(), message.to_string())
    } else {
        let why = match reason(status, COMPLETE) {
            "" => "Reconciling",
            r => r,
        };
        let state = match STALLED_REASONS.contains(&why) {
            true => STALLED,
            false => RECONCILING,
        };
        (
            state,
            why.to_string(),
            message(status, COMPLETE).to_string(),
        )
    };
    for type_ in [READY, RECONCILING, STALLED] {
        let value = if type_ == state { TRUE } else { FALSE };
        let (reason, message) = match type_ == state || type_ == READY {
            true => (reason.as_str(), message.as_str()),
            false => ("", ""),
        };
        set(status, at, type_, value, reason, message);
    }
}

/// What a rollout held on purpose waits for (reason and message), if it is held so.
fn deferred(status: &PlanStatus) -> Option<(&str, &str)> {
    let why = reason(status, COMPLETE);
    DEFERRED_REASONS
        .contains(&why)
        .then(|| (why, message(status, COMPLETE)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(now: &str, generation: i64) -> Stamp<'_> {
        Stamp::new(now, Some(generation))
    }

    #[test]
    fn ensure_adds_unknown_once() {
        let mut s = PlanStatus::default();
        ensure(&mut s, COMPLETE, at("t1", 1));
        ensure(&mut s, COMPLETE, at("t2", 1));
        assert_eq!(s.conditions.len(), 1);
        assert_eq!(s.conditions[0].status, UNKNOWN);
        assert_eq!(s.conditions[0].last_update_time.as_deref(), Some("t1"));
    }

    #[test]
    fn times_move_only_on_real_changes() {
        let mut s = PlanStatus::default();
        set(&mut s, at("t1", 1), COMPLETE, FALSE, "SyncJob", "");
        let c = get(&s, COMPLETE).cloned().expect("set");
        assert_eq!(c.last_transition_time.as_deref(), Some("t1"));
        // A new reason alone touches neither time (SUC's lastUpdateTime rule).
        set(&mut s, at("t2", 1), COMPLETE, FALSE, "Resolved", "");
        let c = get(&s, COMPLETE).expect("set");
        assert_eq!(c.last_update_time.as_deref(), Some("t1"));
        assert_eq!(c.reason.as_deref(), Some("Resolved"));
        // A new message moves lastUpdateTime, not lastTransitionTime.
        set(&mut s, at("t3", 2), COMPLETE, FALSE, "JobFailed", "boom");
        let c = get(&s, COMPLETE).expect("set");
        assert_eq!(c.last_update_time.as_deref(), Some("t3"));
        assert_eq!(c.last_transition_time.as_deref(), Some("t1"));
        assert_eq!(c.observed_generation, Some(2));
        // A new status moves both.
        set(&mut s, at("t4", 2), COMPLETE, TRUE, "Complete", "");
        let c = get(&s, COMPLETE).expect("set");
        assert_eq!(c.last_transition_time.as_deref(), Some("t4"));
        assert_eq!(c.last_update_time.as_deref(), Some("t4"));
        assert!(c.message.is_none());
        assert!(is(&s, COMPLETE, TRUE));
        assert_eq!(reason(&s, COMPLETE), "Complete");
    }

    /// (Ready, Reconciling, Stalled) and Ready's reason after [`kstatus`].
    fn kstatus_of(s: &PlanStatus) -> (&str, &str, &str, &str) {
        let of = |t| get(s, t).map_or("-", |c| c.status.as_str());
        (of(READY), of(RECONCILING), of(STALLED), reason(s, READY))
    }

    #[test]
    fn kstatus_follows_validated_and_complete() {
        let cases = [
            (TRUE, TRUE, "Complete", (TRUE, FALSE, FALSE, "Complete")),
            (TRUE, FALSE, "SyncJob", (FALSE, TRUE, FALSE, "SyncJob")),
            (TRUE, FALSE, "Retrying", (FALSE, TRUE, FALSE, "Retrying")),
            (
                TRUE,
                FALSE,
                "WaitingForNodes",
                (FALSE, TRUE, FALSE, "WaitingForNodes"),
            ),
            (TRUE, FALSE, "JobFailed", (FALSE, FALSE, TRUE, "JobFailed")),
            (
                TRUE,
                FALSE,
                "RolloutStopped",
                (FALSE, FALSE, TRUE, "RolloutStopped"),
            ),
            (
                TRUE,
                FALSE,
                "NoConcurrency",
                (FALSE, FALSE, TRUE, "NoConcurrency"),
            ),
            (TRUE, UNKNOWN, "", (FALSE, TRUE, FALSE, "Reconciling")),
            (TRUE, FALSE, "Waiting", (TRUE, FALSE, FALSE, "Waiting")),
            (TRUE, FALSE, "Halted", (TRUE, FALSE, FALSE, "Halted")),
            (TRUE, FALSE, "Frozen", (TRUE, FALSE, FALSE, "Frozen")),
            (
                TRUE,
                FALSE,
                "VersionTooNew",
                (TRUE, FALSE, FALSE, "VersionTooNew"),
            ),
            (
                TRUE,
                FALSE,
                "DisruptionBudget",
                (FALSE, TRUE, FALSE, "DisruptionBudget"),
            ),
            (
                FALSE,
                FALSE,
                "NotReady",
                (FALSE, FALSE, TRUE, "SpecInvalid"),
            ),
        ];
        for (validated, complete, why, want) in cases {
            let mut s = PlanStatus::default();
            let invalid = if validated == FALSE {
                "SpecInvalid"
            } else {
                ""
            };
            set(
                &mut s,
                at("t1", 3),
                VALIDATED,
                validated,
                invalid,
                "spec.x: bad",
            );
            set(&mut s, at("t1", 3), COMPLETE, complete, why, "the message");
            kstatus(&mut s, at("t1", 3));
            assert_eq!(kstatus_of(&s), want, "{validated} {complete} {why}");
            assert!(
                (s.conditions.iter()).all(|c| c.observed_generation == Some(3)),
                "every condition names the generation"
            );
        }
    }

    #[test]
    fn no_version_and_no_channel_is_stalled_and_a_silent_channel_is_not() {
        let mut s = PlanStatus::default();
        set(&mut s, at("t1", 1), VALIDATED, TRUE, "PlanIsValid", "");
        set(
            &mut s,
            at("t1", 1),
            LATEST_RESOLVED,
            FALSE,
            UNRESOLVABLE,
            "missing",
        );
        set(
            &mut s,
            at("t1", 1),
            COMPLETE,
            FALSE,
            "NotReady",
            "not resolved",
        );
        kstatus(&mut s, at("t1", 1));
        assert_eq!(kstatus_of(&s), (FALSE, FALSE, TRUE, "Unresolvable"));
        assert_eq!(message(&s, STALLED), "missing");
        set(
            &mut s,
            at("t2", 2),
            LATEST_RESOLVED,
            FALSE,
            "ResolveFailed",
            "503",
        );
        kstatus(&mut s, at("t2", 2));
        assert_eq!(kstatus_of(&s), (FALSE, TRUE, FALSE, "NotReady"));
    }

    #[test]
    fn kstatus_moves_its_transition_times_only_on_a_change() {
        let mut s = PlanStatus::default();
        set(&mut s, at("t1", 1), COMPLETE, FALSE, "SyncJob", "");
        kstatus(&mut s, at("t1", 1));
        set(&mut s, at("t2", 1), COMPLETE, FALSE, "SyncJob", "");
        kstatus(&mut s, at("t2", 1));
        let since = |s: &PlanStatus, t| get(s, t).and_then(|c| c.last_transition_time.clone());
        assert_eq!(since(&s, RECONCILING).as_deref(), Some("t1"));
        set(&mut s, at("t3", 1), COMPLETE, TRUE, "Complete", "");
        kstatus(&mut s, at("t3", 1));
        assert_eq!(since(&s, READY).as_deref(), Some("t3"));
        assert_eq!(since(&s, RECONCILING).as_deref(), Some("t3"));
        assert_eq!(kstatus_of(&s), (TRUE, FALSE, FALSE, "Complete"));
    }
}
