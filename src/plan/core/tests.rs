use super::*;
use std::collections::BTreeSet;
use std::time::Duration;

use crate::node::change::NodeChange;
use crate::node::holders::{Hold, NodeClaims, held_against};
use crate::plan::api::PlanStatus;

use crate::plan::api::labels;
use crate::plan::core::conditions::{LATEST_RESOLVED, TRUE, VALIDATED};
use crate::plan::core::{job, reboot};

fn label<'a>(job: &'a Job, key: &str) -> Option<&'a str> {
    job.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}
use crate::plan::api::PlanSpec;
use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::api::ObjectMeta;

const NS: &str = "system-upgrade";
const CONTROLLER: &str = "system-upgrade-controller";

fn t(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

fn now() -> Timestamp {
    t("2026-11-22T10:00:00Z")
}

fn node(name: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        uid: format!("uid-{name}"),
        labels: [
            (labels::HOSTNAME.to_string(), name.to_string()),
            (labels::OS.to_string(), "linux".to_string()),
            ("pool".to_string(), "a".to_string()),
        ]
        .into(),
        ready: true,
        boot_id: format!("boot-{name}"),
        ..Default::default()
    }
}

fn nodes(n: usize) -> Vec<NodeInfo> {
    (1..=n).map(|i| node(&format!("node-{i}"))).collect()
}

fn plan(concurrency: i64) -> Plan {
    Plan {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some(NS.into()),
            uid: Some("plan-uid".into()),
            generation: Some(1),
            ..Default::default()
        },
        spec: PlanSpec {
            concurrency: Some(concurrency),
            version: Some("v1.30.1+k3s1".into()),
            service_account_name: Some("system-upgrade".into()),
            node_selector: Some(LabelSelector {
                match_labels: Some([("pool".to_string(), "a".to_string())].into()),
                ..Default::default()
            }),
            upgrade: crate::plan::api::ContainerSpec {
                image: "rancher/k3s-upgrade".into(),
                ..Default::default()
            },
            ..Default::default()
        },
        status: None,
    }
}

/// A decision as the tests read it: its effects by kind, and whether it changed the status.
#[derive(Debug)]
pub(super) struct Rollout {
    pub status: PlanStatus,
    pub status_changed: bool,
    pub create_jobs: Vec<Job>,
    pub delete_jobs: Vec<JobDeletion>,
    pub create_pods: Vec<Pod>,
    pub delete_pods: Vec<String>,
    pub pull_pods: Vec<Pod>,
    pub delete_pull_pods: Vec<String>,
    pub node_patches: Vec<NodeChange>,
    pub events: Vec<crate::common::decision::Event>,
    pub requeue_after: Option<std::time::Duration>,
    pub waiting: Vec<crate::common::decision::Waiting>,
    pub next: BTreeSet<String>,
}

impl Rollout {
    pub(super) fn of(plan: &Plan, d: PlanDecision) -> Rollout {
        Rollout {
            status_changed: plan.status.as_ref() != Some(&d.status),
            create_jobs: d.create_jobs().into_iter().cloned().collect(),
            delete_jobs: d.delete_jobs().into_iter().cloned().collect(),
            create_pods: d.create_pods().into_iter().cloned().collect(),
            delete_pods: d.delete_pods().into_iter().cloned().collect(),
            pull_pods: d.pull_pods().into_iter().cloned().collect(),
            delete_pull_pods: d.delete_pull_pods().into_iter().cloned().collect(),
            node_patches: d.node_patches().into_iter().cloned().collect(),
            status: d.status,
            events: d.events,
            requeue_after: d.requeue,
            waiting: d.waiting,
            next: d.next,
        }
    }
}

struct World {
    plan: Plan,
    nodes: Vec<NodeInfo>,
    jobs: Vec<Job>,
    pods: Vec<Pod>,
    /// The Plan's pull pods, as listed.
    pull_pods: Vec<Pod>,
    health: BTreeMap<String, HealthObservation>,
    secrets: BTreeMap<String, Secret>,
    channel: Option<ChannelAnswer>,
    now: Timestamp,
    config: JobConfig,
    held: BTreeMap<String, crate::node::holders::Holder>,
    checks: Vec<crate::common::check::CheckRead>,
    budgets: Vec<crate::node::budget::DisruptionBudget>,
    stages: Vec<crate::plan::core::promotion::StageRead>,
    /// Decide as `slipway explain` does (the properties check it changes nothing).
    explain: bool,
}

impl World {
    fn new(plan: Plan, nodes: Vec<NodeInfo>) -> Self {
        World {
            plan,
            nodes,
            jobs: Vec::new(),
            pods: Vec::new(),
            pull_pods: Vec::new(),
            health: BTreeMap::new(),
            secrets: BTreeMap::new(),
            channel: None,
            now: now(),
            config: JobConfig::default(),
            held: BTreeMap::new(),
            checks: Vec::new(),
            budgets: Vec::new(),
            stages: Vec::new(),
            explain: true,
        }
    }

    fn decide(&self) -> Rollout {
        let nodes: Vec<&NodeInfo> = self.nodes.iter().collect();
        let is_hook = |j: &&Job| {
            (j.metadata.labels.as_ref())
                .is_some_and(|l| l.contains_key(crate::plan::core::hooks::HOOK_PLAN_LABEL))
        };
        let (hook_jobs, jobs): (Vec<&Job>, Vec<&Job>) = self.jobs.iter().partition(is_hook);
        let pods: Vec<&Pod> = self.pods.iter().collect();
        let pull_pods: Vec<&Pod> = self.pull_pods.iter().collect();
        // As the controller sees them: the holds given, and the nodes in a maintenance.
        let holds: Vec<Hold> = (self.held.iter())
            .map(|(node, holder)| Hold::new(node.clone(), holder.clone()))
            .collect();
        let tainted = self.nodes.iter().filter(|n| n.in_maintenance);
        let held = held_against(
            &holder(&self.plan),
            &NodeClaims::default(),
            &holds,
            tainted.map(|n| n.name.as_str()),
            [],
        );
        // The pools count what every operation holds, this Plan's applying nodes among them.
        let mine: BTreeSet<String> = self
            .plan
            .status
            .iter()
            .flat_map(|s| s.applying.clone())
            .collect();
        let others: BTreeSet<String> = self.held.keys().cloned().collect();
        let pools: Vec<_> = (self.budgets.iter())
            .map(|b| {
                let pool = crate::node::budget::Pool::new(b);
                pool.measure_for(&self.nodes, &others, &mine, self.now)
            })
            .collect();
        let budget =
            crate::node::budget::Budget::new(held, &pools, crate::node::budget::Reason::Upgrade);
        let input = PlanInput {
            plan: &self.plan,
            nodes: &nodes,
            settled: None,
            jobs: &jobs,
            hook_jobs: &hook_jobs,
            reboot_pods: &pods,
            pull_pods: &pull_pods,
            health: &self.health,
            secrets: &self.secrets,
            channel: self.channel.clone(),
            controller_name: CONTROLLER,
            job_config: &self.config,
            budget: &budget,
            shared: &BTreeSet::new(),
            checks: &self.checks,
            stages: Some(&self.stages),
            templates: None,
            explain: self.explain,
            pruned: None,
        };
        let d = decide(&input, self.now);
        self.assert_settled_change_nothing(&input, &d);
        self.assert_memo_changes_nothing(&input, &d);
        Rollout::of(&self.plan, d)
    }

