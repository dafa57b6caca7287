//! The differential test against system-upgrade-controller v0.20.1 itself.
//!
//! SUC, built from the Go module proxy by `tests/compat/build.sh`, and slipway run in turn on the
//! same local cluster, in the same namespace, with the same environment, over nodes with the same
//! names and labels, with the same Plans: every Plan in `examples/` and those in
//! `tests/compat/plans/` (written to cover the fields and the states a rollout stops in). Each
//! Plan's selector is narrowed to the test's nodes and a channel points at a loopback server. Once
//! every Plan is in a state that lasts (see [`plan_settled`]), the test takes the Jobs (metadata,
//! spec, pod template), the node labels, and each Plan's `latestVersion`, `latestHash`,
//! `applying` and conditions; it removes what only wrangler writes (`objectset.rio.cattle.io/*`)
//! and what differs between any two runs (uids, times), and compares. Every difference that
//! remains must match an entry of [`ALLOWED`], which names its COMPATIBILITY.md row; anything
//! else fails the test with a diff, and so does an entry that matched nothing.
//!
//! One scene, alone: each run installs its controller's own Plan CRD in place of the committed
//! one (so every other scene's Plans would go with the deleted CRD), and SUC watches every node.
//! SUC is built before the scene takes the cluster. The scene's namespace is the controllers'.
//!
//! `SLIPWAY_SUC_BINARY` uses that SUC binary instead of building one; `SLIPWAY_COMPAT_DUMP=<dir>`
//! writes both snapshots there as JSON.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::process::ChildProcess;
use crate::support::scene::{POOL_LABEL as SCENE_POOL, Scene};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use slipway::plan::api::Plan;

pub(crate) const CONTROLLER: &str = "system-upgrade-controller";
const POOL_LABEL: &str = "slipway.test/compat";
/// The test's nodes, the same names and labels in both runs: a control-plane node and two
/// workers, labelled so that every example selects some of them (k3OS opts in with its Plan's
/// label and excludes live-booted nodes; Kairos selects managed nodes).
const NODES: [(&str, &[(&str, &str)]); 3] = [
    (
        "compat-cp",
        &[
            ("node-role.kubernetes.io/control-plane", "true"),
            ("k3os.io/mode", "local"),
            ("plan.upgrade.cattle.io/k3os-latest", "enabled"),
        ],
    ),
    (
        "compat-w1",
        &[
            ("kairos.io/managed", "true"),
            ("k3os.io/mode", "live"),
            ("plan.upgrade.cattle.io/k3os-latest", "enabled"),
        ],
    ),
    ("compat-w2", &[("kairos.io/managed", "true")]),
];

/// Differences that are deliberate: a path pattern (`*` matches one segment, a final `**` any
/// number), the first cell of the COMPATIBILITY.md row that lists it, and why it shows here. The
/// test fails if a row is missing from COMPATIBILITY.md or a pattern matched nothing (stale).
const ALLOWED: &[(&str, &str, &str)] = &[
    (
        "plans/*/conditions/Ready",
        "kstatus conditions",
        "slipway adds Ready, Reconciling and Stalled beside SUC's conditions",
    ),
    (
        "plans/*/conditions/Reconciling",
        "kstatus conditions",
        "slipway adds Ready, Reconciling and Stalled beside SUC's conditions",
    ),
    (
        "plans/*/conditions/Stalled",
        "kstatus conditions",
        "slipway adds Ready, Reconciling and Stalled beside SUC's conditions",
    ),
    (
        "jobs/*/*/metadata/annotations/slipway.dev~1pod-template-hash",
        "Replacing changed Jobs",
        "slipway marks its Jobs with the hash of their pod template",
    ),
    (
        "plans/invalid-drain-flags/conditions/LatestResolved",
        "Invalid Plans",
        "SUC stops before creating LatestResolved; slipway creates it Unknown",
    ),
    (
        "plans/invalid-negative-delay/conditions/LatestResolved",
        "Invalid Plans",
        "SUC stops before creating LatestResolved; slipway creates it Unknown",
    ),
    (
        "plans/invalid-time-zone/conditions/LatestResolved",
        "Invalid Plans",
        "SUC stops before creating LatestResolved; slipway creates it Unknown",
    ),
    (
        "plans/concurrency-zero/conditions/Complete/**",
        "`concurrency` 0, negative or unset",
        "SUC reports Complete=True with nothing done; slipway Complete=False/NoConcurrency, saying why",
    ),
    (
        "plans/selects-nothing/conditions/Complete/message",
        "A selector that matches no node",
        "both Complete=True; slipway's message names the selector that matches nothing",
    ),
    (
        "plans/invalid-drain-flags/latestHash",
        "Invalid Plans",
        "SUC hashes the unresolved (empty) version: SHA-224 of nothing; slipway writes no hash",
    ),
    (
        "plans/invalid-negative-delay/latestHash",
        "Invalid Plans",
        "SUC hashes the unresolved (empty) version: SHA-224 of nothing; slipway writes no hash",
    ),
    (
        "plans/invalid-time-zone/latestHash",
        "Invalid Plans",
        "SUC hashes the unresolved (empty) version: SHA-224 of nothing; slipway writes no hash",
    ),
];

