//! What holds a whole Plan in one decision (its window, a failure that stopped it, a health check,
//! a Plan it goes after, the pull of its images, its pre hook, the budgets), and the one set of
//! words for each. [`Gates::read`] is the decision's phase between the nodes under way and the new
//! ones; the `Complete` condition ([`super::waits`], [`super::report`]) and `slipway explain` both
//! say why from here.

use super::MSG_WAITING_FOR_WINDOW;
use super::decision::Rollout;
use super::facts::{Facts, Steps};
use super::node_state::NodeState;
use crate::common::check::{self, Blocking};
use crate::common::window::TimeWindow;
use crate::node::NodeInfo;
use crate::node::budget::Refusal;
use crate::plan::api::PlanStatus;

/// What the report reads besides the nodes' steps: the gates, and what starting nodes met.
pub(super) struct Situation<'a> {
    /// What held the whole Plan before its nodes started.
    pub gates: &'a Gates,
    /// The nodes left to upgrade.
    pub eligible: &'a [&'a NodeInfo],
    /// Hostnames of the nodes the failure policy quarantined at this hash.
    pub quarantined: &'a [&'a str],
    /// The pre hook, while it keeps new nodes from starting.
    pub pre_hook: Option<&'a crate::plan::api::HookStatus>,
    /// The pull of the Jobs' images, while it keeps new nodes from starting.
    pub pulling: Option<&'a crate::node::prepull::PrePullStatus>,
    /// Nodes a DisruptionBudget did not let start, in the Plan's order.
    pub refused: &'a [(&'a NodeInfo, Refusal)],
}

/// What holds the whole Plan before its new nodes start (a decision's phase after the nodes under
/// way stepped): read once, then the start of new nodes, the next batch, the report and `explain`
/// read it.
pub(super) struct Gates {
    /// The window, when it keeps the rollout from starting.
    pub window: Option<TimeWindow>,
    /// A failed node stops the rollout (failure policy `Stop`, or `Quarantine` out of room).
    pub stopped: bool,
    /// The health checks, evaluated; `blocking` when one keeps new nodes from starting.
    pub check: check::Gate,
    /// A Plan of `spec.after` that keeps new nodes from starting.
    pub stage: Option<super::promotion::Waiting>,
}

impl Gates {
    /// The gates, once the nodes under way have stepped (a failed one may stop the rollout). The
    /// checks' status is written and failing checks are read again soon.
    pub(super) fn read(
        facts: &Facts<'_>,
        old: &PlanStatus,
        steps: &Steps<'_>,
        st: &mut PlanStatus,
        out: &mut Rollout,
    ) -> Gates {
        let settings = facts.settings;
        let window = (settings.window.as_ref())
            .filter(|w| old.applying.is_empty() && !w.contains(facts.now))
            .cloned();
        let stopped = facts.ctx.failure.held_failure_stops()
            && (steps.values()).any(|(_, s, _)| matches!(s, NodeState::Failed { .. }));
        let stage = (facts.input.stages).and_then(|read| {
            super::promotion::gate(&settings.after, read, &facts.version, facts.now)
        });
        Gates {
            window,
            stopped,
            check: health_gate(facts, old, st, out),
            stage,
        }
    }

    /// Nothing holds new nodes.
    pub(super) fn open(&self) -> bool {
        self.window.is_none()
            && !self.stopped
            && self.check.blocking.is_none()
            && self.stage.is_none()
    }

    /// The health check that keeps new nodes from starting, if one does.
    pub(super) fn blocking(&self) -> Option<&Blocking> {
        self.check.blocking.as_ref()
    }
}

/// The health checks of the Plan, evaluated on what the shell read. A timed-out check stops the
/// rollout when the failure policy ends in Stop or Quarantine (there is no node to quarantine).
fn health_gate(
    facts: &Facts<'_>,
    old: &PlanStatus,
    st: &mut PlanStatus,
    out: &mut Rollout,
) -> check::Gate {
    let plan = facts.input.plan;
    let cx = check::GateContext {
        old: &old.health_checks,
        now: facts.now,
        stops: facts.ctx.failure.last != super::failure::Last::Hold,
        fresh: facts.ctx.reset || old.observed_generation != plan.metadata.generation,
        field: "spec.healthChecks",
    };
    let gate = check::gate(facts.settings.health_checks, facts.input.checks, &cx);
    st.health_checks = gate.status.clone();
    if let Some(after) = gate.recheck {
        out.requeue(after);
    }
    gate
}

/// The reason of `Complete=False` while a health check keeps new nodes from starting.
pub const HEALTH_CHECK_FAILING: &str = "HealthCheckFailing";

/// The reason once the check failed past its timeout (under a failure policy that holds).
pub const HEALTH_CHECK_TIMED_OUT: &str = "HealthCheckTimedOut";

