//! A scene: one end-to-end test with the cluster objects it owns, and how it shares the cluster
//! with the scenes that run beside it.
//!
//! ```ignore
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! async fn a_plan_upgrades_its_pool() {
//!     let Some(s) = Scene::new("upgrade").nodes(3).start().await else { return };
//!     let _controller = ControllerProcess::start(&s.cluster, s.ns.name(), &[]);
//!     // ... Plans in s.ns over the nodes labelled slipway.test/pool=<s.pool>
//! }
//! ```
//!
//! Every scene has a namespace of its own and fake nodes of its own (the pool), and names the
//! cluster-scoped objects it makes `<namespace>-<what>` ([`Scene::name`]). When the scene ends,
//! passed or failed, its namespace, its nodes (and the pods bound to them) and those objects
//! are deleted, with the finalizers no controller is left to remove, and a line with its
//! outcome and time goes to the run's report (`SLIPWAY_TEST_REPORT`).
//!
//! Scenes run side by side (`--test-threads`). A scene says what it cannot share:
//! - [`Sharing::Shared`]: its namespace and nodes are all it touches;
//! - [`Sharing::Group`]: its controller also reconciles a cluster-wide kind (NodeMaintenances,
//!   RebootPolicies, NodeOps in every namespace), so it never runs beside another scene of the
//!   same group, which would have a second controller reconcile the same objects;
//! - [`Sharing::Alone`]: nothing else runs while it does, because it changes what every scene
//!   sees (the API server or etcd stopped, DisruptionBudgets that every controller reads and
//!   writes the ledger of, the install's fixed names in `system-upgrade`).

use std::collections::BTreeSet;
use std::io::Write as _;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::{Client, ResourceExt};
use serde_json::json;

use super::turns::{self, Ask, Priority, Turn};
use super::{Cluster, TestNamespace};

/// The label of a scene's nodes; its value is the scene's namespace.
pub const POOL_LABEL: &str = "slipway.test/pool";

/// What a scene cannot share with the scenes beside it (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sharing {
    Shared,
    Group(&'static str),
    Alone,
}

/// The group of scenes whose controllers reconcile cluster-wide kinds: NodeMaintenances,
/// RebootPolicies, NodeOps (watched in every namespace).
pub const CLUSTER_WIDE: Sharing = Sharing::Group(CLUSTER_WIDE_GROUP);
const CLUSTER_WIDE_GROUP: &str = "cluster-wide kinds";

/// The namespaces of the scenes whose controller may reconcile the cluster-wide kinds: those of
/// [`CLUSTER_WIDE`], alone, or on a cluster of their own. A controller of another scene would
/// decide for the cluster-wide scenes' objects beside their own controller.
static WIDE: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Whether the scene of namespace `ns` may run a controller of the cluster-wide kinds.
pub fn may_run_cluster_wide(ns: &str) -> bool {
    WIDE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(ns)
}

/// How a scene is set up; see [`Scene::new`].
pub struct SceneBuilder {
    name: String,
    nodes: usize,
    labels: Vec<(String, String)>,
    alone: bool,
    groups: BTreeSet<&'static str>,
    own_cluster: Option<&'static str>,
    real: bool,
    crds: Vec<&'static str>,
}

impl SceneBuilder {
    /// `n` fake nodes in the scene's pool (none unless told).
    pub fn nodes(mut self, n: usize) -> Self {
        self.nodes = n;
        self
    }

    /// A label on each of the pool's nodes, beside `slipway.test/pool`.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.push((key.to_string(), value.to_string()));
        self
    }

    pub fn sharing(self, sharing: Sharing) -> Self {
        match sharing {
            Sharing::Shared => self,
            Sharing::Group(group) => self.group(group),
            Sharing::Alone => self.alone(),
        }
    }

    /// Nothing else runs beside this scene.
    pub fn alone(mut self) -> Self {
        self.alone = true;
        self
    }

    /// Never beside another scene of `group`.
    pub fn group(mut self, group: &'static str) -> Self {
        self.groups.insert(group);
        self
    }

    /// The scene's controller reconciles NodeMaintenances, RebootPolicies or NodeOps.
    pub fn cluster_wide(self) -> Self {
        self.sharing(CLUSTER_WIDE)
    }

    /// The scene runs on a cluster of its own, `name`, started for the first scene that asks and
    /// shared, one scene at a time, by the scenes that name it: for what would otherwise stop
    /// every other scene (the API server restarted, DisruptionBudgets that every controller of
    /// the cluster reads and keeps the ledger of).
    pub fn own_cluster(mut self, name: &'static str) -> Self {
        self.own_cluster = Some(name);
        self.group(name)
    }

    /// Real nodes (QEMU guests, [`super::real`]: a free pair of workers on the shared cluster, a
    /// control-plane node and a worker on the installs' cluster) join the scene's pool
    /// ([`Scene::real`]): labelled [`POOL_LABEL`] while it runs, and given back uncordoned,
    /// without its labels, when it ends. One scene at a time on each set; these scenes start
    /// before the others, as they take longest.
    pub fn real_nodes(mut self) -> Self {
        self.real = true;
        self
    }

    /// Committed CRDs (files of `crds/`) to apply beside the Plan's and DisruptionBudget's.
    pub fn crds(mut self, names: &[&'static str]) -> Self {
        self.crds.extend_from_slice(names);
        self
    }

    /// Waits for the scene's turn, then makes its namespace and nodes. `None` when end-to-end
    /// tests are skipped (`SLIPWAY_E2E=skip`).
    pub async fn start(self) -> Option<Scene> {
        // The shared cluster is up before any turn; an own cluster starts in the turn of its first
        // scene, not beside the guests' boot.
        let shared = match self.own_cluster {
            None => Some(super::cluster().await?),
            Some(_) => None,
        };
        let waiting = Instant::now();
        // An own cluster's scenes take turns already; a scene on the shared cluster's real nodes
        // takes a free pair of them.
        let one_of: Vec<&'static str> = match self.real && self.own_cluster.is_none() {
            true => super::real::pairs().iter().map(|p| p.group).collect(),
            false => Vec::new(),
        };
        let priority = match (self.real, self.groups.is_empty()) {
            (true, _) => Priority::RealNodes,
            (false, false) => Priority::Group,
            (false, true) => Priority::Shared,
        };
        let mut turn = turns::take(Ask {
            alone: self.alone,
            groups: self.groups.clone(),
            one_of,
            priority,
        })
        .await;
        let started = Instant::now();
        let cluster = match self.own_cluster {
            None => shared?,
            Some(name) => super::own_cluster(name).await?,
        };
        let client = cluster.client().await;
        let mut crds = vec!["plans.upgrade.cattle.io", "disruptionbudgets.slipway.dev"];
        crds.extend(self.crds.iter().copied());
        super::install_crds(&client, &crds).await;
        let ns = TestNamespace::create(&cluster, &self.name).await;
        let pool = ns.name().to_string();
        if self.alone || self.own_cluster.is_some() || self.groups.contains(CLUSTER_WIDE_GROUP) {
            (WIDE.lock().unwrap_or_else(PoisonError::into_inner)).insert(pool.clone());
        }
        let mut labels: Vec<(&str, &str)> = vec![(POOL_LABEL, &pool)];
        labels.extend(self.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let mut nodes = match self.nodes {
            0 => Vec::new(),
            n => super::create_nodes(&client, &self.name, n, &labels).await,
        };
        let real = match self.real {
            false => Vec::new(),
            true => {
                let set = match turn.chosen() {
                    Some(pair) => super::real::set(pair),
                    None => &super::real::OF_INSTALLS,
                };
                let real = super::real::nodes(&cluster, set).await;
                turn.booted();
                super::real::take(&client, &real, &labels).await;
                real
            }
        };
        nodes.extend(real.iter().cloned());
        Some(Scene {
            cluster,
            client,
            ns,
            nodes,
            pool,
            real,
            test: test_name(&self.name),
            own_cluster: self.own_cluster,
            waited: started - waiting,
            started,
            turn,
        })
    }
}

/// One running scene; ending it (dropping it) cleans up after it. See the module's documentation.
pub struct Scene {
    pub cluster: Cluster,
    pub client: Client,
    pub ns: TestNamespace,
    /// The pool's fake nodes, in order of creation.
    pub nodes: Vec<String>,
    /// The value of [`POOL_LABEL`] on the scene's nodes: the namespace's name.
    pub pool: String,
    /// The real nodes in the pool (also in `nodes`), the control-plane node first.
    pub real: Vec<String>,
    test: String,
    /// The own cluster the scene ran on, if any.
    own_cluster: Option<&'static str>,
    waited: Duration,
    started: Instant,
    /// Given back after the clean-up (fields drop after `drop`).
    turn: Turn,
}

impl Scene {
    /// A scene named `name` (a short word: it prefixes the namespace and the nodes), shared,
    /// without nodes until told.
    #[allow(clippy::new_ret_no_self)]
    pub fn new(name: &str) -> SceneBuilder {
        SceneBuilder {
            name: name.to_string(),
            nodes: 0,
            labels: Vec::new(),
            alone: false,
            groups: BTreeSet::new(),
            own_cluster: None,
            real: false,
            crds: Vec::new(),
        }
    }

    /// `<namespace>-<what>`: the name of a cluster-scoped object of this scene's own, deleted
    /// when the scene ends.
    pub fn name(&self, what: &str) -> String {
        format!("{}-{what}", self.ns.name())
    }

    /// The scene's two real workers (a pair of the shared cluster's guests).
    pub fn workers(&self) -> [&str; 2] {
        match self.real.as_slice() {
            [a, b] => [a.as_str(), b.as_str()],
            other => panic!("the scene has no pair of real workers: {other:?}"),
        }
    }

    /// `kubectl wait --for=<what> <object>` as an operator or a GitOps tool would run it (kstatus'
    /// conditions), in the scene's namespace (ignored for a cluster-scoped object); fails the
    /// scene when kubectl gives up after `timeout_secs`.
    pub async fn kubectl_wait(&self, object: &str, what: &str, timeout_secs: u32) {
        let (for_, timeout) = (
            format!("--for={what}"),
            format!("--timeout={timeout_secs}s"),
        );
        let ns = self.ns.name();
        (self.cluster)
            .kubectl(&["-n", ns, "wait", object, &for_, &timeout])
            .await
            .unwrap_or_else(|e| panic!("kubectl wait {object} {for_}: {e}"));
    }

    /// The label selector of the pool's nodes.
    pub fn pool_selector(&self) -> String {
        format!("{POOL_LABEL}={}", self.pool)
    }

    /// More fake nodes in the pool, with `extra` labels; returns their names.
    pub async fn add_nodes(
        &mut self,
        prefix: &str,
        n: usize,
        extra: &[(&str, &str)],
    ) -> Vec<String> {
        let mut labels: Vec<(&str, &str)> = vec![(POOL_LABEL, &self.pool)];
        labels.extend_from_slice(extra);
        let names = super::create_nodes(&self.client, prefix, n, &labels).await;
        self.nodes.extend(names.iter().cloned());
        names
    }
}

impl Drop for Scene {
    fn drop(&mut self) {
        let failed = std::thread::panicking();
        // The clean-up below deletes the namespace (after what would keep it Terminating).
        self.ns.cleaned = true;
        // Async clean-up cannot run in this runtime from `drop` (it may be unwinding): it gets a
        // thread and a runtime of its own, and a client built there.
        let (cluster, ns, pool, real) = (
            self.cluster.clone(),
            self.ns.name().to_string(),
            self.pool.clone(),
            self.real.clone(),
        );
        let cleaned = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            rt.block_on(clean_up(cluster, ns, pool, real))
                .map_err(|e| format!("{e:#}"))
        })
        .join()
        .unwrap_or_else(|_| Err("the clean-up panicked".to_string()));
        // The last scene of an own cluster stops it (its guests too), the last scene of a pair
        // its guests: what is left up costs every later scene (a guest a quarter of a core, an
        // idle cluster a few percent; six own clusters were up through the last hour in CI).
        match self.own_cluster {
            Some(name) if !turns::wanted(name) => super::stop_own_cluster(&self.cluster, name),
            Some(_) => {}
            None if !self.real.is_empty() => {
                let group = self.turn.chosen().unwrap_or(super::real::INSTALLS);
                if !turns::wanted(group) {
                    super::real::stop(&self.cluster, super::real::set(group));
                }
            }
            None => {}
        }
        let took = self.started.elapsed();
        if let Err(e) = &cleaned {
            eprintln!("scene {}: clean-up failed: {e}", self.test);
        }
        report(&self.test, failed, cleaned.is_err(), self.waited, took);
    }
}

