//! The Jobs of each Plan by what a decision needs of them, kept as the Job watch brings them (as
//! the node index keeps the nodes): the Jobs it always reads, and the quiet ones
//! ([`settled::quiet`]) by version and node, which a decision that rolls out reads only for the
//! nodes it reads. Mid-rollout most of a Plan's Jobs are quiet (completed, waiting for their TTL),
//! so a reconcile fetches the few it reads instead of sorting through every Job of the namespace.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;

use super::hooks::HOOK_PLAN_LABEL;
use super::settled;
use crate::plan::api::labels;

type Name = Arc<str>;

/// The index, with a relist (between its start and its end) built apart.
#[derive(Debug, Default)]
pub struct JobIndex {
    live: Books,
    relist: Option<Books>,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Books {
    /// Where each Job is filed, to take it out when it changes or goes.
    filed: HashMap<Name, Filing>,
    plans: HashMap<String, PlanBook>,
    hooks: HashMap<String, BTreeSet<Name>>,
}

/// Where one Job is filed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Filing {
    plan: Option<String>,
    hook: Option<String>,
    /// Quiet: its version and node.
    quiet: Option<(String, String)>,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct PlanBook {
    /// Jobs every decision reads.
    read: BTreeSet<Name>,
    /// Quiet Jobs by version, then by node.
    quiet: HashMap<String, HashMap<String, BTreeSet<Name>>>,
}

impl PlanBook {
    fn is_empty(&self) -> bool {
        self.read.is_empty() && self.quiet.is_empty()
    }
}

impl Books {
    fn file(&mut self, job: &Job) {
        let Some(name) = job.metadata.name.as_deref() else {
            return;
        };
        let label = |key: &str| {
            (job.metadata.labels.as_ref())
                .and_then(|l| l.get(key))
                .cloned()
        };
        let filing = Filing {
            plan: label(labels::PLAN),
            hook: label(HOOK_PLAN_LABEL),
            quiet: settled::quiet(job).map(|q| (q.version.to_string(), q.node.to_string())),
        };
        if self.filed.get(name) == Some(&filing) {
            return;
        }
        self.unfile(name);
        let name: Name = Arc::from(name);
        if let Some(plan) = &filing.plan {
            let book = self.plans.entry(plan.clone()).or_default();
            match &filing.quiet {
                Some((version, node)) => {
                    let by_node = book.quiet.entry(version.clone()).or_default();
                    by_node
                        .entry(node.clone())
                        .or_default()
                        .insert(name.clone());
                }
                None => {
                    book.read.insert(name.clone());
                }
            }
        }
        if let Some(hook) = &filing.hook {
            self.hooks
                .entry(hook.clone())
                .or_default()
                .insert(name.clone());
        }
        self.filed.insert(name, filing);
    }

    fn unfile(&mut self, name: &str) {
        let Some(filing) = self.filed.remove(name) else {
            return;
        };
        if let Some(plan) = &filing.plan
            && let Some(book) = self.plans.get_mut(plan)
        {
            match &filing.quiet {
                Some((version, node)) => {
                    if let Some(by_node) = book.quiet.get_mut(version) {
                        if let Some(names) = by_node.get_mut(node) {
                            names.remove(name);
                            if names.is_empty() {
                                by_node.remove(node);
                            }
                        }
                        if by_node.is_empty() {
                            book.quiet.remove(version);
                        }
                    }
                }
                None => {
                    book.read.remove(name);
                }
            }
            if book.is_empty() {
                self.plans.remove(plan);
            }
        }
        if let Some(hook) = &filing.hook
            && let Some(names) = self.hooks.get_mut(hook)
        {
            names.remove(name);
            if names.is_empty() {
                self.hooks.remove(hook);
            }
        }
    }
}

impl JobIndex {
    pub fn new() -> JobIndex {
        JobIndex::default()
    }

    /// An index of `jobs`, listed once.
    pub fn listed<'a>(jobs: impl IntoIterator<Item = &'a Job>) -> JobIndex {
        let mut index = JobIndex::new();
        jobs.into_iter().for_each(|j| index.live.file(j));
        index
    }

    /// The Job was created or changed.
    pub fn applied(&mut self, job: &Job) {
        self.live.file(job);
    }

    /// The Job is gone.
    pub fn deleted(&mut self, job: &Job) {
        if let Some(name) = job.metadata.name.as_deref() {
            self.live.unfile(name);
        }
    }

    pub fn relist_start(&mut self) {
        self.relist = Some(Books::default());
    }

    pub fn relisted(&mut self, job: &Job) {
        self.relist.get_or_insert_default().file(job);
    }

    /// The relist replaces the index: what it did not list is gone.
    pub fn relist_done(&mut self) {
        if let Some(books) = self.relist.take() {
            self.live = books;
        }
    }

    /// The names of `plan`'s Jobs a decision reads besides the quiet ones at the version it rolls
    /// out: with `version`, all but those; without (it does not roll out, or is explained), all.
    pub fn plan_jobs(&self, plan: &str, version: Option<&str>) -> Vec<Name> {
        let Some(book) = self.live.plans.get(plan) else {
            return Vec::new();
        };
        let quiet = (book.quiet.iter())
            .filter(|(v, _)| Some(v.as_str()) != version)
            .flat_map(|(_, by_node)| by_node.values().flatten());
        book.read.iter().chain(quiet).cloned().collect()
    }

