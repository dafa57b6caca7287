//! A `slipway run` child process for end-to-end tests: a [`ChildProcess`] (start, kill, stop,
//! restart, log) with the command line of a controller.
//!
//! ```ignore
//! let mut controller = ControllerProcess::start(&cluster, ns.name(), &[]);
//! controller.restart(); // SIGKILL and start again
//!
//! // Anything else: the builder.
//! let leader = ControllerProcess::builder(cluster.kubeconfig_path())
//!     .namespace(ns.name())
//!     .replica("replica-a")
//!     .leader_elect()
//!     .metrics_port()
//!     .start();
//! ```

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::Cluster;
use super::process::{ChildProcess, OnDrop};

/// Short leader-election timing for tests (the defaults are 45s / 30s / 2s).
pub const FAST_ELECTION: [(&str, &str); 3] = [
    ("CATTLE_ELECTION_LEASE_DURATION", "10s"),
    ("CATTLE_ELECTION_RENEW_DEADLINE", "6s"),
    ("CATTLE_ELECTION_RETRY_PERIOD", "1s"),
];

/// The switches of the operations whose objects a controller watches in every namespace.
const CLUSTER_WIDE_SWITCHES: [&str; 3] = [
    "SLIPWAY_REBOOT_POLICIES",
    "SLIPWAY_MAINTENANCE",
    "SLIPWAY_NODEOPS",
];

/// A `slipway run` process for one test; killed when dropped (unless built with
/// [`ControllerBuilder::stop_on_drop`]). Every [`ChildProcess`] method works on it.
pub struct ControllerProcess {
    process: ChildProcess,
    metrics_port: Option<u16>,
}

impl ControllerProcess {
    /// `slipway run` for namespace `ns` of `cluster`, with `env` added.
    pub fn start(cluster: &Cluster, ns: &str, env: &[(&str, &str)]) -> Self {
        Self::builder(cluster.kubeconfig_path())
            .namespace(ns)
            .envs(env.iter().copied())
            .start()
    }

    /// One replica (`id` becomes its `POD_NAME` and names its log) with its own kubeconfig and
    /// extra arguments, such as `--leader-elect`.
    pub fn start_replica(
        kubeconfig: &Path,
        ns: &str,
        id: Option<&str>,
        env: &[(&str, &str)],
        extra_args: &[&str],
    ) -> Self {
        let mut builder = Self::builder(kubeconfig)
            .namespace(ns)
            .envs(env.iter().copied())
            .args(extra_args.iter().copied());
        if let Some(id) = id {
            builder = builder.replica(id);
        }
        builder.start()
    }

    /// `slipway run --kubeconfig <kubeconfig>`, to be configured.
    pub fn builder(kubeconfig: &Path) -> ControllerBuilder {
        ControllerBuilder {
            kubeconfig: kubeconfig.to_path_buf(),
            namespace: None,
            replica: None,
            args: Vec::new(),
            env: Vec::new(),
            metrics_port: None,
            on_drop: OnDrop::Kill,
        }
    }

    /// A plain HTTP GET of `path` on the metrics server (only with
    /// [`ControllerBuilder::metrics_port`]): status code and body.
    pub async fn get(&self, path: &str) -> anyhow::Result<(u16, String)> {
        let port = self
            .metrics_port
            .expect("the controller was built with metrics_port()");
        http_get(port, path).await
    }

    /// [`ControllerProcess::start`] with a metrics port, for [`ControllerProcess::settled`].
    pub fn start_metered(cluster: &Cluster, ns: &str, env: &[(&str, &str)]) -> Self {
        Self::builder(cluster.kubeconfig_path())
            .namespace(ns)
            .envs(env.iter().copied())
            .metrics_port()
            .start()
    }

