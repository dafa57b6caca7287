//! Why a Plan's next nodes wait, when the Plan itself is not done: a closed window, a failing
//! health check, a Plan it goes after, its pre hook, a DisruptionBudget, another operation holding
//! the nodes, no concurrency, quarantined nodes. Each says so in the `Complete` condition (and once
//! as an event) and says when to look again.

use super::decision::Rollout;
use super::facts::Facts;
use super::gates::{
    HEALTH_CHECK_FAILING, QUARANTINED, Situation, check_message, pre_hook_message, pull_message,
    refused_message, whole_plan_wait,
};
use super::{MSG_WAITING_FOR_WINDOW, PlanInput, rfc3339};
use crate::common::check::Blocking;
use crate::common::decision::{EventType, Waiting, wait};
use crate::common::window::TimeWindow;
use crate::node::NodeInfo;
use crate::node::budget::Refusal;
use crate::plan::api::PlanStatus;
use crate::plan::core::conditions::{self as cond, COMPLETE, FALSE};

/// With nodes left to start that something outside the rollout keeps waiting: says what in the
/// `Complete` condition and returns `true`; `false` when nothing does.
pub(super) fn waiting(
    facts: &Facts<'_>,
    st: &mut PlanStatus,
    out: &mut Rollout,
    situation: &Situation<'_>,
) -> bool {
    let eligible = situation.eligible;
    let left = eligible.len() > st.applying.len();
    if let (true, Some(w), false) = (
        st.applying.is_empty(),
        &situation.gates.window,
        eligible.is_empty(),
    ) {
        wait_for_window(facts, st, out, w);
    } else if let Some(check) = situation.gates.blocking().filter(|_| left) {
        wait_for_check(facts, st, out, check);
    } else if let Some(stage) = situation.gates.stage.as_ref().filter(|_| left) {
        wait_for_stage(facts, st, out, stage);
    } else if let Some(pull) = situation.pulling {
        let (reason, message) = pull_message(pull);
        not_complete(facts, st, reason, &message);
    } else if let Some(hook) = situation.pre_hook {
        let (reason, message) = pre_hook_message(facts, hook);
        not_complete(facts, st, reason, &message);
    } else if st.applying.is_empty()
        && (wait_for_budget(facts, st, out, situation.refused)
            || wait_for_held(facts, st, out, eligible)
            || no_concurrency(facts, st, out, eligible))
    {
        // Nodes wait for something that is not the Plan's; the function that found it said so.
    } else if st.applying.is_empty() && !situation.quarantined.is_empty() {
        let message = quarantined_message(facts, situation.quarantined);
        not_complete(facts, st, QUARANTINED, &message);
    } else {
        return false;
    }
    true
}

/// With nothing applying and nodes left, outside the window: says so (once as an event) and
/// looks again when it may open.
fn wait_for_window(facts: &Facts<'_>, st: &mut PlanStatus, out: &mut Rollout, w: &TimeWindow) {
    let (version, hash) = (&facts.version, &facts.hash);
    if cond::reason(st, COMPLETE) != "Waiting" {
        out.event(
            EventType::Normal,
            "Waiting",
            format!(
                "Waiting for start of Spec.Window to sync Jobs for version {version}. Hash: {hash}"
            ),
        );
    }
    out.requeue(w.next_check(facts.now));
    not_complete(facts, st, "Waiting", MSG_WAITING_FOR_WINDOW);
}

/// Nodes wait for a health check: says which and why (once per reason as an event).
fn wait_for_check(facts: &Facts<'_>, st: &mut PlanStatus, out: &mut Rollout, check: &Blocking) {
    let (reason, message) = check_message(facts, check);
    if cond::reason(st, COMPLETE) != reason {
        let kind = if reason == HEALTH_CHECK_FAILING {
            EventType::Normal
        } else {
            EventType::Warning
        };
        out.event(kind, reason, message.clone());
    }
    not_complete(facts, st, reason, &message);
}

/// Nodes wait for a Plan of `spec.after`: says which and why (once per reason as an event), and
/// looks again when its soak ends (at most 30 seconds away: the other Plan's progress wakes none).
fn wait_for_stage(
    facts: &Facts<'_>,
    st: &mut PlanStatus,
    out: &mut Rollout,
    stage: &super::promotion::Waiting,
) {
    use super::promotion::WAITING_FOR_PLAN;
    if cond::reason(st, COMPLETE) != WAITING_FOR_PLAN {
        out.event(EventType::Normal, WAITING_FOR_PLAN, stage.message.clone());
    }
    out.requeue(BUDGET_RECHECK);
    if let Some(until) = stage.until {
        out.requeue(crate::common::until(facts.now, until));
    }
    not_complete(facts, st, WAITING_FOR_PLAN, &stage.message);
}

/// The `Complete` message while quarantined nodes are all that is left.
fn quarantined_message(facts: &Facts<'_>, quarantined: &[&str]) -> String {
    let mut names: Vec<&str> = quarantined.to_vec();
    names.sort_unstable();
    names.dedup();
    format!(
        "{} quarantined after their Job failed: {} (label and taint {}); reset with `kubectl annotate plan {} {}=<new value> --overwrite`",
        if names.len() == 1 {
            "1 node".to_string()
        } else {
            format!("{} nodes", names.len())
        },
        names.join(", "),
        super::failure::quarantine_key(facts.name),
        facts.name,
        super::failure::RESET_ANNOTATION
    )
}

/// The reason of `Complete=False` while nodes wait and `concurrency` is 0 (SUC says `Complete`).
const NO_CONCURRENCY: &str = "NoConcurrency";

