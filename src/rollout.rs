//! The rollout decision: from a Plan, the nodes, the Plan's Jobs and Secrets, the channel's answer and
//! the time, decide the Plan's next status and what to create, delete, patch and report.
//!
//! This is SUC's status, generating and Job handlers folded into one pure function. It never talks to
//! the cluster; `controller` gathers the inputs and applies the [`Rollout`] in a safe order: the
//! status first (guarded by the Plan's resourceVersion), and only then Jobs, node patches and events.
//! Jobs are created only for nodes in the `status.applying` that is being written, so a Job can never
//! start before its node counts against `concurrency`, even across a crash.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};

use crate::api::{NodeProgress, Plan, PlanStatus, labels};
use crate::conditions::{self as cond, COMPLETE, FALSE, LATEST_RESOLVED, TRUE, VALIDATED};
use crate::config::JobConfig;
use crate::duration::GoDuration;
use crate::expansion::expand_post_complete_labels;
use crate::hash;
use crate::image::munge_version;
use crate::job;
use crate::node::NodeInfo;
use crate::reboot::{self, HealthObservation};
use crate::selection;
use crate::window::TimeWindow;

/// Node progress phases in `status.nodes`.
pub mod phase {
    pub const PENDING: &str = "Pending";
    pub const UPGRADING: &str = "Upgrading";
    pub const WAITING: &str = "Waiting";
    pub const REBOOTING: &str = "Rebooting";
    pub const WAITING_FOR_HEALTH: &str = "WaitingForHealth";
    pub const FAILED: &str = "Failed";
}

/// SUC's message when neither `version` nor `channel` is set.
pub const ERR_UNRESOLVABLE: &str = "cannot resolve plan: missing channel and version";
/// SUC's message while a rollout waits for its window.
pub const MSG_WAITING_FOR_WINDOW: &str = "current time is not within configured window";
/// SUC's message when the Plan cannot roll out.
pub const MSG_NOT_READY: &str = "plan is not valid and resolved";

/// What the channel said, for a Plan that follows one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelAnswer {
    /// The raw version (not yet munged).
    Version(String),
    Failed(String),
}

/// Everything the decision reads.
pub struct RolloutInput<'a> {
    pub plan: &'a Plan,
    /// Every node the controller knows; selection happens here.
    pub nodes: &'a [NodeInfo],
    /// The Jobs of this Plan made by this controller.
    pub jobs: &'a [Job],
    /// The reboot pods of this Plan made by this controller.
    pub reboot_pods: &'a [Pod],
    /// For Plans with a health gate: what the gate's pods look like on nodes that rebooted, by node name.
    pub health: &'a BTreeMap<String, HealthObservation>,
    /// Secrets of the Plan's namespace, by name.
    pub secrets: &'a BTreeMap<String, Secret>,
    /// The channel's latest answer; `None` when the Plan has no channel or it was not asked yet.
    pub channel: Option<ChannelAnswer>,
    pub now: Timestamp,
    pub controller_name: &'a str,
    pub job_config: &'a JobConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// An event about the Plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanEvent {
    pub type_: EventType,
    pub reason: &'static str,
    pub message: String,
}

/// A Job to delete, and why (for logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobDeletion {
    pub name: String,
    pub reason: String,
}

/// Labels to set on a node and whether to uncordon it; applied as a patch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodePatch {
    pub node: String,
    pub labels: BTreeMap<String, String>,
    pub uncordon: bool,
}

/// The decision.
#[derive(Debug, Clone, Default)]
pub struct Rollout {
    /// The status to write when it differs from the current one.
    pub status: PlanStatus,
    pub status_changed: bool,
    pub create_jobs: Vec<Job>,
    pub delete_jobs: Vec<JobDeletion>,
    /// Reboot pods to create; the controller creates them before any Job.
    pub create_pods: Vec<Pod>,
    /// Reboot pods to delete, by name.
    pub delete_pods: Vec<String>,
    pub node_patches: Vec<NodePatch>,
    pub events: Vec<PlanEvent>,
    /// Look again after this long even if nothing changes.
    pub requeue_after: Option<Duration>,
}

impl Rollout {
    fn event(&mut self, type_: EventType, reason: &'static str, message: String) {
        self.events.push(PlanEvent {
            type_,
            reason,
            message,
        });
    }

    fn requeue(&mut self, after: Duration) {
        let after = after.max(Duration::from_secs(1));
        self.requeue_after = Some(self.requeue_after.map_or(after, |r| r.min(after)));
    }
}

/// Formats a time as SUC does (RFC 3339, whole seconds, UTC).
pub fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// SUC's `Validate()`, plus the checks slipway makes before touching nodes.
pub fn validate(plan: &Plan, secrets: &BTreeMap<String, Secret>) -> Result<(), String> {
    let spec = &plan.spec;
    if let Some(drain) = &spec.drain {
        if drain.delete_emptydir_data.is_some() && drain.delete_local_data.is_some() {
            return Err(
                "spec.drain cannot specify both deleteEmptydirData and deleteLocalData".into(),
            );
        }
        if let Some(sel) = &drain.pod_selector {
            selection::Selector::from_label_selector(Some(sel))
                .map_err(|e| format!("spec.drain.podSelector: {e}"))?;
        }
    }
    if let Some(window) = &spec.window {
        TimeWindow::new(window).map_err(|e| e.to_string())?;
    }
    if let Some(delay) = &spec.post_complete_delay {
        match delay.parse::<GoDuration>() {
            Ok(d) if d.is_negative() => return Err("spec.postCompleteDelay is negative".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("spec.postCompleteDelay is invalid: {e}")),
        }
    }
    let missing: Vec<String> = spec
        .secrets
        .iter()
        .flatten()
        .filter(|s| !s.ignore_updates.unwrap_or(false) && !secrets.contains_key(&s.name))
        .map(|s| format!("secret {:?} not found", s.name))
        .collect();
    if !missing.is_empty() {
        return Err(missing.join(", "));
    }
    Ok(())
}

