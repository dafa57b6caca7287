//! Support for slipway's end-to-end tests against a real local cluster (`tests/cluster/`).
//!
//! ```ignore
//! mod support;
//!
//! #[tokio::test]
//! async fn something() {
//!     let Some(cluster) = support::cluster().await else { return };
//!     let client = cluster.client().await;
//!     let ns = support::TestNamespace::create(&cluster, "something").await;
//!     let nodes = support::create_nodes(&client, "something", 2, &[("slipway.test/pool", "a")]).await;
//!     // ...
//!     support::delete_nodes(&client, &nodes).await;
//!     ns.cleanup().await;
//! }
//! ```
//!
//! Which cluster, decided once per test binary:
//! - `SLIPWAY_E2E=skip`: none; [`cluster`] prints a loud warning and returns `None`.
//! - `SLIPWAY_TEST_KUBECONFIG=<path>`: attach to that cluster (for example one from
//!   `just cluster-up`). Plain `KUBECONFIG` and `~/.kube/config` are never used: they could
//!   point at a real cluster.
//! - otherwise: `tests/cluster/up.sh 3` starts a private cluster for this test binary; a detached
//!   reaper tears it down once the test process exits, even after a panic or a kill.
//!
//! What else is here:
//! - [`controller::ControllerProcess`]: the `slipway run` of a test (start, kill, restart, stop
//!   with SIGTERM, its log), on [`process::ChildProcess`], which runs any other child process
//!   (`slipway agent`, system-upgrade-controller) the same way;
//! - the node's side of a reboot: [`simulate_reboot`], [`ask_reboot`], [`boot_id`];
//! - a Job step held as long as the scene needs: [`HOLD_LABEL`], [`release_held_pod`];
//! - [`plans`]: a Plan's conditions, and waiting for it to complete;
//! - [`jobwatch`]: a watch of a namespace's Jobs for a whole test;
//! - [`install::Install`]: deploy/ (or `dist/slipway.yaml`) installed as a user would, removed
//!   when the scene ends.
//!
//! `#[tokio::test]` gives every test its own runtime, and a kube `Client`'s connection pool is
//! bound to the runtime that made it. So only the kubeconfig path is shared; every test builds
//! its own client with [`Cluster::client`].
#![allow(dead_code)] // not every helper is used by a scene yet

pub mod alertmanager;
pub mod budgets;
pub mod checks;
pub mod controller;
pub mod install;
pub mod jobwatch;
pub mod plans;
pub mod process;
pub mod real;
pub mod reboots;
pub mod scene;
pub mod strict;
pub mod turns;

use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use serde_json::json;

/// Label put on every namespace made by [`TestNamespace`] and every node made by
/// [`create_nodes`], so leftovers can be found: `kubectl delete ns -l slipway.test/e2e`.
pub const E2E_LABEL: &str = "slipway.test/e2e";
/// Pod label understood by the cluster's kwok stages: the pod ends `Failed` (exit code 1).
pub const FAIL_LABEL: &str = "slipway.test/fail";
/// Pod label understood by the cluster's kwok stages: the pod stays `Running` until deleted.
pub const HOLD_LABEL: &str = "slipway.test/hold";
/// Pod annotation understood by the cluster's kwok stages: delay (a Go duration such as `"5s"`)
/// before a Running Job pod succeeds or fails; 1 s when absent.
pub const COMPLETE_DELAY_ANNOTATION: &str = "slipway.test/complete-delay";

/// From PATH: `./dev` puts the local cluster's own kubectl first.
const KUBECTL: &str = "kubectl";

/// A cluster the tests can use. Cheap to clone; holds no connection.
#[derive(Clone, Debug)]
pub struct Cluster {
    kubeconfig: PathBuf,
}