/// Kinds of cluster-scoped objects scenes make, named `<namespace>-<what>`.
const CLUSTER_KINDS: &[(&str, &str, &str)] = &[
    ("slipway.dev", "v1alpha1", "DisruptionBudget"),
    ("slipway.dev", "v1alpha1", "RebootPolicy"),
    ("nodemaintenance.medik8s.io", "v1beta1", "NodeMaintenance"),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole"),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"),
];

/// Kinds of namespaced objects scenes make whose finalizers no controller is left to remove
/// (besides Plans), which would keep the namespace Terminating.
const NAMESPACED_KINDS: &[(&str, &str, &str)] = &[
    ("operator.kairos.io", "v1alpha1", "NodeOpUpgrade"),
    ("operator.kairos.io", "v1alpha1", "NodeOp"),
];

async fn clean_up(
    cluster: Cluster,
    ns: String,
    pool: String,
    real: Vec<String>,
) -> anyhow::Result<()> {
    let client = cluster.try_client().await?;
    let prefix = format!("{ns}-");
    for (group, version, kind) in CLUSTER_KINDS {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let api = Api::<DynamicObject>::all_with(client.clone(), &ApiResource::from_gvk(&gvk));
        // A kind whose CRD no scene installed has nothing to clean.
        let Ok(list) = api.list(&ListParams::default()).await else {
            continue;
        };
        for o in list
            .items
            .iter()
            .filter(|o| o.name_any().starts_with(&prefix))
        {
            delete_without_finalizers(&api, &o.name_any()).await;
        }
    }
    let plans = Api::<slipway::plan::api::Plan>::namespaced(client.clone(), &ns);
    for p in plans.list(&ListParams::default()).await?.items {
        delete_without_finalizers(&plans, &p.name_any()).await;
    }
    for (group, version, kind) in NAMESPACED_KINDS {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let api = Api::<DynamicObject>::namespaced_with(
            client.clone(),
            &ns,
            &ApiResource::from_gvk(&gvk),
        );
        let Ok(list) = api.list(&ListParams::default()).await else {
            continue;
        };
        for o in list.items {
            delete_without_finalizers(&api, &o.name_any()).await;
        }
    }
    let nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{POOL_LABEL}={pool}")))
        .await?
        .items
        .iter()
        .map(|n| n.name_any())
        .filter(|n| !real.contains(n))
        .collect();
    // Pods bound to the nodes first: kwok stops managing a deleted node's pods.
    for node in &nodes {
        let bound = Api::<Pod>::all(client.clone())
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await?;
        for p in bound.items {
            let api = Api::<Pod>::namespaced(client.clone(), &p.namespace().unwrap_or_default());
            let _ = api
                .delete(&p.name_any(), &DeleteParams::default().grace_period(0))
                .await;
        }
    }
    let node_api = Api::<Node>::all(client.clone());
    for node in &nodes {
        let _ = node_api.delete(node, &DeleteParams::default()).await;
    }
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&ns, &DeleteParams::background())
        .await;
    if !real.is_empty() {
        super::real::give_back(&cluster, &client, &real, &ns).await?;
    }
    Ok(())
}

async fn delete_without_finalizers<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let _ = api.delete(name, &DeleteParams::background()).await;
    let _ = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
}

/// The running test's name: libtest names each test's thread after it, unless it runs one test
/// at a time on its main thread.
fn test_name(scene: &str) -> String {
    match std::thread::current().name() {
        Some(name) if name.contains("::") => name.to_string(),
        _ => format!("{scene} (scene)"),
    }
}

/// Appends the scene's line to the run's report, when the run keeps one.
fn report(test: &str, failed: bool, unclean: bool, waited: Duration, took: Duration) {
    let Some(path) = std::env::var_os("SLIPWAY_TEST_REPORT") else {
        return;
    };
    let outcome = match (failed, unclean) {
        (true, _) => "FAILED",
        (false, true) => "unclean",
        (false, false) => "ok",
    };
    let line = format!(
        "scene\t{test}\t{outcome}\t{:.1}\t{:.1}\n",
        took.as_secs_f64(),
        waited.as_secs_f64()
    );
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
    {
        let _ = f.write_all(line.as_bytes());
    }
}
