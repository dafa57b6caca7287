//! `just bench`: slipway against the floor of the local cluster, on the same cluster in one run.
//!
//! Mode `rollout` (default): a cluster of `SLIPWAY_BENCH_NODES` (1,000) fake nodes; first an ideal
//! controller (create one Job per node with `SLIPWAY_BENCH_CONCURRENCY` (100) in flight, label the
//! node when its Job completes, nothing else), then slipway (the image's build) rolling out one Plan of
//! the same concurrency over the same nodes. Each line: seconds from start to every node labelled,
//! the most Jobs active at once (watched independently), the controller's peak RSS and CPU seconds,
//! and its API writes by verb and resource (from the API server's audit log: both run with their
//! own token of the `system-upgrade` ServiceAccount, which the local cluster audits).
//!
//! Mode `churn`: `SLIPWAY_BENCH_NODES` (5,000) nodes and `SLIPWAY_BENCH_PLANS` (50) Plans, each
//! selecting its own share of the nodes, all already done (nodes carry each Plan's hash). slipway
//! starts, settles, then for `SLIPWAY_BENCH_CHURN_SECS` (120) kwok's heartbeats go on and
//! `SLIPWAY_BENCH_CHURN_RATE` (50) node label patches per second change a label no Plan reads.
//! It prints the controller's CPU seconds and reconciles per minute during that window.
//!
//! Modes `idle` and `restart`: see [`quiet`]; mode `fleet` (every operation at once): see [`fleet`];
//! mode `soak` (an hour of object churn): see [`soak`]; mode `nodeop` (a small NodeOp's pace): see
//! [`nodeop`].
//!
//! `SLIPWAY_BENCH_IDEAL=0` leaves the ideal controller out (its time on a cluster of that size and
//! pace is known: it is the cluster's floor). `SLIPWAY_BENCH_BINARY` benches another build.
//!
//! With `SLIPWAY_BENCH_BESIDE=1`, slipway runs beside the ideal controller with no Plan, and the
//! ideal's Jobs are the Jobs slipway renders for a Plan (without the Plan's label and owner), so
//! its watches see the same Jobs and node events as in its own rollout: its line, `watching`, is
//! what following the cluster costs it, with no decision to make and nothing to write.
//!
//! With `SLIPWAY_BENCH_CHECK=1`, slipway's Plan has a health check (a ConfigMap's field, which
//! holds), and its reads line counts how often the check's object was read.
//!
//! With `SLIPWAY_BENCH_SUC=<path>` (a system-upgrade-controller binary), the rollout mode also
//! runs SUC on the same nodes and prints its line.
//!
//! Nothing here asserts a time: it measures and prints.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, Config};
use serde_json::{Value, json};
use slipway::plan::api::Plan;

const NS: &str = "system-upgrade";
const SA: &str = "system-upgrade";
const IDEAL_LABEL: &str = "bench.slipway.dev/ideal";
const CHURN_LABEL: &str = "bench.slipway.dev/churn";
const GROUP_LABEL: &str = "bench.slipway.dev/group";
const POOL_LABEL: &str = "bench.slipway.dev/pool";

#[path = "rollout/fleet.rs"]
mod fleet;
#[path = "rollout/nodeop.rs"]
mod nodeop;
#[path = "rollout/quiet.rs"]
mod quiet;
#[path = "rollout/soak.rs"]
mod soak;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Rollout,
    Churn,
    Idle,
    Restart,
    Fleet,
    Soak,
    NodeOp,
}

struct Options {
    mode: Mode,
    nodes: usize,
    concurrency: usize,
    plans: usize,
    churn_secs: u64,
    churn_rate: u64,
    idle_secs: u64,
    quiet_secs: u64,
    soak_secs: u64,
    soak_warmup_secs: u64,
    /// Rollout mode: slipway's Plan has a health check (on a ConfigMap), to count its reads.
    check: bool,
    /// Rollout mode: run the ideal controller first (`SLIPWAY_BENCH_IDEAL=0` leaves it out, when
    /// its figure on the same cluster size and pace is known: it is the cluster's floor).
    ideal: bool,
    /// Rollout mode: slipway watches the ideal controller's run (see the module's comment).
    beside: bool,
    suc: Option<PathBuf>,
}

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> Result<T> {
    match std::env::var(key).ok().filter(|v| !v.is_empty()) {
        Some(v) => v
            .parse()
            .map_err(|_| anyhow::anyhow!("{key}={v:?} is not a number")),
        None => Ok(default),
    }
}