/// Environment of both controllers: values of SUC's manifest where they matter, and no Job
/// retries, so that a failing Job fails at once.
const JOB_ENV: &[(&str, &str)] = &[
    ("SYSTEM_UPGRADE_JOB_ACTIVE_DEADLINE_SECONDS", "900"),
    ("SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT", "0"),
    ("SYSTEM_UPGRADE_JOB_IMAGE_PULL_POLICY", "Always"),
    ("SYSTEM_UPGRADE_JOB_PRIVILEGED", "true"),
    ("SYSTEM_UPGRADE_JOB_TTL_SECONDS_AFTER_FINISH", "900"),
    ("SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL", "15m"),
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The SUC binary: `SLIPWAY_SUC_BINARY`, else what `tests/compat/build.sh` builds (once, cached).
pub(crate) fn suc_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("SLIPWAY_SUC_BINARY") {
        return PathBuf::from(p);
    }
    support::tool("tests/compat/build.sh")
}

/// SUC's own manifests (`kubectl kustomize` of its module, which `tests/compat/build.sh` leaves in
/// Go's module cache) without its Deployment: the namespace, ServiceAccount, ConfigMap, roles and
/// bindings, for a scene that runs SUC as a process with that ServiceAccount's token. SUC's
/// kustomization pins an older image of its own, which no such scene runs.
pub(crate) async fn suc_manifests(cluster: &support::Cluster) -> String {
    let versions = std::fs::read_to_string(repo().join("tests/compat/versions.env"))
        .expect("tests/compat/versions.env");
    let version = (versions.lines())
        .find_map(|l| l.strip_prefix("SUC_VERSION="))
        .map(|v| v.trim().trim_matches('"').to_string())
        .expect("SUC_VERSION in tests/compat/versions.env");
    let cache = Command::new("go")
        .args(["env", "GOMODCACHE"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| format!("{}/go/pkg/mod", std::env::var("HOME").unwrap_or_default()));
    let module = PathBuf::from(cache).join(format!(
        "github.com/rancher/system-upgrade-controller@{version}"
    ));
    assert!(
        module.join("kustomization.yaml").is_file(),
        "SUC's module is not in Go's module cache at {} (tests/compat/build.sh downloads it)",
        module.display()
    );
    let rendered = cluster
        .kubectl(&["kustomize", &module.display().to_string()])
        .await
        .expect("kubectl kustomize SUC's module");
    // The documents as kustomize wrote them (their text, which the air-gapped edit reads).
    let docs: Vec<&str> = rendered.split("\n---\n").collect();
    let kept: Vec<&str> = (docs.iter().copied())
        .filter(|d| {
            let doc = serde_saphyr::from_str::<Value>(d).expect("a document of SUC's manifests");
            doc["kind"] != "Deployment"
        })
        .collect();
    assert_eq!(
        kept.len() + 1,
        docs.len(),
        "SUC's manifests hold one Deployment: {rendered}"
    );
    kept.join("\n---\n")
}

/// Every Plan of the corpus, rewritten for the test: its namespace, its selector narrowed to the
/// test's nodes, its channel on loopback.
fn corpus(channel: &str, ns: &str) -> Vec<Plan> {
    let mut files: Vec<PathBuf> = Vec::new();
    for dir in ["examples", "tests/compat/plans"] {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
            .expect("corpus directory")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        entries.sort();
        files.extend(entries);
    }
    let mut plans = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read a corpus file");
        for doc in text.split("\n---") {
            let Ok(value) = serde_saphyr::from_str::<Value>(doc) else {
                continue;
            };
            if value["kind"] != "Plan" {
                continue;
            }
            let mut plan: Plan = serde_json::from_value(value).expect("a Plan of the corpus");
            plan.metadata.namespace = Some(ns.into());
            // `spec.reboot` is slipway's alone (SUC's CRD prunes it); kwok nodes never reboot.
            plan.spec.reboot = None;
            // So are health checks and hooks (what the checks read, a Deployment of kube-system, is not here).
            plan.spec.health_checks = None;
            plan.spec.hooks = None;
            if plan.spec.channel.is_some() {
                plan.spec.channel = Some(channel.to_string());
            }
            let selector = plan.spec.node_selector.get_or_insert_default();
            selector
                .match_labels
                .get_or_insert_default()
                .insert(POOL_LABEL.into(), "true".into());
            plans.push(plan);
        }
    }
    plans
}