fn post_complete_delay(plan: &Plan) -> Duration {
    plan.spec
        .post_complete_delay
        .as_deref()
        .and_then(|d| d.parse::<GoDuration>().ok())
        .and_then(GoDuration::to_std)
        .unwrap_or_default()
}

fn condition_true<'a>(
    job: &'a Job,
    type_: &str,
) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == type_ && c.status == "True")
}

fn label<'a>(job: &'a Job, key: &str) -> Option<&'a str> {
    job.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
}

fn elapsed_since(now: Timestamp, then: Option<Timestamp>) -> Duration {
    then.and_then(|t| now.duration_since(t).try_into().ok())
        .unwrap_or_default()
}

/// The TTL after which slipway deletes a finished Job: `spec.ttlSecondsAfterFinished`, else SUC's
/// annotation; a malformed annotation means now.
fn job_ttl(job: &Job) -> Duration {
    if let Some(ttl) = job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished) {
        return Duration::from_secs(u64::try_from(ttl).unwrap_or(0));
    }
    job.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::TTL_SECONDS_AFTER_FINISHED))
        .map_or(Duration::ZERO, |v| {
            Duration::from_secs(v.trim().parse::<u64>().unwrap_or(0))
        })
}

/// Decides the next step of one Plan.
pub fn decide(input: &RolloutInput<'_>) -> Rollout {
    let plan = input.plan;
    let name = plan.metadata.name.as_deref().unwrap_or_default();
    let namespace = plan.metadata.namespace.as_deref().unwrap_or_default();
    let generation = plan.metadata.generation;
    let now = rfc3339(input.now);
    let old = plan.status.clone().unwrap_or_default();
    let mut st = old.clone();
    let mut out = Rollout::default();

    // Status handler: conditions exist, the Plan is valid, the version is resolved, the hash is known.
    for t in [COMPLETE, VALIDATED, LATEST_RESOLVED] {
        cond::ensure(&mut st, t, &now, generation);
    }
    match validate(plan, input.secrets) {
        Err(message) => {
            if !cond::is(&st, VALIDATED, FALSE)
                || cond::get(&st, VALIDATED).and_then(|c| c.message.as_deref())
                    != Some(message.as_str())
            {
                out.event(
                    EventType::Warning,
                    "ValidateFailed",
                    format!("Failed to validate plan: {message}"),
                );
            }
            cond::set(
                &mut st, VALIDATED, FALSE, "Error", &message, &now, generation,
            );
        }
        Ok(()) => {
            if !cond::is(&st, VALIDATED, TRUE) {
                out.event(EventType::Normal, "Validated", "Plan is valid".into());
            }
            cond::set(
                &mut st,
                VALIDATED,
                TRUE,
                "PlanIsValid",
                "",
                &now,
                generation,
            );
            resolve(input, &mut st, &mut out, &now);
        }
    }

    // Generating handler: which nodes are applying, and the Jobs they need.
    let mut desired: Vec<(&NodeInfo, Job)> = Vec::new();
    let ready = cond::is(&st, VALIDATED, TRUE) && cond::is(&st, LATEST_RESOLVED, TRUE);
    let version = st.latest_version.clone().unwrap_or_default();
    let hash = st.latest_hash.clone().unwrap_or_default();
    if !ready {
        cond::set(
            &mut st,
            COMPLETE,
            FALSE,
            "NotReady",
            MSG_NOT_READY,
            &now,
            generation,
        );
    } else {
        generate(input, &old, &mut st, &mut out, &mut desired, &now);
    }

    // Job handler: completions, failures, cleanup, and Jobs to create.
    let by_name: BTreeMap<&str, &NodeInfo> =
        input.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
    let applying: BTreeSet<&str> = st.applying.iter().map(String::as_str).collect();
    let mut progress: BTreeMap<String, NodeProgress> = st
        .nodes
        .iter()
        .filter(|p| applying.contains(p.name.as_str()))
        .map(|p| (p.name.clone(), p.clone()))
        .collect();
    let delay = post_complete_delay(plan);
    let cordons = plan.spec.cordon.unwrap_or(false) || plan.spec.drain.is_some();
    let plan_label = labels::plan_node_label(name);
    let mut jobs: Vec<&Job> = input.jobs.iter().collect();
    jobs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut existing: BTreeMap<&str, &Job> = BTreeMap::new();
    let mut deletions: Vec<JobDeletion> = Vec::new();
    let reboot_policy = reboot::policy(plan, input.job_config);
    // Nodes whose Job of this hash is over (done, or failed): their reboot pods go.
    let mut finished_nodes: BTreeSet<String> = BTreeSet::new();
    for job in jobs {
        let job_name = job.metadata.name.as_deref().unwrap_or_default();
        let mut delete = |reason: String| {
            deletions.push(JobDeletion {
                name: job_name.to_string(),
                reason,
            });
        };
        if job.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let (Some(_), Some(job_version), Some(node_name)) = (
            label(job, labels::PLAN),
            label(job, labels::VERSION),
            label(job, labels::NODE),
        ) else {
            delete("it lacks the plan, version or node label".into());
            continue;
        };
        if st.latest_version.as_deref() != Some(job_version) {
            delete(format!(
                "its version {job_version} is not the latest ({version})"
            ));
            continue;
        }
        let Some(node) = by_name.get(node_name) else {
            delete(format!("node {node_name} is gone"));
            continue;
        };
        existing.insert(job_name, job);
        let host = node.hostname().to_string();
        if let Some(failed) = condition_true(job, "Failed") {
            let detail = format!(
                "{}: {}",
                failed.reason.as_deref().unwrap_or_default(),
                failed.message.as_deref().unwrap_or_default()
            );
            let message =
                format!("Job {namespace}/{job_name} failed on Node {node_name}: {detail}");
            if applying.contains(host.as_str()) {
                let known = progress.get(&host).is_some_and(|p| {
                    p.phase == phase::FAILED && p.job.as_deref() == Some(job_name)
                });
                if !known {
                    out.event(EventType::Warning, "JobFailed", message.clone());
                    progress.insert(
                        host.clone(),
                        failed_progress(&host, job_name, "JobFailed", message, &now, generation),
                    );
                }
            }
            let finished = failed.last_transition_time.as_ref().map(|t| t.0);
            finished_nodes.insert(node.name.clone());
            expire(job, finished, input.now, &mut out, &mut delete);
        } else if let Some(complete) = condition_true(job, "Complete") {
            let Some(job_hash) = label(job, &plan_label) else {
                continue;
            };
            let completed = complete.last_transition_time.as_ref().map(|t| t.0);
            let waited = elapsed_since(input.now, completed);
            // A Job for an older hash of this version (a Secret or digest changed while it ran)
            // completes without labelling: its node needs the new hash anyway, and labelling from
            // both Jobs would flip the label back and forth.
            let stale = Some(job_hash) != st.latest_hash.as_deref();
            let done = stale || node.labels.get(&plan_label).map(String::as_str) == Some(job_hash);
            let mut patch = NodePatch {
                node: node.name.clone(),
                ..Default::default()
            };
            if !done {
                let gate = match &reboot_policy {
                    Some(policy) => after_reboot(
                        input,
                        policy,
                        node,
                        &host,
                        job_name,
                        &mut progress,
                        &mut out,
                        &now,
                    ),
                    None => Gate::Open,
                };
                if gate == Gate::Open {
                    // SUC uncordons as soon as the Job completes, even during postCompleteDelay;
                    // with a reboot, only once the node is back.
                    patch.uncordon = cordons && node.unschedulable;
                    if waited < delay {
                        let remaining = delay - waited;
                        if progress
                            .get(&host)
                            .is_none_or(|p| p.phase != phase::WAITING)
                        {
                            out.event(
                                EventType::Normal,
                                "JobCompleteWaiting",
                                format!(
                                    "Job completed on Node {node_name}, waiting {} PostCompleteDelay",
                                    GoDuration::from_std(delay)
                                ),
                            );
                        }
                        out.requeue(remaining);
                        if applying.contains(host.as_str()) {
                            progress.insert(
                                host.clone(),
                                node_progress(
                                    &progress,
                                    &host,
                                    phase::WAITING,
                                    job_name,
                                    &now,
                                    None,
                                ),
                            );
                        }
                    } else {
                        out.event(
                            EventType::Normal,
                            "JobComplete",
                            format!("Job completed on Node {node_name}"),
                        );
                        let expanded = plan
                            .spec
                            .post_complete_labels
                            .as_ref()
                            .map(|l| expand_post_complete_labels(l, &version, &hash))
                            .unwrap_or_default();
                        patch.labels.extend(expanded);
                        patch
                            .labels
                            .insert(plan_label.clone(), job_hash.to_string());
                        finished_nodes.insert(node.name.clone());
                    }
                }
            } else {
                finished_nodes.insert(node.name.clone());
            }
            if patch.uncordon || !patch.labels.is_empty() {
                out.node_patches.push(patch);
            }
            let rebooting = progress.get(&host).is_some_and(|p| {
                p.job.as_deref() == Some(job_name)
                    && (p.phase == phase::REBOOTING || p.phase == phase::WAITING_FOR_HEALTH)
            });
            if !rebooting {
                expire(job, completed, input.now, &mut out, &mut delete);
            }
        } else if !applying.contains(host.as_str()) {
            delete(format!(
                "node {node_name} is not applying this plan (running out of turn)"
            ));
        } else {
            progress.insert(
                host.clone(),
                node_progress(&progress, &host, phase::UPGRADING, job_name, &now, None),
            );
        }
    }

    let deleting: BTreeSet<String> = deletions.iter().map(|d| d.name.clone()).collect();
    // Nodes with an unfinished Job of this Plan: a second Job for the same node waits for it.
    let busy: BTreeSet<&str> = existing
        .values()
        .filter(|j| {
            condition_true(j, "Complete").is_none() && condition_true(j, "Failed").is_none()
        })
        .filter_map(|j| label(j, labels::NODE))
        .collect();
    out.delete_jobs.extend(deletions);

    // Create the Jobs of applying nodes; replace those whose template changed; never retry a failed
    // Job until the Plan changes.
    let mut current = plan.clone();
    current.status = Some(st.clone());
    for (node, job) in desired {
        let job_name = job.metadata.name.clone().unwrap_or_default();
        let host = node.hostname().to_string();
        let failed_here = progress.get(&host).is_some_and(|p| {
            p.phase == phase::FAILED && p.job.as_deref() == Some(job_name.as_str())
        });
        let failed_at_this_generation =
            failed_here && progress.get(&host).and_then(|p| p.generation) == generation;
        match existing.get(job_name.as_str()) {
            Some(current) if !deleting.contains(&job_name) => {
                // A Job without the annotation (made by SUC before the switch) is left to finish.
                let template_changed = matches!(
                    (job::pod_template_hash(current), job::pod_template_hash(&job)),
                    (Some(live), Some(wanted)) if live != wanted
                );
                let retry = failed_here && !failed_at_this_generation;
                if template_changed || retry {
                    out.delete_jobs.push(JobDeletion {
                        name: job_name.clone(),
                        reason: if template_changed {
                            "its pod template changed".into()
                        } else {
                            "it failed and the plan has changed since".into()
                        },
                    });
                    // The Plan changed since the failure, so the failure no longer holds the rollout.
                    if failed_here {
                        progress.insert(
                            host.clone(),
                            node_progress(&progress, &host, phase::PENDING, &job_name, &now, None),
                        );
                    }
                }
            }
            Some(_) => {}
            None => {
                let past_its_job = progress.get(&host).is_some_and(|p| {
                    p.job.as_deref() == Some(job_name.as_str())
                        && [phase::REBOOTING, phase::WAITING_FOR_HEALTH, phase::WAITING]
                            .contains(&p.phase.as_str())
                });
                if failed_at_this_generation || past_its_job || busy.contains(node.name.as_str()) {
                    continue;
                }
                let mut pending =
                    node_progress(&progress, &host, phase::PENDING, &job_name, &now, None);
                // The boot the node runs before its upgrade; another one later means it rebooted.
                pending.boot_id = Some(node.boot_id.clone());
                progress.insert(host.clone(), pending);
                out.create_jobs.push(job);
            }
        }
        // The reboot pod waits on the node from before its Job starts until the node is back.
        if let Some(policy) = &reboot_policy
            && !finished_nodes.contains(&node.name)
            && progress.get(&host).is_some_and(|p| {
                p.job.as_deref() == Some(job_name.as_str())
                    && [phase::PENDING, phase::UPGRADING, phase::REBOOTING]
                        .contains(&p.phase.as_str())
            })
            && let Some(pod) =
                reboot::render_reboot_pod(&current, node, &job_name, input.controller_name, policy)
            && !input
                .reboot_pods
                .iter()
                .any(|p| p.metadata.name == pod.metadata.name)
        {
            out.create_pods.push(pod);
        }
    }

    // Reboot pods that are no longer needed: the node is done, failed, or no longer applying, or
    // the pod belongs to another hash.
    let wanted: BTreeSet<String> = desired_reboot_pods(input, &st, &finished_nodes);
    for pod in input.reboot_pods {
        if let Some(name) = &pod.metadata.name
            && pod.metadata.deletion_timestamp.is_none()
            && !wanted.contains(name)
        {
            out.delete_pods.push(name.clone());
        }
    }

    // A failed node keeps its slot and keeps the Plan incomplete, whatever else happened.
    let failure = progress
        .values()
        .filter(|p| p.phase == phase::FAILED)
        .find_map(|p| Some((p.reason.clone()?, p.message.clone()?)));
    match failure {
        Some((reason, message)) => cond::set(
            &mut st, COMPLETE, FALSE, &reason, &message, &now, generation,
        ),
        // Otherwise say what the rollout waits for: a node rebooting or waiting for its health gate.
        None if let Some(p) = progress
            .values()
            .find(|p| p.phase == phase::REBOOTING || p.phase == phase::WAITING_FOR_HEALTH) =>
        {
            let message = format!(
                "node {}: {}",
                p.name,
                p.message.as_deref().unwrap_or_default()
            );
            let reason = p.phase.clone();
            cond::set(
                &mut st, COMPLETE, FALSE, &reason, &message, &now, generation,
            );
        }
        // The failed Job was replaced after a Plan change, or the node is back: syncing again.
        None if FAILURE_REASONS.contains(&cond::reason(&st, COMPLETE))
            || [phase::REBOOTING, phase::WAITING_FOR_HEALTH]
                .contains(&cond::reason(&st, COMPLETE)) =>
        {
            cond::set(&mut st, COMPLETE, FALSE, "SyncJob", "", &now, generation);
        }
        None => {}
    }
    st.nodes = progress.into_values().collect();
    st.observed_generation = generation;
    out.status_changed = st != old;
    out.status = st;
    out
}

