//! Taking over from kured: the nodes its lock names, through kured letting them go or being
//! uninstalled before or after their reboot.

use super::*;

/// kured's lock naming `nodes`, each with whether it was cordoned before kured took it.
fn holds(nodes: &[(&str, bool)]) -> KuredView {
    KuredView::Holds(nodes.iter().map(|(n, c)| (n.to_string(), *c)).collect())
}

fn with_kured(kured: KuredView) -> PolicySettings {
    PolicySettings {
        kured,
        ..settings(1)
    }
}

/// A node kured cordoned.
fn cordoned(name: &str) -> NodeInfo {
    NodeInfo {
        unschedulable: true,
        ..node(name)
    }
}

fn taken(name: &str, cordoned: bool) -> BTreeMap<String, RebootState> {
    BTreeMap::from([(
        name.to_string(),
        RebootState::Kured {
            before: format!("{name}-boot-1"),
            cordoned,
            since: t(T0),
        },
    )])
}

#[test]
fn a_node_kured_holds_takes_a_slot_and_nothing_is_done_to_it() {
    let (a, b) = (cordoned("a"), asking("b"));
    let d = run(
        &with_kured(holds(&[("a", false)])),
        &BTreeMap::new(),
        &[view(&a), view(&b)],
        t(T0),
    );
    assert_eq!(
        d.states.get("a"),
        Some(&RebootState::Kured {
            before: "a-boot-1".into(),
            cordoned: true,
            since: t(T0),
        }),
        "kured's cordon of a schedulable node is the policy's to give back"
    );
    assert!(actions_of(&d, "a").is_empty(), "{:?}", d.actions);
    assert_eq!(reasons_of(&d, "a"), ["KuredHolds"]);
    assert!(started(&d).is_empty(), "b waits for a's slot");
    let b_status = d.nodes.iter().find(|n| n.name == "b").expect("b");
    assert_eq!(b_status.reason.as_deref(), Some("ConcurrencyReached"));
    let a_status = d.nodes.iter().find(|n| n.name == "a").expect("a");
    assert_eq!(
        (a_status.phase, a_status.signal, a_status.reason.as_deref()),
        (
            RebootPhase::Rebooting,
            Some(Signal::Kured),
            Some("KuredHolds")
        )
    );
    assert_eq!(d.rebooting, 1);
}

#[test]
fn a_cordon_that_was_there_before_kured_stays_the_admins() {
    let a = cordoned("a");
    let d = run(
        &with_kured(holds(&[("a", true)])),
        &BTreeMap::new(),
        &[view(&a)],
        t(T0),
    );
    assert!(matches!(
        d.states.get("a"),
        Some(RebootState::Kured {
            cordoned: false,
            ..
        })
    ));
}

#[test]
fn only_selected_nodes_no_one_else_holds_are_taken_over_and_only_from_a_lock_read() {
    let a = cordoned("a");
    let unselected = NodeView {
        selected: false,
        ..view(&a)
    };
    let held = NodeView {
        held_by: Some("nodemaintenance/m".into()),
        ..view(&a)
    };
    for v in [unselected, held] {
        let d = run(
            &with_kured(holds(&[("a", false)])),
            &BTreeMap::new(),
            &[v],
            t(T0),
        );
        assert!(d.states.is_empty(), "{:?}", d.states);
    }
    for kured in [
        KuredView::Off,
        KuredView::Gone,
        KuredView::Unreadable("forbidden".into()),
        holds(&[("b", false)]),
    ] {
        let d = run(
            &with_kured(kured.clone()),
            &BTreeMap::new(),
            &[view(&a)],
            t(T0),
        );
        assert!(d.states.is_empty(), "{kured:?}: {:?}", d.states);
    }
}

#[test]
fn a_paused_policy_still_counts_the_node_kured_holds() {
    let a = cordoned("a");
    let s = PolicySettings {
        paused: true,
        ..with_kured(holds(&[("a", false)]))
    };
    let d = run(&s, &BTreeMap::new(), &[view(&a)], t(T0));
    assert!(d.states.contains_key("a"));
}

#[test]
fn while_kured_holds_it_the_node_waits_whatever_its_boot() {
    let mut back = cordoned("a");
    back.boot_id = "a-boot-2".into();
    for n in [cordoned("a"), back] {
        let d = run(
            &with_kured(holds(&[("a", false)])),
            &taken("a", true),
            &[view(&n)],
            at(3600),
        );
        assert_eq!(
            d.states,
            taken("a", true),
            "no timeout while kured holds it"
        );
        assert!(actions_of(&d, "a").is_empty());
        assert!(d.rebooted.is_empty());
    }
}

#[test]
fn released_by_kured_the_node_is_forgotten_and_its_cordon_left_to_kured() {
    let mut back = node("a");
    back.boot_id = "a-boot-2".into();
    let d = run(
        &with_kured(holds(&[])),
        &taken("a", true),
        &[view(&back)],
        at(60),
    );
    assert!(d.states.is_empty());
    assert_eq!(
        actions_of(&d, "a"),
        [&RebootAction::Finish {
            signal: Signal::Kured,
            uncordon: false,
            rebooted: true
        }]
    );
    assert_eq!(reasons_of(&d, "a"), ["KuredReleased"]);
    assert_eq!(d.rebooted.len(), 1, "seen back on a new boot");
    assert_eq!(d.rebooted[0].signal, Signal::Kured);
    // kured's drain failed and it let the node go: no reboot to record.
    let d = run(
        &with_kured(holds(&[])),
        &taken("a", true),
        &[view(&node("a"))],
        at(60),
    );
    assert!(d.states.is_empty());
    assert!(d.rebooted.is_empty());
}

