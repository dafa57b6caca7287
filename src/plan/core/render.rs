//! What a Plan would do to a set of nodes, from the controller's own decision function: the reboot
//! pods and Jobs of each batch, in the order the controller creates them.
//!
//! A batch is what one round of decisions creates while the Jobs of the previous round run; the
//! simulation completes every Job of a round before deciding again, as the cluster eventually would.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::common::check::CheckRead;
use crate::node::NodeInfo;
use crate::node::budget::Budget;
use crate::node::holders::{NodeClaims, held_against};
use crate::plan::api::{Plan, PlanStatus, labels};
use crate::plan::core::conditions::{self as cond, COMPLETE, LATEST_RESOLVED, TRUE, VALIDATED};
use crate::plan::core::config::JobConfig;
use crate::plan::core::hooks;
use crate::plan::core::settings::PlanSettings;
use crate::plan::core::{self as rollout, ChannelAnswer, PlanDecision, PlanInput, holder};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RenderError {
    #[error("the plan is not valid: {0}")]
    Invalid(String),
    #[error("the plan's version is not resolved: {0}")]
    Unresolved(String),
    #[error("the controller would create no Job: {0}")]
    Generate(String),
}

/// What render reads: the Plan and the world it would roll out in.
pub struct RenderInput {
    pub plan: Plan,
    pub nodes: Vec<NodeInfo>,
    pub secrets: BTreeMap<String, Secret>,
    /// The channel's answer for a Plan that follows one.
    pub channel: Option<ChannelAnswer>,
    pub now: Timestamp,
    pub controller_name: String,
    pub job_config: JobConfig,
}

/// The reboot pods and Jobs one round of decisions creates.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub pods: Vec<Pod>,
    pub jobs: Vec<Job>,
}

/// Why a node gets no Job, or which batch it is in.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NodeRow {
    pub node: String,
    /// 1-based batch of the node's Job; `None` when it gets none.
    pub batch: Option<usize>,
    pub job: Option<String>,
    /// Why the node is not selected, or a note about a selected one (cordoned).
    pub note: String,
}

#[derive(Debug, Clone)]
pub struct Rendering {
    /// The status after the first decision (resolved version and hash).
    pub status: PlanStatus,
    pub batches: Vec<Batch>,
    pub nodes: Vec<NodeRow>,
    /// Set when the simulation could not go on (e.g. it would wait for nodes to reboot).
    pub stopped: Option<String>,
}

/// The simulated world between decisions.
struct World {
    plan: Plan,
    nodes: Vec<NodeInfo>,
    jobs: Vec<Job>,
    pods: Vec<Pod>,
    /// Pull pods (`spec.disruption.prePull`), each pulled at once: offline, every pull is taken
    /// to succeed, as every health check to hold.
    pull_pods: Vec<Pod>,
    health: BTreeMap<String, crate::node::reboot::HealthObservation>,
    now: Timestamp,
}

/// The controller's decision on the simulated world: the one place that builds its input.
/// `render` shows a Plan on its own: no other operation holds a node, but a node in a maintenance
/// slipway does not run (its taint) is held as the controller would see it.
fn decide_on(w: &World, input: &RenderInput, checks: &[CheckRead]) -> (PlanDecision, bool) {
    let nodes: Vec<&NodeInfo> = w.nodes.iter().collect();
    let is_hook = |j: &&Job| {
        (j.metadata.labels.as_ref()).is_some_and(|l| l.contains_key(hooks::HOOK_PLAN_LABEL))
    };
    let (hook_jobs, jobs): (Vec<&Job>, Vec<&Job>) = w.jobs.iter().partition(is_hook);
    let pods: Vec<&Pod> = w.pods.iter().collect();
    let pull_pods: Vec<&Pod> = w.pull_pods.iter().collect();
    let tainted = w
        .nodes
        .iter()
        .filter(|n| n.in_maintenance)
        .map(|n| n.name.as_str());
    let annotated = w
        .nodes
        .iter()
        .filter_map(|n| n.held_by().map(|by| (n.name.as_str(), by)));
    let held = held_against(
        &holder(&w.plan),
        &NodeClaims::default(),
        &[],
        tainted,
        annotated,
    );
    let budget = Budget::holds_only(held);
    let decision = rollout::decide(
        &PlanInput {
            plan: &w.plan,
            nodes: &nodes,
            settled: None,
            jobs: &jobs,
            hook_jobs: &hook_jobs,
            reboot_pods: &pods,
            pull_pods: &pull_pods,
            health: &w.health,
            secrets: &input.secrets,
            channel: input.channel.clone(),
            controller_name: &input.controller_name,
            job_config: &input.job_config,
            budget: &budget,
            shared: &BTreeSet::new(),
            checks,
            stages: None,
            explain: false,
            pruned: None,
            templates: None,
        },
        w.now,
    );
    let changed = w.plan.status.as_ref() != Some(&decision.status);
    (decision, changed)
}