/// Secrets the corpus refers to, the same in both runs.
fn secrets(ns: &str) -> Vec<Secret> {
    vec![Secret {
        metadata: ObjectMeta {
            name: Some("compat-credentials".into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([(
            "token".to_string(),
            "s3cr3t".to_string(),
        )])),
        ..Default::default()
    }]
}

/// `program args` with the environment SUC's Deployment gives its controller (slipway reads the
/// same variables), logging to `log`; killed when dropped.
pub(crate) fn start(program: &Path, args: &[&str], s: &Scene, log: &Path) -> ChildProcess {
    let kubeconfig = s.cluster.kubeconfig_path();
    ChildProcess::new(program, log)
        .args(args)
        .env("SYSTEM_UPGRADE_CONTROLLER_NAME", CONTROLLER)
        .env("SYSTEM_UPGRADE_CONTROLLER_NAMESPACE", s.ns.name())
        .env(
            "SYSTEM_UPGRADE_CONTROLLER_KUBE_CONFIG",
            kubeconfig.display().to_string(),
        )
        .env("SYSTEM_UPGRADE_CONTROLLER_NODE_NAME", NODES[0].0)
        .envs(JOB_ENV.iter().copied())
        .env("SLIPWAY_METRICS_ADDR", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .started()
}

/// What a run leaves behind, normalized: `jobs/<plan>/<node>`, `nodes/<node>`, `plans/<plan>`.
pub(crate) type Snapshot = BTreeMap<String, Value>;

/// Runs one controller over fresh nodes and the corpus, until every Plan settles.
async fn run(s: &Scene, program: &Path, args: &[&str], channel: &str, who: &str) -> Snapshot {
    let begun = begin(s, program, args, channel, who).await;
    settle(&s.client, s.ns.name(), &begun.log).await;
    let snapshot = snapshot(&s.client, s.ns.name()).await;
    drop(begun.process);
    cleanup(&s.client, s.ns.name(), &begun.nodes).await;
    snapshot
}

/// A controller started over fresh nodes, with the corpus created.
pub(crate) struct Begun {
    pub process: ChildProcess,
    pub nodes: Vec<String>,
    pub log: PathBuf,
}

/// Creates the nodes, starts `program` (which installs its own Plan CRD), and creates the
/// corpus' Secrets, ServiceAccounts and Plans.
pub(crate) async fn begin(
    s: &Scene,
    program: &Path,
    args: &[&str],
    channel: &str,
    who: &str,
) -> Begun {
    let (client, ns) = (&s.client, s.ns.name());
    no_node_left(client).await;
    // In the scene's pool, so that the scene removes them if it fails half-way.
    let nodes: Vec<Node> = NODES
        .iter()
        .map(|(name, extra)| {
            let mut labels = vec![(POOL_LABEL, "true"), (SCENE_POOL, s.pool.as_str())];
            labels.extend_from_slice(extra);
            support::fake_node(name, &labels)
        })
        .collect();
    let names = support::create_node_objects(client, &nodes).await;
    support::wait_nodes_ready(client, &names).await;
    let log = std::env::temp_dir().join(format!("slipway-compat-{who}.log"));
    // Each controller installs its own CRD (they validate differently); with the other's still
    // Established, Plans could be created before the update lands.
    delete_crd(client).await;
    let process = start(program, args, s, &log);
    wait_crd(&s.cluster).await;
    for secret in secrets(ns) {
        Api::<Secret>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &secret)
            .await
            .expect("create a Secret");
    }
    let plans = Api::<Plan>::namespaced(client.clone(), ns);
    let corpus = corpus(channel, ns);
    // The ServiceAccounts the Plans name: the API server refuses a pod whose account is missing.
    let accounts: std::collections::BTreeSet<String> = (corpus.iter())
        .filter_map(|p| p.spec.service_account_name.clone())
        .filter(|a| !a.is_empty())
        .collect();
    for account in accounts {
        let sa: k8s_openapi::api::core::v1::ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": account}})).expect("an account");
        match Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &sa)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("create the ServiceAccount {account}: {e}"),
        }
    }
    // Each controller's CRD accepts the whole corpus: slipway's accepts every Plan SUC's does.
    for p in &corpus {
        if let Err(e) = plans.create(&PostParams::default(), p).await {
            panic!("{who}: create Plan {:?}: {e}", p.metadata.name);
        }
    }
    Begun {
        process,
        nodes: names,
        log,
    }
}

