use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;

use super::*;
use crate::nodeop::api::{NodeOpStatus, NodeStatus};

fn t(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn upgrade(spec: NodeOpUpgradeSpec) -> NodeOpUpgrade {
    NodeOpUpgrade {
        metadata: ObjectMeta {
            name: Some("to-v3".into()),
            namespace: Some("default".into()),
            uid: Some("u-1".into()),
            ..Default::default()
        },
        spec: NodeOpUpgradeSpec {
            image: "quay.io/kairos/ubuntu:24.04-standard-amd64-generic-v3.5.0-k3s".into(),
            ..spec
        },
        status: None,
    }
}

fn script(spec: NodeOpUpgradeSpec) -> String {
    upgrade_command(&spec)[2].clone()
}

#[test]
fn the_nodeop_cordons_drains_reboots_and_checks_the_version_first() {
    let u = upgrade(NodeOpUpgradeSpec {
        concurrency: Some(1),
        stop_on_failure: Some(true),
        ..Default::default()
    });
    let op = render_nodeop(&u);
    assert_eq!(op.metadata.name.as_deref(), Some("to-v3"));
    assert_eq!(op.metadata.namespace.as_deref(), Some("default"));
    let labels = op.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get(UPGRADE_LABEL).map(String::as_str), Some("to-v3"));
    let owner = &op.metadata.owner_references.clone().unwrap_or_default()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
        ("NodeOpUpgrade", "u-1", Some(true))
    );
    let s = &op.spec;
    assert_eq!(s.cordon, Some(true));
    assert_eq!(s.drain_options.as_ref().and_then(|d| d.enabled), Some(true));
    assert_eq!(
        s.reboot_on_success,
        Some(true),
        "upgradeActive defaults to true"
    );
    assert_eq!(s.host_mount_path.as_deref(), Some("/host"));
    assert_eq!(s.image.as_deref(), Some(u.spec.image.as_str()));
    assert_eq!((s.concurrency, s.stop_on_failure), (Some(1), Some(true)));
    let preflight = s.preflight.clone().expect("a preflight without force");
    assert_eq!(preflight.active_deadline_seconds, Some(120));
    assert!(preflight.command[2].contains("/dev/termination-log"));
    let forced = render_nodeop(&upgrade(NodeOpUpgradeSpec {
        force: Some(true),
        upgrade_active: Some(false),
        upgrade_recovery: Some(true),
        ..Default::default()
    }));
    assert!(forced.spec.preflight.is_none());
    assert_eq!(forced.spec.reboot_on_success, Some(false));
}

#[test]
fn the_command_upgrades_the_partitions_asked_for() {
    let count = |s: &str, what: &str| s.matches(what).count();
    let default = script(NodeOpUpgradeSpec::default());
    assert!(default.contains("mount --rbind /host/dev /dev\nmount --rbind /host/run /run\n"));
    assert_eq!(count(&default, "kairos-agent upgrade --source dir:/"), 1);
    assert_eq!(count(&default, "--recovery"), 0);
    assert!(
        default.contains("nothing to upgrade"),
        "a version check without force"
    );
    let both = script(NodeOpUpgradeSpec {
        upgrade_recovery: Some(true),
        ..Default::default()
    });
    assert_eq!(
        count(&both, "kairos-agent upgrade --recovery --source dir:/"),
        1
    );
    assert_eq!(count(&both, "kairos-agent upgrade --source dir:/"), 1);
    assert!(
        both.find("--recovery").unwrap_or(usize::MAX) < both.rfind("upgrade --source").unwrap_or(0)
    );
    let recovery = script(NodeOpUpgradeSpec {
        upgrade_recovery: Some(true),
        upgrade_active: Some(false),
        ..Default::default()
    });
    assert_eq!(count(&recovery, "upgrade --source"), 0);
    assert_eq!(count(&recovery, "upgrade --recovery"), 1);
    let neither = script(NodeOpUpgradeSpec {
        upgrade_recovery: Some(false),
        upgrade_active: Some(false),
        force: Some(true),
        debug: Some(true),
        ..Default::default()
    });
    assert!(neither.contains("kairos-agent --debug upgrade --source dir:/"));
    assert!(
        !neither.contains("nothing to upgrade"),
        "force skips the version check"
    );
}

