//! The cluster as `slipway explain` reads it once: every object the controller's caches hold, and
//! the controller's own operations built over them (deciding, never writing).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use anyhow::Context;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::api::{Api, ListParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Client, Resource, ResourceExt};
use slipway::common::labels::CONTROLLER;
use slipway::maintenance::api::NodeMaintenance;
use slipway::maintenance::core::LeaseSettings;
use slipway::maintenance::shell::MaintenanceOperation;
use slipway::node::NodeInfo;
use slipway::node::budget::api::DisruptionBudgetStatus;
use slipway::node::budget::{DisruptionBudget, HOLD_ANNOTATION};
use slipway::node::holders::Holder;
use slipway::node::index::NodeIndex;
use slipway::nodeop::api::NodeOp;
use slipway::nodeop::shell::NodeOpOperation;
use slipway::plan::api::Plan;
use slipway::plan::core::config::EnvSettings;
use slipway::plan::shell::{JobCache, PlanOperation, PlanSettings};
use slipway::reboot_policy::api::RebootPolicy;
use slipway::reboot_policy::core::kured::KuredLock;
use slipway::reboot_policy::shell::PolicyOperation;
use slipway::runtime::budget::Budgets;
use slipway::runtime::leader::LeaseGuard;
use slipway::runtime::ledgers::ledgers;
use slipway::runtime::metrics::Metrics;
use slipway::runtime::{Chores, HoldSources, Operation, Shared, listed, predict};

use super::{BudgetRoom, Explanation, NodeOperation, NodeView, Target};

/// What the cluster showed, and the operations that decide on it.
pub struct World {
    shared: Arc<Shared>,
    plans: Vec<Arc<Plan>>,
    policies: Vec<Arc<RebootPolicy>>,
    maintenances: Vec<Arc<NodeMaintenance>>,
    nodeops: Vec<Arc<NodeOp>>,
    budgets: Option<Arc<Budgets>>,
    plan_op: PlanOperation,
    policy_op: PolicyOperation,
    maintenance_op: MaintenanceOperation,
    nodeop_op: NodeOpOperation,
}

/// The items of a list, or none when the cluster does not serve the kind (its CRD is missing).
async fn optional<K>(api: Api<K>) -> anyhow::Result<Vec<K>>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("cannot list {}", K::plural(&Default::default()))),
    }
}

async fn list<K>(api: Api<K>, labels: &str) -> anyhow::Result<Vec<K>>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    let what = K::plural(&Default::default()).into_owned();
    Ok(api
        .list(&ListParams::default().labels(labels))
        .await
        .with_context(|| format!("cannot list {what}"))?
        .items)
}

