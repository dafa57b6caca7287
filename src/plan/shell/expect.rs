//! What this process wrote and its caches have not shown yet.
//!
//! A reconcile can run before the watch brings back the Job it created, the label it set or the
//! status it wrote. Deciding from the stale cache would create the Job again, label the node again
//! or write a status that the API server refuses as a conflict: wasted writes, and a slower
//! rollout. So each write is remembered until the cache shows it (or for a short while at most)
//! and laid over the cache when the next decision's inputs are gathered. A Job or pod the watch
//! brought back, even deleted already, is forgotten at once: the cache is then at or past it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource;

use crate::node::NodeInfo;
use crate::node::change::NodeChange;
use crate::plan::api::labels;
use crate::plan::core::reboot;

/// How long a write is laid over a cache that does not show it. Past that, the cache is believed
/// (the object may have been deleted or changed by someone else since).
const PATIENCE: Duration = Duration::from_secs(30);
/// How long after a write's patience ends its Plan is looked at again: past the end, so that the
/// reconcile believes the cache.
const PAST_PATIENCE: Duration = Duration::from_millis(100);
/// When to look at a Plan again after a write, though no watch event comes.
pub const LOOK_AGAIN: Duration = PATIENCE.saturating_add(PAST_PATIENCE);

#[derive(Default)]
pub struct Expectations {
    jobs: Mutex<HashMap<String, (Instant, Arc<Job>)>>,
    pods: Mutex<HashMap<String, (Instant, Arc<Pod>)>>,
    nodes: Mutex<HashMap<String, (Instant, NodeChange, NodeInfo)>>,
    /// The size of `nodes` at which [`Expectations::prune_nodes`] looks again.
    nodes_prune_at: AtomicUsize,
}

/// The size below which [`Expectations::prune_nodes`] keeps everything.
const PRUNE_FLOOR: usize = 64;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The cached objects of one Plan (their `label` names it), plus the ones created for it that the
/// cache does not have yet.
fn overlay<K: Resource>(
    cached: Vec<Arc<K>>,
    created: &Mutex<HashMap<String, (Instant, Arc<K>)>>,
    label: &str,
    plan: &str,
    shown: impl Fn(&str) -> bool,
) -> Vec<Arc<K>> {
    let mut created = lock(created);
    let now = Instant::now();
    if !created.is_empty() {
        created.retain(|name, (at, _)| now.duration_since(*at) < PATIENCE && !shown(name));
    }
    let mut all = cached;
    all.extend(
        created
            .values()
            .map(|(_, k)| k)
            .filter(|k| of_plan(k.as_ref(), label, plan))
            .cloned(),
    );
    all
}

/// Forgets the creation of `watched`: the one of its name and uid (an older object of that name,
/// deleted, says nothing of the new one).
fn forget_watched<K: Resource>(created: &Mutex<HashMap<String, (Instant, Arc<K>)>>, watched: &K) {
    let (Some(name), Some(uid)) = (&watched.meta().name, &watched.meta().uid) else {
        return;
    };
    let mut created = lock(created);
    if created
        .get(name)
        .is_some_and(|(_, k)| k.meta().uid.as_ref() == Some(uid))
    {
        created.remove(name);
    }
}

/// Whether `k`'s `label` names `plan`.
fn of_plan<K: Resource>(k: &K, label: &str, plan: &str) -> bool {
    k.meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(label))
        .map(String::as_str)
        == Some(plan)
}

/// How long until the first of `plan`'s creations in `created` runs out of patience.
fn first_end<K: Resource>(
    created: &Mutex<HashMap<String, (Instant, Arc<K>)>>,
    label: &str,
    plan: &str,
) -> Option<Duration> {
    (lock(created).values())
        .filter(|(_, k)| of_plan(k.as_ref(), label, plan))
        .map(|(at, _)| PATIENCE.saturating_sub(at.elapsed()))
        .min()
}

impl Expectations {
    pub fn created_job(&self, job: Job) {
        if let Some(name) = job.metadata.name.clone() {
            lock(&self.jobs).insert(name, (Instant::now(), Arc::new(job)));
        }
    }

    /// The watch brought back `job` (created, changed or deleted): the Job cache is at or past it,
    /// so a creation of that Job is believed from the cache from now on. A Job deleted before a
    /// reconcile saw it then counts as gone at once, not after [`PATIENCE`]. (During a relist the
    /// cache shows the list only at its end: a decision in between may create the Job again, and
    /// is told it exists.)
    pub fn watched_job(&self, job: &Job) {
        forget_watched(&self.jobs, job);
    }

    /// As [`Expectations::watched_job`], for a reboot pod.
    pub fn watched_pod(&self, pod: &Pod) {
        forget_watched(&self.pods, pod);
    }

    pub fn created_pod(&self, pod: Pod) {
        if let Some(name) = pod.metadata.name.clone() {
            lock(&self.pods).insert(name, (Instant::now(), Arc::new(pod)));
        }
    }