/// The cluster for this test binary, or `None` when end-to-end tests are skipped
/// (`SLIPWAY_E2E=skip`; the test should then return early). The first call may start a cluster
/// (and on a fresh machine build its binaries); later calls reuse it. Panics if the cluster cannot
/// be started or attached.
pub async fn cluster() -> Option<Cluster> {
    if std::env::var("SLIPWAY_E2E").as_deref() == Ok("skip") {
        warn_skipped();
        return None;
    }
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    let found = tokio::task::spawn_blocking(|| CLUSTER.get_or_init(find_or_start_cluster).clone())
        .await
        .expect("the task finding the test cluster panicked");
    match found {
        Ok(cluster) => Some(cluster),
        Err(e) => panic!("no test cluster: {e}"),
    }
}

/// The own clusters whose scenes install slipway on kwok: they get one kwok node, labelled
/// `node-role.kubernetes.io/control-plane` (as the shared cluster's first node is), where the
/// install's controller pod is scheduled. The installs' cluster has a real control-plane node.
const WITH_A_CONTROL_PLANE_NODE: [&str; 2] = ["rbac", "quickstart"];

/// The cluster `name` of this test binary's own (not the run's shared one), started by the first
/// call and torn down when the test process exits: for scenes that would disturb every scene of a
/// shared cluster ([`scene::SceneBuilder::own_cluster`]). `None` when end-to-end tests are skipped.
pub async fn own_cluster(name: &'static str) -> Option<Cluster> {
    if std::env::var("SLIPWAY_E2E").as_deref() == Ok("skip") {
        warn_skipped();
        return None;
    }
    type Clusters = std::collections::HashMap<&'static str, Arc<OnceLock<Result<Cluster, String>>>>;
    static OWN: std::sync::LazyLock<std::sync::Mutex<Clusters>> =
        std::sync::LazyLock::new(Default::default);
    let cell = OWN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(name)
        .or_default()
        .clone();
    let found = tokio::task::spawn_blocking(move || {
        cell.get_or_init(|| {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let nodes = usize::from(WITH_A_CONTROL_PLANE_NODE.contains(&name));
            start_cluster(nodes).map_err(|e| format!("{e:#}"))
        })
        .clone()
    })
    .await
    .expect("the task starting a cluster panicked");
    match found {
        Ok(cluster) => Some(cluster),
        Err(e) => panic!("no cluster {name}: {e}"),
    }
}

/// Stops the own cluster `name` (its guests too) once no scene is left for it
/// ([`turns::wanted`]); its directory goes with it. A failure is told, not raised: it runs as a
/// scene ends, maybe while it unwinds.
pub fn stop_own_cluster(cluster: &Cluster, name: &str) {
    let Some(dir) = cluster.kubeconfig_path().parent() else {
        return;
    };
    let down = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cluster/down.sh");
    match Command::new(&down)
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(status) if status.success() => {
            eprintln!("cluster {name}: stopped, no scene left for it")
        }
        other => eprintln!("cluster {name}: stopping it failed: {other:?}"),
    }
}

fn warn_skipped() {
    // Once per test binary, written to the stderr handle rather than with eprintln! so that the
    // test harness does not capture it.
    static WARNED: OnceLock<()> = OnceLock::new();
    if WARNED.set(()).is_ok() {
        let bar = "!".repeat(78);
        let _ = writeln!(
            std::io::stderr(),
            "\n{bar}\n!!! SLIPWAY_E2E=skip: END-TO-END TESTS ARE SKIPPED.\n\
             !!! They pass WITHOUT testing anything against a Kubernetes cluster.\n\
             !!! Unset SLIPWAY_E2E to run them (a local cluster is started automatically),\n\
             !!! or set SLIPWAY_TEST_KUBECONFIG to use a running one (`just cluster-up`).\n{bar}\n"
        );
    }
}

fn find_or_start_cluster() -> Result<Cluster, String> {
    // Installing twice is harmless; kube's rustls client needs a process-wide provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    if let Some(path) = std::env::var_os("SLIPWAY_TEST_KUBECONFIG") {
        let kubeconfig = PathBuf::from(path);
        if !kubeconfig.is_file() {
            return Err(format!(
                "SLIPWAY_TEST_KUBECONFIG={} is not a file",
                kubeconfig.display()
            ));
        }
        return Ok(Cluster { kubeconfig });
    }
    start_cluster(3).map_err(|e| format!("{e:#}"))
}

