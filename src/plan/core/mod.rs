//! The rollout decision: from a Plan, its candidate nodes, its Jobs and Secrets, the channel's
//! answer and the time, decide the Plan's next status and what to create, delete, patch and report.
//!
//! It composes three pure parts: the status handler ([`status`]: validation, version, hash), one
//! typed state machine per node ([`node_state`]), and the Plan-level rules around them: which
//! nodes hold a slot (the concurrency bound), which Jobs no node owns, the `Complete` condition
//! and a bounded set of events. It never talks to the cluster; its shell gathers the inputs, and
//! the runtime applies the [`Rollout`] in a safe order: node labels of finished nodes first (they
//! only release nodes), then the status (guarded by the Plan's resourceVersion), and only then
//! Jobs. Jobs are created only for nodes in the `status.applying` being written, so a Job never
//! starts before its node counts against `concurrency`, even across a crash.
//!
//! **One key for a node: its name** (`metadata.name`). It is unique and immutable, and it is what
//! Jobs (`upgrade.cattle.io/node`), reboot pods, node patches and health observations name. The
//! `kubernetes.io/hostname` label appears only on the wire, in `status.applying` and
//! `status.nodes[].name`, because SUC writes hostnames there; it is translated when the status is
//! read and written, nowhere else.

pub mod conditions;
pub mod config;
mod decision;
pub mod deletion;
mod disruption;
pub mod expansion;
mod facts;
pub mod failure;
mod gates;
pub mod hash;
pub mod hooks;
pub mod image;
pub mod job;
pub mod job_index;
mod jobs;
pub mod lint;
mod node_labels;
pub mod node_state;
pub mod notices;
mod plan_nodes;
pub mod promotion;
pub mod pruned;
pub mod reboot;
pub mod render;
mod report;
pub mod secret;
pub mod selection;
pub mod settings;
pub mod settled;
mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};

use crate::common::check::CheckRead;
use crate::node::NodeInfo;
use crate::node::budget::Budget;
use crate::node::holders::{Hold, Holder};
use crate::node::index::{Interest, NodeIndex};
use crate::node::reboot::HealthObservation;
use crate::plan::api::{NodePhase, Plan, PlanStatus};
use crate::plan::core::conditions::{self as cond, COMPLETE, FALSE};
use crate::plan::core::config::JobConfig;

use decision::Rollout;
pub use decision::{JobDeletion, Learned, PlanDecision, PlanEffect, PlanSummary, TemplateMemo};
pub use disruption::owner as pull_owner;
pub use node_state::NodeState;
pub use report::phases;
pub use settings::{PlanSettings, validate};

/// SUC's message when neither `version` nor `channel` is set.
pub const ERR_UNRESOLVABLE: &str = "cannot resolve plan: missing channel and version";
/// SUC's message while a rollout waits for its window.
pub const MSG_WAITING_FOR_WINDOW: &str = "current time is not within configured window";
/// SUC's message when the Plan cannot roll out.
pub const MSG_NOT_READY: &str = "plan is not valid and resolved";
pub use gates::{HEALTH_CHECK_FAILING, HEALTH_CHECK_TIMED_OUT};
/// Reasons of `Complete=False` that a failed node holds.
pub const FAILURE_REASONS: [&str; 6] = [
    "JobFailed",
    "RebootTimedOut",
    "HealthGateTimedOut",
    gates::STOPPED,
    gates::QUARANTINED,
    gates::RETRYING,
];

/// What the channel said, for a Plan that follows one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelAnswer {
    /// The raw version (not yet munged).
    Version(String),
    Failed(String),
}