    /// Every decision of these tests is made again with a memo of template hashes, first empty
    /// (it learns what it renders) then holding what it learned, and must be the same.
    fn assert_memo_changes_nothing(&self, input: &PlanInput<'_>, d: &PlanDecision) {
        use crate::plan::core::{TemplateMemo, decide_learning};
        let mut memo = TemplateMemo::default();
        let (first, learned) = decide_learning(
            &PlanInput {
                templates: Some(&memo),
                channel: input.channel.clone(),
                ..*input
            },
            self.now,
        );
        assert_eq!(&first, d, "a decision that learns templates differs");
        let was_learned = !learned.is_empty();
        memo.learn(learned);
        let (second, again) = decide_learning(
            &PlanInput {
                templates: Some(&memo),
                channel: input.channel.clone(),
                ..*input
            },
            self.now,
        );
        assert_eq!(&second, d, "a decision from remembered templates differs");
        assert!(
            again.is_empty() || !was_learned,
            "what was learned is learned again: {again:?}"
        );
    }

    /// Every decision of these tests is made again as the controller makes it, with the settled
    /// nodes counted instead of read and the quiet Jobs of the nodes not read left out, and must
    /// be the same.
    fn assert_settled_change_nothing(&self, input: &PlanInput<'_>, d: &PlanDecision) {
        use crate::plan::core::settled::{SettledNodes, named, quiet, rule, target};
        let channel = input.channel.as_ref();
        let Some(target) = target(
            input.plan,
            input.secrets,
            channel,
            input.job_config,
            self.now,
        ) else {
            return;
        };
        let rule = rule(input.plan, &target.hash);
        let all_jobs: Vec<&Job> = input.jobs.iter().chain(input.hook_jobs).copied().collect();
        let pods: Vec<&Pod> = (input.reboot_pods.iter().chain(input.pull_pods))
            .copied()
            .collect();
        let named = named(input.plan, &all_jobs, &pods);
        let (read, left): (Vec<&NodeInfo>, Vec<&NodeInfo>) = input.nodes.iter().partition(|n| {
            !rule.holds(n)
                || named.hostnames.contains(n.hostname())
                || named.names.contains(n.name.as_str())
        });
        let settled = SettledNodes {
            hash: target.hash.clone(),
            count: left.len(),
        };
        let read_names: BTreeSet<&str> = read.iter().map(|n| n.name.as_str()).collect();
        let jobs: Vec<&Job> = (input.jobs.iter().copied())
            .filter(|j| {
                quiet(j).is_none_or(|q| q.version != target.version || read_names.contains(q.node))
            })
            .collect();
        let unexplained = PlanInput {
            explain: false,
            channel: input.channel.clone(),
            ..*input
        };
        let split = PlanInput {
            nodes: &read,
            settled: Some(&settled),
            jobs: &jobs,
            channel: input.channel.clone(),
            ..unexplained
        };
        let full = match input.explain {
            true => decide(&unexplained, self.now),
            false => d.clone(),
        };
        assert_eq!(
            decide(&split, self.now),
            full,
            "{} nodes settled, {} Jobs left out",
            left.len(),
            input.jobs.len() - jobs.len()
        );
    }

    /// Applies a decision the way the controller and the cluster would: status written, Jobs
    /// created (not yet finished), Jobs deleted, node patches applied.
    fn apply(&mut self, r: &Rollout) {
        self.plan.status = Some(r.status.clone());
        let gone: BTreeSet<&str> = r.delete_jobs.iter().map(|d| d.name.as_str()).collect();
        self.jobs
            .retain(|j| !gone.contains(j.metadata.name.as_deref().unwrap_or_default()));
        for j in &r.create_jobs {
            if !self.jobs.iter().any(|e| e.metadata.name == j.metadata.name) {
                self.jobs.push(j.clone());
            }
        }
        self.pods.retain(|p| {
            !r.delete_pods
                .contains(p.metadata.name.as_ref().expect("pod name"))
        });
        for p in &r.create_pods {
            if !self.pods.iter().any(|e| e.metadata.name == p.metadata.name) {
                self.pods.push(p.clone());
            }
        }
        self.pull_pods.retain(|p| {
            !r.delete_pull_pods
                .contains(p.metadata.name.as_ref().expect("pod name"))
        });
        for p in &r.pull_pods {
            if !(self.pull_pods.iter()).any(|e| e.metadata.name == p.metadata.name) {
                self.pull_pods.push(p.clone());
            }
        }
        for p in &r.node_patches {
            let n = self
                .nodes
                .iter_mut()
                .find(|n| n.name == p.node)
                .expect("patched node exists");
            p.apply_to(n);
        }
    }

    fn step(&mut self) -> Rollout {
        let r = self.decide();
        self.apply(&r);
        r
    }

    fn finish(&mut self, job: &str, type_: &str, at: Timestamp, reason: &str, message: &str) {
        let j = self
            .jobs
            .iter_mut()
            .find(|j| j.metadata.name.as_deref() == Some(job))
            .expect("job to finish exists");
        j.status = Some(JobStatus {
            conditions: Some(vec![JobCondition {
                type_: type_.into(),
                status: "True".into(),
                reason: Some(reason.into()),
                message: Some(message.into()),
                last_transition_time: Some(Time(at)),
                ..Default::default()
            }]),
            ..Default::default()
        });
    }

    /// Completes every Job that has not finished, now.
    fn complete_unfinished(&mut self) {
        for name in self.job_names() {
            let unfinished = (self.jobs.iter())
                .find(|j| j.metadata.name.as_deref() == Some(name.as_str()))
                .is_some_and(|j| j.status.is_none());
            if unfinished {
                self.finish(&name, "Complete", self.now, "", "");
            }
        }
    }

    fn job_names(&self) -> Vec<String> {
        self.jobs
            .iter()
            .filter_map(|j| j.metadata.name.clone())
            .collect()
    }

    fn status(&self) -> PlanStatus {
        self.plan.status.clone().unwrap_or_default()
    }
}

fn complete(st: &PlanStatus) -> (String, String, String) {
    let c = cond::get(st, COMPLETE).expect("Complete condition");
    (
        c.status.clone(),
        c.reason.clone().unwrap_or_default(),
        c.message.clone().unwrap_or_default(),
    )
}