/// `tests/cluster/up.sh NODES`, torn down when this process exits.
fn start_cluster(nodes: usize) -> anyhow::Result<Cluster> {
    let up = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cluster/up.sh");
    let mut err = std::io::stderr();
    let _ = writeln!(
        err,
        "starting a local test cluster with {} (set SLIPWAY_TEST_KUBECONFIG to reuse a running one)",
        up.display()
    );
    let output = Command::new("bash")
        .arg(&up)
        .arg(nodes.to_string())
        .env("SLIPWAY_CLUSTER_OWNER_PID", std::process::id().to_string())
        .env_remove("SLIPWAY_CLUSTER_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", up.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "{} failed ({}); its messages are above. stdout: {stdout}",
            up.display(),
            output.status
        );
    }
    let kubeconfig = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("export KUBECONFIG="))
        .next_back()
        .with_context(|| {
            format!(
                "{} printed no `export KUBECONFIG=` line: {stdout}",
                up.display()
            )
        })?;
    Ok(Cluster {
        kubeconfig: PathBuf::from(kubeconfig.trim()),
    })
}

impl Cluster {
    /// The admin kubeconfig of the cluster.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// A new client for the calling test's runtime (do not share clients between tests).
    pub async fn client(&self) -> Client {
        self.try_client().await.unwrap_or_else(|e| {
            panic!(
                "cannot build a client from {}: {e:#}",
                self.kubeconfig.display()
            )
        })
    }

    /// Like [`Cluster::client`], returning the error.
    pub async fn try_client(&self) -> anyhow::Result<Client> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig)?;
        let config =
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        Ok(Client::try_from(config)?)
    }

    /// Runs `kubectl --kubeconfig <this cluster> ARGS...` and returns its stdout;
    /// fails with stderr when it exits non-zero.
    pub async fn kubectl(&self, args: &[&str]) -> anyhow::Result<String> {
        self.kubectl_stdin(args, None).await
    }

    /// Like [`Cluster::kubectl`], feeding `stdin` to the command (for `apply -f -`).
    pub async fn kubectl_stdin(
        &self,
        args: &[&str],
        stdin: Option<&str>,
    ) -> anyhow::Result<String> {
        let kubeconfig = self.kubeconfig.clone();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let stdin = stdin.map(str::to_owned);
        tokio::task::spawn_blocking(move || run_kubectl(&kubeconfig, &args, stdin.as_deref()))
            .await
            .context("the kubectl task panicked")?
    }
}

fn run_kubectl(kubeconfig: &Path, args: &[String], stdin: Option<&str>) -> anyhow::Result<String> {
    let mut child = Command::new(KUBECTL)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {KUBECTL}"))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())
            .context("writing kubectl's stdin")?;
    }
    let out = child.wait_with_output().context("waiting for kubectl")?;
    if !out.status.success() {
        bail!(
            "kubectl {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A kubeconfig for the cluster of `admin` that authenticates with `token` (a ServiceAccount's,
/// from `kubectl create token`), written to `out`.
pub fn token_kubeconfig(admin: &Path, token: &str, out: &Path) {
    let kc = Kubeconfig::read_from(admin).expect("admin kubeconfig");
    let cluster = kc.clusters[0].cluster.clone().expect("cluster");
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {
            "server": cluster.server,
            "certificate-authority-data": cluster.certificate_authority_data,
        }}],
        "users": [{"name": "token", "user": {"token": token.trim()}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "token"}}],
        "current-context": "test",
    });
    std::fs::write(out, serde_json::to_string_pretty(&config).expect("json"))
        .expect("write the token kubeconfig");
}

/// A namespace for one test, named `t-<test>-<random>` and labelled [`E2E_LABEL`]. Call
/// [`TestNamespace::cleanup`] at the end; if the test panics first, `Drop` deletes the namespace
/// with kubectl (without waiting).
pub struct TestNamespace {
    name: String,
    kubeconfig: PathBuf,
    client: Client,
    cleaned: bool,
}