    /// Waits until the controller has decided on whatever triggered it so far: no reconcile of
    /// `kind` (`plan`, `rebootpolicy`, `nodemaintenance`, `nodeop`, `nodeopupgrade`) under way,
    /// and none started or finished for half a second more than the controller may hold a trigger
    /// back ([`RECONCILE_FLOOR`]). A scene that shows that nothing happens waits for the status
    /// that says the decision, then for this (the status is written before the effects that take
    /// a node), then looks. Only with [`ControllerBuilder::metrics_port`].
    pub async fn settled(&self, kind: &str) {
        let started = format!("slipway_reconciles_total{{kind=\"{kind}\"}}");
        let finished = format!("slipway_reconcile_duration_seconds_count{{kind=\"{kind}\"}}");
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut quiet: Option<(f64, Instant)> = None;
        loop {
            let counts = match self.get("/metrics").await {
                Ok((200, text)) => (sample(&text, &started), sample(&text, &finished)),
                _ => (None, None),
            };
            match (counts, quiet) {
                ((Some(s), Some(f)), Some((seen, since))) if s == f && s == seen => {
                    if since.elapsed() > RECONCILE_FLOOR + Duration::from_millis(500) {
                        return;
                    }
                }
                ((Some(s), Some(f)), _) if s == f => quiet = Some((s, Instant::now())),
                _ => quiet = None,
            }
            assert!(
                Instant::now() < deadline,
                "the controller's {kind} reconciles did not settle: started and finished {counts:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The value of the metric series `series` as the metrics server prints it (its name and
    /// labels, such as `slipway_reconciles_total{kind="plan"}`); 0 while it has none. Needs
    /// [`ControllerBuilder::metrics_port`].
    pub async fn metric(&self, series: &str) -> anyhow::Result<f64> {
        let (code, body) = self.get("/metrics").await?;
        anyhow::ensure!(code == 200, "GET /metrics answered {code}");
        Ok((body.lines())
            .find_map(|l| {
                l.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .trim()
                    .parse()
                    .ok()
            })
            .unwrap_or(0.0))
    }

    /// Runs `trigger` (a change the controller watches) and waits until a reconcile of `kind`
    /// (`plan`, `rebootpolicy`, ...) that started after it has finished: more have finished than
    /// had started before the trigger. What the controller has not done by then, it decided not
    /// to do. Needs [`ControllerBuilder::metrics_port`].
    pub async fn reconciled_after(
        &self,
        kind: &str,
        trigger: impl std::future::Future<Output = ()>,
    ) {
        let started = format!("slipway_reconciles_total{{kind=\"{kind}\"}}");
        let finished = format!("slipway_reconcile_duration_seconds_count{{kind=\"{kind}\"}}");
        let before = super::wait_for(
            "the controller's metrics",
            std::time::Duration::from_secs(60),
            || self.metric(&started),
        )
        .await;
        trigger.await;
        super::wait_for(
            &format!("a {kind} reconcile after the trigger"),
            std::time::Duration::from_secs(60),
            || async {
                match self.metric(&finished).await? {
                    done if done > before => Ok(()),
                    done => Err(anyhow::anyhow!(
                        "{done} finished, {before} had started before"
                    )),
                }
            },
        )
        .await;
    }
}

/// The longest time between the starts of two reconciles of one object that a scene meets: the
/// interval of src/runtime/operation.rs is one second up to a thousand nodes, and grows with the
/// nodes a decision reads beyond; no scene's object reads a thousand nodes. A trigger that comes sooner waits, and is not counted as a reconcile
/// until then.
pub const RECONCILE_FLOOR: Duration = Duration::from_secs(1);

/// The value of the sample `name` (with its labels, exactly as rendered) in a `/metrics` text.
pub fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

impl Deref for ControllerProcess {
    type Target = ChildProcess;
    fn deref(&self) -> &ChildProcess {
        &self.process
    }
}

impl DerefMut for ControllerProcess {
    fn deref_mut(&mut self) -> &mut ChildProcess {
        &mut self.process
    }
}

/// The command line of a [`ControllerProcess`]; see [`ControllerProcess::builder`].
pub struct ControllerBuilder {
    kubeconfig: PathBuf,
    namespace: Option<String>,
    replica: Option<String>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    metrics_port: Option<u16>,
    on_drop: OnDrop,
}

impl ControllerBuilder {
    /// `--namespace <ns> --name slipway-<ns>`: the namespace the controller works in and
    /// its name (that of its Lease).
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = Some(ns.to_string());
        self
    }

    /// `POD_NAME=<id>` (the identity in the Lease); also names the log.
    pub fn replica(mut self, id: &str) -> Self {
        self.replica = Some(id.to_string());
        self
    }

    /// `--leader-elect`, with [`FAST_ELECTION`] timing.
    pub fn leader_elect(self) -> Self {
        self.args(["--leader-elect"]).envs(FAST_ELECTION)
    }

    /// The metrics server on a free port of its own (otherwise on a random one nobody knows),
    /// for [`ControllerProcess::get`].
    pub fn metrics_port(mut self) -> Self {
        self.metrics_port = Some(super::free_port());
        self
    }

    pub fn args<S: AsRef<str>>(mut self, args: impl IntoIterator<Item = S>) -> Self {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_string()));
        self
    }