fn node_progress(
    progress: &BTreeMap<String, NodeProgress>,
    host: &str,
    phase: &str,
    job: &str,
    now: &str,
    message: Option<String>,
) -> NodeProgress {
    let previous = progress.get(host).filter(|p| p.job.as_deref() == Some(job));
    let since = match previous {
        Some(p) if p.phase == phase => p.since.clone(),
        _ => Some(now.to_string()),
    };
    NodeProgress {
        name: host.to_string(),
        phase: phase.to_string(),
        reason: None,
        job: Some(job.to_string()),
        message,
        since,
        generation: None,
        boot_id: previous.and_then(|p| p.boot_id.clone()),
    }
}

fn failed_progress(
    host: &str,
    job: &str,
    reason: &str,
    message: String,
    now: &str,
    generation: Option<i64>,
) -> NodeProgress {
    NodeProgress {
        name: host.to_string(),
        phase: phase::FAILED.into(),
        reason: Some(reason.to_string()),
        job: Some(job.to_string()),
        message: Some(message),
        since: Some(now.to_string()),
        generation,
        boot_id: None,
    }
}

/// Reasons of `Complete=False` that a failed node holds.
pub const FAILURE_REASONS: [&str; 3] = ["JobFailed", "RebootTimedOut", "HealthGateTimedOut"];

