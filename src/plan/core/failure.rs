//! A Plan's failure policy: what a failed Job does to its node, and to the rollout.
//!
//! Without `spec.failurePolicy` a Plan does what SUC does (`Hold`): the node keeps its slot until
//! the Plan changes, the other nodes go on. Whatever the policy, a Job killed by its own node's
//! reboot (the boot ID changed while it ran: SUC #328) is recreated, a few times at most.

use std::time::Duration;

use k8s_openapi::api::core::v1::Taint;

use crate::common::duration::GoDuration;
use crate::node::NodeInfo;
use crate::plan::api::{FailureAction, FailurePolicySpec, Plan, PlanStatus};

/// The Plan annotation that resets its failures: each new value is acted on once (failed nodes
/// start over, quarantined nodes are released, a stopped rollout goes on).
pub const RESET_ANNOTATION: &str = crate::common::labels::RESET_FAILURES;
/// The label and taint key of a node a Plan quarantined: `quarantine.slipway.dev/<plan>=<hash>`.
pub const QUARANTINE_PREFIX: &str = "quarantine.slipway.dev/";
/// How many times a node's Job killed by the node's own reboot is recreated, per Plan generation.
pub const MAX_REBOOT_RETRIES: i32 = 3;

const DEFAULT_RETRIES: i32 = 3;
const DEFAULT_BACKOFF: Duration = Duration::from_secs(30);
const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// What a node's Job failure comes to once no retry is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Last {
    /// The node keeps its slot; the other nodes go on.
    Hold,
    /// The node keeps its slot; no new node starts.
    Stop,
    /// The node is labelled and tainted and leaves the rollout, up to a number of nodes; past
    /// that, as `Stop`.
    Quarantine,
}

impl Last {
    fn of(action: FailureAction) -> Last {
        match action {
            FailureAction::Hold | FailureAction::Retry => Last::Hold,
            FailureAction::Stop => Last::Stop,
            FailureAction::Quarantine => Last::Quarantine,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Last::Hold => "Hold",
            Last::Stop => "Stop",
            Last::Quarantine => "Quarantine",
        }
    }
}

/// `spec.failurePolicy`, with its defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailurePolicy {
    /// Failed Jobs recreated before `last` applies.
    pub retries: i32,
    /// The delay before the first retry; doubled for each next one, at most [`MAX_BACKOFF`].
    pub backoff: Duration,
    pub last: Last,
    pub max_quarantined: i32,
    /// Uncordon a node whose Job failed for good (the Plan's own cordon only).
    pub uncordon: bool,
}

impl Default for FailurePolicy {
    /// SUC's behaviour.
    fn default() -> Self {
        FailurePolicy {
            retries: 0,
            backoff: DEFAULT_BACKOFF,
            last: Last::Hold,
            max_quarantined: 1,
            uncordon: false,
        }
    }
}

/// The retries a node has used at the current Plan generation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attempts {
    /// Failed Jobs recreated by the policy.
    pub retries: i32,
    /// Jobs killed by the node's reboot and recreated.
    pub reboots: i32,
}

/// Why a failed Job is recreated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The policy retries it.
    Policy,
    /// The node rebooted while the Job ran.
    Reboot,
}

/// What a failed Job does to its node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Recreate the Job after `delay`; `attempts` counts this retry.
    Retry {
        delay: Duration,
        attempts: Attempts,
        cause: Cause,
    },
    /// Quarantine the node: its slot goes to the next node.
    Quarantine,
    /// The node keeps its slot, failed.
    Hold,
}

impl FailurePolicy {
    /// Reads `spec.failurePolicy`; the error names the field.
    pub fn of(spec: Option<&FailurePolicySpec>) -> Result<FailurePolicy, String> {
        let Some(spec) = spec else {
            return Ok(FailurePolicy::default());
        };
        let action = spec.action.unwrap_or(FailureAction::Hold);
        if spec.then == Some(FailureAction::Retry) {
            return Err("spec.failurePolicy.then must be Hold, Stop or Quarantine".into());
        }
        let retries = match action {
            FailureAction::Retry => spec.retries.unwrap_or(DEFAULT_RETRIES),
            _ => 0,
        };
        if retries < 0 {
            return Err("spec.failurePolicy.retries must not be negative".into());
        }
        let backoff = match spec.backoff.as_deref() {
            None => DEFAULT_BACKOFF,
            Some(text) => match text.parse::<GoDuration>().map(GoDuration::to_std) {
                Ok(Some(d)) if !d.is_zero() => d,
                Ok(_) => return Err("spec.failurePolicy.backoff must be positive".into()),
                Err(e) => return Err(format!("spec.failurePolicy.backoff is invalid: {e}")),
            },
        };
        let max_quarantined = spec.max_quarantined.unwrap_or(1);
        if max_quarantined < 0 {
            return Err("spec.failurePolicy.maxQuarantined must not be negative".into());
        }
        let last = match action {
            FailureAction::Retry => Last::of(spec.then.unwrap_or(FailureAction::Hold)),
            other => Last::of(other),
        };
        Ok(FailurePolicy {
            retries,
            backoff,
            last,
            max_quarantined,
            uncordon: spec.uncordon.unwrap_or(false),
        })
    }

