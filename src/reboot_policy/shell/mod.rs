//! The RebootPolicy controller's shell: gathers what [`core::decide`] reads (the nodes from the
//! shared index, the pods that block or are drained, the health gate, Prometheus) and performs
//! the decision's effects per node. The runtime's one reconcile loop writes the status before the
//! effects that take a node, so a controller killed at any point finds every started node in
//! `status.nodes`.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

pub mod alerts;
pub mod kind;
pub mod metrics;
mod watch;

pub use watch::{PolicyWatches, hold_source, watch};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::common::check::CheckRead;
use crate::node::NodeInfo;
use crate::node::budget::Budget;
use crate::node::change::NodeChange;
use crate::node::drain::PodsView;
use crate::node::holders::Holder;
use crate::node::reboot::HealthObservation;
use crate::node::shell::{delete_all, evict_all, gate_pods, pods_view};
use crate::reboot_policy::api::{RebootPolicy, RebootPolicyStatus};
use crate::reboot_policy::core::kured::{KuredLock, KuredView};
use crate::reboot_policy::core::pod::{
    PolicyPod, policy_reboot_pod_name, render_policy_reboot_pod,
};
use crate::reboot_policy::core::{
    self as core, DrainView, NodeView, PolicyInput, PolicyReport, PolicySpec, REBOOT_OK,
    RebootDecision, RebootEffect, RebootState, Signal,
};
use crate::runtime::checks::CheckReader;
use crate::runtime::metrics::Kind;
use crate::runtime::written::Written;
use crate::runtime::{Error, Operation, Shared, drive};

impl PolicyOperation {
    /// The RebootPolicy controller over the policies and reboot pods of these caches.
    pub fn new(
        shared: Arc<Shared>,
        default_image: String,
        kured: Option<KuredLock>,
        policies: Store<RebootPolicy>,
        pods: Store<Pod>,
    ) -> PolicyOperation {
        let checks = shared.check_reader();
        let metrics = shared.metrics().families();
        PolicyOperation {
            shared,
            policies,
            default_image,
            http: alerts::client(),
            checks,
            pods,
            kured,
            kured_unreadable: AtomicBool::new(false),
            written: Written::default(),
            metrics,
        }
    }
}

/// Reconciles every RebootPolicy until `shutdown`.
pub async fn run(
    shared: Arc<Shared>,
    default_image: String,
    kured: Option<KuredLock>,
    watches: PolicyWatches,
    shutdown: CancellationToken,
) {
    let op = Arc::new(PolicyOperation::new(
        shared,
        default_image,
        kured,
        watches.store.clone(),
        watches.pods,
    ));
    let concerned = watches.nodes.filter_map(|h| async move {
        match h {
            Holder::Reboot { policy } => Some(ObjectRef::new(&policy)),
            _ => None,
        }
    });
    let controller = Controller::for_stream(watches.changes, watches.store).reconcile_on(concerned);
    // The pod cache only saves asking twice: a reboot pod's change triggers nothing.
    let pods = watches.pod_events.for_each(|()| async {});
    tokio::select! {
        () = drive(op, controller, 0, shutdown) => {}
        () = pods => {}
    }
}

/// The RebootPolicy controller.
pub struct PolicyOperation {
    shared: Arc<Shared>,
    policies: Store<RebootPolicy>,
    /// The reboot pod's image when a policy names none.
    default_image: String,
    /// Asks Prometheus for the policies' alert blockers (`None`: it could not be built).
    http: Option<reqwest::Client>,
    checks: CheckReader,
    pods: Store<Pod>,
    /// Where kured keeps its lock (`None`: not read).
    kured: Option<KuredLock>,
    /// Set once the log said kured's lock cannot be read, until it can again.
    kured_unreadable: AtomicBool,
    written: Written<RebootPolicy>,
    metrics: Arc<metrics::PolicyMetrics>,
}

/// What a policy's decision reads besides the policy.
pub struct Observed {
    spec: Result<PolicySpec, String>,
    /// The governed nodes, and whether the selector matches each.
    nodes: Vec<(Arc<NodeInfo>, bool)>,
    alerts: Option<String>,
    /// What each of `spec.healthChecks` names, read only while a node wants a reboot.
    checks: Option<Vec<CheckRead>>,
    blocking: BTreeMap<String, Vec<String>>,
    drains: BTreeMap<String, PodsView>,
    health: BTreeMap<String, HealthObservation>,
    /// The nodes in progress whose reboot pod exists.
    reboot_pods: BTreeSet<String>,
    /// The pull pods of `spec.disruption.prePull`, listed while it pulls or has a pull on record.
    pull_pods: Vec<Pod>,
    kured: KuredView,
}