/// What an operator does to go on after a failure stopped the rollout.
pub(super) fn how_to_go_on(facts: &Facts<'_>) -> String {
    format!(
        "change the Plan, or reset its failures with `kubectl annotate plan {} {}=<new value> --overwrite`",
        facts.name,
        super::failure::RESET_ANNOTATION
    )
}

/// The reason of `Complete=False` once a failure stopped the rollout.
pub const STOPPED: &str = "RolloutStopped";

/// The reason of `Complete=False` when every node is done but those quarantined.
pub const QUARANTINED: &str = "Quarantined";

/// The reason of `Complete=False` while a node's failed Job waits to be recreated.
pub const RETRYING: &str = "Retrying";

/// The `Complete` reason and message while the pull of the images keeps nodes from starting.
pub(super) fn pull_message(pull: &crate::node::prepull::PrePullStatus) -> (&'static str, String) {
    use crate::node::prepull::{PRE_PULL_FAILED, PRE_PULLING, PrePullPhase};
    let what = pull.message.as_deref().unwrap_or_default();
    match pull.phase {
        PrePullPhase::Failed => (
            PRE_PULL_FAILED,
            format!(
                "{what}; no node is touched until every node has the images \
                 (spec.disruption.prePull): the kubelet tries again, or change the Plan's image"
            ),
        ),
        _ => (
            PRE_PULLING,
            format!("{what}; the first node starts once every node has them"),
        ),
    }
}

/// The `Complete` reason and message while the pre hook keeps nodes from starting (its Job's
/// events say when it starts and how it ends).
pub(super) fn pre_hook_message(
    facts: &Facts<'_>,
    hook: &crate::plan::api::HookStatus,
) -> (&'static str, String) {
    use super::hooks::{PRE_HOOK, PRE_HOOK_FAILED};
    match hook.phase {
        crate::plan::api::HookPhase::Failed => (
            PRE_HOOK_FAILED,
            format!(
                "the pre hook (Job {}) failed: {}; no node is touched: {}",
                hook.job,
                hook.message.as_deref().unwrap_or_default(),
                how_to_go_on(facts)
            ),
        ),
        _ => (
            PRE_HOOK,
            format!(
                "waiting for the pre hook (Job {}) before the first node",
                hook.job
            ),
        ),
    }
}

/// The `Complete` reason and message while a health check holds the next nodes.
pub(super) fn check_message(facts: &Facts<'_>, check: &Blocking) -> (&'static str, String) {
    let what = format!(
        "waiting: health check {} fails: {}",
        check.check, check.message
    );
    if check.stopped {
        let message = format!(
            "health check {} timed out ({}); rollout stopped by failurePolicy {}: {}",
            check.check,
            check.message,
            facts.ctx.failure.last.as_str(),
            how_to_go_on(facts)
        );
        (STOPPED, message)
    } else if check.timed_out {
        (HEALTH_CHECK_TIMED_OUT, format!("{what} (past its timeout)"))
    } else {
        (HEALTH_CHECK_FAILING, what)
    }
}

/// `waiting: node a: <why> (and N more nodes)`; empty when no node was refused.
pub(super) fn refused_message(refused: &[(&NodeInfo, Refusal)]) -> String {
    let Some((node, why)) = refused.first() else {
        return String::new();
    };
    let first = format!("waiting: node {}: {why}", node.hostname());
    match refused.len() {
        1 => first,
        n => format!("{first} (and {} more nodes)", n - 1),
    }
}

/// What keeps every node of the Plan from starting, if something does.
pub(super) fn whole_plan_wait(
    facts: &Facts<'_>,
    situation: &Situation<'_>,
) -> Option<(&'static str, String, Option<jiff::Timestamp>)> {
    if let Some(w) = &situation.gates.window {
        let opens = w.next_opening(facts.now);
        return Some(("Waiting", MSG_WAITING_FOR_WINDOW.to_string(), opens));
    }
    if situation.gates.stopped {
        let why = format!("a failed node stopped the rollout: {}", how_to_go_on(facts));
        return Some((STOPPED, why, None));
    }
    if let Some(check) = situation.gates.blocking() {
        let (reason, message) = check_message(facts, check);
        return Some((reason, message, None));
    }
    if let Some(stage) = &situation.gates.stage {
        let reason = super::promotion::WAITING_FOR_PLAN;
        return Some((reason, stage.message.clone(), stage.until));
    }
    if let Some(pull) = situation.pulling {
        let (reason, message) = pull_message(pull);
        return Some((reason, message, None));
    }
    let hook = situation.pre_hook?;
    let (reason, message) = pre_hook_message(facts, hook);
    Some((reason, message, None))
}