#[test]
fn excluded_paths_are_quoted_after_the_two_always_left() {
    let s = script(NodeOpUpgradeSpec {
        exclude_paths: Some(vec!["/etc/rancher".into(), "/opt/it's here".into()]),
        ..Default::default()
    });
    assert!(
        s.contains(r"--exclude-path '/etc/hostname' --exclude-path '/etc/hosts' --exclude-path '/etc/rancher' --exclude-path '/opt/it'\''s here'"),
        "{s}"
    );
}

fn nodeop_of(u: &NodeOpUpgrade, phase: &str) -> NodeOp {
    let mut op = render_nodeop(u);
    op.status = Some(NodeOpStatus {
        phase: Some(phase.into()),
        node_statuses: BTreeMap::from([(
            "cp-1".to_string(),
            NodeStatus {
                phase: "Running".into(),
                job_name: Some("to-v3-cp-1-abcde".into()),
                ..Default::default()
            },
        )]),
        ..Default::default()
    });
    op
}

#[test]
fn the_upgrade_creates_its_nodeop_then_shows_its_status() {
    let u = upgrade(NodeOpUpgradeSpec::default());
    let d = decide_upgrade(&u, None, t("2026-11-25T10:00:00Z"));
    assert_eq!(d.status.phase.as_deref(), Some(INITIALIZING));
    assert_eq!(d.status.node_op_name.as_deref(), Some("to-v3"));
    assert!(
        matches!(&d.effects[..], [UpgradeEffect::CreateNodeOp(op)] if op.metadata.name.as_deref() == Some("to-v3"))
    );
    let u = NodeOpUpgrade {
        status: Some(d.status.clone()),
        ..u
    };
    let d2 = decide_upgrade(
        &u,
        Some(&nodeop_of(&u, "Running")),
        t("2026-11-25T10:01:00Z"),
    );
    assert!(d2.effects.is_empty());
    assert_eq!(d2.status.phase.as_deref(), Some("Running"));
    assert_eq!(
        d2.status.message.as_deref(),
        Some("Upgrade operation is running")
    );
    assert_eq!(d2.status.node_statuses["cp-1"].phase, "Running");
    let d3 = decide_upgrade(
        &u,
        Some(&nodeop_of(&u, "Completed")),
        t("2026-11-25T10:05:00Z"),
    );
    assert_eq!(
        d3.status.message.as_deref(),
        Some("Upgrade operation completed successfully")
    );
}

#[test]
fn a_nodeop_of_that_name_that_is_not_the_upgrades_is_left_alone() {
    let u = upgrade(NodeOpUpgradeSpec::default());
    let mut other = nodeop_of(&u, "Running");
    other.metadata.owner_references = Some(vec![OwnerReference {
        uid: "someone-else".into(),
        ..Default::default()
    }]);
    let d = decide_upgrade(&u, Some(&other), t("2026-11-25T10:00:00Z"));
    assert!(d.effects.is_empty());
    assert_eq!(d.status.phase.as_deref(), Some("Failed"));
    assert!(d.status.node_statuses.is_empty());
}

/// Which of kstatus' `Ready`, `Reconciling`, `Stalled` is `True`, with its reason, after checking
/// that all three are there and carry the generation.
fn standing(d: &UpgradeDecision, generation: i64) -> (&str, &str) {
    let conditions = &d.status.conditions;
    let types: Vec<_> = conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(types, ["Ready", "Reconciling", "Stalled"]);
    assert!(
        conditions
            .iter()
            .all(|c| c.observed_generation == Some(generation) && !c.reason.is_empty()),
        "{conditions:?}"
    );
    let on: Vec<_> = conditions.iter().filter(|c| c.status == "True").collect();
    assert_eq!(on.len(), 1, "one of the three: {conditions:?}");
    (on[0].type_.as_str(), on[0].reason.as_str())
}

