//! The NodeOp controller's shell: gathers what [`core::decide`] reads (the nodes from the shared
//! index, the NodeOp's Jobs and pods read fresh in its namespace, the pods of the nodes it drains)
//! and performs the decision's effects. The runtime's one reconcile loop writes the status before
//! the effects that take a node, so a controller killed at any point finds every started node in
//! `status.nodeStatuses`, and the Job it was about to create under the same name.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

pub mod kind;
pub mod metrics;
pub mod upgrade;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::common::selector::Selector;
use crate::node::NodeInfo;
use crate::node::budget::Budget;
use crate::node::drain::PodsView;
use crate::node::holders::{Hold, Holder};
use crate::node::index::{Interest, NodeIndex};
use crate::node::prepull::PRE_PULL_LABEL;
use crate::node::shell::{delete_all, evict_all, pods_view};
use crate::nodeop::api::{FINALIZER, NodeOp, NodeOpStatus};
use crate::nodeop::core::objects::{
    NODE_LABEL, NODEOP_LABEL, PREFLIGHT_CONTAINER, PREFLIGHT_LABEL, REBOOT_POD_LABEL,
};
use crate::nodeop::core::{
    self as core, JobView, NodeOpDecision, NodeOpEffect, NodeOpInput, PreflightView,
};
use crate::runtime::metrics::Kind;
use crate::runtime::watch::{NodeTriggers, Triggered, changes, digest};
use crate::runtime::written::Written;
use crate::runtime::{
    Error, HoldSource, HolderObject, Operation, ReadyFuture, Shared, drive, ready,
};

/// The NodeOps of the cluster: a cache, and the changes that trigger their reconciles.
pub struct NodeOpWatches {
    store: Store<NodeOp>,
    /// A NodeOp's spec and deletion (not its status).
    changes: BoxStream<'static, Result<NodeOp, watcher::Error>>,
    /// The NodeOps a node change concerns (Ready, a boot ID, a cordon on a node they run on), and
    /// those another operation woke by letting go of a node they wait for.
    nodes: Triggered,
    client: Client,
}

impl NodeOpWatches {
    /// The nodes NodeOps hold by their own records, for the budget.
    pub fn holds(&self) -> Arc<dyn HoldSource> {
        hold_source(self.store.clone())
    }
}

/// The nodes the NodeOps of `store` hold by their own records.
pub fn hold_source(store: Store<NodeOp>) -> Arc<dyn HoldSource> {
    Arc::new(NodeOpHolds(store))
}

/// NodeOps as holders of nodes: those their `status.nodeStatuses` says are in progress.
struct NodeOpHolds(Store<NodeOp>);

impl HoldSource for NodeOpHolds {
    fn holds(&self, _nodes: &NodeIndex, now: Timestamp) -> Vec<Hold> {
        self.0
            .state()
            .iter()
            .flat_map(|op| core::holds(op, now))
            .collect()
    }

    fn exists(&self, holder: &Holder) -> Option<bool> {
        match holder {
            Holder::NodeOp { namespace, name } => Some(
                self.0
                    .get(&ObjectRef::new(name).within(namespace))
                    .is_some(),
            ),
            _ => None,
        }
    }
    fn ready(&self) -> (&'static str, ReadyFuture) {
        ("nodeop", ready(self.0.clone()))
    }

    fn object(&self, holder: &Holder) -> Option<HolderObject> {
        let Holder::NodeOp { namespace, name } = holder else {
            return None;
        };
        let op = self.0.get(&ObjectRef::new(name).within(namespace))?;
        Some(HolderObject::of(op.as_ref(), op.spec.disruption.as_ref()))
    }
}

/// Starts (lazily) the watch of every NodeOp.
pub fn watch(client: &Client, triggers: &NodeTriggers) -> NodeOpWatches {
    let (store, writer) = reflector::store();
    let events = watcher(
        Api::<NodeOp>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer);
    NodeOpWatches {
        store,
        changes: changes(events, nodeop_view).map(Ok).boxed(),
        nodes: triggers.concerned(|h| matches!(h, Holder::NodeOp { .. })),
        client: client.clone(),
    }
}

/// What triggers a NodeOp: its spec and deletion, not its status.
fn nodeop_view(op: &NodeOp) -> u64 {
    let m = &op.metadata;
    digest((&m.uid, m.generation, m.deletion_timestamp.is_some()))
}

