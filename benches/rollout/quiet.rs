//! Modes `idle` and `restart`: a fleet with nothing to do.
//!
//! Both start from the churn mode's fleet: `SLIPWAY_BENCH_NODES` (5,000) nodes and
//! `SLIPWAY_BENCH_PLANS` (50) Plans, all done.
//!
//! - `idle`: slipway runs for `SLIPWAY_BENCH_IDLE_SECS` (600) after it settled; kwok's heartbeats go
//!   on. Prints its average CPU, peak and steady RSS, reconciles per kind and every API request it
//!   made in the window, by resource and verb (from the audit log).
//! - `restart`: slipway is started, killed with SIGKILL once it settled, and started again. For
//!   each start: seconds from the process start to its first decision (the first reconcile
//!   counted in its metrics) and to as many Plan reconciles as there are Plans (each decided once
//!   when no Plan is reconciled twice first), and the peak RSS.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use kube::Client;
use kube::api::{Api, ListParams};
use slipway::plan::api::Plan;

use super::{LocalCluster, NS, Options, Process, controller_env, prepare_churn, requests};

/// A free port for the controller's metrics.
pub(super) fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// The samples of the metric family `name` (no suffix), with their labels as written.
pub(super) fn samples<'a>(metrics: &'a str, name: &str) -> Vec<(&'a str, f64)> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            let labels = match key.strip_prefix(name)? {
                "" => "",
                rest => rest.strip_prefix('{')?.strip_suffix('}')?,
            };
            Some((labels, value.trim().parse().ok()?))
        })
        .collect()
}

/// Reconciles per kind (`slipway_reconciles_total`).
pub(super) fn reconciles_by_kind(metrics: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (labels, value) in samples(metrics, "slipway_reconciles_total") {
        *out.entry(label(labels, "kind").unwrap_or("all").to_string())
            .or_insert(0.0) += value;
    }
    out
}

pub(super) fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    labels.split(',').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.trim_matches('"'))
    })
}

/// The `q`-quantile of each kind's reconcile latency, as the upper bound of the histogram bucket
/// it falls in (`+Inf` when above the last bound).
fn latency_quantile(metrics: &str, q: f64) -> BTreeMap<String, String> {
    let mut buckets: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for (labels, count) in samples(metrics, "slipway_reconcile_duration_seconds_bucket") {
        let (Some(kind), Some(le)) = (label(labels, "kind"), label(labels, "le")) else {
            continue;
        };
        let bound = if le == "+Inf" {
            f64::INFINITY
        } else {
            le.parse().unwrap_or(f64::INFINITY)
        };
        buckets
            .entry(kind.to_string())
            .or_default()
            .push((bound, count));
    }
    buckets
        .into_iter()
        .filter_map(|(kind, mut b)| {
            b.sort_by(|x, y| x.0.total_cmp(&y.0));
            let total = b.last()?.1;
            if total == 0.0 {
                return None;
            }
            let (bound, _) = b.iter().find(|(_, c)| *c >= q * total)?;
            let text = match bound.is_finite() {
                true => format!("{:.0}ms", bound * 1000.0),
                false => "+Inf".into(),
            };
            Some((kind, text))
        })
        .collect()
}

pub(super) async fn scrape(port: u16) -> Option<String> {
    let out = std::process::Command::new("curl")
        .args(["-fsS", &format!("http://127.0.0.1:{port}/metrics")])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Waits until every Plan of the namespace is `Complete`.
pub(super) async fn settled(admin: &Client, plans: usize) -> Result<()> {
    let api = Api::<Plan>::namespaced(admin.clone(), NS);
    for _ in 0..1200 {
        let complete = api
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter(|p| {
                p.status
                    .iter()
                    .flat_map(|s| s.conditions.iter())
                    .any(|c| c.type_ == "Complete" && c.status == "True")
            })
            .count();
        if complete == plans {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    bail!("the Plans did not all complete")
}

pub(super) fn vm_rss_mib(process: &Process) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", process.child.id())).ok()?;
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib / 1024.0)
}

pub(super) fn mib(v: Option<f64>) -> String {
    v.map_or("-".into(), |m| format!("{m:.1} MiB"))
}

pub(super) fn joined<V: std::fmt::Display>(m: &BTreeMap<String, V>) -> String {
    let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k} {v}")).collect();
    match parts.is_empty() {
        true => "none".into(),
        false => parts.join(", "),
    }
}