/// The reasons of the Kubernetes Events a decision publishes (quiet ones go to notifications
/// only: [`quiet`]).
fn reasons(r: &Rollout) -> Vec<&'static str> {
    r.events
        .iter()
        .filter(|e| !e.quiet)
        .map(|e| e.reason)
        .collect()
}

fn quiet(r: &Rollout) -> Vec<&'static str> {
    r.events
        .iter()
        .filter(|e| e.quiet)
        .map(|e| e.reason)
        .collect()
}

#[test]
fn first_decision_resolves_hashes_and_selects_without_exceeding_concurrency() {
    let mut w = World::new(plan(2), nodes(5));
    let r = w.step();
    let st = &r.status;
    assert!(r.status_changed);
    assert_eq!(st.latest_version.as_deref(), Some("v1.30.1-k3s1"));
    assert_eq!(
        st.latest_hash.as_deref(),
        Some("a71d41ca3e2c6b5a1d92efcb9449397b0115d7e83e52a5c0055c484e")
    );
    assert!(cond::is(st, VALIDATED, TRUE));
    assert_eq!(cond::reason(st, LATEST_RESOLVED), "Version");
    assert_eq!(complete(st).1, "SyncJob");
    assert_eq!(st.applying.len(), 2);
    assert_eq!(r.create_jobs.len(), 2);
    assert_eq!(reasons(&r), vec!["Validated", "Resolved", "SyncJob"]);
    assert_eq!(quiet(&r), ["NodeStarted", "NodeStarted"]);
    for j in &r.create_jobs {
        let node = label(j, labels::NODE).expect("node label");
        assert!(
            st.applying.iter().any(|a| a == node),
            "jobs only for applying nodes"
        );
    }
    assert_eq!(st.observed_generation, Some(1));
}

#[test]
fn a_second_identical_decision_changes_nothing() {
    let mut w = World::new(plan(2), nodes(3));
    w.step();
    // The created Jobs show up: their nodes move from Pending to Upgrading.
    let r = w.step();
    assert!(
        r.status
            .nodes
            .iter()
            .all(|n| n.phase == NodePhase::Upgrading)
    );
    let r = w.decide();
    assert!(!r.status_changed, "{:#?}", r.status);
    assert!(r.events.is_empty(), "{:?}", r.events);
    assert!(r.delete_jobs.is_empty());
}

#[test]
fn a_full_rollout_never_has_more_jobs_than_concurrency() {
    let mut w = World::new(plan(2), nodes(5));
    let mut clock = now();
    for _ in 0..40 {
        let r = w.step();
        let unfinished = w.jobs.iter().filter(|j| j.status.is_none()).count();
        assert!(unfinished <= 2, "{unfinished} unfinished jobs");
        assert!(w.status().applying.len() <= 2);
        if is_done(&w) {
            break;
        }
        // The oldest unfinished job completes.
        clock += jiff::SignedDuration::from_secs(30);
        w.now = clock;
        if let Some(name) = w
            .jobs
            .iter()
            .find(|j| j.status.is_none())
            .and_then(|j| j.metadata.name.clone())
        {
            w.finish(&name, "Complete", clock, "", "");
        }
        let _ = r;
    }
    assert!(is_done(&w), "{:#?}", w.status());
    let hash = w.status().latest_hash.expect("hash");
    for n in &w.nodes {
        assert_eq!(
            n.labels.get("plan.upgrade.cattle.io/p"),
            Some(&hash),
            "{}",
            n.name
        );
    }
}

fn is_done(w: &World) -> bool {
    cond::is(&w.status(), COMPLETE, TRUE)
}

#[test]
fn nothing_is_selected_without_a_selector_or_concurrency() {
    let mut p = plan(2);
    p.spec.node_selector = None;
    let r = World::new(p, nodes(3)).decide();
    assert_eq!(
        complete(&r.status),
        (
            TRUE.into(),
            "Complete".into(),
            "spec.nodeSelector is not set: such a Plan selects no node (as in SUC)".into()
        )
    );
    assert!(r.create_jobs.is_empty());
    assert!(reasons(&r).contains(&"NoNodes"));
    let mut p = plan(2);
    p.spec.node_selector = Some(LabelSelector {
        match_labels: Some([("pool".to_string(), "gpu".to_string())].into()),
        ..Default::default()
    });
    let r = World::new(p, nodes(3)).decide();
    assert_eq!(
        complete(&r.status).2,
        "no node matches spec.nodeSelector pool=gpu"
    );
    // SUC says Complete here, with nothing done (its issues #217, #285): slipway says why.
    let mut w = World::new(plan(0), nodes(3));
    let r = w.step();
    assert_eq!(
        complete(&r.status),
        (
            FALSE.into(),
            "NoConcurrency".into(),
            "spec.concurrency is 0: none of the 3 nodes to upgrade starts; set it to 1 or more"
                .into()
        )
    );
    assert!(r.create_jobs.is_empty());
    assert_eq!(reasons(&r), vec!["Validated", "Resolved", "NoConcurrency"]);
    assert!(w.step().events.is_empty(), "said once");
}

#[test]
fn a_plan_whose_nodes_are_all_done_says_nothing_more() {
    let mut w = World::new(plan(1), nodes(1));
    let hash = w.step().status.latest_hash.expect("hash");
    w.nodes[0]
        .labels
        .insert("plan.upgrade.cattle.io/p".into(), hash);
    w.jobs.clear();
    w.plan.status = None;
    let r = w.step();
    assert_eq!(
        complete(&r.status),
        (TRUE.into(), "Complete".into(), String::new())
    );
}

#[test]
fn a_plan_without_version_or_channel_is_not_ready() {
    let mut p = plan(1);
    p.spec.version = None;
    let mut w = World::new(p, nodes(1));
    let r = w.step();
    let lr = cond::get(&r.status, LATEST_RESOLVED).expect("LatestResolved");
    assert_eq!(
        (lr.status.as_str(), lr.reason.as_deref()),
        (FALSE, Some("Error"))
    );
    assert_eq!(lr.message.as_deref(), Some(ERR_UNRESOLVABLE));
    assert_eq!(
        complete(&r.status),
        (FALSE.into(), "NotReady".into(), MSG_NOT_READY.into())
    );
    assert!(reasons(&r).contains(&"ResolveFailed"));
    assert!(r.create_jobs.is_empty());
    assert!(
        !reasons(&w.decide()).contains(&"ResolveFailed"),
        "reported once"
    );
}