/// Reconciles every NodeOp until `shutdown`. The NodeOps' Jobs and pods (labelled
/// `kairos.io/nodeop`, owned by their NodeOp) trigger their owner when they change.
pub async fn run(
    shared: Arc<Shared>,
    reboot_image: String,
    watches: NodeOpWatches,
    shutdown: CancellationToken,
) {
    let op = Arc::new(NodeOpOperation::new(
        shared,
        reboot_image,
        watches.store.clone(),
    ));
    let concerned = watches.nodes.filter_map(|h| async move {
        match h {
            Holder::NodeOp { namespace, name } => Some(ObjectRef::new(&name).within(&namespace)),
            _ => None,
        }
    });
    let labelled = watcher::Config::default().labels(NODEOP_LABEL);
    let controller = Controller::for_stream(watches.changes, watches.store)
        .owns(Api::<Job>::all(watches.client.clone()), labelled.clone())
        .owns(Api::<Pod>::all(watches.client.clone()), labelled)
        .reconcile_on(concerned);
    drive(op, controller, 0, shutdown).await;
}

/// The NodeOp controller.
pub struct NodeOpOperation {
    shared: Arc<Shared>,
    /// The image of reboot pods.
    reboot_image: String,
    nodeops: Store<NodeOp>,
    written: Written<NodeOp>,
    metrics: Arc<metrics::NodeOpMetrics>,
}

impl NodeOpOperation {
    pub fn new(shared: Arc<Shared>, reboot_image: String, nodeops: Store<NodeOp>) -> Self {
        NodeOpOperation {
            metrics: shared.metrics().families(),
            shared,
            reboot_image,
            nodeops,
            written: Written::default(),
        }
    }
}

/// What a NodeOp's decision reads besides the NodeOp.
pub struct Observed {
    nodes: Vec<Arc<NodeInfo>>,
    jobs: BTreeMap<String, JobView>,
    preflights: BTreeMap<String, PreflightView>,
    reboot_pods: BTreeSet<String>,
    drains: BTreeMap<String, PodsView>,
    /// The pull pods of `spec.disruption.prePull`.
    pull_pods: Vec<Pod>,
}

impl Operation for NodeOpOperation {
    type Object = NodeOp;
    type Status = NodeOpStatus;
    type Effect = NodeOpEffect;
    type Report = ();
    type Observed = Observed;

    const KIND: Kind = Kind("nodeop");
    const FINALIZER: &'static str = FINALIZER;

    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn size(&self, observed: &Observed) -> usize {
        observed.nodes.len()
    }

    fn written(&self) -> &Written<NodeOp> {
        &self.written
    }

    fn holder(&self, op: &NodeOp) -> Holder {
        core::holder(op)
    }

    async fn prepare(&self, op: Arc<NodeOp>) -> Result<Arc<NodeOp>, Error> {
        let nodeops = &self.nodeops;
        (self.metrics).retain_nodeops(|ns, n| nodeops.get(&ObjectRef::new(n).within(ns)).is_some());
        self.shared.forget_gone();
        Ok(op)
    }

