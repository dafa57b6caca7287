//! An independent count of a pool's unavailable nodes, as anyone can see them: the checker the
//! budget tests hold the controller to.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use slipway::maintenance::api::NodeMaintenance;
use slipway::node::budget::DisruptionBudget;
use slipway::node::budget::api::DisruptionBudgetStatus;
use slipway::plan::api::Plan;
use slipway::reboot_policy::api::RebootPolicy;

/// Samples, every 100 ms, the nodes of pool `pool` (label `slipway.test/pool`) that are
/// unavailable: cordoned, NotReady, with a live Job or a reboot pod in namespace `ns`. Keeps the
/// largest set seen.
pub struct PoolChecker {
    most: Arc<Mutex<BTreeSet<String>>>,
    stop: Arc<AtomicBool>,
}

impl PoolChecker {
    pub fn start(client: Client, ns: String, pool: String) -> PoolChecker {
        let most = Arc::new(Mutex::new(BTreeSet::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (m, s) = (most.clone(), stop.clone());
        tokio::spawn(async move {
            while !s.load(Ordering::Relaxed) {
                if let Some(now) = sample(&client, &ns, &pool, &m).await {
                    let mut most = m.lock().unwrap_or_else(|e| e.into_inner());
                    if now.len() > most.len() {
                        *most = now;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        PoolChecker { most, stop }
    }

    /// The largest set of nodes seen unavailable at once.
    pub fn most(&self) -> BTreeSet<String> {
        self.most.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for PoolChecker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One reading. The nodes, Jobs and pods are three lists, read one after the other: a node given
/// back between two of them and another taken may both show. So a reading larger than the largest
/// so far is read again at once, and only the nodes unavailable in both count (a real excess
/// lasts as long as a Job or a reboot, far longer than one reading).
async fn sample(
    client: &Client,
    ns: &str,
    pool: &str,
    most: &Mutex<BTreeSet<String>>,
) -> Option<BTreeSet<String>> {
    let first = unavailable(client, ns, pool).await.ok()?;
    if first.len() <= most.lock().unwrap_or_else(|e| e.into_inner()).len() {
        return Some(first);
    }
    let again = unavailable(client, ns, pool).await.ok()?;
    Some(first.intersection(&again).cloned().collect())
}

/// The nodes of the pool unavailable now.
pub async fn unavailable(
    client: &Client,
    ns: &str,
    pool: &str,
) -> anyhow::Result<BTreeSet<String>> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("slipway.test/pool={pool}")))
        .await?
        .items;
    let mut out = BTreeSet::new();
    for n in &nodes {
        let cordoned = (n.spec.as_ref())
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        let ready = (n.status.iter().flat_map(|s| s.conditions.iter().flatten()))
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if cordoned || !ready {
            out.insert(n.name_any());
        }
    }
    let jobs = Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items;
    for j in jobs {
        let finished = (j.status.iter().flat_map(|s| s.conditions.iter().flatten()))
            .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True");
        if let (false, Some(node)) = (finished, j.labels().get("upgrade.cattle.io/node")) {
            out.insert(node.clone());
        }
    }
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels("slipway.dev/reboot-policy"))
        .await?
        .items;
    out.extend(pods.iter().map(super::reboots::pod_node));
    let names: BTreeSet<String> = nodes.iter().map(|n| n.name_any()).collect();
    Ok(out.intersection(&names).cloned().collect())
}

/// Every version of a budget's status and of the records of the objects that hold nodes (Plans
/// of one namespace, RebootPolicies, NodeMaintenances), each at its resourceVersion, from watches:
/// to hold each ledger the controller wrote to what the objects said when it was written.
///
/// The scenes' clusters have one etcd, whose revisions the resourceVersions are: comparing them
/// as numbers orders writes to different objects.
pub struct LedgerSampler {
    seen: Arc<Mutex<Seen>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

#[derive(Default)]
struct Seen {
    /// Each version of the budget's status, by resourceVersion.
    ledgers: Vec<(u64, DisruptionBudgetStatus)>,
    /// Each version of an object, by holder key (`plan/<ns>/<name>`, ...): its resourceVersion,
    /// the nodes its record holds, and whether it is the deletion.
    records: BTreeMap<String, Vec<(u64, BTreeSet<String>, bool)>>,
}

/// One object's key as a ledger names its holder, and the nodes its own record holds.
type Read<K> = fn(&K) -> (String, BTreeSet<String>);

impl LedgerSampler {
    /// Watches the budget `budget` and the holders' objects (Plans of namespace `ns`).
    pub fn start(client: &Client, budget: &str, ns: &str) -> LedgerSampler {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let budgets = Api::<DisruptionBudget>::all(client.clone());
        let config = watcher::Config::default().fields(&format!("metadata.name={budget}"));
        let ledgers = {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut events = watcher(budgets, config).default_backoff().boxed();
                while let Some(event) = events.next().await {
                    if let Ok(Event::Apply(b) | Event::InitApply(b)) = event {
                        let status = b.status.clone().unwrap_or_default();
                        lock(&seen).ledgers.push((rv(&b), status));
                    }
                }
            })
        };
        let tasks = vec![
            ledgers,
            record(
                Api::<Plan>::namespaced(client.clone(), ns),
                &seen,
                plan_holds,
            ),
            record(
                Api::<RebootPolicy>::all(client.clone()),
                &seen,
                policy_holds,
            ),
            record(
                Api::<NodeMaintenance>::all(client.clone()),
                &seen,
                maintenance_holds,
            ),
        ];
        LedgerSampler { seen, tasks }
    }

    /// Waits until the watches have shown the budget and every object as the API server has them
    /// now (an object gone: its deletion), so that [`LedgerSampler::violations`] reads it all.
    pub async fn caught_up(&self, client: &Client, budget: &str, ns: &str) {
        let budgets = Api::<DisruptionBudget>::all(client.clone());
        super::wait_for(
            "the watches to catch up",
            Duration::from_secs(30),
            || async {
                let b = budgets.get(budget).await?;
                let mut now: BTreeMap<String, u64> = BTreeMap::new();
                let plans = Api::<Plan>::namespaced(client.clone(), ns);
                for p in plans.list(&ListParams::default()).await?.items {
                    now.insert(plan_holds(&p).0, rv(&p));
                }
                let policies = Api::<RebootPolicy>::all(client.clone());
                for p in policies.list(&ListParams::default()).await?.items {
                    now.insert(policy_holds(&p).0, rv(&p));
                }
                let nms = Api::<NodeMaintenance>::all(client.clone());
                for m in nms.list(&ListParams::default()).await?.items {
                    now.insert(maintenance_holds(&m).0, rv(&m));
                }
                let seen = lock(&self.seen);
                let ledger = seen.ledgers.iter().any(|(v, _)| *v >= rv(&b));
                let behind: Vec<&String> = (seen.records.iter())
                    .filter(|(key, versions)| {
                        let last = versions.last();
                        let gone = last.is_some_and(|(_, _, deleted)| *deleted);
                        match now.get(*key) {
                            Some(v) => last.is_none_or(|(seen, _, _)| seen < v),
                            None => !gone,
                        }
                    })
                    .map(|(key, _)| key)
                    .collect();
                let unseen: Vec<&String> = (now.keys())
                    .filter(|k| !seen.records.contains_key(*k))
                    .collect();
                match ledger && behind.is_empty() && unseen.is_empty() {
                    true => Ok(()),
                    false => anyhow::bail!("ledger seen: {ledger}; behind: {behind:?} {unseen:?}"),
                }
            },
        )
        .await
    }

    /// How many versions of the ledger were seen.
    pub fn ledgers_seen(&self) -> usize {
        lock(&self.seen).ledgers.len()
    }

    /// The reasons of every holder the ledgers named.
    pub fn reasons(&self) -> BTreeSet<String> {
        (lock(&self.seen).ledgers.iter())
            .flat_map(|(_, l)| l.holders.iter().map(|h| h.reason.clone()))
            .collect()
    }

    /// What each ledger written got wrong: more unavailable nodes (or nodes named) than the
    /// limit, or a holder whose object had let go of the node before the ledger was written (and
    /// did not take it again) and that the next ledger still names, or the last one does (one
    /// ledger measured just before a release and written just after the object's status is a
    /// race the next write corrects, not a lagging copy). A holder the ledger names before its
    /// object's record does is right: an operation claims a node, then writes its status.
    pub fn violations(&self) -> Vec<String> {
        let seen = lock(&self.seen);
        let mut out = Vec::new();
        for (i, (at, ledger)) in seen.ledgers.iter().enumerate() {
            let next = seen.ledgers.get(i + 1).map(|(_, l)| l);
            let named: BTreeSet<&str> = ledger.holders.iter().map(|h| h.node.as_str()).collect();
            if ledger.unavailable > ledger.max_unavailable
                || named.len() as i64 > ledger.max_unavailable
            {
                out.push(format!(
                    "at {at}: unavailable {} and {} nodes named, max {}: {:?}",
                    ledger.unavailable,
                    named.len(),
                    ledger.max_unavailable,
                    holders(ledger)
                ));
            }
            for h in &ledger.holders {
                let corrected = next.is_some_and(|n| {
                    !(n.holders.iter()).any(|m| m.node == h.node && m.holder == h.holder)
                });
                if corrected {
                    continue;
                }
                let versions = seen.records.get(&h.holder).map(Vec::as_slice);
                if let Some(left) = let_go_before(versions.unwrap_or_default(), &h.node, *at) {
                    out.push(format!(
                        "at {at}: {} holds {}, but let go of it at {left}: {:?}",
                        h.holder,
                        h.node,
                        holders(ledger)
                    ));
                }
            }
        }
        out
    }
}

impl Drop for LedgerSampler {
    fn drop(&mut self) {
        self.tasks.iter().for_each(|t| t.abort());
    }
}

/// When the object whose `versions` these are let go of `node` for good before `at`: its record
/// at `at` does not hold it, an earlier one did, and no later one does.
fn let_go_before(versions: &[(u64, BTreeSet<String>, bool)], node: &str, at: u64) -> Option<u64> {
    let holds = |(_, held, _): &&(u64, BTreeSet<String>, bool)| held.contains(node);
    let (before, after): (Vec<_>, Vec<_>) = versions.iter().partition(|(v, _, _)| *v <= at);
    let now = before.last()?;
    let held_once = before.iter().any(holds);
    if holds(now) || !held_once || after.iter().any(holds) {
        return None;
    }
    let first_without = before.iter().rev().take_while(|v| !holds(v)).last()?;
    Some(first_without.0)
}

fn holders(ledger: &DisruptionBudgetStatus) -> Vec<String> {
    (ledger.holders.iter())
        .map(|h| format!("{}={}", h.node, h.holder))
        .collect()
}

fn lock(seen: &Mutex<Seen>) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(|e| e.into_inner())
}

fn rv<K: Resource>(o: &K) -> u64 {
    (o.meta().resource_version.as_deref())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Records every version of the objects of `api` in `seen`, read by `read`.
fn record<K>(api: Api<K>, seen: &Arc<Mutex<Seen>>, read: Read<K>) -> tokio::task::JoinHandle<()>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let seen = seen.clone();
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let (o, deleted) = match event {
                Ok(Event::Apply(o) | Event::InitApply(o)) => (o, false),
                Ok(Event::Delete(o)) => (o, true),
                _ => continue,
            };
            let (key, held) = read(&o);
            let held = if deleted { BTreeSet::new() } else { held };
            let mut seen = lock(&seen);
            seen.records
                .entry(key)
                .or_default()
                .push((rv(&o), held, deleted));
        }
    })
}

/// A Plan's record: `status.applying` (hostnames; a kwok node's is its name).
fn plan_holds(p: &Plan) -> (String, BTreeSet<String>) {
    let key = format!(
        "plan/{}/{}",
        p.namespace().unwrap_or_default(),
        p.name_any()
    );
    let applying = p.status.iter().flat_map(|s| s.applying.iter().cloned());
    (key, applying.collect())
}

/// A RebootPolicy's record, as the controller reads it.
fn policy_holds(p: &RebootPolicy) -> (String, BTreeSet<String>) {
    let key = format!("rebootpolicy/{}", p.name_any());
    let holds = slipway::reboot_policy::core::holds(p, jiff::Timestamp::now());
    (key, holds.into_iter().map(|h| h.node).collect())
}

/// A NodeMaintenance's record, as the controller reads it (one that waits holds nothing).
fn maintenance_holds(m: &NodeMaintenance) -> (String, BTreeSet<String>) {
    let key = format!("nodemaintenance/{}", m.name_any());
    let holds = slipway::maintenance::core::holds(&[Arc::new(m.clone())]);
    let started = holds.into_iter().filter(|h| !h.waiting);
    (key, started.map(|h| h.node).collect())
}
