use super::*;
use crate::node::NodeInfo;
use crate::node::budget::Budget;
use crate::node::drain::{OnDrainTimeout, PodKey};

static NO_BUDGET: Budget = Budget::unlimited();
use crate::node::handoff::{GatePolicy, Handoff, HandoffPolicy, Stage};
use crate::node::reboot::HealthObservation;
use crate::reboot_policy::api::{RebootNodeStatus, RebootRecord};
use kured::KuredView;
use request::REBOOT_REQUIRED_ANNOTATION;

fn t(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

const T0: &str = "2026-11-22T10:00:00Z";

fn at(secs: i64) -> Timestamp {
    t(T0) + jiff::SignedDuration::from_secs(secs)
}

fn node(name: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        ready: true,
        boot_id: format!("{name}-boot-1"),
        ..Default::default()
    }
}

/// A node whose agent asked for a reboot at its current boot.
fn asking(name: &str) -> NodeInfo {
    let mut n = node(name);
    n.annotations
        .insert(REBOOT_REQUIRED_ANNOTATION.into(), n.boot_id.clone());
    n
}

fn flatcar(name: &str, extra: &[(&str, &str)]) -> NodeInfo {
    let mut n = node(name);
    n.annotations
        .insert(format!("{FLATCAR_PREFIX}{REBOOT_NEEDED}"), "true".into());
    for (k, v) in extra {
        n.annotations
            .insert(format!("{FLATCAR_PREFIX}{k}"), v.to_string());
    }
    n
}

fn settings(concurrency: usize) -> PolicySettings {
    PolicySettings {
        concurrency,
        paused: false,
        window_closed: None,
        drain_delay: Duration::ZERO,
        drain_timeout: Some(Duration::from_secs(600)),
        on_drain_timeout: OnDrainTimeout::Fail,
        handoff: HandoffPolicy {
            timeout: Duration::from_secs(900),
            health_gate: None,
        },
        alerts: None,
        health_check: None,
        pulling: None,
        stop_on_failure: false,
        stopped: None,
        soak: None,
        soaking: Vec::new(),
        kured: KuredView::Off,
    }
}

/// What [`decide`] reads of a policy with no budget, alerts, checks or pull pods.
fn input<'a>(
    p: &'a RebootPolicy,
    spec: &'a Result<PolicySpec, String>,
    views: &'a [NodeView<'a>],
    kured: &'a KuredView,
) -> PolicyInput<'a> {
    PolicyInput {
        policy: p,
        spec,
        nodes: views,
        alerts: None,
        checks: None,
        budget: &NO_BUDGET,
        pull_pods: &[],
        namespace: "system-upgrade",
        kured,
    }
}

fn signals() -> Signals {
    Signals::of(None)
}

fn view(n: &NodeInfo) -> NodeView<'_> {
    NodeView::bare(n)
}

/// `n` with `remaining` pods left to drain, waiting for what `waiting_for` says.
fn left_to_drain<'a>(n: &'a NodeInfo, remaining: usize, waiting_for: &[&str]) -> NodeView<'a> {
    let mut v = view(n);
    v.drain = Some(DrainView {
        remaining,
        waiting_for: waiting_for.iter().map(|w| w.to_string()).collect(),
        to_evict: vec![],
        to_delete: vec![],
        volumes_only: false,
    });
    v
}

fn run(
    s: &PolicySettings,
    states: &BTreeMap<String, RebootState>,
    views: &[NodeView<'_>],
    now: Timestamp,
) -> NodeSteps {
    decide_nodes(
        s,
        &signals(),
        states,
        views,
        &Budget::default(),
        &BTreeMap::new(),
        now,
    )
}

fn started(d: &NodeSteps) -> Vec<&str> {
    d.states
        .iter()
        .filter(|(_, s)| matches!(s, RebootState::Draining { .. }))
        .map(|(n, _)| n.as_str())
        .collect()
}

fn actions_of<'a>(d: &'a NodeSteps, name: &str) -> Vec<&'a RebootAction> {
    d.actions
        .iter()
        .filter(|(n, a)| n == name && !matches!(a, RebootAction::Event { .. }))
        .map(|(_, a)| a)
        .collect()
}

fn reasons_of(d: &NodeSteps, name: &str) -> Vec<&'static str> {
    d.actions
        .iter()
        .filter_map(|(n, a)| match a {
            RebootAction::Event { reason, .. } if n == name => Some(*reason),
            _ => None,
        })
        .collect()
}

fn draining(name: &str, since: Timestamp) -> RebootState {
    RebootState::Draining {
        signal: Signal::Agent,
        before: format!("{name}-boot-1"),
        cordoned: true,
        since,
    }
}

fn rebooting(name: &str, since: Timestamp) -> RebootState {
    RebootState::Rebooting {
        signal: Signal::Agent,
        cordoned: true,
        handoff: Handoff::start(format!("{name}-boot-1"), since),
    }
}

#[test]
fn the_agents_request_counts_only_at_the_boot_it_was_made() {
    let n = asking("a");
    assert_eq!(requested(&n, &signals()), Some(Signal::Agent));
    let mut rebooted = n.clone();
    rebooted.boot_id = "a-boot-2".into();
    assert_eq!(requested(&rebooted, &signals()), None, "stale request");
    let off = Signals {
        agent: false,
        ..signals()
    };
    assert_eq!(requested(&n, &off), None);
    assert_eq!(requested(&node("b"), &signals()), None);
}

#[test]
fn update_agents_count_when_enabled_and_not_paused_or_in_progress() {
    let on = Signals {
        flatcar: true,
        ..signals()
    };
    assert_eq!(
        requested(&flatcar("f", &[]), &signals()),
        None,
        "off by default"
    );
    assert_eq!(requested(&flatcar("f", &[]), &on), Some(Signal::Flatcar));
    assert_eq!(
        requested(&flatcar("f", &[(REBOOT_PAUSED, "true")]), &on),
        None
    );
    assert_eq!(
        requested(&flatcar("f", &[(REBOOT_IN_PROGRESS, "true")]), &on),
        None,
        "the agent has not reported back from its reboot yet"
    );
    let mut cluo = node("c");
    cluo.annotations.insert(
        format!("{CONTAINER_LINUX_PREFIX}{REBOOT_NEEDED}"),
        "true".into(),
    );
    let both = Signals {
        container_linux: true,
        ..on.clone()
    };
    assert_eq!(requested(&cluo, &both), Some(Signal::ContainerLinux));
    assert_eq!(requested(&cluo, &on), None);
}

#[test]
fn the_node_index_keeps_every_signal_annotation() {
    let mut keys = vec![
        REBOOT_REQUIRED_ANNOTATION.to_string(),
        CONDITION_HANDLED.to_string(),
    ];
    for prefix in [FLATCAR_PREFIX, CONTAINER_LINUX_PREFIX] {
        for key in [REBOOT_NEEDED, REBOOT_IN_PROGRESS, REBOOT_OK, REBOOT_PAUSED] {
            keys.push(format!("{prefix}{key}"));
        }
    }
    assert_eq!(SIGNAL_ANNOTATIONS.map(String::from).to_vec(), keys);
}

fn with_condition(name: &str, kind: &str, at: &str) -> NodeInfo {
    let mut n = node(name);
    n.true_conditions.insert(kind.into(), at.into());
    n
}