impl Operation for PolicyOperation {
    type Object = RebootPolicy;
    type Status = RebootPolicyStatus;
    type Effect = RebootEffect;
    type Report = PolicyReport;
    type Observed = Observed;

    const KIND: Kind = Kind("rebootpolicy");
    const FINALIZER: &'static str = FINALIZER;

    fn shared(&self) -> &Shared {
        &self.shared
    }

    fn size(&self, observed: &Observed) -> usize {
        observed.nodes.len()
    }

    fn written(&self) -> &Written<RebootPolicy> {
        &self.written
    }

    fn holder(&self, p: &RebootPolicy) -> Holder {
        core::holder(p)
    }

    async fn prepare(&self, p: Arc<RebootPolicy>) -> Result<Arc<RebootPolicy>, Error> {
        let policies = &self.policies;
        (self.metrics).retain_policies(|n| policies.get(&ObjectRef::new(n)).is_some());
        self.shared.forget_gone();
        Ok(p)
    }

    async fn observe(&self, p: &RebootPolicy, now: Timestamp) -> Result<Observed, Error> {
        let spec = core::read_spec(&p.spec, &self.default_image);
        let previous = p.status.clone().unwrap_or_default();
        let (states, _) = core::read_status(&previous.nodes, now);
        let nodes = self.governed(p, spec.as_ref(), &states);
        let Ok(s) = &spec else {
            return Ok(Observed::of(spec, nodes));
        };
        let kured = self.read_kured(now).await;
        let wanting: Vec<&NodeInfo> = nodes
            .iter()
            .filter(|(_, selected)| *selected)
            .map(|(n, _)| n.as_ref())
            .filter(|n| !states.contains_key(&n.name) && core::requested(n, &s.signals).is_some())
            .collect();
        // Prometheus is asked only when a node waits for it.
        let alerts = match (&s.alerts, wanting.is_empty(), &self.http) {
            (Some(filter), false, Some(http)) => alerts::ask(filter, http).await,
            (Some(_), false, None) => Some("no HTTP client to ask Prometheus with".into()),
            _ => None,
        };
        // So are the health checks.
        let checks = match (s.health_checks.is_empty(), wanting.is_empty()) {
            (false, false) => Some(self.checks.read_all(&s.health_checks).await),
            _ => None,
        };
        let client = self.shared.chores().client();
        let mut blocking = BTreeMap::new();
        for node in &wanting {
            blocking.insert(
                node.name.clone(),
                blocking_pods(client, s, &node.name).await?,
            );
        }
        let mut drains = BTreeMap::new();
        let mut health = BTreeMap::new();
        for (name, state) in &states {
            match (state, &s.drain, &s.health_gate) {
                (RebootState::Draining { .. }, Some((_, options)), _) => {
                    let view = pods_view(
                        client,
                        name,
                        options,
                        s.volumes,
                        crate::runtime::clock::now(),
                    )
                    .await?;
                    drains.insert(name.clone(), view);
                }
                (RebootState::Rebooting { .. }, _, Some(gate)) => {
                    health.insert(name.clone(), gate_pods(client, gate, name).await?);
                }
                _ => {}
            }
        }
        let reboot_pods = self.reboot_pods(p, &states);
        let pull_pods = match s.pre_pull || previous.pre_pull.is_some() {
            true => {
                let (client, ns) = (self.shared.chores().client(), &self.shared.namespace);
                crate::node::shell::pull_pods(client, ns, &core::pull_owner(&p.name_any())).await?
            }
            false => Vec::new(),
        };
        Ok(Observed {
            pull_pods,
            alerts,
            checks,
            blocking,
            drains,
            health,
            reboot_pods,
            kured,
            ..Observed::of(spec, nodes)
        })
    }

    fn decide(
        &self,
        p: &RebootPolicy,
        o: &Observed,
        budget: &Budget,
        now: Timestamp,
    ) -> RebootDecision {
        let views: Vec<NodeView<'_>> = o
            .nodes
            .iter()
            .map(|(n, selected)| NodeView {
                node: n.as_ref(),
                selected: *selected,
                held_by: budget.holder_of(&n.name).map(ToString::to_string),
                blocking_pods: o.blocking.get(&n.name).cloned().unwrap_or_default(),
                drain: o.drains.get(&n.name).map(DrainView::of),
                health: o.health.get(&n.name),
                reboot_pod: o.reboot_pods.contains(&n.name),
            })
            .collect();
        let pull_pods: Vec<&Pod> = o.pull_pods.iter().collect();
        core::decide(
            &PolicyInput {
                policy: p,
                spec: &o.spec,
                nodes: &views,
                alerts: o.alerts.clone(),
                checks: o.checks.as_deref(),
                budget,
                pull_pods: &pull_pods,
                namespace: &self.shared.namespace,
                kured: &o.kured,
            },
            now,
        )
    }

