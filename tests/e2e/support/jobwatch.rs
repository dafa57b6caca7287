//! Watches a namespace's Jobs for a whole test: the most that were unfinished at once, and every
//! UID seen per Job name (a Job created twice has two).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::runtime::{WatchStreamExt, watcher};

#[derive(Default, Clone, Debug)]
pub struct JobWatch {
    pub unfinished: BTreeSet<String>,
    pub max_unfinished: usize,
    pub uids: BTreeMap<String, BTreeSet<String>>,
}

/// The running watch; it stops when dropped.
pub struct JobWatchGuard {
    state: Arc<Mutex<JobWatch>>,
    task: tokio::task::JoinHandle<()>,
}

impl JobWatchGuard {
    /// What the watch has seen so far.
    pub fn snapshot(&self) -> JobWatch {
        self.state.lock().expect("job watch lock").clone()
    }
}

impl Drop for JobWatchGuard {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
}

/// Starts watching `api`'s Jobs.
pub fn watch_jobs(api: Api<Job>) -> JobWatchGuard {
    let state = Arc::new(Mutex::new(JobWatch::default()));
    let s = state.clone();
    let task = tokio::spawn(async move {
        // Backoff: once the test namespace is gone the watch fails, and must not spin.
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            let mut w = s.lock().expect("job watch lock");
            let mut record = |job: &Job, deleted: bool| {
                let name = job.metadata.name.clone().unwrap_or_default();
                if let Some(uid) = &job.metadata.uid {
                    w.uids.entry(name.clone()).or_default().insert(uid.clone());
                }
                if deleted || finished(job) {
                    w.unfinished.remove(&name);
                } else {
                    w.unfinished.insert(name);
                }
                w.max_unfinished = w.max_unfinished.max(w.unfinished.len());
            };
            match event {
                watcher::Event::Apply(job) | watcher::Event::InitApply(job) => record(&job, false),
                watcher::Event::Delete(job) => record(&job, true),
                _ => {}
            }
        }
    });
    JobWatchGuard { state, task }
}