impl World {
    /// Applies a decision as the controller and the cluster would (status, Jobs, pods, labels).
    fn apply(&mut self, r: &PlanDecision) -> (Vec<Pod>, Vec<Job>) {
        self.plan.status = Some(r.status.clone());
        self.jobs.retain(|j| {
            !r.delete_jobs()
                .iter()
                .any(|d| Some(d.name.as_str()) == j.metadata.name.as_deref())
        });
        self.pods.retain(|p| {
            !r.delete_pods()
                .iter()
                .any(|d| Some(d.as_str()) == p.metadata.name.as_deref())
        });
        self.pull_pods.retain(|p| {
            !(r.delete_pull_pods().iter()).any(|d| Some(d.as_str()) == p.metadata.name.as_deref())
        });
        for p in r.pull_pods() {
            let mut pulled = p.clone();
            crate::node::prepull::kubelet_done(&mut pulled, None);
            self.pull_pods.push(pulled);
        }
        let mut pods = Vec::new();
        for p in r.create_pods() {
            if !self.pods.iter().any(|e| e.metadata.name == p.metadata.name) {
                self.pods.push(p.clone());
                pods.push(p.clone());
            }
        }
        let mut jobs = Vec::new();
        for j in r.create_jobs() {
            if !self.jobs.iter().any(|e| e.metadata.name == j.metadata.name) {
                self.jobs.push(j.clone());
                jobs.push(j.clone());
            }
        }
        for patch in r.node_patches() {
            if let Some(n) = self.nodes.iter_mut().find(|n| n.name == patch.node) {
                patch.apply_to(n);
            }
        }
        (pods, jobs)
    }

    /// Marks every unfinished Job complete now; false when there was none.
    fn complete_running(&mut self) -> bool {
        let mut any = false;
        for j in &mut self.jobs {
            let finished = j
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.status == "True"));
            if !finished {
                any = true;
                j.status = Some(JobStatus {
                    conditions: Some(vec![JobCondition {
                        type_: "Complete".into(),
                        status: "True".into(),
                        last_transition_time: Some(Time(self.now)),
                        ..Default::default()
                    }]),
                    ..Default::default()
                });
            }
        }
        any
    }
}

/// Renders the rollout of `input.plan` from scratch (no Jobs yet; the Plan's status is ignored).
pub fn render(input: &RenderInput) -> Result<Rendering, RenderError> {
    let settings = PlanSettings::read(&input.plan, &input.secrets, &input.job_config)
        .map_err(RenderError::Invalid)?;
    // Offline, the health checks cannot be read: the simulation takes them to hold.
    let checks = vec![CheckRead::Assumed; settings.health_checks.len()];
    let delay = settings.post_complete_delay;
    let mut plan = input.plan.clone();
    plan.status = None;
    let mut world = World {
        plan,
        nodes: input.nodes.clone(),
        jobs: Vec::new(),
        pods: Vec::new(),
        pull_pods: Vec::new(),
        health: BTreeMap::new(),
        now: input.now,
    };
    let (first, mut changed) = decide_on(&world, input, &checks);
    renderable(&first.status)?;
    let status = first.status.clone();
    let mut batches: Vec<Batch> = Vec::new();
    let mut current = Batch::default();
    let mut decision = first;
    let mut stopped = None;
    // Each node needs a handful of decisions at most; the bound only guards against a decision
    // that keeps changing something forever.
    let limit = 8 * (input.nodes.len() + 2);
    for _ in 0..limit {
        let (pods, jobs) = world.apply(&decision);
        let created = !pods.is_empty() || !jobs.is_empty();
        current.jobs.extend(jobs);
        for pod in pods {
            batch_of(&mut batches, &mut current, pod);
        }
        if !created && !changed && decision.node_patches().is_empty() {
            // Nothing moves until the running Jobs finish: this round's batch is complete.
            if !world.complete_running() {
                if !world.pods.is_empty() {
                    stopped = Some(
                        "later batches wait for nodes to reboot, which is not simulated".into(),
                    );
                }
                break;
            }
            if !current.pods.is_empty() || !current.jobs.is_empty() {
                batches.push(std::mem::take(&mut current));
            }
            world.now = world
                .now
                .checked_add(delay + Duration::from_secs(1))
                .unwrap_or(world.now);
        }
        (decision, changed) = decide_on(&world, input, &checks);
    }
    if stopped.is_none() && changed {
        stopped = Some(format!("stopped after {limit} decisions"));
    }
    if !current.pods.is_empty() || !current.jobs.is_empty() {
        batches.push(current);
    }
    let nodes = rows(input, &settings, &status, &batches);
    Ok(Rendering {
        status,
        batches,
        nodes,
        stopped,
    })
}

