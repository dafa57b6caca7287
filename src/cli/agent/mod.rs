//! `slipway agent`: runs on every node (a DaemonSet, `deploy/components/reboot-agent`) and keeps
//! its own Node in step with the host: the `slipway.dev/reboot-required` annotation while the
//! node's sentinel or, with `--update-engine`, Flatcar's update engine wants a reboot, and the
//! label `kairos.io/managed: "true"` on a Kairos host. The decision is
//! `slipway::reboot_policy::core::agent::decide`; this reads the host and the Node and patches.

pub mod host;
mod metrics;
mod update_engine;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use slipway::common::duration::GoDuration;
use slipway::reboot_policy::core::agent::{
    self, HostFile, HostRelease, HostSeen, KAIROS_MANAGED_LABEL, NodeSeen, UpdateEngine,
};
use slipway::reboot_policy::core::request::{
    self, AnnotationChange, REBOOT_REQUIRED_ANNOTATION, Sentinel,
};
use tokio::sync::watch;
use tracing::{info, warn};

/// The field manager of the agent's patches.
const FIELD_MANAGER: &str = "slipway-agent";
/// How long the agent waits for the API server to answer one request. kube-rs sets no read
/// timeout and speaks HTTP/1.1, without the pings with which client-go finds a dead connection:
/// a connection that died without a reset (a NAT that forgot it, a node's network coming back)
/// would hold the agent, and the node's request, until the process ends.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    slipway agent --node \"$NODE_NAME\" --sentinel-file /host/var/run/reboot-required\n  \
    slipway agent --node worker-1 --sentinel-command '/usr/local/bin/needs-reboot' --once\n  \
    slipway agent --node \"$NODE_NAME\" --host-etc /host/etc --update-engine \\\n      \
    --dbus-address unix:path=/host/run/dbus/system_bus_socket")]
pub struct AgentArgs {
    /// The Node this agent speaks for (the DaemonSet passes spec.nodeName).
    #[arg(long, env = "NODE_NAME")]
    pub node: String,
    /// Kubeconfig; empty means in-cluster configuration (or the usual lookup).
    #[arg(long, default_value = "")]
    pub kubeconfig: String,
    /// The kubeconfig context to use; default: its current context.
    #[arg(long)]
    pub context: Option<String>,
    /// The file whose existence means the node wants a reboot (kured's sentinel), as this process
    /// sees it: the DaemonSet mounts the host's /var/run read-only at /host/var/run.
    #[arg(
        long,
        env = "SLIPWAY_AGENT_SENTINEL_FILE",
        default_value = "/var/run/reboot-required"
    )]
    pub sentinel_file: PathBuf,
    /// Run this instead of looking for the file: exit 0 means a reboot is needed, 1 that it is not,
    /// anything else that it cannot tell. Split into words as a shell splits them (quotes kept,
    /// nothing expanded), as kured splits its --reboot-sentinel-command. It runs in the agent's
    /// container unless --sentinel-in-host says otherwise.
    #[arg(long, env = "SLIPWAY_AGENT_SENTINEL_COMMAND")]
    pub sentinel_command: Option<String>,
    /// Run --sentinel-command in the host's namespaces (mount, PID, network, IPC, UTS), as kured
    /// runs it: with the host's binaries (`needs-restarting -r` on RHEL). The pod needs hostPID
    /// and the rights to enter them (deploy/components/reboot-agent/host-command).
    #[arg(
        long,
        env = "SLIPWAY_AGENT_SENTINEL_IN_HOST",
        requires = "sentinel_command"
    )]
    pub sentinel_in_host: bool,
    /// Serve /metrics here (host:port): `slipway_reboot_required{node}`, kured's
    /// kured_reboot_required. Empty: no server.
    #[arg(long, env = "SLIPWAY_AGENT_METRICS_ADDR", default_value = "")]
    pub metrics_addr: String,
    /// How often to look (a Go duration).
    #[arg(long, env = "SLIPWAY_AGENT_PERIOD", default_value = "1m")]
    pub period: String,
    /// Look once, update the Node, and exit.
    #[arg(long)]
    pub once: bool,
    /// The host's /etc as this process sees it (the DaemonSet mounts it read-only at /host/etc):
    /// a host with an etc/kairos-release, or an etc/os-release whose ID contains "kairos", gets
    /// its Node labelled kairos.io/managed=true. Unset: the agent does not look.
    #[arg(long, env = "SLIPWAY_AGENT_HOST_ETC")]
    pub host_etc: Option<PathBuf>,
    /// Also want a reboot while Flatcar's update engine says UPDATE_STATUS_UPDATED_NEED_REBOOT,
    /// read over the host's system D-Bus (`--dbus-address`).
    #[arg(long, env = "SLIPWAY_AGENT_UPDATE_ENGINE")]
    pub update_engine: bool,
    /// The address of the host's system bus, for `--update-engine` (the component's option
    /// mounts the host's socket at /host/run/dbus/system_bus_socket).
    #[arg(
        long,
        env = "SLIPWAY_AGENT_DBUS_ADDRESS",
        default_value = "unix:path=/run/dbus/system_bus_socket"
    )]
    pub dbus_address: String,
}

