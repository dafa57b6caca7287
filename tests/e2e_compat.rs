//! The differential test against system-upgrade-controller v0.20.1 itself.
//!
//! SUC, built from the Go module proxy by `tests/compat/build.sh`, and slipway run in turn on the
//! same local cluster, in the same namespace, over nodes with the same names, with the same Plans:
//! every Plan in `examples/` and those in `tests/compat/plans/` (written to cover the fields). Each
//! Plan's selector is narrowed to the test's nodes and a channel points at a loopback server. After
//! each run the test takes the Jobs (metadata, spec, pod template), the node labels, and each
//! Plan's `latestVersion`, `latestHash` and conditions; it removes what only wrangler writes
//! (`objectset.rio.cattle.io/*`) and what differs between any two runs (uids, times, generated
//! labels), and compares. Every difference that remains must be named in [`ALLOWED`] with the
//! COMPATIBILITY.md line that explains it; anything else fails the test with a diff.

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use serde_json::{Value, json};
use slipway::api::Plan;

const NS: &str = "slipway-compat";
const CONTROLLER: &str = "system-upgrade-controller";
const POOL_LABEL: &str = "slipway.test/compat";
/// The test's nodes: a control-plane node and two workers, the same names in both runs.
const NODES: [(&str, bool); 3] = [
    ("compat-cp", true),
    ("compat-w1", false),
    ("compat-w2", false),
];

