//! Scenes on real nodes: QEMU guests with a real kubelet, containerd and kube-proxy
//! ([`crate::support::real`]), where an upgrade Job runs its script on the host, a drain evicts pods
//! that really run, and a reboot restarts the machine. One scene at a time (one set of guests);
//! they start before the other scenes, as they take longest.
//!
//! The guests are `real-cp` (control-plane, tainted) and `real-1`, `real-2`. Their kubelet reports
//! v1.34.1 when the run starts; the upgrade image `slipway.test/kubelet-upgrade:<v>` replaces it
//! with v1.34.1, v1.34.2 or v1.34.3 and restarts it, as k3s-upgrade replaces and restarts k3s.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::{Client, ResourceExt};
use slipway::plan::api::Plan;

use crate::support::controller::ControllerProcess;
use crate::support::plans::{complete_message, plan_from_yaml, wait_complete};
use crate::support::real::WORKERS;
use crate::support::scene::{POOL_LABEL, Scene};

/// The node's boot ID, whether it is Ready, and its OS image, read now.
async fn node_state(client: &Client, name: &str) -> (String, bool, String) {
    let node = Api::<Node>::all(client.clone())
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get node {name}: {e}"));
    let ready = (node.status.as_ref().and_then(|s| s.conditions.as_ref()))
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let info = node.status.as_ref().and_then(|s| s.node_info.as_ref());
    let os = info.map(|i| i.os_image.clone()).unwrap_or_default();
    (support::boot_id(&node), ready, os)
}

/// The Jobs of Plan `plan` in the scene's namespace, by node.
async fn jobs_by_node(s: &Scene, plan: &str) -> BTreeMap<String, Job> {
    let jobs = s
        .ns
        .api::<Job>()
        .list(&ListParams::default().labels(&format!("upgrade.cattle.io/plan={plan}")))
        .await
        .expect("list the Plan's Jobs");
    (jobs.items.into_iter())
        .filter_map(|j| Some((j.labels().get("upgrade.cattle.io/node")?.clone(), j)))
        .collect()
}

fn created(job: &Job) -> jiff::Timestamp {
    job.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .expect("a Job has a creation time")
}

/// A Plan with `spec.reboot` whose Job writes a new OS name on the host: each worker reboots for
/// real (a new boot ID), comes back Ready reporting the new `osImage`, and the next node's Job is
/// created only after the first is back; no node is left cordoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_reboots_each_node_for_real_one_after_the_other() {
    let Some(s) = Scene::new("real-reboot").real_nodes().start().await else {
        return;
    };
    let _controller = ControllerProcess::start(&s.cluster, s.ns.name(), &[]);
    let mut before = BTreeMap::new();
    for n in WORKERS {
        before.insert(n.to_string(), node_state(&s.client, n).await.0);
    }
    let version = format!("r{}", &s.ns.name()[s.ns.name().len() - 5..]);
    let os = format!("Debian GNU/Linux 12 (slipway {version})");
    // The kubelet reads the OS name from /etc/os-release (a link to /usr/lib/os-release on
    // Debian) when it starts, so the node reports it after the reboot.
    let script = format!(
        "rm -f /host/etc/os-release && sed 's|^PRETTY_NAME=.*|PRETTY_NAME=\"{os}\"|' \
         /host/usr/lib/os-release > /host/etc/os-release && grep PRETTY_NAME /host/etc/os-release"
    );
    let plan: Plan = plan_from_yaml(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: os
spec:
  concurrency: 1
  version: {version}
  cordon: true
  serviceAccountName: default
  nodeSelector:
    matchLabels:
      {POOL_LABEL}: {pool}
    matchExpressions:
    - {{key: node-role.kubernetes.io/control-plane, operator: DoesNotExist}}
  upgrade:
    image: busybox:1.37
    command: [sh, -c]
    args: ['{script}']
  reboot:
    timeout: 10m
"#,
        pool = s.pool,
    ));
    s.ns.api::<Plan>()
        .create(&PostParams::default(), &plan)
        .await
        .expect("create the Plan");

    // Watch the first node to start until it is back; remember the last moment it was seen not
    // back yet: the other node's Job must come after that.
    let started = Instant::now();
    let (first, first_job) = support::wait_for(
        "the first Job",
        Duration::from_secs(120),
        || async {
            match jobs_by_node(&s, "os").await.into_iter().next() {
                Some(first) => Ok(first),
                None => Err(anyhow!("no Job yet")),
            }
        },
    )
    .await;
    let second = WORKERS
        .iter()
        .find(|n| **n != first)
        .expect("two workers")
        .to_string();
    let mut last_not_back = jiff::Timestamp::now();
    loop {
        let (boot, ready, _) = node_state(&s.client, &first).await;
        if boot != before[&first] && ready {
            break;
        }
        last_not_back = jiff::Timestamp::now();
        let jobs = jobs_by_node(&s, "os").await;
        assert!(
            !jobs.contains_key(&second),
            "{second}'s Job was created while {first} had not come back from its reboot"
        );
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "{first} did not come back: boot {boot}, Ready {ready}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let done = wait_complete(&s.ns.api::<Plan>(), "os", Duration::from_secs(600)).await;
    let jobs = jobs_by_node(&s, "os").await;
    let second_job = jobs.get(&second).expect("the second node's Job");
    assert!(
        created(second_job) > last_not_back,
        "{second}'s Job ({}) after {first} was back (seen not back at {last_not_back}); first Job {}",
        created(second_job),
        created(&first_job),
    );
    for n in WORKERS {
        let (boot, ready, reported) = node_state(&s.client, n).await;
        assert_ne!(boot, before[n], "{n} rebooted: a new boot ID");
        assert!(ready, "{n} is Ready");
        assert_eq!(reported, os, "{n} reports the OS the upgrade wrote");
        let node = Api::<Node>::all(s.client.clone())
            .get(n)
            .await
            .expect("the node");
        assert!(
            !node.spec.and_then(|sp| sp.unschedulable).unwrap_or(false),
            "{n} is not left cordoned; {}",
            complete_message(&done)
        );
    }
}

