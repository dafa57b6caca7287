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

/// Plays the nodes of `policy`: each node whose reboot pod appears (and is not in `rebooted`
/// yet) comes back with a new boot ID. Returns the nodes rebooted in this pass.
pub async fn play_reboots(
    ns: &str,
    client: &Client,
    policy: &str,
    rebooted: &mut BTreeSet<String>,
) -> Vec<String> {
    let mut now = Vec::new();
    for p in reboot_pods(ns, client, policy).await {
        let n = pod_node(&p);
        if rebooted.insert(n.clone()) {
            super::simulate_reboot(client, &n).await;
            now.push(n);
        }
    }
    now
}