/// Puts `pod` in its batch: a reboot pod is made once its node's Job completed, and belongs to
/// that Job's batch.
fn batch_of(batches: &mut [Batch], current: &mut Batch, pod: Pod) {
    let node = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::NODE));
    let of_node = |b: &Batch| {
        b.jobs.iter().any(|j| {
            node.is_some() && j.metadata.labels.as_ref().and_then(|l| l.get(labels::NODE)) == node
        })
    };
    if of_node(current) {
        current.pods.push(pod);
    } else if let Some(batch) = batches.iter_mut().rev().find(|b| of_node(b)) {
        batch.pods.push(pod);
    } else {
        current.pods.push(pod);
    }
}

/// Whether the controller would roll the Plan out at all, and if not the condition that says why.
fn renderable(st: &PlanStatus) -> Result<(), RenderError> {
    if !cond::is(st, VALIDATED, TRUE) {
        return Err(RenderError::Invalid(message(st, VALIDATED)));
    }
    if !cond::is(st, LATEST_RESOLVED, TRUE) {
        return Err(RenderError::Unresolved(message(st, LATEST_RESOLVED)));
    }
    if let Some(c) = cond::get(st, COMPLETE)
        && matches!(
            c.reason.as_deref(),
            Some("SelectNodesFailed" | "ValidationFailed")
        )
    {
        return Err(RenderError::Generate(c.message.clone().unwrap_or_default()));
    }
    Ok(())
}

fn message(st: &PlanStatus, type_: &str) -> String {
    cond::get(st, type_)
        .and_then(|c| c.message.clone())
        .unwrap_or_default()
}