    /// The names of `plan`'s quiet Jobs at `version` for `nodes`.
    pub fn quiet_of<'a>(
        &self,
        plan: &str,
        version: &str,
        nodes: impl IntoIterator<Item = &'a str>,
    ) -> Vec<Name> {
        let Some(by_node) = (self.live.plans.get(plan)).and_then(|b| b.quiet.get(version)) else {
            return Vec::new();
        };
        (nodes.into_iter())
            .filter_map(|n| by_node.get(n))
            .flatten()
            .cloned()
            .collect()
    }

    /// The names of the Jobs of `plan`'s hooks.
    pub fn hook_jobs(&self, plan: &str) -> Vec<Name> {
        (self.live.hooks.get(plan).into_iter().flatten())
            .cloned()
            .collect()
    }

    /// How many Jobs the index holds.
    pub fn len(&self) -> usize {
        self.live.filed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.live.filed.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobSpec, JobStatus};
    use kube::api::ObjectMeta;

    fn job(name: &str, labels: &[(&str, &str)], completed: bool) -> Job {
        Job {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    (labels.iter())
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(JobSpec {
                ttl_seconds_after_finished: Some(900),
                ..Default::default()
            }),
            status: completed.then(|| JobStatus {
                conditions: Some(vec![JobCondition {
                    type_: "Complete".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn of_plan(name: &str, node: &str, version: &str, completed: bool) -> Job {
        let labels = [
            (labels::PLAN, "p"),
            (labels::NODE, node),
            (labels::VERSION, version),
        ];
        job(name, &labels, completed)
    }

    fn names(v: Vec<Name>) -> Vec<String> {
        let mut v: Vec<String> = v.iter().map(|n| n.to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_job_moves_to_the_quiet_ones_when_it_completes_and_out_when_it_goes() {
        let mut index = JobIndex::new();
        index.applied(&of_plan("j1", "n1", "v2", false));
        assert_eq!(names(index.plan_jobs("p", Some("v2"))), ["j1"]);
        assert!(index.quiet_of("p", "v2", ["n1"]).is_empty());

        index.applied(&of_plan("j1", "n1", "v2", true));
        assert!(index.plan_jobs("p", Some("v2")).is_empty(), "quiet now");
        assert_eq!(names(index.plan_jobs("p", None)), ["j1"], "all of them");
        assert_eq!(names(index.plan_jobs("p", Some("v3"))), ["j1"], "old");
        assert_eq!(names(index.quiet_of("p", "v2", ["n0", "n1"])), ["j1"]);
        assert!(index.quiet_of("p", "v2", ["n2"]).is_empty());
        assert!(index.quiet_of("other", "v2", ["n1"]).is_empty());

        index.deleted(&of_plan("j1", "n1", "v2", true));
        assert!(index.plan_jobs("p", None).is_empty());
        assert_eq!(index.live, Books::default(), "nothing left of it");
    }

    #[test]
    fn hooks_jobs_and_jobs_of_no_plan_are_kept_apart() {
        let mut index = JobIndex::new();
        index.applied(&job("h1", &[(HOOK_PLAN_LABEL, "p")], true));
        index.applied(&job("stray", &[], false));
        assert_eq!(names(index.hook_jobs("p")), ["h1"]);
        assert!(index.plan_jobs("p", None).is_empty());
        assert_eq!(index.len(), 2);
        // A Job that loses its label leaves the book.
        index.applied(&job("h1", &[], true));
        assert!(index.hook_jobs("p").is_empty());
        assert!(index.live.hooks.is_empty());
    }

    #[test]
    fn a_relist_replaces_what_it_did_not_list() {
        let mut index = JobIndex::listed(&[
            of_plan("j1", "n1", "v2", true),
            of_plan("j2", "n2", "v2", false),
        ]);
        index.relist_start();
        index.relisted(&of_plan("j2", "n2", "v2", true));
        // Until the relist ends, the index is what it was.
        assert_eq!(names(index.plan_jobs("p", Some("v1"))), ["j1", "j2"]);
        index.relist_done();
        assert_eq!(names(index.plan_jobs("p", Some("v1"))), ["j2"]);
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn many_jobs_created_and_deleted_leave_the_index_empty() {
        let mut index = JobIndex::new();
        let jobs: Vec<Job> = (0..500)
            .map(|i| {
                let (node, version) = (format!("n{}", i % 50), format!("v{}", i % 3));
                of_plan(&format!("j{i}"), &node, &version, i % 2 == 0)
            })
            .collect();
        jobs.iter().for_each(|j| index.applied(j));
        jobs.iter().for_each(|j| {
            index.applied(&of_plan(
                j.metadata.name.as_deref().unwrap_or_default(),
                "n1",
                "v1",
                true,
            ))
        });
        assert_eq!(index.plan_jobs("p", Some("v1")).len(), 0);
        assert_eq!(index.quiet_of("p", "v1", ["n1"]).len(), 500);
        jobs.iter().for_each(|j| index.deleted(j));
        assert!(index.is_empty());
        assert_eq!(index.live, Books::default());
    }
}