impl Options {
    fn from_env() -> Result<Options> {
        let mode = match std::env::var("SLIPWAY_BENCH_MODE").as_deref() {
            Ok("churn") => Mode::Churn,
            Ok("idle") => Mode::Idle,
            Ok("restart") => Mode::Restart,
            Ok("fleet") => Mode::Fleet,
            Ok("soak") => Mode::Soak,
            Ok("nodeop") => Mode::NodeOp,
            Ok("rollout") | Err(_) => Mode::Rollout,
            Ok(other) => {
                bail!(
                    "SLIPWAY_BENCH_MODE={other:?}: use rollout, churn, fleet, idle, restart, soak or nodeop"
                )
            }
        };
        let default_nodes = match mode {
            Mode::Rollout | Mode::Soak => 1000,
            Mode::NodeOp => 3,
            _ => 5000,
        };
        Ok(Options {
            mode,
            nodes: env_or("SLIPWAY_BENCH_NODES", default_nodes)?,
            concurrency: env_or("SLIPWAY_BENCH_CONCURRENCY", 100)?,
            plans: env_or("SLIPWAY_BENCH_PLANS", 50)?,
            churn_secs: env_or(
                "SLIPWAY_BENCH_CHURN_SECS",
                if mode == Mode::Fleet { 240 } else { 120 },
            )?,
            churn_rate: env_or("SLIPWAY_BENCH_CHURN_RATE", 50)?,
            idle_secs: env_or("SLIPWAY_BENCH_IDLE_SECS", 600)?,
            quiet_secs: env_or("SLIPWAY_BENCH_QUIET_SECS", 60)?,
            soak_secs: env_or("SLIPWAY_BENCH_SOAK_SECS", 3600)?,
            soak_warmup_secs: env_or("SLIPWAY_BENCH_SOAK_WARMUP_SECS", 600)?,
            check: env_or("SLIPWAY_BENCH_CHECK", 0u8)? != 0,
            ideal: env_or("SLIPWAY_BENCH_IDEAL", 1u8)? != 0,
            beside: env_or("SLIPWAY_BENCH_BESIDE", 0u8)? != 0,
            suc: std::env::var_os("SLIPWAY_BENCH_SUC").map(PathBuf::from),
        })
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The local cluster, torn down when dropped (and by its reaper if this process dies).
struct LocalCluster {
    kubeconfig: PathBuf,
}

impl LocalCluster {
    fn start(nodes: usize) -> Result<LocalCluster> {
        eprintln!("bench: starting a local cluster of {nodes} nodes");
        let out = Command::new(repo().join("tests/cluster/up.sh"))
            .arg(nodes.to_string())
            .env("SLIPWAY_CLUSTER_OWNER_PID", std::process::id().to_string())
            .env("SLIPWAY_CLUSTER_TIMEOUT", "900")
            .stderr(Stdio::inherit())
            .output()
            .context("tests/cluster/up.sh")?;
        if !out.status.success() {
            bail!("tests/cluster/up.sh failed ({})", out.status);
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let line = stdout.lines().last().unwrap_or_default();
        let Some(path) = line.strip_prefix("export KUBECONFIG=") else {
            bail!("tests/cluster/up.sh printed no kubeconfig: {stdout}");
        };
        Ok(LocalCluster {
            kubeconfig: PathBuf::from(path.trim()),
        })
    }

    fn dir(&self) -> &Path {
        self.kubeconfig.parent().unwrap_or(Path::new("."))
    }

    fn kubectl(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .output()
            .context("kubectl")?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    async fn client(&self, kubeconfig: &Path) -> Result<Client> {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig)?;
        let mut config = Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        // The bench makes thousands of requests; kube's default client limits are fine, the
        // timeouts too, but a watch must not be cut by the read timeout.
        config.read_timeout = None;
        Ok(Client::try_from(config)?)
    }

    /// A kubeconfig authenticating as the ServiceAccount with a fresh token; returns it and the
    /// token's `jti`, which the audit log records on each request.
    fn service_account(&self, name: &str) -> Result<(PathBuf, String)> {
        let token = self
            .kubectl(&["-n", NS, "create", "token", SA, "--duration=2h"])?
            .trim()
            .to_string();
        let admin: Value =
            serde_json::from_str(&self.kubectl(&["config", "view", "--raw", "-o", "json"])?)?;
        let cluster = admin["clusters"][0].clone();
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [cluster],
            "users": [{"name": SA, "user": {"token": token}}],
            "contexts": [{"name": SA, "context": {"cluster": cluster["name"], "user": SA}}],
            "current-context": SA,
        });
        let path = self.dir().join(format!("{name}.kubeconfig"));
        std::fs::write(&path, serde_json::to_string(&config)?)?;
        Ok((path, token_jti(&token)?))
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("tests/cluster/down.sh"))
            .arg(self.dir())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn token_jti(token: &str) -> Result<String> {
    let payload = token.split('.').nth(1).context("a JWT has a payload")?;
    let claims: Value = serde_json::from_slice(&base64_decode(payload))?;
    Ok(claims["jti"]
        .as_str()
        .context("no jti in the token")?
        .to_string())
}

/// URL-safe base64 without padding, as JWTs use.
fn base64_decode(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => continue,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// Writes (create, update, patch, delete) by `resource verb`, from the audit log, for one token.
fn writes(audit_log: &Path, jti: &str) -> Result<BTreeMap<String, usize>> {
    requests(audit_log, jti, true)
}

/// Reads (get, list, watch) by `resource verb`, from the audit log, for one token.
fn reads(audit_log: &Path, jti: &str) -> Result<BTreeMap<String, usize>> {
    let mut all = requests(audit_log, jti, false)?;
    let writes = requests(audit_log, jti, true)?;
    all.retain(|k, _| !writes.contains_key(k));
    Ok(all)
}

/// Requests (or only writes) by `resource verb`, from the audit log, for one token.
fn requests(audit_log: &Path, jti: &str, only_writes: bool) -> Result<BTreeMap<String, usize>> {
    requests_where(audit_log, jti, |verb, _| {
        !only_writes || ["create", "update", "patch", "delete"].contains(&verb)
    })
}

/// Requests refused with 409 (a conflict, or already there) by `resource verb`, for one token.
fn conflicts(audit_log: &Path, jti: &str) -> Result<BTreeMap<String, usize>> {
    requests_where(audit_log, jti, |_, ev| ev["responseStatus"]["code"] == 409)
}

/// Requests by `resource verb` that `keep` (given the verb and the audit event) keeps.
fn requests_where(
    audit_log: &Path,
    jti: &str,
    keep: impl Fn(&str, &Value) -> bool,
) -> Result<BTreeMap<String, usize>> {
    let text = std::fs::read_to_string(audit_log).context("the audit log")?;
    let credential = format!("JTI={jti}");
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let Ok(ev) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        // One event per request: the one that says the request is done.
        if ev["stage"]
            .as_str()
            .is_some_and(|s| s != "ResponseComplete")
        {
            continue;
        }
        let ours = ev["user"]["extra"]["authentication.kubernetes.io/credential-id"]
            .as_array()
            .is_some_and(|ids| ids.iter().any(|i| i.as_str() == Some(credential.as_str())));
        let verb = ev["verb"].as_str().unwrap_or_default();
        if !ours || !keep(verb, &ev) {
            continue;
        }
        let obj = &ev["objectRef"];
        let mut resource = obj["resource"].as_str().unwrap_or("?").to_string();
        if let Some(sub) = obj["subresource"].as_str() {
            resource = format!("{resource}/{sub}");
        }
        *counts.entry(format!("{resource} {verb}")).or_insert(0) += 1;
    }
    Ok(counts)
}

/// Watches Jobs in the namespace and nodes, independently of any controller: the most Jobs
/// active at once, and how many nodes carry `label = value`.
#[derive(Default)]
struct Observed {
    active: BTreeSet<String>,
    max_active: usize,
    done: BTreeSet<String>,
}

fn job_finished(j: &Job) -> bool {
    j.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
}

async fn observe(
    admin: Client,
    label: String,
    value: Arc<Mutex<String>>,
    seen: Arc<Mutex<Observed>>,
) {
    let jobs = watcher(
        Api::<Job>::namespaced(admin.clone(), NS),
        watcher::Config::default(),
    )
    .map_ok(move |e| (Some(e), None));
    let nodes = watcher(Api::<Node>::all(admin), watcher::Config::default())
        .map_ok(move |e| (None, Some(e)));
    let mut both = futures::stream::select(jobs.boxed(), nodes.boxed());
    while let Some(item) = both.next().await {
        let Ok((job, node)) = item else { continue };
        let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(watcher::Event::Apply(j) | watcher::Event::InitApply(j)) = job {
            let name = j.metadata.name.clone().unwrap_or_default();
            if job_finished(&j) || j.metadata.deletion_timestamp.is_some() {
                s.active.remove(&name);
            } else {
                s.active.insert(name);
            }
            s.max_active = s.max_active.max(s.active.len());
        } else if let Some(watcher::Event::Delete(j)) = job {
            s.active
                .remove(j.metadata.name.as_deref().unwrap_or_default());
        }
        if let Some(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = node {
            let wanted = value.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let name = n.metadata.name.clone().unwrap_or_default();
            let has = n.metadata.labels.as_ref().and_then(|l| l.get(&label));
            if !wanted.is_empty() && has == Some(&wanted) {
                s.done.insert(name);
            } else {
                s.done.remove(&name);
            }
        }
    }
}

/// One measured run.
struct Line {
    who: String,
    seconds: f64,
    max_active: usize,
    rss_mib: Option<f64>,
    cpu_seconds: Option<f64>,
    writes: BTreeMap<String, usize>,
    /// Reads (get, list, watch) by resource and verb.
    reads: BTreeMap<String, usize>,
    /// Reconciles per kind and p50/p99 latency, where the controller serves metrics.
    reconciles: Option<String>,
}

/// Writes that scale with nodes (Jobs, pods, nodes, the Plan's status); Events, the Lease and the
/// CRD are counted apart: they are bounded per Plan or per unit of time, not per node.
fn per_node_writes(writes: &BTreeMap<String, usize>) -> usize {
    writes
        .iter()
        .filter(|(k, _)| {
            !k.starts_with("events")
                && !k.starts_with("leases")
                && !k.starts_with("customresourcedefinitions")
        })
        .map(|(_, v)| v)
        .sum()
}

fn print_lines(lines: &[Line], nodes: usize, concurrency: usize) {
    println!(
        "\nresult: {nodes} nodes, concurrency {concurrency}, on {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "{:<10} {:>8} {:>8} {:>10} {:>7} {:>9} {:>7} {:>9}  writes by resource and verb",
        "controller", "seconds", "max Jobs", "peak RSS", "CPU s", "CPU ms/n", "writes", "per node"
    );
    let per_node = |v: f64| v / nodes.max(1) as f64;
    for l in lines {
        let total: usize = l.writes.values().sum();
        let detail: Vec<String> = l.writes.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!(
            "{:<10} {:>8.1} {:>8} {:>10} {:>7} {:>9} {:>7} {:>9.2}  {}",
            l.who,
            l.seconds,
            l.max_active,
            l.rss_mib.map_or("-".into(), |m| format!("{m:.1} MiB")),
            l.cpu_seconds.map_or("-".into(), |c| format!("{c:.1}")),
            l.cpu_seconds
                .map_or("-".into(), |c| format!("{:.2}", per_node(c * 1000.0))),
            total,
            per_node(per_node_writes(&l.writes) as f64),
            detail.join(", ")
        );
    }
    println!(
        "(per node: writes to Jobs, pods, nodes and Plan status; Events, Lease and CRD writes apart)"
    );
    // What the results log keeps (scripts/results-log.sh): each controller against the first.
    let first = lines.first().map_or(0.0, |l| l.seconds);
    for l in lines {
        println!(
            "result: {} {:.1} s ({:.3}x), at most {} Jobs, {}, {} CPU s, {:.2} writes per node",
            l.who,
            l.seconds,
            l.seconds / first.max(f64::MIN_POSITIVE),
            l.max_active,
            l.rss_mib.map_or("-".into(), |m| format!("{m:.1} MiB")),
            l.cpu_seconds.map_or("-".into(), |c| format!("{c:.1}")),
            per_node(per_node_writes(&l.writes) as f64),
        );
    }
    for l in lines {
        let detail: Vec<String> = l.reads.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!("{} reads: {}", l.who, detail.join(", "));
        if let Some(r) = &l.reconciles {
            println!("{} {r}", l.who);
        }
    }
}

/// The floor: one Job per node, `concurrency` in flight, the node labelled when its Job completes.
async fn ideal(
    client: Client,
    nodes: &[String],
    concurrency: usize,
    create: impl Fn(&str) -> Result<Job>,
) -> Result<()> {
    let jobs = Api::<Job>::namespaced(client.clone(), NS);
    let node_api = Api::<Node>::all(client);
    let mut queue = nodes.iter();
    let mut in_flight: BTreeSet<String> = BTreeSet::new();
    let mut finished = 0;
    let mut events = watcher(
        jobs.clone(),
        watcher::Config::default().labels(&format!("{IDEAL_LABEL}=job")),
    )
    .boxed();
    while finished < nodes.len() {
        while in_flight.len() < concurrency {
            let Some(node) = queue.next() else { break };
            jobs.create(&PostParams::default(), &create(node)?).await?;
            in_flight.insert(node.clone());
        }
        let Some(event) = events.next().await else {
            bail!("the Job watch ended")
        };
        let (watcher::Event::Apply(j) | watcher::Event::InitApply(j)) = event? else {
            continue;
        };
        let node = j
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("node"))
            .cloned()
            .unwrap_or_default();
        if job_finished(&j) && in_flight.remove(&node) {
            let patch = json!({"metadata": {"labels": {IDEAL_LABEL: "done"}}});
            node_api
                .patch(&node, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            finished += 1;
        }
    }
    Ok(())
}

fn ideal_job(node: &str) -> Result<Job> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": format!("ideal-{node}"), "labels": {IDEAL_LABEL: "job", "node": node}},
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 900,
            "template": {
                "metadata": {"labels": {IDEAL_LABEL: "job"}},
                "spec": {
                    "restartPolicy": "Never",
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
                        ]}]
                    }}},
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "upgrade", "image": "bench/upgrade:v1"}]
                }
            }
        }
    }))?)
}