/// With nothing applying, nodes left and `concurrency` 0 or less, no node ever starts: says so
/// (SUC reports the Plan complete, a trap of its issues #217 and #285). `false` otherwise.
fn no_concurrency(
    facts: &Facts<'_>,
    st: &mut PlanStatus,
    out: &mut Rollout,
    eligible: &[&NodeInfo],
) -> bool {
    let concurrency = facts.settings.concurrency;
    if concurrency > 0 || eligible.is_empty() {
        return false;
    }
    let message = format!(
        "spec.concurrency is {concurrency}: none of the {} nodes to upgrade starts; set it to 1 or more",
        eligible.len()
    );
    if cond::reason(st, COMPLETE) != NO_CONCURRENCY {
        out.event(EventType::Warning, NO_CONCURRENCY, message.clone());
    }
    not_complete(facts, st, NO_CONCURRENCY, &message);
    true
}

/// How long a Plan that a DisruptionBudget holds back waits before it looks again (letting go of
/// a node wakes it sooner).
const BUDGET_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// With nothing applying and nodes a DisruptionBudget refused: says which budget and why (once
/// per reason as an event). `false` when none was refused.
fn wait_for_budget(
    facts: &Facts<'_>,
    st: &mut PlanStatus,
    out: &mut Rollout,
    refused: &[(&NodeInfo, Refusal)],
) -> bool {
    let Some((_, first)) = refused.first() else {
        return false;
    };
    let (reason, message) = (first.reason(), refused_message(refused));
    if cond::reason(st, COMPLETE) != reason {
        out.event(EventType::Normal, reason, message.clone());
    }
    out.requeue(BUDGET_RECHECK);
    not_complete(facts, st, reason, &message);
    true
}

/// The reason of `Complete=False` while the only nodes left are held by another operation.
const WAITING_FOR_NODES: &str = "WaitingForNodes";

const HELD_RECHECK: std::time::Duration = std::time::Duration::from_secs(30);

/// With nothing applying and nodes left that another operation holds: says so (once as an
/// event) and looks again later. `false` when no node is held.
fn wait_for_held(
    facts: &Facts<'_>,
    st: &mut PlanStatus,
    out: &mut Rollout,
    eligible: &[&NodeInfo],
) -> bool {
    let Some(message) = held_message(facts.input, eligible) else {
        return false;
    };
    if cond::reason(st, COMPLETE) != WAITING_FOR_NODES {
        out.event(EventType::Normal, WAITING_FOR_NODES, message.clone());
    }
    // A taint going away triggers a reconcile; a hold without one is looked at again.
    out.requeue(HELD_RECHECK);
    not_complete(facts, st, WAITING_FOR_NODES, &message);
    true
}

/// The operation that holds `node` against this Plan, if any.
pub(super) fn holder_of(
    input: &PlanInput<'_>,
    node: &NodeInfo,
) -> Option<crate::node::holders::Holder> {
    input.budget.holder_of(&node.name).cloned()
}

/// What the Plan waits for when nodes it still has to upgrade are held by another operation.
fn held_message(input: &PlanInput<'_>, eligible: &[&NodeInfo]) -> Option<String> {
    let held: Vec<String> = eligible
        .iter()
        .filter_map(|n| {
            let holder = holder_of(input, n)?;
            Some(format!("node {} is held by {holder}", n.hostname()))
        })
        .collect();
    let first = held.first()?;
    Some(match held.len() {
        1 => format!("waiting: {first}"),
        n => format!("waiting: {first} (and {} more nodes)", n - 1),
    })
}

/// Every eligible node this decision does not start, grouped by why, in the Plan's order (what
/// `slipway explain` shows; the controller does not ask for it).
pub(super) fn explain(
    facts: &Facts<'_>,
    steps: &super::facts::Steps<'_>,
    situation: &Situation<'_>,
) -> Vec<Waiting> {
    let left: Vec<&NodeInfo> = (situation.eligible.iter().copied())
        .filter(|n| !steps.contains_key(n.name.as_str()))
        .collect();
    let order = super::selection::first_in_plan_order(
        left.len(),
        facts.uid,
        &facts.hash,
        facts.settings.order,
        left,
    );
    let mut groups = Vec::new();
    let whole = whole_plan_wait(facts, situation);
    let concurrency = facts.settings.concurrency;
    for node in order {
        let name = node.hostname();
        if let Some((reason, message, until)) = &whole {
            wait(&mut groups, name, reason, || message.clone(), *until);
        } else if let Some(holder) = holder_of(facts.input, node) {
            wait(
                &mut groups,
                name,
                "HeldByOther",
                || format!("held by {holder}"),
                None,
            );
        } else if let Some((_, refusal)) =
            situation.refused.iter().find(|(n, _)| n.name == node.name)
        {
            wait(
                &mut groups,
                name,
                refusal.reason(),
                || refusal.to_string(),
                refusal.until(),
            );
        } else if concurrency <= 0 {
            let message = || format!("spec.concurrency is {concurrency}");
            wait(&mut groups, name, NO_CONCURRENCY, message, None);
        } else {
            let message = || format!("all {concurrency} slots are taken");
            wait(&mut groups, name, "Concurrency", message, None);
        }
    }
    groups
}

/// `Complete` is `False` for `reason`, saying `message`.
fn not_complete(facts: &Facts<'_>, st: &mut PlanStatus, reason: &str, message: &str) {
    let now = rfc3339(facts.now);
    cond::set(
        st,
        COMPLETE,
        FALSE,
        reason,
        message,
        &now,
        facts.ctx.generation,
    );
}