    async fn perform(
        &self,
        p: &RebootPolicy,
        o: &Observed,
        effect: &RebootEffect,
    ) -> Result<(), Error> {
        let name = p.name_any();
        let chores = self.shared.chores();
        match effect {
            RebootEffect::Finish {
                node,
                signal,
                change,
            } => {
                info!(rebootpolicy = %name, node = %node, ?change, "giving the node back");
                self.finish(&name, node, *signal, change.as_ref()).await?;
            }
            RebootEffect::Annotate(change) | RebootEffect::Cordon(change) => {
                info!(rebootpolicy = %name, node = %change.node, ?change, "patching node");
                self.shared.patch_node(change).await?;
            }
            RebootEffect::Evict {
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
            RebootEffect::Delete {
                node,
                pods,
                grace_period_seconds,
            } => {
                info!(rebootpolicy = %name, node = %node, ?pods, "deleting the pods the drain left");
                delete_all(chores.client(), pods, *grace_period_seconds).await?;
            }
            RebootEffect::PullImages(pod) => {
                if chores.create(pod.as_ref()).await?.is_some() {
                    info!(rebootpolicy = %name, pod = %pod.name_any(), "created pull pod");
                }
            }
            RebootEffect::DeletePullPod(pod) => {
                info!(rebootpolicy = %name, pod = %pod, "deleting pull pod");
                let ns = Some(self.shared.namespace.as_str());
                chores
                    .delete::<Pod>(ns, pod, &DeleteParams::default())
                    .await?;
            }
            RebootEffect::Reboot {
                node,
                signal,
                before,
            } => {
                debug!(rebootpolicy = %name, node = %node, "asking for the reboot");
                match signal.update_agent() {
                    Some(prefix) => {
                        let grant = NodeChange::of(node)
                            .annotation(&format!("{prefix}{REBOOT_OK}"), Some("true"));
                        self.shared.patch_node(&grant).await?;
                    }
                    None => self.create_reboot_pod(p, o, node, before).await?,
                }
            }
        }
        Ok(())
    }

    fn applied(&self, p: &RebootPolicy, report: &PolicyReport) {
        let metrics = &self.metrics;
        metrics.reboot_policy(&p.name_any(), report.wanting, report.rebooting);
        // The applied status: the one written, or the one read when it did not change.
        metrics.reboot_phases(&p.name_any(), &core::phases(p.status.as_ref()));
    }

    fn forget(&self, p: &RebootPolicy) {
        let name = p.name_any();
        self.metrics.retain_policies(|n| n != name);
    }
}

/// Held while the policy exists; released once the nodes it took are given back.
pub const FINALIZER: &str = "slipway.dev/reboot-policy-cleanup";

impl Observed {
    fn of(spec: Result<PolicySpec, String>, nodes: Vec<(Arc<NodeInfo>, bool)>) -> Observed {
        Observed {
            spec,
            nodes,
            alerts: None,
            checks: None,
            blocking: BTreeMap::new(),
            drains: BTreeMap::new(),
            health: BTreeMap::new(),
            reboot_pods: BTreeSet::new(),
            pull_pods: Vec::new(),
            kured: KuredView::Off,
        }
    }
}

impl PolicyOperation {
    /// The nodes the policy governs (selected) and the nodes it has a state for that no longer
    /// match (or every node with a state, when the spec cannot be read).
    fn governed(
        &self,
        p: &RebootPolicy,
        spec: Result<&PolicySpec, &String>,
        states: &BTreeMap<String, RebootState>,
    ) -> Vec<(Arc<NodeInfo>, bool)> {
        let me = core::holder(p);
        let mut index = self.shared.nodes_mut();
        let selected = index.candidates(
            &me,
            p.metadata.uid.as_deref().unwrap_or_default(),
            p.metadata.generation,
            || core::interest(spec),
        );
        let in_progress: BTreeSet<String> = states.keys().cloned().collect();
        let mut nodes: Vec<(Arc<NodeInfo>, bool)> = Vec::with_capacity(selected.len());
        let mut seen = BTreeSet::new();
        for n in selected {
            seen.insert(n.name.clone());
            nodes.push((n, true));
        }
        for name in in_progress.difference(&seen) {
            if let Some(n) = index.get(name) {
                nodes.push((n, false));
            }
        }
        // A node in progress that leaves the selector is still this policy's to finish.
        index.follow(&me, in_progress);
        nodes
    }