#[test]
fn kstatus_conditions_follow_the_nodeops_phase() {
    let mut u = upgrade(NodeOpUpgradeSpec::default());
    u.metadata.generation = Some(3);
    let created = decide_upgrade(&u, None, t("2026-11-25T10:00:00Z"));
    assert_eq!(standing(&created, 3), ("Reconciling", INITIALIZING));
    assert_eq!(
        created.status.observed_generation,
        Some(3),
        "what kstatus reads"
    );
    let u = NodeOpUpgrade {
        status: Some(created.status.clone()),
        ..u
    };
    for (phase, want) in [
        ("Pending", ("Reconciling", "Pending")),
        ("Running", ("Reconciling", "Running")),
        ("Completed", ("Ready", "Completed")),
        ("Failed", ("Stalled", "Failed")),
    ] {
        let d = decide_upgrade(&u, Some(&nodeop_of(&u, phase)), t("2026-11-25T10:01:00Z"));
        assert_eq!(standing(&d, 3), want, "NodeOp {phase}");
        let on = d.status.conditions.iter().find(|c| c.status == "True");
        assert_eq!(
            on.map(|c| c.message.as_str()),
            d.status.message.as_deref(),
            "the condition says what the status says"
        );
    }
    // A NodeOp not yet reconciled has no phase: still pending.
    let mut fresh = nodeop_of(&u, "Pending");
    fresh.status = None;
    let d = decide_upgrade(&u, Some(&fresh), t("2026-11-25T10:01:00Z"));
    assert_eq!(standing(&d, 3), ("Reconciling", "Pending"));
}

#[test]
fn a_foreign_nodeop_stalls_the_upgrade() {
    let mut u = upgrade(NodeOpUpgradeSpec::default());
    u.metadata.generation = Some(1);
    let mut other = nodeop_of(&u, "Completed");
    other.metadata.owner_references = None;
    let d = decide_upgrade(&u, Some(&other), t("2026-11-25T10:00:00Z"));
    assert_eq!(standing(&d, 1), ("Stalled", NODEOP_NOT_OWNED));
}

#[test]
fn a_condition_keeps_its_transition_time_while_it_holds_and_takes_a_new_generation() {
    let mut u = upgrade(NodeOpUpgradeSpec::default());
    u.metadata.generation = Some(1);
    let first = decide_upgrade(
        &u,
        Some(&nodeop_of(&u, "Running")),
        t("2026-11-25T10:00:00Z"),
    );
    let when = |d: &UpgradeDecision, type_: &str| {
        let c = d.status.conditions.iter().find(|c| c.type_ == type_);
        c.map(|c| c.last_transition_time.clone())
            .expect("the condition")
    };
    u.status = Some(first.status.clone());
    u.metadata.generation = Some(2);
    let later = decide_upgrade(
        &u,
        Some(&nodeop_of(&u, "Running")),
        t("2026-11-25T10:07:00Z"),
    );
    assert_eq!(standing(&later, 2), ("Reconciling", "Running"));
    assert_eq!(when(&later, "Reconciling"), when(&first, "Reconciling"));
    u.status = Some(later.status.clone());
    let done = decide_upgrade(
        &u,
        Some(&nodeop_of(&u, "Completed")),
        t("2026-11-25T10:09:00Z"),
    );
    assert_eq!(standing(&done, 2), ("Ready", "Completed"));
    assert_ne!(when(&done, "Ready"), when(&later, "Ready"));
}

#[test]
fn a_deleted_upgrade_keeps_its_conditions() {
    let mut u = upgrade(NodeOpUpgradeSpec::default());
    let running = decide_upgrade(
        &u,
        Some(&nodeop_of(&u, "Running")),
        t("2026-11-25T10:00:00Z"),
    );
    u.status = Some(running.status.clone());
    u.metadata.deletion_timestamp = Some(Time(t("2026-11-25T10:02:00Z")));
    let d = decide_upgrade(
        &u,
        Some(&nodeop_of(&u, "Completed")),
        t("2026-11-25T10:03:00Z"),
    );
    assert_eq!(d.status, running.status);
}