/// Whether the rollout may go past a node whose Job completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    Open,
    Closed,
}

/// For a Plan that reboots: has the node rebooted (new boot ID, Ready) and, with a health gate,
/// are its pods Ready again? Records the node's progress and fails it after the timeouts.
#[allow(clippy::too_many_arguments)]
fn after_reboot(
    input: &RolloutInput<'_>,
    policy: &reboot::RebootPolicy,
    node: &NodeInfo,
    host: &str,
    job: &str,
    progress: &mut BTreeMap<String, NodeProgress>,
    out: &mut Rollout,
    now: &str,
) -> Gate {
    let generation = input.plan.metadata.generation;
    let previous = progress
        .get(host)
        .filter(|p| p.job.as_deref() == Some(job))
        .cloned();
    // Without a recorded boot (a Job made by another controller), the boot seen now is the old one.
    let before = previous
        .as_ref()
        .and_then(|p| p.boot_id.clone())
        .unwrap_or_else(|| node.boot_id.clone());
    let rebooted = node.ready && !node.boot_id.is_empty() && node.boot_id != before;
    let in_phase = |p: &str| previous.as_ref().is_some_and(|x| x.phase == p);
    let since = |p: &str| {
        previous
            .as_ref()
            .filter(|x| x.phase == p)
            .and_then(|x| x.since.as_deref())
            .and_then(|s| s.parse::<Timestamp>().ok())
            .unwrap_or(input.now)
    };
    let failed_with = |reason: &str| {
        in_phase(phase::FAILED)
            && previous.as_ref().and_then(|p| p.reason.as_deref()) == Some(reason)
    };
    // A timeout is reported once and holds the slot; the node may still recover later.
    let fail = |progress: &mut BTreeMap<String, NodeProgress>,
                out: &mut Rollout,
                reason: &'static str,
                message: String,
                before: String| {
        out.event(EventType::Warning, reason, message.clone());
        let failed = failed_progress(host, job, reason, message, now, generation);
        progress.insert(
            host.to_string(),
            NodeProgress {
                boot_id: Some(before),
                ..failed
            },
        );
    };
    if !rebooted {
        if failed_with("RebootTimedOut") {
            return Gate::Closed;
        }
        let waited = elapsed_since(input.now, Some(since(phase::REBOOTING)));
        if waited >= policy.timeout {
            let state = if node.boot_id == before {
                format!("boot ID still {before}")
            } else {
                "not Ready".to_string()
            };
            let message = format!(
                "Node {} did not come back from its reboot within {} ({state})",
                node.name,
                GoDuration::from_std(policy.timeout)
            );
            fail(progress, out, "RebootTimedOut", message, before);
            return Gate::Closed;
        }
        if !in_phase(phase::REBOOTING) {
            out.event(
                EventType::Normal,
                "Rebooting",
                format!(
                    "Job completed on Node {}; waiting for the node to reboot",
                    node.name
                ),
            );
        }
        let mut p = node_progress(
            progress,
            host,
            phase::REBOOTING,
            job,
            now,
            Some(format!(
                "waiting for a new boot ID (now {}) and Ready, up to {}",
                node.boot_id,
                GoDuration::from_std(policy.timeout)
            )),
        );
        p.boot_id = Some(before);
        progress.insert(host.to_string(), p);
        out.requeue((policy.timeout - waited).min(Duration::from_secs(30)));
        return Gate::Closed;
    }
    if let Some(gate) = &policy.health_gate {
        let selector = selection::Selector::from_label_selector(Some(&gate.pod_selector))
            .map(|s| s.to_string())
            .unwrap_or_default();
        let scope = gate
            .namespace
            .as_deref()
            .map(|n| format!(" in namespace {n}"))
            .unwrap_or_default();
        let waiting = match input.health.get(&node.name) {
            Some(o) if o.healthy() => None,
            Some(o) => Some(format!(
                "waiting for {} of {} pods matching {selector}{scope} on node {} to be Ready: {}",
                o.not_ready.len(),
                o.total,
                node.name,
                o.not_ready.join(", ")
            )),
            None => Some(format!(
                "waiting to check the pods matching {selector}{scope} on node {}",
                node.name
            )),
        };
        if let Some(message) = waiting {
            if failed_with("HealthGateTimedOut") {
                return Gate::Closed;
            }
            let waited = elapsed_since(input.now, Some(since(phase::WAITING_FOR_HEALTH)));
            if waited >= gate.timeout {
                let message = format!(
                    "Node {} rebooted but its health gate did not pass within {}: {message}",
                    node.name,
                    GoDuration::from_std(gate.timeout)
                );
                fail(progress, out, "HealthGateTimedOut", message, before);
                return Gate::Closed;
            }
            if !in_phase(phase::WAITING_FOR_HEALTH) {
                out.event(
                    EventType::Normal,
                    "Rebooted",
                    format!(
                        "Node {} rebooted (boot ID {} is now {}); {message}",
                        node.name, before, node.boot_id
                    ),
                );
            }
            let mut p = node_progress(
                progress,
                host,
                phase::WAITING_FOR_HEALTH,
                job,
                now,
                Some(message),
            );
            p.boot_id = Some(before);
            progress.insert(host.to_string(), p);
            out.requeue(Duration::from_secs(5));
            return Gate::Closed;
        }
        if in_phase(phase::WAITING_FOR_HEALTH) {
            out.event(
                EventType::Normal,
                "HealthGatePassed",
                format!(
                    "Pods matching {selector}{scope} on node {} are Ready",
                    node.name
                ),
            );
        }
    } else if !in_phase(phase::WAITING) {
        out.event(
            EventType::Normal,
            "Rebooted",
            format!(
                "Node {} rebooted (boot ID {} is now {}) and is Ready",
                node.name, before, node.boot_id
            ),
        );
    }
    Gate::Open
}