pub fn run(args: &AgentArgs) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    let period = args
        .period
        .parse::<GoDuration>()
        .ok()
        .and_then(GoDuration::to_std)
        .filter(|p| !p.is_zero())
        .with_context(|| format!("--period {:?} is not a positive duration", args.period))?;
    if args.node.is_empty() {
        bail!("--node (or NODE_NAME) is required");
    }
    if let Some(command) = &args.sentinel_command {
        request::command_words(command).map_err(|e| anyhow::anyhow!("--sentinel-command: {e}"))?;
    }
    let metrics = Arc::new(metrics::AgentMetrics::new(&args.node));
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async {
        if !args.metrics_addr.is_empty() {
            metrics::serve(&args.metrics_addr, metrics.clone()).await?;
        }
        let client = super::client(&args.kubeconfig, args.context.as_deref()).await?;
        let nodes: Api<Node> = Api::all(client);
        info!(
            node = %args.node,
            period = %args.period,
            update_engine = args.update_engine,
            "watching the reboot sentinel"
        );
        if args.once {
            let engine = if args.update_engine {
                Some(update_engine::read_once(&args.dbus_address).await)
            } else {
                None
            };
            return step(&nodes, args, engine, &metrics).await;
        }
        let mut engine = args
            .update_engine
            .then(|| update_engine::watch(args.dbus_address.clone(), period));
        let mut stop = Stop::new();
        loop {
            let seen = engine.as_mut().map(|rx| rx.borrow_and_update().clone());
            if let Err(e) = step(&nodes, args, seen, &metrics).await {
                warn!("{e:#}");
            }
            if !stop.wait(period, engine.as_mut()).await {
                info!("stopping");
                return Ok(());
            }
        }
    })
}

/// One look at the host and, if the Node must change, one patch of it.
async fn step(
    nodes: &Api<Node>,
    args: &AgentArgs,
    update_engine: Option<UpdateEngine>,
    metrics: &metrics::AgentMetrics,
) -> anyhow::Result<()> {
    let node = answered(nodes.get(&args.node)).await?.map_err(|e| {
        anyhow::anyhow!("cannot read node {}: {}", args.node, super::kube_error(&e))
    })?;
    let boot_id = node
        .status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.boot_id.as_str())
        .unwrap_or_default();
    let meta = &node.metadata;
    let seen = NodeSeen {
        boot_id,
        reboot_required: meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(REBOOT_REQUIRED_ANNOTATION))
            .map(String::as_str),
        kairos_managed: meta
            .labels
            .as_ref()
            .and_then(|l| l.get(KAIROS_MANAGED_LABEL))
            .map(String::as_str),
    };
    let sentinel = look(args).await;
    if let Sentinel::Unknown(why) = &sentinel {
        warn!(node = %args.node, "cannot tell whether a reboot is needed: {why}");
    }
    let host = HostSeen {
        sentinel,
        update_engine,
        release: args
            .host_etc
            .as_deref()
            .filter(|etc| !etc.as_os_str().is_empty())
            .map(host_release),
    };
    let decision = agent::decide(&host, seen);
    metrics.saw(&decision.wanted);
    let Some(patch) = decision.merge_patch() else {
        return Ok(());
    };
    match &decision.request {
        AnnotationChange::Keep => {}
        AnnotationChange::Set(boot) => {
            info!(node = %args.node, boot_id = %boot, "the node wants a reboot")
        }
        AnnotationChange::Remove => info!(node = %args.node, "the node no longer wants a reboot"),
    }
    if decision.label_kairos {
        info!(node = %args.node, "the host runs Kairos: labelling the node {KAIROS_MANAGED_LABEL}=true");
    }
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    answered(nodes.patch(&args.node, &params, &Patch::Merge(patch)))
        .await?
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot change node {}: {}",
                args.node,
                super::kube_error(&e)
            )
        })?;
    Ok(())
}

