//! The reboot hand-off as a node operation of its own: after something asked a node to reboot,
//! wait for a new boot ID and Ready, then (optionally) for a health gate's pods, within timeouts.
//!
//! It knows nothing about Plans or Jobs: a Plan runs it after a node's Job completed, and a
//! reboot asked for by the node itself can run it the same way. [`step`] is pure: the caller
//! persists the [`Handoff`] it returns and feeds it back with the next observation.

use std::time::Duration;

use jiff::Timestamp;

use super::reboot::HealthObservation;
use crate::common::duration::GoDuration;

/// How long to wait and what for.
#[derive(Debug, Clone, PartialEq)]
pub struct HandoffPolicy {
    /// From the start of the wait until a new boot ID and Ready.
    pub timeout: Duration,
    pub health_gate: Option<GatePolicy>,
}

/// The health gate: pods that must be Ready on the node after it rebooted.
#[derive(Debug, Clone, PartialEq)]
pub struct GatePolicy {
    /// From the reboot until the pods are Ready.
    pub timeout: Duration,
    /// Which pods, for messages: `app=x in namespace y`.
    pub pods: String,
}

/// Where a node is in its hand-off. Every variant remembers the boot the node rebooted from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handoff {
    /// Waiting for a boot ID other than `before`, and Ready.
    AwaitingBoot { before: String, since: Timestamp },
    /// Back on a new boot; waiting for the health gate's pods.
    AwaitingHealth { before: String, since: Timestamp },
    /// A timeout passed. The node keeps its slot, and is still watched: it may recover.
    TimedOut {
        stage: Stage,
        before: String,
        since: Timestamp,
        message: String,
    },
    /// Back, Ready and healthy: the node may be released.
    Passed,
}

/// Which wait timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Boot,
    Health,
}

impl Stage {
    /// The reason written to status and events.
    pub fn reason(self) -> &'static str {
        match self {
            Stage::Boot => "RebootTimedOut",
            Stage::Health => "HealthGateTimedOut",
        }
    }
}

/// What the controller sees of the node now.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    pub node: &'a str,
    pub ready: bool,
    pub boot_id: &'a str,
    /// The health gate's pods on the node; `None` when not looked at yet.
    pub health: Option<&'a HealthObservation>,
}

/// The result of one step: the new state, a timeout to report (once), and when to look again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub state: Handoff,
    /// Set on the step that first enters [`Handoff::TimedOut`].
    pub timed_out: Option<(&'static str, String)>,
    pub recheck_after: Option<Duration>,
}

impl Handoff {
    /// The start of a hand-off from a node that runs boot `before`.
    pub fn start(before: impl Into<String>, now: Timestamp) -> Handoff {
        Handoff::AwaitingBoot {
            before: before.into(),
            since: now,
        }
    }

    /// The boot the node rebooted from; `None` once passed.
    pub fn before(&self) -> Option<&str> {
        match self {
            Handoff::AwaitingBoot { before, .. }
            | Handoff::AwaitingHealth { before, .. }
            | Handoff::TimedOut { before, .. } => Some(before),
            Handoff::Passed => None,
        }
    }

    /// What the node waits for, for status messages.
    pub fn describe(&self, obs: &Observation<'_>, policy: &HandoffPolicy) -> String {
        match self {
            Handoff::AwaitingBoot { .. } => format!(
                "waiting for a new boot ID (now {}) and Ready, up to {}",
                obs.boot_id,
                GoDuration::from_std(policy.timeout)
            ),
            Handoff::AwaitingHealth { .. } => health_wait(obs, policy).unwrap_or_default(),
            Handoff::TimedOut { message, .. } => message.clone(),
            Handoff::Passed => String::new(),
        }
    }
}

/// One step of the hand-off.
pub fn step(
    state: &Handoff,
    obs: &Observation<'_>,
    policy: &HandoffPolicy,
    now: Timestamp,
) -> Step {
    let Some(before) = state.before() else {
        return settled(Handoff::Passed);
    };
    let rebooted = obs.ready && !obs.boot_id.is_empty() && obs.boot_id != before;
    if !rebooted {
        return await_boot(state, before, obs, policy, now);
    }
    match health_wait(obs, policy) {
        Some(waiting) => await_health(state, before, obs, policy, waiting, now),
        None => settled(Handoff::Passed),
    }
}