fn rows(
    input: &RenderInput,
    settings: &PlanSettings<'_>,
    status: &PlanStatus,
    batches: &[Batch],
) -> Vec<NodeRow> {
    let plan = &input.plan;
    let name = plan.metadata.name.as_deref().unwrap_or_default();
    let hash = status.latest_hash.as_deref().unwrap_or_default();
    let plan_label = labels::plan_node_label(name);
    let mut out: Vec<NodeRow> = input
        .nodes
        .iter()
        .map(|n| {
            let found = batches.iter().enumerate().find_map(|(i, b)| {
                b.jobs
                    .iter()
                    .find(|j| {
                        j.metadata.labels.as_ref().and_then(|l| l.get(labels::NODE))
                            == Some(&n.name)
                    })
                    .map(|j| (i + 1, j.metadata.name.clone()))
            });
            let note = if found.is_some() {
                if n.unschedulable {
                    "cordoned (upgraded anyway, as SUC does)".to_string()
                } else {
                    String::new()
                }
            } else if !settings.selector.matches(&n.labels) {
                "not selected by spec.nodeSelector".to_string()
            } else if !n.labels.contains_key(labels::HOSTNAME) {
                format!("no {} label", labels::HOSTNAME)
            } else if n.labels.get(&plan_label).map(String::as_str) == Some(labels::DISABLED) {
                format!("{plan_label}=disabled")
            } else if n.labels.get(&plan_label).map(String::as_str) == Some(hash) {
                "already at this hash".to_string()
            } else if settings.slots() == 0 {
                "spec.concurrency is 0".to_string()
            } else {
                "not reached".to_string()
            };
            NodeRow {
                node: n.name.clone(),
                batch: found.as_ref().map(|f| f.0),
                job: found.and_then(|f| f.1),
                note,
            }
        })
        .collect();
    out.sort_by(|a, b| {
        (a.batch.is_none(), a.batch, &a.node).cmp(&(b.batch.is_none(), b.batch, &b.node))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(concurrency: i64) -> Plan {
        let text = format!(
            "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata:\n  name: p\n  namespace: ns\n  uid: u\nspec:\n  concurrency: {concurrency}\n  nodeSelector:\n    matchLabels:\n      pool: a\n  version: v1.2.3+k3s1\n  upgrade:\n    image: rancher/k3s-upgrade\n"
        );
        serde_saphyr::from_str(&text).expect("plan")
    }

    fn node(name: &str, pool: &str) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            uid: format!("uid-{name}"),
            labels: [
                (labels::HOSTNAME.to_string(), name.to_string()),
                ("pool".to_string(), pool.to_string()),
            ]
            .into(),
            ready: true,
            ..Default::default()
        }
    }

    fn input(plan: Plan, nodes: Vec<NodeInfo>) -> RenderInput {
        RenderInput {
            plan,
            nodes,
            secrets: BTreeMap::new(),
            channel: None,
            now: Timestamp::UNIX_EPOCH,
            controller_name: "c".into(),
            job_config: JobConfig::default(),
        }
    }

    #[test]
    fn batches_follow_concurrency_and_match_the_first_decision() {
        let nodes = vec![
            node("n1", "a"),
            node("n2", "a"),
            node("n3", "a"),
            node("n4", "b"),
        ];
        let input = input(plan(2), nodes.clone());
        let r = render(&input).expect("render");
        assert_eq!(r.stopped, None);
        let sizes: Vec<usize> = r.batches.iter().map(|b| b.jobs.len()).collect();
        assert_eq!(sizes, vec![2, 1]);
        // The first batch is exactly what the controller's first decision creates.
        let mut p = input.plan.clone();
        p.status = None;
        let w = World {
            plan: p,
            nodes,
            jobs: vec![],
            pods: vec![],
            pull_pods: vec![],
            health: BTreeMap::new(),
            now: input.now,
        };
        let (first, _) = decide_on(&w, &input, &[]);
        let created: Vec<Job> = first.create_jobs().into_iter().cloned().collect();
        assert_eq!(created, r.batches[0].jobs);
        let rows: Vec<(&str, Option<usize>, &str)> = r
            .nodes
            .iter()
            .map(|n| (n.node.as_str(), n.batch, n.note.as_str()))
            .collect();
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[3], ("n4", None, "not selected by spec.nodeSelector"));
        assert_eq!(rows.iter().filter(|r| r.1 == Some(1)).count(), 2);
    }

    /// Offline every pull succeeds: a Plan that pre-pulls renders the same Jobs in the same
    /// batches, its pull on record.
    #[test]
    fn a_plan_that_pre_pulls_renders_the_same_jobs() {
        let nodes = vec![node("n1", "a"), node("n2", "a"), node("n3", "a")];
        let plain = render(&input(plan(2), nodes.clone())).expect("render");
        let mut pulling = plan(2);
        pulling.spec.disruption = Some(crate::node::disruption::DisruptionSpec {
            pre_pull: Some(true),
            ..Default::default()
        });
        let r = render(&input(pulling, nodes)).expect("render");
        let names = |r: &Rendering| -> Vec<Vec<Option<String>>> {
            (r.batches.iter())
                .map(|b| b.jobs.iter().map(|j| j.metadata.name.clone()).collect())
                .collect()
        };
        assert_eq!(names(&r), names(&plain));
        assert_eq!(r.stopped, None);
    }

    #[test]
    fn why_nodes_get_no_job() {
        let mut done = node("n1", "a");
        let mut disabled = node("n2", "a");
        disabled
            .labels
            .insert(labels::plan_node_label("p"), labels::DISABLED.into());
        let r = render(&input(plan(1), vec![done.clone()])).expect("render");
        let hash = r.status.latest_hash.clone().expect("hash");
        done.labels.insert(labels::plan_node_label("p"), hash);
        let r = render(&input(plan(1), vec![done, disabled])).expect("render");
        assert!(r.batches.is_empty());
        let notes: Vec<&str> = r.nodes.iter().map(|n| n.note.as_str()).collect();
        assert_eq!(
            notes,
            vec!["already at this hash", "plan.upgrade.cattle.io/p=disabled"]
        );
        let r = render(&input(plan(0), vec![node("n1", "a")])).expect("render");
        assert_eq!(r.nodes[0].note, "spec.concurrency is 0");
    }

    #[test]
    fn an_invalid_plan_is_an_error() {
        let mut p = plan(1);
        p.spec.post_complete_delay = Some("-1s".into());
        let e = render(&input(p, vec![node("n1", "a")])).expect_err("invalid");
        assert!(matches!(e, RenderError::Invalid(_)), "{e}");
    }
}
