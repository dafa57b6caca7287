//! The shell of what operations share on a node: listing its pods as a drain sees them, asking
//! the Eviction API, and looking at a health gate's pods.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};

use super::drain::{self, EvictionOutcome, EvictionResult, PodKey, PodRef, PodsView, eviction};
use super::reboot::{HealthGate, HealthObservation};
use crate::common::selector::Selector;

/// Every pod on `node`, in every namespace.
pub async fn pods_on_node(client: &Client, node: &str) -> Result<Vec<Pod>, kube::Error> {
    let api = Api::<Pod>::all(client.clone());
    let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
    Ok(api.list(&params).await?.items)
}

/// The pull pods of `owner` in `namespace` ([`super::prepull`]), read from the API server: a pull
/// is looked at a few times, not watched.
pub async fn pull_pods(
    client: &Client,
    namespace: &str,
    owner: &str,
) -> Result<Vec<Pod>, kube::Error> {
    let api = Api::<Pod>::namespaced(client.clone(), namespace);
    let label = format!("{}={owner}", super::prepull::PRE_PULL_LABEL);
    Ok(api.list(&ListParams::default().labels(&label)).await?.items)
}

/// Asks the Eviction API (policy/v1) once for `pod`. The body is built here: kube's `evict`
/// sends the delete options under a key the API server ignores, losing the grace period.
pub async fn evict(
    client: &Client,
    pod: &PodRef,
    grace_period_seconds: Option<i64>,
) -> EvictionOutcome {
    let api = Api::<Pod>::namespaced(client.clone(), &pod.namespace);
    let body = eviction(pod, grace_period_seconds);
    let result = api
        .create_subresource::<_, serde_json::Value>(
            "eviction",
            &pod.name,
            &PostParams::default(),
            &body,
        )
        .await;
    EvictionOutcome::of(result.as_ref().map(|_| ()))
}

/// The node's pods, classified as `kubectl drain` with `options` would at `now` (NMO's are the
/// defaults), and, once they are gone and `volumes` asks for it, its VolumeAttachments.
pub async fn pods_view(
    client: &Client,
    node: &str,
    options: &drain::DrainOptions,
    volumes: bool,
    now: jiff::Timestamp,
) -> Result<PodsView, kube::Error> {
    let pods = pods_on_node(client, node).await?;
    let daemonsets = daemonsets_of(client, &pods).await?;
    let plan = drain::plan(
        &pods,
        |ns, name| daemonsets.contains(&(ns.to_string(), name.to_string())),
        options,
        now,
    );
    let terminating: BTreeSet<(String, String)> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .map(|p| (p.namespace().unwrap_or_default(), p.name_any()))
        .collect();
    let key = |r: &drain::PodRef| PodKey {
        namespace: r.namespace.clone(),
        name: r.name.clone(),
    };
    // Volumes detach after their pods are gone: no need to read them before.
    let attached = match volumes && plan.evict.is_empty() && plan.blocked.is_empty() {
        true => {
            let all = Api::<VolumeAttachment>::all(client.clone());
            drain::attached_to(&all.list(&ListParams::default()).await?.items, node)
        }
        false => Vec::new(),
    };
    Ok(PodsView {
        attached,
        total: pods.len(),
        to_evict: plan
            .evict
            .iter()
            .map(|r| {
                let t = terminating.contains(&(r.namespace.clone(), r.name.clone()));
                (key(r), t)
            })
            .collect(),
        blocked: plan
            .blocked
            .iter()
            .map(|(r, why)| (key(r), why.to_string()))
            .collect(),
    })
}

/// The DaemonSets that own pods of the node and still exist (orphans are evicted).
async fn daemonsets_of(
    client: &Client,
    pods: &[Pod],
) -> Result<BTreeSet<(String, String)>, kube::Error> {
    let mut found = BTreeSet::new();
    for pod in pods {
        let Some(owner) = pod
            .owner_references()
            .iter()
            .find(|o| o.controller == Some(true) && o.kind == "DaemonSet")
        else {
            continue;
        };
        let ns = pod.namespace().unwrap_or_default();
        let key = (ns.clone(), owner.name.clone());
        if found.contains(&key) {
            continue;
        }
        let api = Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(client.clone(), &ns);
        if api.get_opt(&owner.name).await?.is_some() {
            found.insert(key);
        }
    }
    Ok(found)
}

/// Asks the Eviction API once for each pod, through `evictions` (a client without kube's retry
/// layer, so that a PodDisruptionBudget's 429 comes back at once); `client` says which budget
/// refused.
pub async fn evict_all(
    client: &Client,
    evictions: &Client,
    pods: &[PodKey],
    grace_period_seconds: Option<i64>,
) -> Vec<(PodKey, EvictionResult)> {
    let mut results = Vec::new();
    for pod in pods {
        let reference = PodRef {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            uid: None,
        };
        let outcome = evict(evictions, &reference, grace_period_seconds).await;
        let result = match outcome {
            EvictionOutcome::Evicted | EvictionOutcome::Gone => EvictionResult::Accepted,
            EvictionOutcome::Terminating => EvictionResult::Accepted,
            EvictionOutcome::Disrupted { message } => {
                EvictionResult::Refused(blocking_budget(client, pod).await.unwrap_or(message))
            }
            EvictionOutcome::Failed(e) => EvictionResult::Failed(e),
        };
        results.push((pod.clone(), result));
    }
    results
}

/// Deletes each pod (a drain past its timeout with `DeletePods`: no PodDisruptionBudget is
/// asked), with the pod's own grace period unless `grace_period_seconds` says otherwise. A pod
/// already gone is deleted; the first other error is returned once every pod was tried.
pub async fn delete_all(
    client: &Client,
    pods: &[PodKey],
    grace_period_seconds: Option<i64>,
) -> Result<(), kube::Error> {
    let mut first = None;
    for pod in pods {
        let api = Api::<Pod>::namespaced(client.clone(), &pod.namespace);
        let params = DeleteParams {
            grace_period_seconds: grace_period_seconds.and_then(|s| u32::try_from(s).ok()),
            ..DeleteParams::default()
        };
        match api.delete(&pod.name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => first = first.or(Some(e)),
        }
    }
    first.map_or(Ok(()), Err)
}

/// Which PodDisruptionBudget refuses the eviction, in words.
async fn blocking_budget(client: &Client, pod: &PodKey) -> Option<String> {
    let pods = Api::<Pod>::namespaced(client.clone(), &pod.namespace);
    let p = pods.get_opt(&pod.name).await.ok()??;
    let pdbs = Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(
        client.clone(),
        &pod.namespace,
    )
    .list(&ListParams::default())
    .await
    .ok()?;
    drain::describe_blocking(&p, &pdbs.items)
}

/// The health gate's pods on one node.
pub async fn gate_pods(
    client: &Client,
    gate: &HealthGate,
    node: &str,
) -> Result<HealthObservation, kube::Error> {
    let selector =
        Selector::from_label_selector(Some(&gate.pod_selector)).unwrap_or(Selector::Nothing);
    let api: Api<Pod> = match &gate.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let params = ListParams::default()
        .fields(&format!("spec.nodeName={node}"))
        .labels(&selector.to_string());
    let pods = api.list(&params).await?;
    Ok(HealthObservation::of_pods(&pods.items))
}
