//! Hooks as a whole Plan decides them: the pre hook runs before any node and a failed one touches
//! none; the post hook runs once after the last node; a reset runs a failed hook again.

use super::*;
use crate::plan::api::{HookPhase, HooksSpec};
use crate::plan::core::failure::RESET_ANNOTATION;
use crate::plan::core::hooks::{HOOK_LABEL, HOOK_PLAN_LABEL};

fn hook_spec(script: &str) -> serde_json::Map<String, serde_json::Value> {
    let v = serde_json::json!({"backoffLimit": 0, "template": {"spec": {"containers": [
        {"name": "hook", "image": "busybox", "command": ["sh", "-c", script]}]}}});
    v.as_object().cloned().unwrap_or_default()
}

fn hooked(concurrency: i64, pre: bool, post: bool) -> Plan {
    let mut p = plan(concurrency);
    p.spec.hooks = Some(HooksSpec {
        pre: pre.then(|| hook_spec("etcd-snapshot")),
        post: post.then(|| hook_spec("notify")),
        ..Default::default()
    });
    p
}

fn hook_jobs(w: &World, hook: &str) -> Vec<String> {
    (w.jobs.iter())
        .filter(|j| label(j, HOOK_LABEL) == Some(hook))
        .filter_map(|j| j.metadata.name.clone())
        .collect()
}

fn node_jobs(r: &Rollout) -> usize {
    (r.create_jobs.iter())
        .filter(|j| label(j, HOOK_PLAN_LABEL).is_none())
        .count()
}

#[test]
fn the_pre_hook_runs_before_the_first_node_and_the_post_hook_after_the_last() {
    let mut w = World::new(hooked(2, true, true), nodes(3));
    let r = w.step();
    assert_eq!(node_jobs(&r), 0, "no node before the pre hook");
    let pre = hook_jobs(&w, "pre");
    assert_eq!(pre.len(), 1);
    let job = r.create_jobs.first().expect("the pre hook's Job");
    let env = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|p| p.containers[0].env.clone().unwrap_or_default())
        .unwrap_or_default();
    assert!(
        env.iter()
            .any(|e| e.name == "SLIPWAY_HOOK" && e.value.as_deref() == Some("pre"))
    );
    assert_eq!(complete(&r.status).1, "PreHook");
    assert!(reasons(&r).contains(&"HookStarted"));
    // Still running: nothing starts, nothing is created again.
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 0);
    w.finish(&pre[0], "Complete", w.now, "", "");
    let r = w.step();
    assert_eq!(node_jobs(&r), 2, "the pre hook done, the nodes start");
    assert!(reasons(&r).contains(&"HookSucceeded"));
    let hooks = r.status.hooks.clone().expect("hooks status");
    assert_eq!(hooks.pre.expect("pre").phase, HookPhase::Succeeded);
    for _ in 0..10 {
        w.complete_unfinished();
        w.step();
    }
    assert_eq!(complete(&w.status()).0, "True");
    assert_eq!(hook_jobs(&w, "pre").len(), 1, "the pre hook ran once");
    let post = hook_jobs(&w, "post");
    assert_eq!(post.len(), 1, "the post hook once the last node is done");
    let st = w.status().hooks.expect("hooks");
    assert_eq!(st.post.expect("post").phase, HookPhase::Succeeded);
}

#[test]
fn a_failed_pre_hook_touches_no_node_until_a_reset() {
    let mut w = World::new(hooked(1, true, false), nodes(2));
    w.step();
    let pre = hook_jobs(&w, "pre");
    w.finish(
        &pre[0],
        "Failed",
        w.now,
        "BackoffLimitExceeded",
        "snapshot failed",
    );
    let r = w.step();
    let (status, reason, message) = complete(&r.status);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "PreHookFailed")
    );
    assert!(
        message.contains("snapshot failed") && message.contains(RESET_ANNOTATION),
        "{message}"
    );
    assert!(reasons(&r).contains(&"HookFailed"));
    for _ in 0..3 {
        w.now += jiff::SignedDuration::from_secs(600);
        let r = w.step();
        assert!(r.create_jobs.is_empty(), "no node, no new run");
        assert!(r.node_patches.is_empty(), "no node touched");
    }
    w.plan.metadata.annotations = Some([(RESET_ANNOTATION.to_string(), "1".to_string())].into());
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 1, "the pre hook again");
    assert_eq!(r.delete_jobs.len(), 1, "the failed run goes");
    let again = hook_jobs(&w, "pre");
    let second = again
        .iter()
        .find(|n| !pre.contains(n))
        .expect("a second run")
        .clone();
    assert!(second.ends_with("-2"), "{second}");
    w.finish(&second, "Complete", w.now, "", "");
    assert_eq!(node_jobs(&w.step()), 1);
}

#[test]
fn no_post_hook_when_nothing_was_rolled_out() {
    let mut w = World::new(hooked(1, false, true), nodes(1));
    // Every node already carries the hash: nothing to roll out, no hook.
    let r = w.step();
    let hash = r.status.latest_hash.clone().expect("hash");
    let label_key = crate::plan::api::labels::plan_node_label("p");
    for n in &mut w.nodes {
        n.labels.insert(label_key.clone(), hash.clone());
    }
    for j in w.job_names() {
        w.jobs
            .retain(|x| x.metadata.name.as_deref() != Some(j.as_str()));
    }
    w.plan.status = None;
    for _ in 0..3 {
        w.step();
    }
    assert_eq!(complete(&w.status()).0, "True");
    assert!(hook_jobs(&w, "post").is_empty());
}

#[test]
fn a_plan_without_hooks_has_no_hook_status_and_an_invalid_hook_is_named() {
    let mut w = World::new(plan(1), nodes(1));
    assert!(w.step().status.hooks.is_none());
    let mut p = plan(1);
    let mut bad = hook_spec("x");
    bad.insert(
        "template".into(),
        serde_json::json!({"spec": {"containers": []}}),
    );
    p.spec.hooks = Some(HooksSpec {
        pre: Some(bad),
        ..Default::default()
    });
    let e = crate::plan::core::validate(&p, &Default::default()).unwrap_err();
    assert_eq!(
        e,
        "spec.hooks.pre.template.spec.containers must not be empty"
    );
}
