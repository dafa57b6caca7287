//! DisruptionBudgets as a Plan decides with them: a node starts only where every budget that
//! selects it has room, an admin's cordon uses room up, a halt or a frozen schedule starts
//! nothing, and the status says which budget the Plan waits for.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;
use crate::node::budget::DisruptionBudget;
use crate::node::budget::api::{BudgetSchedule, DisruptionBudgetSpec};

fn budget(name: &str, max: i32) -> DisruptionBudget {
    let mut b = DisruptionBudget::new(
        name,
        DisruptionBudgetSpec {
            max_unavailable: IntOrString::Int(max),
            ..Default::default()
        },
    );
    b.metadata.generation = Some(1);
    b
}

fn applying(w: &World) -> Vec<String> {
    w.status().applying
}

#[test]
fn a_plan_starts_no_more_nodes_than_the_budget_allows_and_says_which_budget_holds_the_rest() {
    let mut w = World::new(plan(3), nodes(4));
    w.budgets = vec![budget("pool", 2)];
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 2, "concurrency 3, budget 2");
    let (status, reason, message) = complete(&r.status);
    assert_eq!((status.as_str(), reason.as_str()), (FALSE, "SyncJob"));
    assert!(
        message.starts_with("waiting: node ")
            && message.ends_with(
                ": disruptionbudget pool allows 2 unavailable nodes and 2 are (and 1 more nodes)"
            ),
        "{message}"
    );
    // One finishes: its room goes to the next node.
    let job = w.job_names().remove(0);
    w.finish(&job, "Complete", now(), "", "");
    w.step();
    assert_eq!(applying(&w).len(), 2);
}

#[test]
fn a_node_cordoned_by_an_admin_uses_up_the_room_until_it_is_uncordoned() {
    let mut nodes = nodes(3);
    nodes[2].unschedulable = true;
    let mut w = World::new(plan(3), nodes);
    w.budgets = vec![budget("pool", 1)];
    let r = w.step();
    assert_eq!(
        r.create_jobs.len(),
        1,
        "the cordoned node is already unavailable: taking it costs nothing; the others wait"
    );
    assert_eq!(applying(&w), ["node-3"], "the cordoned node costs no room");
    let (_, reason, message) = complete(&r.status);
    assert_eq!(reason, "SyncJob");
    assert!(
        message.contains("disruptionbudget pool allows 1 unavailable node and 1 is"),
        "{message}"
    );
}

#[test]
fn a_halted_budget_starts_nothing_and_lets_started_nodes_finish() {
    let mut w = World::new(plan(2), nodes(3));
    w.step();
    assert_eq!(applying(&w).len(), 2);
    let mut halted = budget("pool", 10);
    halted.spec.halt = Some(true);
    w.budgets = vec![halted];
    let jobs = w.job_names();
    w.finish(&jobs[0], "Complete", now(), "", "");
    let r = w.step();
    assert_eq!(applying(&w).len(), 1, "the other node is still running");
    assert!(r.create_jobs.is_empty(), "no new node starts");
    let (_, reason, message) = complete(&r.status);
    assert_eq!(reason, "SyncJob");
    assert!(
        message.ends_with(": disruptionbudget pool is halted (spec.halt)"),
        "said at once, while a node still runs: {message}"
    );
    w.finish(&jobs[1], "Complete", now(), "", "");
    let r = w.step();
    let (status, reason, message) = complete(&r.status);
    assert_eq!((status.as_str(), reason.as_str()), (FALSE, "Halted"));
    assert!(
        message.ends_with(": disruptionbudget pool is halted (spec.halt)"),
        "{message}"
    );
    assert!(reasons(&r).contains(&"Halted"), "said as an event");
    assert!(w.step().events.is_empty(), "once");
}

