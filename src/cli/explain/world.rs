//! The cluster as `slipway explain` reads it once: every object the controller's caches hold, and
//! the controller's own operations built over them (deciding, never writing).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use anyhow::Context;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, ListParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::{Client, ResourceExt};
use slipway::node::NodeInfo;
use slipway::node::budget::api::DisruptionBudgetStatus;
use slipway::node::budget::{DisruptionBudget, HOLD_ANNOTATION};
use slipway::node::holders::Holder;
use slipway::node::index::NodeIndex;
use slipway::plan::core::config::EnvSettings;
use slipway::plan::shell::PlanSettings;
use slipway::runtime::budget::Budgets;
use slipway::runtime::kind::{AnyKind, Foresight, Listed, Place, list_served};
use slipway::runtime::leader::LeaseGuard;
use slipway::runtime::ledgers::ledgers;
use slipway::runtime::metrics::Metrics;
use slipway::runtime::{Chores, HoldSources, Shared};

use super::{BudgetRoom, Explanation, NodeOperation, NodeView, Target};
use crate::cli::kinds::KindArgs;

/// What the cluster showed, and the operations that decide on it.
pub struct World {
    shared: Arc<Shared>,
    /// Each kind's words and operation, in the controller's order.
    kinds: Vec<Explained>,
    budgets: Option<Arc<Budgets>>,
}

/// One kind of operation, over its listed objects.
struct Explained {
    words: &'static [&'static str],
    across_namespaces: bool,
    foresight: Box<dyn Foresight>,
}

impl World {
    pub async fn load(client: &Client, namespace: &str, name: &str) -> anyhow::Result<World> {
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await
            .context("cannot list nodes")?
            .items;
        let budgets: Vec<DisruptionBudget> = list_served(Api::all(client.clone()))
            .await
            .context("cannot list disruptionbudgets")?;
        let kinds = KindArgs::every().kinds(settings(client, namespace).await)?;
        let place = Place {
            client,
            namespace,
            name,
        };
        let mut listed: Vec<(&dyn AnyKind, Box<dyn Listed>)> = Vec::new();
        for kind in &kinds {
            let objects = (kind.clone().list(place).await)
                .with_context(|| format!("cannot list {}", kind.words()[1]))?;
            listed.push((kind.as_ref(), objects));
        }

        let mut index = NodeIndex::keeping(crate::cli::run::kept_annotations(&kinds));
        index.relist_start();
        for n in &nodes {
            index.relisted(NodeInfo::from_node_keeping(n, index.kept()));
        }
        index.relist_done();

        // In the controller's order (`slipway run`).
        let sources: HoldSources = listed.iter().map(|(_, l)| l.holds()).collect();
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
        let mut explained = Vec::new();
        for (kind, objects) in listed {
            explained.push(Explained {
                words: kind.words(),
                across_namespaces: kind.across_namespaces(),
                foresight: objects.foresee(shared.clone())?,
            });
        }
        Ok(World {
            shared,
            kinds: explained,
            budgets: Some(budgets),
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

    /// The outlooks `pick` takes of one kind's objects, explained.
    async fn explain_some(
        &self,
        kind: &Explained,
        pick: &(dyn Fn(Option<&str>, &str) -> bool + Sync),
        now: Timestamp,
    ) -> anyhow::Result<Vec<Explanation>> {
        let outlooks = kind.foresight.outlooks(pick).await?;
        Ok((outlooks.into_iter())
            .map(|(holder, d)| Explanation::of(&holder, self.holding(&holder), &d, now))
            .collect())
    }

    /// The object `target` names, explained; `None` when there is no such object.
    pub async fn explain(
        &self,
        target: &Target,
        now: Timestamp,
    ) -> anyhow::Result<Option<Explanation>> {
        let Target::Object {
            kind,
            namespace,
            name,
        } = target
        else {
            return Ok(None);
        };
        let Some(explained) = self.kinds.iter().find(|k| k.words[0] == *kind) else {
            return Ok(None);
        };
        let namespace = namespace.as_deref();
        let pick = |ns: Option<&str>, n: &str| {
            n == name && (namespace.is_none() || !explained.across_namespaces || ns == namespace)
        };
        let mut found = self.explain_some(explained, &pick, now).await?;
        if found.len() > 1 {
            anyhow::bail!("{kind}s named {name} in several namespaces: {kind}/NAMESPACE/{name}");
        }
        Ok(found.pop())
    }

    /// Every operation object, explained.
    pub async fn explain_all(&self, now: Timestamp) -> anyhow::Result<Vec<Explanation>> {
        let mut all = Vec::new();
        for kind in &self.kinds {
            all.extend(self.explain_some(kind, &|_, _| true, now).await?);
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
