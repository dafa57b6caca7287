//! The watches of the Plan controller: Plans, Jobs, Secrets and reboot pods in its namespace (Jobs
//! and pods of this controller only), each reduced to the changes a decision reads, and the node
//! changes that concern a Plan.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tracing::{info, warn};

use crate::node::holders::{Hold, Holder};
use crate::node::index::NodeIndex;
use crate::plan::api::{Plan, labels};
use crate::plan::core::job_index::JobIndex;
use crate::plan::shell::lean_job::LeanJob;
use crate::plan::shell::lean_plan::LeanPlan;
use crate::runtime::watch::{NodeTriggers, Triggered, changes, digest};
use crate::runtime::{HoldSource, HolderObject, ReadyFuture, ready};

type Changes<K> = BoxStream<'static, Result<K, watcher::Error>>;

/// What the Plan controller watches: the caches, and the changes that trigger reconciles. Nothing
/// runs until the streams are polled.
pub struct PlanWatches {
    pub(super) plans: Store<Plan>,
    pub(super) jobs: JobCache,
    pub(super) secrets: Store<Secret>,
    pub(super) reboot_pods: Store<Pod>,
    pub(super) plan_changes: Changes<Plan>,
    pub(super) job_changes: Changes<Job>,
    pub(super) secret_changes: Changes<Secret>,
    pub(super) pod_changes: Changes<Pod>,
    /// The objects node changes concern (the Plans among them).
    pub(super) nodes: Triggered,
    /// What the installed Plan CRD drops, kept up to date by `crd_changes`.
    pub(super) pruned: Pruned,
    /// A unit each time that changes: every Plan then says so.
    pub(super) crd_changes: BoxStream<'static, ()>,
}

/// What the installed Plan CRD drops of slipway's fields (`common::pruning`); `None` until the
/// CRD is read, or while it cannot be.
#[derive(Clone, Default)]
pub struct Pruned(Arc<RwLock<Option<Arc<[String]>>>>);

impl Pruned {
    pub fn get(&self) -> Option<Arc<[String]>> {
        self.0
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether it changed.
    fn set(&self, value: Option<Arc<[String]>>) -> bool {
        let mut now = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let changed = *now != value;
        *now = value;
        changed
    }
}

/// Watches the Plan CRD (its name only: the rights to it are by name) and keeps `pruned`: the
/// stream gives a unit each time that changes. A watch refused (the rights dropped, as with
/// `--install-crd=false` one may) leaves it unknown and says so once.
fn crd_changes(client: &Client, pruned: Pruned) -> BoxStream<'static, ()> {
    let ours = crate::plan::api::crd::plan_crd();
    let config = watcher::Config::default().fields(&format!("metadata.name={}", ours.name_any()));
    let mut refused = false;
    watcher(Api::<CustomResourceDefinition>::all(client.clone()), config)
        .default_backoff()
        .filter_map(move |event| {
            let value = match event {
                Ok(watcher::Event::Apply(crd) | watcher::Event::InitApply(crd)) => {
                    let lost = crate::common::pruning::pruned(&ours, &crd, "v1");
                    if !lost.is_empty() {
                        info!(dropped = ?lost, "the installed Plan CRD is not slipway's");
                    }
                    Some(Some(Arc::from(lost)))
                }
                Ok(watcher::Event::Delete(_)) => Some(None),
                Ok(_) => None,
                Err(e) => {
                    if !refused {
                        warn!("cannot watch the Plan CRD, so Plans cannot say what it drops: {e}");
                    }
                    refused = true;
                    Some(None)
                }
            };
            let changed = value.is_some_and(|v| pruned.set(v));
            std::future::ready(changed.then_some(()))
        })
        .boxed()
}

impl PlanWatches {
    /// The nodes Plans hold by their own records, for the budget.
    pub fn holds(&self) -> Arc<dyn HoldSource> {
        hold_source(self.plans.clone())
    }

    /// The caches the process must have listed before it is ready.
    pub fn ready(&self) -> Vec<(&'static str, ReadyFuture)> {
        vec![
            ("plan", ready(self.plans.clone())),
            ("job", ready(self.jobs.store.clone())),
            ("secret", ready(self.secrets.clone())),
            ("reboot pod", ready(self.reboot_pods.clone())),
        ]
    }

    /// The Plans node changes concern.
    pub(super) fn node_triggers(
        nodes: Triggered,
    ) -> impl futures::Stream<Item = ObjectRef<Plan>> + Send + 'static {
        nodes.filter_map(|h| async move {
            match h {
                Holder::Plan { namespace, name } => Some(ObjectRef::new(&name).within(&namespace)),
                _ => None,
            }
        })
    }
}