#[test]
fn a_named_condition_asks_once_per_occurrence() {
    let npd = Signals {
        node_conditions: vec!["KernelDeadlock".into(), "ReadonlyFilesystem".into()],
        ..signals()
    };
    let n = with_condition("a", "KernelDeadlock", "2026-11-22T09:00:00Z");
    assert_eq!(requested(&n, &signals()), None, "only named conditions");
    assert_eq!(requested(&n, &npd), Some(Signal::NodeCondition));
    assert_eq!(
        condition_marker(&n, &npd).as_deref(),
        Some("KernelDeadlock=2026-11-22T09:00:00Z")
    );
    // Starting the reboot records the occurrence first.
    let d = decide_nodes(
        &settings(1),
        &npd,
        &BTreeMap::new(),
        &[view(&n)],
        &Budget::default(),
        &BTreeMap::new(),
        t(T0),
    );
    assert_eq!(
        actions_of(&d, "a")[0],
        &RebootAction::MarkConditions("KernelDeadlock=2026-11-22T09:00:00Z".into())
    );
    // Handled: the same occurrence, still True after the reboot, asks nothing.
    let mut handled = n.clone();
    handled.annotations.insert(
        CONDITION_HANDLED.into(),
        "KernelDeadlock=2026-11-22T09:00:00Z".into(),
    );
    assert_eq!(requested(&handled, &npd), None);
    // Set anew (a later transition), or another named condition: asks again.
    handled
        .true_conditions
        .insert("KernelDeadlock".into(), "2026-11-22T11:00:00Z".into());
    assert_eq!(requested(&handled, &npd), Some(Signal::NodeCondition));
    let mut other = n.clone();
    other.annotations.insert(
        CONDITION_HANDLED.into(),
        "KernelDeadlock=2026-11-22T09:00:00Z".into(),
    );
    other
        .true_conditions
        .insert("ReadonlyFilesystem".into(), "2026-11-22T10:00:00Z".into());
    assert_eq!(requested(&other, &npd), Some(Signal::NodeCondition));
}

#[test]
fn at_most_concurrency_nodes_start_in_name_order() {
    let nodes = [asking("c"), asking("a"), asking("b"), node("d")];
    let views: Vec<_> = nodes.iter().map(view).collect();
    let d = run(&settings(2), &BTreeMap::new(), &views, t(T0));
    assert_eq!(started(&d), vec!["a", "b"]);
    assert_eq!(
        actions_of(&d, "a"),
        vec![&RebootAction::Cordon, &RebootAction::Drain]
    );
    assert_eq!((d.wanting, d.rebooting), (1, 2));
    let c = d.nodes.iter().find(|n| n.name == "c").expect("c listed");
    assert_eq!(c.phase, RebootPhase::Wanting);
    assert_eq!(c.reason.as_deref(), Some("ConcurrencyReached"));
    assert!(!d.nodes.iter().any(|n| n.name == "d"), "d wants nothing");
    // c reboots next (its PreferNoSchedule taint, when the policy asks for it).
    assert_eq!(d.next_up, ["c"]);
}

/// FLUO removed (or still running) while its update-agent reboots a node under FLUO's grant: that
/// node is down, and takes a slot, until the agent says it is back.
#[test]
fn a_node_an_update_agent_reboots_on_its_own_takes_a_slot() {
    let fluo = Signals {
        agent: false,
        flatcar: true,
        ..signals()
    };
    let decide = |signals: &Signals, nodes: &[NodeInfo]| {
        let views: Vec<_> = nodes.iter().map(view).collect();
        let (states, since) = (BTreeMap::new(), BTreeMap::new());
        let budget = Budget::default();
        decide_nodes(
            &settings(1),
            signals,
            &states,
            &views,
            &budget,
            &since,
            t(T0),
        )
    };
    let mut nodes = [
        flatcar("a", &[(REBOOT_IN_PROGRESS, "true"), (REBOOT_OK, "true")]),
        flatcar("b", &[]),
    ];
    let d = decide(&fluo, &nodes);
    assert!(started(&d).is_empty(), "a's reboot takes the one slot");
    let b = d.nodes.iter().find(|n| n.name == "b").expect("b listed");
    assert_eq!(b.reason.as_deref(), Some("ConcurrencyReached"));
    assert!(
        !d.nodes.iter().any(|n| n.name == "a"),
        "a is not the policy's"
    );
    assert!(actions_of(&d, "a").is_empty(), "nothing is done to a");
    // An agent the policy does not listen to says nothing (and b wants nothing either).
    let d = decide(&signals(), &nodes);
    assert!(started(&d).is_empty() && d.nodes.is_empty());
    // Back: the agent clears both flags, and b may start.
    for flag in [REBOOT_IN_PROGRESS, REBOOT_NEEDED] {
        (nodes[0].annotations).insert(format!("{FLATCAR_PREFIX}{flag}"), "false".into());
    }
    assert_eq!(started(&decide(&fluo, &nodes)), vec!["b"]);
}

#[test]
fn nodes_held_by_other_operations_use_the_same_budget() {
    let nodes = [asking("a"), asking("b"), node("p")];
    let mut views: Vec<_> = nodes.iter().map(view).collect();
    views[2].held_by = Some("plan system-upgrade/k3s".into());
    let d = run(&settings(2), &BTreeMap::new(), &views, t(T0));
    assert_eq!(started(&d), vec!["a"], "the Plan's node takes one slot");

    // A node that wants a reboot but is held elsewhere waits, naming the holder.
    views[0].held_by = Some("nodemaintenance disk".into());
    let d = run(&settings(3), &BTreeMap::new(), &views, t(T0));
    assert_eq!(started(&d), vec!["b"]);
    assert!(d.next_up.is_empty(), "a waits for its holder, not its turn");
    let a = &d.nodes[0];
    assert_eq!(
        (a.phase, a.reason.as_deref()),
        (RebootPhase::Blocked, Some("NodeBusy"))
    );
    assert!(
        a.message
            .as_deref()
            .unwrap_or("")
            .contains("nodemaintenance disk")
    );
}

#[test]
fn an_already_cordoned_node_is_not_cordoned_nor_uncordoned() {
    let mut n = asking("a");
    n.unschedulable = true;
    let d = run(&settings(1), &BTreeMap::new(), &[view(&n)], t(T0));
    assert_eq!(actions_of(&d, "a"), vec![&RebootAction::Drain]);
    let state = d.states["a"].clone();
    assert!(matches!(
        state,
        RebootState::Draining {
            cordoned: false,
            ..
        }
    ));
    // Drained, rebooted, back: finished without an uncordon.
    let mut drained = view(&n);
    drained.drain = Some(DrainView::default());
    let d = run(&settings(1), &d.states, &[drained], at(10));
    let mut back = n.clone();
    back.boot_id = "a-boot-2".into();
    let d = run(&settings(1), &d.states, &[view(&back)], at(60));
    assert_eq!(
        actions_of(&d, "a"),
        vec![&RebootAction::Finish {
            signal: Signal::Agent,
            uncordon: false,
            rebooted: true
        }]
    );
}

