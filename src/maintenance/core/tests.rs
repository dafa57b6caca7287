use super::*;
use crate::maintenance::api::{FINALIZER, MaintenancePhase, NodeMaintenanceSpec};
use crate::node::disruption::DisruptionSpec;
use crate::node::drain::{EvictionResult, OnDrainTimeout, to_delete};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;

fn t(s: &str) -> Timestamp {
    s.parse().expect("a timestamp")
}

fn now() -> Timestamp {
    t("2026-11-22T10:00:00Z")
}

fn nm(finalized: bool) -> NodeMaintenance {
    NodeMaintenance {
        metadata: ObjectMeta {
            name: Some("disk".into()),
            generation: Some(1),
            finalizers: finalized.then(|| vec![FINALIZER.to_string()]),
            ..Default::default()
        },
        spec: NodeMaintenanceSpec {
            node_name: "n1".into(),
            reason: Some("disk".into()),
            drain_timeout: None,
            disruption: None,
        },
        status: None,
    }
}

fn node() -> NodeFacts {
    NodeFacts {
        name: "n1".into(),
        uid: "uid-n1".into(),
        ..Default::default()
    }
}

/// The node as the maintenance leaves it after taking it.
fn taken() -> NodeFacts {
    NodeFacts {
        unschedulable: true,
        drain_taint: true,
        excluded: true,
        cordoned_by: Some("nodemaintenance/disk".into()),
        excluded_by: Some("nodemaintenance/disk".into()),
        ..node()
    }
}

fn pod(name: &str) -> PodKey {
    PodKey {
        namespace: "shop".into(),
        name: name.into(),
    }
}

fn pods(evict: &[(&str, bool)]) -> PodsView {
    PodsView {
        total: evict.len() + 1,
        to_evict: evict.iter().map(|(n, t)| (pod(n), *t)).collect(),
        blocked: BTreeMap::new(),
        attached: Vec::new(),
    }
}

/// The decision's input, as the tests set it up: who holds the node, as an older maintenance
/// (`duplicate_of`) or another operation (`busy`).
struct TestInput<'a> {
    maintenance: &'a NodeMaintenance,
    node: Option<&'a NodeFacts>,
    duplicate_of: Option<&'a str>,
    busy: Option<&'a Holder>,
    refusal: Option<&'a crate::node::budget::Refusal>,
    lease: LeaseView,
    pods: Option<&'a PodsView>,
    evictions: Option<&'a EvictionRound>,
    last_error: Option<&'a str>,
    now: Timestamp,
}

fn input<'a>(
    nm: &'a NodeMaintenance,
    node: Option<&'a NodeFacts>,
    pods: Option<&'a PodsView>,
) -> TestInput<'a> {
    TestInput {
        maintenance: nm,
        node,
        duplicate_of: None,
        busy: None,
        refusal: None,
        lease: LeaseView::Free,
        pods,
        evictions: None,
        last_error: None,
        now: now(),
    }
}

/// The step the decision takes (its effects are tested apart).
fn decide(i: &TestInput<'_>) -> Step {
    let duplicate = i
        .duplicate_of
        .map(|name| Holder::Maintenance { name: name.into() });
    let input = MaintenanceInput {
        maintenance: i.maintenance,
        node: i.node,
        held_by: duplicate.as_ref().or(i.busy),
        refusal: i.refusal,
        lease: i.lease.clone(),
        pods: i.pods,
        evictions: i.evictions,
        last_error: i.last_error,
    };
    plan_step(&input, i.now)
}

fn reasons(step: &Step) -> Vec<&'static str> {
    step.events.iter().map(|e| e.reason).collect()
}

fn condition(step: &Step) -> &crate::common::condition::Condition {
    step.status
        .conditions
        .iter()
        .find(|c| c.type_ == DRAINED)
        .expect("the Drained condition")
}

#[test]
fn a_new_maintenance_adds_the_finalizer_takes_the_node_and_evicts() {
    let (m, n, p) = (
        nm(false),
        node(),
        pods(&[("web-1", false), ("web-2", true)]),
    );
    let step = decide(&input(&m, Some(&n), Some(&p)));
    assert!(step.hold_node);
    assert_eq!(step.lease, Some(LeaseAction::Hold));
    assert_eq!(step.node.unschedulable, Some(true));
    assert_eq!(step.node.drain_taint, Some(true));
    assert_eq!(step.node.exclude_label, Some(true));
    assert_eq!(
        step.node.annotations.get(CORDONED_BY),
        Some(&Some("nodemaintenance/disk".to_string()))
    );
    assert_eq!(
        step.evict,
        [pod("web-1")],
        "a terminating pod is not evicted again"
    );
    assert_eq!(step.stage, Stage::Draining);
    let st = &step.status;
    assert_eq!(st.phase, Some(MaintenancePhase::Running));
    assert_eq!((st.total_pods, st.eviction_pods), (Some(3), Some(2)));
    assert_eq!(st.drain_progress, Some(0));
    assert_eq!(st.pending_pods, ["web-1", "web-2"]);
    assert_eq!(st.pending_pods_refs[0].namespace, "shop");
    assert_eq!(reasons(&step), ["BeginMaintenance"]);
    assert_eq!(step.requeue_after, Some(DRAIN_RECHECK));
    assert_eq!(
        condition(&step).message,
        "waiting for 2 pods to be evicted: shop/web-1 and 1 more"
    );
}

