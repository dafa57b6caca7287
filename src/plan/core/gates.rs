//! What holds a whole Plan in one decision (its window, a failure that stopped it, a health check,
//! a Plan it goes after, the pull of its images, its pre hook). [`Gates::read`] is the decision's
//! phase between the nodes under way and the new ones; [`Situation::holds`] lists what holds the
//! Plan in one order, which the `Complete` condition and `slipway explain` both read
//! ([`super::report`] says it in words).

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
    /// Candidates the decision left out, settled at its hash: they count as upgraded.
    pub settled: Option<&'a super::settled::SettledNodes>,
}

/// One thing that holds every new node of the Plan.
pub(super) enum Held<'a> {
    Window(&'a TimeWindow),
    /// A failed node stopped the rollout.
    Stopped,
    Check(&'a Blocking),
    Stage(&'a super::promotion::Waiting),
    Pulling(&'a crate::node::prepull::PrePullStatus),
    PreHook(&'a crate::plan::api::HookStatus),
}

impl Situation<'_> {
    /// What holds the new nodes, in the order it is reported: the first is why they wait.
    pub(super) fn holds(&self) -> impl Iterator<Item = Held<'_>> {
        let gates = self.gates;
        [
            gates.window.as_ref().map(Held::Window),
            gates.stopped.then_some(Held::Stopped),
            gates.blocking().map(Held::Check),
            gates.stage.as_ref().map(Held::Stage),
            self.pulling.map(Held::Pulling),
            self.pre_hook.map(Held::PreHook),
        ]
        .into_iter()
        .flatten()
    }
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
    /// checks carry their status and when a failing one is read again.
    pub(super) fn read(
        facts: &Facts<'_>,
        old: &PlanStatus,
        steps: &Steps<'_>,
        checks: &[check::CheckRead],
        stages: Option<&[super::promotion::StageRead]>,
    ) -> Gates {
        let settings = facts.settings;
        let window = (settings.window.as_ref())
            .filter(|w| old.applying.is_empty() && !w.contains(facts.now))
            .cloned();
        let stopped = facts.ctx.failure.held_failure_stops()
            && (steps.values()).any(|(_, s, _)| matches!(s, NodeState::Failed { .. }));
        let stage = stages.and_then(|stages| {
            super::promotion::gate(&settings.after, stages, &facts.version, facts.now)
        });
        Gates {
            window,
            stopped,
            check: health_gate(facts, old, checks),
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
fn health_gate(facts: &Facts<'_>, old: &PlanStatus, checks: &[check::CheckRead]) -> check::Gate {
    let cx = check::GateContext {
        old: &old.health_checks,
        now: facts.now,
        stops: facts.ctx.failure.last != super::failure::Last::Hold,
        fresh: facts.ctx.reset || old.observed_generation != facts.ctx.generation,
        field: "spec.healthChecks",
    };
    check::gate(facts.settings.health_checks, checks, &cx)
}

/// The reason of `Complete=False` while a health check keeps new nodes from starting.
pub const HEALTH_CHECK_FAILING: &str = "HealthCheckFailing";

/// The reason once the check failed past its timeout (under a failure policy that holds).
pub const HEALTH_CHECK_TIMED_OUT: &str = "HealthCheckTimedOut";

/// The reason of `Complete=False` once a failure stopped the rollout.
pub const STOPPED: &str = "RolloutStopped";

/// The reason of `Complete=False` when every node is done but those quarantined.
pub const QUARANTINED: &str = "Quarantined";

/// The reason of `Complete=False` while a node's failed Job waits to be recreated.
pub const RETRYING: &str = "Retrying";