#[test]
fn a_frozen_schedule_holds_the_rollout_and_looks_again_when_it_ends() {
    let mut w = World::new(plan(1), nodes(1));
    let mut frozen = budget("pool", 1);
    // Every day from 08:00 for 4 hours (now is 10:00 UTC).
    frozen.spec.schedules = vec![BudgetSchedule {
        name: Some("office-hours".into()),
        schedule: "0 8 * * *".into(),
        duration: "4h".into(),
        time_zone: None,
        max_unavailable: IntOrString::Int(0),
    }];
    w.budgets = vec![frozen];
    let r = w.step();
    assert!(r.create_jobs.is_empty());
    let (_, reason, message) = complete(&r.status);
    // A freeze on purpose, which ends by itself: not the pool's room.
    assert_eq!(reason, "Frozen");
    assert_eq!(
        message,
        "waiting: node node-1: disruptionbudget pool is frozen (schedule office-hours until 2026-11-22T12:00:00Z)"
    );
    assert_eq!(
        r.requeue_after,
        Some(Duration::from_secs(30)),
        "at most 30s"
    );
    w.now = t("2026-11-22T12:00:00Z");
    assert_eq!(w.step().create_jobs.len(), 1, "the period is over");
}

#[test]
fn a_budget_that_limits_other_reasons_does_not_hold_a_plan() {
    let mut w = World::new(plan(2), nodes(2));
    let mut reboots = budget("reboots", 0);
    reboots.spec.reasons = Some(vec![crate::node::budget::Reason::Reboot]);
    w.budgets = vec![reboots];
    assert_eq!(w.step().create_jobs.len(), 2);
}

/// The waiting groups of a decision: reason, how many nodes, the message.
fn groups(r: &Rollout) -> Vec<(&'static str, usize, String)> {
    (r.waiting.iter())
        .map(|g| (g.reason, g.nodes.len(), g.message.clone()))
        .collect()
}

#[test]
fn explaining_lists_every_waiting_node_under_its_reason() {
    let mut w = World::new(plan(2), nodes(5));
    w.budgets = vec![budget("pool", 1)];
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 1);
    assert_eq!(
        groups(&r),
        [(
            "DisruptionBudget",
            4,
            "disruptionbudget pool allows 1 unavailable node and 1 is".to_string()
        )]
    );
    let mut w = World::new(plan(1), nodes(3));
    w.held.insert(
        "node-2".into(),
        crate::node::holders::Holder::Maintenance {
            name: "disk".into(),
        },
    );
    let r = w.step();
    let mut seen = groups(&r);
    seen.sort();
    assert_eq!(
        seen,
        [
            ("Concurrency", 1, "all 1 slots are taken".to_string()),
            ("HeldByOther", 1, "held by nodemaintenance disk".to_string()),
        ]
    );
}

/// Past the first nodes of the order (a bounded pick), the rest of the order is walked: the one
/// node a budget lets start comes last in the Plan's order and still starts, and every node the
/// budget refuses waits under it.
#[test]
fn a_node_last_in_the_order_starts_when_the_budget_refuses_all_before_it() {
    let mut w = World::new(plan(2), nodes(30));
    let mut frozen = budget("frozen", 0);
    w.budgets = vec![frozen.clone()];
    let r = w.step();
    assert!(r.create_jobs.is_empty(), "every node in the frozen pool");
    let hash = w.status().latest_hash.unwrap_or_default();
    let last = crate::plan::core::selection::in_plan_order(
        "plan-uid",
        &hash,
        crate::plan::api::NodeOrder::Default,
        &w.nodes,
    )
    .last()
    .map(|n| n.name.clone())
    .expect("nodes");
    for n in w.nodes.iter_mut().filter(|n| n.name != last) {
        n.labels.insert("frozen".into(), "yes".into());
    }
    frozen.spec.node_selector = Some(LabelSelector {
        match_labels: Some([("frozen".to_string(), "yes".to_string())].into()),
        ..Default::default()
    });
    w.budgets = vec![frozen];
    let r = w.step();
    assert_eq!(applying(&w), [last]);
    assert_eq!(r.create_jobs.len(), 1);
    let waiting: usize = (r.waiting.iter())
        .filter(|g| g.reason == "DisruptionBudget")
        .map(|g| g.nodes.len())
        .sum();
    assert_eq!(waiting, 29, "{:?}", r.waiting);
}