#[test]
fn an_admins_cordon_and_label_are_not_recorded_as_the_maintenances() {
    let m = nm(true);
    let n = NodeFacts {
        unschedulable: true,
        excluded: true,
        ..node()
    };
    let step = decide(&input(&m, Some(&n), Some(&pods(&[]))));
    assert_eq!(step.node.unschedulable, None);
    assert_eq!(step.node.exclude_label, None);
    assert_eq!(step.node.drain_taint, Some(true));
    assert!(step.node.annotations.is_empty());
    // And deleting the maintenance leaves them.
    let mut gone = nm(true);
    gone.metadata.deletion_timestamp = Some(Time(now()));
    let n = NodeFacts {
        drain_taint: true,
        ..n
    };
    let step = decide(&input(&gone, Some(&n), None));
    assert_eq!(step.node.unschedulable, None, "the admin's cordon stays");
    assert_eq!(step.node.exclude_label, None);
    assert_eq!(step.node.drain_taint, Some(false));
    assert_eq!(step.stage, Stage::Restoring);
}

#[test]
fn progress_counts_from_the_pods_to_evict_at_the_start() {
    let mut m = nm(true);
    let first = decide(&input(
        &m,
        Some(&node()),
        Some(&pods(&[
            ("a", false),
            ("b", false),
            ("c", false),
            ("d", false),
        ])),
    ));
    m.status = Some(first.status);
    let step = decide(&input(&m, Some(&taken()), Some(&pods(&[("d", true)]))));
    assert_eq!(step.status.eviction_pods, Some(4), "kept from the start");
    assert_eq!(step.status.drain_progress, Some(75));
    assert_eq!(step.status.pending_pods, ["d"]);
    assert!(step.node.is_empty(), "the node is already taken");
}

/// A node with nothing to evict is drained once it is taken, not in the decision that takes it:
/// the cordon is written after the status.
#[test]
fn an_empty_node_is_drained_only_once_taken() {
    let mut m = nm(true);
    let first = decide(&input(&m, Some(&node()), Some(&pods(&[]))));
    assert!(!first.node.is_empty(), "the node is taken");
    assert_eq!(first.stage, Stage::Draining);
    assert_ne!(first.status.phase, Some(MaintenancePhase::Succeeded));
    m.status = Some(first.status);
    let then = decide(&input(&m, Some(&taken()), Some(&pods(&[]))));
    assert_eq!(then.stage, Stage::Drained);
    assert_eq!(then.status.phase, Some(MaintenancePhase::Succeeded));
}

#[test]
fn an_empty_drain_succeeds_once() {
    let mut m = nm(true);
    let step = decide(&input(&m, Some(&taken()), Some(&pods(&[]))));
    assert_eq!(step.stage, Stage::Drained);
    assert_eq!(step.status.phase, Some(MaintenancePhase::Succeeded));
    assert_eq!(step.status.drain_progress, Some(100));
    assert_eq!(condition(&step).status, "True");
    assert_eq!(
        reasons(&step),
        ["BeginMaintenance", "SucceedMaintenance"],
        "the first decision begins the maintenance"
    );
    // Every event names the maintenance's node (what a notification says).
    let nodes: Vec<Option<&str>> = step.events.iter().map(|e| e.node.as_deref()).collect();
    assert_eq!(nodes, [Some(m.spec.node_name.as_str()); 2]);
    assert_eq!(step.lease, Some(LeaseAction::Hold), "the node stays held");
    assert!(step.requeue_after.is_some(), "to renew the lease");
    m.status = Some(step.status);
    let again = decide(&input(&m, Some(&taken()), Some(&pods(&[]))));
    assert!(again.events.is_empty());
    assert_eq!(again.status, m.status.clone().unwrap_or_default());
}

#[test]
fn a_missing_node_fails_and_a_duplicate_fails_naming_the_first() {
    let m = nm(true);
    let step = decide(&input(&m, None, None));
    assert_eq!(step.status.phase, Some(MaintenancePhase::Failed));
    assert_eq!(
        step.status.last_error.as_deref(),
        Some("invalid nodeName, no node with name n1 found")
    );
    assert_eq!(reasons(&step), ["BeginMaintenance", "FailedMaintenance"]);
    assert!(!step.hold_node && step.node.is_empty() && step.lease.is_none());
    let n = node();
    let mut i = input(&m, Some(&n), None);
    i.duplicate_of = Some("older");
    let step = decide(&i);
    assert_eq!(
        condition(&step).message,
        "a NodeMaintenance for node n1 already exists: older"
    );
    assert!(!step.hold_node && step.node.is_empty() && step.lease.is_none());
}

#[test]
fn a_node_in_the_middle_of_an_upgrade_waits_untouched() {
    let m = nm(true);
    let n = node();
    let plan = Holder::Plan {
        namespace: "system-upgrade".into(),
        name: "k3s".into(),
    };
    let mut i = input(&m, Some(&n), None);
    i.busy = Some(&plan);
    let step = decide(&i);
    assert_eq!(step.status.phase, Some(MaintenancePhase::Running));
    assert_eq!(
        condition(&step).message,
        "waiting for plan system-upgrade/k3s to finish its step on node n1"
    );
    assert!(!step.hold_node && step.node.is_empty() && step.evict.is_empty());
    assert_eq!(reasons(&step), ["BeginMaintenance", "WaitingForNode"]);
    assert_eq!(step.requeue_after, Some(WAIT_RECHECK));
}

