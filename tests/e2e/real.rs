//! Scenes on real nodes: QEMU guests with a real kubelet, containerd and kube-proxy
//! ([`crate::support::real`]), where an upgrade Job runs its script on the host, a drain evicts pods
//! that really run, and a reboot restarts the machine. One scene at a time on each set of guests;
//! they start before the other scenes, as they take longest.
//!
//! The guests are `real-cp` (control-plane, tainted) and `real-w` on the installs' cluster, and a
//! pair of workers on the shared cluster (`real-1`, `real-2`, or `real-3`, `real-4` when the run has
//! two pairs: [`crate::support::scene::Scene::workers`]). Their kubelet reports
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
use crate::support::process::ChildProcess;
use crate::support::scene::{POOL_LABEL, Scene};

/// The node's boot ID, whether it is Ready, and its OS image, read now.
pub(crate) async fn node_state(client: &Client, name: &str) -> (String, bool, String) {
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
pub(crate) async fn jobs_by_node(s: &Scene, plan: &str) -> BTreeMap<String, Job> {
    let jobs =
        s.ns.api::<Job>()
            .list(&ListParams::default().labels(&format!("upgrade.cattle.io/plan={plan}")))
            .await
            .expect("list the Plan's Jobs");
    (jobs.items.into_iter())
        .filter_map(|j| Some((j.labels().get("upgrade.cattle.io/node")?.clone(), j)))
        .collect()
}

/// The ServiceAccount `drainer` of the scene's namespace with SUC's drainer rights: a Plan's Jobs
/// cordon and drain as their Plan's ServiceAccount, with real RBAC on real nodes.
pub(crate) async fn drainer_account(s: &Scene) {
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
"#,
                ns = s.ns.name()
            )),
        )
        .await
        .expect("the drainer account");
}