    /// The delay before retry number `retry` (1 for the first).
    pub fn delay(&self, retry: i32) -> Duration {
        let doublings = u32::try_from(retry.saturating_sub(1)).unwrap_or(0).min(20);
        self.backoff
            .saturating_mul(1 << doublings)
            .min(MAX_BACKOFF.max(self.backoff))
    }

    /// What a failed Job does, given the retries used, whether the node rebooted while the Job
    /// ran, and whether the Plan may quarantine one more node.
    pub fn on_failure(&self, used: Attempts, rebooted: bool, quarantine_room: bool) -> Outcome {
        if rebooted && used.reboots < MAX_REBOOT_RETRIES {
            return Outcome::Retry {
                delay: Duration::ZERO,
                attempts: Attempts {
                    reboots: used.reboots + 1,
                    ..used
                },
                cause: Cause::Reboot,
            };
        }
        if used.retries < self.retries {
            let retries = used.retries + 1;
            return Outcome::Retry {
                delay: self.delay(retries),
                attempts: Attempts { retries, ..used },
                cause: Cause::Policy,
            };
        }
        match self.last {
            Last::Quarantine if quarantine_room => Outcome::Quarantine,
            _ => Outcome::Hold,
        }
    }

    /// A node held failed stops the rollout: the policy says `Stop`, or `Quarantine` had no room.
    pub fn held_failure_stops(&self) -> bool {
        self.last != Last::Hold
    }

    /// One line for people: `Retry 3 times (30s, doubling), then Stop; uncordon`.
    pub fn describe(&self) -> String {
        let mut text = if self.retries > 0 {
            format!(
                "Retry {} times ({}, doubling), then {}",
                self.retries,
                GoDuration::from_std(self.backoff),
                self.last.as_str()
            )
        } else {
            self.last.as_str().to_string()
        };
        if self.last == Last::Quarantine {
            let nodes = if self.max_quarantined == 1 {
                "node"
            } else {
                "nodes"
            };
            text.push_str(&format!(" (at most {} {nodes})", self.max_quarantined));
        }
        if self.uncordon {
            text.push_str("; uncordon");
        }
        text
    }
}

/// The key of the label and taint of a node quarantined by `plan`.
pub fn quarantine_key(plan: &str) -> String {
    format!("{QUARANTINE_PREFIX}{plan}")
}

/// The taint of a node quarantined by `plan` at `hash`: no new pod is scheduled there.
pub fn quarantine_taint(plan: &str, hash: &str) -> Taint {
    Taint {
        key: quarantine_key(plan),
        value: Some(hash.to_string()),
        effect: "NoSchedule".into(),
        time_added: None,
    }
}

/// The hash at which `plan` quarantined the node, if it did.
pub fn quarantined_at<'a>(node: &'a NodeInfo, plan: &str) -> Option<&'a str> {
    quarantined_by(node, &quarantine_key(plan))
}

/// [`quarantined_at`] with the Plan's [`quarantine_key`] made once: a decision asks it of every
/// node (formatting the key per node was a sixth of a decision's time at 100,000 nodes).
pub fn quarantined_by<'a>(node: &'a NodeInfo, key: &str) -> Option<&'a str> {
    node.labels.get(key).map(String::as_str)
}