#[test]
fn window_pause_alerts_and_blocking_pods_hold_new_reboots_and_say_why() {
    let n = asking("a");
    let cases: Vec<(PolicySettings, Vec<String>, RebootPhase, &str)> = vec![
        (
            PolicySettings {
                paused: true,
                ..settings(1)
            },
            vec![],
            RebootPhase::Wanting,
            "Paused",
        ),
        (
            PolicySettings {
                window_closed: Some(Some(at(3600))),
                ..settings(1)
            },
            vec![],
            RebootPhase::WaitingForWindow,
            "OutsideWindow",
        ),
        (
            PolicySettings {
                alerts: Some("Prometheus at http://p:9090 could not be asked: timeout".into()),
                ..settings(1)
            },
            vec![],
            RebootPhase::Blocked,
            "AlertsFiring",
        ),
        (
            PolicySettings {
                health_check: Some((
                    "HealthCheckFailing",
                    "health check CephCluster rook-ceph/rook-ceph fails: the expression is false"
                        .into(),
                )),
                ..settings(1)
            },
            vec![],
            RebootPhase::Blocked,
            "HealthCheckFailing",
        ),
        (
            settings(1),
            vec!["db/primary".into()],
            RebootPhase::Blocked,
            "BlockingPods",
        ),
    ];
    for (s, pods, want_phase, want_reason) in cases {
        let mut v = view(&n);
        v.blocking_pods = pods;
        let d = run(&s, &BTreeMap::new(), &[v], t(T0));
        assert!(d.states.is_empty(), "{want_reason}: nothing starts");
        assert!(actions_of(&d, "a").is_empty());
        assert_eq!(d.nodes[0].phase, want_phase);
        assert_eq!(d.nodes[0].reason.as_deref(), Some(want_reason));
        assert_eq!(d.wanting, 1);
        assert!(d.recheck.is_some());
    }
}

#[test]
fn a_closed_window_or_a_pause_never_interrupts_a_reboot_under_way() {
    let states = BTreeMap::from([("a".to_string(), rebooting("a", t(T0)))]);
    let n = asking("a");
    let s = PolicySettings {
        paused: true,
        window_closed: Some(None),
        ..settings(1)
    };
    let d = run(&s, &states, &[view(&n)], at(10));
    assert!(matches!(d.states["a"], RebootState::Rebooting { .. }));
    assert_eq!(d.rebooting, 1);
}

#[test]
fn a_drain_finishes_then_the_node_is_told_to_reboot_until_it_does() {
    let mut n = asking("a");
    n.unschedulable = true;
    let states = BTreeMap::from([("a".to_string(), draining("a", t(T0)))]);
    let mut v = left_to_drain(
        &n,
        2,
        &["shop/web-1: PodDisruptionBudget shop/web allows no disruption"],
    );
    let d = run(&settings(1), &states, &[v.clone()], at(30));
    assert_eq!(actions_of(&d, "a"), vec![&RebootAction::Drain]);
    assert!(reasons_of(&d, "a").is_empty(), "not drained yet");
    assert!(
        d.nodes[0]
            .message
            .as_deref()
            .unwrap_or("")
            .contains("PodDisruptionBudget")
    );

    v.drain = Some(DrainView::default());
    let d = run(&settings(1), &states, &[v], at(40));
    let reboot = RebootAction::Reboot {
        signal: Signal::Agent,
        before: "a-boot-1".into(),
    };
    assert_eq!(actions_of(&d, "a"), vec![&reboot]);
    assert_eq!(d.nodes[0].phase, RebootPhase::Rebooting);
    // Each step told once, in order (what notifications hear).
    assert_eq!(reasons_of(&d, "a"), vec!["Drained", "Rebooting"]);

    // Asked again while the boot is unchanged (a crash may have lost the first ask)...
    let d2 = run(&settings(1), &d.states, &[view(&n)], at(50));
    assert_eq!(actions_of(&d2, "a"), vec![&reboot]);
    // ...unless the reboot pod is there: a node going down is not asked again and again.
    let asked = NodeView {
        reboot_pod: true,
        ..view(&n)
    };
    let d2b = run(&settings(1), &d.states, &[asked], at(55));
    assert!(actions_of(&d2b, "a").is_empty());
    assert_eq!(d2b.rebooting, 1);

    // Down (new boot, not Ready yet): nothing more to ask.
    let mut down = n.clone();
    down.boot_id = "a-boot-2".into();
    down.ready = false;
    let d3 = run(&settings(1), &d2.states, &[view(&down)], at(60));
    assert!(actions_of(&d3, "a").is_empty());
    assert_eq!(d3.rebooting, 1);
}

#[test]
fn an_update_agent_s_grant_is_given_until_it_is_on_the_node() {
    let states = BTreeMap::from([(
        "f".to_string(),
        RebootState::Rebooting {
            signal: Signal::Flatcar,
            cordoned: false,
            handoff: Handoff::start("f-boot-1".to_string(), t(T0)),
        },
    )]);
    let n = flatcar("f", &[]);
    let d = run(&settings(1), &states, &[view(&n)], at(10));
    let grant = RebootAction::Reboot {
        signal: Signal::Flatcar,
        before: "f-boot-1".into(),
    };
    assert_eq!(actions_of(&d, "f"), vec![&grant]);
    let granted = flatcar("f", &[(REBOOT_OK, "true")]);
    let d = run(&settings(1), &states, &[view(&granted)], at(20));
    assert!(actions_of(&d, "f").is_empty(), "granted: not again");
    assert_eq!(d.rebooting, 1);
}

#[test]
fn the_health_gate_holds_the_slot_until_its_pods_are_ready() {
    let s = PolicySettings {
        handoff: HandoffPolicy {
            timeout: Duration::from_secs(900),
            health_gate: Some(GatePolicy {
                timeout: Duration::from_secs(600),
                pods: "app=cni".into(),
            }),
        },
        ..settings(1)
    };
    let states = BTreeMap::from([("a".to_string(), rebooting("a", t(T0)))]);
    let mut back = asking("a");
    back.boot_id = "a-boot-2".into();
    let unhealthy = HealthObservation {
        not_ready: vec!["kube-system/cni-x".into()],
        total: 1,
    };
    let mut v = view(&back);
    v.health = Some(&unhealthy);
    // Another node wants a reboot: it must wait for the gate.
    let other = asking("b");
    let d = run(&s, &states, &[v.clone(), view(&other)], at(60));
    assert_eq!(d.nodes[0].phase, RebootPhase::WaitingForHealth);
    assert!(!d.states.contains_key("b"));
    let healthy = HealthObservation {
        not_ready: vec![],
        total: 1,
    };
    v.health = Some(&healthy);
    let d = run(&s, &d.states, &[v, view(&other)], at(70));
    assert_eq!(
        actions_of(&d, "a"),
        vec![&RebootAction::Finish {
            signal: Signal::Agent,
            uncordon: true,
            rebooted: true
        }]
    );
    assert_eq!(
        started(&d),
        vec!["b"],
        "the freed slot goes to the next node at once"
    );
    assert_eq!(
        d.rebooted,
        vec![RebootRecord {
            name: "a".into(),
            at: "2026-11-22T10:01:10Z".into(),
            signal: Signal::Agent,
            boot_id: Some("a-boot-2".into()),
        }]
    );
}