/// A Deployment of two pods that really run, under a PodDisruptionBudget that allows one of them
/// to be down, and a Plan that drains each worker: the budget is honoured (one pod Ready at every
/// moment), every pod of a drained node really ends, and the pods come back on the other node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_evicts_running_pods_through_their_budget() {
    let Some(s) = Scene::new("real-drain").real_nodes().start().await else {
        return;
    };
    // The drain runs in the Job, as the Plan's ServiceAccount: SUC's drainer rights.
    let drainer = s.name("drainer");
    s.cluster
        .kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&format!(
                r#"
apiVersion: v1
kind: ServiceAccount
metadata: {{name: drainer, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {{name: {drainer}}}
rules:
- {{apiGroups: [""], resources: [pods/eviction], verbs: [create]}}
- {{apiGroups: [""], resources: [pods], verbs: [get, list, delete]}}
- {{apiGroups: [""], resources: [nodes], verbs: [get, patch]}}
- {{apiGroups: [apps], resources: [statefulsets, daemonsets, replicasets], verbs: [get, list]}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {drainer}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: {drainer}}}
subjects: [{{kind: ServiceAccount, name: drainer, namespace: {ns}}}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 2
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      # The scene's nodes are its real nodes; the control-plane node is tainted.
      nodeSelector: {{{POOL_LABEL}: {pool}}}
      terminationGracePeriodSeconds: 5
      containers:
      - name: web
        image: busybox:1.37
        command: [sh, -c, "trap 'exit 0' TERM; while true; do sleep 1; done"]
        readinessProbe: {{exec: {{command: ["true"]}}, periodSeconds: 2}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: web, namespace: {ns}}}
spec:
  minAvailable: 1
  selector: {{matchLabels: {{app: web}}}}
"#,
                ns = s.ns.name(),
                pool = s.pool,
            )),
        )
        .await
        .expect("apply the workload");
    let pods = s.ns.api::<Pod>();
    let ready_pods = || async {
        let list = pods
            .list(&ListParams::default().labels("app=web"))
            .await?
            .items;
        let ready: Vec<(String, String)> = (list.iter())
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| {
                (p.status.as_ref().and_then(|s| s.conditions.as_ref()))
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
            .map(|p| {
                let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
                (p.name_any(), node.unwrap_or_default())
            })
            .collect();
        anyhow::Ok(ready)
    };
    let first_pods = support::wait_for("two Ready pods", Duration::from_secs(300), || async {
        let ready = ready_pods().await?;
        match ready.len() {
            2 => Ok(ready),
            n => bail!("{n} Ready: {ready:?}"),
        }
    })
    .await;

    let _controller = ControllerProcess::start(&s.cluster, s.ns.name(), &[]);
    let plan = plan_from_yaml(&format!(
        r#"
apiVersion: upgrade.cattle.io/v1
kind: Plan
metadata:
  name: drained
spec:
  concurrency: 1
  version: v1
  serviceAccountName: drainer
  drain:
    force: false
    ignoreDaemonSets: true
    deleteEmptydirData: true
    timeout: 5m
  nodeSelector:
    matchLabels:
      {POOL_LABEL}: {pool}
    matchExpressions:
    - {{key: node-role.kubernetes.io/control-plane, operator: DoesNotExist}}
  upgrade:
    image: busybox:1.37
    command: [sh, -c, "echo drained"]
"#,
        pool = s.pool,
    ));
    s.ns.api::<Plan>()
        .create(&PostParams::default(), &plan)
        .await
        .expect("create the Plan");
    let mut seen_pods = std::collections::BTreeSet::new();
    let started = Instant::now();
    loop {
        let ready = ready_pods().await.expect("list the pods");
        assert!(
            !ready.is_empty(),
            "the budget allows one pod down, never both: none Ready"
        );
        seen_pods.extend(ready.iter().map(|(p, _)| p.clone()));
        let plan = s.ns.api::<Plan>().get("drained").await.expect("the Plan");
        if support::plans::is_complete(&plan) {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "the drains did not finish: {}",
            complete_message(&plan)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Each worker was drained: the pods that ran at first were evicted and really ended, and
    // their replacements run on a node that had been drained already.
    for (pod, node) in &first_pods {
        support::wait_for(
            &format!("{pod} (on {node}) to end"),
            Duration::from_secs(120),
            || async {
                match pods.get_opt(pod).await? {
                    None => Ok(()),
                    Some(p) => bail!("still there: {:?}", p.status.and_then(|s| s.phase)),
                }
            },
        )
        .await;
    }
    let now = support::wait_for("two Ready pods again", Duration::from_secs(300), || async {
        let ready = ready_pods().await?;
        match ready.len() {
            2 => Ok(ready),
            n => bail!("{n} Ready: {ready:?}"),
        }
    })
    .await;
    assert!(
        seen_pods.len() >= 4,
        "every pod was replaced at least once: {seen_pods:?}"
    );
    for (pod, node) in &now {
        assert!(
            WORKERS.contains(&node.as_str()),
            "{pod} runs on a worker: {node}"
        );
    }
}
