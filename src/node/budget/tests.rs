use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::ObjectMeta;

use super::api::{BudgetSchedule, DisruptionBudgetSpec, DisruptionBudgetStatus, LedgerEntry};
use super::ledger::{self, Holding, LedgerInput};
use super::*;

fn at(s: &str) -> Timestamp {
    s.parse().expect("a timestamp")
}

fn node(name: &str, pool: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        labels: [("pool".to_string(), pool.to_string())].into(),
        ready: true,
        ..Default::default()
    }
}

fn budget(name: &str, pool: Option<&str>, max: IntOrString) -> DisruptionBudget {
    DisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: DisruptionBudgetSpec {
            node_selector: pool.map(|p| LabelSelector {
                match_labels: Some([("pool".to_string(), p.to_string())].into()),
                ..Default::default()
            }),
            max_unavailable: max,
            ..Default::default()
        },
        status: None,
    }
}

fn plan(name: &str) -> Holder {
    Holder::Plan {
        namespace: "system-upgrade".into(),
        name: name.into(),
    }
}

fn pct(s: &str) -> IntOrString {
    IntOrString::String(s.into())
}

#[test]
fn percentages_round_up_as_a_pod_disruption_budget_s_max_unavailable() {
    assert_eq!(scaled(&pct("10%"), 5), Ok(1));
    assert_eq!(scaled(&pct("10%"), 10), Ok(1));
    assert_eq!(scaled(&pct("10%"), 11), Ok(2));
    assert_eq!(scaled(&pct("0%"), 100), Ok(0));
    assert_eq!(scaled(&pct("100%"), 7), Ok(7));
    assert_eq!(
        scaled(&pct("33%"), 0),
        Ok(0),
        "an empty pool allows nothing"
    );
    assert_eq!(scaled(&IntOrString::Int(3), 1), Ok(3));
    assert!(scaled(&pct("101%"), 1).is_err());
    assert!(scaled(&pct("ten"), 1).is_err());
    assert!(scaled(&IntOrString::Int(-1), 1).is_err());
}

#[test]
fn an_unreadable_budget_says_which_field_and_admits_nothing() {
    let mut b = budget("b", Some("a"), IntOrString::Int(5));
    b.spec.schedules = vec![BudgetSchedule {
        schedule: "0 25 * * *".into(),
        duration: "1h".into(),
        max_unavailable: IntOrString::Int(0),
        ..Default::default()
    }];
    let pool = Pool::new(&b);
    assert_eq!(
        pool.invalid.as_deref(),
        Some("spec.schedules[0].schedule: hour: \"25\" is not a number or name in 0-23")
    );
    b.spec.schedules[0].schedule = "@daily".into();
    b.spec.schedules[0].time_zone = Some("Mars/Olympus".into());
    assert_eq!(
        Pool::new(&b).invalid.as_deref(),
        Some("spec.schedules[0].timeZone: unknown time zone \"Mars/Olympus\"")
    );
    let nodes = [node("n1", "a")];
    let state = Pool::new(&b).measure(&nodes, &BTreeSet::new(), at("2026-11-25T12:00:00Z"));
    let mut budget = Budget::new(BTreeMap::new(), &[state], Reason::Reboot);
    assert_eq!(
        budget.take(&nodes[0]).map_err(|r| r.reason()),
        Err("DisruptionBudgetInvalid")
    );
}

#[test]
fn each_available_node_takes_room_in_every_pool_that_selects_it() {
    let nodes = [
        node("a1", "a"),
        node("a2", "a"),
        node("a3", "a"),
        node("b1", "b"),
    ];
    let now = at("2026-11-25T12:00:00Z");
    let pools = [
        Pool::new(&budget("a-only", Some("a"), IntOrString::Int(2))),
        Pool::new(&budget("cluster", None, IntOrString::Int(2))),
    ];
    let held = BTreeSet::from(["a1".to_string()]);
    let states: Vec<PoolState> = pools
        .iter()
        .map(|p| p.measure(&nodes, &held, now))
        .collect();
    assert_eq!(states[0].members, 3);
    assert_eq!(states[1].room(), 1);
    let mut budget = Budget::new(
        BTreeMap::from([("a1".into(), plan("k3s"))]),
        &states,
        Reason::Upgrade,
    );
    assert_eq!(budget.take(&nodes[0]), Err(Refusal::Held(plan("k3s"))));
    assert_eq!(budget.take(&nodes[1]), Ok(()));
    let full = budget
        .take(&nodes[3])
        .expect_err("the cluster budget is full");
    assert_eq!(
        full.to_string(),
        "disruptionbudget cluster allows 2 unavailable nodes and 2 are"
    );
}

