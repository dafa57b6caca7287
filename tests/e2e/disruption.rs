//! Around each disruption (`spec.disruption`), the features not shown with their kind elsewhere.
//!
//! Pre-pull on real nodes: the kubelet of each worker is asked for the Plan's images before the
//! first node is touched. An image no node can pull (no registry is reachable from the guests)
//! holds the rollout with `PrePullFailed`, naming the node, the image and the kubelet's reason,
//! and nothing is cordoned and no Job created; the Plan changed to an image the nodes have, the
//! pull passes and the rollout runs, leaving no pull pod behind.
//!
//! `PreferNoSchedule` on the next batch: on fake nodes, the node a Plan starts next carries the
//! taint while it waits, never while it is taken, and no node keeps it once the Plan is done.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::anyhow;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use slipway::node::prepull::{PRE_PULL_FAILED, PRE_PULL_LABEL, PrePullPhase};
use slipway::plan::api::Plan;

use crate::support::controller::ControllerProcess;
use crate::support::plans::{complete_message, plan_from_yaml, wait_complete, wait_reason};
use crate::support::scene::{POOL_LABEL, Scene};

/// The image of the first try: its registry does not resolve, as none does from the guests.
const MISSING: &str = "registry.invalid/slipway/missing";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_no_node_can_pull_touches_no_node_and_a_pulled_one_rolls_out() {
    let Some(s) = Scene::new("real-pull").real_nodes().start().await else {
        return;
    };
    let workers = s.workers();
    crate::real::drainer_account(&s).await;
    let _controller = ControllerProcess::start(&s.cluster, s.ns.name(), &[]);
    let plans = s.ns.api::<Plan>();
    let plan = plan_from_yaml(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: pulled
spec:
  concurrency: 1
  version: v1
  cordon: true
  serviceAccountName: drainer
  nodeSelector:
    matchLabels:
      {POOL_LABEL}: {pool}
    matchExpressions:
    - {{key: node-role.kubernetes.io/control-plane, operator: DoesNotExist}}
  upgrade:
    image: {MISSING}
    command: [sh, -c]
    args: ["echo upgraded"]
  disruption:
    prePull: true
"#,
        pool = s.pool,
    ));
    plans
        .create(&PostParams::default(), &plan)
        .await
        .expect("create the Plan");

    let failed = wait_reason(&plans, "pulled", PRE_PULL_FAILED, Duration::from_secs(600)).await;
    let message = complete_message(&failed);
    assert!(
        workers
            .iter()
            .any(|w| message.contains(&format!("node {w} cannot pull image {MISSING}:v1: "))),
        "{message}"
    );
    // The kubelet's own reason, as the pod's container says it.
    assert!(
        message.contains("ErrImagePull") || message.contains("ImagePullBackOff"),
        "{message}"
    );
    let jobs = Api::<Job>::namespaced(s.client.clone(), s.ns.name());
    assert!(
        jobs.list(&ListParams::default())
            .await
            .expect("list Jobs")
            .items
            .is_empty(),
        "no Job before every node has the images"
    );
    for w in workers {
        let node = Api::<Node>::all(s.client.clone())
            .get(w)
            .await
            .expect("the node");
        assert!(
            !node.spec.and_then(|sp| sp.unschedulable).unwrap_or(false),
            "{w} is not cordoned while the pull fails"
        );
    }
    let pods = pull_pods(&s).await;
    assert_eq!(pods.len(), 2, "a pull pod on each worker: {pods:?}");

    // An image the guests have: pulled at once, then the rollout.
    let fix = json!({"spec": {"version": "1.37", "upgrade": {"image": "busybox"}}});
    let fixed_at = std::time::Instant::now();
    plans
        .patch("pulled", &PatchParams::default(), &Patch::Merge(&fix))
        .await
        .expect("patch the Plan");
    // Two pulls side by side, then two Jobs one after the other, each cordoning its node first:
    // beside a full load of scenes an emulated guest took 5 minutes for the pulls alone (CI,
    // 2026-11-26). A bound on a hang, not a speed.
    let done = wait_complete(&plans, "pulled", Duration::from_secs(1500)).await;
    eprintln!(
        "pre-pull: both workers pulled and upgraded in {:?}",
        fixed_at.elapsed()
    );
    let status = done.status.clone().unwrap_or_default();
    let pull = status.pre_pull.clone().expect("the pull on record");
    assert_eq!(pull.phase, PrePullPhase::Pulled, "{pull:?}");
    assert_eq!(Some(&pull.hash), status.latest_hash.as_ref());
    assert_eq!((pull.nodes, pull.pulled), (2, 2));
    support::wait_for("no pull pod left", Duration::from_secs(120), || async {
        match pull_pods(&s).await {
            left if left.is_empty() => Ok(()),
            left => Err(anyhow!("left: {left:?}")),
        }
    })
    .await;
}

