//! What the decision reads of the Plan's Jobs: which node and hash each is for, how it ended, and
//! which Jobs must go because no node state owns them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{Job, JobCondition};

use super::JobDeletion;
use super::node_state::JobSeen;
use crate::plan::api::labels;
use crate::plan::core::job;

/// How a Job ended, if it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Running,
    Complete {
        at: Option<Timestamp>,
    },
    Failed {
        at: Option<Timestamp>,
        message: String,
    },
}

/// One Job of the Plan, read once per decision.
#[derive(Debug, Clone)]
pub struct PlanJob<'a> {
    pub job: &'a Job,
    pub name: &'a str,
    pub node: Option<&'a str>,
    pub version: Option<&'a str>,
    pub outcome: Outcome,
}

impl<'a> PlanJob<'a> {
    /// `None` for a Job that is being deleted: it no longer counts.
    pub fn read(job: &'a Job) -> Option<PlanJob<'a>> {
        if job.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let label = |key: &str| {
            job.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(key))
                .map(String::as_str)
        };
        let finished = |type_: &str| finished(job, type_);
        let outcome = if let Some(c) = finished("Failed") {
            Outcome::Failed {
                at: c.last_transition_time.as_ref().map(|t| t.0),
                message: format!(
                    "{}: {}",
                    c.reason.as_deref().unwrap_or_default(),
                    c.message.as_deref().unwrap_or_default()
                ),
            }
        } else if let Some(c) = finished("Complete") {
            Outcome::Complete {
                at: c.last_transition_time.as_ref().map(|t| t.0),
            }
        } else {
            Outcome::Running
        };
        Some(PlanJob {
            job,
            name: job.metadata.name.as_deref().unwrap_or_default(),
            node: label(labels::NODE).filter(|_| label(labels::PLAN).is_some()),
            version: label(labels::VERSION),
            outcome,
        })
    }

    /// Whether [`PlanJob::read`] would say `Complete`, without reading the rest: a decision
    /// asks it of every Job of the Plan.
    pub fn completed(job: &Job) -> bool {
        job.metadata.deletion_timestamp.is_none()
            && finished(job, "Failed").is_none()
            && finished(job, "Complete").is_some()
    }

    /// Whether only SUC's TTL annotation gives the Job its TTL: the sweep then deletes it once
    /// finished, not the TTL controller.
    pub fn ttl_annotated(job: &Job) -> bool {
        annotation_ttl(job).is_some()
    }

    pub fn running(&self) -> bool {
        self.outcome == Outcome::Running
    }

    /// What a node state sees of this Job. `wanted_template` is the pod-template hash the Plan
    /// renders now; a Job without one (made by SUC) is never replaced for its template.
    pub fn seen(&self, wanted_template: Option<&str>) -> JobSeen {
        let template_current = match (job::pod_template_hash(self.job), wanted_template) {
            (Some(live), Some(wanted)) => live == wanted,
            _ => true,
        };
        let counts = self.job.status.as_ref().map(|s| {
            [s.ready, s.failed, s.succeeded]
                .into_iter()
                .map(|n| n.unwrap_or(0))
                .sum::<i32>()
        });
        match &self.outcome {
            Outcome::Running => JobSeen::Running {
                template_current,
                pods_idle: counts.unwrap_or(0) == 0,
            },
            Outcome::Complete { at } => JobSeen::Complete { at: *at },
            Outcome::Failed { message, .. } => JobSeen::Failed {
                message: message.clone(),
                template_current,
            },
        }
    }
}

/// The Job's condition `type_`, if it is true.
fn finished<'a>(job: &'a Job, type_: &str) -> Option<&'a JobCondition> {
    (job.status.as_ref().and_then(|s| s.conditions.as_ref()))
        .into_iter()
        .flatten()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// The Plan's live Jobs, by name, and which nodes have one running.
pub struct PlanJobs<'a> {
    /// Hashed, not sorted: mid-rollout a Plan has a Job for most of its nodes (the completed ones
    /// wait for their TTL), and each decision builds this; what it yields in order, it sorts.
    pub by_name: HashMap<&'a str, PlanJob<'a>>,
    /// Names of the unfinished Jobs of each node.
    running: BTreeMap<&'a str, Vec<&'a str>>,
}