#[test]
fn a_node_already_unavailable_costs_no_room_but_a_halt_stops_even_that() {
    let mut cordoned = node("n2", "a");
    cordoned.unschedulable = true;
    let mut not_ready = node("n3", "a");
    not_ready.ready = false;
    let nodes = [node("n1", "a"), cordoned, not_ready];
    let now = at("2026-11-25T12:00:00Z");
    let b = budget("pool", Some("a"), IntOrString::Int(2));
    let state = Pool::new(&b).measure(&nodes, &BTreeSet::new(), now);
    assert_eq!(state.unavailable.len(), 2, "cordoned and NotReady count");
    let mut budget = Budget::new(
        BTreeMap::new(),
        std::slice::from_ref(&state),
        Reason::Maintenance,
    );
    assert_eq!(budget.take(&nodes[1]), Ok(()), "already unavailable");
    assert!(
        budget.take(&nodes[0]).is_err(),
        "an admin's cordon used up the room"
    );
    let mut halted = b.clone();
    halted.spec.halt = Some(true);
    let state = Pool::new(&halted).measure(&nodes, &BTreeSet::new(), now);
    let budget = Budget::new(BTreeMap::new(), &[state], Reason::Maintenance);
    assert_eq!(
        budget.check(&nodes[1]).map_err(|r| r.to_string()),
        Err("disruptionbudget pool is halted (spec.halt)".into())
    );
}

#[test]
fn a_budget_limits_only_the_reasons_it_names() {
    let nodes = [node("n1", "a")];
    let mut b = budget("reboots", None, IntOrString::Int(0));
    b.spec.reasons = Some(vec![Reason::Reboot]);
    let state = Pool::new(&b).measure(&nodes, &BTreeSet::new(), at("2026-11-25T12:00:00Z"));
    let states = [state];
    assert!(
        Budget::new(BTreeMap::new(), &states, Reason::Reboot)
            .check(&nodes[0])
            .is_err()
    );
    let upgrade = Budget::new(BTreeMap::new(), &states, Reason::Upgrade);
    assert!(!upgrade.is_limited());
    assert_eq!(upgrade.check(&nodes[0]), Ok(()));
}

#[test]
fn a_schedule_sets_the_limit_while_its_period_lasts_and_the_smallest_wins() {
    let mut b = budget("nightly", None, pct("50%"));
    let schedule = |name: &str, cron: &str, hours: &str, max: IntOrString| BudgetSchedule {
        name: Some(name.into()),
        schedule: cron.into(),
        duration: hours.into(),
        time_zone: None,
        max_unavailable: max,
    };
    b.spec.schedules = vec![
        schedule("freeze", "0 22 * * *", "8h", IntOrString::Int(0)),
        schedule("business", "0 8 * * mon-fri", "10h", IntOrString::Int(1)),
    ];
    let pool = Pool::new(&b);
    assert_eq!(pool.invalid, None);
    // Wednesday 23:00: the freeze.
    let night = pool.limit(10, at("2026-11-25T23:00:00Z"));
    assert_eq!(night.max, 0);
    let in_force = night.schedule.expect("the freeze");
    assert_eq!(
        (in_force.name.as_str(), in_force.period.end),
        ("freeze", at("2026-11-26T06:00:00Z"))
    );
    assert_eq!(night.next_change, Some(at("2026-11-26T06:00:00Z")));
    // Thursday 07:00: no schedule, half the pool; business hours start at 08:00.
    let morning = pool.limit(10, at("2026-11-26T07:00:00Z"));
    assert_eq!((morning.max, morning.schedule), (5, None));
    assert_eq!(morning.next_change, Some(at("2026-11-26T08:00:00Z")));
    // Friday 22:30: the freeze (0) and business hours (1) overlap: the freeze wins.
    let both = pool.limit(10, at("2026-11-27T17:30:00Z"));
    assert_eq!(both.max, 1);
    let overlap = pool.limit(10, at("2026-11-27T22:30:00Z"));
    assert_eq!(overlap.max, 0);

    let nodes = [node("n1", "a")];
    let state = pool.measure(&nodes, &BTreeSet::new(), at("2026-11-25T23:00:00Z"));
    let budget = Budget::new(BTreeMap::new(), &[state], Reason::Reboot);
    let refusal = budget.check(&nodes[0]).expect_err("frozen");
    assert_eq!(refusal.until(), Some(at("2026-11-26T06:00:00Z")));
    assert_eq!(
        refusal.to_string(),
        "disruptionbudget nightly is frozen (schedule freeze until 2026-11-26T06:00:00Z)"
    );
    assert_eq!(refusal.reason(), "Frozen");
}