#[test]
fn a_lease_held_by_another_operator_waits_before_the_drain_and_fails_after_too_many_errors() {
    let m = nm(true);
    let n = node();
    let mut i = input(&m, Some(&n), None);
    i.lease = LeaseView::Other {
        holder: "node-healthcheck".into(),
    };
    let step = decide(&i);
    assert_eq!(
        step.stage,
        Stage::LeaseHeld {
            holder: "node-healthcheck".into()
        }
    );
    assert!(step.node.is_empty() && step.lease.is_none());
    // Once draining, errors are counted and the drain goes on, until more than three.
    let mut m = nm(true);
    let t = taken();
    let p = pods(&[("a", false)]);
    for count in 1..=3 {
        let mut i = input(&m, Some(&t), Some(&p));
        i.lease = LeaseView::Other {
            holder: "nhc".into(),
        };
        let step = decide(&i);
        assert_eq!(step.status.error_on_lease_count, Some(count));
        assert_eq!(step.stage, Stage::Draining);
        m.status = Some(step.status);
    }
    let mut i = input(&m, Some(&t), Some(&p));
    i.lease = LeaseView::Other {
        holder: "nhc".into(),
    };
    let step = decide(&i);
    assert_eq!(
        step.stage,
        Stage::LeaseLost {
            holder: "nhc".into()
        }
    );
    assert_eq!(step.node.unschedulable, Some(false), "restored");
    assert_eq!(step.node.drain_taint, Some(false));
    assert_eq!(step.lease, Some(LeaseAction::Release));
    assert_eq!(step.status.phase, Some(MaintenancePhase::Failed));
    // The failure stays.
    m.status = Some(step.status);
    let step = decide(&input(&m, Some(&node()), Some(&p)));
    assert_eq!(step.status, m.status.clone().unwrap_or_default());
    assert!(step.node.is_empty() && !step.hold_node);
    // A lease that comes back in time resets the count.
    let mut m = nm(true);
    m.status = Some(NodeMaintenanceStatus {
        error_on_lease_count: Some(2),
        ..Default::default()
    });
    let step = decide(&input(&m, Some(&t), Some(&p)));
    assert_eq!(step.status.error_on_lease_count, Some(0));
}

#[test]
fn a_drain_past_its_timeout_fails_naming_the_pods_and_keeps_the_node() {
    let mut m = nm(true);
    m.spec.drain_timeout = Some("10m".into());
    let p = pods(&[("web-1", false)]);
    let first = decide(&input(&m, Some(&node()), Some(&p)));
    m.status = Some(first.status);
    let tk = taken();
    let mut i = input(&m, Some(&tk), Some(&p));
    i.now = t("2026-11-22T10:09:59Z");
    assert_eq!(decide(&i).stage, Stage::Draining);
    i.now = t("2026-11-22T10:10:00Z");
    let step = decide(&i);
    assert_eq!(
        step.stage,
        Stage::TimedOut {
            after: "10m".into()
        }
    );
    assert!(step.evict.is_empty(), "evictions stop");
    assert!(step.node.is_empty(), "the node stays cordoned");
    assert_eq!(step.status.phase, Some(MaintenancePhase::Failed));
    assert_eq!(
        step.status.last_error.as_deref(),
        Some("the drain did not finish within 10m: waiting for pod shop/web-1 to be evicted")
    );
    assert_eq!(reasons(&step), ["FailedMaintenance"]);
    m.status = Some(step.status);
    let later = decide(&input(&m, Some(&taken()), Some(&p)));
    assert!(later.hold_node && later.evict.is_empty() && later.events.is_empty());
}

#[test]
fn a_drain_past_its_timeout_deletes_the_pods_left_when_asked_with_an_event_each() {
    let mut m = nm(true);
    m.spec.drain_timeout = Some("10m".into());
    m.spec.disruption = Some(DisruptionSpec {
        on_drain_timeout: Some(OnDrainTimeout::DeletePods),
        wait_for_volume_detach: None,
        ..Default::default()
    });
    // web-2 is going already (evicted earlier): only web-1 is deleted.
    let p = pods(&[("web-1", false), ("web-2", true)]);
    let first = decide(&input(&m, Some(&node()), Some(&p)));
    m.status = Some(first.status);
    let tk = taken();
    let mut i = input(&m, Some(&tk), Some(&p));
    i.now = t("2026-11-22T10:09:59Z");
    let before = decide(&i);
    assert!(before.delete.is_empty() && before.stage == Stage::Draining);
    i.now = t("2026-11-22T10:10:00Z");
    let step = decide(&i);
    assert_eq!(
        step.stage,
        Stage::DeletingPods {
            after: "10m".into()
        }
    );
    assert_eq!(step.delete, [pod("web-1")]);
    assert!(step.evict.is_empty(), "no eviction beside the deletion");
    assert!(
        step.node.is_empty() && step.hold_node,
        "the node stays taken"
    );
    assert_eq!(step.status.phase, Some(MaintenancePhase::Running));
    assert_eq!(condition(&step).reason, "DeletingPods");
    assert_eq!(reasons(&step), ["DrainDeletedPod", "DeletingPods"]);
    assert_eq!(
        step.events[0].message,
        "Deleted pod shop/web-1 from node n1: the drain did not evict it within 10m \
         (spec.disruption.onDrainTimeout: DeletePods)"
    );
    let effects = into_decision(
        &MaintenanceInput {
            maintenance: &m,
            node: Some(&tk),
            held_by: None,
            refusal: None,
            lease: LeaseView::Free,
            pods: Some(&p),
            evictions: None,
            last_error: None,
        },
        step.clone(),
    )
    .effects;
    assert!(effects.contains(&MaintenanceEffect::Delete(vec![pod("web-1")])));
    // Deleted (terminating): nothing is deleted twice, and nothing is told twice.
    m.status = Some(step.status);
    let going = pods(&[("web-1", true), ("web-2", true)]);
    let mut i = input(&m, Some(&tk), Some(&going));
    i.now = t("2026-11-22T10:10:05Z");
    let again = decide(&i);
    assert!(
        again.delete.is_empty() && again.events.is_empty(),
        "{again:?}"
    );
    // Gone: drained, and the maintenance succeeds.
    m.status = Some(again.status);
    let empty = pods(&[]);
    let mut i = input(&m, Some(&tk), Some(&empty));
    i.now = t("2026-11-22T10:10:10Z");
    let done = decide(&i);
    assert_eq!(done.stage, Stage::Drained);
    assert_eq!(done.status.phase, Some(MaintenancePhase::Succeeded));
    // A pod that refuses the drain (kubectl's filters) is not deleted, nor anything beside it.
    let mut blocked = pods(&[("web-1", false)]);
    blocked
        .blocked
        .insert(pod("bare"), "has no controller".into());
    assert!(to_delete(&blocked).is_empty());
}

