//! End-to-end tests of DisruptionBudgets on the local cluster: one budget across a Plan and a
//! RebootPolicy, watched by a checker of its own; an admin's cordon using up the room; a frozen
//! schedule; the kill switch; staged promotion and a channel version's minimum age; and
//! `slipway explain` predicting the nodes the controller then starts.
//!
//! DisruptionBudgets are cluster-scoped and every controller reads them and writes their ledgers,
//! so a scene with a budget runs on a cluster of its own (shared, one at a time, with the chaos
//! scene of budgets); staged promotion and a version's minimum age need none and share the run's.

use crate::support;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::budgets::{LedgerSampler, PoolChecker};
use crate::support::controller::ControllerProcess;
use crate::support::plans::{complete_message, condition_reason, wait_complete, wait_reason};
use crate::support::reboots::{play_reboots, reboot_pods};
use crate::support::scene::Scene;
use anyhow::{anyhow, bail};
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use slipway::maintenance::api::{MaintenancePhase, NodeMaintenance};
use slipway::node::budget::DisruptionBudget;
use slipway::plan::api::Plan;
use slipway::reboot_policy::api::RebootPolicy;

/// What the scenes do with their pool.
trait Pool {
    fn plans(&self) -> Api<Plan>;
    fn budgets(&self) -> Api<DisruptionBudget>;
    async fn budget(&self, what: &str, spec: Value) -> String;
    async fn seen_budget(&self, what: &str, spec: Value) -> String;
    async fn patch_budget(&self, name: &str, spec: Value);
    async fn delete_budget(&self, name: &str);
    async fn plan(&self, name: &str, concurrency: i64, version: &str, extra: Value);
    async fn plan_taking(
        &self,
        name: &str,
        concurrency: i64,
        version: &str,
        extra: Value,
        delay: &str,
    );
    async fn wait_upgraded(&self, plan: &str);
    async fn jobs_of(&self, plan: &str) -> Vec<Job>;
    async fn first_job_of(&self, plan: &str, version: &str) -> Timestamp;
}

impl Pool for Scene {
    fn plans(&self) -> Api<Plan> {
        self.ns.api()
    }

    fn budgets(&self) -> Api<DisruptionBudget> {
        Api::all(self.client.clone())
    }

    /// A DisruptionBudget over the pool.
    async fn budget(&self, what: &str, spec: Value) -> String {
        let name = self.name(what);
        let mut full = json!({"nodeSelector": {"matchLabels": {"slipway.test/pool": self.pool}}});
        merge(&mut full, spec);
        let b: DisruptionBudget = serde_json::from_value(json!({
            "apiVersion": "slipway.dev/v1alpha1", "kind": "DisruptionBudget",
            "metadata": {"name": name}, "spec": full,
        }))
        .expect("a DisruptionBudget");
        self.budgets()
            .create(&PostParams::default(), &b)
            .await
            .expect("create the budget");
        name
    }

    /// The same, once the controller's ledger shows it.
    async fn seen_budget(&self, what: &str, spec: Value) -> String {
        let name = self.budget(what, spec).await;
        wait_ledger(self, &name, |_| true).await;
        name
    }

    /// Changes the budget's spec, and waits until the controller has seen it.
    async fn patch_budget(&self, name: &str, spec: Value) {
        self.budgets()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
            .expect("patch the budget");
        wait_ledger(self, name, |_| true).await;
    }

    async fn delete_budget(&self, name: &str) {
        let _ = self.budgets().delete(name, &DeleteParams::default()).await;
    }

    /// Creates the Plan `name` over the pool (or sets its spec); its Jobs take 2 s.
    async fn plan(&self, name: &str, concurrency: i64, version: &str, extra: Value) {
        self.plan_taking(name, concurrency, version, extra, "2s")
            .await;
    }