/// The Job slipway renders for `node` under the bench's Plan, as the ideal controller's: its name,
/// the ideal's labels, and neither the Plan's label (no Plan takes it up) nor its owner (the
/// garbage collector would delete a Job whose owner does not exist).
fn rendered_job(node: &str) -> Result<Job> {
    use slipway::plan::api::labels;
    let mut plan = plan("bench-slipway", 1, json!({"matchLabels": {"type": "kwok"}}))?;
    plan.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    plan.status = Some(serde_json::from_value(
        json!({"latestVersion": "v1.0.0", "latestHash": "0".repeat(56)}),
    )?);
    let info = slipway::node::NodeInfo::from_node(&serde_json::from_value(json!({
        "metadata": {"name": node, "labels": {
            "kubernetes.io/hostname": node, "kubernetes.io/os": "linux", "type": "kwok"
        }}
    }))?);
    let config = slipway::plan::core::config::JobConfig::default();
    let settings =
        slipway::plan::core::settings::PlanSettings::read(&plan, &BTreeMap::new(), &config)
            .map_err(anyhow::Error::msg)?;
    let mut job = slipway::plan::core::job::render_job(
        &plan,
        &settings,
        &info,
        "system-upgrade-controller",
        &config,
    )?;
    job.metadata.name = Some(format!("ideal-{node}"));
    job.metadata.owner_references = None;
    let job_labels = job.metadata.labels.get_or_insert_default();
    job_labels.remove(labels::PLAN);
    job_labels.insert(IDEAL_LABEL.into(), "job".into());
    job_labels.insert("node".into(), node.into());
    Ok(job)
}