#[test]
fn a_drain_that_waits_for_volumes_ends_once_they_detach_and_past_its_timeout_waits_or_fails() {
    let mut m = nm(true);
    m.spec.drain_timeout = Some("10m".into());
    m.spec.disruption = Some(DisruptionSpec {
        on_drain_timeout: Some(OnDrainTimeout::DeletePods),
        wait_for_volume_detach: Some(true),
        ..Default::default()
    });
    let mut volumes = pods(&[]);
    volumes.attached = vec!["csi-1 (pv-a)".into()];
    let first = decide(&input(&m, Some(&node()), Some(&volumes)));
    m.status = Some(first.status);
    let tk = taken();
    let mut i = input(&m, Some(&tk), Some(&volumes));
    i.now = t("2026-11-22T10:05:00Z");
    let step = decide(&i);
    assert_eq!(
        step.stage,
        Stage::Draining,
        "pods gone, a volume still attached"
    );
    assert_eq!(
        condition(&step).message,
        "waiting for volume attachment csi-1 (pv-a) to detach"
    );
    assert!(step.evict.is_empty() && step.delete.is_empty());
    i.now = t("2026-11-22T10:10:00Z");
    let step = decide(&i);
    assert_eq!(
        step.stage,
        Stage::DeletingPods {
            after: "10m".into()
        },
        "a volume is not deleted: past the timeout it is waited for"
    );
    assert!(step.delete.is_empty());
    assert_eq!(
        reasons(&step),
        ["DeletingPods"],
        "no pod deleted, no DrainDeletedPod"
    );
    assert_eq!(
        condition(&step).message,
        "the drain did not finish within 10m; deleting the pods left \
         (spec.disruption.onDrainTimeout: DeletePods): waiting for volume attachment csi-1 (pv-a) \
         to detach"
    );
    // With Fail, the volume fails the drain like a pod would.
    let mut failing = m.clone();
    failing.spec.disruption = Some(DisruptionSpec {
        on_drain_timeout: None,
        wait_for_volume_detach: Some(true),
        ..Default::default()
    });
    let mut i = input(&failing, Some(&tk), Some(&volumes));
    i.now = t("2026-11-22T10:10:00Z");
    assert_eq!(
        decide(&i).stage,
        Stage::TimedOut {
            after: "10m".into()
        }
    );
    // Detached in time: drained.
    let gone = pods(&[]);
    let mut i = input(&m, Some(&tk), Some(&gone));
    i.now = t("2026-11-22T10:05:00Z");
    assert_eq!(decide(&i).stage, Stage::Drained);
}

/// Which of kstatus' `Ready`, `Reconciling`, `Stalled` is `True`, with its reason.
fn standing(step: &Step) -> (String, String) {
    let on: Vec<_> = (step.status.conditions.iter())
        .filter(|c| ["Ready", "Reconciling", "Stalled"].contains(&c.type_.as_str()))
        .filter(|c| c.status == "True")
        .collect();
    assert_eq!(
        on.len(),
        1,
        "one of the three: {:?}",
        step.status.conditions
    );
    (on[0].type_.clone(), on[0].reason.clone())
}

#[test]
fn kstatus_conditions_follow_the_phase() {
    let mut m = nm(true);
    m.spec.drain_timeout = Some("10m".into());
    let p = pods(&[("web-1", false)]);
    let draining = decide(&input(&m, Some(&node()), Some(&p)));
    assert_eq!(
        standing(&draining),
        ("Reconciling".into(), "Draining".into())
    );
    m.status = Some(draining.status);
    let tk = taken();
    let mut i = input(&m, Some(&tk), Some(&p));
    i.now = t("2026-11-22T10:10:00Z");
    let failed = decide(&i);
    assert_eq!(
        standing(&failed),
        ("Stalled".into(), "DrainTimedOut".into())
    );
    let empty = pods(&[]);
    let mut fresh = nm(true);
    fresh.metadata.generation = Some(3);
    let done = decide(&input(&fresh, Some(&tk), Some(&empty)));
    assert_eq!(standing(&done), ("Ready".into(), "Drained".into()));
    assert_eq!(
        done.status.observed_generation,
        Some(3),
        "what kstatus reads"
    );
    assert!(
        (done.status.conditions.iter()).all(|c| c.observed_generation == Some(3)),
        "{:?}",
        done.status.conditions
    );
}