#[test]
fn a_node_that_never_comes_back_fails_holding_its_slot_and_may_recover() {
    let states = BTreeMap::from([("a".to_string(), rebooting("a", t(T0)))]);
    let n = asking("a");
    let d = run(
        &settings(1),
        &states,
        &[view(&n), view(&asking("b"))],
        at(901),
    );
    assert_eq!(d.nodes[0].phase, RebootPhase::Failed);
    assert_eq!(d.nodes[0].reason.as_deref(), Some("RebootTimedOut"));
    assert!(d.summary.contains("failed: a"), "{}", d.summary);
    assert!(d.actions.iter().any(|(n, a)| n == "a"
        && matches!(
            a,
            RebootAction::Event {
                warning: true,
                reason: "RebootTimedOut",
                ..
            }
        )));
    assert!(
        !d.states.contains_key("b"),
        "the failed node keeps its slot"
    );
    let mut back = n.clone();
    back.boot_id = "a-boot-2".into();
    let d = run(&settings(1), &d.states, &[view(&back)], at(2000));
    assert!(matches!(
        actions_of(&d, "a")[..],
        [RebootAction::Finish { .. }]
    ));
}

#[test]
fn a_drain_delay_sets_the_labels_first_then_cordons_and_drains_once_it_passed() {
    let s = PolicySettings {
        drain_delay: Duration::from_secs(300),
        ..settings(1)
    };
    let n = asking("a");
    let d = run(&s, &BTreeMap::new(), &[view(&n)], at(0));
    assert_eq!(started(&d), vec!["a"]);
    assert_eq!(actions_of(&d, "a"), vec![&RebootAction::Label]);
    assert_eq!(reasons_of(&d, "a"), vec!["Draining"]);
    let said = |d: &NodeSteps| d.nodes[0].message.clone().unwrap_or_default();
    assert_eq!(
        said(&d),
        "cordoning and draining in 5m0s (spec.drain.delay)"
    );
    assert_eq!(d.recheck, Some(Duration::from_secs(300)));
    assert_eq!(d.rebooting, 1, "the node holds its slot while it waits");
    // Nothing to evict does not end the wait: nothing happens to the node before its time.
    let v = left_to_drain(&n, 0, &[]);
    let mid = run(&s, &d.states, std::slice::from_ref(&v), at(120));
    assert!(actions_of(&mid, "a").is_empty(), "{:?}", mid.actions);
    assert!(matches!(mid.states["a"], RebootState::Draining { .. }));
    assert_eq!(
        said(&mid),
        "cordoning and draining in 3m0s (spec.drain.delay)"
    );
    assert_eq!(mid.recheck, Some(Duration::from_secs(180)));
    // Its time: cordoned, and (nothing left to evict) told to reboot.
    let due = run(&s, &d.states, &[v], at(300));
    let actions = actions_of(&due, "a");
    assert_eq!(actions.first(), Some(&&RebootAction::Cordon), "{actions:?}");
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, RebootAction::Reboot { .. })),
        "{actions:?}"
    );
    assert!(matches!(due.states["a"], RebootState::Rebooting { .. }));
}

#[test]
fn a_drains_timeout_counts_from_the_end_of_its_delay() {
    let s = PolicySettings {
        drain_delay: Duration::from_secs(300),
        ..settings(1)
    };
    let states = BTreeMap::from([("a".to_string(), draining("a", t(T0)))]);
    let mut n = asking("a");
    n.unschedulable = true;
    let v = left_to_drain(
        &n,
        1,
        &["db/primary: PodDisruptionBudget db/pdb allows no disruption"],
    );
    // 600 s after the node was taken, 300 s into the drain of 600: evicting still.
    let d = run(&s, &states, std::slice::from_ref(&v), at(600));
    assert_eq!(actions_of(&d, "a"), vec![&RebootAction::Drain]);
    let d = run(&s, &states, &[v], at(900));
    assert_eq!(d.nodes[0].reason.as_deref(), Some(DRAIN_TIMED_OUT));
}

#[test]
fn a_drain_delay_must_be_a_positive_duration() {
    use crate::reboot_policy::api::{RebootDrain, RebootPolicySpec};
    for delay in ["soon", "-5m", "0s"] {
        let spec = RebootPolicySpec {
            drain: Some(RebootDrain {
                delay: Some(delay.into()),
                ..RebootDrain::default()
            }),
            ..RebootPolicySpec::default()
        };
        let e = read_spec(&spec, "img").expect_err(delay);
        assert!(e.starts_with("spec.drain.delay must be"), "{e}");
    }
    let cordon_only = RebootPolicySpec {
        drain: Some(RebootDrain {
            enabled: Some(false),
            delay: Some("90s".into()),
            ..RebootDrain::default()
        }),
        ..RebootPolicySpec::default()
    };
    let spec = read_spec(&cordon_only, "img").expect("valid");
    assert_eq!(
        spec.drain_delay,
        Duration::from_secs(90),
        "before a cordon too"
    );
}

#[test]
fn a_drain_that_times_out_gives_the_node_back_and_retries_later() {
    let states = BTreeMap::from([("a".to_string(), draining("a", t(T0)))]);
    let n = asking("a");
    let v = left_to_drain(
        &n,
        1,
        &["db/primary: PodDisruptionBudget db/pdb allows no disruption"],
    );
    let d = run(&settings(1), &states, std::slice::from_ref(&v), at(600));
    assert_eq!(
        actions_of(&d, "a"),
        vec![&RebootAction::Finish {
            signal: Signal::Agent,
            uncordon: true,
            rebooted: false
        }]
    );
    assert_eq!(d.nodes[0].reason.as_deref(), Some(DRAIN_TIMED_OUT));
    assert!(
        d.nodes[0]
            .message
            .as_deref()
            .unwrap_or("")
            .contains("db/primary")
    );
    assert_eq!(d.rebooting, 0, "a failed drain frees its slot");
    let later = run(&settings(1), &d.states, std::slice::from_ref(&v), at(700));
    assert!(matches!(later.states["a"], RebootState::DrainFailed { .. }));
    let retry = run(
        &settings(1),
        &d.states,
        &[v],
        at(600) + jiff::SignedDuration::from_secs(601),
    );
    assert_eq!(started(&retry), vec!["a"]);
}

#[test]
fn a_drain_past_its_timeout_deletes_the_pods_left_when_asked_then_reboots() {
    let states = BTreeMap::from([("a".to_string(), draining("a", t(T0)))]);
    let mut n = asking("a");
    n.unschedulable = true;
    let primary = PodKey {
        namespace: "db".into(),
        name: "primary".into(),
    };
    let mut v = view(&n);
    v.drain = Some(DrainView {
        remaining: 1,
        waiting_for: vec!["db/primary".into()],
        to_evict: vec![primary.clone()],
        to_delete: vec![primary.clone()],
        volumes_only: false,
    });
    let s = PolicySettings {
        on_drain_timeout: OnDrainTimeout::DeletePods,
        ..settings(1)
    };
    let before = run(&s, &states, &[v.clone()], at(599));
    assert_eq!(actions_of(&before, "a"), vec![&RebootAction::Drain]);
    let d = run(&s, &states, &[v.clone()], at(600));
    assert_eq!(
        actions_of(&d, "a"),
        vec![&RebootAction::DeletePods(vec![primary.clone()])]
    );
    let events: Vec<(&bool, &str, &String)> = (d.actions.iter())
        .filter_map(|(_, a)| match a {
            RebootAction::Event {
                warning,
                reason,
                message,
            } => Some((warning, *reason, message)),
            _ => None,
        })
        .collect();
    assert_eq!(
        events,
        [(
            &true,
            "DrainDeletedPod",
            &"Deleted pod db/primary from node a: the drain did not evict it within 10m0s \
              (spec.disruption.onDrainTimeout: DeletePods)"
                .to_string()
        )]
    );
    assert!(matches!(d.states["a"], RebootState::Draining { .. }));
    assert_eq!(
        d.nodes[0].message.as_deref(),
        Some("the drain did not finish within 10m0s; deleting 1 pods left to evict: db/primary")
    );
    assert_eq!(d.rebooting, 1, "the node keeps its slot");
    // The pod goes: the reboot is asked for.
    v.drain = Some(DrainView::default());
    let done = run(&s, &d.states, &[v], at(605));
    assert!(matches!(done.states["a"], RebootState::Rebooting { .. }));
}