impl World {
    pub async fn load(client: &Client, namespace: &str, name: &str) -> anyhow::Result<World> {
        let mine = format!("{CONTROLLER}={name}");
        let nodes: Vec<Node> = list(Api::all(client.clone()), "").await?;
        let plans: Vec<Plan> = list(Api::namespaced(client.clone(), namespace), "").await?;
        let jobs: Vec<Job> = list(Api::namespaced(client.clone(), namespace), &mine).await?;
        let secrets: Vec<Secret> = list(Api::namespaced(client.clone(), namespace), "").await?;
        let pods: Vec<Pod> = list(
            Api::namespaced(client.clone(), namespace),
            &format!("{mine},{}", slipway::node::reboot::REBOOT_LABEL),
        )
        .await?;
        let policies: Vec<RebootPolicy> = optional(Api::all(client.clone())).await?;
        let maintenances: Vec<NodeMaintenance> = optional(Api::all(client.clone())).await?;
        let nodeops: Vec<NodeOp> = optional(Api::all(client.clone())).await?;
        let budgets: Vec<DisruptionBudget> = optional(Api::all(client.clone())).await?;
        let settings = settings(client, namespace).await;

        let kept = crate::cli::run::kept_annotations();
        let mut index = NodeIndex::new();
        index.relist_start();
        for n in &nodes {
            index.relisted(NodeInfo::from_node_keeping(n, &kept));
        }
        index.relist_done();

        let (plan_store, policy_store) = (listed(plans), listed(policies));
        let maintenance_store = listed(maintenances);
        let nodeop_store = listed(nodeops);
        // In the controller's order (`slipway run`).
        let sources: HoldSources = vec![
            slipway::plan::shell::hold_source(plan_store.clone()),
            slipway::reboot_policy::shell::hold_source(policy_store.clone()),
            slipway::nodeop::shell::hold_source(nodeop_store.clone()),
            slipway::maintenance::shell::hold_source(maintenance_store.clone()),
        ];
        let budgets = Budgets::listed(budgets);
        let shared = Arc::new(Shared::new(
            chores(client),
            name.to_string(),
            namespace.to_string(),
            Arc::new(RwLock::new(index)),
            sources,
            Arc::default(),
            Some(budgets.clone()),
        ));
        let reboot_image = settings.job.reboot_image.clone();
        let pod_store = listed(pods);
        let plan_op = PlanOperation::new(
            shared.clone(),
            settings,
            (plan_store.clone(), JobCache::listed(jobs), listed(secrets)),
            pod_store.clone(),
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .explaining();
        Ok(World {
            plans: plan_store.state(),
            policies: policy_store.state(),
            maintenances: maintenance_store.state(),
            nodeops: nodeop_store.state(),
            budgets: Some(budgets),
            nodeop_op: NodeOpOperation::new(shared.clone(), reboot_image.clone(), nodeop_store),
            policy_op: PolicyOperation::new(
                shared.clone(),
                reboot_image,
                Some(KuredLock::default()),
                policy_store,
                pod_store,
            ),
            maintenance_op: MaintenanceOperation::new(
                shared.clone(),
                LeaseSettings::default(),
                maintenance_store,
            ),
            plan_op,
            shared,
        })
    }

    pub fn node(&self, name: &str) -> Option<Arc<NodeInfo>> {
        self.shared.nodes().get(name)
    }

    /// The nodes `holder` holds by its own record.
    fn holding(&self, holder: &Holder) -> BTreeSet<String> {
        (self.shared.holders_by_node().into_iter())
            .filter(|(_, hs)| hs.contains(holder))
            .map(|(node, _)| node)
            .collect()
    }

    async fn explain_one<O: Operation>(
        &self,
        op: &O,
        obj: Arc<O::Object>,
        now: Timestamp,
    ) -> anyhow::Result<Explanation> {
        let holder = op.holder(&obj);
        let decision = predict(op, obj)
            .await
            .map_err(|e| anyhow::anyhow!("cannot decide on {}: {e}", holder.key()))?;
        Ok(Explanation::of(
            &holder,
            self.holding(&holder),
            &decision,
            now,
        ))
    }

    /// The object `target` names, explained; `None` when there is no such object.
    pub async fn explain(
        &self,
        target: &Target,
        now: Timestamp,
    ) -> anyhow::Result<Option<Explanation>> {
        Ok(match target {
            Target::Plan(name) => match self.plans.iter().find(|p| p.name_any() == *name) {
                Some(p) => Some(self.explain_one(&self.plan_op, p.clone(), now).await?),
                None => None,
            },
            Target::RebootPolicy(name) => {
                match self.policies.iter().find(|p| p.name_any() == *name) {
                    Some(p) => Some(self.explain_one(&self.policy_op, p.clone(), now).await?),
                    None => None,
                }
            }
            Target::NodeMaintenance(name) => {
                match self.maintenances.iter().find(|m| m.name_any() == *name) {
                    Some(m) => Some(
                        self.explain_one(&self.maintenance_op, m.clone(), now)
                            .await?,
                    ),
                    None => None,
                }
            }
            Target::NodeOp(namespace, name) => match self.nodeop(namespace.as_deref(), name)? {
                Some(op) => Some(self.explain_one(&self.nodeop_op, op, now).await?),
                None => None,
            },
            Target::DisruptionBudget(_) | Target::Node(_) => None,
        })
    }

    /// The NodeOp `name` (of `namespace`, or the only one of that name in any namespace).
    fn nodeop(&self, namespace: Option<&str>, name: &str) -> anyhow::Result<Option<Arc<NodeOp>>> {
        let found: Vec<&Arc<NodeOp>> = (self.nodeops.iter())
            .filter(|op| op.name_any() == name)
            .filter(|op| namespace.is_none_or(|ns| op.namespace().as_deref() == Some(ns)))
            .collect();
        match found[..] {
            [] => Ok(None),
            [one] => Ok(Some(one.clone())),
            _ => {
                anyhow::bail!("NodeOps named {name} in several namespaces: nodeop/NAMESPACE/{name}")
            }
        }
    }

    /// Every operation object, explained.
    pub async fn explain_all(&self, now: Timestamp) -> anyhow::Result<Vec<Explanation>> {
        let mut all = Vec::new();
        for p in &self.plans {
            all.push(self.explain_one(&self.plan_op, p.clone(), now).await?);
        }
        for p in &self.policies {
            all.push(self.explain_one(&self.policy_op, p.clone(), now).await?);
        }
        for m in &self.maintenances {
            all.push(
                self.explain_one(&self.maintenance_op, m.clone(), now)
                    .await?,
            );
        }
        for op in &self.nodeops {
            all.push(self.explain_one(&self.nodeop_op, op.clone(), now).await?);
        }
        Ok(all)
    }

    /// The budget `name` with its ledger as of `now`.
    pub fn ledger(
        &self,
        name: &str,
        now: Timestamp,
    ) -> Option<(Arc<DisruptionBudget>, DisruptionBudgetStatus)> {
        let budgets = self.budgets.as_ref()?;
        ledgers(&self.shared, budgets, now)
            .into_iter()
            .find(|(b, _)| b.name_any() == name)
    }

    /// Everything about one node: who holds it, its budgets, and what each operation that reads
    /// it does with it next.
    pub async fn node_view(&self, node: &NodeInfo, now: Timestamp) -> anyhow::Result<NodeView> {
        let holders = self.shared.holders_by_node();
        let mut budgets = Vec::new();
        if let Some(b) = &self.budgets {
            for pool in self.shared.measure_pools(&b.pools(), now) {
                if pool.contains(node) {
                    budgets.push(BudgetRoom {
                        name: pool.name.clone(),
                        unavailable: pool.unavailable.len(),
                        max_unavailable: pool.limit.max,
                        halted: pool.halt,
                        invalid: pool.invalid.clone(),
                    });
                }
            }
        }
        let operations = (self.explain_all(now).await?.iter())
            .map(|e| NodeOperation::of(e, &node.name))
            .filter(|o| o.does != "nothing")
            .collect();
        Ok(NodeView {
            node: node.name.clone(),
            ready: node.ready,
            cordoned: node.unschedulable,
            held_by_annotation: node.annotations.get(HOLD_ANNOTATION).cloned(),
            holders: holders
                .get(&node.name)
                .into_iter()
                .flatten()
                .map(Holder::key)
                .collect(),
            budgets,
            operations,
        })
    }
}

/// The controller's settings, from its ConfigMap when this user may read it (else the defaults).
async fn settings(client: &Client, namespace: &str) -> PlanSettings {
    let data: BTreeMap<String, String> = Api::<ConfigMap>::namespaced(client.clone(), namespace)
        .get_opt("default-controller-env")
        .await
        .ok()
        .flatten()
        .and_then(|c| c.data)
        .unwrap_or_default();
    let env = EnvSettings::from_lookup(|k| data.get(k).cloned());
    PlanSettings {
        job: env.job,
        polling_interval: env.polling_interval,
        threads: 1,
        cluster_id: cluster_id(client).await,
    }
}

async fn cluster_id(client: &Client) -> String {
    slipway::runtime::cluster_id(client)
        .await
        .unwrap_or_default()
}

/// Chores that never write: no operation of `explain` performs an effect.
fn chores(client: &Client) -> Chores {
    let reporter = Reporter {
        controller: "slipway-explain".into(),
        instance: None,
    };
    Chores::new(
        client.clone(),
        client.clone(),
        LeaseGuard::always(),
        Recorder::new(client.clone(), reporter),
        Arc::new(Metrics::new()),
    )
}