#[test]
fn kured_uninstalled_after_the_reboot_the_node_is_handed_off_and_uncordoned() {
    let mut back = cordoned("a");
    back.boot_id = "a-boot-2".into();
    back.ready = false;
    let gone = with_kured(KuredView::Gone);
    let d = run(&gone, &taken("a", true), &[view(&back)], at(60));
    assert!(
        matches!(
            d.states.get("a"),
            Some(RebootState::Rebooting {
                signal: Signal::Kured,
                cordoned: true,
                handoff: Handoff::AwaitingBoot { .. },
            })
        ),
        "not Ready yet: {:?}",
        d.states
    );
    assert_eq!(
        actions_of(&d, "a"),
        [&RebootAction::RecordCordon],
        "no reboot asked for; kured's cordon recorded as the policy's"
    );
    let recorded = NodeInfo {
        annotations: BTreeMap::from([(cordon::CORDONED_BY.into(), "rebootpolicy/p".into())]),
        ..back.clone()
    };
    let d = run(&gone, &taken("a", true), &[view(&recorded)], at(60));
    assert!(actions_of(&d, "a").is_empty(), "recorded once");
    back.ready = true;
    let d = run(&gone, &taken("a", true), &[view(&back)], at(60));
    assert!(d.states.is_empty());
    assert_eq!(
        actions_of(&d, "a"),
        [&RebootAction::Finish {
            signal: Signal::Kured,
            uncordon: true,
            rebooted: true
        }]
    );
    assert_eq!(d.rebooted.len(), 1);
}

#[test]
fn kured_uninstalled_before_the_reboot_the_policy_drains_and_reboots_the_node() {
    let a = cordoned("a");
    let gone = with_kured(KuredView::Gone);
    let d = run(&gone, &taken("a", true), &[view(&a)], at(60));
    let draining = RebootState::Draining {
        signal: Signal::Kured,
        before: "a-boot-1".into(),
        cordoned: true,
        since: at(60),
    };
    assert_eq!(d.states.get("a"), Some(&draining));
    assert_eq!(
        actions_of(&d, "a"),
        [&RebootAction::RecordCordon, &RebootAction::Drain],
        "already cordoned, by kured: now the policy's"
    );
    // kured had taken the lock but not cordoned yet: the policy cordons.
    let d = run(&gone, &taken("a", true), &[view(&node("a"))], at(60));
    assert_eq!(
        actions_of(&d, "a"),
        [&RebootAction::Cordon, &RebootAction::Drain]
    );
    // Drained: the policy's own reboot (a reboot pod: kured's nodes have no update-agent).
    let drained = NodeView {
        drain: Some(DrainView::default()),
        ..view(&a)
    };
    let states = BTreeMap::from([("a".to_string(), draining)]);
    let d = run(&gone, &states, &[drained], at(70));
    assert!(
        actions_of(&d, "a").contains(&&RebootAction::Reboot {
            signal: Signal::Kured,
            before: "a-boot-1".into()
        }),
        "{:?}",
        d.actions
    );
    assert_eq!(Signal::Kured.update_agent(), None);
}

#[test]
fn a_lock_that_cannot_be_read_keeps_the_node_held_and_says_why() {
    for kured in [
        KuredView::Unreadable("cannot read kured's DaemonSet kube-system/kured: 403".into()),
        KuredView::Off,
    ] {
        let d = run(
            &with_kured(kured),
            &taken("a", true),
            &[view(&cordoned("a"))],
            at(60),
        );
        assert_eq!(d.states, taken("a", true));
        let message = d.nodes[0].message.clone().unwrap_or_default();
        assert!(message.contains("kured"), "{message}");
        assert!(actions_of(&d, "a").is_empty());
    }
}

#[test]
fn a_deleted_policy_leaves_kureds_cordon_to_kured() {
    let mut p: RebootPolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": "slipway.dev/v1alpha1",
        "kind": "RebootPolicy",
        "metadata": {"name": "nightly", "deletionTimestamp": "2026-11-22T10:00:00Z"},
        "spec": {},
    }))
    .expect("policy");
    let states = taken("a", true);
    p.status = Some(RebootPolicyStatus {
        nodes: states
            .iter()
            .map(|(n, s)| s.to_status(n, String::new()))
            .collect(),
        ..Default::default()
    });
    let spec = read_spec(&p.spec, "busybox");
    let a = cordoned("a");
    let views = [view(&a)];
    let lock = holds(&[("a", false)]);
    let d = decide(&input(&p, &spec, &views, &lock), t(T0));
    assert_eq!(
        d.effects,
        [RebootEffect::Finish {
            node: "a".into(),
            signal: Signal::Kured,
            change: None
        }]
    );
}
