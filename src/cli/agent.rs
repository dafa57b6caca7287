//! `slipway agent`: runs on every node (a DaemonSet, `deploy/components/reboot-agent`) and keeps
//! the `slipway.dev/reboot-required` annotation of its own Node in step with the node's sentinel;
//! the decision is `slipway::reboot_policy::core::request::agent_step`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use slipway::common::duration::GoDuration;
use slipway::reboot_policy::core::request::{
    self, AnnotationChange, REBOOT_REQUIRED_ANNOTATION, Sentinel,
};
use tracing::{info, warn};

/// The field manager of the agent's patches.
const FIELD_MANAGER: &str = "slipway-agent";

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    slipway agent --node \"$NODE_NAME\" --sentinel-file /host/var/run/reboot-required\n  \
    slipway agent --node worker-1 --sentinel-command '/usr/local/bin/needs-reboot' --once")]
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
    /// anything else that it cannot tell. Split on whitespace, no shell; it runs in the agent's
    /// container, so an image of your own must carry what it needs.
    #[arg(long, env = "SLIPWAY_AGENT_SENTINEL_COMMAND")]
    pub sentinel_command: Option<String>,
    /// How often to look (a Go duration).
    #[arg(long, env = "SLIPWAY_AGENT_PERIOD", default_value = "1m")]
    pub period: String,
    /// Look once, update the Node, and exit.
    #[arg(long)]
    pub once: bool,
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
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let client = super::client(&args.kubeconfig, args.context.as_deref()).await?;
        let nodes: Api<Node> = Api::all(client);
        info!(node = %args.node, period = %args.period, "watching the reboot sentinel");
        let mut stop = Stop::new();
        loop {
            let result = step(&nodes, args).await;
            if args.once {
                return result;
            }
            if let Err(e) = result {
                warn!("{e:#}");
            }
            if !stop.sleep(period).await {
                info!("stopping");
                return Ok(());
            }
        }
    })
}

/// One look at the sentinel and, if it changed, one patch of the Node.
async fn step(nodes: &Api<Node>, args: &AgentArgs) -> anyhow::Result<()> {
    let node = nodes.get(&args.node).await.map_err(|e| {
        anyhow::anyhow!("cannot read node {}: {}", args.node, super::kube_error(&e))
    })?;
    let boot_id = node
        .status
        .as_ref()
        .and_then(|s| s.node_info.as_ref())
        .map(|i| i.boot_id.clone())
        .unwrap_or_default();
    let current = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REBOOT_REQUIRED_ANNOTATION))
        .map(String::as_str);
    let sentinel = look(args).await;
    if let Sentinel::Unknown(why) = &sentinel {
        warn!(node = %args.node, "cannot tell whether a reboot is needed: {why}");
    }
    let value = match request::agent_step(&sentinel, &boot_id, current) {
        AnnotationChange::Keep => return Ok(()),
        AnnotationChange::Set(boot) => {
            info!(node = %args.node, boot_id = %boot, "the node wants a reboot");
            json!(boot)
        }
        AnnotationChange::Remove => {
            info!(node = %args.node, "the node no longer wants a reboot");
            serde_json::Value::Null
        }
    };
    let patch = json!({"metadata": {"annotations": {REBOOT_REQUIRED_ANNOTATION: value}}});
    nodes
        .patch(
            &args.node,
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..PatchParams::default()
            },
            &Patch::Merge(patch),
        )
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot annotate node {}: {}",
                args.node,
                super::kube_error(&e)
            )
        })?;
    Ok(())
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
    let ran = tokio::task::spawn_blocking(move || {
        let mut words = command.split_whitespace();
        let program = words.next().unwrap_or_default().to_string();
        std::process::Command::new(&program)
            .args(words)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .status()
            .map_err(|e| format!("cannot run {program:?}: {e}"))
    })
    .await;
    match ran {
        Ok(Ok(status)) => request::sentinel_of_exit_code(status.code()),
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

    /// Sleeps for `period`; false if a signal came first.
    async fn sleep(&mut self, period: Duration) -> bool {
        let Some((term, int)) = self.signals.as_mut() else {
            tokio::time::sleep(period).await;
            return true;
        };
        tokio::select! {
            _ = tokio::time::sleep(period) => true,
            _ = term.recv() => false,
            _ = int.recv() => false,
        }
    }
}