/// Everything the decision reads.
pub struct PlanInput<'a> {
    pub plan: &'a Plan,
    /// The Plan's candidate nodes: at least every node its `nodeSelector` matches (the node index
    /// gives exactly those), but for the `settled` ones; other nodes are ignored.
    pub nodes: &'a [&'a NodeInfo],
    /// Candidates left out of `nodes`, counted: settled at the hash this decision rolls out
    /// ([`settled`]; `None`: none left out). Never while explaining, which lists every node.
    pub settled: Option<&'a settled::SettledNodes>,
    /// The Jobs of this Plan made by this controller.
    pub jobs: &'a [&'a Job],
    /// The reboot pods of this Plan made by this controller.
    pub reboot_pods: &'a [&'a Pod],
    /// The pull pods of this Plan (`spec.disruption.prePull`), as listed now; none is read
    /// unless it pre-pulls.
    pub pull_pods: &'a [&'a Pod],
    /// For Plans with a health gate: what the gate's pods look like on nodes that rebooted, by
    /// node name (see [`nodes_awaiting_health`]).
    pub health: &'a BTreeMap<String, HealthObservation>,
    /// Secrets of the Plan's namespace, by name.
    pub secrets: &'a BTreeMap<String, Secret>,
    /// The channel's latest answer; `None` when the Plan has no channel or it was not asked yet.
    pub channel: Option<ChannelAnswer>,
    pub controller_name: &'a str,
    pub job_config: &'a JobConfig,
    /// The budget: nodes another slipway operation holds against this Plan (the Plan does not
    /// start them; nodes it already runs finish their step) and the DisruptionBudgets that limit
    /// its upgrades. The Plan says what it waits for.
    pub budget: &'a Budget,
    /// Nodes another Plan holds too: a deleted Plan does not uncordon them.
    pub shared: &'a BTreeSet<String>,
    /// The Jobs of the Plan's hooks made by this controller.
    pub hook_jobs: &'a [&'a Job],
    /// What the shell read for each of `spec.healthChecks`, in order.
    pub checks: &'a [CheckRead],
    /// What the shell read of each Plan of `spec.after`; `None`: not read, taken to allow
    /// (`slipway render`, which shows a Plan on its own).
    pub stages: Option<&'a [promotion::StageRead]>,
    /// Pod-template hashes of Jobs rendered by earlier decisions, to check live Jobs against
    /// without rendering them again; `None` renders every time (and learns nothing). It changes
    /// no decision.
    pub templates: Option<&'a TemplateMemo>,
    /// List every node that waits, and why, in the decision's `waiting` (`slipway explain`). It
    /// changes no decision.
    pub explain: bool,
    /// What the installed Plan CRD drops of slipway's fields ([`pruned`]): empty on slipway's
    /// own; `None` when not known (not read, or not readable), which changes nothing.
    pub pruned: Option<&'a [String]>,
}

pub use crate::common::rfc3339;

impl PlanInput<'_> {
    fn resolving(&self) -> status::Resolving<'_> {
        status::Resolving {
            plan: self.plan,
            secrets: self.secrets,
            channel: self.channel.as_ref(),
            config: self.job_config,
        }
    }
}

/// Decides the next step of one Plan: which nodes go next and why the others wait, the Jobs and
/// reboot pods, the node labels and the status. A Plan being deleted is decided on once more: its
/// cleanup ([`deletion`]).
pub fn decide(input: &PlanInput<'_>, now: Timestamp) -> PlanDecision {
    decide_learning(input, now).0
}