#[test]
fn drained_is_unknown_while_it_drains_and_false_once_it_failed() {
    let mut m = nm(true);
    m.spec.drain_timeout = Some("10m".into());
    let p = pods(&[("web-1", false)]);
    let draining = decide(&input(&m, Some(&node()), Some(&p)));
    // Fleet's summary (wrangler's) reads `Drained=False` as an error, `Unknown` as under way.
    assert_eq!(condition(&draining).status, "Unknown");
    m.status = Some(draining.status);
    let tk = taken();
    let mut i = input(&m, Some(&tk), Some(&p));
    i.now = t("2026-11-22T10:10:00Z");
    let failed = decide(&i);
    assert_eq!(
        (condition(&failed).status.as_str(), failed.status.phase),
        ("False", Some(MaintenancePhase::Failed))
    );
    let done = decide(&input(&nm(true), Some(&tk), Some(&pods(&[]))));
    assert_eq!(condition(&done).status, "True");
}

#[test]
fn a_drain_recorded_as_false_by_an_earlier_slipway_keeps_its_start() {
    let mut m = nm(true);
    m.spec.drain_timeout = Some("10m".into());
    let p = pods(&[("web-1", false)]);
    let mut first = decide(&input(&m, Some(&node()), Some(&p))).status;
    let c = (first.conditions.iter_mut())
        .find(|c| c.type_ == DRAINED)
        .expect("the Drained condition");
    c.status = "False".into();
    m.status = Some(first);
    let tk = taken();
    let mut i = input(&m, Some(&tk), Some(&p));
    i.now = t("2026-11-22T10:05:00Z");
    let step = decide(&i);
    assert_eq!(condition(&step).status, "Unknown");
    assert_eq!(condition(&step).last_transition_time, Time(now()));
    i.now = t("2026-11-22T10:10:00Z");
    let step = decide(&i);
    assert_eq!(
        step.stage,
        Stage::TimedOut {
            after: "10m".into()
        },
        "the timeout counts from the drain's start"
    );
}

#[test]
fn the_timeout_counts_from_the_start_of_the_drain_not_the_wait() {
    let mut m = nm(true);
    m.spec.drain_timeout = Some("10m".into());
    let plan = Holder::Plan {
        namespace: "ns".into(),
        name: "p".into(),
    };
    let n = node();
    let mut i = input(&m, Some(&n), None);
    i.busy = Some(&plan);
    m.status = Some(decide(&i).status);
    let p = pods(&[("a", false)]);
    let mut i = input(&m, Some(&n), Some(&p));
    i.now = t("2026-11-22T11:00:00Z");
    let step = decide(&i);
    assert_eq!(step.stage, Stage::Draining);
    assert_eq!(
        condition(&step).last_transition_time,
        Time(t("2026-11-22T11:00:00Z"))
    );
}

#[test]
fn deleting_restores_what_the_maintenance_did_and_releases_the_lease() {
    let mut m = nm(true);
    m.metadata.deletion_timestamp = Some(Time(now()));
    let step = decide(&input(&m, Some(&taken()), None));
    assert_eq!(step.stage, Stage::Restoring);
    assert_eq!(step.node.unschedulable, Some(false));
    assert_eq!(step.node.drain_taint, Some(false));
    assert_eq!(step.node.exclude_label, Some(false));
    assert_eq!(step.node.annotations.get(CORDONED_BY), Some(&None));
    assert_eq!(step.node.annotations.get(EXCLUDED_BY), Some(&None));
    assert_eq!(step.lease, Some(LeaseAction::Release));
    assert!(!step.hold_node);
    assert_eq!(reasons(&step), ["UncordonNode", "RemovedMaintenance"]);
    assert!(
        step.events
            .iter()
            .all(|e| e.node.as_deref() == Some(m.spec.node_name.as_str()))
    );
    // A node that is gone needs nothing but the lease released.
    let step = decide(&input(&m, None, None));
    assert!(step.node.is_empty());
    assert_eq!(step.lease, Some(LeaseAction::Release));
}

#[test]
fn a_maintenance_node_maintenance_operator_started_gives_its_cordon_back_as_nmo_would() {
    // NMO cordoned, tainted and labelled the node, recording none of it; its status has no
    // condition of slipway's.
    let mut m = nm(true);
    m.status = Some(crate::maintenance::api::NodeMaintenanceStatus {
        phase: Some(MaintenancePhase::Running),
        ..Default::default()
    });
    let by_nmo = NodeFacts {
        unschedulable: true,
        drain_taint: true,
        excluded: true,
        ..node()
    };
    let step = decide(&input(&m, Some(&by_nmo), Some(&pods(&[]))));
    let me = Some("nodemaintenance/disk".to_string());
    assert_eq!(step.node.annotations.get(CORDONED_BY), Some(&me));
    assert_eq!(step.node.annotations.get(EXCLUDED_BY), Some(&me));
    assert_eq!(step.node.unschedulable, None, "already cordoned");
    // Deleted, it gives back what NMO did, as NMO would have.
    m.status = Some(step.status.clone());
    m.metadata.deletion_timestamp = Some(Time(now()));
    let recorded = NodeFacts {
        cordoned_by: me.clone(),
        excluded_by: me.clone(),
        ..by_nmo.clone()
    };
    let step = decide(&input(&m, Some(&recorded), None));
    assert_eq!(step.node.unschedulable, Some(false));
    assert_eq!(step.node.exclude_label, Some(false));

    // A cordon someone else made before slipway's own maintenance took the node stays theirs.
    let mut own = nm(true);
    let admin = NodeFacts {
        unschedulable: true,
        ..node()
    };
    let first = decide(&input(&own, Some(&admin), Some(&pods(&[]))));
    assert_eq!(first.node.annotations.get(CORDONED_BY), None);
    own.status = Some(first.status.clone());
    let tainted = NodeFacts {
        drain_taint: true,
        ..admin
    };
    let again = decide(&input(&own, Some(&tainted), Some(&pods(&[]))));
    assert_eq!(again.node.annotations.get(CORDONED_BY), None);
}