/// Waits until no node of [`NODES`] is left from an earlier run (this scene's first, or the
/// migration scene's on the same cluster) and their node Leases are gone too. kwok v0.8.0 keeps
/// the owner a Lease already has, so a node made again under its old name keeps the old node's
/// Lease until the garbage collector deletes it, at a time of its own, and kwok skips the pods
/// of a node whose Lease it does not hold. The likeliest cause of a CI run (2026-11-27) where
/// the pods on both workers made again were never run and the Plans waited 180 s; the pods on
/// the third node ran.
async fn no_node_left(client: &kube::Client) {
    let nodes = Api::<Node>::all(client.clone());
    let leases = Api::<Lease>::namespaced(client.clone(), "kube-node-lease");
    support::wait_for(
        "the nodes and node Leases of an earlier run to go",
        Duration::from_secs(120),
        || async {
            let mut left = Vec::new();
            for (name, _) in NODES {
                if nodes.get_opt(name).await?.is_some() {
                    left.push(format!("node {name}"));
                } else if leases.get_opt(name).await?.is_some() {
                    // The garbage collector would delete it as well, at a time of its own.
                    match leases.delete(name, &DeleteParams::default()).await {
                        Ok(_) => {}
                        Err(kube::Error::Api(e)) if e.code == 404 => {}
                        Err(e) => return Err(e.into()),
                    }
                    left.push(format!("lease {name}"));
                }
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(anyhow::anyhow!("{left:?}"))
            }
        },
    )
    .await;
}

async fn wait_crd(cluster: &support::Cluster) {
    support::wait_for("the Plan CRD", Duration::from_secs(60), || async {
        cluster
            .kubectl(&[
                "wait",
                "--for=condition=Established",
                "crd/plans.upgrade.cattle.io",
                "--timeout=5s",
            ])
            .await
    })
    .await;
}

/// Waits until every Plan is in a state that lasts: complete; stopped by a failed Job, a closed
/// window or an invalid spec (its Jobs finished); or every applying node's Job held running (the
/// hold label).
pub(crate) async fn settle(client: &kube::Client, ns: &str, log: &Path) {
    let plans = Api::<Plan>::namespaced(client.clone(), ns);
    let jobs = Api::<Job>::namespaced(client.clone(), ns);
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    // os-packages (concurrency 1) waits its postCompleteDelay of 2m after each node it takes, up
    // to three: on a busy machine that is well over three minutes (2026-11-28: both of SUC's runs
    // timed out at 180 s, os-packages alone in that delay; slipway's run took it through three).
    support::wait_for("every Plan to settle", Duration::from_secs(600), || async {
        let plans = plans.list(&ListParams::default()).await?;
        let jobs = jobs.list(&ListParams::default()).await?;
        let unsettled: Vec<String> = plans
            .items
            .iter()
            .filter_map(|p| plan_settled(p, &jobs.items).err())
            .collect();
        if unsettled.is_empty() {
            return Ok(());
        }
        Err(anyhow::anyhow!(
            "{}\npods not finished:\n{}\nnode Leases:\n{}\n{}",
            unsettled.join("\n"),
            unfinished_pods(&pods, ns).await?.join("\n"),
            lease_owners(client).await?.join("\n"),
            support::log_tail(log)
        ))
    })
    .await
}

