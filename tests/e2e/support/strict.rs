//! The opt-in strict policy of Plans (deploy/components/strict-plans), as slipway ships it but
//! bound to one scene's namespace: the cluster is shared, and a policy over every Plan would
//! refuse other scenes' Plans.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kube::api::PostParams;
use serde_json::json;
use slipway::plan::api::Plan;

use super::{Cluster, TestNamespace};

/// Installs the policy and its binding for `ns`, named after it, and waits until the API server
/// refuses by it (it compiles a new policy in the background). Returns the name, which the API
/// server's refusals quote.
pub async fn install(cluster: &Cluster, ns: &TestNamespace) -> String {
    let name = format!("slipway-strict-plans-{}", ns.name());
    let [mut policy, mut binding] = slipway::plan::api::strict::strict_plan_policy();
    policy["metadata"]["name"] = json!(name);
    binding["metadata"]["name"] = json!(name);
    binding["spec"]["policyName"] = json!(name);
    binding["spec"]["matchResources"] = json!({"namespaceSelector": {"matchLabels":
        {"kubernetes.io/metadata.name": ns.name()}}});
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [policy, binding]});
    cluster
        .kubectl_stdin(&["apply", "-f", "-"], Some(&list.to_string()))
        .await
        .expect("the policy and its binding apply");
    // A probe accepted before the policy works is not asked again: its name is taken.
    let probes = AtomicUsize::new(0);
    let plans = ns.api::<Plan>();
    super::wait_for(
        "the strict policy refuses",
        Duration::from_secs(60),
        || async {
            let n = probes.fetch_add(1, Ordering::Relaxed);
            let probe: Plan = serde_json::from_value(json!({
                "apiVersion": "upgrade.cattle.io/v1", "kind": "Plan",
                "metadata": {"name": format!("strict-probe-{n}")},
                "spec": {"concurrency": -1, "upgrade": {"image": "x"}},
            }))?;
            match plans.create(&PostParams::default(), &probe).await {
                Err(kube::Error::Api(e)) if e.message.contains(&name) => Ok(()),
                Err(e) => Err(anyhow::anyhow!("refused, not by the policy: {e}")),
                Ok(_) => Err(anyhow::anyhow!("accepted")),
            }
        },
    )
    .await;
    name
}

/// Removes what [`install`] made (cluster-scoped: the namespace's deletion leaves it).
pub async fn remove(cluster: &Cluster, name: &str) {
    let _ = cluster
        .kubectl(&[
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            name,
        ])
        .await;
}