/// A controller process (slipway or SUC) run with a ServiceAccount kubeconfig.
struct Process {
    child: Child,
}

impl Process {
    fn start(
        program: &Path,
        args: &[&str],
        env: &BTreeMap<String, String>,
        log: PathBuf,
    ) -> Result<Process> {
        let file = std::fs::File::create(&log)?;
        let child = Command::new(program)
            .args(args)
            .envs(env)
            .stdin(Stdio::null())
            .stdout(Stdio::from(file.try_clone()?))
            .stderr(Stdio::from(file))
            .spawn()
            .with_context(|| format!("starting {}", program.display()))?;
        Ok(Process { child })
    }

    fn peak_rss_mib(&self) -> Option<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib / 1024.0)
    }

    fn cpu_seconds(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // Fields after the command name (which may hold spaces) start at the state, field 3.
        let rest = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks: f64 =
            fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
        Some(ticks / 100.0)
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn controller_env(kubeconfig: &Path) -> Result<BTreeMap<String, String>> {
    let text = std::fs::read_to_string(repo().join("deploy/configmap.yaml"))?;
    let map: Value = serde_saphyr::from_str(&text)?;
    let mut env: BTreeMap<String, String> = map["data"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect();
    env.insert(
        "SYSTEM_UPGRADE_CONTROLLER_NAME".into(),
        "system-upgrade-controller".into(),
    );
    env.insert("SYSTEM_UPGRADE_CONTROLLER_NAMESPACE".into(), NS.into());
    env.insert(
        "SYSTEM_UPGRADE_CONTROLLER_KUBE_CONFIG".into(),
        kubeconfig.display().to_string(),
    );
    env.insert("KUBECONFIG".into(), kubeconfig.display().to_string());
    // SLIPWAY_BENCH_LOG: the controller's RUST_LOG (to see what triggers its reconciles).
    let log = std::env::var("SLIPWAY_BENCH_LOG").unwrap_or_else(|_| "warn".into());
    env.insert("RUST_LOG".into(), log);
    Ok(env)
}

/// deploy/ with `components` (under deploy/components), through kustomize as a user would, its
/// Deployment scaled to 0 (the controller under test runs here), once `crds` are established.
/// `dir` (under target/) holds the kustomization.
fn install(cluster: &LocalCluster, dir: &str, components: &[&str], crds: &[&str]) -> Result<()> {
    let dir = repo().join("target").join(dir);
    std::fs::create_dir_all(&dir)?;
    let components: Vec<String> = (components.iter())
        .map(|c| format!("../../deploy/components/{c}"))
        .collect();
    std::fs::write(
        dir.join("kustomization.yaml"),
        format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n\
             resources: [../../deploy]\ncomponents: [{}]\n",
            components.join(", ")
        ),
    )?;
    cluster.kubectl(&["apply", "-k", &dir.display().to_string()])?;
    no_deployment(cluster)?;
    for crd in crds {
        cluster.kubectl(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{crd}"),
            "--timeout=60s",
        ])?;
    }
    Ok(())
}