#[test]
fn volumes_still_attached_hold_the_reboot_and_fail_the_drain_past_its_timeout() {
    let states = BTreeMap::from([("a".to_string(), draining("a", t(T0)))]);
    let mut n = asking("a");
    n.unschedulable = true;
    let mut v = view(&n);
    let pods = crate::node::drain::PodsView {
        attached: vec!["csi-1 (pv-a)".into()],
        ..Default::default()
    };
    v.drain = Some(DrainView::of(&pods));
    let s = PolicySettings {
        on_drain_timeout: OnDrainTimeout::DeletePods,
        ..settings(1)
    };
    let d = run(&s, &states, &[v.clone()], at(60));
    assert!(
        matches!(d.states["a"], RebootState::Draining { .. }),
        "no reboot yet"
    );
    assert_eq!(
        d.nodes[0].message.as_deref(),
        Some("waiting for volume attachment csi-1 (pv-a) to detach")
    );
    let d = run(&s, &states, &[v.clone()], at(600));
    assert!(
        matches!(d.states["a"], RebootState::Draining { .. }),
        "waited for"
    );
    assert_eq!(
        d.nodes[0].message.as_deref(),
        Some(
            "the drain did not finish within 10m0s; waiting for volume attachment csi-1 (pv-a) to detach"
        )
    );
    assert!(actions_of(&d, "a").is_empty(), "{:?}", d.actions);
    // With Fail, the volume fails the drain like a pod would.
    let d = run(&settings(1), &states, &[v], at(600));
    assert!(matches!(d.states["a"], RebootState::DrainFailed { .. }));
    assert_eq!(d.nodes[0].reason.as_deref(), Some(DRAIN_TIMED_OUT));
}

#[test]
fn a_node_that_rebooted_on_its_own_during_the_drain_goes_straight_to_its_hand_off() {
    let states = BTreeMap::from([("a".to_string(), draining("a", t(T0)))]);
    let mut n = asking("a");
    n.boot_id = "a-boot-2".into();
    let d = run(&settings(1), &states, &[view(&n)], at(20));
    assert!(matches!(
        actions_of(&d, "a")[..],
        [RebootAction::Finish { .. }]
    ));
    assert!(d.states.is_empty());
    // Never drained: no Drained event, only the way back.
    assert_eq!(reasons_of(&d, "a"), vec!["Rebooting", "Rebooted"]);
}

#[test]
fn a_deleted_node_is_forgotten_with_a_warning() {
    let states = BTreeMap::from([("gone".to_string(), rebooting("gone", t(T0)))]);
    let d = run(&settings(1), &states, &[], at(10));
    assert!(d.states.is_empty());
    assert!(d.actions.iter().any(|(_, a)| matches!(
        a,
        RebootAction::Event {
            reason: "NodeGone",
            ..
        }
    )));
}

/// A state as this slipway writes it: who cordoned the node is on the node, not in the status.
fn written(state: RebootState) -> RebootState {
    match state {
        RebootState::Draining {
            signal,
            before,
            since,
            ..
        } => RebootState::Draining {
            signal,
            before,
            cordoned: false,
            since,
        },
        RebootState::Rebooting {
            signal, handoff, ..
        } => RebootState::Rebooting {
            signal,
            cordoned: false,
            handoff,
        },
        other => other,
    }
}

#[test]
fn an_older_slipways_cordon_flag_is_still_read() {
    let status = written(draining("a", t(T0))).to_status("a", String::new());
    assert_eq!(
        status.cordoned, None,
        "no longer written for a node this slipway started"
    );
    let old = draining("a", t(T0)).to_status("a", String::new());
    assert_eq!(
        old.cordoned,
        Some(true),
        "kept until the node is given back"
    );
    assert_eq!(
        RebootState::from_status(&old, at(99)),
        Some(draining("a", t(T0)))
    );
}

#[test]
fn states_read_back_from_status_as_written() {
    let cases = [
        written(draining("a", t(T0))),
        written(rebooting("a", t(T0))),
        RebootState::Rebooting {
            signal: Signal::Flatcar,
            cordoned: false,
            handoff: Handoff::AwaitingHealth {
                before: "b1".into(),
                since: t(T0),
            },
        },
        RebootState::Rebooting {
            signal: Signal::ContainerLinux,
            cordoned: false,
            handoff: Handoff::TimedOut {
                stage: Stage::Health,
                before: "b1".into(),
                since: t(T0),
                message: "pods not Ready".into(),
            },
        },
        RebootState::DrainFailed {
            signal: Signal::Agent,
            message: "stuck".into(),
            since: t(T0),
        },
        RebootState::Kured {
            before: "b1".into(),
            cordoned: true,
            since: t(T0),
        },
    ];
    for state in cases {
        let message = match &state {
            RebootState::Rebooting {
                handoff: Handoff::TimedOut { message, .. },
                ..
            }
            | RebootState::DrainFailed { message, .. } => message.clone(),
            _ => String::new(),
        };
        let status = state.to_status("a", message);
        assert_eq!(
            RebootState::from_status(&status, at(99)),
            Some(state.clone()),
            "{status:?}"
        );
    }
    let waiting = RebootNodeStatus {
        name: "a".into(),
        phase: RebootPhase::Wanting,
        signal: Some(Signal::Agent),
        ..Default::default()
    };
    assert_eq!(RebootState::from_status(&waiting, t(T0)), None);
}

#[test]
fn a_restarted_controller_continues_from_the_status_without_starting_more() {
    let nodes = [asking("a"), asking("b"), asking("c")];
    let views: Vec<_> = nodes.iter().map(view).collect();
    let first = run(&settings(2), &BTreeMap::new(), &views, t(T0));
    // A new process reads only status.nodes.
    let (restored, waiting) = read_status(&first.nodes, at(5));
    assert_eq!(waiting.keys().collect::<Vec<_>>(), vec!["c"]);
    assert_eq!(restored, first.states);
    // The first decision's cordons landed.
    let mut cordoned = nodes.clone();
    for n in cordoned.iter_mut().filter(|n| n.name != "c") {
        n.unschedulable = true;
    }
    let views: Vec<_> = cordoned.iter().map(view).collect();
    let again = run(&settings(2), &restored, &views, at(5));
    assert_eq!(started(&again), vec!["a", "b"]);
    assert!(!again.states.contains_key("c"));
    assert!(
        !again
            .actions
            .iter()
            .any(|(_, a)| matches!(a, RebootAction::Cordon)),
        "no second cordon"
    );
}