    /// `plan` is deleted: its creations are not waited for.
    pub fn forget_plan(&self, plan: &str) {
        lock(&self.jobs).retain(|_, (_, k)| !of_plan(k.as_ref(), labels::PLAN, plan));
        (lock(&self.pods))
            .retain(|_, (_, k)| !of_plan(k.as_ref(), reboot::REBOOT_PLAN_LABEL, plan));
    }

    /// Forgets the patches of nodes for which `exists` is false, and those past patience, once
    /// the map has doubled since it was last pruned (amortized O(1) a call): a patch is otherwise
    /// forgotten only when a Plan that reads its node looks at it, and a deleted node has none.
    pub fn prune_nodes(&self, mut exists: impl FnMut(&str) -> bool) {
        let mut nodes = lock(&self.nodes);
        if nodes.len() < self.nodes_prune_at.load(Ordering::Relaxed) {
            return;
        }
        nodes.retain(|name, (at, ..)| at.elapsed() < PATIENCE && exists(name));
        let at = (2 * nodes.len()).max(PRUNE_FLOOR);
        self.nodes_prune_at.store(at, Ordering::Relaxed);
    }

    /// `before`: the node as the decision that made the patch saw it.
    pub fn patched_node(&self, patch: &NodeChange, before: &NodeInfo) {
        lock(&self.nodes).insert(
            patch.node.clone(),
            (Instant::now(), patch.clone(), before.clone()),
        );
    }

    /// The nodes with a patch laid over them.
    pub fn patched_nodes(&self) -> Vec<String> {
        lock(&self.nodes).keys().cloned().collect()
    }

    /// `cached`: the cache's Jobs of `plan` a decision reads (not all of them: `in_cache` tells
    /// whether the cache has a Job of that name).
    pub fn jobs(
        &self,
        cached: Vec<Arc<Job>>,
        plan: &str,
        in_cache: impl Fn(&str) -> bool,
    ) -> Vec<Arc<Job>> {
        overlay(cached, &self.jobs, labels::PLAN, plan, in_cache)
    }

    /// `cached`: the cache's reboot pods of `plan`.
    pub fn pods(&self, cached: Vec<Arc<Pod>>, plan: &str) -> Vec<Arc<Pod>> {
        let shown: std::collections::HashSet<&str> = (cached.iter())
            .filter_map(|c| c.meta().name.as_deref())
            .collect();
        overlay(
            cached.clone(),
            &self.pods,
            reboot::REBOOT_PLAN_LABEL,
            plan,
            |n| shown.contains(n),
        )
    }

    /// When to look at `plan` again though no watch event comes: just after the first of the
    /// writes still laid over its caches (its Jobs, its reboot pods, a patch of one of its
    /// `nodes`) runs out of patience. A Job deleted before the watch showed it is then seen gone,
    /// and its node starts again, instead of waiting for some other change of the Plan.
    pub fn look_again(&self, plan: &str, nodes: &[Arc<NodeInfo>]) -> Option<Duration> {
        let patched = lock(&self.nodes);
        let node_ends = (nodes.iter())
            .filter_map(|n| patched.get(&n.name))
            .map(|(at, ..)| PATIENCE.saturating_sub(at.elapsed()));
        let first = node_ends
            .chain(first_end(&self.jobs, labels::PLAN, plan))
            .chain(first_end(&self.pods, reboot::REBOOT_PLAN_LABEL, plan))
            .min()?;
        Some(first + PAST_PATIENCE)
    }

    /// The node with the labels, annotations and uncordon this process patched onto it, until the
    /// cache shows the patch. A merge patch lands whole: once the cache shows any field the patch
    /// changed, the cache is at or past it and is believed whole, so that a change someone made
    /// since (an admin cordoning the node again) is not hidden.
    pub fn node(&self, cached: &NodeInfo) -> Option<NodeInfo> {
        let mut nodes = lock(&self.nodes);
        let (at, patch, before) = nodes.get(&cached.name)?;
        let changed = |was: Option<&String>, now: Option<&String>, to: &Option<String>| {
            was != to.as_ref() && now == to.as_ref()
        };
        let past = patch
            .labels
            .iter()
            .any(|(k, v)| changed(before.labels.get(k), cached.labels.get(k), v))
            || patch
                .annotations
                .iter()
                .any(|(k, v)| changed(before.annotations.get(k), cached.annotations.get(k), v))
            || patch
                .unschedulable
                .is_some_and(|u| u != before.unschedulable && u == cached.unschedulable);
        let mut patched = before.clone();
        patch.apply_to(&mut patched);
        let changes_nothing = patched.labels == before.labels
            && patched.annotations == before.annotations
            && patched.unschedulable == before.unschedulable;
        if past || changes_nothing || at.elapsed() >= PATIENCE {
            nodes.remove(&cached.name);
            return None;
        }
        let mut node = cached.clone();
        patch.apply_to(&mut node);
        Some(node)
    }
}