impl TestNamespace {
    /// Creates the namespace. `test` is a short name of the test (sanitized and shortened).
    pub async fn create(cluster: &Cluster, test: &str) -> TestNamespace {
        let client = cluster.client().await;
        let name = unique_name(&format!("t-{test}"));
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([(E2E_LABEL.to_owned(), "true".to_owned())])),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating test namespace {name}: {e}"));
        TestNamespace {
            name,
            kubeconfig: cluster.kubeconfig.clone(),
            client,
            cleaned: false,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The client this namespace was created with (built in the calling test's runtime).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// `Api<K>` for this namespace.
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// The reasons of the namespace's core/v1 Events, in no particular order.
    pub async fn event_reasons(&self) -> Vec<String> {
        let events = self.api::<k8s_openapi::api::core::v1::Event>();
        let list = events
            .list(&kube::api::ListParams::default())
            .await
            .expect("list events");
        list.items.into_iter().filter_map(|e| e.reason).collect()
    }

    /// Deletes the namespace (background deletion; does not wait for it to be gone).
    pub async fn cleanup(mut self) {
        self.cleaned = true;
        match Api::<Namespace>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("deleting test namespace {}: {e}", self.name),
        }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if self.cleaned {
            return;
        }
        // No async here (we may be unwinding inside a runtime), so kubectl it is.
        let _ = Command::new(KUBECTL)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args([
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// A fake (kwok) node like the ones `tests/cluster/up.sh` creates: labels
/// `kubernetes.io/hostname=<name>`, `kubernetes.io/os=linux`, `kubernetes.io/arch=amd64`,
/// `type=kwok`, [`E2E_LABEL`] and `extra_labels`; annotation `kwok.x-k8s.io/node=fake`;
/// allocatable/capacity cpu 32, memory 256Gi, pods 110; `status.nodeInfo` with a random bootID,
/// kubeletVersion v1.34.4; no taints. Status is kept by the API server on create.
/// Modify it before [`create_node_objects`] to test other kubelet versions, taints, etc.
pub fn fake_node(name: &str, extra_labels: &[(&str, &str)]) -> Node {
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), name.to_owned()),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
        ("type".to_owned(), "kwok".to_owned()),
        (E2E_LABEL.to_owned(), "true".to_owned()),
    ]);
    for (k, v) in extra_labels {
        labels.insert((*k).to_owned(), (*v).to_owned());
    }
    let resources = json!({"cpu": "32", "memory": "256Gi", "pods": "110"});
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "kwok.x-k8s.io/node": "fake",
                "node.alpha.kubernetes.io/ttl": "0",
            },
        },
        "spec": {},
        "status": {
            "allocatable": resources,
            "capacity": resources,
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": random_uuid(),
                "machineID": random_uuid().replace('-', ""),
                "systemUUID": random_uuid(),
                "containerRuntimeVersion": "containerd://1.7.0-kwok",
                "kernelVersion": "6.1.0-kwok",
                "kubeProxyVersion": "v1.34.4",
                "kubeletVersion": "v1.34.4",
                "operatingSystem": "linux",
                "osImage": "Debian GNU/Linux 12 (kwok)",
            },
        },
    }))
    .expect("the fake node literal is a valid Node")
}

/// Creates `n` fake nodes named `<prefix>-<random>-<i>` (i = 1..=n; see [`fake_node`]) and waits
/// until all are Ready without taints. Returns their names. Use a label of your own in
/// `extra_labels` so tests running in parallel select only their nodes.
pub async fn create_nodes(
    client: &Client,
    prefix: &str,
    n: usize,
    extra_labels: &[(&str, &str)],
) -> Vec<String> {
    let base = unique_name(prefix);
    let nodes: Vec<Node> = (1..=n)
        .map(|i| fake_node(&format!("{base}-{i}"), extra_labels))
        .collect();
    create_node_objects(client, &nodes).await
}