#[test]
fn the_ledger_names_every_unavailable_node_keeps_since_and_counts() {
    let mut cordoned = node("c", "a");
    cordoned.unschedulable = true;
    cordoned
        .annotations
        .insert(crate::node::cordon::CORDONED_BY.into(), "admin".into());
    let mut down = node("d", "a");
    down.ready = false;
    let mut kept = node("k", "a");
    kept.annotations
        .insert(HOLD_ANNOTATION.into(), "storage-team: disk swap".into());
    let nodes = [node("p", "a"), cordoned, down, kept, node("free", "a")];
    let held = BTreeSet::from(["p".to_string()]);
    let now = at("2026-11-25T12:00:00Z");
    let state = Pool::new(&budget("pool", None, IntOrString::Int(5))).measure(&nodes, &held, now);
    let by_name: BTreeMap<String, &NodeInfo> = nodes.iter().map(|n| (n.name.clone(), n)).collect();
    let (k3s, server) = (plan("k3s"), plan("server"));
    let holders = BTreeMap::from([(
        "p".to_string(),
        vec![
            Holding {
                holder: &k3s,
                message: None,
            },
            Holding {
                holder: &server,
                message: Some("upgrading"),
            },
        ],
    )]);
    let old = DisruptionBudgetStatus {
        holders: vec![LedgerEntry {
            node: "c".into(),
            holder: "cordoned".into(),
            reason: "cordoned".into(),
            since: "2026-11-25T11:00:00Z".into(),
            message: None,
        }],
        ..Default::default()
    };
    let status = ledger::status(
        &LedgerInput {
            pool: &state,
            nodes: &by_name,
            holders: &holders,
            old: &old,
            generation: Some(3),
        },
        now,
    );
    let rows: Vec<String> = status
        .holders
        .iter()
        .map(|e| {
            format!(
                "{} {} {} {} {:?}",
                e.node, e.holder, e.reason, e.since, e.message
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            "c cordoned cordoned 2026-11-25T11:00:00Z Some(\"cordoned by admin\")",
            "d notReady notReady 2026-11-25T12:00:00Z None",
            "k hold/storage-team hold 2026-11-25T12:00:00Z Some(\"disk swap\")",
            "p plan/system-upgrade/k3s upgrade 2026-11-25T12:00:00Z None",
            "p plan/system-upgrade/server upgrade 2026-11-25T12:00:00Z Some(\"upgrading\")",
        ]
    );
    assert_eq!(
        (
            status.nodes,
            status.max_unavailable,
            status.unavailable,
            status.allowed
        ),
        (5, 5, 4, 1)
    );
    let of = |t: &str| {
        (status.conditions.iter())
            .find(|c| c.type_ == t)
            .map(|c| c.status.as_str())
    };
    assert_eq!(of("Validated"), Some("True"));
    let kstatus = [of("Ready"), of("Reconciling"), of("Stalled")];
    assert_eq!(kstatus, [Some("True"), Some("False"), Some("False")]);
}

proptest::proptest! {
    /// Measuring from kept members gives what a walk over every node gives: each member held,
    /// mine or down by itself is unavailable, and only those mine alone makes unavailable are
    /// releasable.
    #[test]
    fn a_pool_measured_from_kept_members_is_a_walk_over_every_node(
        picks in proptest::collection::vec((0..2usize, 0..4u8, 0..4u8), 0..12)
    ) {
        let nodes: Vec<NodeInfo> = (picks.iter().enumerate())
            .map(|(i, (pool, state, _))| {
                let mut n = node(&format!("n{i}"), ["a", "b"][*pool]);
                n.ready = state & 1 == 0;
                n.unschedulable = state & 2 != 0;
                n
            })
            .collect();
        // Held by others (1), mine (2), both (3), or neither.
        let pick = |bit: u8| -> BTreeSet<String> {
            (nodes.iter().zip(&picks))
                .filter(|(_, (_, _, by))| by & bit != 0)
                .map(|(n, _)| n.name.clone())
                .collect()
        };
        let (held, mine) = (pick(1), pick(2));
        let pool = Pool::new(&budget("b", Some("a"), IntOrString::Int(3)));
        let now = at("2026-11-25T12:00:00Z");
        let kept = Members::of(&pool, &nodes);
        let member = |name: &str| nodes.iter().any(|n| n.name == name && n.labels["pool"] == "a");
        let state = pool.measure_kept(&kept, member, &held, &mine, now);
        let in_pool: Vec<&NodeInfo> = nodes.iter().filter(|n| n.labels["pool"] == "a").collect();
        let by_others = |n: &NodeInfo| held.contains(&n.name) || !n.ready || n.unschedulable;
        let unavailable: BTreeSet<String> = (in_pool.iter())
            .filter(|n| by_others(n) || mine.contains(&n.name))
            .map(|n| n.name.clone())
            .collect();
        let releasable: BTreeSet<String> = (in_pool.iter())
            .filter(|n| !by_others(n) && mine.contains(&n.name))
            .map(|n| n.name.clone())
            .collect();
        proptest::prop_assert_eq!(state.members, in_pool.len());
        proptest::prop_assert_eq!(&state.unavailable, &unavailable);
        proptest::prop_assert_eq!(&state.releasable, &releasable);
        proptest::prop_assert_eq!(state, pool.measure_for(&nodes, &held, &mine, now));
    }
}

/// The ledger as the runtime writes it: who holds what ([`counted`]), the pool measured from it,
/// the status read from both.
fn ledger_of(
    pool: &Pool,
    nodes: &[NodeInfo],
    holders: &BTreeMap<String, Vec<Holder>>,
    now: Timestamp,
) -> DisruptionBudgetStatus {
    let held: BTreeSet<String> = holders.keys().cloned().collect();
    let state = pool.measure(nodes, &held, now);
    let by_name: BTreeMap<String, &NodeInfo> = nodes.iter().map(|n| (n.name.clone(), n)).collect();
    let holdings: BTreeMap<String, Vec<Holding<'_>>> = (holders.iter())
        .map(|(n, hs)| {
            let hs = hs.iter().map(|holder| Holding {
                holder,
                message: None,
            });
            (n.clone(), hs.collect())
        })
        .collect();
    ledger::status(
        &LedgerInput {
            pool: &state,
            nodes: &by_name,
            holders: &holdings,
            old: &DisruptionBudgetStatus::default(),
            generation: Some(1),
        },
        now,
    )
}

#[test]
fn the_ledger_counts_what_the_live_claims_hold_not_a_lagging_record_of_what_was_let_go() {
    use crate::node::holders::{Hold, NodeClaims, counted};
    let nodes: Vec<NodeInfo> = ["n1", "n2", "n3", "n4", "n5"].map(|n| node(n, "a")).into();
    let now = at("2026-11-25T12:00:00Z");
    let pool = Pool::new(&budget("pool", None, IntOrString::Int(3)));
    let (k3s, reboot) = (plan("k3s"), Holder::Reboot { policy: "p".into() });
    let maintenance = Holder::Maintenance { name: "m".into() };
    // The Plan ran n1 and n2, let go of both (their Jobs are done) and took n3; the cached Plan
    // still shows `status.applying: [n1, n2]` (the watch has not delivered the status write).
    let mut claims = NodeClaims::default();
    let both = BTreeSet::from(["n1".to_string(), "n2".to_string()]);
    assert_eq!(claims.set(&k3s, &both), Ok(()));
    assert_eq!(
        claims.set(&k3s, &BTreeSet::from(["n3".to_string()])),
        Ok(())
    );
    let persisted = [
        Hold::new("n1", k3s.clone()),
        Hold::new("n2", k3s.clone()),
        // A RebootPolicy that has not decided in this process yet (after a restart): its record
        // is all there is, and it counts.
        Hold::new("n4", reboot.clone()),
        // A NodeMaintenance that waits: it has done nothing to its node.
        Hold {
            waiting: true,
            ..Hold::new("n5", maintenance)
        },
    ];
    let holders = counted(&claims, &persisted, []);
    assert_eq!(
        holders,
        BTreeMap::from([
            ("n3".to_string(), vec![k3s.clone()]),
            ("n4".to_string(), vec![reboot.clone()]),
        ])
    );
    let status = ledger_of(&pool, &nodes, &holders, now);
    let rows: Vec<String> = (status.holders.iter())
        .map(|e| format!("{} {}", e.node, e.holder))
        .collect();
    assert_eq!(rows, ["n3 plan/system-upgrade/k3s", "n4 rebootpolicy/p"]);
    assert_eq!(
        (status.max_unavailable, status.unavailable, status.allowed),
        (3, 2, 1)
    );
    // Once the Plan lets go of everything, its lagging record names no node either.
    claims.release_all(&k3s);
    let persisted = [Hold::new("n3", k3s.clone())];
    assert!(counted(&claims, &persisted, []).is_empty());
}