/// Nodes the overlay changed, as owned values next to the index's shared ones.
pub fn overlay_nodes(
    candidates: &[Arc<NodeInfo>],
    expect: &Expectations,
) -> BTreeMap<String, NodeInfo> {
    candidates
        .iter()
        .filter_map(|n| expect.node(n).map(|o| (n.name.clone(), o)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;

    fn job(name: &str, plan: &str) -> Job {
        Job {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some([(labels::PLAN.to_string(), plan.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_created_job_counts_for_its_plan_until_the_cache_has_it() {
        let e = Expectations::default();
        e.created_job(job("a", "p"));
        assert_eq!(e.jobs(vec![], "p", |_| false).len(), 1);
        assert!(
            e.jobs(vec![], "other", |_| false).is_empty(),
            "another Plan's Job is not this Plan's"
        );
        assert_eq!(
            e.jobs(vec![Arc::new(job("a", "p"))], "p", |n| n == "a")
                .len(),
            1
        );
        // Seen once: forgotten, even if the cache loses it later (deleted by someone).
        assert!(e.jobs(vec![], "p", |_| false).is_empty());
    }

    #[test]
    fn a_created_job_the_watch_brought_back_is_believed_from_the_cache() {
        let e = Expectations::default();
        let with_uid = |uid: &str| {
            let mut j = job("a", "p");
            j.metadata.uid = Some(uid.into());
            j
        };
        e.created_job(with_uid("new"));
        e.watched_job(&with_uid("old"));
        assert_eq!(
            e.jobs(vec![], "p", |_| false).len(),
            1,
            "an older Job of that name"
        );
        // Created, then deleted before a reconcile saw it in the cache: gone at once.
        e.watched_job(&with_uid("new"));
        assert!(e.jobs(vec![], "p", |_| false).is_empty());
        assert_eq!(e.look_again("p", &[]), None);
    }

    #[test]
    fn a_plan_looks_again_when_its_first_write_not_shown_stops_counting() {
        let e = Expectations::default();
        let n = Arc::new(NodeInfo {
            name: "n".into(),
            ..Default::default()
        });
        let its_node = std::slice::from_ref(&n);
        assert_eq!(e.look_again("p", its_node), None, "nothing written");
        e.created_job(job("a", "p"));
        let first = e.look_again("p", &[]).expect("a Job not shown yet");
        assert!(first > PATIENCE - Duration::from_secs(1) && first <= LOOK_AGAIN);
        assert_eq!(e.look_again("other", its_node), None, "another Plan's Job");
        e.jobs(vec![Arc::new(job("a", "p"))], "p", |n| n == "a");
        assert_eq!(e.look_again("p", &[]), None, "shown");
        e.patched_node(&NodeChange::of("n").label("k", Some("v")), &n);
        assert!(e.look_again("p", its_node).is_some(), "a patch of its node");
        assert_eq!(e.look_again("p", &[]), None, "not its node");
    }

    #[test]
    fn a_patched_label_shows_until_the_cache_has_it() {
        let e = Expectations::default();
        let cached = NodeInfo {
            name: "n".into(),
            unschedulable: true,
            ..Default::default()
        };
        e.patched_node(
            &NodeChange::of("n").label("k", Some("v")).cordon(false),
            &cached,
        );
        let seen = e.node(&cached).expect("overlaid");
        assert_eq!(seen.labels["k"], "v");
        assert!(!seen.unschedulable);
        let mut caught_up = cached.clone();
        caught_up.labels.insert("k".into(), "v".into());
        caught_up.unschedulable = false;
        assert!(e.node(&caught_up).is_none());
        assert!(e.node(&cached).is_none());
    }

    #[test]
    fn a_cordon_made_after_the_patch_landed_is_not_hidden() {
        let e = Expectations::default();
        let before = NodeInfo {
            name: "n".into(),
            unschedulable: true,
            annotations: [(
                "slipway.dev/cordoned-by".to_string(),
                "plan/ns/p".to_string(),
            )]
            .into(),
            ..Default::default()
        };
        let uncordon = NodeChange::of("n")
            .annotation("slipway.dev/cordoned-by", None)
            .cordon(false);
        e.patched_node(&uncordon, &before);
        // The cache has not shown the patch yet: laid over.
        assert!(e.node(&before).is_some_and(|n| !n.unschedulable));
        // The patch landed (the record is gone), then an admin cordoned the node again: the
        // cache is believed.
        let admin = NodeInfo {
            annotations: Default::default(),
            ..before.clone()
        };
        assert!(e.node(&admin).is_none());
    }

    #[test]
    fn patches_of_deleted_nodes_are_pruned() {
        let e = Expectations::default();
        let patch = |name: String| {
            let node = NodeInfo {
                name: name.clone(),
                ..Default::default()
            };
            let change = NodeChange {
                node: name,
                unschedulable: Some(true),
                ..Default::default()
            };
            e.patched_node(&change, &node);
            node
        };
        let kept: Vec<NodeInfo> = (0..10).map(|i| patch(format!("kept-{i}"))).collect();
        let exists = |name: &str| name.starts_with("kept-");
        for i in 0..1000 {
            patch(format!("gone-{i}"));
            e.prune_nodes(exists);
        }
        let n = lock(&e.nodes).len();
        assert!(n < 64, "{n} kept");
        for node in &kept {
            assert!(e.node(node).is_some(), "still laid over the cache");
        }
    }
}