/// Each node's Lease: its holder and whether its owner is the node there now (kwok runs the
/// pods of a node only while it holds that node's Lease).
async fn lease_owners(client: &kube::Client) -> anyhow::Result<Vec<String>> {
    let leases = Api::<Lease>::namespaced(client.clone(), "kube-node-lease");
    let nodes = Api::<Node>::all(client.clone());
    let mut out = Vec::new();
    for (name, _) in NODES {
        let uid = nodes.get_opt(name).await?.and_then(|n| n.metadata.uid);
        let line = match leases.get_opt(name).await? {
            None => format!("{name}: no Lease"),
            Some(l) => {
                let holder = l.spec.and_then(|s| s.holder_identity).unwrap_or_default();
                let owners: Vec<String> = (l.metadata.owner_references.iter().flatten())
                    .map(|o| {
                        let now = if Some(&o.uid) == uid.as_ref() {
                            ""
                        } else {
                            " (gone)"
                        };
                        format!("{}{now}", o.uid)
                    })
                    .collect();
                format!("{name}: held by {holder:?}, owners {owners:?}")
            }
        };
        out.push(line);
    }
    Ok(out)
}

/// The Jobs' pods not finished: where each is and why not (the Jobs wait on them).
async fn unfinished_pods(pods: &Api<Pod>, ns: &str) -> anyhow::Result<Vec<String>> {
    let listed = pods.list(&ListParams::default()).await?;
    Ok((listed.items.iter())
        .filter_map(|p| {
            let status = p.status.as_ref()?;
            let phase = status.phase.as_deref().unwrap_or("?");
            if phase == "Succeeded" || phase == "Failed" {
                return None;
            }
            let node = p
                .spec
                .as_ref()?
                .node_name
                .as_deref()
                .unwrap_or("unscheduled");
            let why: Vec<String> = (status.conditions.iter().flatten())
                .filter(|c| c.status != "True")
                .map(|c| format!("{}={}", c.type_, c.reason.as_deref().unwrap_or("")))
                .collect();
            Some(format!("{ns}/{} on {node}: {phase} {why:?}", p.name_any()))
        })
        .collect())
}

fn plan_settled(plan: &Plan, jobs: &[Job]) -> Result<(), String> {
    let name = plan.metadata.name.clone().unwrap_or_default();
    let status = plan.status.clone().unwrap_or_default();
    let complete = status.conditions.iter().find(|c| c.type_ == "Complete");
    let (cstatus, reason) = complete
        .map(|c| (c.status.as_str(), c.reason.as_deref().unwrap_or_default()))
        .unwrap_or_default();
    let own: Vec<&Job> = jobs
        .iter()
        .filter(|j| {
            j.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("upgrade.cattle.io/plan"))
                == Some(&name)
        })
        .collect();
    let finished = |j: &Job| {
        j.status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
    };
    let held = |j: &Job| {
        j.spec.as_ref().and_then(|s| s.parallelism) == Some(1)
            && j.status.as_ref().and_then(|s| s.active).unwrap_or(0) >= 1
    };
    let hold_plan = plan
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(support::HOLD_LABEL))
        .is_some_and(|v| v == "true");
    let settled = if cstatus == "True" {
        true
    } else if ["JobFailed", "Waiting", "NotReady", "NoConcurrency"].contains(&reason) {
        own.iter().all(|j| finished(j))
    } else {
        hold_plan
            && !status.applying.is_empty()
            && own.len() == status.applying.len()
            && own.iter().all(|j| held(j))
    };
    if settled {
        Ok(())
    } else {
        Err(format!(
            "{name}: Complete={cstatus}/{reason}, applying {:?}, {} Jobs ({} finished)",
            status.applying,
            own.len(),
            own.iter().filter(|j| finished(j)).count()
        ))
    }
}