/// Differences that are deliberate, by path (a `*` matches one path segment), with the line of
/// COMPATIBILITY.md that explains each.
const ALLOWED: &[(&str, &str)] = &[(
    "jobs/*/*/metadata/annotations/slipway.dev~1pod-template-hash",
    "Replacing changed Jobs: slipway compares a pod-template-hash annotation",
)];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The SUC binary: `SLIPWAY_SUC_BINARY`, else what `tests/compat/build.sh` builds (once, cached).
fn suc_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("SLIPWAY_SUC_BINARY") {
        return PathBuf::from(p);
    }
    let out = Command::new(repo().join("tests/compat/build.sh"))
        .stderr(Stdio::inherit())
        .output()
        .expect("run tests/compat/build.sh");
    assert!(out.status.success(), "tests/compat/build.sh failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Every Plan of the corpus, rewritten for the test: its namespace, its selector narrowed to the
/// test's nodes, its channel on loopback.
fn corpus(channel: &str) -> Vec<Plan> {
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
            plan.metadata.namespace = Some(NS.into());
            // `spec.reboot` is slipway's alone (SUC's CRD prunes it); kwok nodes never reboot.
            plan.spec.reboot = None;
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
fn secrets() -> Vec<Secret> {
    vec![Secret {
        metadata: ObjectMeta {
            name: Some("compat-credentials".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([(
            "token".to_string(),
            "s3cr3t".to_string(),
        )])),
        ..Default::default()
    }]
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(program: &Path, args: &[&str], kubeconfig: &Path, log: &Path) -> Process {
    let file = std::fs::File::create(log).expect("controller log");
    let child = Command::new(program)
        .args(args)
        .env("SYSTEM_UPGRADE_CONTROLLER_NAME", CONTROLLER)
        .env("SYSTEM_UPGRADE_CONTROLLER_NAMESPACE", NS)
        .env("SYSTEM_UPGRADE_CONTROLLER_KUBE_CONFIG", kubeconfig)
        .env("SYSTEM_UPGRADE_CONTROLLER_NODE_NAME", NODES[0].0)
        .env("SLIPWAY_METRICS_ADDR", "127.0.0.1:0")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::from(file.try_clone().expect("log")))
        .stderr(Stdio::from(file))
        .spawn()
        .expect("start a controller");
    Process(child)
}

/// What a run leaves behind, normalized: `jobs/<plan>/<node>`, `nodes/<node>`, `plans/<plan>`.
type Snapshot = BTreeMap<String, Value>;

/// Runs one controller over fresh nodes and the corpus, until every Plan settles.
async fn run(
    cluster: &support::Cluster,
    program: &Path,
    args: &[&str],
    channel: &str,
    who: &str,
) -> Snapshot {
    let client = cluster.client().await;
    let nodes: Vec<Node> = NODES
        .iter()
        .map(|(name, cp)| {
            let mut labels = vec![(POOL_LABEL, "true")];
            if *cp {
                labels.push(("node-role.kubernetes.io/control-plane", "true"));
            }
            support::fake_node(name, &labels)
        })
        .collect();
    let names = support::create_node_objects(&client, &nodes).await;
    support::wait_nodes_ready(&client, &names).await;
    let log = std::env::temp_dir().join(format!("slipway-compat-{who}.log"));
    let process = start(program, args, cluster.kubeconfig_path(), &log);
    wait_crd(cluster).await;
    for s in secrets() {
        Api::<Secret>::namespaced(client.clone(), NS)
            .create(&PostParams::default(), &s)
            .await
            .expect("create a Secret");
    }
    let plans = Api::<Plan>::namespaced(client.clone(), NS);
    let corpus = corpus(channel);
    for p in &corpus {
        plans
            .create(&PostParams::default(), p)
            .await
            .unwrap_or_else(|e| panic!("{who}: create Plan {:?}: {e}", p.metadata.name));
    }
    settle(&plans, &log).await;
    let snapshot = snapshot(&client).await;
    drop(process);
    cleanup(&client, &names).await;
    snapshot
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

/// Every Plan complete, or nothing changing for 5 s (a window that is closed, a Job that failed).
async fn settle(plans: &Api<Plan>, log: &Path) {
    let mut last = String::new();
    let mut quiet = 0;
    for _ in 0..240 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let list = plans
            .list(&ListParams::default())
            .await
            .expect("list Plans");
        let complete = list.items.iter().all(|p| {
            p.status
                .iter()
                .flat_map(|s| s.conditions.iter())
                .any(|c| c.type_ == "Complete" && c.status == "True")
        });
        let now = serde_json::to_string(&list.items.iter().map(|p| &p.status).collect::<Vec<_>>())
            .unwrap_or_default();
        quiet = if now == last { quiet + 1 } else { 0 };
        last = now;
        if (complete && quiet >= 2) || quiet >= 10 {
            return;
        }
    }
    panic!(
        "the Plans did not settle in 2 minutes:\n{}",
        support::log_tail(log)
    );
}

async fn snapshot(client: &kube::Client) -> Snapshot {
    let mut out = Snapshot::new();
    let jobs = Api::<Job>::namespaced(client.clone(), NS)
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
    let plans = Api::<Plan>::namespaced(client.clone(), NS)
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
    if let Some(spec) = job["spec"].as_object_mut() {
        spec.remove("selector");
        // SUC creates Jobs paused and unpauses them: compare the unpaused Job.
        spec.remove("suspend");
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

async fn cleanup(client: &kube::Client, nodes: &[String]) {
    let _ = Api::<Plan>::namespaced(client.clone(), NS)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    let _ = Api::<Job>::namespaced(client.clone(), NS)
        .delete_collection(&DeleteParams::background(), &ListParams::default())
        .await;
    let _ = Api::<Secret>::namespaced(client.clone(), NS)
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await;
    support::delete_nodes(client, nodes).await;
    support::wait_for("the compat Jobs to go", Duration::from_secs(60), || async {
        let left = Api::<Job>::namespaced(client.clone(), NS)
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

fn allowed(path: &str) -> Option<&'static str> {
    ALLOWED.iter().find_map(|(pattern, why)| {
        let p: Vec<&str> = pattern.split('/').collect();
        let s: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        (p.len() == s.len() && p.iter().zip(&s).all(|(a, b)| *a == "*" || a == b)).then_some(*why)
    })
}

#[tokio::test]
async fn slipway_and_suc_make_the_same_jobs_labels_and_hashes() {
    let Some(cluster) = support::cluster().await else {
        return;
    };
    let suc = suc_binary();
    let client = cluster.client().await;
    let _ = Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(NS.into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await;
    let target = Arc::new(Mutex::new("v1.30.1+k3s1".to_string()));
    let channel = support::channel_server(target).await;

    let of_suc = run(&cluster, &suc, &[], &channel, "suc").await;
    let slipway = PathBuf::from(env!("CARGO_BIN_EXE_slipway"));
    let of_slipway = run(&cluster, &slipway, &["run"], &channel, "slipway").await;
    // Other tests of this cluster expect slipway's CRD; SUC installed its own.
    support::install_crd(&client).await;

    assert_eq!(
        of_suc.keys().collect::<Vec<_>>(),
        of_slipway.keys().collect::<Vec<_>>(),
        "the same Jobs, nodes and Plans"
    );
    let mut differences = Vec::new();
    for (key, a) in &of_suc {
        diff(key, a, &of_slipway[key], &mut differences);
    }
    let (known, new): (Vec<_>, Vec<_>) =
        differences.iter().partition(|(p, _)| allowed(p).is_some());
    for (path, change) in &known {
        eprintln!(
            "compat: allowed: {path}: {change} ({})",
            allowed(path).unwrap_or_default()
        );
    }
    eprintln!(
        "compat: {} Jobs, {} Plans compared; {} allowed differences",
        of_suc.keys().filter(|k| k.starts_with("jobs/")).count(),
        of_suc.keys().filter(|k| k.starts_with("plans/")).count(),
        known.len()
    );
    assert!(
        new.is_empty(),
        "differences between SUC v0.20.1 and slipway (path: SUC => slipway):\n{}",
        new.iter()
            .map(|(p, c)| format!("  {p}: {c}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