/// The nodes the Plans of `store` hold by their own records.
pub fn hold_source(store: Store<Plan>) -> Arc<dyn HoldSource> {
    Arc::new(PlanHolds(store))
}

/// Plans as holders of nodes: what their `status.applying` says.
struct PlanHolds(Store<Plan>);

impl HoldSource for PlanHolds {
    fn holds(&self, nodes: &NodeIndex, _now: Timestamp) -> Vec<Hold> {
        crate::plan::core::holds(&self.0.state(), nodes)
    }

    fn exists(&self, holder: &Holder) -> Option<bool> {
        match holder {
            Holder::Plan { namespace, name } => Some(
                self.0
                    .get(&ObjectRef::new(name).within(namespace))
                    .is_some(),
            ),
            _ => None,
        }
    }
    fn ready(&self) -> (&'static str, ReadyFuture) {
        ("plan", ready(self.0.clone()))
    }

    fn object(&self, holder: &Holder) -> Option<HolderObject> {
        let Holder::Plan { namespace, name } = holder else {
            return None;
        };
        let plan = self.0.get(&ObjectRef::new(name).within(namespace))?;
        Some(HolderObject::of(
            plan.as_ref(),
            plan.spec.disruption.as_ref(),
        ))
    }
}

/// The Job cache and its index by Plan ([`JobIndex`]), both kept by the Job watch.
#[derive(Clone)]
pub struct JobCache {
    pub(super) store: Store<Job>,
    index: Arc<Mutex<JobIndex>>,
}

impl JobCache {
    /// A cache of `jobs`, listed once (`slipway explain`).
    pub fn listed(jobs: Vec<Job>) -> JobCache {
        let index = JobIndex::listed(&jobs);
        JobCache {
            store: crate::runtime::listed(jobs),
            index: Arc::new(Mutex::new(index)),
        }
    }

    pub(super) fn index(&self) -> std::sync::MutexGuard<'_, JobIndex> {
        self.index.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The cached Jobs of these names, in the controller's namespace.
    pub(super) fn get(&self, names: Vec<Arc<str>>, namespace: &str) -> Vec<Arc<Job>> {
        (names.iter())
            .filter_map(|n| self.store.get(&ObjectRef::new(n).within(namespace)))
            .collect()
    }

    /// Files what the watch brought (once the store has it) in the index.
    fn file(&self, event: &watcher::Event<Job>) {
        let mut index = self.index();
        match event {
            watcher::Event::Apply(j) => index.applied(j),
            watcher::Event::Delete(j) => index.deleted(j),
            watcher::Event::Init => index.relist_start(),
            watcher::Event::InitApply(j) => index.relisted(j),
            watcher::Event::InitDone => index.relist_done(),
        }
    }
}