impl<'a> PlanJobs<'a> {
    pub fn new(jobs: &'a [&'a Job]) -> PlanJobs<'a> {
        let mut by_name: HashMap<&str, PlanJob<'_>> = HashMap::with_capacity(jobs.len());
        by_name.extend(
            (jobs.iter().copied())
                .filter_map(PlanJob::read)
                .map(|j| (j.name, j)),
        );
        let mut running: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for j in by_name.values().filter(|j| j.running()) {
            if let Some(node) = j.node {
                running.entry(node).or_default().push(j.name);
            }
        }
        PlanJobs { by_name, running }
    }

    pub fn get(&self, name: &str) -> Option<&PlanJob<'a>> {
        self.by_name.get(name)
    }

    /// Whether a Job of `version` other than `except` still runs on `node`: the node's next Job
    /// waits for it.
    pub fn other_running(&self, node: &str, version: &str, except: &str) -> bool {
        self.running
            .get(node)
            .into_iter()
            .flatten()
            .filter(|name| **name != except)
            .any(|name| {
                self.by_name
                    .get(name)
                    .is_some_and(|j| j.version == Some(version))
            })
    }

    /// The Jobs no node state owns that must go: without the Plan's labels, of another version,
    /// or running for a node that is not applying. `owned` are the Jobs of applying nodes.
    /// Finished Jobs are left to the TTL controller (`ttlSecondsAfterFinished`); only a Job that
    /// has just SUC's TTL annotation is deleted by slipway, once that TTL has passed.
    pub fn sweep(
        &self,
        latest_version: &str,
        applying_nodes: &BTreeSet<&str>,
        owned: &BTreeSet<&str>,
        now: Timestamp,
    ) -> (Vec<JobDeletion>, Option<Duration>) {
        let mut deletions = Vec::new();
        let mut recheck: Option<Duration> = None;
        for j in self.by_name.values() {
            let mut delete = |reason: String| {
                deletions.push(JobDeletion {
                    name: j.name.to_string(),
                    reason,
                })
            };
            let (Some(node), Some(version)) = (j.node, j.version) else {
                delete("it lacks the plan, version or node label".into());
                continue;
            };
            if version != latest_version {
                delete(format!(
                    "its version {version} is not the latest ({latest_version})"
                ));
                continue;
            }
            let finished_at = match &j.outcome {
                Outcome::Running if !applying_nodes.contains(node) => {
                    delete(format!(
                        "node {node} is not applying this plan (running out of turn)"
                    ));
                    continue;
                }
                Outcome::Running => continue,
                Outcome::Complete { at } | Outcome::Failed { at, .. } => *at,
            };
            if owned.contains(j.name) {
                continue;
            }
            match annotation_ttl_left(j.job, finished_at, now) {
                Some(Duration::ZERO) => delete(format!(
                    "it finished more than its TTL ago ({}s)",
                    annotation_ttl(j.job).map_or(0, |t| t.as_secs())
                )),
                Some(left) => recheck = Some(recheck.map_or(left, |r| r.min(left))),
                None => {}
            }
        }
        deletions.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        (deletions, recheck)
    }
}

fn annotation_ttl(job: &Job) -> Option<Duration> {
    if job
        .spec
        .as_ref()
        .is_some_and(|s| s.ttl_seconds_after_finished.is_some())
    {
        return None;
    }
    let text = job
        .metadata
        .annotations
        .as_ref()?
        .get(labels::TTL_SECONDS_AFTER_FINISHED)?;
    // A malformed annotation means now, as in SUC.
    Some(Duration::from_secs(text.trim().parse::<u64>().unwrap_or(0)))
}

/// For a Job whose TTL only SUC's annotation gives: how long until it expires (zero: now).
fn annotation_ttl_left(job: &Job, finished: Option<Timestamp>, now: Timestamp) -> Option<Duration> {
    let ttl = annotation_ttl(job)?;
    let age: Duration = finished
        .and_then(|t| now.duration_since(t).try_into().ok())
        .unwrap_or_default();
    Some(ttl.saturating_sub(age))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::JobStatus;

    fn job(status: Option<JobStatus>) -> Job {
        Job {
            metadata: kube::api::ObjectMeta {
                name: Some("j1".into()),
                ..Default::default()
            },
            status,
            ..Default::default()
        }
    }

    fn idle(status: Option<JobStatus>) -> bool {
        let j = job(status);
        match PlanJob::read(&j).map(|p| p.seen(None)) {
            Some(JobSeen::Running { pods_idle, .. }) => pods_idle,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn completed_says_what_read_says_of_complete() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let condition = |type_: &str, status: &str| JobCondition {
            type_: type_.into(),
            status: status.into(),
            ..Default::default()
        };
        let with = |conditions: Vec<JobCondition>| {
            job(Some(JobStatus {
                conditions: Some(conditions),
                ..Default::default()
            }))
        };
        let mut deleting = with(vec![condition("Complete", "True")]);
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        let jobs = [
            job(None),
            with(vec![]),
            with(vec![condition("Complete", "True")]),
            with(vec![condition("Complete", "False")]),
            with(vec![condition("SuccessCriteriaMet", "True")]),
            with(vec![condition("Failed", "True")]),
            with(vec![
                condition("Complete", "True"),
                condition("Failed", "True"),
            ]),
            with(vec![
                condition("Failed", "False"),
                condition("Complete", "True"),
            ]),
            deleting,
        ];
        let read = |j: &Job| {
            PlanJob::read(j).is_some_and(|p| matches!(p.outcome, Outcome::Complete { .. }))
        };
        let said: Vec<bool> = jobs.iter().map(PlanJob::completed).collect();
        assert_eq!(said, jobs.iter().map(read).collect::<Vec<_>>());
        assert_eq!(said.iter().filter(|c| **c).count(), 2, "{said:?}");
    }

    #[test]
    fn a_running_jobs_pods_are_idle_until_one_is_ready_or_ends() {
        assert!(idle(None));
        assert!(idle(Some(JobStatus {
            active: Some(1),
            ready: Some(0),
            ..Default::default()
        })));
        for counted in [
            JobStatus {
                ready: Some(1),
                ..Default::default()
            },
            JobStatus {
                failed: Some(1),
                ..Default::default()
            },
            JobStatus {
                succeeded: Some(1),
                ..Default::default()
            },
        ] {
            assert!(!idle(Some(counted.clone())), "{counted:?}");
        }
    }
}