/// The reset the Plan asks for and has not had yet: its annotation's new value.
pub fn reset_requested(plan: &Plan, status: &PlanStatus) -> Option<String> {
    let value = plan
        .metadata
        .annotations
        .as_ref()?
        .get(RESET_ANNOTATION)
        .filter(|v| !v.is_empty())?;
    (status.failures_reset.as_ref() != Some(value)).then(|| value.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(action: FailureAction) -> FailurePolicySpec {
        FailurePolicySpec {
            action: Some(action),
            ..Default::default()
        }
    }

    #[test]
    fn without_a_policy_a_failure_holds_the_node_as_suc_does() {
        let p = FailurePolicy::of(None).expect("policy");
        assert_eq!(p, FailurePolicy::default());
        assert_eq!(
            p.on_failure(Attempts::default(), false, true),
            Outcome::Hold
        );
        assert!(!p.held_failure_stops());
        assert_eq!(p.describe(), "Hold");
    }

    #[test]
    fn a_job_killed_by_its_nodes_reboot_is_retried_under_every_policy_three_times() {
        for action in [
            FailureAction::Hold,
            FailureAction::Stop,
            FailureAction::Quarantine,
            FailureAction::Retry,
        ] {
            let p = FailurePolicy::of(Some(&spec(action))).expect("policy");
            let mut used = Attempts::default();
            for n in 1..=MAX_REBOOT_RETRIES {
                let Outcome::Retry {
                    delay,
                    attempts,
                    cause,
                } = p.on_failure(used, true, true)
                else {
                    panic!("{action:?}: reboot retry {n}");
                };
                assert_eq!(
                    (delay, cause, attempts.reboots),
                    (Duration::ZERO, Cause::Reboot, n)
                );
                assert_eq!(attempts.retries, 0, "reboots use up no policy retry");
                used = attempts;
            }
            assert!(
                !matches!(
                    p.on_failure(used, true, true),
                    Outcome::Retry {
                        cause: Cause::Reboot,
                        ..
                    }
                ),
                "{action:?}: a fourth reboot is a failure"
            );
        }
    }

    #[test]
    fn retry_backs_off_doubling_then_applies_then() {
        let p = FailurePolicy::of(Some(&FailurePolicySpec {
            action: Some(FailureAction::Retry),
            retries: Some(3),
            backoff: Some("10s".into()),
            then: Some(FailureAction::Stop),
            ..Default::default()
        }))
        .expect("policy");
        let mut used = Attempts::default();
        let mut delays = vec![];
        while let Outcome::Retry {
            delay, attempts, ..
        } = p.on_failure(used, false, true)
        {
            delays.push(delay.as_secs());
            used = attempts;
        }
        assert_eq!(delays, [10, 20, 40]);
        assert_eq!(p.on_failure(used, false, true), Outcome::Hold);
        assert!(p.held_failure_stops());
        assert_eq!(p.describe(), "Retry 3 times (10s, doubling), then Stop");
    }

    #[test]
    fn the_backoff_is_capped_at_ten_minutes_unless_it_starts_above() {
        let p = FailurePolicy {
            backoff: Duration::from_secs(60),
            ..Default::default()
        };
        assert_eq!(p.delay(1), Duration::from_secs(60));
        assert_eq!(p.delay(5), Duration::from_secs(600));
        assert_eq!(p.delay(i32::MAX), Duration::from_secs(600));
        let slow = FailurePolicy {
            backoff: Duration::from_secs(3600),
            ..Default::default()
        };
        assert_eq!(slow.delay(3), Duration::from_secs(3600));
    }

    #[test]
    fn quarantine_takes_the_node_out_while_there_is_room_then_stops() {
        let p = FailurePolicy::of(Some(&FailurePolicySpec {
            action: Some(FailureAction::Quarantine),
            max_quarantined: Some(2),
            uncordon: Some(true),
            ..Default::default()
        }))
        .expect("policy");
        assert_eq!(
            p.on_failure(Attempts::default(), false, true),
            Outcome::Quarantine
        );
        assert_eq!(
            p.on_failure(Attempts::default(), false, false),
            Outcome::Hold
        );
        assert!(p.held_failure_stops());
        assert_eq!(p.describe(), "Quarantine (at most 2 nodes); uncordon");
    }

    #[test]
    fn invalid_policies_name_the_field() {
        let bad = [
            (
                FailurePolicySpec {
                    action: Some(FailureAction::Retry),
                    then: Some(FailureAction::Retry),
                    ..Default::default()
                },
                "spec.failurePolicy.then",
            ),
            (
                FailurePolicySpec {
                    action: Some(FailureAction::Retry),
                    retries: Some(-1),
                    ..Default::default()
                },
                "spec.failurePolicy.retries",
            ),
            (
                FailurePolicySpec {
                    backoff: Some("soon".into()),
                    ..Default::default()
                },
                "spec.failurePolicy.backoff",
            ),
            (
                FailurePolicySpec {
                    backoff: Some("0s".into()),
                    ..Default::default()
                },
                "spec.failurePolicy.backoff",
            ),
            (
                FailurePolicySpec {
                    max_quarantined: Some(-2),
                    ..Default::default()
                },
                "spec.failurePolicy.maxQuarantined",
            ),
        ];
        for (spec, field) in bad {
            let e = FailurePolicy::of(Some(&spec)).expect_err(field);
            assert!(e.starts_with(field), "{e}");
        }
    }

    #[test]
    fn a_reset_is_acted_on_once_per_value() {
        let mut plan = Plan::default();
        let mut status = PlanStatus::default();
        assert_eq!(reset_requested(&plan, &status), None);
        plan.metadata.annotations = Some([(RESET_ANNOTATION.into(), "1".into())].into());
        assert_eq!(reset_requested(&plan, &status).as_deref(), Some("1"));
        status.failures_reset = Some("1".into());
        assert_eq!(reset_requested(&plan, &status), None);
    }

    #[test]
    fn quarantine_label_and_taint_name_the_plan_and_the_hash() {
        let taint = quarantine_taint("k3s-server", "abc");
        assert_eq!(taint.key, "quarantine.slipway.dev/k3s-server");
        assert_eq!(taint.value.as_deref(), Some("abc"));
        let node = NodeInfo {
            labels: [(taint.key.clone(), "abc".into())].into(),
            ..Default::default()
        };
        assert_eq!(quarantined_at(&node, "k3s-server"), Some("abc"));
        assert_eq!(quarantined_at(&node, "other"), None);
    }
}