/// Starts (lazily) the watches of the Plan controller.
pub fn watch(
    client: &Client,
    namespace: &str,
    controller_name: &str,
    triggers: &NodeTriggers,
) -> PlanWatches {
    let ns = namespace;
    let mine = format!("{}={}", labels::CONTROLLER, controller_name);
    let (job_store, job_writer) = reflector::store();
    let jobs = JobCache {
        store: job_store,
        index: Arc::default(),
    };
    let filing = jobs.clone();
    // Decoded without what the cache would drop (`prune_job`), not decoded whole and pruned.
    let job_events = watcher(
        Api::<LeanJob>::namespaced(client.clone(), ns),
        watcher::Config::default().labels(&mine),
    )
    .default_backoff()
    .map_ok(LeanJob::into_event)
    .reflect(job_writer)
    .inspect_ok(move |event| filing.file(event));
    let (secrets, secret_writer) = reflector::store();
    let secret_changes = watcher(
        Api::<Secret>::namespaced(client.clone(), ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(secret_writer)
    .touched_objects()
    .boxed();
    let (reboot_pods, pod_writer) = reflector::store();
    let pod_events = watcher(
        Api::<Pod>::namespaced(client.clone(), ns),
        watcher::Config::default().labels(&format!(
            "{mine},{}=true",
            crate::node::reboot::REBOOT_LABEL
        )),
    )
    .default_backoff()
    .modify(prune_pod)
    .reflect(pod_writer);
    // A Plan's own status writes (all made here) trigger nothing; the rest of the Plan does.
    let pruned = Pruned::default();
    let (plans, plan_writer) = reflector::store();
    let plan_events = watcher(
        Api::<LeanPlan>::namespaced(client.clone(), ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .map_ok(LeanPlan::into_event)
    .reflect(plan_writer);
    PlanWatches {
        plans,
        jobs,
        secrets,
        reboot_pods,
        plan_changes: changes(plan_events, plan_view).map(Ok).boxed(),
        job_changes: changes(job_events, job_view).map(Ok).boxed(),
        secret_changes,
        pod_changes: changes(pod_events, pod_view).map(Ok).boxed(),
        nodes: triggers.concerned(Holder::is_plan),
        pruned: pruned.clone(),
        crd_changes: crd_changes(client, pruned),
    }
}

/// What a decision reads of a Plan, besides its status (which only slipway writes); its
/// finalizers too, so that a Plan is decided on once slipway's finalizer is on it.
pub(crate) fn plan_view(p: &Plan) -> u64 {
    let m = &p.metadata;
    digest((
        &m.uid,
        m.generation,
        &m.labels,
        &m.annotations,
        &m.finalizers,
        m.deletion_timestamp.is_some(),
    ))
}

/// What a decision reads of a Job: its labels and annotations, whether it is being deleted, and
/// how it finished. Pod counts going up and down change nothing.
pub(crate) fn job_view(j: &Job) -> u64 {
    let finished: Vec<(&str, &str)> = j
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter(|c| c.type_ == "Complete" || c.type_ == "Failed")
        .map(|c| (c.type_.as_str(), c.status.as_str()))
        .collect();
    let m = &j.metadata;
    digest((
        &m.uid,
        &m.labels,
        &m.annotations,
        m.deletion_timestamp.is_some(),
        finished,
    ))
}

/// What a decision reads of a reboot pod: that it exists, and whether it is being deleted.
pub(crate) fn pod_view(p: &Pod) -> u64 {
    digest((&p.metadata.uid, p.metadata.deletion_timestamp.is_some()))
}

/// What decisions read of a Job: the pod template is rendered by slipway and compared by its hash
/// annotation, so the cache need not hold it. The watch decodes Jobs this way at once
/// ([`LeanJob`]); its tests hold it to this.
#[cfg(test)]
pub(crate) fn prune_job(job: &mut Job) {
    job.metadata.managed_fields = None;
    if let Some(spec) = job.spec.as_mut() {
        spec.template = Default::default();
        spec.selector = None;
    }
    if let Some(status) = job.status.as_mut() {
        status.uncounted_terminated_pods = None;
    }
}

/// Keeps what decisions read of a reboot pod: its metadata.
pub(crate) fn prune_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    pod.spec = None;
    pod.status = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_looked_at_again_when_its_finalizers_or_spec_change_not_its_status() {
        let plan: Plan = serde_json::from_value(serde_json::json!({
            "apiVersion": "upgrade.cattle.io/v1",
            "kind": "Plan",
            "metadata": {"name": "k3s", "uid": "u1", "generation": 1},
            "spec": {"concurrency": 1, "upgrade": {"image": "rancher/k3s-upgrade"}},
        }))
        .expect("a Plan");
        let mut finalized = plan.clone();
        finalized.metadata.finalizers = Some(vec!["slipway.dev/plan-cleanup".into()]);
        assert_ne!(plan_view(&plan), plan_view(&finalized));
        let mut edited = plan.clone();
        edited.metadata.generation = Some(2);
        assert_ne!(plan_view(&plan), plan_view(&edited));
        let mut with_status = plan.clone();
        with_status.status = Some(Default::default());
        with_status.metadata.resource_version = Some("42".into());
        assert_eq!(plan_view(&plan), plan_view(&with_status));
    }

    #[test]
    fn a_plan_holder_gives_its_disruption_spec_and_where_its_events_go() {
        let plan: Plan = serde_json::from_value(serde_json::json!({
            "apiVersion": "upgrade.cattle.io/v1",
            "kind": "Plan",
            "metadata": {"name": "k3s", "namespace": "system-upgrade", "uid": "u1"},
            "spec": {"concurrency": 1, "upgrade": {"image": "rancher/k3s-upgrade"},
                     "disruption": {"silence": {"matchers": [{"name": "node", "value": "$(NODE_NAME)"}]}}},
        }))
        .expect("a Plan");
        let (store, mut writer) = reflector::store();
        writer.apply_watcher_event(&watcher::Event::Apply(plan));
        let source = hold_source(store);
        let holder = |name: &str| Holder::Plan {
            namespace: "system-upgrade".into(),
            name: name.into(),
        };
        let object = source.object(&holder("k3s")).expect("the Plan");
        let silence = object
            .disruption
            .and_then(|d| d.silence)
            .expect("its silence");
        assert_eq!(silence.matchers[0].value, "$(NODE_NAME)");
        assert_eq!(object.reference.name.as_deref(), Some("k3s"));
        assert_eq!(object.reference.kind.as_deref(), Some("Plan"));
        assert_eq!(source.object(&holder("gone")), None);
        let other = Holder::Reboot {
            policy: "k3s".into(),
        };
        assert_eq!(source.object(&other), None);
    }
}