#[test]
fn a_refused_eviction_names_the_budget_in_the_status() {
    let m = nm(true);
    let p = pods(&[("web-1", false), ("web-2", false)]);
    let round = EvictionRound::next(
        None,
        vec![
            (pod("web-1"), EvictionResult::Accepted),
            (
                pod("web-2"),
                EvictionResult::Refused("PodDisruptionBudget shop/web allows no disruption".into()),
            ),
        ],
        now(),
    );
    let n = taken();
    let mut i = input(&m, Some(&n), Some(&p));
    i.evictions = Some(&round);
    let step = decide(&i);
    let c = condition(&step);
    assert_eq!(c.reason, "BlockedByDisruptionBudget");
    assert_eq!(
        c.message,
        "pod shop/web-2: PodDisruptionBudget shop/web allows no disruption"
    );
    let why: Vec<&str> = step
        .status
        .pending_pods_reasons
        .iter()
        .map(|r| r.reason.as_str())
        .collect();
    assert_eq!(
        why,
        [
            "evicted, waiting for it to terminate",
            "PodDisruptionBudget shop/web allows no disruption"
        ]
    );
    assert_eq!(step.status.phase, Some(MaintenancePhase::Running));
}

#[test]
fn a_blocking_pod_stops_every_eviction_and_says_why() {
    let m = nm(true);
    let mut p = pods(&[("web-1", false)]);
    p.blocked
        .insert(pod("local"), "has local storage (emptyDir)".into());
    let step = decide(&input(&m, Some(&taken()), Some(&p)));
    assert!(step.evict.is_empty());
    assert_eq!(
        condition(&step).message,
        "the drain cannot start: pod shop/local: has local storage (emptyDir)"
    );
    let why: Vec<&str> = step
        .status
        .pending_pods_reasons
        .iter()
        .map(|r| r.reason.as_str())
        .collect();
    assert_eq!(
        why,
        ["waiting for eviction", "has local storage (emptyDir)"]
    );
}

#[test]
fn stamping_marks_only_changed_statuses() {
    let m = nm(true);
    let mut step = decide(&input(&m, Some(&taken()), Some(&pods(&[]))));
    step.status.last_update = None;
    let old = step.status.clone();
    stamp(&mut step, &old, now());
    assert_eq!(step.status.last_update, None);
    stamp(&mut step, &NodeMaintenanceStatus::default(), now());
    assert_eq!(step.status.last_update, Some(Time(now())));
}

#[test]
fn deleting_a_duplicate_leaves_the_node_to_the_first() {
    let mut m = nm(true);
    m.metadata.deletion_timestamp = Some(Time(now()));
    let n = taken();
    let mut i = input(&m, Some(&n), None);
    i.duplicate_of = Some("older");
    let step = decide(&i);
    assert!(step.node.is_empty() && step.lease.is_none());
    assert_eq!(step.stage, Stage::Restoring);
}

#[test]
fn a_refused_eviction_is_asked_again_later_each_time_up_to_a_minute() {
    let waits: Vec<u64> = (1..=6).map(|n| refusal_backoff(n).as_secs()).collect();
    assert_eq!(waits, [5, 10, 20, 40, 60, 60]);
    assert_eq!(refusal_backoff(u32::MAX), REFUSAL_BACKOFF_MAX);
    assert_eq!(refusal_backoff(0), DRAIN_RECHECK);
}

#[test]
fn after_a_refusal_the_drain_waits_before_asking_again() {
    let m = nm(true);
    let p = pods(&[("web-1", false)]);
    let refused = vec![(pod("web-1"), EvictionResult::Refused("PDB".into()))];
    let first = EvictionRound::next(None, refused.clone(), now());
    let second = EvictionRound::next(Some(&first), refused, now());
    assert_eq!((first.refused_in_a_row, second.refused_in_a_row), (1, 2));
    let n = taken();
    let mut i = input(&m, Some(&n), Some(&p));
    i.evictions = Some(&second);
    i.now = now() + jiff::SignedDuration::from_secs(9);
    let step = decide(&i);
    assert!(
        step.evict.is_empty(),
        "10 s after the second refusal, not 9"
    );
    assert_eq!(step.requeue_after, Some(Duration::from_secs(1)));
    i.now = now() + jiff::SignedDuration::from_secs(10);
    assert_eq!(decide(&i).evict, [pod("web-1")]);
    let accepted = EvictionRound::next(
        Some(&second),
        vec![(pod("web-1"), EvictionResult::Accepted)],
        now(),
    );
    assert_eq!(
        accepted.refused_in_a_row, 0,
        "an accepted round ends the backoff"
    );
}