/// Creates the given nodes (e.g. from [`fake_node`]) and waits until all are Ready without
/// taints. Returns their names.
pub async fn create_node_objects(client: &Client, nodes: &[Node]) -> Vec<String> {
    let api = Api::<Node>::all(client.clone());
    let mut names = Vec::with_capacity(nodes.len());
    for node in nodes {
        let name = node.metadata.name.clone().expect("a node needs a name");
        api.create(&PostParams::default(), node)
            .await
            .unwrap_or_else(|e| panic!("creating node {name}: {e}"));
        names.push(name);
    }
    wait_nodes_ready(client, &names).await;
    names
}

/// Waits (up to 60 s) until every named node is Ready and has no taints (the
/// `node.kubernetes.io/not-ready` taint added at creation is removed once kwok reports Ready).
pub async fn wait_nodes_ready(client: &Client, names: &[String]) {
    let api = Api::<Node>::all(client.clone());
    wait_for(
        &format!("nodes {names:?} to be Ready without taints"),
        Duration::from_secs(60),
        || async {
            let mut pending = Vec::new();
            for name in names {
                let node = api.get(name).await?;
                let ready = node
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                    .map(|c| c.status.clone());
                let taints = node
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .map(|t| t.iter().map(|t| t.key.clone()).collect::<Vec<_>>())
                    .unwrap_or_default();
                if ready.as_deref() != Some("True") || !taints.is_empty() {
                    pending.push(format!("{name}: Ready={ready:?} taints={taints:?}"));
                }
            }
            if pending.is_empty() {
                Ok(())
            } else {
                Err(anyhow::anyhow!("{}", pending.join("; ")))
            }
        },
    )
    .await
}

/// Waits up to `timeout` until every named node is Ready, without the taints of a node that is not
/// (`node.kubernetes.io/not-ready`, `unreachable`) or is cordoned (`unschedulable`); other taints,
/// such as a control-plane node's, are the node's own.
pub async fn wait_nodes_ready_untainted(client: &Client, names: &[String], timeout: Duration) {
    let api = Api::<Node>::all(client.clone());
    wait_for(&format!("nodes {names:?} to be Ready"), timeout, || async {
        let mut pending = Vec::new();
        for name in names {
            let node = api.get(name).await?;
            let ready = (node.status.as_ref().and_then(|s| s.conditions.as_ref()))
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .map(|c| c.status.clone());
            let taints: Vec<String> = (node.spec.as_ref().and_then(|s| s.taints.as_ref()))
                .into_iter()
                .flatten()
                .map(|t| t.key.clone())
                .filter(|k| k.starts_with("node.kubernetes.io/"))
                .collect();
            if ready.as_deref() != Some("True") || !taints.is_empty() {
                pending.push(format!("{name}: Ready={ready:?} taints={taints:?}"));
            }
        }
        match pending.is_empty() {
            true => Ok(()),
            false => Err(anyhow::anyhow!("{}", pending.join("; "))),
        }
    })
    .await
}

/// Deletes the named nodes; missing ones are ignored. Pods bound to them are force-deleted
/// first: kwok stops managing a deleted node's pods, so a pod being deleted (say, by the test's
/// namespace cleanup) would otherwise hang in Terminating until the pod GC removes it (~40 s).
pub async fn delete_nodes(client: &Client, names: &[String]) {
    let api = Api::<Node>::all(client.clone());
    let pods = Api::<Pod>::all(client.clone());
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    for name in names {
        let bound = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
            .await
            .unwrap_or_else(|e| panic!("listing pods on node {name}: {e}"));
        for pod in bound.items {
            let (Some(pod_name), Some(pod_ns)) = (pod.metadata.name, pod.metadata.namespace) else {
                continue;
            };
            match Api::<Pod>::namespaced(client.clone(), &pod_ns)
                .delete(&pod_name, &force)
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => panic!("deleting pod {pod_ns}/{pod_name} on node {name}: {e}"),
            }
        }
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => panic!("deleting node {name}: {e}"),
        }
    }
}