#[test]
fn a_cordon_or_a_condition_record_that_did_not_land_is_asked_again() {
    let mut n = with_condition("a", "KernelDeadlock", "2026-11-22T09:00:00Z");
    let npd = Signals {
        node_conditions: vec!["KernelDeadlock".into()],
        ..signals()
    };
    let state = RebootState::Draining {
        signal: Signal::NodeCondition,
        before: n.boot_id.clone(),
        cordoned: false,
        since: t(T0),
    };
    let states = BTreeMap::from([("a".to_string(), state)]);
    let v = view(&n);
    let d = decide_nodes(
        &settings(1),
        &npd,
        &states,
        &[v],
        &Budget::default(),
        &BTreeMap::new(),
        at(5),
    );
    let marker = "KernelDeadlock=2026-11-22T09:00:00Z".to_string();
    assert_eq!(
        actions_of(&d, "a"),
        [
            &RebootAction::MarkConditions(marker.clone()),
            &RebootAction::Cordon,
            &RebootAction::Drain
        ],
        "both before the drain goes on"
    );
    n.unschedulable = true;
    n.annotations.insert(CONDITION_HANDLED.into(), marker);
    let v = view(&n);
    let d = decide_nodes(
        &settings(1),
        &npd,
        &states,
        &[v],
        &Budget::default(),
        &BTreeMap::new(),
        at(10),
    );
    assert_eq!(actions_of(&d, "a"), [&RebootAction::Drain], "both landed");
}

#[test]
fn the_summary_says_what_the_policy_does() {
    let d = run(&settings(1), &BTreeMap::new(), &[view(&node("a"))], t(T0));
    assert_eq!(d.summary, "no node wants a reboot");
    let nodes = [asking("a"), asking("b")];
    let views: Vec<_> = nodes.iter().map(view).collect();
    let d = run(&settings(1), &BTreeMap::new(), &views, t(T0));
    assert_eq!(d.summary, "1 rebooting; 1 waiting (1 of 1 slots taken)");
}

#[test]
fn the_history_keeps_the_newest_twenty_newest_first() {
    let record = |n: usize| RebootRecord {
        name: format!("n{n}"),
        at: T0.into(),
        signal: Signal::Agent,
        boot_id: None,
    };
    let previous: Vec<RebootRecord> = (0..20).rev().map(record).collect();
    let history = rebooted_history(&previous, &[record(20), record(21)]);
    assert_eq!(history.len(), REBOOTED_KEPT);
    assert_eq!(history[0].name, "n21");
    assert_eq!(history[1].name, "n20");
    assert_eq!(history[2].name, "n19");
    assert_eq!(history[19].name, "n2", "the oldest go");
    assert_eq!(rebooted_history(&[], &[]), vec![]);
}

#[test]
fn the_phase_gauges_count_status_nodes_with_their_oldest_since() {
    let entry = |name: &str, phase: RebootPhase, secs: i64| RebootNodeStatus {
        name: name.into(),
        phase,
        since: Some(crate::common::rfc3339(at(secs))),
        ..Default::default()
    };
    let status = RebootPolicyStatus {
        nodes: vec![
            entry("a", RebootPhase::Wanting, 0),
            entry("b", RebootPhase::Draining, 60),
            entry("c", RebootPhase::Wanting, -60),
        ],
        ..Default::default()
    };
    let got: Vec<(&str, usize, Option<Timestamp>)> = phases(Some(&status))
        .into_iter()
        .map(|p| (p.phase, p.nodes, p.oldest_since))
        .collect();
    assert_eq!(
        got,
        vec![("Draining", 1, Some(at(60))), ("Wanting", 2, Some(at(-60)))]
    );
}

#[test]
fn soak_keeps_a_rebooted_nodes_slot_until_it_is_over() {
    let soaking = PolicySettings {
        soak: Some(Duration::from_secs(300)),
        ..settings(1)
    };
    let b = asking("b");
    // Node a comes back in this decision: b waits for a's soak, not for a's reboot.
    let mut back = node("a");
    back.boot_id = "a-boot-2".into();
    let states = BTreeMap::from([("a".to_string(), rebooting("a", at(0)))]);
    let d = run(&soaking, &states, &[view(&back), view(&b)], at(60));
    assert_eq!(d.rebooted.len(), 1);
    assert!(started(&d).is_empty());
    let waiting = d.nodes.iter().find(|n| n.name == "b").expect("b waits");
    assert_eq!(waiting.reason.as_deref(), Some("Soaking"));
    assert!(
        waiting
            .message
            .as_deref()
            .is_some_and(|m| m.contains("node a is back and soaks until 2026")),
        "{waiting:?}"
    );
    assert!(d.recheck.is_some_and(|r| r <= Duration::from_secs(300)));
    // Later decisions read the soak from the history.
    let history = |until_secs| PolicySettings {
        soaking: vec![("a".to_string(), at(until_secs))],
        ..soaking.clone()
    };
    let d = run(
        &history(360),
        &BTreeMap::new(),
        &[view(&node("a")), view(&b)],
        at(200),
    );
    assert!(started(&d).is_empty(), "still soaking");
    // Over: b starts.
    let d = run(
        &settings(1),
        &BTreeMap::new(),
        &[view(&node("a")), view(&b)],
        at(361),
    );
    assert_eq!(started(&d), ["b"]);
}