async fn snapshot(client: &kube::Client, ns: &str) -> Snapshot {
    let mut out = Snapshot::new();
    let jobs = Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("list Jobs");
    for job in jobs.items {
        let labels = job.metadata.labels.clone().unwrap_or_default();
        let key = format!(
            "jobs/{}/{}",
            labels
                .get("upgrade.cattle.io/plan")
                .cloned()
                .unwrap_or_default(),
            labels
                .get("upgrade.cattle.io/node")
                .cloned()
                .unwrap_or_default()
        );
        out.insert(
            key,
            normalize_job(serde_json::to_value(&job).expect("a Job as JSON")),
        );
    }
    for (name, _) in NODES {
        let node = Api::<Node>::all(client.clone())
            .get(name)
            .await
            .expect("get a node");
        let labels: BTreeMap<String, String> = node
            .metadata
            .labels
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| !k.starts_with("slipway.test/"))
            .collect();
        out.insert(
            format!("nodes/{name}"),
            json!({"labels": labels, "unschedulable": node.spec.and_then(|s| s.unschedulable)}),
        );
    }
    let plans = Api::<Plan>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .expect("list Plans");
    for p in plans.items {
        let status = p.status.unwrap_or_default();
        let conditions: BTreeMap<String, Value> = status
            .conditions
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    json!({"status": c.status, "reason": c.reason, "message": c.message}),
                )
            })
            .collect();
        out.insert(
            format!("plans/{}", p.metadata.name.unwrap_or_default()),
            json!({
                "latestVersion": status.latest_version,
                "latestHash": status.latest_hash,
                "applying": status.applying,
                "conditions": conditions,
            }),
        );
    }
    out
}

/// Drops what differs between any two runs and what only wrangler writes.
fn normalize_job(mut job: Value) -> Value {
    job.as_object_mut().map(|j| j.remove("status"));
    if let Some(meta) = job["metadata"].as_object_mut() {
        for key in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
            "namespace",
        ] {
            meta.remove(key);
        }
        if let Some(owners) = meta
            .get_mut("ownerReferences")
            .and_then(Value::as_array_mut)
        {
            for o in owners.iter_mut().filter_map(Value::as_object_mut) {
                o.remove("uid");
            }
        }
        for map in ["labels", "annotations"] {
            if let Some(m) = meta.get_mut(map).and_then(Value::as_object_mut) {
                m.retain(|k, _| {
                    !k.starts_with("objectset.rio.cattle.io/") && !k.contains("controller-uid")
                });
            }
        }
    }
    // The Job controller's selector names the Job's uid; the rest of the spec is compared
    // (`parallelism` too: both settle at 1, SUC after unpausing).
    if let Some(m) = job["spec"]["selector"]["matchLabels"].as_object_mut() {
        m.retain(|k, _| !k.contains("controller-uid"));
    }
    if let Some(m) = job["spec"]["template"]["metadata"].as_object_mut() {
        m.remove("creationTimestamp");
        if let Some(l) = m.get_mut("labels").and_then(Value::as_object_mut) {
            l.retain(|k, _| {
                !k.starts_with("objectset.rio.cattle.io/") && !k.contains("controller-uid")
            });
        }
        if let Some(a) = m.get_mut("annotations").and_then(Value::as_object_mut) {
            a.retain(|k, _| !k.starts_with("objectset.rio.cattle.io/"));
        }
    }
    job
}

pub(crate) async fn delete_crd(client: &kube::Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    release_plans(client).await;
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    match api
        .delete("plans.upgrade.cattle.io", &DeleteParams::default())
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => panic!("delete the Plan CRD: {e}"),
    }
    support::wait_for("the Plan CRD to go", Duration::from_secs(60), || async {
        match api.get_opt("plans.upgrade.cattle.io").await {
            Ok(None) => Ok(()),
            Ok(Some(_)) => Err("still there".to_string()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
}

pub(crate) async fn cleanup(client: &kube::Client, ns: &str, nodes: &[String]) {
    let _ = Api::<Plan>::namespaced(client.clone(), ns)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let _ = Api::<Job>::namespaced(client.clone(), ns)
        .delete_collection(&DeleteParams::background(), &ListParams::default())
        .await;
    let _ = Api::<Secret>::namespaced(client.clone(), ns)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    support::delete_nodes(client, nodes).await;
    support::wait_for("the compat Jobs to go", Duration::from_secs(60), || async {
        let left = Api::<Job>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        if left.items.is_empty() {
            Ok(())
        } else {
            Err(format!("{} left", left.items.len()))
        }
    })
    .await;
}

/// The differences between two JSON values, as `path: suc => slipway`.
fn diff(path: &str, suc: &Value, slipway: &Value, out: &mut Vec<(String, String)>) {
    match (suc, slipway) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                let p = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                diff(
                    &p,
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}/{i}"), x, y, out);
            }
        }
        _ if suc != slipway => out.push((path.to_string(), format!("{suc} => {slipway}"))),
        _ => {}
    }
}

