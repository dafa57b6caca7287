//! Staged promotion as a Plan decides with it: `spec.after` holds nodes until the earlier Plans
//! completed the version and soaked; `spec.minVersionAge` keeps a new channel version out until it
//! is old enough, and the status says when it goes.

use super::*;
use crate::plan::api::AfterPlan;
use crate::plan::core::promotion::{StagePlan, StageRead, WAITING_FOR_PLAN};
use crate::plan::core::status::VERSION_TOO_NEW;

fn channel_plan(age: &str) -> Plan {
    let mut p = plan(1);
    p.spec.version = None;
    p.spec.channel = Some("https://update.k3s.io/v1-release/channels/stable".into());
    p.spec.min_version_age = Some(age.into());
    p
}

#[test]
fn a_channel_version_younger_than_the_minimum_age_waits_and_says_until_when() {
    let mut w = World::new(channel_plan("1h"), nodes(1));
    w.channel = Some(ChannelAnswer::Version("v1.31.2+k3s1".into()));
    let r = w.step();
    assert!(r.create_jobs.is_empty());
    let (status, reason, message) = complete(&r.status);
    assert_eq!((status.as_str(), reason.as_str()), (FALSE, VERSION_TOO_NEW));
    assert_eq!(
        message,
        "the channel's version v1.31.2+k3s1, first seen at 2026-11-22T10:00:00Z, rolls out from 2026-11-22T11:00:00Z (spec.minVersionAge)"
    );
    assert_eq!(r.requeue_after, Some(Duration::from_secs(3600)));
    assert!(reasons(&r).contains(&VERSION_TOO_NEW));
    w.now = t("2026-11-22T10:30:00Z");
    assert!(w.step().create_jobs.is_empty(), "still too new");
    w.now = t("2026-11-22T11:00:00Z");
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 1, "old enough");
    assert_eq!(w.status().latest_version.as_deref(), Some("v1.31.2-k3s1"));
}

#[test]
fn a_newer_channel_version_leaves_the_version_in_force_until_it_is_old_enough() {
    let mut w = World::new(channel_plan("2h"), nodes(1));
    w.channel = Some(ChannelAnswer::Version("v1.31.2+k3s1".into()));
    w.step();
    w.now = t("2026-11-22T12:00:00Z");
    w.step();
    let job = w.job_names().pop().expect("a job for v1.31.2");
    w.finish(&job, "Complete", w.now, "", "");
    w.step();
    assert_eq!(complete(&w.status()).1, "Complete");
    w.channel = Some(ChannelAnswer::Version("v1.32.0+k3s1".into()));
    w.now = t("2026-11-22T13:00:00Z");
    let r = w.step();
    assert_eq!(
        w.status().latest_version.as_deref(),
        Some("v1.31.2-k3s1"),
        "kept"
    );
    assert!(r.create_jobs.is_empty());
    let resolved = cond::get(&w.status(), cond::LATEST_RESOLVED)
        .and_then(|c| c.message.clone())
        .unwrap_or_default();
    assert_eq!(
        resolved,
        "keeping v1.31.2-k3s1: the channel's version v1.32.0+k3s1, first seen at 2026-11-22T13:00:00Z, rolls out from 2026-11-22T15:00:00Z (spec.minVersionAge)"
    );
    w.now = t("2026-11-22T15:00:00Z");
    let r = w.step();
    assert_eq!(w.status().latest_version.as_deref(), Some("v1.32.0-k3s1"));
    assert_eq!(r.create_jobs.len(), 1, "the new version rolls out");
}

#[test]
fn a_plan_after_another_starts_once_that_one_completed_the_same_version_and_soaked() {
    let mut p = plan(2);
    p.spec.after = Some(vec![AfterPlan {
        plan: "server".into(),
        soak: Some("10m".into()),
    }]);
    let mut w = World::new(p, nodes(2));
    let version = "v1.30.1-k3s1";
    w.stages = vec![StageRead {
        plan: "server".into(),
        found: Some(StagePlan {
            version: Some(version.into()),
            complete_since: None,
        }),
    }];
    let r = w.step();
    assert!(r.create_jobs.is_empty());
    let (_, reason, message) = complete(&r.status);
    assert_eq!(reason, WAITING_FOR_PLAN);
    assert_eq!(
        message,
        "waiting: plan server (spec.after) is still rolling out version v1.30.1-k3s1"
    );
    w.stages[0].found = Some(StagePlan {
        version: Some(version.into()),
        complete_since: Some(now()),
    });
    let r = w.step();
    assert!(r.create_jobs.is_empty(), "soaking");
    assert_eq!(r.requeue_after, Some(Duration::from_secs(30)));
    w.now = now() + jiff::SignedDuration::from_secs(600);
    assert_eq!(w.step().create_jobs.len(), 2, "soaked");
}

#[test]
fn control_plane_nodes_go_first_when_the_plan_asks() {
    let mut nodes = nodes(6);
    for n in &mut nodes[4..] {
        n.labels.insert(
            "node-role.kubernetes.io/control-plane".into(),
            "true".into(),
        );
    }
    let mut p = plan(2);
    p.spec.order = Some(crate::plan::api::NodeOrder::ControlPlaneFirst);
    let mut w = World::new(p, nodes);
    w.step();
    assert_eq!(w.status().applying, ["node-5", "node-6"]);
    // Without it, SUC's order (these two are not its first).
    let mut w = World::new(plan(2), w.nodes.clone());
    w.step();
    assert_ne!(w.status().applying, ["node-5", "node-6"]);
}