/// A Plan with `spec.reboot` whose Job writes a new OS name on the host: each worker reboots for
/// real (a new boot ID), comes back Ready reporting the new `osImage`, and the next node's Job is
/// created only after the first is back; no node is left cordoned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_reboots_each_node_for_real_one_after_the_other() {
    let Some(s) = Scene::new("real-reboot").real_nodes().start().await else {
        return;
    };
    let workers = s.workers();
    drainer_account(&s).await;
    let _controller = ControllerProcess::start(&s.cluster, s.ns.name(), &[]);
    let mut before = BTreeMap::new();
    for n in workers {
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
  serviceAccountName: drainer
  nodeSelector:
    matchLabels:
      {POOL_LABEL}: {pool}
    matchExpressions:
    - {{key: node-role.kubernetes.io/control-plane, operator: DoesNotExist}}
  upgrade:
    image: busybox:1.37
    command: [sh, -c]
    args: [{script}]
  reboot:
    timeout: 10m
"#,
        pool = s.pool,
        script = serde_json::to_string(&script).expect("a JSON string"),
    ));
    s.ns.api::<Plan>()
        .create(&PostParams::default(), &plan)
        .await
        .expect("create the Plan");

    // Until the first node to start is back: the Jobs are read before the node, so a Job of the
    // other node seen while the first is still not back was created before it came back (once
    // back, a node stays back).
    let started = Instant::now();
    let first = support::wait_for("the first Job", Duration::from_secs(120), || async {
        match jobs_by_node(&s, "os").await.into_keys().next() {
            Some(first) => Ok(first),
            None => Err(anyhow!("no Job yet")),
        }
    })
    .await;
    let second = workers
        .iter()
        .find(|n| **n != first)
        .expect("two workers")
        .to_string();
    loop {
        let jobs = jobs_by_node(&s, "os").await;
        let (boot, ready, _) = node_state(&s.client, &first).await;
        if boot != before[&first] && ready {
            break;
        }
        assert!(
            !jobs.contains_key(&second),
            "{second}'s Job was created while {first} had not come back from its reboot"
        );
        let plan = s.ns.api::<Plan>().get("os").await.expect("the Plan");
        let reason = support::plans::condition_reason(&plan, "Complete");
        assert!(
            !matches!(reason.as_deref(), Some("JobFailed" | "RebootTimedOut")),
            "{}",
            complete_message(&plan)
        );
        // Generous: under emulation beside CI's other scenes, a node's Job, reboot and return
        // took 8 minutes (about one idle).
        assert!(
            started.elapsed() < Duration::from_secs(1200),
            "{first} did not come back: boot {boot}, Ready {ready}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let took = started.elapsed();
    let done = wait_complete(&s.ns.api::<Plan>(), "os", Duration::from_secs(1200)).await;
    eprintln!(
        "real: {first} upgraded and back from its reboot in {took:?}, both in {:?}",
        started.elapsed()
    );
    for n in workers {
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
    let workers = s.workers();
    drainer_account(&s).await;
    s.cluster
        .kubectl_stdin(
            &["apply", "-f", "-"],
            Some(&support::real::sleepers(
                s.ns.name(),
                "web",
                2,
                // The scene's nodes are its real nodes; the control-plane node is tainted.
                &format!("      nodeSelector: {{{POOL_LABEL}: {}}}", s.pool),
                Some(1),
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
    let first_pods = support::wait_for("two Ready pods", Duration::from_secs(600), || async {
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
            started.elapsed() < Duration::from_secs(1200),
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
            Duration::from_secs(300),
            || async {
                match pods.get_opt(pod).await? {
                    None => Ok(()),
                    Some(p) => bail!("still there: {:?}", p.status.and_then(|s| s.phase)),
                }
            },
        )
        .await;
    }
    let now = support::wait_for("two Ready pods again", Duration::from_secs(600), || async {
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
            workers.contains(&node.as_str()),
            "{pod} runs on a worker: {node}"
        );
    }
}

// --- slipway installed as a user would, on the installs' cluster -----------------------------

/// The versions the upgrade image carries, in the order a scene picks them.
const KUBELETS: [&str; 3] = ["v1.34.2", "v1.34.3", "v1.34.1"];
/// The ServiceAccount of the install's Jobs.
const JOBS_USER: &str = "system:serviceaccount:system-upgrade:system-upgrade";
/// The ServiceAccount of the install's controller.
const CONTROLLER_USER: &str = "system:serviceaccount:system-upgrade:system-upgrade-controller";

fn repo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The nodes' kubelet versions, read now.
async fn kubelet_versions(client: &Client, names: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for n in names {
        // A read that fails (an API server busy beside CI's scenes) is not a version: the
        // callers look again, or say what they read.
        let v = match Api::<Node>::all(client.clone()).get(n).await {
            Ok(node) => (node.status.and_then(|s| s.node_info))
                .map(|i| i.kubelet_version)
                .unwrap_or_default(),
            Err(e) => format!("unread: {e}"),
        };
        out.insert(n.clone(), v);
    }
    out
}

/// A version none of the nodes runs: the upgrade then changes every node.
async fn next_version(client: &Client, names: &[String]) -> &'static str {
    let now = support::wait_for(
        "every node's version read",
        Duration::from_secs(60),
        || async {
            let now = kubelet_versions(client, names).await;
            match now.values().any(|v| v.starts_with("unread: ")) {
                true => Err(format!("{now:?}")),
                false => Ok(now),
            }
        },
    )
    .await;
    KUBELETS
        .into_iter()
        .find(|v| now.values().all(|n| n != v))
        .expect("a version no node runs")
}

/// The control-plane node as a k3s server is: labelled `node-role.kubernetes.io/control-plane:
/// "true"` (the k3s docs' Plans select that value) and not tainted. The scene's end puts back the
/// kubeadm-style label and taint ([`crate::support::real::give_back`]).
async fn as_a_k3s_server(s: &Scene) {
    s.cluster
        .kubectl(&[
            "label",
            "node",
            support::real::CONTROL_PLANE,
            "--overwrite",
            "node-role.kubernetes.io/control-plane=true",
        ])
        .await
        .expect("label the server");
    s.cluster
        .kubectl(&[
            "taint",
            "node",
            support::real::CONTROL_PLANE,
            "node-role.kubernetes.io/control-plane:NoSchedule-",
        ])
        .await
        .expect("untaint the server");
}

/// examples/k3s-stable.yaml, the k3s docs' server and agent Plans, as they are but for the
/// upgrade image (ours replaces the kubelet, as k3s-upgrade replaces k3s, and makes the same
/// calls in its prepare step) and a pinned `version` instead of the release channel, which is on
/// the internet.
fn k3s_pair(version: &str) -> String {
    let text = std::fs::read_to_string(repo().join("examples/k3s-stable.yaml"))
        .expect("examples/k3s-stable.yaml");
    assert_eq!(
        text.matches("image: rancher/k3s-upgrade").count(),
        3,
        "{text}"
    );
    text.replace(
        "image: rancher/k3s-upgrade",
        "image: slipway.test/kubelet-upgrade",
    )
    .replace(
        "channel: https://update.k3s.io/v1-release/channels/stable",
        &format!("version: {version}"),
    )
}

/// Applies the k3s pair and follows it: every node reports `version`, each agent only after the
/// server did, both Plans complete. Returns how long it took.
async fn upgrade_the_k3s_pair(s: &Scene, version: &str) -> Duration {
    let started = Instant::now();
    s.cluster
        .kubectl_stdin(&["apply", "-f", "-"], Some(&k3s_pair(version)))
        .await
        .expect("apply the k3s pair");
    let server = support::real::CONTROL_PLANE.to_string();
    let mut upgraded_at: BTreeMap<String, Instant> = BTreeMap::new();
    loop {
        let now = kubelet_versions(&s.client, &s.real).await;
        for (n, v) in &now {
            if v == version {
                upgraded_at.entry(n.clone()).or_insert_with(Instant::now);
            }
        }
        if upgraded_at.len() == s.real.len() {
            break;
        }
        let plans = Api::<Plan>::namespaced(s.client.clone(), support::install::NS);
        let mut said = Vec::new();
        for p in ["server-plan", "agent-plan"] {
            if let Ok(plan) = plans.get(p).await {
                said.push(format!("{p}: {}", complete_message(&plan)));
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(1500),
            "not every node reports {version}: {now:?}; {said:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for (n, at) in &upgraded_at {
        if *n != server {
            assert!(
                *at > upgraded_at[&server],
                "the agent {n} was upgraded before the server {server}"
            );
        }
    }
    let plans = Api::<Plan>::namespaced(s.client.clone(), support::install::NS);
    for p in ["server-plan", "agent-plan"] {
        wait_complete(&plans, p, Duration::from_secs(600)).await;
    }
    started.elapsed()
}

/// The requests of the ServiceAccount `user` (the install's controller or its Jobs) in the
/// cluster's audit log since `since`: (verb, resource, name, code) of each.
fn service_account_requests(
    s: &Scene,
    user: &str,
    since: jiff::Timestamp,
) -> Vec<(String, String, String, i64)> {
    let dir = support::real::cluster_dir(&s.cluster);
    let text = std::fs::read_to_string(dir.join("logs/audit.log")).unwrap_or_default();
    let mut out = Vec::new();
    for line in text.lines().filter(|l| l.contains(user)) {
        let Ok(ev) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let at = ev["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok());
        if ev["user"]["username"] != user || at.is_none_or(|t| t < since) {
            continue;
        }
        let obj = &ev["objectRef"];
        let resource = match obj["subresource"].as_str() {
            Some(sub) => format!("{}/{sub}", obj["resource"].as_str().unwrap_or("")),
            None => obj["resource"].as_str().unwrap_or("").to_string(),
        };
        out.push((
            ev["verb"].as_str().unwrap_or("").to_string(),
            resource,
            obj["name"].as_str().unwrap_or("").to_string(),
            ev["responseStatus"]["code"].as_i64().unwrap_or(0),
        ));
    }
    out
}

/// What an install's proof on real nodes checks of its ServiceAccounts' requests, each account
/// apart: none refused, and the Jobs' calls made with the Jobs' account (the prepare step's reads
/// of the server Plan and of the control-plane nodes, the cordons), not the controller's.
/// `controller_user` is the account the controller ran as (SUC runs as its Jobs' own).
fn every_request_granted(s: &Scene, since: jiff::Timestamp, controller_user: &str) {
    let controller = service_account_requests(s, controller_user, since);
    let refused: Vec<_> = controller.iter().filter(|r| r.3 == 403).collect();
    assert!(
        refused.is_empty(),
        "requests of {controller_user} refused: {refused:?}"
    );
    assert!(
        !controller.is_empty(),
        "the controller ran as {controller_user}"
    );
    let requests = service_account_requests(s, JOBS_USER, since);
    let refused: Vec<_> = requests.iter().filter(|r| r.3 == 403).collect();
    assert!(
        refused.is_empty(),
        "requests of {JOBS_USER} refused: {refused:?}"
    );
    let made = |verb: &str, resource: &str, name: &str| {
        requests
            .iter()
            .any(|r| r.0 == verb && r.1 == resource && (name.is_empty() || r.2 == name))
    };
    assert!(
        made("get", "plans", "server-plan"),
        "the agent's prepare step read the server Plan"
    );
    assert!(
        made("list", "nodes", ""),
        "and listed the control-plane nodes"
    );
    assert!(made("patch", "nodes", ""), "the Jobs cordoned their nodes");
}

/// The installs' cluster for a k3s pair scene, its control-plane node a k3s server, no earlier
/// install left; and when the scene's requests start (for the audit log).
async fn k3s_pair_scene(name: &str) -> Option<(Scene, jiff::Timestamp)> {
    let s = Scene::new(name)
        .own_cluster(support::real::INSTALLS)
        .real_nodes()
        .start()
        .await?;
    support::install::wait_for_earlier_removal(&s.cluster).await;
    as_a_k3s_server(&s).await;
    Some((s, jiff::Timestamp::now()))
}

/// The k3s docs' server and agent Plans upgrade every node under the controller installed by
/// `under` (the server before the agents, [`upgrade_the_k3s_pair`]), and no request of the
/// install's ServiceAccount since `since` was refused ([`every_request_granted`]).
async fn the_k3s_pair_upgrades(
    s: &Scene,
    since: jiff::Timestamp,
    under: &str,
    controller_user: &str,
) {
    let version = next_version(&s.client, &s.real).await;
    let took = upgrade_the_k3s_pair(s, version).await;
    eprintln!("real: the k3s pair under {under}: every node at {version} in {took:?}");
    every_request_granted(s, since, controller_user);
}

/// The k3s docs' server and agent Plans under slipway installed by `helm install` of
/// charts/slipway (the Jobs' pull policy `IfNotPresent` as a value), its controller a real pod on
/// the control-plane node: the server's kubelet is replaced first, then the agent's (its prepare
/// step reads the server Plan and the control-plane nodes with the Jobs' ServiceAccount), and no
/// request of that ServiceAccount is refused. deploy/'s RBAC is the same objects
/// (tests/offline/chart.rs renders both and compares them exactly) and the quick start below
/// installs deploy/'s build on these nodes, so this scene stands for both installs. Then the uninstall the chart's
/// README gives, pasted as an operator would, finishes and leaves nothing the chart made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_k3s_pair_upgrades_server_then_agents_under_the_charts_rbac() {
    let Some((s, since)) = k3s_pair_scene("k3s-chart").await else {
        return;
    };
    let mut install = support::install::Install::new(&s.cluster).await;
    install
        .helm_install_air_gapped(&s.cluster, &repo().join("charts/slipway"))
        .await;
    let _ = controller_pod_runs_on_the_server(&s).await;
    the_k3s_pair_upgrades(&s, since, "the chart's RBAC", CONTROLLER_USER).await;
    install.uninstall_as_the_chart_readme_says(&s.cluster).await;
}

/// The same pair under system-upgrade-controller v0.20.1 itself, as a process on the host with a
/// token of the ServiceAccount `system-upgrade` bound as SUC's own manifests bind it (applied
/// from its module, but for its Deployment), its Jobs running as that ServiceAccount, as the k3s
/// docs' Plans say. Its environment is its ConfigMap's, with one change for nodes that reach no
/// registry: the Jobs' pull policy `IfNotPresent` (SUC's manifest says `Always`). The same
/// outcome as slipway's: every node at the new version, the server first, nothing refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_k3s_pair_upgrades_server_then_agents_under_suc() {
    // Built (or found in the cache) before the scene takes the cluster.
    let suc = tokio::task::spawn_blocking(crate::compat::suc_binary)
        .await
        .expect("build SUC");
    let Some((s, since)) = k3s_pair_scene("k3s-suc").await else {
        return;
    };
    let mut install = support::install::Install::new(&s.cluster).await;
    let manifests = crate::compat::suc_manifests(&s.cluster).await;
    install
        .apply_air_gapped(&s.cluster, &manifests, "SUC's manifests")
        .await;
    let env = config_map_data(&support::install::air_gapped(&manifests));
    let token = s
        .cluster
        .kubectl(&[
            "-n",
            support::install::NS,
            "create",
            "token",
            "system-upgrade",
            "--duration=2h",
        ])
        .await
        .expect("a token of SUC's ServiceAccount");
    let dir = support::real::cluster_dir(&s.cluster);
    let kubeconfig = dir.join(format!("{}-suc.kubeconfig", s.ns.name()));
    support::token_kubeconfig(s.cluster.kubeconfig_path(), &token, &kubeconfig);
    // As SUC's Deployment gives it: the ConfigMap, then its name, namespace and node.
    let _suc = ChildProcess::new(suc, dir.join(format!("logs/{}-suc.log", s.ns.name())))
        .envs(env)
        .env(
            "SYSTEM_UPGRADE_CONTROLLER_NAME",
            "system-upgrade-controller",
        )
        .env("SYSTEM_UPGRADE_CONTROLLER_NAMESPACE", support::install::NS)
        .env(
            "SYSTEM_UPGRADE_CONTROLLER_NODE_NAME",
            support::real::CONTROL_PLANE,
        )
        .env(
            "SYSTEM_UPGRADE_CONTROLLER_KUBE_CONFIG",
            kubeconfig.display().to_string(),
        )
        .started();
    the_k3s_pair_upgrades(&s, since, "SUC v0.20.1 and its RBAC", JOBS_USER).await;
    // SUC replaced the Plan CRD by its own; the scenes after this one expect the committed one.
    support::install_crd(&s.client).await;
}

/// The data of the ConfigMap in `manifest`.
fn config_map_data(manifest: &str) -> BTreeMap<String, String> {
    let docs = serde_saphyr::from_multiple::<serde_json::Value>(manifest).expect("YAML");
    let cm = (docs.iter())
        .find(|d| d["kind"] == "ConfigMap")
        .expect("a ConfigMap");
    (cm["data"].as_object().into_iter().flatten())
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
        .collect()
}

/// `command` with each `--timeout=<N>s` four times as long: the README's waits are for real
/// machines, and these nodes are emulated (beside CI's other scenes, the controller's pod took
/// more than the README's 2 minutes to be Ready).
fn stretched(command: &str) -> String {
    command
        .split(' ')
        .map(|word| {
            let seconds = word
                .strip_prefix("--timeout=")
                .and_then(|t| t.strip_suffix('s'))
                .and_then(|n| n.parse::<u64>().ok());
            match seconds {
                Some(n) => format!("--timeout={}s", n * 4),
                None => word.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The controller of an install: Ready, a real pod on the control-plane node; that pod.
pub(crate) async fn controller_pod_runs_on_the_server(s: &Scene) -> Pod {
    let pods = Api::<Pod>::namespaced(s.client.clone(), support::install::NS);
    support::wait_for(
        "the controller's pod Ready on the control-plane node",
        Duration::from_secs(600),
        || async {
            let list = pods
                .list(
                    &ListParams::default()
                        .labels("upgrade.cattle.io/controller=system-upgrade-controller"),
                )
                .await?;
            let ready = (list.items.iter()).find(|p| {
                (p.status.as_ref().and_then(|st| st.conditions.as_ref()))
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
            match ready.and_then(|p| Some((p, p.spec.as_ref()?.node_name.clone()?))) {
                Some((pod, node)) if node == support::real::CONTROL_PLANE => Ok(pod.clone()),
                other => bail!(
                    "ready on {:?}; pods {:?}",
                    other.map(|(_, node)| node),
                    list.items
                        .iter()
                        .map(|p| (
                            p.name_any(),
                            p.status.as_ref().and_then(|s| s.phase.clone())
                        ))
                        .collect::<Vec<_>>()
                ),
            }
        },
    )
    .await
}

/// The README's quick start on real nodes, as a user follows it on a cluster whose control-plane
/// node is tainted as kind's is: `kubectl apply -f dist/slipway.yaml` (its Jobs' pull policy
/// `IfNotPresent`: the nodes reach no registry), the rollout wait, examples/quickstart/hello.yaml,
/// the watch command in another terminal, and the wait for the Plan. The Plan's Job runs on
/// every node, the tainted control-plane node too; every node carries the Plan's label; the watch
/// still runs and has shown each node's Job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quick_start_runs_on_real_nodes() {
    let Some(s) = Scene::new("quickstart-real")
        .own_cluster(support::real::INSTALLS)
        .real_nodes()
        .start()
        .await
    else {
        return;
    };
    support::install::wait_for_earlier_removal(&s.cluster).await;
    let started = Instant::now();
    let server = Api::<Node>::all(s.client.clone())
        .get(support::real::CONTROL_PLANE)
        .await
        .expect("the control-plane node");
    assert!(
        (server.spec.and_then(|sp| sp.taints).into_iter().flatten())
            .any(|t| t.key == "node-role.kubernetes.io/control-plane" && t.effect == "NoSchedule"),
        "the control-plane node is tainted as kind's is"
    );
    let readme = std::fs::read_to_string(repo().join("README.md")).expect("README.md");
    let blocks = crate::quickstart::quickstart_blocks(&readme);
    let watches = crate::quickstart::marked_blocks(&readme, "<!-- quickstart: watch -->");
    assert_eq!(
        (blocks.len(), watches.len()),
        (3, 1),
        "the quick start: install, a first Plan, its wait; and the watch"
    );
    const INSTALL: &str = "kubectl apply -f dist/slipway.yaml";
    assert_eq!(
        blocks[0][0], INSTALL,
        "the quick start installs dist/slipway.yaml"
    );
    let mut install = support::install::Install::new(&s.cluster).await;
    // The Plan goes with the namespace, its finalizer with it (no controller is left to remove
    // it once the install is gone).
    let dist =
        std::fs::read_to_string(repo().join("dist/slipway.yaml")).expect("dist/slipway.yaml");
    let mut watching = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        for command in block {
            eprintln!("quickstart$ {command}");
            if command == INSTALL {
                install.apply_air_gapped(&s.cluster, &dist, INSTALL).await;
                continue;
            }
            let out = crate::quickstart::shell(&s.cluster, &stretched(command)).await;
            eprint!("{out}");
        }
        // In another terminal once the install is there.
        if i == 0 {
            for command in &watches[0] {
                eprintln!("quickstart (another terminal)$ {command}");
                let log = support::real::cluster_dir(&s.cluster).join(format!(
                    "logs/{}-watch-{}.log",
                    s.ns.name(),
                    watching.len()
                ));
                let watch = ChildProcess::new("bash", log)
                    // exec: the process killed at the end is kubectl itself.
                    .args(["-c", &format!("exec {command}")])
                    .env(
                        "KUBECONFIG",
                        s.cluster.kubeconfig_path().display().to_string(),
                    )
                    .started();
                watching.push(watch);
            }
        }
    }
    eprintln!(
        "real: the quick start on real nodes in {:?}",
        started.elapsed()
    );
    let nodes = kubelet_versions(&s.client, &s.real).await;
    for n in nodes.keys() {
        let node = Api::<Node>::all(s.client.clone())
            .get(n)
            .await
            .expect("node");
        assert!(
            node.labels().contains_key("plan.upgrade.cattle.io/hello"),
            "{n} carries the Plan's label"
        );
    }
    for mut watch in watching {
        let shown = watch.log();
        let ended = watch.wait_exit(Duration::from_millis(100)).await;
        assert!(ended.is_none(), "the watch ended ({ended:?}): {shown}");
        for n in &s.real {
            assert!(
                shown.contains(&format!("apply-hello-on-{n}")),
                "the watch showed {n}'s Job: {shown}"
            );
        }
    }
    // Removed as docs/installation.md says, the Plan and the controller in one go: a Plan at rest
    // holds no finalizer, so nothing waits for the controller deleted with it.
    let docs = std::fs::read_to_string(repo().join("docs/installation.md")).expect("the docs");
    assert!(
        docs.contains("| the manifest | `kubectl delete -f dist/slipway.yaml` |"),
        "docs/installation.md removes the manifest's install with kubectl delete -f"
    );
    let hello = Api::<Plan>::namespaced(s.client.clone(), "system-upgrade")
        .get("hello")
        .await
        .expect("the quick start's Plan");
    assert_eq!(hello.finalizers(), &[] as &[String], "a Plan at rest");
    let removing = Instant::now();
    (install.delete_manifest(&s.cluster, &dist, "dist/slipway.yaml")).await;
    eprintln!(
        "real: kubectl delete -f dist/slipway.yaml in {:?}",
        removing.elapsed()
    );
}