/// The reboot pods that should exist: those of applying nodes whose Job of the current hash is not over.
fn desired_reboot_pods(
    input: &RolloutInput<'_>,
    st: &PlanStatus,
    finished_nodes: &BTreeSet<String>,
) -> BTreeSet<String> {
    let (Some(name), Some(hash)) = (
        input.plan.metadata.name.as_deref(),
        st.latest_hash.as_deref(),
    ) else {
        return BTreeSet::new();
    };
    if reboot::policy(input.plan, input.job_config).is_none() {
        return BTreeSet::new();
    }
    let applying: BTreeSet<&str> = st.applying.iter().map(String::as_str).collect();
    input
        .nodes
        .iter()
        .filter(|n| applying.contains(n.hostname()) && !finished_nodes.contains(&n.name))
        .map(|n| reboot::reboot_pod_name(name, &n.name, hash))
        .collect()
}

/// Deletes a finished Job once its TTL has passed, or asks to look again then.
fn expire(
    job: &Job,
    finished: Option<Timestamp>,
    now: Timestamp,
    out: &mut Rollout,
    delete: &mut impl FnMut(String),
) {
    let ttl = job_ttl(job);
    let age = elapsed_since(now, finished);
    if age >= ttl {
        delete(format!(
            "it finished {}s ago (ttl {}s)",
            age.as_secs(),
            ttl.as_secs()
        ));
    } else {
        out.requeue(ttl - age);
    }
}

