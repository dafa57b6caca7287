//! The watches that feed reconciles, each reduced to the changes a decision reads.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, RwLock};

use futures::channel::mpsc::UnboundedSender;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, future};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tracing::warn;

use super::Settings;
use crate::node::NodeInfo;
use crate::node::index::NodeIndex;
use crate::plan::api::{Plan, labels};

/// What the watches keep.
pub(crate) struct Caches {
    pub plans: Store<Plan>,
    pub nodes: Arc<RwLock<NodeIndex>>,
    pub jobs: Store<Job>,
    pub secrets: Store<Secret>,
    pub reboot_pods: Store<Pod>,
}

type Changes<K> = BoxStream<'static, Result<K, watcher::Error>>;

/// What the watches trigger.
pub(crate) struct Streams {
    pub plans: Changes<Plan>,
    pub node_triggers: BoxStream<'static, ObjectRef<Plan>>,
    pub jobs: Changes<Job>,
    pub secrets: Changes<Secret>,
    pub reboot_pods: Changes<Pod>,
}

/// The watches of the controller: Plans, Jobs, Secrets and reboot pods in its namespace (Jobs
/// and pods of this controller only), and Nodes cluster-wide into the node index. Nothing runs
/// until the streams are polled.
pub(super) fn start(
    client: &Client,
    settings: &Settings,
    kept: &'static [&'static str],
    node_changed: UnboundedSender<()>,
) -> (Caches, Streams) {
    let ns = &settings.namespace;
    let mine = format!("{}={}", labels::CONTROLLER, settings.name);
    let nodes = Arc::new(RwLock::new(NodeIndex::new()));
    let node_triggers = node_triggers(
        watcher(Api::<Node>::all(client.clone()), watcher::Config::default()).default_backoff(),
        nodes.clone(),
        kept,
        node_changed,
    );
    let (jobs, job_writer) = reflector::store();
    let job_events = watcher(
        Api::<Job>::namespaced(client.clone(), ns),
        watcher::Config::default().labels(&mine),
    )
    .default_backoff()
    .modify(prune_job)
    .reflect(job_writer);
    let (secrets, secret_writer) = reflector::store();
    let secret_stream = watcher(
        Api::<Secret>::namespaced(client.clone(), ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(secret_writer)
    .touched_objects();
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
    let (plans, plan_writer) = reflector::store();
    let plan_events = watcher(
        Api::<Plan>::namespaced(client.clone(), ns),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(plan_writer);
    let caches = Caches {
        plans,
        nodes,
        jobs,
        secrets,
        reboot_pods,
    };
    let streams = Streams {
        plans: changes(plan_events, plan_view).map(Ok).boxed(),
        node_triggers: node_triggers.boxed(),
        jobs: changes(job_events, job_view).map(Ok).boxed(),
        secrets: secret_stream.boxed(),
        reboot_pods: changes(pod_events, pod_view).map(Ok).boxed(),
    };
    (caches, streams)
}

/// The one Node watch of the process: keeps the index and yields the Plans a change concerns;
/// `node_changed` hears of every change of a node's pruned view (the RebootPolicies read them all).
pub(super) fn node_triggers(
    events: impl Stream<Item = Result<watcher::Event<Node>, watcher::Error>> + Send + 'static,
    index: Arc<RwLock<NodeIndex>>,
    kept_annotations: &'static [&'static str],
    node_changed: UnboundedSender<()>,
) -> impl Stream<Item = ObjectRef<Plan>> + Send + 'static {
    events
        .filter_map(move |event| {
            let concerned = match event {
                Ok(event) => {
                    let mut index = index.write().unwrap_or_else(|e| e.into_inner());
                    // Nobody listening (no RebootPolicies) is fine.
                    let changed = || {
                        let _ = node_changed.unbounded_send(());
                    };
                    match event {
                        watcher::Event::Apply(n) => {
                            let info = NodeInfo::from_node_keeping(&n, kept_annotations);
                            if index.get(&info.name).as_deref() != Some(&info) {
                                changed();
                            }
                            index.apply(info)
                        }
                        watcher::Event::Delete(n) => {
                            changed();
                            index.delete(n.metadata.name.as_deref().unwrap_or_default())
                        }
                        watcher::Event::Init => {
                            index.relist_start();
                            Vec::new()
                        }
                        watcher::Event::InitApply(n) => {
                            index.relisted(NodeInfo::from_node_keeping(&n, kept_annotations));
                            Vec::new()
                        }
                        watcher::Event::InitDone => {
                            changed();
                            index.relist_done()
                        }
                    }
                }
                Err(e) => {
                    warn!("node watch: {e}");
                    Vec::new()
                }
            };
            let refs: Vec<ObjectRef<Plan>> = concerned
                .into_iter()
                .map(|k| ObjectRef::new(&k.name).within(&k.namespace))
                .collect();
            future::ready((!refs.is_empty()).then(|| futures::stream::iter(refs)))
        })
        .flatten()
}

/// Passes on an object only when `view` changed since it was last seen (or it was deleted).
pub(super) fn changes<K>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    view: fn(&K) -> u64,
) -> impl Stream<Item = K> + Send + 'static
where
    K: Resource + Send + 'static,
{
    let mut seen: HashMap<(Option<String>, Option<String>), u64> = HashMap::new();
    events.filter_map(move |event| {
        let key = |o: &K| (o.meta().namespace.clone(), o.meta().name.clone());
        let out = match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                let v = view(&o);
                (seen.insert(key(&o), v) != Some(v)).then_some(o)
            }
            Ok(watcher::Event::Delete(o)) => {
                seen.remove(&key(&o));
                Some(o)
            }
            Ok(watcher::Event::Init | watcher::Event::InitDone) => None,
            Err(e) => {
                warn!("watch: {e}");
                None
            }
        };
        future::ready(out)
    })
}