fn await_boot(
    state: &Handoff,
    before: &str,
    obs: &Observation<'_>,
    policy: &HandoffPolicy,
    now: Timestamp,
) -> Step {
    let since = match state {
        Handoff::AwaitingBoot { since, .. } => *since,
        Handoff::TimedOut {
            stage: Stage::Boot, ..
        } => return settled(state.clone()),
        // Not rebooted (again?) after having been back: the wait starts over.
        _ => now,
    };
    let waited = elapsed(since, now);
    if waited >= policy.timeout {
        let seen = if obs.boot_id == before {
            format!("boot ID still {before}")
        } else {
            "not Ready".to_string()
        };
        let message = format!(
            "Node {} did not come back from its reboot within {} ({seen})",
            obs.node,
            GoDuration::from_std(policy.timeout)
        );
        return timed_out(Stage::Boot, before, since, message);
    }
    Step {
        state: Handoff::AwaitingBoot {
            before: before.to_string(),
            since,
        },
        timed_out: None,
        recheck_after: Some((policy.timeout - waited).min(Duration::from_secs(30))),
    }
}

fn await_health(
    state: &Handoff,
    before: &str,
    obs: &Observation<'_>,
    policy: &HandoffPolicy,
    waiting: String,
    now: Timestamp,
) -> Step {
    let Some(gate) = &policy.health_gate else {
        return settled(Handoff::Passed);
    };
    let since = match state {
        Handoff::AwaitingHealth { since, .. } => *since,
        Handoff::TimedOut {
            stage: Stage::Health,
            ..
        } => return settled(state.clone()),
        _ => now,
    };
    let waited = elapsed(since, now);
    if waited >= gate.timeout {
        let message = format!(
            "Node {} rebooted but its health gate did not pass within {}: {waiting}",
            obs.node,
            GoDuration::from_std(gate.timeout)
        );
        return timed_out(Stage::Health, before, since, message);
    }
    Step {
        state: Handoff::AwaitingHealth {
            before: before.to_string(),
            since,
        },
        timed_out: None,
        recheck_after: Some(Duration::from_secs(5)),
    }
}

/// `Some(what the gate waits for)` while the gate's pods are not all Ready.
fn health_wait(obs: &Observation<'_>, policy: &HandoffPolicy) -> Option<String> {
    let gate = policy.health_gate.as_ref()?;
    match obs.health {
        Some(o) if o.healthy() => None,
        Some(o) => Some(format!(
            "waiting for {} of {} pods matching {} on node {} to be Ready: {}",
            o.not_ready.len(),
            o.total,
            gate.pods,
            obs.node,
            o.not_ready.join(", ")
        )),
        None => Some(format!(
            "waiting to check the pods matching {} on node {}",
            gate.pods, obs.node
        )),
    }
}

fn timed_out(stage: Stage, before: &str, since: Timestamp, message: String) -> Step {
    Step {
        state: Handoff::TimedOut {
            stage,
            before: before.to_string(),
            since,
            message: message.clone(),
        },
        timed_out: Some((stage.reason(), message)),
        recheck_after: None,
    }
}