#[test]
fn invalid_plans_say_which_field() {
    let mut p = plan(1);
    p.spec.post_complete_delay = Some("-30s".into());
    let r = World::new(p, nodes(1)).decide();
    let v = cond::get(&r.status, VALIDATED).expect("Validated");
    assert_eq!(v.status, FALSE);
    assert_eq!(
        v.message.as_deref(),
        Some("spec.postCompleteDelay is negative")
    );
    assert_eq!(reasons(&r), vec!["ValidateFailed"]);
    assert!(r.create_jobs.is_empty());

    let mut p = plan(1);
    p.spec.drain = Some(crate::plan::api::DrainSpec {
        delete_local_data: Some(true),
        delete_emptydir_data: Some(true),
        ..Default::default()
    });
    let r = World::new(p, nodes(1)).decide();
    assert_eq!(
        cond::get(&r.status, VALIDATED)
            .and_then(|c| c.message.clone())
            .as_deref(),
        Some("spec.drain cannot specify both deleteEmptydirData and deleteLocalData")
    );

    let mut p = plan(1);
    p.spec.secrets = Some(vec![crate::plan::api::SecretSpec {
        name: "creds".into(),
        path: "creds".into(),
        ..Default::default()
    }]);
    let r = World::new(p, nodes(1)).decide();
    assert_eq!(
        cond::get(&r.status, VALIDATED)
            .and_then(|c| c.message.clone())
            .as_deref(),
        Some("secret \"creds\" not found")
    );

    let validated = |p: Plan| {
        let r = World::new(p, nodes(1)).decide();
        assert!(r.create_jobs.is_empty());
        cond::get(&r.status, VALIDATED)
            .and_then(|c| c.message.clone())
            .unwrap_or_default()
    };
    let mut p = plan(1);
    p.metadata.name = Some("p".repeat(64));
    assert!(validated(p).starts_with(&format!(
        "metadata.name {:?} cannot name the node label plan.upgrade.cattle.io/",
        "p".repeat(64)
    )),);
    let mut p = plan(1);
    p.spec.node_selector = Some(LabelSelector {
        match_labels: Some(BTreeMap::from([("bad key!".to_string(), "x".to_string())])),
        ..Default::default()
    });
    assert!(validated(p).starts_with("spec.nodeSelector: "));
    let mut p = plan(1);
    p.spec.upgrade.args = Some(vec!["x".repeat(1_560_000)]);
    assert!(validated(p).contains("bytes: its Jobs would be over the 1572864 bytes"));
    let mut p = plan(1);
    p.spec.version = Some("v1.2.3 ✓".into());
    assert!(validated(p).starts_with(
        "spec.version \"v1.2.3 ✓\" cannot be the Jobs' label upgrade.cattle.io/version: "
    ),);
}

#[test]
fn a_channel_version_that_cannot_be_a_label_is_a_resolve_failure() {
    let mut p = plan(1);
    p.spec.version = None;
    p.spec.channel = Some("https://example.com/channels/latest".into());
    let mut w = World::new(p, nodes(1));
    w.channel = Some(ChannelAnswer::Version("latest?arch=arm64".into()));
    let r = w.decide();
    let c = cond::get(&r.status, LATEST_RESOLVED).expect("LatestResolved");
    assert_eq!(c.status, FALSE);
    assert!(
        c.message.as_deref().is_some_and(|m| m.starts_with(
            "cannot resolve the channel https://example.com/channels/latest: the channel's version \"latest?arch=arm64\" cannot be"
        )),
        "{c:?}"
    );
    assert!(r.create_jobs.is_empty());
}

#[test]
fn outside_the_window_a_rollout_waits_but_one_started_goes_on() {
    let mut p = plan(1);
    p.spec.window = Some(crate::plan::api::TimeWindowSpec {
        days: Some(vec![
            "su".into(),
            "mo".into(),
            "tu".into(),
            "we".into(),
            "th".into(),
            "fr".into(),
            "sa".into(),
        ]),
        start_time: Some("01:00".into()),
        end_time: Some("02:00".into()),
        time_zone: Some("UTC".into()),
        ..Default::default()
    });
    let mut w = World::new(p, nodes(2));
    let r = w.step();
    assert_eq!(
        complete(&r.status),
        (
            FALSE.into(),
            "Waiting".into(),
            MSG_WAITING_FOR_WINDOW.into()
        )
    );
    assert!(r.create_jobs.is_empty());
    assert!(
        r.requeue_after
            .is_some_and(|d| d <= Duration::from_secs(60))
    );
    assert!(reasons(&r).contains(&"Waiting"));
    assert!(!reasons(&w.step()).contains(&"Waiting"), "reported once");

    w.now = t("2026-11-22T01:30:00Z");
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 1);
    // The window closes; the rollout that started keeps going.
    w.now = t("2026-11-22T03:00:00Z");
    let name = w.job_names()[0].clone();
    w.finish(&name, "Complete", w.now, "", "");
    // Labelled, and its slot goes to the next node in the same decision.
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 1, "{:#?}", r.status);
}

#[test]
fn a_failed_job_is_reported_and_not_retried_until_the_plan_changes() {
    let mut w = World::new(plan(1), nodes(1));
    w.step();
    let job = w.job_names()[0].clone();
    w.finish(
        &job,
        "Failed",
        now(),
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
    );
    let r = w.step();
    let expected = format!(
        "Job {NS}/{job} failed on Node node-1: DeadlineExceeded: Job was active longer than specified deadline"
    );
    assert_eq!(
        complete(&r.status),
        (FALSE.into(), "JobFailed".into(), expected.clone())
    );
    assert_eq!(reasons(&r), vec!["JobFailed"]);
    assert_eq!(r.status.nodes[0].phase, NodePhase::Failed);
    assert_eq!(
        r.status.applying,
        vec!["node-1".to_string()],
        "the slot stays held"
    );
    // Reported once.
    assert!(w.step().events.is_empty());
    // The TTL controller deletes the Job (slipway leaves that to it); it is not created again.
    w.now = now() + jiff::SignedDuration::from_secs(3600);
    let r = w.step();
    assert!(r.delete_jobs.is_empty());
    w.jobs.clear();
    let r = w.step();
    assert!(r.create_jobs.is_empty(), "no automatic retry");
    assert_eq!(complete(&r.status).1, "JobFailed");
    // Editing the Plan retries: the Job is created with the status that lists it.
    w.plan.metadata.generation = Some(2);
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 1);
    assert_eq!(r.status.nodes[0].phase, NodePhase::Upgrading);
}

#[test]
fn a_changed_pod_template_replaces_a_failed_job() {
    let mut w = World::new(plan(1), nodes(1));
    w.step();
    let job = w.job_names()[0].clone();
    w.finish(
        &job,
        "Failed",
        now(),
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    );
    w.step();
    w.plan.spec.upgrade.args = Some(vec!["fixed".into()]);
    let r = w.step();
    assert_eq!(
        r.delete_jobs
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>(),
        vec![job.as_str()]
    );
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 1, "recreated with the new template");
    assert_ne!(complete(&r.status).1, "JobFailed");
}