fn digest(parts: impl Hash) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

/// What a decision reads of a Plan, besides its status (which only slipway writes); its
/// finalizers too, so that a Plan is decided on once slipway's finalizer is on it.
pub(super) fn plan_view(p: &Plan) -> u64 {
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
pub(super) fn job_view(j: &Job) -> u64 {
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
pub(super) fn pod_view(p: &Pod) -> u64 {
    digest((&p.metadata.uid, p.metadata.deletion_timestamp.is_some()))
}

/// Keeps what decisions read of a Job: the pod template is rendered by slipway and compared by
/// its hash annotation, so the cache need not hold it.
pub(super) fn prune_job(job: &mut Job) {
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
pub(super) fn prune_pod(pod: &mut Pod) {
    pod.metadata.managed_fields = None;
    pod.spec = None;
    pod.status = None;
}

/// The NodeMaintenances of the cluster: a cache and the changes that trigger their reconciles.
pub(super) fn maintenances(
    client: &Client,
) -> (
    Store<crate::maintenance::api::NodeMaintenance>,
    Changes<crate::maintenance::api::NodeMaintenance>,
) {
    let (store, writer) = reflector::store();
    let changes = watcher(
        Api::<crate::maintenance::api::NodeMaintenance>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .touched_objects()
    .boxed();
    (store, changes)
}

/// The RebootPolicies of the cluster: a cache and the changes that trigger their reconciles
/// (their own status writes included: a reconcile that finds nothing to change writes nothing).
pub(super) fn reboot_policies(
    client: &Client,
) -> (
    Store<crate::reboot_policy::api::RebootPolicy>,
    Changes<crate::reboot_policy::api::RebootPolicy>,
) {
    let (store, writer) = reflector::store();
    let events = watcher(
        Api::<crate::reboot_policy::api::RebootPolicy>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer);
    (store, changes(events, policy_view).map(Ok).boxed())
}

/// What triggers a RebootPolicy: its spec and deletion, not its status.
pub(super) fn policy_view(p: &crate::reboot_policy::api::RebootPolicy) -> u64 {
    let m = &p.metadata;
    digest((&m.uid, m.generation, m.deletion_timestamp.is_some()))
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
}