/// The release build of slipway (`run`) with `env`, serving its metrics on `port`, logging to
/// `<cluster>/<log>.log`.
fn start_slipway(
    cluster: &LocalCluster,
    env: &BTreeMap<String, String>,
    port: u16,
    log: &str,
) -> Result<Process> {
    let addr = format!("127.0.0.1:{port}");
    Process::start(
        &slipway_binary(),
        &["run", "--metrics-addr", &addr],
        env,
        cluster.dir().join(format!("{log}.log")),
    )
}

/// deploy/'s Deployment scaled to 0: the controllers under test run here, with its ServiceAccount
/// and ConfigMap.
fn no_deployment(cluster: &LocalCluster) -> Result<()> {
    cluster.kubectl(&[
        "-n",
        NS,
        "scale",
        "deployment/system-upgrade-controller",
        "--replicas=0",
    ])?;
    Ok(())
}

/// The image's build (static, with the release profile of pgo/: `just bench` builds it as
/// scripts/image.sh does), or `SLIPWAY_BENCH_BINARY` (another build, or a wrapper that runs it
/// under a profiler).
fn slipway_binary() -> PathBuf {
    std::env::var_os("SLIPWAY_BENCH_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let target = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
            repo().join(format!("target/{target}/release/slipway"))
        })
}

fn plan(name: &str, concurrency: usize, selector: Value) -> Result<Plan> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "upgrade.cattle.io/v1",
        "kind": "Plan",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "concurrency": concurrency,
            "version": "v1.0.0",
            "nodeSelector": selector,
            "serviceAccountName": SA,
            "upgrade": {"image": "bench/upgrade"}
        }
    }))?)
}

