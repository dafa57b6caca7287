//! An independent count of a pool's unavailable nodes, as anyone can see them: the checker the
//! budget tests hold the controller to.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

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