    /// kured's lock as its DaemonSet holds it now. Read on every look: it is one small object,
    /// and a node kured takes must count against the policy at once.
    async fn read_kured(&self, now: Timestamp) -> KuredView {
        let Some(lock) = &self.kured else {
            return KuredView::Off;
        };
        let client = self.shared.chores().client().clone();
        let api = Api::<DaemonSet>::namespaced(client, &lock.namespace);
        let view = match api.get_metadata_opt(&lock.name).await {
            Ok(None) => KuredView::Gone,
            Ok(Some(ds)) => {
                let value = ds.metadata.annotations.as_ref();
                let value = value.and_then(|a| a.get(&lock.annotation));
                KuredView::of_lock(value.map(String::as_str), now)
            }
            Err(e) => KuredView::Unreadable(format!(
                "cannot read kured's DaemonSet {}/{}: {e}",
                lock.namespace, lock.name
            )),
        };
        // Said once: nodes kured holds are not taken over while it lasts.
        let unreadable = matches!(view, KuredView::Unreadable(_));
        if self.kured_unreadable.swap(unreadable, Ordering::Relaxed) != unreadable
            && let KuredView::Unreadable(why) = &view
        {
            warn!("{why}; the nodes kured reboots are not taken over until it can be read");
        }
        view
    }

    /// The rebooting nodes whose reboot pod from this policy is in the cache (not being deleted).
    fn reboot_pods(
        &self,
        p: &RebootPolicy,
        states: &BTreeMap<String, RebootState>,
    ) -> BTreeSet<String> {
        let policy = p.name_any();
        states
            .iter()
            .filter(|(_, s)| matches!(s, RebootState::Rebooting { .. }))
            .map(|(node, _)| node)
            .filter(|node| {
                let name = policy_reboot_pod_name(&policy, node);
                let pod = ObjectRef::new(&name).within(&self.shared.namespace);
                self.pods
                    .get(&pod)
                    .is_some_and(|pod| pod.metadata.deletion_timestamp.is_none())
            })
            .cloned()
            .collect()
    }

    /// Withdraws an update-agent's grant, removes the reboot pod, and gives the cordon back.
    async fn finish(
        &self,
        policy: &str,
        node: &str,
        signal: Signal,
        change: Option<&NodeChange>,
    ) -> Result<(), Error> {
        let chores = self.shared.chores();
        if let Some(prefix) = signal.update_agent() {
            let withdraw =
                NodeChange::of(node).annotation(&format!("{prefix}{REBOOT_OK}"), Some("false"));
            self.shared.patch_node(&withdraw).await?;
        }
        chores
            .delete::<Pod>(
                Some(&self.shared.namespace),
                &policy_reboot_pod_name(policy, node),
                &DeleteParams::default(),
            )
            .await?;
        if let Some(change) = change {
            self.shared.patch_node(change).await?;
        }
        Ok(())
    }

    async fn create_reboot_pod(
        &self,
        p: &RebootPolicy,
        o: &Observed,
        node: &str,
        before: &str,
    ) -> Result<(), Error> {
        let (Some(uid), Ok(spec)) = (p.uid(), &o.spec) else {
            return Ok(());
        };
        let pod = render_policy_reboot_pod(
            &PolicyPod {
                policy: &p.name_any(),
                policy_uid: &uid,
                namespace: &self.shared.namespace,
                controller: &self.shared.controller_name,
                image: &spec.image,
            },
            node,
            before,
        );
        self.shared.chores().create(&pod).await?;
        Ok(())
    }
}

/// Running pods on the node that a blocking selector matches, as `namespace/name`.
async fn blocking_pods(
    client: &Client,
    spec: &PolicySpec,
    node: &str,
) -> Result<Vec<String>, Error> {
    let mut found = Vec::new();
    let api = Api::<Pod>::all(client.clone());
    for selector in &spec.blocking_pods {
        let params = ListParams::default()
            .fields(&format!(
                "spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed,status.phase!=Unknown"
            ))
            .labels(&selector.to_string())
            .limit(10);
        for pod in api.list(&params).await?.items {
            found.push(format!(
                "{}/{}",
                pod.namespace().unwrap_or_default(),
                pod.name_any()
            ));
        }
    }
    found.sort();
    found.dedup();
    Ok(found)
}

#[cfg(test)]
mod tests;