/// The annotation `slipway agent` writes on a node that needs a reboot: the node's boot ID.
pub const REBOOT_REQUIRED_ANNOTATION: &str = "slipway.dev/reboot-required";

/// The node's `status.nodeInfo.bootID` (empty when it has none).
pub fn boot_id(node: &Node) -> String {
    node.status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.boot_id.clone())
        .unwrap_or_default()
}

/// The boot ID of the node `name`, read now.
pub async fn current_boot_id(client: &Client, name: &str) -> String {
    let node = Api::<Node>::all(client.clone())
        .get(name)
        .await
        .unwrap_or_else(|e| panic!("get node {name}: {e}"));
    boot_id(&node)
}

/// What a reboot looks like to the API server: a new `status.nodeInfo.bootID` (kwok nodes run
/// nothing to reboot). Returns the new boot ID.
pub async fn simulate_reboot(client: &Client, name: &str) -> String {
    try_simulate_reboot(client, name)
        .await
        .expect("change the boot ID")
}

/// [`simulate_reboot`] that returns the API server's error (for tests that expect some).
pub async fn try_simulate_reboot(client: &Client, name: &str) -> kube::Result<String> {
    let boot = random_uuid();
    Api::<Node>::all(client.clone())
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"nodeInfo": {"bootID": boot}}})),
        )
        .await?;
    Ok(boot)
}

/// What `slipway agent` writes when the node needs a reboot: [`REBOOT_REQUIRED_ANNOTATION`]
/// set to the node's current boot ID.
pub async fn ask_reboot(client: &Client, name: &str) {
    let boot = current_boot_id(client, name).await;
    Api::<Node>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {REBOOT_REQUIRED_ANNOTATION: boot}}})),
        )
        .await
        .expect("annotate node");
}

/// Cordons (`true`) or uncordons the node, as an admin would.
pub async fn set_unschedulable(client: &Client, name: &str, value: bool) {
    Api::<Node>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": value}})),
        )
        .await
        .expect("cordon node");
}

/// Lets the held Job pod (label [`HOLD_LABEL`]) of namespace `ns` on `node` finish, once there is
/// one: without the label, kwok completes it as any other Job pod. A scene that needs a step to
/// last while it looks holds the step's pod instead of giving it a long delay.
pub async fn release_held_pod(client: &Client, ns: &str, node: &str) {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let held = wait_for(
        &format!("a held pod on {node}"),
        Duration::from_secs(60),
        || async {
            let list = pods
                .list(
                    &ListParams::default()
                        .labels(&format!("{HOLD_LABEL}=true"))
                        .fields(&format!("spec.nodeName={node}")),
                )
                .await?;
            (list.items.into_iter())
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .find_map(|p| p.metadata.name)
                .ok_or_else(|| anyhow::anyhow!("no held pod on {node}"))
        },
    )
    .await;
    pods.patch(
        &held,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {HOLD_LABEL: null}}})),
    )
    .await
    .unwrap_or_else(|e| panic!("releasing pod {held}: {e}"));
}