/// On SUC's CRD `status.nodes` is pruned at every status write: the failed Job of the template
/// before an edit is still replaced (SUC's e2e suite: a failing Job, then the args fixed).
#[test]
fn a_changed_pod_template_replaces_a_failed_job_without_status_nodes() {
    let mut w = World::new(plan(1), nodes(1));
    let pruned = |w: &mut World| {
        if let Some(st) = w.plan.status.as_mut() {
            st.nodes.clear();
        }
    };
    w.step();
    pruned(&mut w);
    let job = w.job_names()[0].clone();
    w.finish(&job, "Failed", now(), "BackoffLimitExceeded", "backoff");
    w.step();
    pruned(&mut w);
    assert_eq!(complete(&w.status()).1, "JobFailed");
    assert!(w.step().delete_jobs.is_empty(), "held while unchanged");
    pruned(&mut w);
    w.plan.metadata.generation = Some(2);
    w.plan.spec.upgrade.args = Some(vec!["exit 0".into()]);
    let r = w.step();
    pruned(&mut w);
    let deleted: Vec<&str> = r.delete_jobs.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(deleted, [job.as_str()]);
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 1, "recreated with the new template");
}

/// SUC's CRD and slipway's accept a Plan without an image: it resolves and is valid, its node is
/// listed as SUC lists it, and no Job is made nor node touched; `Complete` says why.
#[test]
fn a_plan_without_an_image_makes_no_job_and_says_why() {
    let mut p = plan(1);
    p.spec.upgrade.image = String::new();
    p.spec.cordon = Some(true);
    let mut w = World::new(p, nodes(1));
    for _ in 0..3 {
        let r = w.step();
        assert!(r.create_jobs.is_empty());
        assert!(r.node_patches.is_empty(), "{:?}", r.node_patches);
        assert!(cond::is(&r.status, VALIDATED, TRUE));
        assert_eq!(
            complete(&r.status),
            (
                "False".into(),
                "ValidationFailed".into(),
                "Failed to create job for node node-1: spec.upgrade.image is empty: a Job needs an image".into()
            )
        );
    }
}

#[test]
fn post_complete_delay_holds_the_slot_and_labels_after_it() {
    let mut p = plan(1);
    p.spec.post_complete_delay = Some("5m".into());
    p.spec.cordon = Some(true);
    p.spec.post_complete_labels =
        Some([("upgraded-to".to_string(), "$(LATEST_VERSION)".to_string())].into());
    let mut w = World::new(p, nodes(2));
    w.step();
    let job = w.job_names()[0].clone();
    let node = cordon_node_of_job(&mut w);
    w.finish(&job, "Complete", now(), "", "");
    w.now = now() + jiff::SignedDuration::from_secs(60);
    let r = w.step();
    assert!(r.events.is_empty(), "the per-node story is in status.nodes");
    assert_eq!(r.requeue_after, Some(Duration::from_secs(240)));
    assert_eq!(r.node_patches.len(), 1);
    assert!(r.node_patches[0].unschedulable == Some(false) && r.node_patches[0].labels.is_empty());
    assert!(
        r.create_jobs.is_empty(),
        "the slot is held during the delay"
    );
    assert_eq!(r.status.nodes[0].phase, NodePhase::Waiting);

    w.now = now() + jiff::SignedDuration::from_secs(301);
    let r = w.step();
    assert_eq!(reasons(&r), vec!["Progress"], "half of the nodes are done");
    assert_eq!(
        quiet(&r),
        ["NodeDone", "NodeStarted"],
        "one done, the next started"
    );
    let labels = &done_patch(&r).labels;
    assert_eq!(
        labels.get("upgraded-to").cloned().flatten().as_deref(),
        Some("v1.30.1-k3s1")
    );
    assert_eq!(
        labels.get("plan.upgrade.cattle.io/p").cloned().flatten(),
        w.status().latest_hash
    );
    // The same decision gives the slot to the other node.
    assert_eq!(r.create_jobs.len(), 1);
    assert_ne!(label(&r.create_jobs[0], labels::NODE), Some(node.as_str()));
}

#[test]
fn a_new_version_deletes_jobs_of_the_old_one() {
    let mut w = World::new(plan(1), nodes(1));
    w.step();
    let old = w.job_names()[0].clone();
    w.plan.spec.version = Some("v1.31.0+k3s1".into());
    let r = w.step();
    assert!(r.delete_jobs.iter().any(|d| d.name == old));
    assert_eq!(r.create_jobs.len(), 1);
    assert_ne!(
        r.create_jobs[0].metadata.name.as_deref(),
        Some(old.as_str())
    );
    assert!(reasons(&r).contains(&"Resolved"));
}

#[test]
fn jobs_of_vanished_or_out_of_turn_nodes_are_deleted() {
    let mut w = World::new(plan(1), nodes(2));
    w.step();
    let job = w.job_names()[0].clone();
    let node = label(&w.jobs[0], labels::NODE).expect("node").to_string();
    w.nodes.retain(|n| n.name != node);
    let r = w.step();
    assert!(
        r.delete_jobs.iter().any(|d| d.name == job),
        "{:?}",
        r.delete_jobs
    );

    // A running Job whose node is not applying runs out of turn.
    let mut w = World::new(plan(1), nodes(2));
    w.step();
    let node = label(&w.jobs[0], labels::NODE).expect("node").to_string();
    w.nodes
        .iter_mut()
        .find(|n| n.name == node)
        .expect("node")
        .labels
        .insert("plan.upgrade.cattle.io/p".into(), "disabled".into());
    let r = w.step();
    assert_eq!(r.delete_jobs.len(), 1, "{:?}", r.delete_jobs);
}

#[test]
fn hostname_different_from_node_name_keeps_its_running_job() {
    // SUC compares node names with hostnames here and deletes such Jobs; slipway does not.
    let mut n = node("ip-10-0-0-1.ec2.internal");
    n.labels.insert(labels::HOSTNAME.into(), "worker-a".into());
    let mut w = World::new(plan(1), vec![n]);
    w.step();
    assert_eq!(w.status().applying, vec!["worker-a".to_string()]);
    let r = w.step();
    assert!(r.delete_jobs.is_empty(), "{:?}", r.delete_jobs);
}

#[test]
fn channel_answers_set_latest_resolved() {
    let mut p = plan(1);
    p.spec.version = None;
    p.spec.channel = Some("https://update.k3s.io/v1-release/channels/stable".into());
    let mut w = World::new(p, nodes(1));
    // Not asked yet: nothing resolved, nothing runs.
    let r = w.step();
    assert!(r.create_jobs.is_empty());
    w.channel = Some(ChannelAnswer::Failed(
        "unexpected response: HTTP/1.1 503 Service Unavailable".into(),
    ));
    let r = w.step();
    let lr = cond::get(&r.status, LATEST_RESOLVED).expect("LatestResolved");
    assert_eq!(
        (lr.status.as_str(), lr.reason.as_deref()),
        (FALSE, Some("ResolveFailed"))
    );
    assert!(reasons(&r).contains(&"ResolveFailed"));
    w.channel = Some(ChannelAnswer::Version("v1.30.1+k3s1".into()));
    let r = w.step();
    assert_eq!(cond::reason(&r.status, LATEST_RESOLVED), "Channel");
    assert_eq!(r.status.latest_version.as_deref(), Some("v1.30.1-k3s1"));
    assert_eq!(r.create_jobs.len(), 1);
    // A later failure keeps the version it had and says so.
    w.channel = Some(ChannelAnswer::Failed("timed out".into()));
    let r = w.step();
    let lr = cond::get(&r.status, LATEST_RESOLVED).expect("LatestResolved");
    assert_eq!(lr.status, TRUE);
    assert!(
        lr.message
            .as_deref()
            .is_some_and(|m| m.ends_with("keeping v1.30.1-k3s1")),
        "{lr:?}"
    );
    assert_eq!(r.status.latest_version.as_deref(), Some("v1.30.1-k3s1"));
}