    pub fn envs<K: AsRef<str>, V: AsRef<str>>(
        mut self,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.env.extend(
            env.into_iter()
                .map(|(k, v)| (k.as_ref().to_string(), v.as_ref().to_string())),
        );
        self
    }

    /// Ends the process with SIGTERM when dropped (SIGKILL 10 s later), as a pod is stopped: a
    /// leader releases its Lease.
    pub fn stop_on_drop(mut self) -> Self {
        self.on_drop = OnDrop::Stop;
        self
    }

    /// Starts the controller. One that reconciles a cluster-wide kind must belong to a scene
    /// that may run it ([`super::scene::may_run_cluster_wide`]).
    pub fn start(self) -> ControllerProcess {
        let wide = (self.env.iter())
            .filter(|(k, v)| CLUSTER_WIDE_SWITCHES.contains(&k.as_str()) && v == "true")
            .map(|(k, _)| k.as_str())
            .collect::<Vec<_>>();
        if let Some(ns) = &self.namespace {
            assert!(
                wide.is_empty() || super::scene::may_run_cluster_wide(ns),
                "{ns}: a controller with {wide:?} decides for every scene's objects of those \
                 kinds; its scene must be of CLUSTER_WIDE, alone, or on a cluster of its own"
            );
        }
        let name = match (&self.namespace, &self.replica) {
            (Some(ns), Some(id)) => format!("slipway-{ns}-{id}"),
            (Some(ns), None) => format!("slipway-{ns}"),
            (None, _) => super::unique_name("slipway"),
        };
        let log = std::env::temp_dir().join(format!("{name}.log"));
        let mut process = ChildProcess::slipway(log)
            .args(["run", "--kubeconfig"])
            .arg(self.kubeconfig.display().to_string())
            .env("RUST_LOG", "info,slipway=debug")
            .env("NO_COLOR", "1")
            // Tests run side by side: no fixed port for the metrics server.
            .env("SLIPWAY_METRICS_ADDR", "127.0.0.1:0")
            .on_drop(self.on_drop);
        if let Some(ns) = &self.namespace {
            process = process.args(["--namespace", ns, "--name", &format!("slipway-{ns}")]);
        }
        if let Some(port) = self.metrics_port {
            process = process.args(["--metrics-addr", &format!("127.0.0.1:{port}")]);
        }
        if let Some(id) = &self.replica {
            process = process.env("POD_NAME", id);
        }
        let process = process.args(self.args).envs(self.env).started();
        ControllerProcess {
            process,
            metrics_port: self.metrics_port,
        }
    }
}

/// A plain HTTP/1.1 GET on loopback: status code and body.
pub async fn http_get(port: u16, path: &str) -> anyhow::Result<(u16, String)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    let code = out
        .get(9..12)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("not an HTTP response: {out:?}"))?;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    // axum answers small bodies with Content-Length; a chunked body is unwrapped here.
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((code, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}