    /// The same, with Jobs that take `delay`.
    async fn plan_taking(
        &self,
        name: &str,
        concurrency: i64,
        version: &str,
        extra: Value,
        delay: &str,
    ) {
        let mut spec = json!({
            "concurrency": concurrency,
            "version": version,
            "serviceAccountName": "default",
            "nodeSelector": {"matchLabels": {"slipway.test/pool": self.pool}},
            "upgrade": {"image": "rancher/k3s-upgrade", "command": ["sh", "-c"], "args": ["echo upgrading"]},
        });
        merge(&mut spec, extra);
        let plan = json!({
            "apiVersion": "upgrade.cattle.io/v1", "kind": "Plan",
            "metadata": {"name": name, "annotations": {support::COMPLETE_DELAY_ANNOTATION: delay}},
            "spec": spec,
        });
        self.plans()
            .patch(
                name,
                &PatchParams::apply("e2e").force(),
                &Patch::Apply(&plan),
            )
            .await
            .expect("apply the Plan");
    }

    /// Every node of the pool carries the Plan's label at its latest hash.
    async fn wait_upgraded(&self, plan: &str) {
        wait_complete(&self.plans(), plan, Duration::from_secs(180)).await;
    }

    async fn jobs_of(&self, plan: &str) -> Vec<Job> {
        self.ns
            .api::<Job>()
            .list(&ListParams::default().labels(&format!("upgrade.cattle.io/plan={plan}")))
            .await
            .expect("list jobs")
            .items
    }

    /// When the Plan's first Job for `version` was created.
    async fn first_job_of(&self, plan: &str, version: &str) -> Timestamp {
        (self.jobs_of(plan).await.iter())
            .filter(|j| {
                j.labels()
                    .get("upgrade.cattle.io/version")
                    .map(String::as_str)
                    == Some(version)
            })
            .filter_map(|j| j.metadata.creation_timestamp.clone())
            .map(|t| t.0)
            .min()
            .unwrap_or_else(|| panic!("no Job of {plan} for {version}"))
    }
}

fn merge(base: &mut Value, extra: Value) {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        b.extend(e);
    }
}

/// Until the controller has seen the budget `name` as it is now and its ledger says what `ok`
/// wants: a budget takes effect once the controller's cache has it.
async fn wait_ledger(s: &Scene, name: &str, ok: impl Fn(&Value) -> bool) -> Value {
    support::wait_for(
        &format!("the ledger of {name}"),
        Duration::from_secs(30),
        || async {
            let b = s.budgets().get(name).await?;
            let status = serde_json::to_value(&b.status)?;
            let seen = status["observedGeneration"].as_i64() == b.metadata.generation;
            match seen && ok(&status) {
                true => Ok(status),
                false => bail!("{status}"),
            }
        },
    )
    .await
}

async fn budget_status(s: &Scene, name: &str) -> Value {
    let b = s.budgets().get(name).await.expect("get the budget");
    serde_json::to_value(&b.status).unwrap_or_default()
}

/// The controller of a scene: Plans, RebootPolicies and NodeMaintenances.
const EVERY_OPERATION: [(&str, &str); 2] = [
    ("SLIPWAY_REBOOT_POLICIES", "true"),
    ("SLIPWAY_MAINTENANCE", "true"),
];

/// Six nodes on the budgets' cluster, where no other scene's controller runs: every controller of
/// a cluster reads every budget and writes its ledger.
async fn budget_scene() -> Option<Scene> {
    let s = Scene::new("budget")
        .nodes(6)
        .own_cluster("budgets")
        .crds(&[
            "rebootpolicies.slipway.dev",
            "nodemaintenances.nodemaintenance.medik8s.io",
        ])
        .start()
        .await?;
    support::ensure_lease_namespace(&s.client).await;
    Some(s)
}