/// Resolves the version from `spec.version` or the channel, and computes the hash.
fn resolve(input: &RolloutInput<'_>, st: &mut PlanStatus, out: &mut Rollout, now: &str) {
    let plan = input.plan;
    let generation = plan.metadata.generation;
    let spec_version = plan.spec.version.as_deref().filter(|v| !v.is_empty());
    let channel = plan.spec.channel.as_deref().filter(|c| !c.is_empty());
    let resolved_before = cond::is(st, LATEST_RESOLVED, TRUE);
    let (latest, reason) = match (spec_version, channel) {
        (Some(v), _) => (munge_version(v), "Version"),
        (None, Some(url)) => match &input.channel {
            Some(ChannelAnswer::Version(v)) => (munge_version(v), "Channel"),
            Some(ChannelAnswer::Failed(e)) => {
                let message = format!("cannot resolve the channel {url}: {e}");
                let shown = cond::get(st, LATEST_RESOLVED).and_then(|c| c.message.clone());
                if shown.as_deref() != Some(message.as_str()) {
                    out.event(
                        EventType::Warning,
                        "ResolveFailed",
                        format!("Failed to resolve latest version from Spec.Channel: {e}"),
                    );
                }
                match st.latest_version.clone() {
                    // Keep rolling out the last version the channel gave, and say so.
                    Some(kept) if resolved_before => {
                        let message = format!("{message}; keeping {kept}");
                        cond::set(
                            st,
                            LATEST_RESOLVED,
                            TRUE,
                            "Channel",
                            &message,
                            now,
                            generation,
                        );
                    }
                    _ => cond::set(
                        st,
                        LATEST_RESOLVED,
                        FALSE,
                        "ResolveFailed",
                        &message,
                        now,
                        generation,
                    ),
                }
                digest(input, st);
                return;
            }
            // Not asked yet: nothing changes until the channel answers.
            None => return,
        },
        (None, None) => {
            if !cond::is(st, LATEST_RESOLVED, FALSE) {
                out.event(
                    EventType::Warning,
                    "ResolveFailed",
                    format!("Failed to resolve latest version: {ERR_UNRESOLVABLE}"),
                );
            }
            cond::set(
                st,
                LATEST_RESOLVED,
                FALSE,
                "Error",
                ERR_UNRESOLVABLE,
                now,
                generation,
            );
            return;
        }
    };
    if !resolved_before || st.latest_version.as_deref() != Some(latest.as_str()) {
        let source = if reason == "Version" {
            "Spec.Version"
        } else {
            "Spec.Channel"
        };
        out.event(
            EventType::Normal,
            "Resolved",
            format!("Resolved latest version from {source}: {latest}"),
        );
        cond::set(st, COMPLETE, FALSE, "Resolved", "", now, generation);
    }
    st.latest_version = Some(latest);
    cond::set(st, LATEST_RESOLVED, TRUE, reason, "", now, generation);
    digest(input, st);
}