fn settled(state: Handoff) -> Step {
    Step {
        state,
        timed_out: None,
        recheck_after: None,
    }
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    now.duration_since(since).try_into().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn policy(gate: bool) -> HandoffPolicy {
        HandoffPolicy {
            timeout: Duration::from_secs(600),
            health_gate: gate.then(|| GatePolicy {
                timeout: Duration::from_secs(300),
                pods: "app=db".into(),
            }),
        }
    }

    fn obs<'a>(
        boot: &'a str,
        ready: bool,
        health: Option<&'a HealthObservation>,
    ) -> Observation<'a> {
        Observation {
            node: "n1",
            ready,
            boot_id: boot,
            health,
        }
    }

    const T0: &str = "2026-11-22T10:00:00Z";

    #[test]
    fn waits_for_a_new_boot_and_ready() {
        let start = Handoff::start("b1", t(T0));
        let s = step(
            &start,
            &obs("b1", true, None),
            &policy(false),
            t("2026-11-22T10:01:00Z"),
        );
        assert_eq!(s.state, start);
        assert_eq!(s.recheck_after, Some(Duration::from_secs(30)));
        // A new boot that is not Ready yet is not back.
        let s = step(
            &start,
            &obs("b2", false, None),
            &policy(false),
            t("2026-11-22T10:01:00Z"),
        );
        assert_eq!(s.state, start);
        let s = step(
            &start,
            &obs("b2", true, None),
            &policy(false),
            t("2026-11-22T10:01:00Z"),
        );
        assert_eq!(s.state, Handoff::Passed);
    }

    #[test]
    fn an_empty_boot_id_is_never_a_reboot() {
        let start = Handoff::start("b1", t(T0));
        let s = step(&start, &obs("", true, None), &policy(false), t(T0));
        assert!(matches!(s.state, Handoff::AwaitingBoot { .. }));
    }

    #[test]
    fn the_boot_timeout_is_reported_once_and_the_node_can_still_recover() {
        let start = Handoff::start("b1", t(T0));
        let s = step(
            &start,
            &obs("b1", true, None),
            &policy(false),
            t("2026-11-22T10:10:00Z"),
        );
        let (reason, message) = s.timed_out.clone().expect("timed out");
        assert_eq!(reason, "RebootTimedOut");
        assert!(
            message.contains(
                "Node n1 did not come back from its reboot within 10m0s (boot ID still b1)"
            ),
            "{message}"
        );
        let again = step(
            &s.state,
            &obs("b1", true, None),
            &policy(false),
            t("2026-11-22T11:00:00Z"),
        );
        assert_eq!(again.state, s.state);
        assert!(again.timed_out.is_none());
        let back = step(
            &s.state,
            &obs("b2", true, None),
            &policy(false),
            t("2026-11-22T11:00:00Z"),
        );
        assert_eq!(back.state, Handoff::Passed);
    }

    #[test]
    fn a_new_boot_that_is_not_ready_times_out_as_not_ready() {
        let start = Handoff::start("b1", t(T0));
        let s = step(
            &start,
            &obs("b2", false, None),
            &policy(false),
            t("2026-11-22T10:10:00Z"),
        );
        assert!(s.timed_out.expect("timed out").1.ends_with("(not Ready)"));
    }

    #[test]
    fn the_health_gate_waits_for_ready_pods_and_names_them() {
        let start = Handoff::start("b1", t(T0));
        let unhealthy = HealthObservation {
            not_ready: vec!["db/db-0".into()],
            total: 2,
        };
        let s = step(
            &start,
            &obs("b2", true, Some(&unhealthy)),
            &policy(true),
            t("2026-11-22T10:02:00Z"),
        );
        assert_eq!(
            s.state,
            Handoff::AwaitingHealth {
                before: "b1".into(),
                since: t("2026-11-22T10:02:00Z")
            }
        );
        assert_eq!(
            s.state
                .describe(&obs("b2", true, Some(&unhealthy)), &policy(true)),
            "waiting for 1 of 2 pods matching app=db on node n1 to be Ready: db/db-0"
        );
        // Not looked at yet: still waiting.
        let s2 = step(
            &s.state,
            &obs("b2", true, None),
            &policy(true),
            t("2026-11-22T10:03:00Z"),
        );
        assert_eq!(s2.state, s.state);
        let healthy = HealthObservation {
            not_ready: vec![],
            total: 2,
        };
        let s3 = step(
            &s.state,
            &obs("b2", true, Some(&healthy)),
            &policy(true),
            t("2026-11-22T10:03:00Z"),
        );
        assert_eq!(s3.state, Handoff::Passed);
    }

    #[test]
    fn the_health_timeout_counts_from_the_reboot_and_can_recover() {
        let waiting = Handoff::AwaitingHealth {
            before: "b1".into(),
            since: t(T0),
        };
        let unhealthy = HealthObservation {
            not_ready: vec!["db/db-0".into()],
            total: 1,
        };
        let s = step(
            &waiting,
            &obs("b2", true, Some(&unhealthy)),
            &policy(true),
            t("2026-11-22T10:05:00Z"),
        );
        let (reason, message) = s.timed_out.clone().expect("timed out");
        assert_eq!(reason, "HealthGateTimedOut");
        assert!(
            message.starts_with(
                "Node n1 rebooted but its health gate did not pass within 5m0s: waiting for 1 of 1"
            ),
            "{message}"
        );
        let healthy = HealthObservation::default();
        let back = step(
            &s.state,
            &obs("b2", true, Some(&healthy)),
            &policy(true),
            t("2026-11-22T10:30:00Z"),
        );
        assert_eq!(back.state, Handoff::Passed);
    }

    #[test]
    fn passed_stays_passed() {
        let s = step(
            &Handoff::Passed,
            &obs("b1", false, None),
            &policy(true),
            t(T0),
        );
        assert_eq!(s.state, Handoff::Passed);
    }
}