/// The Plan's `latestHash`, once its controller wrote it (SUC, on a busy machine, took more than
/// 30 s to start and write it).
async fn wait_hash(plans: &Api<Plan>, name: &str) -> Result<String> {
    for _ in 0..3600 {
        if let Some(h) = plans.get(name).await?.status.and_then(|s| s.latest_hash) {
            return Ok(h);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("plan {name} got no latestHash in 3 minutes")
}

async fn wait_done(seen: &Arc<Mutex<Observed>>, total: usize, what: &str) -> Result<()> {
    let started = Instant::now();
    let mut last = Instant::now();
    loop {
        let done = seen.lock().unwrap_or_else(|e| e.into_inner()).done.len();
        if done >= total {
            return Ok(());
        }
        if last.elapsed() > Duration::from_secs(15) {
            eprintln!(
                "bench: {what}: {done} of {total} nodes after {}s",
                started.elapsed().as_secs()
            );
            last = Instant::now();
        }
        if started.elapsed() > Duration::from_secs(3600) {
            bail!("{what}: only {done} of {total} nodes after an hour");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A controller under test.
struct Contender<'a> {
    who: &'a str,
    program: &'a Path,
    args: &'a [&'a str],
    plan_name: &'a str,
}

/// One rollout by a controller process over every node, measured.
async fn controller_run(
    cluster: &LocalCluster,
    admin: &Client,
    c: &Contender<'_>,
    opts: &Options,
    seen: &Arc<Mutex<Observed>>,
    wanted: &Arc<Mutex<String>>,
) -> Result<Line> {
    let (who, program, args, plan_name) = (c.who, c.program, c.args, c.plan_name);
    if who == "suc" {
        // SUC's manifest binds its ServiceAccount to cluster-admin, and SUC needs it: it creates
        // its CRD at start and exits when it may not (under deploy/'s rights it never ran).
        cluster.kubectl(&[
            "create",
            "clusterrolebinding",
            "bench-suc-cluster-admin",
            "--clusterrole=cluster-admin",
            &format!("--serviceaccount={NS}:{SA}"),
        ])?;
    }
    let (kubeconfig, jti) = cluster.service_account(who)?;
    let env = controller_env(&kubeconfig)?;
    // slipway serves its metrics on a free port, to read its reconciles at the end.
    let port = (who == "slipway").then(quiet::free_port).transpose()?;
    let addr = port.map(|p| format!("127.0.0.1:{p}"));
    let args: Vec<&str> = match &addr {
        Some(addr) => vec!["run", "--metrics-addr", addr],
        None => args.to_vec(),
    };
    let process = Process::start(
        program,
        &args,
        &env,
        cluster.dir().join(format!("{who}.log")),
    )?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let plans = Api::<Plan>::namespaced(admin.clone(), NS);
    let label = format!("plan.upgrade.cattle.io/{plan_name}");
    reset(seen, wanted, "");
    let started = Instant::now();
    let mut p = plan(
        plan_name,
        opts.concurrency,
        json!({"matchLabels": {"type": "kwok"}}),
    )?;
    if opts.check && who == "slipway" {
        health_check(cluster, &mut p)?;
    }
    plans.create(&PostParams::default(), &p).await?;
    let hash = wait_hash(&plans, plan_name).await?;
    *wanted.lock().unwrap_or_else(|e| e.into_inner()) = hash;
    refresh_done(admin, &label, seen, wanted).await?;
    wait_done(seen, opts.nodes, who).await?;
    let seconds = started.elapsed().as_secs_f64();
    let reconciles = match port {
        Some(port) => Some(quiet::reconcile_line(port).await),
        None => None,
    };
    let line = Line {
        who: who.to_string(),
        seconds,
        max_active: seen.lock().unwrap_or_else(|e| e.into_inner()).max_active,
        rss_mib: process.peak_rss_mib(),
        cpu_seconds: process.cpu_seconds(),
        writes: BTreeMap::new(),
        reads: BTreeMap::new(),
        reconciles,
    };
    drop(process);
    eprintln!(
        "bench: {who} done in {seconds:.1}s (log: {})",
        cluster.dir().join(format!("{who}.log")).display()
    );
    clear_away(admin, plan_name).await?;
    let audit = cluster.dir().join("logs/audit.log");
    Ok(Line {
        writes: writes(&audit, &jti)?,
        reads: reads(&audit, &jti)?,
        ..line
    })
}

/// Deletes a contender's Plan and its Jobs as the admin, once its controller is gone, and waits
/// until both are: slipway's finalizer would otherwise keep the Plan, and the next contender (SUC
/// reconciles every Plan of the namespace) would take it up and find its 1,000 Jobs in its cache.
/// As the admin, so that none of it counts as the contender's writes.
async fn clear_away(admin: &Client, plan_name: &str) -> Result<()> {
    let plans = Api::<Plan>::namespaced(admin.clone(), NS);
    let jobs = Api::<Job>::namespaced(admin.clone(), NS);
    let _ = plans.delete(plan_name, &DeleteParams::default()).await;
    let unfinalize = json!({"metadata": {"finalizers": null}});
    let _ = (plans.patch(
        plan_name,
        &PatchParams::default(),
        &Patch::Merge(&unfinalize),
    ))
    .await;
    let of_plan = ListParams::default().labels(&format!("upgrade.cattle.io/plan={plan_name}"));
    jobs.delete_collection(&DeleteParams::background(), &of_plan)
        .await?;
    let started = Instant::now();
    loop {
        let plan_left = plans.get_opt(plan_name).await?.is_some();
        let jobs_left = jobs
            .list_metadata(&of_plan.clone().limit(1))
            .await?
            .items
            .len();
        if !plan_left && jobs_left == 0 {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("{plan_name}: its Plan or Jobs still there after 10 minutes");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Gives `plan` a health check that holds (a ConfigMap's field), readable by the controller, so
/// that the reads line counts how often the check's object is read (`configmaps get`).
fn health_check(cluster: &LocalCluster, plan: &mut Plan) -> Result<()> {
    let objects = json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "bench-healthy", "namespace": NS}, "data": {"ok": "true"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "bench-health-checks",
                      "labels": {"slipway.dev/aggregate-to-health-checks": "true"}},
         "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
    ]});
    let path = cluster.dir().join("health-check.json");
    std::fs::write(&path, serde_json::to_string(&objects)?)?;
    cluster.kubectl(&["apply", "-f", &path.display().to_string()])?;
    plan.spec.health_checks = Some(serde_json::from_value(json!([{
        "apiVersion": "v1", "kind": "ConfigMap", "namespace": NS, "name": "bench-healthy",
        "expr": "data.ok == 'true'"
    }]))?);
    Ok(())
}

fn reset(seen: &Arc<Mutex<Observed>>, wanted: &Arc<Mutex<String>>, value: &str) {
    let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
    s.done.clear();
    s.max_active = s.active.len();
    *wanted.lock().unwrap_or_else(|e| e.into_inner()) = value.to_string();
}

/// Counts the nodes that already carry the wanted value (set after the watch saw them).
async fn refresh_done(
    admin: &Client,
    label: &str,
    seen: &Arc<Mutex<Observed>>,
    wanted: &Arc<Mutex<String>>,
) -> Result<()> {
    let value = wanted.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let nodes = Api::<Node>::all(admin.clone())
        .list(&ListParams::default().labels(&format!("{label}={value}")))
        .await?;
    let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
    for n in nodes.items {
        s.done.insert(n.metadata.name.unwrap_or_default());
    }
    Ok(())
}

async fn rollout(cluster: &LocalCluster, admin: &Client, opts: &Options) -> Result<()> {
    let node_names: Vec<String> = Api::<Node>::all(admin.clone())
        .list(&ListParams::default().labels("type=kwok"))
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let mut lines = Vec::new();

    if opts.ideal {
        lines.extend(ideal_line(cluster, admin, &node_names, opts).await?);
    }

    for (who, program, plan_name) in [
        ("slipway", Some(slipway_binary()), "bench-slipway"),
        ("suc", opts.suc.clone(), "bench-suc"),
    ] {
        let Some(program) = program else { continue };
        let label = format!("plan.upgrade.cattle.io/{plan_name}");
        let wanted = Arc::new(Mutex::new(String::new()));
        let seen = Arc::new(Mutex::new(Observed::default()));
        let watch = tokio::spawn(observe(admin.clone(), label, wanted.clone(), seen.clone()));
        tokio::time::sleep(Duration::from_secs(2)).await;
        let args: &[&str] = if who == "slipway" {
            &["run", "--metrics-addr", ""]
        } else {
            &[]
        };
        let contender = Contender {
            who,
            program: &program,
            args,
            plan_name,
        };
        match controller_run(cluster, admin, &contender, opts, &seen, &wanted).await {
            Ok(line) => lines.push(line),
            Err(e) => {
                // What was measured before is still worth printing.
                print_lines(&lines, opts.nodes, opts.concurrency);
                return Err(e.context(format!("{who}'s run")));
            }
        }
        watch.abort();
    }
    print_lines(&lines, opts.nodes, opts.concurrency);
    Ok(())
}

/// The ideal controller's run: its own label, so the observer counts its nodes; its Jobs are
/// deleted after. With `opts.beside`, slipway's line watching it follows.
async fn ideal_line(
    cluster: &LocalCluster,
    admin: &Client,
    node_names: &[String],
    opts: &Options,
) -> Result<Vec<Line>> {
    // The ideal controller: its own label, so the observer counts its nodes.
    let wanted = Arc::new(Mutex::new("done".to_string()));
    let seen = Arc::new(Mutex::new(Observed::default()));
    let watch = tokio::spawn(observe(
        admin.clone(),
        IDEAL_LABEL.into(),
        wanted.clone(),
        seen.clone(),
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (kubeconfig, jti) = cluster.service_account("ideal")?;
    let client = cluster.client(&kubeconfig).await?;
    let watching = match opts.beside {
        true => Some(Watching::start(cluster).await?),
        false => None,
    };
    let started = Instant::now();
    match opts.beside {
        true => ideal(client, node_names, opts.concurrency, rendered_job).await?,
        false => ideal(client, node_names, opts.concurrency, ideal_job).await?,
    }
    wait_done(&seen, opts.nodes, "ideal").await?;
    let seconds = started.elapsed().as_secs_f64();
    let audit = cluster.dir().join("logs/audit.log");
    let mut lines = vec![Line {
        who: "ideal".into(),
        seconds,
        max_active: seen.lock().unwrap_or_else(|e| e.into_inner()).max_active,
        rss_mib: None,
        cpu_seconds: None,
        writes: writes(&audit, &jti)?,
        reads: reads(&audit, &jti)?,
        reconciles: None,
    }];
    if let Some(w) = watching {
        lines.push(w.line(seconds, &audit).await?);
    }
    watch.abort();
    cluster.kubectl(&[
        "-n",
        NS,
        "delete",
        "jobs",
        "-l",
        &format!("{IDEAL_LABEL}=job"),
        "--wait=false",
    ])?;
    Ok(lines)
}

/// slipway with no Plan, beside the ideal controller.
struct Watching {
    process: Process,
    jti: String,
    port: u16,
}

impl Watching {
    async fn start(cluster: &LocalCluster) -> Result<Watching> {
        let (kubeconfig, jti) = cluster.service_account("watching")?;
        let port = quiet::free_port()?;
        let process = start_slipway(cluster, &controller_env(&kubeconfig)?, port, "watching")?;
        // Its start (the caches' first lists) is over before the ideal controller starts.
        tokio::time::sleep(Duration::from_secs(3)).await;
        Ok(Watching { process, jti, port })
    }

    async fn line(self, seconds: f64, audit: &Path) -> Result<Line> {
        let reconciles = Some(quiet::reconcile_line(self.port).await);
        let (rss_mib, cpu_seconds) = (self.process.peak_rss_mib(), self.process.cpu_seconds());
        drop(self.process);
        Ok(Line {
            who: "watching".into(),
            seconds,
            max_active: 0,
            rss_mib,
            cpu_seconds,
            writes: writes(audit, &self.jti)?,
            reads: reads(audit, &self.jti)?,
            reconciles,
        })
    }
}

/// The node labels that make every churn Plan done already: each node is in one group, selected
/// by one Plan, and carries that Plan's hash. With `pools` > 0, each node is also in one of that
/// many pools of consecutive nodes ([`POOL_LABEL`]).
async fn prepare_churn(admin: &Client, opts: &Options, pools: usize) -> Result<Vec<String>> {
    let plans = Api::<Plan>::namespaced(admin.clone(), NS);
    let mut hashes = Vec::new();
    for g in 0..opts.plans {
        let name = format!("churn-{g}");
        let mut p = plan(
            &name,
            10,
            json!({"matchLabels": {GROUP_LABEL: g.to_string()}}),
        )?;
        p = plans.create(&PostParams::default(), &p).await?;
        let hash = slipway::plan::core::hash::plan_latest_hash(&p, "v1.0.0", &BTreeMap::new())?;
        hashes.push((name, hash));
    }
    let nodes: Vec<String> = Api::<Node>::all(admin.clone())
        .list(&ListParams::default().labels("type=kwok"))
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let node_api = Api::<Node>::all(admin.clone());
    futures::stream::iter(nodes.iter().enumerate())
        .map(|(i, n)| {
            let (plan, hash) = &hashes[i % hashes.len()];
            let mut labels = json!({
                GROUP_LABEL: (i % hashes.len()).to_string(),
                format!("plan.upgrade.cattle.io/{plan}"): hash,
            });
            if pools > 0 {
                labels[POOL_LABEL] = json!((i * pools / nodes.len()).to_string());
            }
            let patch = json!({"metadata": {"labels": labels}});
            let api = node_api.clone();
            async move {
                api.patch(n, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(nodes)
}

/// Reconciles of every kind (the counter has a `kind` label).
fn reconciles(metrics: &str) -> Option<f64> {
    let by_kind = quiet::reconciles_by_kind(metrics);
    (!by_kind.is_empty()).then(|| by_kind.values().sum())
}

async fn scrape(port: u16) -> Result<String> {
    let out = Command::new("curl")
        .args(["-fsS", &format!("http://127.0.0.1:{port}/metrics")])
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

async fn churn(cluster: &LocalCluster, admin: &Client, opts: &Options) -> Result<()> {
    let nodes = prepare_churn(admin, opts, 0).await?;
    let (kubeconfig, _) = cluster.service_account("slipway-churn")?;
    let port = quiet::free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let env = controller_env(&kubeconfig)?;
    let process = Process::start(
        &slipway_binary(),
        &["run", "--metrics-addr", &addr],
        &env,
        cluster.dir().join("slipway-churn.log"),
    )?;
    // Settle: every Plan reconciled once (all complete), then quiet.
    quiet::settled(admin, opts.plans).await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let before = reconciles(&scrape(port).await?).unwrap_or(0.0);
    let cpu_before = process.cpu_seconds().unwrap_or(0.0);
    let node_api = Api::<Node>::all(admin.clone());
    let started = Instant::now();
    let mut patched = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / opts.churn_rate.max(1)));
    while started.elapsed() < Duration::from_secs(opts.churn_secs) {
        tick.tick().await;
        let node = &nodes[(patched as usize * 7919) % nodes.len()];
        let patch = json!({"metadata": {"labels": {CHURN_LABEL: patched.to_string()}}});
        node_api
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        patched += 1;
    }
    let window = started.elapsed().as_secs_f64();
    let after = reconciles(&scrape(port).await?).unwrap_or(0.0);
    let cpu = process.cpu_seconds().unwrap_or(0.0) - cpu_before;
    println!(
        "\nresult: churn: {} nodes, {} Plans (all done), {window:.0}s of kwok heartbeats plus {patched} patches of an unrelated label ({}/s), on {} cores",
        opts.nodes,
        opts.plans,
        opts.churn_rate,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "result: slipway {:.1} reconciles/min, {cpu:.2} CPU s in the window ({:.3} CPU s/min), peak RSS {}",
        (after - before) * 60.0 / window,
        cpu * 60.0 / window,
        process
            .peak_rss_mib()
            .map_or("-".into(), |m| format!("{m:.1} MiB"))
    );
    println!("  since its start: {}", quiet::reconcile_line(port).await);
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let opts = Options::from_env()?;
    if !slipway_binary().is_file() {
        bail!(
            "{} is missing: `just bench` builds it",
            slipway_binary().display()
        );
    }
    let cluster = LocalCluster::start(opts.nodes)?;
    // deploy/ as installed, minus its Deployment: the controllers under test run here, with the
    // Deployment's ServiceAccount and ConfigMap.
    cluster.kubectl(&["apply", "-k", &repo().join("deploy").display().to_string()])?;
    no_deployment(&cluster)?;
    cluster.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/plans.upgrade.cattle.io",
        "--timeout=60s",
    ])?;
    let admin = cluster.client(&cluster.kubeconfig).await?;
    match opts.mode {
        Mode::Rollout => rollout(&cluster, &admin, &opts).await,
        Mode::Churn => churn(&cluster, &admin, &opts).await,
        Mode::Idle => quiet::idle(&cluster, &admin, &opts).await,
        Mode::Restart => quiet::restart(&cluster, &admin, &opts).await,
        Mode::Fleet => fleet::fleet(&cluster, &admin, &opts).await,
        Mode::Soak => soak::soak(&cluster, &admin, &opts).await,
        Mode::NodeOp => nodeop::nodeop_pace(&cluster, &admin, &opts).await,
    }
}