fn digest(input: &RolloutInput<'_>, st: &mut PlanStatus) {
    if let Some(latest) = st.latest_version.clone()
        && let Ok(h) = hash::plan_latest_hash(input.plan, &latest, input.secrets)
    {
        st.latest_hash = Some(h);
    }
}

/// Selects the applying nodes, honours the window and renders their Jobs.
fn generate<'a>(
    input: &RolloutInput<'a>,
    old: &PlanStatus,
    st: &mut PlanStatus,
    out: &mut Rollout,
    desired: &mut Vec<(&'a NodeInfo, Job)>,
    now: &str,
) {
    let plan = input.plan;
    let generation = plan.metadata.generation;
    let name = plan.metadata.name.as_deref().unwrap_or_default();
    let uid = plan.metadata.uid.as_deref().unwrap_or_default();
    let version = st.latest_version.clone().unwrap_or_default();
    let hash = st.latest_hash.clone().unwrap_or_default();
    let selected = match selection::select_concurrent_nodes(
        name,
        uid,
        plan.spec.node_selector.as_ref(),
        &hash,
        plan.spec.concurrency.unwrap_or(0),
        &old.applying,
        input.nodes,
    ) {
        Ok(nodes) => nodes,
        Err(e) => {
            let message = format!("Failed to select nodes: {e}");
            if cond::get(st, COMPLETE).and_then(|c| c.message.as_deref()) != Some(message.as_str())
            {
                out.event(EventType::Warning, "SelectNodesFailed", message.clone());
            }
            cond::set(
                st,
                COMPLETE,
                FALSE,
                "SelectNodesFailed",
                &message,
                now,
                generation,
            );
            return;
        }
    };
    let mut jobs = Vec::with_capacity(selected.len());
    let mut rendered_plan = plan.clone();
    rendered_plan.status = Some(st.clone());
    for node in &selected {
        match job::render_job(
            &rendered_plan,
            node,
            input.controller_name,
            input.job_config,
        ) {
            Ok(j) => jobs.push((*node, j)),
            Err(e) => {
                let message = format!("Failed to create job for node {}: {e}", node.name);
                if cond::get(st, COMPLETE).and_then(|c| c.message.as_deref())
                    != Some(message.as_str())
                {
                    out.event(EventType::Warning, "ValidationFailed", message.clone());
                }
                cond::set(
                    st,
                    COMPLETE,
                    FALSE,
                    "ValidationFailed",
                    &message,
                    now,
                    generation,
                );
                return;
            }
        }
    }
    if selected.is_empty() {
        if !cond::is(st, COMPLETE, TRUE) {
            out.event(
                EventType::Normal,
                "Complete",
                format!("Jobs complete for version {version}. Hash: {hash}"),
            );
        }
        st.applying.clear();
        cond::set(st, COMPLETE, TRUE, "Complete", "", now, generation);
        return;
    }
    if let Some(spec) = &plan.spec.window
        && old.applying.is_empty()
        && let Ok(window) = TimeWindow::new(spec)
        && !window.contains(input.now)
    {
        if cond::reason(st, COMPLETE) != "Waiting" {
            out.event(
                EventType::Normal,
                "Waiting",
                format!(
                    "Waiting for start of Spec.Window to sync Jobs for version {version}. Hash: {hash}"
                ),
            );
        }
        out.requeue(window.next_check(input.now));
        cond::set(
            st,
            COMPLETE,
            FALSE,
            "Waiting",
            MSG_WAITING_FOR_WINDOW,
            now,
            generation,
        );
        return;
    }
    let names: Vec<String> = selected.iter().map(|n| n.hostname().to_string()).collect();
    if names != old.applying {
        out.event(
            EventType::Normal,
            "SyncJob",
            format!(
                "Jobs synced for version {version} on Nodes {}. Hash: {hash}",
                names.join(",")
            ),
        );
        st.applying = names;
        cond::set(st, COMPLETE, FALSE, "SyncJob", "", now, generation);
    }
    desired.extend(jobs);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::PlanSpec;
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
                upgrade: crate::api::ContainerSpec {
                    image: "rancher/k3s-upgrade".into(),
                    ..Default::default()
                },
                ..Default::default()
            },
            status: None,
        }
    }

    struct World {
        plan: Plan,
        nodes: Vec<NodeInfo>,
        jobs: Vec<Job>,
        pods: Vec<Pod>,
        health: BTreeMap<String, HealthObservation>,
        secrets: BTreeMap<String, Secret>,
        channel: Option<ChannelAnswer>,
        now: Timestamp,
        config: JobConfig,
    }

    impl World {
        fn new(plan: Plan, nodes: Vec<NodeInfo>) -> Self {
            World {
                plan,
                nodes,
                jobs: Vec::new(),
                pods: Vec::new(),
                health: BTreeMap::new(),
                secrets: BTreeMap::new(),
                channel: None,
                now: now(),
                config: JobConfig::default(),
            }
        }

        fn decide(&self) -> Rollout {
            decide(&RolloutInput {
                plan: &self.plan,
                nodes: &self.nodes,
                jobs: &self.jobs,
                reboot_pods: &self.pods,
                health: &self.health,
                secrets: &self.secrets,
                channel: self.channel.clone(),
                now: self.now,
                controller_name: CONTROLLER,
                job_config: &self.config,
            })
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
            for p in &r.node_patches {
                let n = self
                    .nodes
                    .iter_mut()
                    .find(|n| n.name == p.node)
                    .expect("patched node exists");
                n.labels.extend(p.labels.clone());
                if p.uncordon {
                    n.unschedulable = false;
                }
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

    fn reasons(r: &Rollout) -> Vec<&'static str> {
        r.events.iter().map(|e| e.reason).collect()
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
        assert!(r.status.nodes.iter().all(|n| n.phase == phase::UPGRADING));
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
        assert_eq!(complete(&r.status).0, TRUE);
        assert!(r.create_jobs.is_empty());
        let r = World::new(plan(0), nodes(3)).decide();
        assert_eq!(complete(&r.status).1, "Complete");
        assert!(r.create_jobs.is_empty());
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
        p.spec.drain = Some(crate::api::DrainSpec {
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
        p.spec.secrets = Some(vec![crate::api::SecretSpec {
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
    }

    #[test]
    fn outside_the_window_a_rollout_waits_but_one_started_goes_on() {
        let mut p = plan(1);
        p.spec.window = Some(crate::api::TimeWindowSpec {
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
        w.step();
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
        assert_eq!(r.status.nodes[0].phase, phase::FAILED);
        assert_eq!(
            r.status.applying,
            vec!["node-1".to_string()],
            "the slot stays held"
        );
        // Reported once.
        assert!(w.step().events.is_empty());
        // The TTL deletes the Job; it is not created again.
        w.now = now() + jiff::SignedDuration::from_secs(3600);
        let r = w.step();
        assert_eq!(r.delete_jobs.len(), 1);
        let r = w.step();
        assert!(r.create_jobs.is_empty(), "no automatic retry");
        assert_eq!(complete(&r.status).1, "JobFailed");
        // Editing the Plan retries.
        w.plan.metadata.generation = Some(2);
        let r = w.step();
        assert_eq!(r.create_jobs.len(), 1);
        assert_eq!(r.status.nodes[0].phase, phase::PENDING);
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
        let node = label(&w.jobs[0], labels::NODE).expect("node").to_string();
        w.nodes
            .iter_mut()
            .find(|n| n.name == node)
            .expect("node")
            .unschedulable = true;
        w.finish(&job, "Complete", now(), "", "");
        w.now = now() + jiff::SignedDuration::from_secs(60);
        let r = w.step();
        assert_eq!(reasons(&r), vec!["JobCompleteWaiting"]);
        assert_eq!(r.requeue_after, Some(Duration::from_secs(240)));
        assert_eq!(r.node_patches.len(), 1);
        assert!(r.node_patches[0].uncordon && r.node_patches[0].labels.is_empty());
        assert!(
            r.create_jobs.is_empty(),
            "the slot is held during the delay"
        );
        assert_eq!(r.status.nodes[0].phase, phase::WAITING);

        w.now = now() + jiff::SignedDuration::from_secs(301);
        let r = w.step();
        assert_eq!(reasons(&r), vec!["JobComplete"]);
        let labels = &r.node_patches[0].labels;
        assert_eq!(
            labels.get("upgraded-to").map(String::as_str),
            Some("v1.30.1-k3s1")
        );
        assert_eq!(
            labels.get("plan.upgrade.cattle.io/p"),
            w.status().latest_hash.as_ref()
        );
        // Next decision: the node is done and the other node takes the slot.
        let r = w.step();
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
        p.spec.secrets = Some(vec![crate::api::SecretSpec {
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
        p.spec.reboot = Some(crate::api::RebootSpec {
            timeout: Some("10m".into()),
            health_gate: gate.then(|| crate::api::HealthGateSpec {
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
        assert_eq!(r.create_pods.len(), 1, "the reboot pod comes with the Job");
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
        assert_eq!(reasons(&r), vec!["Rebooting"]);
        assert_eq!(r.status.nodes[0].phase, phase::REBOOTING);
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
        assert_eq!(reasons(&r), vec!["Rebooted", "JobComplete"]);
        assert!(r.node_patches[0].uncordon);
        assert_eq!(
            r.node_patches[0].labels.get("plan.upgrade.cattle.io/p"),
            w.status().latest_hash.as_ref()
        );
        assert_eq!(r.delete_pods.len(), 1, "the reboot pod goes");
        let r = w.step();
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
        let r = w.step();
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
        assert_eq!(p.phase, phase::WAITING_FOR_HEALTH);
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
        assert!(reasons(&r).contains(&"HealthGatePassed"));
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
        assert_eq!(w.pods.len(), 1);
        let job_name = w.job_names()[0].clone();
        w.finish(&job_name, "Failed", now(), "BackoffLimitExceeded", "boom");
        let r = w.step();
        assert_eq!(r.delete_pods.len(), 1);
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
    fn finished_jobs_are_deleted_at_their_ttl() {
        let mut w = World::new(plan(1), nodes(1));
        w.step();
        let job = w.job_names()[0].clone();
        w.finish(&job, "Complete", now(), "", "");
        let r = w.step();
        assert!(r.delete_jobs.is_empty());
        assert_eq!(r.requeue_after, Some(Duration::from_secs(900)));
        w.now = now() + jiff::SignedDuration::from_secs(900);
        let r = w.step();
        assert_eq!(r.delete_jobs.len(), 1);
    }
}