#[test]
fn a_budget_that_allows_a_disruption_again_ends_the_wait_of_the_rounds_it_refused() {
    let m = nm(true);
    let p = pods(&[("web-1", false)]);
    let refused = vec![(pod("web-1"), EvictionResult::Refused("PDB".into()))];
    let first = EvictionRound::next(None, refused.clone(), now());
    let mut round = EvictionRound::next(Some(&first), refused, now());
    let mut elsewhere = round.clone();
    assert!(
        !elsewhere.budget_allows("other"),
        "a budget of another namespace"
    );
    assert_eq!(elsewhere, round);
    assert!(round.budget_allows(&pod("web-1").namespace));
    assert_eq!(round.refused_in_a_row, 2, "the count stays");
    let n = taken();
    let mut i = input(&m, Some(&n), Some(&p));
    i.evictions = Some(&round);
    i.now = now() + jiff::SignedDuration::from_secs(1);
    assert_eq!(decide(&i).evict, [pod("web-1")], "at once");
    let mut accepted = EvictionRound::next(
        Some(&round),
        vec![(pod("web-1"), EvictionResult::Accepted)],
        now(),
    );
    assert!(
        !accepted.budget_allows(&pod("web-1").namespace),
        "nothing was refused"
    );
}

#[test]
fn a_budget_that_allows_a_disruption_while_a_round_is_asked_ends_the_wait_of_its_answer() {
    let refused = vec![(pod("web-1"), EvictionResult::Refused("PDB".into()))];
    let first = EvictionRound::next(None, refused.clone(), now());
    let mut asking = Asking::of(&[pod("web-1")]);
    assert!(
        !asking.budget_allows("other"),
        "a budget of another namespace"
    );
    let untold = asking
        .clone()
        .answered(EvictionRound::next(Some(&first), refused.clone(), now()));
    assert!(
        untold.next_ask().is_some(),
        "nothing came meanwhile: the backoff stands"
    );
    assert!(asking.budget_allows(&pod("web-1").namespace));
    let round = asking.answered(EvictionRound::next(Some(&first), refused, now()));
    assert_eq!(round.refused_in_a_row, 2, "the count stays");
    assert_eq!(round.next_ask(), None, "asked again at once");
    let m = nm(true);
    let n = taken();
    let p = pods(&[("web-1", false)]);
    let mut i = input(&m, Some(&n), Some(&p));
    i.evictions = Some(&round);
    i.now = now() + jiff::SignedDuration::from_secs(1);
    assert_eq!(decide(&i).evict, [pod("web-1")], "at once");
    let mut accepted = Asking::of(&[pod("web-1")]);
    assert!(accepted.budget_allows(&pod("web-1").namespace));
    let done = accepted.answered(EvictionRound::next(
        Some(&round),
        vec![(pod("web-1"), EvictionResult::Accepted)],
        now(),
    ));
    assert_eq!(done.refused_in_a_row, 0, "an accepted round stays accepted");
}

#[test]
fn the_decision_gives_back_before_the_status_and_takes_after_it() {
    let mut m = nm(true);
    let n = node();
    let p = pods(&[("web-1", false)]);
    let i = input(&m, Some(&n), Some(&p));
    let d = super::decide(
        &MaintenanceInput {
            maintenance: i.maintenance,
            node: i.node,
            held_by: None,
            refusal: None,
            lease: LeaseView::Free,
            pods: i.pods,
            evictions: None,
            last_error: None,
        },
        now(),
    );
    let kinds: Vec<&str> = d
        .effects
        .iter()
        .map(|e| match e {
            MaintenanceEffect::TakeNode(_) => "take",
            MaintenanceEffect::OwnedByNode { .. } => "own",
            MaintenanceEffect::HoldLease => "lease",
            MaintenanceEffect::Evict(_) => "evict",
            MaintenanceEffect::Delete(_) => "delete",
            MaintenanceEffect::RestoreNode(_) => "restore",
            MaintenanceEffect::ReleaseLease => "release",
        })
        .collect();
    assert_eq!(
        kinds,
        ["own", "lease", "take", "evict"],
        "the Lease before the cordon"
    );
    assert!(d.effects.iter().all(|e| !e.before_status()));
    assert_eq!(d.holds.iter().collect::<Vec<_>>(), ["n1"]);
    let MaintenanceEffect::TakeNode(change) = &d.effects[2] else {
        panic!("the node is taken once its Lease is");
    };
    assert_eq!(change.unschedulable, Some(true));
    assert_eq!(change.taints.as_ref().map(Vec::len), Some(1));
    m.metadata.deletion_timestamp = Some(Time(now()));
    let t = taken();
    let d = super::decide(
        &MaintenanceInput {
            maintenance: &m,
            node: Some(&t),
            held_by: None,
            refusal: None,
            lease: LeaseView::Ours,
            pods: None,
            evictions: None,
            last_error: None,
        },
        now(),
    );
    assert!(
        d.effects.iter().all(|e| e.before_status()),
        "{:?}",
        d.effects
    );
    assert!(d.holds.is_empty());
}

#[test]
fn a_failing_effect_is_told_in_the_status() {
    let m = nm(true);
    let n = node();
    let p = pods(&[]);
    let mut i = input(&m, Some(&n), Some(&p));
    i.last_error = Some("cannot take the node's lease: namespaces \"medik8s-leases\" not found");
    let step = decide(&i);
    assert_eq!(
        step.status.last_error.as_deref(),
        Some("cannot take the node's lease: namespaces \"medik8s-leases\" not found")
    );
    assert_eq!(step.lease, Some(LeaseAction::Hold), "and it is tried again");
}

