//! The reboot pods of RebootPolicies, and the node's side of their reboots.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams};

/// The live reboot pods of the RebootPolicy `policy` in namespace `ns`.
pub async fn reboot_pods(ns: &str, client: &Client, policy: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("slipway.dev/reboot-policy={policy}")))
        .await
        .expect("list reboot pods")
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// The node a pod is bound to.
pub fn pod_node(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// How long a node takes from its reboot pod to its new boot. A real node takes a minute; the
/// scenes give it a moment, so that whoever samples the holders (a ledger written at most once a
/// second, a silence task) can see the node held. Without it, a controller that reconciles within
/// 0.1 s had cordoned, rebooted and given back a node in 0.3 s, and no ledger ever named it.
const REBOOT_TAKES: std::time::Duration = std::time::Duration::from_secs(2);

/// Plays the nodes of `policy`: each node whose reboot pod has been there for [`REBOOT_TAKES`]
/// (and is not in `rebooted` yet) comes back with a new boot ID. Returns the nodes rebooted in
/// this pass. Called in a loop, as a node's kubelet would act.
pub async fn play_reboots(
    ns: &str,
    client: &Client,
    policy: &str,
    rebooted: &mut BTreeSet<String>,
) -> Vec<String> {
    let mut now = Vec::new();
    for p in reboot_pods(ns, client, policy).await {
        let n = pod_node(&p);
        let age: std::time::Duration = (p.metadata.creation_timestamp.as_ref())
            .and_then(|t| jiff::Timestamp::now().duration_since(t.0).try_into().ok())
            .unwrap_or_default();
        // Creation times are whole seconds: the pod may be up to a second older than it says.
        if age < REBOOT_TAKES || rebooted.contains(&n) {
            continue;
        }
        rebooted.insert(n.clone());
        super::simulate_reboot(client, &n).await;
        now.push(n);
    }
    now
}