/// The path a tool's build script prints (`tests/compat/build.sh` for SUC, `tests/tools/*/build.sh`),
/// given as `script` relative to the repository: cached after its first build. In CI the tools
/// build in the background while the scenes run, each script holding a lock while it builds, so a
/// scene that asks first waits for that build: the wait is recorded (`the tool <script>`), and the
/// run's report says how long the scenes waited for each tool.
pub fn tool(script: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let started = Instant::now();
    let out = Command::new(&path)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(out.status.success(), "{script} failed");
    record_wait(&format!("the tool {script}"), started.elapsed());
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Appends a wait of a second or more to the file `SLIPWAY_TEST_WAITS` names (CI's
/// `target/ci/waits.tsv`): the scene (libtest names the thread that runs a test's body after it),
/// what it waited for and the seconds, so a run shows where each scene's time went.
fn record_wait(description: &str, took: Duration) {
    use std::io::Write;
    let Some(path) = std::env::var_os("SLIPWAY_TEST_WAITS") else {
        return;
    };
    if took < Duration::from_secs(1) {
        return;
    }
    let scene = std::thread::current().name().unwrap_or("?").to_string();
    // The first line of the description: some name a whole object.
    let what = description.lines().next().unwrap_or_default();
    let line = format!("{scene}\t{what}\t{:.1}\n", took.as_secs_f64());
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        // One write of a short line: lines from scenes side by side do not interleave.
        let _ = f.write_all(line.as_bytes());
    }
}

/// Polls `check` every 200 ms until it returns `Ok(value)`, and returns that value. `Err(seen)`
/// means "not yet": `seen` should describe what was observed (or be the API error). After
/// `timeout` it panics with `description` and the last `seen`.
///
/// ```ignore
/// let job = wait_for("job to complete", Duration::from_secs(30), || async {
///     let job = jobs.get("j").await?;
///     if is_complete(&job) { Ok(job) } else { Err(anyhow!("status: {:?}", job.status)) }
/// }).await;
/// ```
pub async fn wait_for<T, E, F, Fut>(description: &str, timeout: Duration, mut check: F) -> T
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let start = Instant::now();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let last = match check().await {
            Ok(value) => {
                record_wait(description, start.elapsed());
                return value;
            }
            Err(seen) => seen.to_string(),
        };
        if start.elapsed() >= timeout {
            panic!(
                "timed out after {timeout:?} ({attempts} checks) waiting for {description}\n\
                 last observed: {last}"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Deletes namespace `ns` and waits until it is gone: for a namespace that tests share (the
/// install's `system-upgrade`), so that a test starts from a clean one even while an earlier
/// test's deletion is still under way. Plans whose controller is gone keep their finalizer and
/// would hold the namespace Terminating, so their finalizers are dropped.
pub async fn remove_namespace(client: &Client, ns: &str) {
    let api = Api::<Namespace>::all(client.clone());
    match api.delete(ns, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return,
        Err(e) => panic!("deleting namespace {ns}: {e}"),
    }
    let plans = Api::<slipway::plan::api::Plan>::namespaced(client.clone(), ns);
    for plan in plans
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        let _ = plans
            .patch(
                &plan.metadata.name.unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            )
            .await;
    }
    wait_for(
        &format!("namespace {ns} to be gone"),
        Duration::from_secs(120),
        || async {
            match api.get_opt(ns).await? {
                None => Ok(()),
                Some(n) => Err(anyhow::anyhow!(
                    "phase {:?}",
                    n.status.and_then(|s| s.phase)
                )),
            }
        },
    )
    .await;
}

/// The namespace of the nodes' Leases, as medik8s has it (NodeMaintenances take a Lease there).
pub const LEASES: &str = "medik8s-leases";

/// Creates the [`LEASES`] namespace unless it exists (tests share it; another may create it first).
pub async fn ensure_lease_namespace(client: &Client) {
    let namespaces = Api::<Namespace>::all(client.clone());
    if namespaces.get_opt(LEASES).await.ok().flatten().is_some() {
        return;
    }
    let ns: Namespace =
        serde_json::from_value(json!({ "metadata": { "name": LEASES } })).expect("namespace");
    match namespaces.create(&PostParams::default(), &ns).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("creating namespace {LEASES}: {e}"),
    }
}

/// Deletes `name` and waits until it is gone (its finalizers done).
pub async fn delete_and_wait_gone<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    api.delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting {name}: {e}"));
    wait_for(
        &format!("{name} to be gone"),
        Duration::from_secs(60),
        || async {
            match api.get_opt(name).await? {
                None => Ok(()),
                Some(o) => bail!("still there: {:?}", o.meta().finalizers),
            }
        },
    )
    .await
}

/// `<base>-<5 random chars>`, lowercased and reduced to `[a-z0-9-]`, at most 50 characters:
/// a valid, unique name for namespaces, nodes and most other objects.
pub fn unique_name(base: &str) -> String {
    let mut clean: String = base
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    clean.truncate(44);
    let clean = clean.trim_matches('-');
    let suffix: String = random_hex(5);
    if clean.is_empty() {
        format!("x-{suffix}")
    } else {
        format!("{clean}-{suffix}")
    }
}

/// A random (version 4) UUID string.
pub fn random_uuid() -> String {
    let h = random_hex(32);
    format!(
        "{}-{}-4{}-{}{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        ["8", "9", "a", "b"][usize::from(h.as_bytes()[16] % 4)],
        &h[17..20],
        &h[20..32]
    )
}

fn random_hex(len: usize) -> String {
    use std::hash::BuildHasher;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut out = String::with_capacity(len + 16);
    while out.len() < len {
        // RandomState is randomly keyed per process/thread; the counter makes each call distinct.
        let n = std::collections::hash_map::RandomState::new()
            .hash_one((COUNTER.fetch_add(1, Ordering::Relaxed), std::process::id()));
        out.push_str(&format!("{n:016x}"));
    }
    out.truncate(len);
    out
}

/// Applies the committed CRDs of the base install (`crds/plans.upgrade.cattle.io.yaml` and
/// `crds/disruptionbudgets.slipway.dev.yaml`) and waits until they are Established, so a test can
/// create Plans and budgets before its controller has installed the CRDs itself.
pub async fn install_crd(client: &Client) {
    install_crds(
        client,
        &["plans.upgrade.cattle.io", "disruptionbudgets.slipway.dev"],
    )
    .await;
}

/// Applies the committed CRDs `names` (files of `crds/`) and waits until they are Established.
pub async fn install_crds(client: &Client, names: &[&str]) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Patch, PatchParams};
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for name in names {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("crds/{name}.yaml"));
        let text = std::fs::read_to_string(&path).expect("read a committed CRD");
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).expect("parse the CRD");
        api.patch(
            name,
            &PatchParams::apply("slipway-e2e").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("the API server accepts the CRD");
    }
    for name in names {
        wait_for(
            &format!("the CRD {name} to be Established"),
            Duration::from_secs(30),
            || async {
                let crd = api.get(name).await?;
                let established = crd
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                if established {
                    Ok(())
                } else {
                    Err(anyhow::anyhow!(
                        "conditions: {:?}",
                        crd.status.and_then(|s| s.conditions)
                    ))
                }
            },
        )
        .await;
    }
}

