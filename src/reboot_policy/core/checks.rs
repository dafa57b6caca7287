//! A RebootPolicy's health checks: evaluated on what the shell read (only while a node wants a
//! reboot), they hold every new reboot while one fails. A policy has no failure policy: a check
//! past its timeout keeps holding, with a warning.

use std::time::Duration;

use jiff::Timestamp;

use crate::common::check::{self, CheckRead, GateContext, HealthCheckStatus};
use crate::common::decision::Event;
use crate::reboot_policy::api::RebootPolicy;

use super::PolicySpec;

/// What the checks decide for one reconcile.
#[derive(Debug, Default)]
pub(super) struct Checked {
    pub status: Vec<HealthCheckStatus>,
    /// The reason and message that hold every new reboot.
    pub hold: Option<(&'static str, String)>,
    pub events: Vec<Event>,
    pub recheck: Option<Duration>,
}

/// The reason of a node held by a failing check.
pub const HEALTH_CHECK_FAILING: &str = "HealthCheckFailing";
/// The reason once that check failed past its timeout.
pub const HEALTH_CHECK_TIMED_OUT: &str = "HealthCheckTimedOut";

/// Evaluates the checks; `reads` is `None` when they were not read (no node waits): the last
/// status stands.
pub(super) fn checked(
    policy: &RebootPolicy,
    spec: &PolicySpec,
    reads: Option<&[CheckRead]>,
    now: Timestamp,
) -> Checked {
    let previous = policy.status.as_ref();
    let old = previous
        .map(|s| s.health_checks.as_slice())
        .unwrap_or_default();
    if spec.health_checks.is_empty() {
        return Checked::default();
    }
    let Some(reads) = reads else {
        return Checked {
            status: old.to_vec(),
            ..Checked::default()
        };
    };
    let cx = GateContext {
        old,
        now,
        stops: false,
        fresh: previous.and_then(|s| s.observed_generation) != policy.metadata.generation,
        field: "spec.healthChecks",
    };
    let gate = check::gate(&spec.health_checks, reads, &cx);
    let mut out = Checked {
        recheck: gate.recheck,
        ..Checked::default()
    };
    if let Some(b) = &gate.blocking {
        let before = old.iter().find(|s| s.name == b.check);
        let message = format!("health check {} fails: {}", b.check, b.message);
        if b.timed_out {
            let message = format!("{message} (past its timeout)");
            if !before.is_some_and(|s| s.timed_out) {
                out.events
                    .push(Event::warning(HEALTH_CHECK_TIMED_OUT, message.clone()));
            }
            out.hold = Some((HEALTH_CHECK_TIMED_OUT, message));
        } else {
            if before.is_none_or(|s| s.healthy) {
                let text = format!("{message}; no node starts its reboot");
                out.events.push(Event::normal(HEALTH_CHECK_FAILING, text));
            }
            out.hold = Some((HEALTH_CHECK_FAILING, message));
        }
    }
    out.status = gate.status;
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::common::check::HealthCheckSpec;
    use crate::reboot_policy::api::{RebootPolicySpec, RebootPolicyStatus};
    use crate::reboot_policy::core::read_spec;

    fn policy(status: Option<RebootPolicyStatus>) -> (RebootPolicy, PolicySpec) {
        let spec = RebootPolicySpec {
            health_checks: Some(vec![HealthCheckSpec {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("ops".into()),
                name: Some("gate".into()),
                expr: "data.state == 'ok'".into(),
                timeout: Some("1m".into()),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let mut p = RebootPolicy::new("nightly", spec);
        p.metadata.generation = Some(1);
        p.status = status;
        let read = read_spec(&p.spec, "busybox").expect("a valid spec");
        (p, read)
    }

    fn read(state: &str) -> Vec<CheckRead> {
        vec![CheckRead::Objects(vec![json!({
            "metadata": {"name": "gate", "namespace": "ops"}, "data": {"state": state}
        })])]
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).expect("a time")
    }

    fn status(previous: &Checked) -> Option<RebootPolicyStatus> {
        Some(RebootPolicyStatus {
            observed_generation: Some(1),
            health_checks: previous.status.clone(),
            ..Default::default()
        })
    }

    #[test]
    fn a_failing_check_holds_reboots_says_so_once_and_warns_past_its_timeout() {
        let (p, spec) = policy(None);
        let first = checked(&p, &spec, Some(&read("degraded")), at(0));
        let (reason, message) = first.hold.clone().expect("held");
        assert_eq!(reason, HEALTH_CHECK_FAILING);
        assert!(message.contains("ConfigMap ops/gate"), "{message}");
        assert_eq!(first.events.len(), 1);
        assert_eq!(first.recheck, Some(check::RECHECK));
        let (p, spec) = policy(status(&first));
        let again = checked(&p, &spec, Some(&read("degraded")), at(10));
        assert!(again.events.is_empty(), "said once");
        let (p, spec) = policy(status(&again));
        let late = checked(&p, &spec, Some(&read("degraded")), at(61));
        assert_eq!(late.hold.clone().expect("held").0, HEALTH_CHECK_TIMED_OUT);
        assert_eq!(late.events.len(), 1);
        let (p, spec) = policy(status(&late));
        let ok = checked(&p, &spec, Some(&read("ok")), at(70));
        assert_eq!(
            ok.hold, None,
            "no failure policy: the check holding again lets reboots go on"
        );
        assert!(ok.status[0].healthy);
    }

    #[test]
    fn checks_not_read_keep_their_last_status_and_hold_nothing() {
        let (p, spec) = policy(None);
        let first = checked(&p, &spec, Some(&read("degraded")), at(0));
        let (p, spec) = policy(status(&first));
        let unread = checked(&p, &spec, None, at(5));
        assert_eq!(unread.hold, None);
        assert_eq!(unread.status, first.status);
        assert!(unread.events.is_empty());
    }
}