fn pattern_matches(pattern: &str, path: &str) -> bool {
    let p: Vec<&str> = pattern.split('/').collect();
    let s: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match p.split_last() {
        Some((&"**", head)) => {
            s.len() >= head.len() && head.iter().zip(&s).all(|(a, b)| *a == "*" || a == b)
        }
        _ => p.len() == s.len() && p.iter().zip(&s).all(|(a, b)| *a == "*" || a == b),
    }
}

/// The allowance that covers `path`, if any.
fn allowed(path: &str) -> Option<&'static (&'static str, &'static str, &'static str)> {
    ALLOWED
        .iter()
        .find(|(pattern, _, _)| pattern_matches(pattern, path))
}

/// The first cells of COMPATIBILITY.md's table rows.
fn compatibility_areas() -> Vec<String> {
    let text =
        std::fs::read_to_string(repo().join("COMPATIBILITY.md")).expect("read COMPATIBILITY.md");
    text.lines()
        .filter_map(|l| l.strip_prefix('|'))
        .filter_map(|l| l.split('|').next())
        .map(|cell| cell.trim().to_string())
        .collect()
}

#[test]
fn every_allowed_difference_names_a_compatibility_line() {
    let areas = compatibility_areas();
    for (pattern, area, _) in ALLOWED {
        assert!(
            areas.iter().any(|a| a == area),
            "allowance {pattern} cites {area:?}, which is no row of COMPATIBILITY.md"
        );
    }
}