fn start(cluster: &LocalCluster, who: &str, port: u16) -> Result<(Process, String)> {
    let (kubeconfig, jti) = cluster.service_account(who)?;
    let env = controller_env(&kubeconfig)?;
    let process = super::start_slipway(cluster, &env, port, who)?;
    Ok((process, jti))
}

pub(super) async fn idle(cluster: &LocalCluster, admin: &Client, opts: &Options) -> Result<()> {
    prepare_churn(admin, opts, 0).await?;
    let port = free_port()?;
    let (process, jti) = start(cluster, "slipway-idle", port)?;
    settled(admin, opts.plans).await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    let audit = cluster.dir().join("logs/audit.log");
    let requests_before = requests(&audit, &jti, false)?;
    let metrics_before = scrape(port).await.unwrap_or_default();
    let cpu_before = process.cpu_seconds().unwrap_or(0.0);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(opts.idle_secs)).await;
    let window = started.elapsed().as_secs_f64();
    let cpu = process.cpu_seconds().unwrap_or(0.0) - cpu_before;
    let metrics = scrape(port).await.unwrap_or_default();
    let mut reconciles = reconciles_by_kind(&metrics);
    for (kind, before) in reconciles_by_kind(&metrics_before) {
        if let Some(n) = reconciles.get_mut(&kind) {
            *n -= before;
        }
    }
    let mut made = requests(&audit, &jti, false)?;
    for (k, before) in requests_before {
        if let Some(n) = made.get_mut(&k) {
            *n -= before;
        }
    }
    made.retain(|_, n| *n > 0);
    let writes: usize = made
        .iter()
        .filter(|(k, _)| {
            ["create", "update", "patch", "delete"]
                .iter()
                .any(|v| k.ends_with(v))
        })
        .map(|(_, n)| n)
        .sum();
    println!(
        "\nresult: idle: {} nodes, {} Plans (all done), {window:.0}s with nothing to do, on {} cores",
        opts.nodes,
        opts.plans,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "result: slipway {:.4} cores on average ({cpu:.2} CPU s), peak RSS {}, steady RSS {}, {writes} writes",
        cpu / window,
        mib(process.peak_rss_mib()),
        mib(vm_rss_mib(&process)),
    );
    println!("  reconciles in the window: {}", joined(&reconciles));
    println!("  requests in the window: {}", joined(&made));
    Ok(())
}

pub(super) async fn restart(cluster: &LocalCluster, admin: &Client, opts: &Options) -> Result<()> {
    prepare_churn(admin, opts, 0).await?;
    println!(
        "\nresult: restart: {} nodes, {} Plans (all done), on {} cores",
        opts.nodes,
        opts.plans,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for round in ["first start", "after SIGKILL"] {
        let port = free_port()?;
        let started = Instant::now();
        let (mut process, _) = start(cluster, "slipway-restart", port)?;
        let (mut first, mut consistent) = (None, None);
        while consistent.is_none() && started.elapsed() < Duration::from_secs(600) {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let Some(metrics) = scrape(port).await else {
                continue;
            };
            let plans = reconciles_by_kind(&metrics)
                .get("plan")
                .copied()
                .unwrap_or(0.0);
            if plans > 0.0 && first.is_none() {
                first = Some(started.elapsed());
            }
            if plans >= opts.plans as f64 {
                consistent = Some(started.elapsed());
            }
        }
        let latency = latency_quantile(&scrape(port).await.unwrap_or_default(), 0.99);
        println!(
            "result: slipway, {round}: first decision after {}, {} Plan reconciles after {}, peak RSS {}, p99 reconcile {}",
            first.map_or("-".into(), |d| format!("{:.2}s", d.as_secs_f64())),
            opts.plans,
            consistent.map_or("-".into(), |d| format!("{:.2}s", d.as_secs_f64())),
            mib(process.peak_rss_mib()),
            joined(&latency),
        );
        process.child.kill()?;
        process.child.wait()?;
    }
    Ok(())
}

/// Reconciles per kind and p50/p99 latency, from the metrics of `port`, as one line.
pub(super) async fn reconcile_line(port: u16) -> String {
    let metrics = scrape(port).await.unwrap_or_default();
    format!(
        "reconciles {}; p50 {}; p99 {}",
        joined(&reconciles_by_kind(&metrics)),
        joined(&latency_quantile(&metrics, 0.5)),
        joined(&latency_quantile(&metrics, 0.99))
    )
}