#[test]
fn the_phase_gauge_runs_from_the_start_of_the_drain_until_it_is_done() {
    assert_eq!(phase(None), None, "not decided yet");
    let mut m = nm(true);
    let (n, p, empty) = (taken(), pods(&[("web-1", false)]), pods(&[]));
    let running = decide(&input(&m, Some(&n), Some(&p)));
    let gauge = phase(Some(&running.status)).expect("a phase");
    assert_eq!((gauge.phase, gauge.nodes), ("Running", 1));
    assert_eq!(gauge.oldest_since, Some(now()));

    // Still draining an hour later: the same start.
    m.status = Some(running.status);
    let later = TestInput {
        now: t("2026-11-22T11:00:00Z"),
        ..input(&m, Some(&n), Some(&p))
    };
    let still = decide(&later);
    assert_eq!(
        phase(Some(&still.status)).unwrap().oldest_since,
        Some(now())
    );

    let done = TestInput {
        now: t("2026-11-22T11:00:00Z"),
        ..input(&m, Some(&n), Some(&empty))
    };
    let drained = phase(Some(&decide(&done).status)).expect("a phase");
    assert_eq!(drained.phase, "Succeeded");
    assert_eq!(drained.oldest_since, Some(t("2026-11-22T11:00:00Z")));
}

#[test]
fn a_disruption_budget_without_room_keeps_a_new_maintenance_waiting_and_says_which() {
    let nm = nm(true);
    let n = node();
    let refusal = crate::node::budget::Refusal::Full {
        budget: "workers".into(),
        max: 1,
        unavailable: 1,
        schedule: None,
    };
    let mut i = input(&nm, Some(&n), None);
    i.refusal = Some(&refusal);
    assert_eq!(decide(&i).status.phase, Some(MaintenancePhase::Running));
    let step = decide(&i);
    assert!(!step.hold_node && step.node.is_empty() && step.evict.is_empty());
    let c = condition(&step);
    assert_eq!(c.reason, "DisruptionBudget");
    assert_eq!(
        c.message,
        "waiting to take node n1: disruptionbudget workers allows 1 unavailable node and 1 is"
    );
    assert_eq!(step.requeue_after, Some(WAIT_RECHECK));
}

#[test]
fn a_waiting_maintenance_names_its_node_next_when_asked_and_not_once_it_has_it() {
    let refusal = crate::node::budget::Refusal::Full {
        budget: "workers".into(),
        max: 1,
        unavailable: 1,
        schedule: None,
    };
    let mut waiting = nm(true);
    waiting.spec.disruption = Some(crate::node::disruption::DisruptionSpec {
        prefer_no_schedule: Some(true),
        ..Default::default()
    });
    let n = node();
    let decision = |nm: &NodeMaintenance, refusal: Option<&crate::node::budget::Refusal>| {
        let input = MaintenanceInput {
            maintenance: nm,
            node: Some(&n),
            held_by: None,
            refusal,
            lease: LeaseView::Free,
            pods: None,
            evictions: None,
            last_error: None,
        };
        super::decide(&input, now())
    };
    let d = decision(&waiting, Some(&refusal));
    assert_eq!(d.next.iter().collect::<Vec<_>>(), ["n1"]);
    let taken = decision(&waiting, None);
    assert!(taken.next.is_empty() && taken.holds.contains("n1"));
    assert!(
        decision(&nm(true), Some(&refusal)).next.is_empty(),
        "not asked"
    );
}

#[test]
fn a_maintenance_that_waits_keeps_its_node_without_making_it_unavailable() {
    let refusal = crate::node::budget::Refusal::Full {
        budget: "workers".into(),
        max: 1,
        unavailable: 1,
        schedule: None,
    };
    let mut waiting = nm(true);
    let n = node();
    let mut i = input(&waiting, Some(&n), None);
    i.refusal = Some(&refusal);
    waiting.status = Some(decide(&i).status);
    let mut started = nm(true);
    started.metadata.name = Some("kernel".into());
    started.status = Some(decide(&input(&started, Some(&n), None)).status);
    let mut gone = nm(true);
    gone.metadata.name = Some("lost".into());
    gone.status = Some(decide(&input(&gone, None, None)).status);
    let mut fresh = nm(false);
    fresh.metadata.name = Some("new".into());

    let waits: Vec<(String, bool)> = holds(&[waiting, started, gone, fresh].map(Arc::new))
        .into_iter()
        .map(|h| (h.holder.key(), h.waiting))
        .collect();
    // Oldest first (equal times: by name); the maintenance of a missing node gave it back.
    assert_eq!(
        waits,
        [
            ("nodemaintenance/disk".to_string(), true),
            ("nodemaintenance/kernel".to_string(), false),
            ("nodemaintenance/new".to_string(), true),
        ]
    );
}

#[test]
fn a_silence_without_matchers_fails_the_maintenance_before_the_node_is_taken() {
    let mut m = nm(true);
    m.spec.disruption = Some(crate::node::disruption::DisruptionSpec {
        silence: Some(Default::default()),
        ..Default::default()
    });
    let p = pods(&[("web-1", false)]);
    let step = decide(&input(&m, Some(&node()), Some(&p)));
    assert_eq!(
        step.stage,
        Stage::InvalidSpec {
            message: "spec.disruption.silence.matchers must name at least one matcher".into()
        }
    );
    assert!(!step.hold_node);
    assert!(step.node.is_empty() && step.evict.is_empty());
    assert_eq!(condition(&step).reason, "InvalidSpec");
    assert_eq!(step.status.phase, Some(MaintenancePhase::Failed));
    // Fixed, it goes on.
    m.status = Some(step.status);
    m.spec.disruption = None;
    let step = decide(&input(&m, Some(&node()), Some(&p)));
    assert_eq!(step.stage, Stage::Draining);
    assert!(step.hold_node);
}
