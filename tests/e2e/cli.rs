//! End-to-end tests of the command line against the local cluster: what `validate`, `render` and
//! `resolve` say offline is what the API server and the controller then do; `status` reads every
//! kind, from the kubeconfig context given, under a read-only user too.
//!
//! Shared scenes, each with its namespace, nodes and controller; the read-only user's ClusterRole
//! is the scene's own (`<namespace>-reader`). The scene whose NodeMaintenance and RebootPolicy
//! carry a status of its own is in the group of cluster-wide kinds, so that no controller
//! reconciles them meanwhile. `works_as_a_kubectl_plugin` needs no cluster.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::support::TestNamespace;
use crate::support::controller::ControllerProcess;
use crate::support::scene::Scene;
use k8s_openapi::api::batch::v1::Job;
use kube::api::ListParams;
use slipway::plan::api::Plan;

fn slipway(args: &[&str]) -> (i32, String, String) {
    let out = support::process::slipway()
        .args(args)
        .output()
        .expect("run slipway");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn corpus() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/lint/corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("corpus")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
}

/// `api`, `strict`, `controller` or `valid`, from validate's JSON: who would reject the Plan first. Strict:
/// the Secrets the corpus mounts are not on the cluster either.
fn validate_verdict(file: &Path) -> String {
    let (_, out, err) = slipway(&[
        "validate",
        "--strict",
        "-o",
        "json",
        &file.display().to_string(),
    ]);
    let report: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    let sources: Vec<&str> = report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["severity"] == "error")
        .filter_map(|f| f["source"].as_str())
        .collect();
    if sources.contains(&"schema") {
        "api".into()
    } else if sources.contains(&"strict") {
        "strict".into()
    } else if sources.contains(&"controller") {
        "controller".into()
    } else {
        "valid".into()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_agrees_with_the_api_server_and_the_controller() {
    let Some(s) = Scene::new("cli-validate").start().await else {
        return;
    };
    let (cluster, ns) = (&s.cluster, &s.ns);
    let _controller = ControllerProcess::start(cluster, ns.name(), &[]);
    // The opt-in strict policy, for the corpus' strict cases; the rest is refused by the CRD or
    // applied and judged by the controller either way.
    let policy = support::strict::install(cluster, ns).await;
    let plans = ns.api::<Plan>();
    let mut applied = Vec::new();
    let mut verdicts: BTreeMap<String, (String, String, String)> = BTreeMap::new();
    for file in corpus() {
        let text = std::fs::read_to_string(&file).expect("read corpus file");
        let expected = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .expect("first line: # expect: api|strict|controller|valid")
            .to_string();
        let name = file
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("name")
            .to_string();
        let offline = validate_verdict(&file);
        // kubectl asks for strict field validation, as users apply Plans.
        let cluster_verdict = match cluster
            .kubectl_stdin(&["apply", "-n", ns.name(), "-f", "-"], Some(&text))
            .await
        {
            Err(e) if e.to_string().contains(&policy) => "strict".to_string(),
            Err(_) => "api".to_string(),
            Ok(_) => {
                applied.push(name.clone());
                String::new()
            }
        };
        verdicts.insert(name, (expected, offline, cluster_verdict));
    }
    for name in applied {
        let validated = support::wait_for(
            &format!("plan {name} to get a Validated condition"),
            Duration::from_secs(60),
            || async {
                let plan = plans.get(&name).await?;
                plan.status
                    .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Validated"))
                    .map(|c| c.status)
                    .ok_or_else(|| anyhow::anyhow!("no Validated condition yet"))
            },
        )
        .await;
        let verdict = if validated == "True" {
            "valid"
        } else {
            "controller"
        };
        if let Some(v) = verdicts.get_mut(&name) {
            v.2 = verdict.into();
        }
    }
    let disagreements: Vec<String> = verdicts
        .iter()
        .filter(|(_, (e, o, c))| e != o || o != c)
        .map(|(n, (e, o, c))| format!("{n}: expected {e}, validate {o}, cluster {c}"))
        .collect();
    assert!(disagreements.is_empty(), "{disagreements:#?}");
    // Every CEL rule and every controller rule has a case.
    let kinds: Vec<&str> = verdicts.values().map(|v| v.0.as_str()).collect();
    assert!(kinds.iter().filter(|k| **k == "api").count() >= 11);
    assert!(kinds.iter().filter(|k| **k == "strict").count() >= 10);
    assert!(kinds.iter().filter(|k| **k == "controller").count() >= 3);
    support::strict::remove(cluster, &policy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_equals_what_the_controller_creates() {
    let Some(s) = Scene::new("cli-render").nodes(3).start().await else {
        return;
    };
    let (cluster, ns, nodes, pool) = (&s.cluster, &s.ns, &s.nodes, &s.pool);
    let dir = std::env::temp_dir().join(support::unique_name("slipway-render"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let plan_file = dir.join("plan.yaml");
    let plan = format!(
        "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata:\n  name: up\n  namespace: {}\nspec:\n  concurrency: 3\n  nodeSelector:\n    matchLabels:\n      slipway.test/pool: {pool}\n  version: v1.2.3+k3s1\n  cordon: true\n  upgrade:\n    image: busybox\n    command: [sh, -c, 'true']\n",
        ns.name()
    );
    std::fs::write(&plan_file, &plan).expect("write plan");
    let name = format!("slipway-{}", ns.name());
    let plan_arg = plan_file.display().to_string();
    let offline =
        render_offline_from_a_node_dump(cluster, &dir, &plan_arg, &name, pool, nodes).await;

    cluster
        .kubectl_stdin(&["apply", "-f", "-"], Some(&plan))
        .await
        .expect("apply plan");
    // Live: the nodes and the Plan's uid come from the cluster.
    let (code, live, err) = slipway(&[
        "render",
        &plan_arg,
        "--kubeconfig",
        &cluster.kubeconfig_path().display().to_string(),
        "--name",
        &name,
    ]);
    assert_eq!(code, 0, "{err}");
    let offline = rendered(&offline);
    let live_jobs = rendered(&live);
    assert_eq!(offline.len(), 3);
    assert_eq!(offline, live_jobs);

    let (_controller, created) = the_controllers_jobs(cluster, ns).await;
    assert_eq!(created, live_jobs);
    let _ = std::fs::remove_dir_all(dir);
}

/// Secrets in files are read as the API server stores them: a Plan whose Secret is written with
/// `stringData` (over a `data` key it overrides) and one whose Secrets are written with `data`
/// (one without a `type`, one empty) get from `render` the latestHash and the Job names that the
/// controller then gives them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_reads_secrets_as_the_controller_does() {
    let Some(s) = Scene::new("cli-secrets").nodes(2).start().await else {
        return;
    };
    let (cluster, ns, nodes) = (&s.cluster, &s.ns, &s.nodes);
    let dir = std::env::temp_dir().join(support::unique_name("slipway-secrets"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let plan = |name: &str, node: &str, secrets: &[&str]| {
        let mounts: String = secrets
            .iter()
            .map(|s| format!("  - name: {s}\n    path: /run/secrets/{s}\n"))
            .collect();
        format!(
            "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  concurrency: 1\n  nodeSelector:\n    matchLabels:\n      kubernetes.io/hostname: {node}\n  version: v1.2.3+k3s1\n  secrets:\n{mounts}  upgrade:\n    image: busybox\n    command: [sh, /run/secrets/{first}/upgrade.sh]\n",
            ns = ns.name(),
            first = secrets[0],
        )
    };
    // The Plan and its Secret in one file, the Secret in plain text.
    let plain = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: plain\n  namespace: {ns}\ntype: Opaque\ndata:\n  upgrade.sh: ZWNobyBvbGQK\n  keep: a2VwdA==\nstringData:\n  upgrade.sh: |\n    #!/bin/sh\n    echo \"upgrading $(hostname)\"\n---\n{}",
        plan("plain", &nodes[0], &["plain"]),
        ns = ns.name()
    );
    // The Plan in one file, its Secrets base64-encoded in another, given with --secret.
    let encoded = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: encoded\n  namespace: {ns}\ndata:\n  upgrade.sh: IyEvYmluL3NoCmVjaG8gdXBncmFkaW5nCg==\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: bare\n  namespace: {ns}\n",
        ns = ns.name()
    );
    let files = [
        ("plain.yaml", plain),
        (
            "encoded-plan.yaml",
            plan("encoded", &nodes[1], &["encoded", "bare"]),
        ),
        ("encoded-secrets.yaml", encoded),
    ];
    for (file, text) in &files {
        std::fs::write(dir.join(file), text).expect("write");
        cluster
            .kubectl_stdin(&["apply", "-f", "-"], Some(text))
            .await
            .unwrap_or_else(|e| panic!("apply {file}: {e}"));
    }
    let path = |f: &str| dir.join(f).display().to_string();
    let kc = cluster.kubeconfig_path().display().to_string();
    let name = format!("slipway-{}", ns.name());
    let rendered_plain =
        render_hash_and_jobs(&[&path("plain.yaml"), "--kubeconfig", &kc, "--name", &name]);
    let rendered_encoded = render_hash_and_jobs(&[
        &path("encoded-plan.yaml"),
        "--secret",
        &path("encoded-secrets.yaml"),
        "--kubeconfig",
        &kc,
        "--name",
        &name,
    ]);

    let _controller = ControllerProcess::start(cluster, ns.name(), &[]);
    let plans = ns.api::<Plan>();
    let jobs = ns.api::<Job>();
    for (plan, rendered) in [("plain", rendered_plain), ("encoded", rendered_encoded)] {
        let controllers = support::wait_for(
            &format!("plan/{plan}'s latestHash and Job"),
            Duration::from_secs(60),
            || async {
                let hash = plans
                    .get(plan)
                    .await?
                    .status
                    .and_then(|s| s.latest_hash)
                    .ok_or_else(|| anyhow::anyhow!("no latestHash yet"))?;
                let label = format!("upgrade.cattle.io/plan={plan}");
                let names: Vec<String> = jobs
                    .list(&ListParams::default().labels(&label))
                    .await?
                    .items
                    .into_iter()
                    .filter_map(|j| j.metadata.name)
                    .collect();
                if names.is_empty() {
                    anyhow::bail!("no Job yet");
                }
                Ok((hash, names))
            },
        )
        .await;
        assert_eq!(controllers, rendered, "plan/{plan}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `slipway render <args>`: the latestHash its summary prints and the names of its Jobs.
fn render_hash_and_jobs(args: &[&str]) -> (String, Vec<String>) {
    let (code, summary, err) = slipway(&[&["render", "--summary"], args].concat());
    assert_eq!(code, 0, "{err}");
    let hash = summary
        .lines()
        .next()
        .and_then(|l| l.split("latestHash ").nth(1))
        .unwrap_or_else(|| panic!("no latestHash in {summary}"))
        .to_string();
    let (code, objects, err) = slipway(&[&["render"], args].concat());
    assert_eq!(code, 0, "{err}");
    let jobs = rendered(&objects).into_keys().collect();
    (hash, jobs)
}

/// `render` of the Plan file over a dump of the pool's nodes (no cluster); `--summary` names
/// every node. Returns the rendered Jobs.
async fn render_offline_from_a_node_dump(
    cluster: &support::Cluster,
    dir: &Path,
    plan_arg: &str,
    name: &str,
    pool: &str,
    nodes: &[String],
) -> String {
    let nodes_file = dir.join("nodes.yaml");
    let dump = cluster
        .kubectl(&[
            "get",
            "nodes",
            "-l",
            &format!("slipway.test/pool={pool}"),
            "-o",
            "yaml",
        ])
        .await
        .expect("dump nodes");
    std::fs::write(&nodes_file, dump).expect("write nodes");
    let (code, offline, err) = slipway(&[
        "render",
        plan_arg,
        "--nodes",
        &nodes_file.display().to_string(),
        "--name",
        name,
    ]);
    assert_eq!(code, 0, "{err}");
    let (code, summary, err) = slipway(&[
        "render",
        plan_arg,
        "--nodes",
        &nodes_file.display().to_string(),
        "--name",
        name,
        "--summary",
    ]);
    assert_eq!(code, 0, "{err}");
    for n in nodes {
        assert!(summary.contains(n.as_str()), "{summary}");
    }
    offline
}

/// Jobs by name: the node each is for and its pod template hash.
fn jobs_by_name(jobs: impl IntoIterator<Item = Job>) -> BTreeMap<String, (String, String)> {
    jobs.into_iter()
        .map(|j| {
            let node = j
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("upgrade.cattle.io/node"))
                .cloned()
                .unwrap_or_default();
            let hash = slipway::plan::core::job::pod_template_hash(&j)
                .unwrap_or_default()
                .to_string();
            (j.metadata.name.unwrap_or_default(), (node, hash))
        })
        .collect()
}

/// The Jobs of `slipway render`'s output, by name.
fn rendered(text: &str) -> BTreeMap<String, (String, String)> {
    jobs_by_name(serde_saphyr::from_multiple::<Job>(text).expect("rendered Jobs"))
}

/// Starts the controller and returns it with the three Jobs it creates, by name.
async fn the_controllers_jobs(
    cluster: &support::Cluster,
    ns: &TestNamespace,
) -> (ControllerProcess, BTreeMap<String, (String, String)>) {
    let controller = ControllerProcess::start(cluster, ns.name(), &[]);
    let jobs = ns.api::<Job>();
    let created = support::wait_for(
        "the controller's 3 Jobs",
        Duration::from_secs(60),
        || async {
            let list = jobs.list(&ListParams::default()).await?;
            if list.items.len() < 3 {
                anyhow::bail!("{} Jobs", list.items.len());
            }
            Ok(list.items)
        },
    )
    .await;
    (controller, jobs_by_name(created))
}

/// A scene of the read-only commands: a kubeconfig `kc` that may only get, list and watch, and
/// the Plan `follow` over the pool, on a channel served on loopback, applied and written to
/// `plan_file`.
struct Reader {
    s: Scene,
    dir: PathBuf,
    kc: String,
    plan: String,
    plan_file: PathBuf,
}

impl Reader {
    async fn start(name: &str, nodes: usize) -> Option<Reader> {
        let s = Scene::new(name).nodes(nodes).start().await?;
        let dir = std::env::temp_dir().join(support::unique_name("slipway-ro"));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let kc = a_read_only_kubeconfig(&s.cluster, &s.ns, &s.name("reader"), &dir).await;
        let target = std::sync::Arc::new(std::sync::Mutex::new("v1.31.2+k3s1".to_string()));
        let channel = support::channel_server(target).await;
        let plan = format!(
            "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata:\n  name: follow\n  namespace: {}\nspec:\n  concurrency: 2\n  nodeSelector:\n    matchLabels:\n      slipway.test/pool: {}\n  channel: {channel}\n  upgrade:\n    image: busybox\n",
            s.ns.name(),
            s.pool
        );
        let plan_file = dir.join("plan.yaml");
        std::fs::write(&plan_file, &plan).expect("write plan");
        s.cluster
            .kubectl_stdin(&["apply", "-f", "-"], Some(&plan))
            .await
            .expect("apply plan");
        Some(Reader {
            s,
            dir,
            kc,
            plan,
            plan_file,
        })
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// render and resolve work with a kubeconfig that may only get, list and watch; resolve gives
/// the latestHash the controller then writes, and `status --watch` and `status -o json` follow
/// the rollout under the same kubeconfig.
// Multi-threaded: the channel server must answer while the test blocks on the slipway process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_commands_follow_a_rollout_under_a_read_only_service_account() {
    let Some(r) = Reader::start("cli-readonly", 2).await else {
        return;
    };
    let (ns, kc) = (&r.s.ns, r.kc.as_str());
    let pf = r.plan_file.display().to_string();
    let hash = resolve_and_render_as_the_reader(&pf, kc, &r.s.nodes);
    let _controller = status_watch_follows_the_rollout(&r.s.cluster, ns, kc, &r.dir, &hash).await;
    let (code, out, err) = slipway(&[
        "status",
        "follow",
        "-n",
        ns.name(),
        "--kubeconfig",
        kc,
        "-o",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report[0]["done"], 2, "{out}");
    assert_eq!(report[0]["latestHash"], hash.as_str(), "{out}");
    assert_eq!(report[0]["kind"], "Plan", "{out}");
}

/// `status` of every kind under a reader that may list Plans only: the others are left out with a
/// note; a kind it may not list, asked for by name, is an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_leaves_out_the_kinds_a_reader_may_not_list() {
    let Some(r) = Reader::start("cli-kinds", 0).await else {
        return;
    };
    let (ns, kc) = (&r.s.ns, r.kc.as_str());
    let (code, out, err) = slipway(&["status", "-n", ns.name(), "--kubeconfig", kc]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("plan/follow  "), "{out}");
    for kind in ["nodemaintenances", "rebootpolicies", "nodeops"] {
        assert!(
            err.lines()
                .any(|l| l.starts_with("note: ") && l.contains(kind) && l.ends_with("left out")),
            "{err}"
        );
    }
    let (code, _, err) = slipway(&["status", "nm", "--kubeconfig", kc]);
    assert_eq!(
        code, 1,
        "asked for by name, a kind it may not list is an error: {err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_says_in_one_line_that_a_cluster_object_is_missing() {
    let Some(r) = Reader::start("cli-missing", 0).await else {
        return;
    };
    a_missing_cluster_object_is_one_line(&r.plan, &r.plan_file, &r.kc);
}

/// A ServiceAccount `reader` that may only get, list and watch nodes, namespaces, Plans and
/// Jobs (ClusterRole `role`), and a kubeconfig in `dir` with its token; the token really cannot
/// write. Returns the kubeconfig's path.
async fn a_read_only_kubeconfig(
    cluster: &support::Cluster,
    ns: &TestNamespace,
    role: &str,
    dir: &Path,
) -> String {
    let rbac = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: reader\n  namespace: {ns}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {role}\nrules:\n- apiGroups: ['']\n  resources: [nodes, namespaces]\n  verbs: [get, list, watch]\n- apiGroups: [upgrade.cattle.io]\n  resources: [plans]\n  verbs: [get, list, watch]\n- apiGroups: [batch]\n  resources: [jobs]\n  verbs: [get, list, watch]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {role}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: {role}\nsubjects:\n- kind: ServiceAccount\n  name: reader\n  namespace: {ns}\n",
        ns = ns.name()
    );
    cluster
        .kubectl_stdin(&["apply", "-f", "-"], Some(&rbac))
        .await
        .expect("apply rbac");
    let token = cluster
        .kubectl(&[
            "-n",
            ns.name(),
            "create",
            "token",
            "reader",
            "--duration=1h",
        ])
        .await
        .expect("create token");
    let kubeconfig = dir.join("kubeconfig");
    support::token_kubeconfig(cluster.kubeconfig_path(), token.trim(), &kubeconfig);
    let kc = kubeconfig.display().to_string();
    let can = cluster
        .kubectl(&[
            "--kubeconfig",
            &kc,
            "auth",
            "can-i",
            "create",
            "jobs",
            "-n",
            ns.name(),
        ])
        .await;
    assert!(can.is_err(), "the reader may create Jobs: {can:?}");
    kc
}

/// `resolve` gives the channel's version and a hash; `render --summary` one Job per node with
/// that hash. Returns the hash.
fn resolve_and_render_as_the_reader(pf: &str, kc: &str, nodes: &[String]) -> String {
    let (code, out, err) = slipway(&["resolve", pf, "--kubeconfig", kc]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("latestVersion: v1.31.2-k3s1"), "{out}");
    let hash = out
        .lines()
        .find_map(|l| l.strip_prefix("latestHash:"))
        .map(|h| h.trim().to_string())
        .expect("latestHash line");
    let (code, out, err) = slipway(&[
        "render",
        pf,
        "--kubeconfig",
        kc,
        "--version",
        "v1.31.2+k3s1",
        "--summary",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&hash), "{out}");
    for n in nodes {
        assert!(
            out.lines()
                .any(|l| l.starts_with(n.as_str()) && l.contains(" 1 ")),
            "{out}"
        );
    }
    hash
}

/// status --watch under the reader, from before the rollout until it is done.
/// Returns the controller it started.
async fn status_watch_follows_the_rollout(
    cluster: &support::Cluster,
    ns: &TestNamespace,
    kc: &str,
    dir: &Path,
    hash: &str,
) -> ControllerProcess {
    let watch_log = dir.join("watch.txt");
    let mut watch = support::process::slipway()
        .args([
            "status",
            "follow",
            "-n",
            ns.name(),
            "--kubeconfig",
            kc,
            "--watch",
        ])
        .stdout(std::fs::File::create(&watch_log).expect("watch log"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start status --watch");
    // The first frame is drawn before the controller starts, so it shows the rollout not begun.
    support::wait_for(
        "the first status frame",
        Duration::from_secs(30),
        || async {
            let text = std::fs::read_to_string(&watch_log)?;
            if text.contains("plan/follow") {
                Ok(())
            } else {
                Err(anyhow::anyhow!("no frame yet"))
            }
        },
    )
    .await;
    let controller = ControllerProcess::start(cluster, ns.name(), &[]);
    let plans = ns.api::<Plan>();
    let written = support::wait_for(
        "the controller's latestHash",
        Duration::from_secs(60),
        || async {
            plans
                .get("follow")
                .await?
                .status
                .and_then(|s| s.latest_hash)
                .ok_or_else(|| anyhow::anyhow!("no latestHash yet"))
        },
    )
    .await;
    assert_eq!(written, hash);
    let frames = support::wait_for(
        "status --watch to show the rollout done",
        Duration::from_secs(90),
        || async {
            let text = std::fs::read_to_string(&watch_log)?;
            if text.contains("done 2  applying 0  remaining 0") {
                Ok(text)
            } else {
                Err(anyhow::anyhow!("{text}"))
            }
        },
    )
    .await;
    let _ = watch.kill();
    let _ = watch.wait();
    // It redrew as the rollout moved: an earlier frame had nodes still to do.
    let first = frames.lines().next().unwrap_or_default().to_string();
    assert!(
        first.starts_with("plan/follow") && !first.contains("done 2"),
        "{frames}"
    );
    controller
}

/// A cluster object that is not there: one line, non-zero.
fn a_missing_cluster_object_is_one_line(plan: &str, plan_file: &Path, kc: &str) {
    let missing = plan.replace(
        "concurrency: 2",
        "concurrency: 2\n  secrets:\n  - name: nope\n    path: /x",
    );
    std::fs::write(plan_file, missing).expect("write plan");
    let pf = plan_file.display().to_string();
    let (code, _, err) = slipway(&["render", &pf, "--kubeconfig", kc, "--version", "v1"]);
    assert_eq!(code, 1);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("nope"), "{err}");
}

/// The same binary works as a kubectl plugin when installed as `kubectl-slipway`.
#[test]
fn works_as_a_kubectl_plugin() {
    let dir = std::env::temp_dir().join(support::unique_name("slipway-plugin"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_slipway"), dir.join("kubectl-slipway"))
        .expect("symlink");
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("kubectl")
        .args([
            "slipway",
            "validate",
            concat!(env!("CARGO_MANIFEST_DIR"), "/examples"),
        ])
        .env("PATH", &path)
        .output()
        .expect("run kubectl");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("0 errors"), "{stdout}");
    // Help speaks of the command as it was typed.
    let out = Command::new("kubectl")
        .args(["slipway", "render", "--help"])
        .env("PATH", &path)
        .output()
        .expect("run kubectl");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("Usage: kubectl slipway render [OPTIONS] <PLAN>"),
        "{help}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `status` shows NodeMaintenances and RebootPolicies beside Plans, as text, JSON and YAML, from
/// the kubeconfig context given with `--context`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_every_kind_from_the_context_given() {
    use kube::api::{Patch, PatchParams, PostParams};
    use slipway::maintenance::api::NodeMaintenance;
    use slipway::reboot_policy::api::RebootPolicy;
    // Its NodeMaintenance and RebootPolicy carry a status of the test's: no controller of a
    // cluster-wide kind may reconcile them meanwhile.
    let Some(s) = Scene::new("cli-status")
        .cluster_wide()
        .crds(&[
            "nodemaintenances.nodemaintenance.medik8s.io",
            "rebootpolicies.slipway.dev",
        ])
        .start()
        .await
    else {
        return;
    };
    let (cluster, client, ns) = (&s.cluster, &s.client, &s.ns);
    let (nm, rbp) = (s.name("nm"), s.name("rbp"));
    let plan = format!(
        "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata:\n  name: up\n  namespace: {}\nspec:\n  concurrency: 1\n  version: v1\n  upgrade:\n    image: busybox\n",
        ns.name()
    );
    cluster
        .kubectl_stdin(&["apply", "-f", "-"], Some(&plan))
        .await
        .expect("apply the Plan");
    let maintenances = kube::Api::<NodeMaintenance>::all(client.clone());
    let m: NodeMaintenance = serde_json::from_value(serde_json::json!({
        "apiVersion": "nodemaintenance.medik8s.io/v1beta1", "kind": "NodeMaintenance",
        "metadata": {"name": nm}, "spec": {"nodeName": "no-such-node", "reason": "disk swap"},
    }))
    .expect("a NodeMaintenance");
    maintenances
        .create(&PostParams::default(), &m)
        .await
        .expect("create");
    let status = serde_json::json!({"status": {
        "phase": "Running", "drainProgress": 50,
        "pendingPodsReasons": [{"namespace": "shop", "name": "web-1", "reason": "a PodDisruptionBudget allows no disruption"}],
    }});
    maintenances
        .patch_status(&nm, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("the NodeMaintenance's status");
    let policies = kube::Api::<RebootPolicy>::all(client.clone());
    let p: RebootPolicy = serde_json::from_value(serde_json::json!({
        "apiVersion": "slipway.dev/v1alpha1", "kind": "RebootPolicy",
        "metadata": {"name": rbp}, "spec": {"paused": true, "concurrency": 1},
    }))
    .expect("a RebootPolicy");
    policies
        .create(&PostParams::default(), &p)
        .await
        .expect("create");
    let status = serde_json::json!({"status": {"wanting": 1, "rebooting": 0,
        "nodes": [{"name": "w1", "phase": "Wanting", "signal": "agent"}]}});
    policies
        .patch_status(&rbp, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("the RebootPolicy's status");

    let dir = std::env::temp_dir().join(support::unique_name("slipway-status"));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kc = two_context_kubeconfig(cluster.kubeconfig_path(), &dir.join("kubeconfig"));
    let args = |more: &[&str]| -> Vec<String> {
        let mut a: Vec<String> = ["status", "-n", ns.name(), "--kubeconfig", &kc]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(more.iter().map(|s| s.to_string()));
        a
    };
    let run = |more: &[&str]| {
        let a = args(more);
        slipway(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let wanted = [
        "plan/up".to_string(),
        format!("nm/{nm}"),
        format!("rebootpolicy/{rbp}"),
    ];
    let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
    // The kubeconfig's current context is a server that is not there.
    let (code, _, err) = run(&wanted);
    assert_eq!(code, 1, "{err}");
    let (code, text, err) = run(&[&wanted[..], &["--context", "test"]].concat());
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        text,
        format!(
            "plan/up  version -  done 0  applying 0  remaining 0\nnodemaintenance/{nm}  node no-such-node  Running  drained 50%  reason: disk swap\n  pending pod shop/web-1: a PodDisruptionBudget allows no disruption\nrebootpolicy/{rbp}  wanting 1  rebooting 0  paused\n  node w1  Wanting  since -  signal agent\n"
        )
    );
    let (code, yaml, err) = run(&[&wanted[..], &["--context", "test", "-o", "yaml"]].concat());
    assert_eq!(code, 0, "{err}");
    let (code, json, err) = run(&[&wanted[..], &["--context", "test", "-o", "json"]].concat());
    assert_eq!(code, 0, "{err}");
    let from_yaml: serde_json::Value = serde_saphyr::from_str(&yaml).expect("yaml");
    let from_json: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(from_yaml, from_json);
    let kinds: Vec<&str> = from_json
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|r| r["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["Plan", "NodeMaintenance", "RebootPolicy"]);
    assert_eq!(from_json[1]["pendingPods"][0]["name"], "web-1");
    assert_eq!(from_json[2]["nodes"][0]["phase"], "Wanting");
    // Without a resource: every kind, ours among them.
    let (code, all, err) = run(&["--context", "test"]);
    assert_eq!(code, 0, "{err}");
    for line in [
        "plan/up  ".to_string(),
        format!("nodemaintenance/{nm}  "),
        format!("rebootpolicy/{rbp}  "),
    ] {
        assert!(all.lines().any(|l| l.starts_with(&line)), "{line}: {all}");
    }
    let (code, _, err) = run(&["rbp/nope", "--context", "test"]);
    assert_eq!(code, 1);
    assert_eq!(err.trim(), "slipway: rebootpolicy/nope not found", "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A copy of the kubeconfig `admin` whose context `test` is the cluster, and whose current
/// context is a server nobody listens on. Returns its path.
fn two_context_kubeconfig(admin: &Path, out: &Path) -> String {
    let mut kc = kube::config::Kubeconfig::read_from(admin).expect("admin kubeconfig");
    let current = kc.current_context.clone().expect("a current context");
    let mut test = kc
        .contexts
        .iter()
        .find(|c| c.name == current)
        .cloned()
        .expect("the current context");
    test.name = "test".into();
    let mut nowhere = test.clone();
    nowhere.name = "nowhere".into();
    let mut cluster = kc.clusters[0].clone();
    cluster.name = "nowhere".into();
    if let Some(c) = cluster.cluster.as_mut() {
        c.server = Some(format!("https://127.0.0.1:{}", support::free_port()));
    }
    if let Some(c) = nowhere.context.as_mut() {
        c.cluster = "nowhere".into();
    }
    kc.clusters.push(cluster);
    kc.contexts.push(test);
    kc.contexts.push(nowhere);
    kc.current_context = Some("nowhere".into());
    std::fs::write(out, serde_json::to_string_pretty(&kc).expect("json")).expect("write");
    out.display().to_string()
}