/// [`decide`], with the template hashes it rendered that `input.templates` did not have: what
/// the keeper of the memo adds to it.
pub fn decide_learning(input: &PlanInput<'_>, now: Timestamp) -> (PlanDecision, Learned) {
    let plan = input.plan;
    if plan.metadata.deletion_timestamp.is_some() {
        return (deletion::cleanup(input), Learned::new());
    }
    let now_text = rfc3339(now);
    let at = cond::Stamp::new(&now_text, plan.metadata.generation);
    let unset = PlanStatus::default();
    let old = plan.status.as_ref().unwrap_or(&unset);
    let mut st = old.clone();
    let mut out = Rollout::default();
    let read = node_labels::read(input);
    let settings = status::handle(&input.resolving(), &mut st, &mut out, &now_text);
    if let Some(settings) = settings
        .as_ref()
        .filter(|_| status::rolls(settings.as_ref(), &st))
    {
        debug_assert!(
            (input.settled).is_none_or(|s| st.latest_hash.as_ref() == Some(&s.hash)),
            "nodes left out at another hash than the decision's"
        );
        plan_nodes::roll(input, settings, &read, now, old, &mut st, &mut out);
    } else {
        // A version too new to roll out says so; anything else that stops a Plan is SUC's.
        let (reason, message) = match cond::get(&st, cond::LATEST_RESOLVED) {
            Some(c) if c.reason.as_deref() == Some(status::VERSION_TOO_NEW) => (
                status::VERSION_TOO_NEW,
                c.message.clone().unwrap_or_default(),
            ),
            _ => ("NotReady", MSG_NOT_READY.to_string()),
        };
        cond::set(&mut st, at, COMPLETE, FALSE, reason, &message);
        if input.explain {
            let age = settings.as_ref().and_then(|s| s.min_version_age);
            let until = promotion::rolls_out_at(age, &st);
            for r in read.iter().filter(|r| r.targeted()) {
                let why = || message.clone();
                crate::common::decision::wait(&mut out.waiting, r.hostname(), reason, why, until);
            }
        }
        plan_nodes::sweep_only(input, now, &st, &mut out);
    }
    st.observed_generation = plan.metadata.generation;
    cond::kstatus(&mut st, at);
    pruned::note(&mut st, plan, input.pruned, at);
    let name = plan.metadata.name.as_deref().unwrap_or_default();
    out.events.extend(notices::of(name, old, &st));
    let summary = report::summary(input, &read, &st, &out.node_patches);
    let holds = decision::applying_nodes(&st.applying, read.iter().map(|r| (r.hostname(), r.node)));
    let learned = std::mem::take(&mut out.learned);
    (out.into_decision(st, holds, summary), learned)
}

/// The holder of a Plan in the budget.
pub fn holder(plan: &Plan) -> Holder {
    Holder::Plan {
        namespace: plan.metadata.namespace.clone().unwrap_or_default(),
        name: plan.metadata.name.clone().unwrap_or_default(),
    }
}

/// What a Plan reads of the nodes: those its `nodeSelector` matches (an invalid selector matches
/// none; the decision reports it), and of those its own label.
pub fn interest(plan: &Plan) -> Interest {
    Interest {
        selector: settings::selector(&plan.spec),
        label: Some(crate::plan::api::labels::plan_node_label(
            plan.metadata.name.as_deref().unwrap_or_default(),
        )),
        conditions: false,
    }
}

/// The nodes Plans hold by their own record (`status.applying`, hostnames SUC writes there), as
/// the node index knows them.
pub fn holds(plans: &[Arc<Plan>], nodes: &NodeIndex) -> Vec<Hold> {
    let mut holds = Vec::new();
    for plan in plans {
        let me = holder(plan);
        let applying = plan.status.iter().flat_map(|s| s.applying.iter());
        for node in applying.filter_map(|host| nodes.node_of_hostname(host)) {
            holds.push(Hold::new(node, me.clone()));
        }
    }
    holds
}

/// The nodes (by name) whose health gate the controller must look at before the next decision:
/// those rebooted or rebooting, and those whose gate timed out (they may still recover).
pub fn nodes_awaiting_health<'a>(plan: &Plan, nodes: &[&'a NodeInfo]) -> Vec<&'a NodeInfo> {
    let waiting: Vec<&str> = plan
        .status
        .iter()
        .flat_map(|s| s.nodes.iter())
        .filter(|p| {
            p.phase == NodePhase::Rebooting
                || p.phase == NodePhase::WaitingForHealth
                || p.reason.as_deref() == Some("HealthGateTimedOut")
        })
        .map(|p| p.name.as_str())
        .collect();
    nodes
        .iter()
        .copied()
        .filter(|n| waiting.contains(&n.hostname()))
        .collect()
}

#[cfg(test)]
mod tests;