    async fn observe(&self, op: &NodeOp, now: Timestamp) -> Result<Observed, Error> {
        let nodes = self.nodes(op, now);
        let client = self.shared.chores().client();
        let ns = op.namespace().unwrap_or_default();
        let uid = op.uid().unwrap_or_default();
        let mine = ListParams::default().labels(&format!("{NODEOP_LABEL}={}", op.name_any()));
        let owned = |refs: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference]| {
            refs.iter().any(|o| o.uid == uid)
        };
        let jobs = Api::<Job>::namespaced(client.clone(), &ns)
            .list(&mine)
            .await?
            .items
            .into_iter()
            .filter(|j| owned(j.owner_references()))
            .map(|j| (j.name_any(), job_view(&j)))
            .collect::<BTreeMap<_, _>>();
        let pods: Vec<Pod> = Api::<Pod>::namespaced(client.clone(), &ns)
            .list(&mine)
            .await?
            .items
            .into_iter()
            .filter(|p| owned(p.owner_references()) && p.metadata.deletion_timestamp.is_none())
            .collect();
        let pull_pods = (pods.iter())
            .filter(|p| p.labels().contains_key(PRE_PULL_LABEL))
            .cloned()
            .collect();
        let node_of = |p: &Pod| p.labels().get(NODE_LABEL).cloned();
        let preflights = pods
            .iter()
            .filter(|p| p.labels().contains_key(PREFLIGHT_LABEL))
            .filter_map(|p| Some((node_of(p)?, preflight_view(p))))
            .collect();
        let reboot_pods = pods
            .iter()
            .filter(|p| p.labels().contains_key(REBOOT_POD_LABEL))
            .filter_map(node_of)
            .collect();
        let mut drains = BTreeMap::new();
        if let Ok(Some(drain)) = core::settings(&op.spec).map(|s| s.drain) {
            for node in core::to_drain(op, &jobs, now) {
                let view = pods_view(
                    client,
                    &node,
                    &drain.options,
                    drain.volumes,
                    crate::runtime::clock::now(),
                )
                .await?;
                drains.insert(node, view);
            }
        }
        Ok(Observed {
            nodes,
            jobs,
            preflights,
            reboot_pods,
            drains,
            pull_pods,
        })
    }

    fn decide(&self, op: &NodeOp, o: &Observed, budget: &Budget, now: Timestamp) -> NodeOpDecision {
        let nodes: Vec<&NodeInfo> = o.nodes.iter().map(AsRef::as_ref).collect();
        let pull_pods: Vec<&Pod> = o.pull_pods.iter().collect();
        core::decide(
            &NodeOpInput {
                pull_pods: &pull_pods,
                op,
                nodes: &nodes,
                jobs: &o.jobs,
                preflights: &o.preflights,
                reboot_pods: &o.reboot_pods,
                drains: &o.drains,
                reboot_image: &self.reboot_image,
                budget,
            },
            now,
        )
    }

    async fn perform(
        &self,
        op: &NodeOp,
        _o: &Observed,
        effect: &NodeOpEffect,
    ) -> Result<(), Error> {
        let name = op.name_any();
        let ns = op.namespace().unwrap_or_default();
        let chores = self.shared.chores();
        match effect {
            NodeOpEffect::Uncordon(change) | NodeOpEffect::Cordon(change) => {
                info!(nodeop = %name, node = %change.node, ?change, "patching node");
                self.shared.patch_node(change).await?;
            }
            NodeOpEffect::DeletePods {
                pods,
                grace_period_seconds,
                ..
            } => delete_all(chores.client(), pods, *grace_period_seconds).await?,
            NodeOpEffect::Evict {
                pods,
                grace_period_seconds,
                ..
            } => {
                evict_all(
                    chores.client(),
                    chores.eviction_client(),
                    pods,
                    *grace_period_seconds,
                )
                .await;
            }
            NodeOpEffect::CreatePod(pod) => {
                if chores.create(pod.as_ref()).await?.is_some() {
                    info!(nodeop = %name, pod = %pod.name_any(), "created pod");
                }
            }
            NodeOpEffect::CreateJob(job) => {
                if chores.create(job.as_ref()).await?.is_some() {
                    chores.metrics().job_created();
                    info!(nodeop = %name, job = %job.name_any(), "created Job");
                }
            }
            NodeOpEffect::DeletePod(pod) | NodeOpEffect::CallOffReboot(pod) => {
                let now = DeleteParams {
                    grace_period_seconds: Some(0),
                    ..Default::default()
                };
                chores.delete::<Pod>(Some(&ns), pod, &now).await?;
            }
        }
        Ok(())
    }

    fn applied(&self, op: &NodeOp, _report: &()) {
        let phases = core::phases(op.status.as_ref());
        let ns = op.namespace().unwrap_or_default();
        self.metrics.nodeop_phases(&ns, &op.name_any(), &phases);
    }

    fn forget(&self, op: &NodeOp) {
        let (ns, name) = (op.namespace().unwrap_or_default(), op.name_any());
        (self.metrics).retain_nodeops(|n, o| (n, o) != (ns.as_str(), name.as_str()));
    }
}

impl NodeOpOperation {
    /// Every node the NodeOp selects, and those it started that it no longer selects.
    fn nodes(&self, op: &NodeOp, now: Timestamp) -> Vec<Arc<NodeInfo>> {
        let me = core::holder(op);
        let selector = core::settings(&op.spec).map_or(Selector::Nothing, |s| s.selector);
        let mut index = self.shared.nodes_mut();
        let selected = index.candidates(
            &me,
            op.metadata.uid.as_deref().unwrap_or_default(),
            op.metadata.generation,
            || Interest {
                selector,
                label: None,
                conditions: false,
            },
        );
        let started: BTreeSet<String> = core::states(op, now).into_keys().collect();
        let seen: BTreeSet<String> = selected.iter().map(|n| n.name.clone()).collect();
        let mut nodes = selected;
        nodes.extend(started.difference(&seen).filter_map(|n| index.get(n)));
        // A started node that leaves the selector is still this NodeOp's to finish.
        index.follow(&me, started);
        nodes
    }
}

/// A Job as the decision sees it: the Job controller's terminal conditions (kairos-operator's
/// reading: `Failed` or `FailureTarget` failed, `Complete` or `SuccessCriteriaMet` succeeded).
pub fn job_view(job: &Job) -> JobView {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref());
    for c in conditions
        .into_iter()
        .flatten()
        .filter(|c| c.status == "True")
    {
        match c.type_.as_str() {
            "Failed" | "FailureTarget" => {
                return JobView::Failed(c.reason.clone().unwrap_or_default());
            }
            "Complete" | "SuccessCriteriaMet" => return JobView::Succeeded,
            _ => {}
        }
    }
    JobView::Running
}