/// A namespace for one test with `n` fake nodes of its own (labelled `slipway.test/pool=<namespace>`,
/// the pool name returned last), after installing the committed CRD.
pub async fn setup_pool(
    test: &str,
    nodes: usize,
) -> Option<(Cluster, TestNamespace, Vec<String>, String)> {
    let cluster = cluster().await?;
    install_crd(&cluster.client().await).await;
    let ns = TestNamespace::create(&cluster, test).await;
    let pool = ns.name().to_string();
    let names = create_nodes(&ns.client(), test, nodes, &[("slipway.test/pool", &pool)]).await;
    Some((cluster, ns, names, pool))
}

/// A channel server on loopback that answers every request with a 302 to
/// `/releases/tag/<target>`, where the test may change the target at any time.
pub async fn channel_server(target: std::sync::Arc<std::sync::Mutex<String>>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the channel server");
    let addr = listener.local_addr().expect("channel server address");
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let target = target.lock().expect("channel target lock").clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let reply = format!(
                    "HTTP/1.1 302 Found\r\nLocation: /releases/tag/{target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                );
                let _ = sock.write_all(reply.as_bytes()).await;
            });
        }
    });
    format!("http://{addr}/channels/stable")
}

/// A port on loopback that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The last few KiB of a log file (for failure messages).
pub fn log_tail(path: &Path) -> String {
    use std::io::{Read, Seek};
    let mut text = String::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(std::io::SeekFrom::Start(len.saturating_sub(6000)));
        let _ = f.read_to_string(&mut text);
    }
    text
}