/// `request`'s answer, or an error once [`REQUEST_TIMEOUT`] has passed without one (the request
/// is dropped with its connection; the next step opens another).
async fn answered<T>(request: impl Future<Output = T>) -> anyhow::Result<T> {
    tokio::time::timeout(REQUEST_TIMEOUT, request)
        .await
        .map_err(|_| anyhow::anyhow!("the API server did not answer in {REQUEST_TIMEOUT:?}"))
}

/// The host's kairos-release and os-release under its /etc.
fn host_release(etc: &Path) -> HostRelease {
    let read = |name: &str| {
        let path = etc.join(name);
        match std::fs::read(&path) {
            Ok(bytes) => HostFile::Read(String::from_utf8_lossy(&bytes).into_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => HostFile::Missing,
            Err(e) => HostFile::Unreadable(format!("{}: {e}", path.display())),
        }
    };
    HostRelease {
        kairos_release: read("kairos-release"),
        os_release: read("os-release"),
    }
}

/// What the sentinel says now.
async fn look(args: &AgentArgs) -> Sentinel {
    let Some(command) = args.sentinel_command.clone() else {
        return match std::fs::metadata(&args.sentinel_file) {
            Ok(_) => Sentinel::Present,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Sentinel::Absent,
            Err(e) => Sentinel::Unknown(format!("{}: {e}", args.sentinel_file.display())),
        };
    };
    let words = match request::command_words(&command) {
        Ok(words) => words,
        Err(why) => return Sentinel::Unknown(why),
    };
    let in_host = args.sentinel_in_host;
    let ran = tokio::task::spawn_blocking(move || {
        if in_host {
            return host::sentinel(&words);
        }
        let Some((program, rest)) = words.split_first() else {
            return Err("the sentinel command is empty".to_string());
        };
        std::process::Command::new(program)
            .args(rest)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .status()
            .map(|status| status.code())
            .map_err(|e| format!("cannot run {program:?}: {e}"))
    })
    .await;
    match ran {
        Ok(Ok(code)) => request::sentinel_of_exit_code(code),
        Ok(Err(why)) => Sentinel::Unknown(why),
        Err(e) => Sentinel::Unknown(format!("the sentinel command's task failed: {e}")),
    }
}

/// SIGTERM and SIGINT, listened for from the start so that none is missed between sleeps.
struct Stop {
    signals: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Stop {
    fn new() -> Stop {
        use tokio::signal::unix::{SignalKind, signal};
        let signals = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(term), Ok(int)) => Some((term, int)),
            _ => {
                warn!("cannot install signal handlers; SIGTERM will kill the process");
                None
            }
        };
        Stop { signals }
    }

    /// Sleeps for `period`, or until the update engine's status changes; false if a signal
    /// came first.
    async fn wait(
        &mut self,
        period: Duration,
        engine: Option<&mut watch::Receiver<UpdateEngine>>,
    ) -> bool {
        let changed = async {
            // An error means the watcher is gone; the period still runs.
            let gone = match engine {
                Some(rx) => rx.changed().await.is_err(),
                None => true,
            };
            if gone {
                std::future::pending::<()>().await;
            }
        };
        let Some((term, int)) = self.signals.as_mut() else {
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = changed => {}
            }
            return true;
        };
        tokio::select! {
            _ = tokio::time::sleep(period) => true,
            _ = changed => true,
            _ = term.recv() => false,
            _ = int.recv() => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        agent: AgentArgs,
    }

    /// An API server that takes the request and never answers (a connection that died without a
    /// reset): the step gives up after the timeout, so the loop goes on.
    #[tokio::test(start_paused = true)]
    async fn a_step_gives_up_on_an_api_server_that_never_answers() {
        let silent = tower::service_fn(|_: http::Request<kube::client::Body>| {
            std::future::pending::<Result<http::Response<kube::client::Body>, std::io::Error>>()
        });
        let nodes: Api<Node> = Api::all(kube::Client::new(silent, "default"));
        let args =
            Cli::try_parse_from(["agent", "--node", "n1", "--sentinel-file", "/nonexistent"])
                .expect("the agent's arguments")
                .agent;
        let started = tokio::time::Instant::now();
        let error = tokio::time::timeout(
            2 * REQUEST_TIMEOUT,
            step(&nodes, &args, None, &metrics::AgentMetrics::new("n1")),
        )
        .await
        .expect("the step ended by itself")
        .expect_err("no answer is an error");
        assert_eq!(started.elapsed(), REQUEST_TIMEOUT);
        assert!(
            error.to_string().contains("did not answer in 30s"),
            "{error:#}"
        );
    }
}