/// A preflight pod as the decision sees it: its phase and its container's termination message.
pub fn preflight_view(pod: &Pod) -> PreflightView {
    let status = pod.status.as_ref();
    let container = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.name == PREFLIGHT_CONTAINER);
    let terminated = container
        .and_then(|c| c.state.as_ref())
        .and_then(|s| s.terminated.as_ref());
    match status.and_then(|s| s.phase.as_deref()) {
        Some("Succeeded") => match terminated.and_then(|t| t.message.as_deref()).map(str::trim) {
            Some(message) if !message.is_empty() => PreflightView::Skip(message.to_string()),
            _ => PreflightView::Proceed,
        },
        Some("Failed") => {
            let reason = terminated
                .map(|t| {
                    t.reason
                        .clone()
                        .unwrap_or_else(|| format!("exit {}", t.exit_code))
                })
                .or_else(|| status.and_then(|s| s.reason.clone()))
                .unwrap_or_else(|| "container did not report a terminated state".into());
            PreflightView::Failed(reason)
        }
        _ => PreflightView::Running,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };

    fn job(conditions: &[(&str, &str)]) -> Job {
        Job {
            status: Some(JobStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|(t, s)| JobCondition {
                            type_: t.to_string(),
                            status: s.to_string(),
                            reason: Some("BackoffLimitExceeded".into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_job_is_read_by_its_terminal_conditions() {
        assert_eq!(job_view(&job(&[])), JobView::Running);
        assert_eq!(job_view(&job(&[("Complete", "True")])), JobView::Succeeded);
        assert_eq!(
            job_view(&job(&[("SuccessCriteriaMet", "True")])),
            JobView::Succeeded
        );
        assert_eq!(job_view(&job(&[("Complete", "False")])), JobView::Running);
        assert_eq!(
            job_view(&job(&[("FailureTarget", "True")])),
            JobView::Failed("BackoffLimitExceeded".into())
        );
    }

    fn pod(phase: &str, message: Option<&str>, reason: Option<&str>) -> Pod {
        Pod {
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: PREFLIGHT_CONTAINER.into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            message: message.map(str::to_string),
                            reason: reason.map(str::to_string),
                            exit_code: 3,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_preflight_pod_says_skip_proceed_or_failed() {
        assert_eq!(
            preflight_view(&pod("Succeeded", Some("already at v3\n"), None)),
            PreflightView::Skip("already at v3".into())
        );
        assert_eq!(
            preflight_view(&pod("Succeeded", None, None)),
            PreflightView::Proceed
        );
        assert_eq!(
            preflight_view(&pod("Succeeded", Some(" "), None)),
            PreflightView::Proceed
        );
        assert_eq!(
            preflight_view(&pod("Failed", None, Some("Error"))),
            PreflightView::Failed("Error".into())
        );
        assert_eq!(
            preflight_view(&pod("Failed", None, None)),
            PreflightView::Failed("exit 3".into())
        );
        assert_eq!(
            preflight_view(&pod("Running", None, None)),
            PreflightView::Running
        );
    }

    #[tokio::test]
    async fn deleted_nodeops_leave_nothing_behind() {
        use crate::common::phase::PhaseTally;
        use crate::runtime::testing;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        // Deleted before their finalizer was added.
        let named = |i: usize| {
            let mut op = NodeOp::new(&format!("op-{i}"), Default::default());
            op.metadata.namespace = Some("ops".into());
            op.metadata.uid = Some(format!("uid-{i}"));
            op.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
            op
        };
        let nodeops: Vec<NodeOp> = (0..100).map(named).collect();
        let api = testing::ApiServer::new();
        let store = testing::listed(nodeops.clone());
        let holds = vec![hold_source(store.clone())];
        let shared = testing::shared_with(&api.client(), vec![], holds);
        let operation = NodeOpOperation::new(shared, "busybox".into(), store);
        let running = PhaseTally {
            phase: "Running",
            nodes: 1,
            oldest_since: Some(Timestamp::now()),
        };
        for op in &nodeops {
            let ns = op.namespace().unwrap_or_default();
            operation.nodes(op, Timestamp::now());
            (operation.metrics).nodeop_phases(&ns, &op.name_any(), std::slice::from_ref(&running));
        }
        let kept = |o: &NodeOpOperation| {
            let series = (o.shared.metrics().render().lines())
                .filter(|l| l.contains("nodeop=\"op-"))
                .count();
            (o.shared.nodes().readers().count(), series > 0)
        };
        assert_eq!(kept(&operation), (100, true));
        for op in &nodeops {
            let done = testing::reconcile(&operation, op.clone()).await;
            assert_eq!(done, Ok(()));
        }
        assert_eq!(kept(&operation), (0, false));
    }
}