#[test]
fn the_drain_takes_kureds_pod_selector_and_skip_wait_and_names_them_when_wrong() {
    use crate::reboot_policy::api::{RebootDrain, RebootPolicySpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    let with = |drain: RebootDrain| RebootPolicySpec {
        drain: Some(drain),
        ..Default::default()
    };
    let selector = LabelSelector {
        match_labels: Some([("drain".to_string(), "yes".to_string())].into()),
        ..Default::default()
    };
    let spec = read_spec(
        &with(RebootDrain {
            pod_selector: Some(selector),
            skip_wait_for_delete_timeout: Some("1m".into()),
            ..Default::default()
        }),
        "busybox",
    )
    .expect("spec");
    let (_, options) = spec.drain.expect("a drain");
    let labels = |v: &str| [("drain".to_string(), v.to_string())].into();
    let selected = options.pod_selector.expect("a pod selector");
    assert!(selected.matches(&labels("yes")) && !selected.matches(&labels("no")));
    assert_eq!(
        options.skip_wait_for_delete_timeout,
        Some(std::time::Duration::from_secs(60))
    );
    let bad = LabelSelector {
        match_expressions: Some(vec![LabelSelectorRequirement {
            key: "drain".into(),
            operator: "Sometimes".into(),
            values: None,
        }]),
        ..Default::default()
    };
    let e = read_spec(
        &with(RebootDrain {
            pod_selector: Some(bad),
            ..Default::default()
        }),
        "busybox",
    )
    .expect_err("a bad operator");
    assert!(e.starts_with("spec.drain.podSelector is invalid"), "{e}");
    let e = read_spec(
        &with(RebootDrain {
            skip_wait_for_delete_timeout: Some("soon".into()),
            ..Default::default()
        }),
        "busybox",
    )
    .expect_err("not a duration");
    assert!(e.starts_with("spec.drain.skipWaitForDeleteTimeout"), "{e}");
}

#[test]
fn a_node_gets_its_labels_before_and_after_its_reboot_as_kureds_flags_say() {
    use crate::reboot_policy::api::{RebootNodeLabels, RebootPolicy, RebootPolicySpec};
    let p = RebootPolicy::new(
        "nightly",
        RebootPolicySpec {
            node_labels: Some(RebootNodeLabels {
                before_reboot: [
                    ("reboot".to_string(), "pending".to_string()),
                    ("drained".to_string(), "yes".to_string()),
                ]
                .into(),
                after_reboot: [("reboot".to_string(), "done".to_string())].into(),
            }),
            ..Default::default()
        },
    );
    let spec = read_spec(&p.spec, "busybox").expect("spec");
    let me = holder(&p);
    let effect = |action| node_effect(&me, "a".into(), action, None, None, &spec);
    let labels = |c: &NodeChange| -> Vec<String> {
        (c.labels.iter())
            .map(|(k, v)| format!("{k}={}", v.as_deref().unwrap_or("-")))
            .collect()
    };
    let Some(RebootEffect::Cordon(cordon)) = effect(RebootAction::Cordon) else {
        panic!("a cordon");
    };
    assert_eq!(labels(&cordon), ["drained=yes", "reboot=pending"]);
    assert_eq!(cordon.unschedulable, Some(true));
    let Some(RebootEffect::Annotate(recorded)) = effect(RebootAction::RecordCordon) else {
        panic!("a record of the cordon");
    };
    assert_eq!(labels(&recorded), ["drained=yes", "reboot=pending"]);
    // Back: the after-reboot labels go on with the uncordon, or alone when the cordon is not ours.
    for uncordon in [true, false] {
        let back = effect(RebootAction::Finish {
            signal: Signal::Agent,
            uncordon,
            rebooted: true,
        });
        let Some(RebootEffect::Finish {
            change: Some(change),
            ..
        }) = back
        else {
            panic!("a change of the node: {back:?}");
        };
        assert_eq!(labels(&change), ["reboot=done"]);
        assert_eq!(change.unschedulable, uncordon.then_some(false));
    }
    // A drain that timed out gives the node back without them.
    let gave_up = effect(RebootAction::Finish {
        signal: Signal::Agent,
        uncordon: false,
        rebooted: false,
    });
    assert!(
        matches!(gave_up, Some(RebootEffect::Finish { change: None, .. })),
        "{gave_up:?}"
    );
    let bad = RebootPolicySpec {
        node_labels: Some(RebootNodeLabels {
            after_reboot: [("reboot".to_string(), "not a value!".to_string())].into(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let e = read_spec(&bad, "busybox").expect_err("a bad value");
    assert!(
        e.starts_with("spec.nodeLabels.afterReboot[\"reboot\"]"),
        "{e}"
    );
}

#[test]
fn soaking_nodes_come_from_the_latest_reboots() {
    let spec = read_spec(
        &crate::reboot_policy::api::RebootPolicySpec {
            soak: Some("5m".into()),
            ..Default::default()
        },
        "busybox",
    )
    .expect("spec");
    let record = |name: &str, at: &str| RebootRecord {
        name: name.into(),
        at: at.into(),
        ..Default::default()
    };
    let rebooted = [
        record("new", "2026-11-22T10:04:00Z"),
        record("old", "2026-11-22T09:00:00Z"),
    ];
    assert_eq!(
        spec.soaking(&rebooted, t("2026-11-22T10:05:00Z")),
        vec![("new".to_string(), t("2026-11-22T10:09:00Z"))]
    );
    let bad = crate::reboot_policy::api::RebootPolicySpec {
        soak: Some("0s".into()),
        ..Default::default()
    };
    let e = read_spec(&bad, "busybox").expect_err("zero soak");
    assert!(e.starts_with("spec.soak"), "{e}");
    let bad = crate::reboot_policy::api::RebootPolicySpec {
        disruption: Some(crate::node::disruption::DisruptionSpec {
            silence: Some(Default::default()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let e = read_spec(&bad, "busybox").expect_err("no matchers");
    assert_eq!(
        e,
        "spec.disruption.silence.matchers must name at least one matcher"
    );
}

#[test]
fn under_stop_a_failed_node_holds_every_new_reboot_and_the_stop_sticks() {
    let (a, b) = (node("a"), asking("b"));
    let failed = BTreeMap::from([(
        "a".to_string(),
        RebootState::DrainFailed {
            signal: Signal::Agent,
            message: "drain timed out: db/primary stays".into(),
            since: at(0),
        },
    )]);
    // Hold (the default): the other node starts.
    let d = run(&settings(2), &failed, &[view(&a), view(&b)], at(10));
    assert!(d.states.contains_key("b"));
    assert_eq!(d.stopped, None);
    // Stop: it waits, saying why and how to go on.
    let stop = PolicySettings {
        stop_on_failure: true,
        ..settings(2)
    };
    let d = run(&stop, &failed, &[view(&a), view(&b)], at(10));
    assert!(!d.states.contains_key("b"), "nothing starts");
    let entry = d.nodes.iter().find(|n| n.name == "b").expect("b waits");
    assert_eq!(entry.reason.as_deref(), Some("RolloutStopped"));
    let message = entry.message.clone().unwrap_or_default();
    assert!(
        message.contains("node a failed: drain timed out"),
        "{message}"
    );
    assert!(message.contains("slipway.dev/reset-failures"), "{message}");
    assert!(d.summary.contains("stopped"), "{}", d.summary);
    // The failed drain is retried later and gone from the states: the stop stays, from the status.
    let sticky = PolicySettings {
        stopped: d.stopped.clone(),
        ..stop
    };
    let d = run(&sticky, &BTreeMap::new(), &[view(&a), view(&b)], at(10));
    assert!(d.states.is_empty());
    assert_eq!(d.stopped, sticky.stopped);
}

#[test]
fn a_reset_lifts_a_stop_and_is_acted_on_once() {
    use crate::reboot_policy::api::{
        RebootFailureAction, RebootFailurePolicy, RebootPolicy, RebootPolicySpec,
        RebootPolicyStatus,
    };
    let mut p = RebootPolicy::new(
        "nightly",
        RebootPolicySpec {
            failure_policy: Some(RebootFailurePolicy {
                action: Some(RebootFailureAction::Stop),
            }),
            ..Default::default()
        },
    );
    p.metadata.generation = Some(1);
    p.status = Some(RebootPolicyStatus {
        observed_generation: Some(1),
        stopped: Some("node a failed: it did not come back".into()),
        ..Default::default()
    });
    let spec = read_spec(&p.spec, "busybox");
    let b = asking("b");
    let views = [view(&b)];
    let standing = |s: &RebootPolicyStatus| -> Vec<String> {
        (s.conditions.iter())
            .filter(|c| ["Ready", "Reconciling", "Stalled"].contains(&c.type_.as_str()))
            .map(|c| format!("{}={}", c.type_, c.status))
            .collect()
    };
    let d = decide(&input(&p, &spec, &views, &KuredView::Off), at(0));
    assert_eq!(d.status.nodes[0].reason.as_deref(), Some("RolloutStopped"));
    assert!(d.status.stopped.is_some());
    assert_eq!(
        standing(&d.status),
        ["Ready=False", "Reconciling=False", "Stalled=True"],
        "kstatus: stopped until someone acts"
    );
    assert!(d.events.is_empty(), "{:?}", d.events);
    p.metadata.annotations =
        Some([("slipway.dev/reset-failures".to_string(), "1".to_string())].into());
    let d = decide(&input(&p, &spec, &views, &KuredView::Off), at(1));
    assert_eq!(d.status.nodes[0].phase, RebootPhase::Draining, "b starts");
    assert_eq!(d.status.stopped, None);
    assert_eq!(
        standing(&d.status),
        ["Ready=True", "Reconciling=False", "Stalled=False"],
        "kstatus: a reboot under way is the policy in force"
    );
    assert_eq!(d.status.failures_reset.as_deref(), Some("1"));
    assert!(d.events.iter().any(|e| e.reason == "FailuresReset"));
    p.status = Some(d.status);
    let d = decide(&input(&p, &spec, &views, &KuredView::Off), at(2));
    assert!(
        !d.events.iter().any(|e| e.reason == "FailuresReset"),
        "acted on once"
    );
}

/// The budget `max` allows over every node given, as a decision of this policy sees it.
fn pool_budget(nodes: &[NodeInfo], max: i32, halt: bool) -> Budget {
    use crate::node::budget::api::DisruptionBudgetSpec;
    use crate::node::budget::{DisruptionBudget, Pool, Reason};
    let b = DisruptionBudget::new(
        "pool",
        DisruptionBudgetSpec {
            max_unavailable: k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(max),
            halt: Some(halt),
            ..Default::default()
        },
    );
    let none = std::collections::BTreeSet::new();
    let state = Pool::new(&b).measure(nodes, &none, t(T0));
    Budget::new(BTreeMap::new(), &[state], Reason::Reboot)
}

#[test]
fn a_disruption_budget_bounds_reboots_below_the_policy_s_concurrency() {
    let mut down = node("down");
    down.ready = false;
    let nodes = [asking("a"), asking("b"), asking("c"), down];
    let views: Vec<_> = nodes.iter().map(view).collect();
    let budget = pool_budget(&nodes, 2, false);
    let d = decide_nodes(
        &settings(3),
        &signals(),
        &BTreeMap::new(),
        &views,
        &budget,
        &BTreeMap::new(),
        t(T0),
    );
    assert_eq!(
        started(&d),
        vec!["a"],
        "a NotReady node uses one of the two"
    );
    let b = d.nodes.iter().find(|n| n.name == "b").expect("b waits");
    assert_eq!(
        (b.phase, b.reason.as_deref()),
        (RebootPhase::Wanting, Some("DisruptionBudget"))
    );
    assert_eq!(
        b.message.as_deref(),
        Some("disruptionbudget pool allows 2 unavailable nodes and 2 are")
    );
}

#[test]
fn a_halted_budget_blocks_every_new_reboot_and_says_so() {
    let nodes = [asking("a")];
    let views: Vec<_> = nodes.iter().map(view).collect();
    let budget = pool_budget(&nodes, 5, true);
    let d = decide_nodes(
        &settings(1),
        &signals(),
        &BTreeMap::new(),
        &views,
        &budget,
        &BTreeMap::new(),
        t(T0),
    );
    assert!(started(&d).is_empty());
    let a = &d.nodes[0];
    assert_eq!(
        (a.phase, a.reason.as_deref()),
        (RebootPhase::Blocked, Some("Halted"))
    );
}

/// `spec.disruption.prePull`: the reboot image is pulled on every selected node first; while a
/// node cannot pull it, no node reboots (and none is cordoned); once pulled, the pods go and the
/// node that asked starts.
#[test]
fn the_reboot_image_is_pulled_everywhere_before_a_reboot_uses_it() {
    use crate::node::prepull::{PRE_PULL_FAILED, PRE_PULLING, PrePullPhase};
    use crate::reboot_policy::api::RebootPolicySpec;
    use k8s_openapi::api::core::v1::Pod;
    let mut p = RebootPolicy::new(
        "nightly",
        RebootPolicySpec {
            disruption: Some(crate::node::disruption::DisruptionSpec {
                pre_pull: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    p.metadata.generation = Some(1);
    let spec = read_spec(&p.spec, "registry.local/slipway:1");
    let (a, b) = (asking("a"), node("b"));
    let views = [view(&a), view(&b)];
    let decide_with = |p: &RebootPolicy, pods: &[Pod]| {
        let refs: Vec<&Pod> = pods.iter().collect();
        decide(
            &PolicyInput {
                policy: p,
                spec: &spec,
                nodes: &views,
                alerts: None,
                checks: None,
                budget: &NO_BUDGET,
                pull_pods: &refs,
                namespace: "system-upgrade",
                kured: &KuredView::Off,
            },
            at(0),
        )
    };
    let created = |d: &RebootDecision| -> Vec<Pod> {
        (d.effects.iter())
            .filter_map(|e| match e {
                RebootEffect::PullImages(p) => Some(p.as_ref().clone()),
                _ => None,
            })
            .collect()
    };
    let d = decide_with(&p, &[]);
    let pods = created(&d);
    assert_eq!(
        pods.len(),
        2,
        "every selected node pulls, not only the one that asks"
    );
    assert_eq!(d.status.nodes[0].reason.as_deref(), Some(PRE_PULLING));
    assert!(d.holds.is_empty());
    assert!(
        !(d.effects.iter()).any(|e| matches!(e, RebootEffect::Cordon(_))),
        "nothing cordoned"
    );
    let image = (pods[0].spec.iter())
        .flat_map(|s| s.containers.iter().filter_map(|c| c.image.clone()))
        .collect::<Vec<_>>();
    assert_eq!(image, ["registry.local/slipway:1"]);
    let kubelet = |pods: &[Pod], bad: Option<&str>| -> Vec<Pod> {
        let mut pods = pods.to_vec();
        for pod in &mut pods {
            let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
            let failure =
                (bad.is_some() && node.as_deref() == bad).then_some(("ErrImagePull", "not found"));
            crate::node::prepull::kubelet_done(pod, failure);
        }
        pods
    };
    p.status = Some(d.status.clone());
    let d = decide_with(&p, &kubelet(&pods, Some("b")));
    assert_eq!(d.status.nodes[0].reason.as_deref(), Some(PRE_PULL_FAILED));
    let message = d.status.nodes[0].message.clone().unwrap_or_default();
    assert!(
        message.starts_with(
            "node b cannot pull image registry.local/slipway:1: ErrImagePull: not found"
        ),
        "{message}"
    );
    assert!(d.holds.is_empty());
    p.status = Some(d.status.clone());
    let d = decide_with(&p, &kubelet(&pods, None));
    assert_eq!(
        d.status.pre_pull.as_ref().map(|p| p.phase),
        Some(PrePullPhase::Pulled)
    );
    assert_eq!(d.status.nodes[0].phase, RebootPhase::Draining, "a starts");
    let deleted = (d.effects.iter())
        .filter(|e| matches!(e, RebootEffect::DeletePullPod(_)))
        .count();
    assert_eq!(deleted, 2);
    // Pulled for this image: never again.
    p.status = Some(d.status.clone());
    assert!(created(&decide_with(&p, &[])).is_empty());
    // Another image: pulled again before the next reboot.
    p.spec.image = Some("registry.local/slipway:2".into());
    let spec2 = read_spec(&p.spec, "registry.local/slipway:1");
    let again = decide(
        &PolicyInput {
            policy: &p,
            spec: &spec2,
            nodes: &views,
            alerts: None,
            checks: None,
            budget: &NO_BUDGET,
            pull_pods: &[],
            namespace: "system-upgrade",
            kured: &KuredView::Off,
        },
        at(0),
    );
    assert_eq!(created(&again).len(), 2);
}

mod kured_takeover;