#[test]
fn lowering_concurrency_keeps_applying_nodes() {
    let mut w = World::new(plan(3), nodes(4));
    w.step();
    assert_eq!(w.status().applying.len(), 3);
    w.plan.spec.concurrency = Some(1);
    let r = w.step();
    assert_eq!(
        r.status.applying.len(),
        3,
        "applying nodes are never dropped"
    );
    assert!(r.delete_jobs.is_empty());
}

#[test]
fn a_new_hash_mid_job_waits_for_the_old_job_and_never_labels_backwards() {
    let mut p = plan(1);
    p.spec.secrets = Some(vec![crate::plan::api::SecretSpec {
        name: "s".into(),
        path: "s".into(),
        ..Default::default()
    }]);
    let mut w = World::new(p, nodes(1));
    let secret = |v: &str| Secret {
        metadata: ObjectMeta {
            name: Some("s".into()),
            ..Default::default()
        },
        data: Some(
            [(
                "k".to_string(),
                k8s_openapi::ByteString(v.as_bytes().to_vec()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    w.secrets.insert("s".into(), secret("1"));
    w.step();
    let old_job = w.job_names()[0].clone();
    let old_hash = w.status().latest_hash.expect("hash");
    // The Secret changes while the Job runs: no second Job for the busy node.
    w.secrets.insert("s".into(), secret("2"));
    let r = w.step();
    let new_hash = r.status.latest_hash.clone().expect("hash");
    assert_ne!(new_hash, old_hash);
    assert!(r.create_jobs.is_empty(), "the node still runs the old Job");
    assert!(
        r.delete_jobs.is_empty(),
        "same version: the old Job may finish"
    );
    // The old Job completes: it does not label the node with the old hash.
    w.finish(&old_job, "Complete", now(), "", "");
    let r = w.step();
    assert!(
        r.node_patches.iter().all(|p| p.labels.is_empty()),
        "{:?}",
        r.node_patches
    );
    assert_eq!(r.create_jobs.len(), 1, "the new hash runs now");
    let new_job = w
        .job_names()
        .into_iter()
        .find(|n| *n != old_job)
        .expect("new job");
    w.finish(&new_job, "Complete", now(), "", "");
    w.step();
    let r = w.step();
    assert_eq!(
        w.nodes[0].labels.get("plan.upgrade.cattle.io/p"),
        Some(&new_hash)
    );
    assert_eq!(complete(&r.status).0, TRUE);
    // And stays there.
    let r = w.step();
    assert!(r.node_patches.is_empty());
}

fn rebooting_plan(concurrency: i64, gate: bool) -> Plan {
    let mut p = plan(concurrency);
    p.spec.cordon = Some(true);
    p.spec.reboot = Some(crate::plan::api::RebootSpec {
        timeout: Some("10m".into()),
        health_gate: gate.then(|| crate::plan::api::HealthGateSpec {
            pod_selector: LabelSelector {
                match_labels: Some([("app".to_string(), "critical".to_string())].into()),
                ..Default::default()
            },
            timeout: Some("5m".into()),
            ..Default::default()
        }),
        ..Default::default()
    });
    p
}

fn reboot(w: &mut World, node: &str) {
    let n = w.nodes.iter_mut().find(|n| n.name == node).expect("node");
    n.boot_id = format!("{}-after", n.boot_id);
    n.ready = true;
}

#[test]
fn a_reboot_holds_the_slot_until_the_node_is_back_with_a_new_boot() {
    let mut w = World::new(rebooting_plan(1, false), nodes(2));
    let r = w.step();
    assert!(
        r.create_pods.is_empty(),
        "no reboot pod beside a running Job: it would reboot before the Job is seen complete"
    );
    assert_eq!(r.create_jobs.len(), 1);
    let job = &r.create_jobs[0];
    let spec = job
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec");
    assert_eq!(spec.containers[0].name, reboot::SENTINEL_NAME);
    assert!(
        spec.init_containers
            .iter()
            .flatten()
            .any(|c| c.name == "upgrade")
    );
    let node = label(job, labels::NODE).expect("node").to_string();
    assert_eq!(
        r.status.nodes[0].boot_id.as_deref(),
        Some(format!("boot-{node}").as_str())
    );
    let job_name = w.job_names()[0].clone();
    w.nodes
        .iter_mut()
        .find(|n| n.name == node)
        .expect("node")
        .unschedulable = true;
    w.finish(&job_name, "Complete", now(), "", "");
    let r = w.step();
    assert!(
        reasons(&r).is_empty(),
        "the per-node story is in status.nodes"
    );
    assert_eq!(quiet(&r), ["NodeRebooting"], "and in notifications");
    assert_eq!(r.status.nodes[0].phase, NodePhase::Rebooting);
    assert_eq!(
        r.create_pods.len(),
        1,
        "the reboot pod, once the Job completed"
    );
    let pod_spec = r.create_pods[0].spec.as_ref().expect("pod spec");
    assert_eq!(pod_spec.node_name.as_deref(), Some(node.as_str()));
    assert!(
        format!("{:?}", pod_spec.containers[0].command).contains(&job_name),
        "it waits for the sentinel of that Job"
    );
    assert!(w.step().create_pods.is_empty(), "one reboot pod per node");
    assert!(
        r.node_patches.is_empty(),
        "no label and no uncordon before the reboot"
    );
    assert!(r.create_jobs.is_empty(), "the slot is held");
    assert!(r.delete_jobs.is_empty());
    // The node goes down (NotReady) and comes back with a new boot ID.
    w.now = now() + jiff::SignedDuration::from_secs(60);
    w.nodes
        .iter_mut()
        .find(|n| n.name == node)
        .expect("node")
        .ready = false;
    assert!(w.step().create_jobs.is_empty());
    reboot(&mut w, &node);
    let r = w.step();
    assert_eq!(reasons(&r), vec!["Progress"]);
    assert_eq!(done_patch(&r).unschedulable, Some(false));
    assert_eq!(
        done_patch(&r)
            .labels
            .get("plan.upgrade.cattle.io/p")
            .cloned()
            .flatten(),
        w.status().latest_hash
    );
    assert_eq!(r.delete_pods.len(), 1, "the reboot pod goes");
    assert_eq!(r.create_jobs.len(), 1, "the next node starts");
}

#[test]
fn a_node_that_never_comes_back_fails_the_plan_and_keeps_its_slot() {
    let mut w = World::new(rebooting_plan(1, false), nodes(2));
    w.step();
    let job_name = w.job_names()[0].clone();
    let node = label(&w.jobs[0], labels::NODE).expect("node").to_string();
    w.finish(&job_name, "Complete", now(), "", "");
    w.step();
    w.now = now() + jiff::SignedDuration::from_secs(601);
    let r = w.step();
    let (status, reason, message) = complete(&r.status);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        (FALSE, "RebootTimedOut")
    );
    assert!(
        message.contains(&format!("Node {node} did not come back")),
        "{message}"
    );
    assert_eq!(reasons(&r), vec!["RebootTimedOut"]);
    let r = w.step();
    assert!(
        r.events.is_empty() && r.create_jobs.is_empty(),
        "reported once, slot held"
    );
    assert_eq!(r.status.applying.len(), 1);
    // It comes back after all: the rollout goes on.
    reboot(&mut w, &node);
    let r = w.step();
    assert!(r.node_patches.iter().any(|p| !p.labels.is_empty()));
    assert_eq!(r.create_jobs.len(), 1);
    assert!(!FAILURE_REASONS.contains(&complete(&r.status).1.as_str()));
}

#[test]
fn the_health_gate_waits_for_ready_pods_and_says_which() {
    let mut w = World::new(rebooting_plan(1, true), nodes(2));
    w.step();
    let job_name = w.job_names()[0].clone();
    let node = label(&w.jobs[0], labels::NODE).expect("node").to_string();
    w.finish(&job_name, "Complete", now(), "", "");
    w.step();
    reboot(&mut w, &node);
    w.health.insert(
        node.clone(),
        HealthObservation {
            not_ready: vec!["kube-system/cilium-abc".into()],
            total: 2,
        },
    );
    let r = w.step();
    let p = &r.status.nodes[0];
    assert_eq!(p.phase, NodePhase::WaitingForHealth);
    let m = p.message.as_deref().expect("message");
    assert!(
        m.contains("1 of 2 pods matching app=critical") && m.contains("cilium-abc"),
        "{m}"
    );
    assert!(r.node_patches.is_empty() && r.create_jobs.is_empty());
    w.health.insert(
        node.clone(),
        HealthObservation {
            not_ready: vec![],
            total: 2,
        },
    );
    let r = w.step();
    assert!(r.status.nodes.iter().all(|p| p.name != node), "passed");
    assert!(r.node_patches.iter().any(|p| !p.labels.is_empty()));
}

#[test]
fn a_failed_health_gate_fails_the_plan_naming_the_node() {
    let mut w = World::new(rebooting_plan(1, true), nodes(1));
    w.step();
    let job_name = w.job_names()[0].clone();
    w.finish(&job_name, "Complete", now(), "", "");
    w.step();
    reboot(&mut w, "node-1");
    w.health.insert(
        "node-1".into(),
        HealthObservation {
            not_ready: vec!["a/b".into()],
            total: 1,
        },
    );
    w.step();
    w.now = now() + jiff::SignedDuration::from_secs(301);
    let r = w.step();
    assert_eq!(complete(&r.status).1, "HealthGateTimedOut");
    assert!(
        complete(&r.status)
            .2
            .contains("Node node-1 rebooted but its health gate did not pass")
    );
    // Reported once; the node stays failed while its pods are not Ready...
    let r = w.step();
    assert!(r.events.is_empty(), "{:?}", r.events);
    assert_eq!(complete(&r.status).1, "HealthGateTimedOut");
    // ...and the rollout goes on once they are.
    w.health.insert(
        "node-1".into(),
        HealthObservation {
            not_ready: vec![],
            total: 1,
        },
    );
    let r = w.step();
    assert!(
        r.node_patches.iter().any(|p| !p.labels.is_empty()),
        "{:?}",
        r.node_patches
    );
}

#[test]
fn a_failed_job_cancels_the_reboot() {
    let mut w = World::new(rebooting_plan(1, false), nodes(1));
    w.step();
    assert!(w.pods.is_empty());
    let job_name = w.job_names()[0].clone();
    w.finish(&job_name, "Failed", now(), "BackoffLimitExceeded", "boom");
    let r = w.step();
    assert!(r.create_pods.is_empty(), "no reboot after a failed Job");
    assert_eq!(complete(&r.status).1, "JobFailed");
}

#[test]
fn without_reboot_there_are_no_reboot_pods() {
    let mut w = World::new(plan(2), nodes(2));
    let r = w.step();
    assert!(r.create_pods.is_empty());
    let spec = r.create_jobs[0]
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("spec");
    assert_eq!(spec.containers[0].name, "upgrade");
}

#[test]
fn a_running_job_made_by_suc_is_adopted_not_restarted() {
    let mut w = World::new(plan(1), nodes(1));
    w.step();
    // The same Job as SUC would have made it: no slipway annotation.
    for j in &mut w.jobs {
        if let Some(a) = j.metadata.annotations.as_mut() {
            a.remove(job::POD_TEMPLATE_HASH_ANNOTATION);
        }
    }
    let r = w.step();
    assert!(r.delete_jobs.is_empty(), "{:?}", r.delete_jobs);
    assert!(r.create_jobs.is_empty());
}

#[test]
fn finished_jobs_are_left_to_the_ttl_controller_unless_only_suc_annotates_a_ttl() {
    let mut w = World::new(plan(1), nodes(1));
    w.step();
    let job = w.job_names()[0].clone();
    w.finish(&job, "Complete", now(), "", "");
    w.step();
    w.now = now() + jiff::SignedDuration::from_secs(900);
    assert!(
        w.step().delete_jobs.is_empty(),
        "ttlSecondsAfterFinished is set"
    );
    // A Job with only SUC's annotation is deleted by slipway once that TTL has passed.
    for j in &mut w.jobs {
        if let Some(spec) = j.spec.as_mut() {
            spec.ttl_seconds_after_finished = None;
        }
    }
    w.now = now() + jiff::SignedDuration::from_secs(100);
    let r = w.step();
    assert!(r.delete_jobs.is_empty());
    assert_eq!(r.requeue_after, Some(Duration::from_secs(800)));
    w.now = now() + jiff::SignedDuration::from_secs(900);
    assert_eq!(w.step().delete_jobs.len(), 1);
}

#[cfg(test)]
mod properties;

#[cfg(test)]
mod failure_policy;

#[cfg(test)]
mod health_checks;

#[cfg(test)]
mod hooks;

#[cfg(test)]
mod budgets;

#[cfg(test)]
mod promotion;

#[cfg(test)]
mod disruption;

#[test]
fn a_node_held_by_maintenance_is_not_started_and_the_plan_says_so() {
    let mut w = World::new(plan(1), nodes(2));
    let maintenance = crate::node::holders::Holder::Maintenance {
        name: "disk".into(),
    };
    w.held.insert("node-1".into(), maintenance.clone());
    let r = w.step();
    assert_eq!(w.status().applying, ["node-2"], "the free node goes first");
    assert!(
        r.create_jobs
            .iter()
            .all(|j| label(j, "upgrade.cattle.io/node") == Some("node-2"))
    );
    let job = w.job_names().pop().expect("a job for node-2");
    w.finish(&job, "Complete", now(), "", "");
    let r = w.step();
    let (status, reason, message) = complete(&r.status);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        (FALSE, "WaitingForNodes")
    );
    assert_eq!(
        message,
        "waiting: node node-1 is held by nodemaintenance disk"
    );
    assert!(reasons(&r).contains(&"WaitingForNodes"));
    assert!(w.step().events.is_empty(), "said once");
    // Held while its Job runs: the node finishes its step.
    w.held.clear();
    w.step();
    assert_eq!(w.status().applying, ["node-1"]);
    w.held.insert("node-1".into(), maintenance);
    w.step();
    assert_eq!(
        w.status().applying,
        ["node-1"],
        "a started node is not dropped"
    );
}

#[test]
fn a_node_tainted_for_maintenance_by_anyone_is_not_started() {
    let mut nodes = nodes(1);
    nodes[0].in_maintenance = true;
    let mut w = World::new(plan(1), nodes);
    let r = w.step();
    assert!(r.create_jobs.is_empty());
    assert_eq!(
        complete(&r.status).2,
        "waiting: node node-1 is held by a node maintenance (medik8s.io/drain taint)"
    );
    w.nodes[0].in_maintenance = false;
    assert_eq!(w.step().create_jobs.len(), 1);
}

/// Cordons the node of the Plan's only Job, as its drain container would.
fn cordon_node_of_job(w: &mut World) -> String {
    let node = label(&w.jobs[0], labels::NODE).expect("node").to_string();
    w.nodes
        .iter_mut()
        .find(|n| n.name == node)
        .expect("node")
        .unschedulable = true;
    node
}

fn cordon_record(w: &World, node: &str) -> Option<String> {
    let n = w.nodes.iter().find(|n| n.name == node).expect("node");
    n.annotations.get(crate::node::cordon::CORDONED_BY).cloned()
}

#[test]
fn slipways_own_cordon_is_recorded_before_the_job_and_undone_after() {
    let mut p = plan(1);
    p.spec.cordon = Some(true);
    let mut w = World::new(p, nodes(1));
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 1);
    assert_eq!(r.node_patches.len(), 1, "the record, before the Job");
    let node = cordon_node_of_job(&mut w);
    assert_eq!(
        cordon_record(&w, &node).as_deref(),
        Some("plan/system-upgrade/p"),
        "the Plan's own"
    );
    let job = w.job_names()[0].clone();
    w.finish(&job, "Complete", now(), "", "");
    let r = w.step();
    assert!(
        r.node_patches
            .iter()
            .any(|p| p.unschedulable == Some(false))
    );
    assert!(!w.nodes[0].unschedulable);
    assert_eq!(cordon_record(&w, &node), None, "forgotten with the cordon");
}

#[test]
fn an_admins_cordon_stays_after_the_upgrade() {
    let mut p = plan(1);
    p.spec.drain = Some(Default::default());
    let mut n = nodes(1);
    n[0].unschedulable = true;
    let mut w = World::new(p, n);
    w.step();
    let node = w.nodes[0].name.clone();
    assert_eq!(cordon_record(&w, &node).as_deref(), Some("admin"));
    let job = w.job_names()[0].clone();
    w.finish(&job, "Complete", now(), "", "");
    let r = w.step();
    assert!(
        r.node_patches
            .iter()
            .all(|p| p.unschedulable != Some(false)),
        "{:?}",
        r.node_patches
    );
    assert!(
        w.nodes[0].unschedulable,
        "the admin's cordon stays (SUC #341)"
    );
    assert_eq!(complete(&r.status).0, TRUE);
    assert_eq!(
        cordon_record(&w, &node).as_deref(),
        Some("admin"),
        "kept while the cordon lasts, for other Plans on the node"
    );
}

#[test]
fn a_plan_that_does_not_cordon_records_nothing() {
    let mut w = World::new(plan(1), nodes(1));
    let r = w.step();
    assert_eq!(r.create_jobs.len(), 1);
    assert!(r.node_patches.is_empty());
}

/// The patch that labels a node done.
fn done_patch(r: &Rollout) -> &NodeChange {
    r.node_patches
        .iter()
        .find(|p| p.labels.contains_key("plan.upgrade.cattle.io/p"))
        .expect("a node labelled done")
}

#[test]
fn a_plan_holds_the_nodes_its_status_applying_names_by_hostname() {
    let mut index = crate::node::index::NodeIndex::new();
    let mut renamed = node("node-1");
    renamed
        .labels
        .insert(labels::HOSTNAME.into(), "host-1".into());
    index.apply(renamed);
    index.apply(node("node-2"));
    let mut p = plan(2);
    p.status = Some(PlanStatus {
        applying: vec!["host-1".into(), "node-2".into(), "gone".into()],
        ..Default::default()
    });
    let mut idle = plan(2);
    idle.metadata.name = Some("idle".into());
    let held = holds(&[Arc::new(p.clone()), Arc::new(idle)], &index);
    assert_eq!(
        held,
        [
            Hold::new("node-1", holder(&p)),
            Hold::new("node-2", holder(&p)),
        ],
        "by node name; a hostname no node has holds nothing"
    );
}

#[test]
fn the_phase_gauges_count_status_nodes_with_their_oldest_since() {
    use crate::plan::api::{NodePhase, NodeProgress};
    let progress = |name: &str, phase: NodePhase, since: &str| NodeProgress {
        name: name.into(),
        phase,
        since: Some(since.into()),
        ..Default::default()
    };
    let status = PlanStatus {
        nodes: vec![
            progress("a", NodePhase::Upgrading, "2026-11-22T10:05:00Z"),
            progress("b", NodePhase::Upgrading, "2026-11-22T10:00:00Z"),
            progress("c", NodePhase::Failed, "2026-11-22T09:00:00Z"),
        ],
        ..Default::default()
    };
    let got: Vec<(&str, usize, Option<Timestamp>)> = phases(Some(&status))
        .into_iter()
        .map(|p| (p.phase, p.nodes, p.oldest_since))
        .collect();
    assert_eq!(
        got,
        vec![
            ("Failed", 1, Some(t("2026-11-22T09:00:00Z"))),
            ("Upgrading", 2, Some(t("2026-11-22T10:00:00Z"))),
        ]
    );
    assert!(phases(None).is_empty());
}