/// A scene with its controller running.
async fn with_controller(s: Option<Scene>) -> Option<(Scene, ControllerProcess)> {
    let s = s?;
    let controller = ControllerProcess::start(&s.cluster, s.ns.name(), &EVERY_OPERATION);
    Some((s, controller))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_predicts_the_first_nodes_under_a_budget() {
    let Some(s) = budget_scene().await else {
        return;
    };
    explain_predicts_the_first_nodes(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_budget_bounds_a_plan_and_a_policy() {
    let Some((s, _controller)) = with_controller(budget_scene().await).await else {
        return;
    };
    one_budget_bounds_a_plan_and_a_policy_together(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_names_only_live_holders() {
    let Some((s, _controller)) = with_controller(budget_scene().await).await else {
        return;
    };
    the_ledger_names_only_live_holders_within_the_limit(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admins_cordon_counts() {
    let Some((s, _controller)) = with_controller(budget_scene().await).await else {
        return;
    };
    an_admins_cordon_uses_the_room(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_schedule_holds_everything() {
    let Some((s, _controller)) = with_controller(budget_scene().await).await else {
        return;
    };
    a_frozen_schedule_holds_everything_until_it_ends(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kill_switch_stops_new_starts() {
    let Some((s, _controller)) = with_controller(budget_scene().await).await else {
        return;
    };
    the_kill_switch_stops_new_starts_and_says_so(&s).await;
}

/// Staged promotion and a version's minimum age need no budget: shared scenes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_staged_plan_waits_for_the_other() {
    let Some(s) = Scene::new("staged").nodes(3).start().await else {
        return;
    };
    // Plans only: a controller of the cluster-wide kinds would decide for other scenes' objects.
    let _controller = ControllerProcess::start(&s.cluster, s.ns.name(), &[]);
    a_staged_plan_waits_for_the_other_and_its_soak(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_young_channel_version_waits() {
    let Some(s) = Scene::new("young").nodes(3).start().await else {
        return;
    };
    // Plans only: a controller of the cluster-wide kinds would decide for other scenes' objects.
    let _controller = ControllerProcess::start(&s.cluster, s.ns.name(), &[]);
    a_young_channel_version_waits_for_its_age(&s).await;
}

/// Before any controller runs: `slipway explain` names the nodes a Plan starts first under a
/// budget; the controller, started, starts exactly those.
async fn explain_predicts_the_first_nodes(s: &Scene) {
    let cluster = &s.cluster;
    let budget = s.budget("first", json!({"maxUnavailable": 2})).await;
    s.plan("predicted", 3, "v1", json!({})).await;
    let out = support::process::slipway()
        .args(["explain", "plan/predicted", "-o", "json", "-n", s.ns.name()])
        .env("KUBECONFIG", cluster.kubeconfig_path())
        .output()
        .expect("run slipway explain");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let e: Value = serde_json::from_slice(&out.stdout).expect("explain's JSON");
    let predicted: BTreeSet<String> = (e["next"].as_array().into_iter().flatten())
        .filter_map(|n| n.as_str().map(str::to_string))
        .collect();
    assert_eq!(predicted.len(), 2, "the budget, not the concurrency: {e}");
    let waiting = &e["waiting"][0];
    assert_eq!(waiting["reason"], "DisruptionBudget", "{e}");
    assert_eq!(waiting["nodes"].as_array().map(Vec::len), Some(4), "{e}");
    let controller = ControllerProcess::start(cluster, s.ns.name(), &[]);
    let started = support::wait_for("the first Jobs", Duration::from_secs(60), || async {
        let jobs = s.jobs_of("predicted").await;
        let nodes: BTreeSet<String> = (jobs.iter())
            .filter_map(|j| j.labels().get("upgrade.cattle.io/node").cloned())
            .collect();
        match nodes.len() >= predicted.len() {
            true => Ok(nodes),
            false => bail!("Jobs for {nodes:?}"),
        }
    })
    .await;
    assert_eq!(
        started, predicted,
        "explain predicted what the controller started"
    );
    drop(controller);
    s.delete_budget(&budget).await;
}

/// A budget of 1 over a Plan at concurrency 3 and a RebootPolicy at concurrency 2 on the same
/// pool: never more than one node unavailable, and both finish. The ledger names the holders.
async fn one_budget_bounds_a_plan_and_a_policy_together(s: &Scene) {
    let budget = s.seen_budget("one", json!({"maxUnavailable": 1})).await;
    s.kubectl_wait(&format!("disruptionbudget/{budget}"), "condition=Ready", 30)
        .await;
    let checker = PoolChecker::start(s.client.clone(), s.ns.name().to_string(), s.pool.clone());
    let policy = s.name("reboots");
    let rbp: RebootPolicy = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1", "kind": "RebootPolicy", "metadata": {"name": policy},
        "spec": {"concurrency": 2, "nodeSelector": {"matchLabels": {"slipway.test/pool": s.pool}},
                 "drain": {"timeout": "2m"}, "timeout": "5m"},
    }))
    .expect("a RebootPolicy");
    let policies = Api::<RebootPolicy>::all(s.client.clone());
    policies
        .create(&PostParams::default(), &rbp)
        .await
        .expect("create the policy");
    for n in &s.nodes[..3] {
        support::ask_reboot(&s.client, n).await;
    }
    s.plan("upgrade", 3, "v1", json!({})).await;
    let mut rebooted = BTreeSet::new();
    let mut holders_seen = BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    loop {
        play_reboots(s.ns.name(), &s.client, &policy, &mut rebooted).await;
        let ledger = budget_status(s, &budget).await;
        for h in ledger["holders"].as_array().into_iter().flatten() {
            holders_seen.insert(h["reason"].as_str().unwrap_or_default().to_string());
        }
        let plan = s.plans().get("upgrade").await.expect("get the Plan");
        let complete = condition_reason(&plan, "Complete").as_deref() == Some("Complete");
        if rebooted.len() == 3 && complete {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rebooted {rebooted:?}; plan: {}; ledger {ledger}",
            complete_message(&plan)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let most = checker.most();
    assert_eq!(
        most.len(),
        1,
        "at most one node unavailable at once, and some: {most:?}"
    );
    assert!(
        holders_seen.contains("upgrade") && holders_seen.contains("reboot"),
        "the ledger named both kinds of holder: {holders_seen:?}"
    );
    let ledger = budget_status(s, &budget).await;
    assert_eq!(ledger["nodes"], 6, "{ledger}");
    assert_eq!(ledger["maxUnavailable"], 1, "{ledger}");
    policies
        .delete(&policy, &DeleteParams::default())
        .await
        .expect("delete the policy");
    s.delete_budget(&budget).await;
}

/// A budget of 2 over a Plan at concurrency 3, a RebootPolicy at concurrency 2 and a
/// NodeMaintenance: every ledger the controller writes during the rollout counts at most 2
/// unavailable nodes, and names no holder whose object had already let go of the node (a
/// Plan's finished node, still in the cached `status.applying` for a moment, once made it 3).
async fn the_ledger_names_only_live_holders_within_the_limit(s: &Scene) {
    let budget = s.seen_budget("live", json!({"maxUnavailable": 2})).await;
    let sampler = LedgerSampler::start(&s.client, &budget, s.ns.name());
    let policy = s.name("live");
    let rbp: RebootPolicy = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1", "kind": "RebootPolicy", "metadata": {"name": policy},
        "spec": {"concurrency": 2, "nodeSelector": {"matchLabels": {"slipway.test/pool": s.pool}},
                 "drain": {"timeout": "2m"}, "timeout": "5m"},
    }))
    .expect("a RebootPolicy");
    let policies = Api::<RebootPolicy>::all(s.client.clone());
    policies
        .create(&PostParams::default(), &rbp)
        .await
        .expect("create the policy");
    for n in &s.nodes[..2] {
        support::ask_reboot(&s.client, n).await;
    }
    let maintenance = s.name("live");
    let nm: NodeMaintenance = serde_json::from_value(json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
        "metadata": {"name": maintenance}, "spec": {"nodeName": s.nodes[5], "reason": "disk"},
    }))
    .expect("a NodeMaintenance");
    let nms = Api::<NodeMaintenance>::all(s.client.clone());
    nms.create(&PostParams::default(), &nm)
        .await
        .expect("create the maintenance");
    s.plan("upgrade", 3, "v1", json!({})).await;
    let (mut rebooted, mut maintained) = (BTreeSet::new(), false);
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    loop {
        play_reboots(s.ns.name(), &s.client, &policy, &mut rebooted).await;
        let m = nms
            .get_opt(&maintenance)
            .await
            .expect("get the maintenance");
        let phase = m.as_ref().and_then(|m| m.status.as_ref()?.phase);
        // Deleted once a ledger named it: on kwok its drain is over within a ledger's second.
        let named = sampler.reasons().contains("maintenance");
        if !maintained && named && phase == Some(MaintenancePhase::Succeeded) {
            nms.delete(&maintenance, &DeleteParams::default())
                .await
                .expect("delete the maintenance");
            maintained = true;
        }
        let plan = s.plans().get("upgrade").await.expect("get the Plan");
        let complete = condition_reason(&plan, "Complete").as_deref() == Some("Complete");
        if rebooted.len() == 2 && complete && maintained && m.is_none() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "rebooted {rebooted:?}; maintenance {phase:?}; plan: {}",
            complete_message(&plan)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The last ledger gives every node back, within the ledgers' period.
    wait_ledger(s, &budget, |st| st["unavailable"] == 0).await;
    sampler.caught_up(&s.client, &budget, s.ns.name()).await;
    let violations = sampler.violations();
    assert!(
        violations.is_empty(),
        "{} of {} ledgers wrong:\n{}",
        violations.len(),
        sampler.ledgers_seen(),
        violations.join("\n")
    );
    let reasons = sampler.reasons();
    assert!(
        ["upgrade", "reboot", "maintenance"]
            .iter()
            .all(|r| reasons.contains(*r)),
        "the ledgers named every kind of holder: {reasons:?}"
    );
    policies
        .delete(&policy, &DeleteParams::default())
        .await
        .expect("delete the policy");
    s.delete_budget(&budget).await;
}

/// A node an admin cordoned counts: with a budget of 1, the Plan upgrades nothing else until the
/// admin uncordons it, and says which budget it waits for.
async fn an_admins_cordon_uses_the_room(s: &Scene) {
    let budget = s.seen_budget("cordon", json!({"maxUnavailable": 1})).await;
    let admin = &s.nodes[5];
    support::set_unschedulable(&s.client, admin, true).await;
    wait_ledger(s, &budget, |st| {
        (st["holders"].as_array().into_iter().flatten())
            .any(|h| h["node"] == admin.as_str() && h["reason"] == "cordoned")
    })
    .await;
    s.plan("upgrade", 2, "v2", json!({})).await;
    let plan = support::wait_for(
        "the Plan to wait for the budget",
        Duration::from_secs(60),
        || async {
            let plan = s.plans().get("upgrade").await?;
            let message = complete_message(&plan);
            match message.contains(&format!(
                "disruptionbudget {budget} allows 1 unavailable node and 1 is"
            )) {
                true => Ok(plan),
                false => bail!("{message}"),
            }
        },
    )
    .await;
    let others: Vec<String> = (s.jobs_of("upgrade").await.iter())
        .filter(|j| {
            j.labels()
                .get("upgrade.cattle.io/version")
                .map(String::as_str)
                == Some("v2")
        })
        .filter_map(|j| j.labels().get("upgrade.cattle.io/node").cloned())
        .filter(|n| n != admin)
        .collect();
    assert!(
        others.is_empty(),
        "no other node while the admin's cordon holds the room: {others:?}; {plan:?}"
    );
    support::set_unschedulable(&s.client, admin, false).await;
    s.wait_upgraded("upgrade").await;
    s.delete_budget(&budget).await;
}

/// A schedule with `maxUnavailable: 0` that is in force now: nothing starts until its period
/// ends, and the status says until when; then the rollout goes.
async fn a_frozen_schedule_holds_everything_until_it_ends(s: &Scene) {
    let now = Timestamp::now();
    let utc = now.to_zoned(jiff::tz::TimeZone::UTC);
    let cron = format!("{} {} * * *", utc.minute(), utc.hour());
    // The period started at the top of this minute and ends 40 s from now: long enough for the
    // budget to be seen and the Plan created on a loaded machine (at 15 s, a CI run at load 27
    // saw the freeze over before the Plan's first decision).
    let duration = i64::from(utc.second()) + 40;
    let budget = s
        .seen_budget(
            "freeze",
            json!({"maxUnavailable": 3, "schedules": [
                {"name": "freeze", "schedule": cron, "duration": format!("{duration}s"), "maxUnavailable": 0}]}),
        )
        .await;
    let top = utc
        .with()
        .second(0)
        .subsec_nanosecond(0)
        .build()
        .expect("the top of the minute");
    let ends = top.timestamp() + jiff::SignedDuration::from_secs(duration);
    s.plan("upgrade", 3, "v3", json!({})).await;
    let plan = wait_reason(&s.plans(), "upgrade", "Frozen", Duration::from_secs(30)).await;
    // A freeze is on purpose and ends by itself: the Plan is Ready (GitOps tools wait calmly).
    let ready = (plan.status.iter().flat_map(|st| st.conditions.iter()))
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.status.clone(), c.reason.clone()));
    assert_eq!(
        ready,
        Some(("True".to_string(), Some("Frozen".to_string()))),
        "{plan:?}"
    );
    let message = complete_message(&plan);
    assert!(
        message.contains(&format!(
            "(schedule freeze until {})",
            slipway::common::rfc3339(ends)
        )),
        "{message}"
    );
    let ledger = budget_status(s, &budget).await;
    assert_eq!(ledger["schedule"]["name"], "freeze", "{ledger}");
    assert_eq!(ledger["allowed"], 0, "{ledger}");
    s.wait_upgraded("upgrade").await;
    let first = s.first_job_of("upgrade", "v3").await;
    assert!(
        first >= ends,
        "the first Job at {first}, the freeze ended at {ends}"
    );
    s.delete_budget(&budget).await;
}

/// `spec.halt`: within one reconcile no Plan, RebootPolicy or NodeMaintenance starts a node of
/// the pool, and each says so; a node under way finishes; released, everything goes on.
async fn the_kill_switch_stops_new_starts_and_says_so(s: &Scene) {
    let budget = s.seen_budget("halt", json!({"maxUnavailable": 6})).await;
    s.plan_taking("upgrade", 1, "v4", json!({}), "15s").await;
    // One node under way, then the switch.
    support::wait_for("a node under way", Duration::from_secs(60), || async {
        let plan = s.plans().get("upgrade").await?;
        match plan.status.as_ref().map(|st| st.applying.len()) {
            Some(1) => Ok(()),
            other => bail!("applying {other:?}"),
        }
    })
    .await;
    s.patch_budget(&budget, json!({"halt": true})).await;
    let maintenance = s.name("halted");
    let nm: NodeMaintenance = serde_json::from_value(json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
        "metadata": {"name": maintenance}, "spec": {"nodeName": s.nodes[4], "reason": "disk"},
    }))
    .expect("a NodeMaintenance");
    let nms = Api::<NodeMaintenance>::all(s.client.clone());
    nms.create(&PostParams::default(), &nm)
        .await
        .expect("create the maintenance");
    let policy = s.name("halted");
    let rbp: RebootPolicy = serde_json::from_value(json!({
        "apiVersion": "slipway.dev/v1alpha1", "kind": "RebootPolicy", "metadata": {"name": policy},
        "spec": {"nodeSelector": {"matchLabels": {"slipway.test/pool": s.pool}}},
    }))
    .expect("a RebootPolicy");
    let policies = Api::<RebootPolicy>::all(s.client.clone());
    policies
        .create(&PostParams::default(), &rbp)
        .await
        .expect("create the policy");
    support::ask_reboot(&s.client, &s.nodes[3]).await;
    support::wait_for(
        "the policy to say it is halted",
        Duration::from_secs(30),
        || async {
            let p = policies.get(&policy).await?;
            let status = serde_json::to_value(&p.status)?;
            let halted = (status["nodes"].as_array().into_iter().flatten())
                .any(|n| n["name"] == s.nodes[3] && n["reason"] == "Halted");
            match halted {
                true => Ok(()),
                false => bail!("{status}"),
            }
        },
    )
    .await;
    assert!(
        reboot_pods(s.ns.name(), &s.client, &policy)
            .await
            .is_empty(),
        "no reboot starts"
    );
    let plan = wait_reason(&s.plans(), "upgrade", "Halted", Duration::from_secs(60)).await;
    assert!(
        complete_message(&plan).contains("is halted (spec.halt)"),
        "{plan:?}"
    );
    support::wait_for(
        "the maintenance to say it is halted",
        Duration::from_secs(30),
        || async {
            let m = nms.get(&maintenance).await?;
            let drained = (m.status.iter().flat_map(|st| st.conditions.iter()))
                .find(|c| c.type_ == "Drained")
                .map(|c| (c.reason.clone(), c.message.clone()));
            match &drained {
                Some((reason, _)) if reason == "Halted" => Ok(()),
                other => bail!("{other:?}"),
            }
        },
    )
    .await;
    let node = Api::<Node>::all(s.client.clone())
        .get(&s.nodes[4])
        .await
        .expect("the node");
    assert!(
        !node.spec.and_then(|sp| sp.unschedulable).unwrap_or(false),
        "a halted maintenance does not cordon"
    );
    s.patch_budget(&budget, json!({"halt": false})).await;
    // The maintenance goes first (its node counts against the policy's concurrency while it is
    // cordoned), then the reboot and the rest of the Plan.
    support::wait_for(
        "the maintenance to drain its node",
        Duration::from_secs(60),
        || async {
            let m = nms.get(&maintenance).await?;
            match m.status.and_then(|st| st.phase) {
                Some(MaintenancePhase::Succeeded) => Ok(()),
                other => bail!("{other:?}"),
            }
        },
    )
    .await;
    nms.delete(&maintenance, &DeleteParams::default())
        .await
        .expect("delete the maintenance");
    let mut rebooted = BTreeSet::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(240);
    loop {
        play_reboots(s.ns.name(), &s.client, &policy, &mut rebooted).await;
        let plan = s.plans().get("upgrade").await.expect("get the Plan");
        let complete = condition_reason(&plan, "Complete").as_deref() == Some("Complete");
        if complete && !rebooted.is_empty() {
            break;
        }
        let status = policies.get(&policy).await.map(|p| p.status);
        assert!(
            std::time::Instant::now() < deadline,
            "after the halt: rebooted {rebooted:?}, plan: {}; policy: {status:?}",
            complete_message(&plan)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    policies
        .delete(&policy, &DeleteParams::default())
        .await
        .expect("delete the policy");
    s.delete_budget(&budget).await;
}

/// `spec.after`: a Plan starts no node before the other completed the same version and soaked.
async fn a_staged_plan_waits_for_the_other_and_its_soak(s: &Scene) {
    s.plan(
        "stage-b",
        2,
        "v5",
        json!({"after": [{"plan": "upgrade", "soak": "10s"}]}),
    )
    .await;
    let waiting = wait_reason(
        &s.plans(),
        "stage-b",
        "WaitingForPlan",
        Duration::from_secs(30),
    )
    .await;
    assert!(
        complete_message(&waiting).contains("plan upgrade"),
        "{waiting:?}"
    );
    s.plan("upgrade", 2, "v5", json!({})).await;
    let done = wait_complete(&s.plans(), "upgrade", Duration::from_secs(120)).await;
    let completed = support::plans::condition(&done, "Complete")
        .and_then(|c| c.last_transition_time.clone())
        .and_then(|t| t.parse::<Timestamp>().ok())
        .expect("when upgrade completed");
    s.wait_upgraded("stage-b").await;
    let first = (s.jobs_of("stage-b").await.iter())
        .filter_map(|j| j.metadata.creation_timestamp.clone())
        .map(|t| t.0)
        .min()
        .expect("Jobs of stage-b");
    let soaked = completed + jiff::SignedDuration::from_secs(10);
    assert!(
        first >= soaked,
        "stage-b's first Job at {first}, upgrade soaked at {soaked}"
    );
}

/// `spec.minVersionAge`: the channel's version is not started before it is that old, and the
/// status says from when it goes.
async fn a_young_channel_version_waits_for_its_age(s: &Scene) {
    let target = Arc::new(Mutex::new("v6.0.0".to_string()));
    let url = support::channel_server(target).await;
    // `version: ""` with a channel: the channel resolves. With no version in force yet, nothing
    // rolls out until the channel's is old enough.
    s.plan(
        "channel",
        3,
        "",
        json!({"channel": url, "minVersionAge": "15s"}),
    )
    .await;
    let plan = wait_reason(
        &s.plans(),
        "channel",
        "VersionTooNew",
        Duration::from_secs(60),
    )
    .await;
    let message = complete_message(&plan);
    let from = message
        .rsplit("rolls out from ")
        .next()
        .and_then(|m| m.split(' ').next())
        .and_then(|t| t.parse::<Timestamp>().ok())
        .ok_or_else(|| anyhow!("no time in {message:?}"))
        .expect("the status says when it rolls out");
    s.wait_upgraded("channel").await;
    let first = s.first_job_of("channel", "v6.0.0").await;
    assert!(
        first >= from,
        "the first Job at {first}, the version was old enough at {from}"
    );
}