#[test]
fn allowance_patterns_match_as_documented() {
    assert!(pattern_matches("jobs/a/**", "jobs/a/n1"));
    assert!(pattern_matches("jobs/a/**", "/jobs/a/n1/spec/x"));
    assert!(!pattern_matches("jobs/a/**", "jobs/b/n1"));
    assert!(pattern_matches("jobs/*/*/x", "jobs/a/n1/x"));
    assert!(!pattern_matches("jobs/*/*/x", "jobs/a/n1/x/y"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slipway_and_suc_make_the_same_jobs_labels_and_hashes() {
    if support::cluster().await.is_none() {
        return;
    }
    // Built (or found in the cache) before the scene takes the cluster.
    let suc = tokio::task::spawn_blocking(suc_binary)
        .await
        .expect("build SUC");
    // A cluster of its own: each run replaces the Plan CRD (every scene's Plans would go with
    // it) by its controller's, and SUC watches every node.
    let Some(s) = Scene::new("compat").own_cluster("compat").start().await else {
        return;
    };
    let target = Arc::new(Mutex::new("v1.30.1+k3s1".to_string()));
    let channel = support::channel_server(target).await;

    let of_suc = run(&s, &suc, &[], &channel, "suc").await;
    let slipway = PathBuf::from(env!("CARGO_BIN_EXE_slipway"));
    let of_slipway = run(&s, &slipway, &["run"], &channel, "slipway").await;
    // slipway's run left slipway's CRD; the scenes after it expect the committed one (and a
    // scene that fails half-way leaves it to the next scene's start, which applies it).
    support::install_crd(&s.client).await;
    if let Some(dir) = std::env::var_os("SLIPWAY_COMPAT_DUMP") {
        let dir = PathBuf::from(dir);
        std::fs::create_dir_all(&dir).expect("create SLIPWAY_COMPAT_DUMP");
        for (name, snapshot) in [("suc.json", &of_suc), ("slipway.json", &of_slipway)] {
            let text = serde_json::to_string_pretty(snapshot).expect("a snapshot as JSON");
            std::fs::write(dir.join(name), text).expect("write a snapshot");
        }
    }
    the_corpus_reached_its_states(&of_suc);
    only_allowed_differences(&of_suc, &of_slipway);
}

/// The corpus reaches the states it was written for, so the comparison covers them.
fn the_corpus_reached_its_states(of_suc: &Snapshot) {
    for (plan, reason) in [
        ("job-fails", "JobFailed"),
        ("jobs-held", "SyncJob"),
        ("window-open", "Complete"),
        ("k3os-latest", "Complete"),
    ] {
        assert_eq!(
            of_suc[&format!("plans/{plan}")]["conditions"]["Complete"]["reason"],
            reason,
            "SUC's Plan {plan}: {}",
            of_suc[&format!("plans/{plan}")]
        );
    }
    for job in [
        "jobs/k3os-latest/compat-cp",
        "jobs/kairos-upgrade/compat-w1",
        "jobs/kairos-upgrade/compat-w2",
    ] {
        assert!(of_suc.contains_key(job), "SUC made no {job}");
    }
    assert!(
        !of_suc.contains_key("jobs/k3os-latest/compat-w1"),
        "the k3OS example excludes live-booted nodes"
    );
}

/// Every difference between SUC's and slipway's snapshots is listed in [`ALLOWED`], and every
/// allowance still occurs.
fn only_allowed_differences(of_suc: &Snapshot, of_slipway: &Snapshot) {
    let keys: std::collections::BTreeSet<&String> =
        of_suc.keys().chain(of_slipway.keys()).collect();
    let mut differences = Vec::new();
    for key in keys {
        diff(
            key,
            of_suc.get(key).unwrap_or(&Value::Null),
            of_slipway.get(key).unwrap_or(&Value::Null),
            &mut differences,
        );
    }
    let (known, new): (Vec<_>, Vec<_>) =
        differences.iter().partition(|(p, _)| allowed(p).is_some());
    for (path, change) in &known {
        let (_, area, why) = allowed(path).expect("partitioned as allowed");
        eprintln!("compat: allowed ({area}: {why}): {path}: {change}");
    }
    eprintln!(
        "compat: {} Jobs, {} nodes, {} Plans compared; {} allowed differences",
        of_suc.keys().filter(|k| k.starts_with("jobs/")).count(),
        of_suc.keys().filter(|k| k.starts_with("nodes/")).count(),
        of_suc.keys().filter(|k| k.starts_with("plans/")).count(),
        known.len()
    );
    assert!(
        new.is_empty(),
        "differences between SUC v0.20.1 and slipway not listed in ALLOWED (path: SUC => slipway):\n{}",
        new.iter()
            .map(|(p, c)| format!("  {p}: {c}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let stale: Vec<&str> = ALLOWED
        .iter()
        .filter(|(pattern, _, _)| !known.iter().any(|(p, _)| pattern_matches(pattern, p)))
        .map(|(pattern, _, _)| *pattern)
        .collect();
    assert!(
        stale.is_empty(),
        "allowed differences that no longer occur (remove them, and their COMPATIBILITY.md line if it is gone): {stale:?}"
    );
}

/// What docs/migrating.md asks before going back to SUC: slipway (stopped) leaves its finalizer on
/// every Plan, which would keep the CRD from going.
pub(crate) async fn release_plans(client: &kube::Client) {
    let plans = Api::<Plan>::all(client.clone());
    let list = match plans.list(&ListParams::default()).await {
        Ok(list) => list,
        Err(kube::Error::Api(e)) if e.code == 404 => return,
        Err(e) => panic!("list Plans: {e}"),
    };
    for p in list.items {
        let kept: Vec<&String> = p
            .finalizers()
            .iter()
            .filter(|f| f.as_str() != "slipway.dev/plan-cleanup")
            .collect();
        if kept.len() == p.finalizers().len() {
            continue;
        }
        let api = Api::<Plan>::namespaced(client.clone(), &p.namespace().unwrap_or_default());
        let body = json!({"metadata": {"finalizers": kept}});
        match api
            .patch(&p.name_any(), &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => panic!("release Plan {}: {e}", p.name_any()),
        }
    }
}