/// The names of the scene's pull pods.
async fn pull_pods(s: &Scene) -> Vec<String> {
    Api::<Pod>::namespaced(s.client.clone(), s.ns.name())
        .list(&ListParams::default().labels(PRE_PULL_LABEL))
        .await
        .expect("list pods")
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect()
}

/// The next node of a Plan of concurrency 1 is tainted while it waits, its taint goes when the
/// Plan takes it, and once the Plan is done no node of the pool keeps the taint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_node_prefers_no_new_pods_until_it_is_taken() {
    let Some(s) = Scene::new("next-up").nodes(3).start().await else {
        return;
    };
    let _controller = ControllerProcess::start(&s.cluster, s.ns.name(), &[]);
    let plans = s.ns.api::<Plan>();
    let plan = plan_from_yaml(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: next
  annotations:
    {delay}: "6s"
spec:
  concurrency: 1
  version: v1
  serviceAccountName: default
  nodeSelector:
    matchLabels:
      {POOL_LABEL}: {pool}
  upgrade:
    image: rancher/k3s-upgrade
  disruption:
    preferNoSchedule: true
"#,
        delay = support::COMPLETE_DELAY_ANNOTATION,
        pool = s.pool,
    ));
    let nodes = Api::<Node>::all(s.client.clone());
    // Every change of the pool's nodes and of the Plan, in the order they arrive, until the Plan
    // is done: which nodes were next before they were taken, and which lost the taint while
    // taken. Watched, not polled: a node is next for one Job's run only (about 6 s), which a poll
    // can miss on a loaded machine.
    enum Seen {
        Node(String, bool),
        Plan(Box<Plan>),
    }
    let node_changes = watcher(
        nodes.clone(),
        watcher::Config::default().labels(&format!("{POOL_LABEL}={}", s.pool)),
    )
    .applied_objects()
    .map_ok(|n| Seen::Node(n.name_any(), tainted(&n)));
    let plan_changes = watcher(
        plans.clone(),
        watcher::Config::default().fields("metadata.name=next"),
    )
    .applied_objects()
    .map_ok(|p| Seen::Plan(Box::new(p)));
    let mut changes = futures::stream::select(node_changes.boxed(), plan_changes.boxed());
    plans
        .create(&PostParams::default(), &plan)
        .await
        .expect("create the Plan");
    let (mut next_before, mut freed_while_taken, mut taken) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let (mut is_tainted, mut applying) = (BTreeMap::new(), Vec::new());
    let mut last = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        let change = tokio::time::timeout_at(deadline, changes.next()).await;
        let Ok(Some(change)) = change else {
            panic!("the Plan not complete within 180 s: {last:?}");
        };
        match change.expect("the watches") {
            Seen::Node(name, t) => {
                is_tainted.insert(name, t);
            }
            Seen::Plan(plan) => {
                applying = (plan.status.as_ref())
                    .map(|st| st.applying.clone())
                    .unwrap_or_default();
                if support::plans::is_complete(&plan) {
                    break;
                }
                last = Some(complete_message(&plan));
            }
        }
        for n in &s.nodes {
            let is_taken = applying.contains(n);
            if is_taken {
                taken.insert(n.clone());
            }
            match (is_tainted.get(n).copied().unwrap_or(false), is_taken) {
                (true, false) if !taken.contains(n) => next_before.insert(n.clone()),
                (false, true) => freed_while_taken.insert(n.clone()),
                _ => false,
            };
        }
    }
    assert!(
        next_before.len() >= 2,
        "the second and third nodes were tainted while they waited: {next_before:?}"
    );
    assert!(
        next_before.is_subset(&freed_while_taken),
        "a node taken loses the taint: next {next_before:?}, freed {freed_while_taken:?}"
    );
    support::wait_for("no node left tainted", Duration::from_secs(120), || async {
        let mut left = Vec::new();
        for n in &s.nodes {
            if tainted(&nodes.get(n).await?) {
                left.push(n.clone());
            }
        }
        match left.is_empty() {
            true => Ok(()),
            false => Err(anyhow!("tainted: {left:?}")),
        }
    })
    .await;
}

fn tainted(node: &Node) -> bool {
    (node.spec.iter())
        .flat_map(|s| s.taints.iter().flatten())
        .any(|t| t.key == slipway::node::next::NEXT_TAINT && t.effect == "PreferNoSchedule")
}
