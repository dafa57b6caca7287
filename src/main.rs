//! The `slipway` command line: the controller and offline tools for Plans.

mod cli;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use cli::run::LogFormat;
use k8s_openapi::api::core::v1::Secret;
use slipway::plan::api::Plan;
use slipway::runtime::Operations;
use slipway::runtime::health::{Health, Transition};
use slipway::runtime::leader::{ElectionConfig, LeaderElector, LeaseGuard};
use slipway::runtime::metrics::Metrics;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

/// How long in-flight reconciles get to finish after SIGTERM before the process stops anyway
/// (within Kubernetes' default 30 s termination grace period).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

#[derive(Parser)]
#[command(
    name = "slipway",
    version,
    about = "Upgrades Kubernetes nodes with Plans, compatible with system-upgrade-controller"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a CustomResourceDefinition as YAML (or JSON): plans.upgrade.cattle.io (the default),
    /// nodemaintenances.nodemaintenance.medik8s.io, rebootpolicies.slipway.dev,
    /// disruptionbudgets.slipway.dev, nodeops.operator.kairos.io or
    /// nodeopupgrades.operator.kairos.io; or, with strict-plans, the opt-in
    /// ValidatingAdmissionPolicy (and its binding) that refuses at admission the Plans SUC's CRD
    /// accepts but no controller can run.
    Crd(CrdArgs),
    /// Print the latestHash of a Plan, exactly as system-upgrade-controller computes it.
    ///
    /// Either give the resolved version (and service account), or a Plan file (and the Secrets it
    /// references, as Secret YAML). With a Plan that follows a channel, give --version too.
    Hash(HashArgs),
    /// Run the controller: reconcile the Plans of one namespace over the cluster's nodes.
    ///
    /// Flags and environment variables are SUC's; SYSTEM_UPGRADE_JOB_* and
    /// SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL are read from the environment with SUC's defaults.
    Run(Box<cli::run::RunArgs>),
    /// Check Plans in files as the API server and the controller would, and warn about the usual
    /// mistakes. Exit 0: no errors (warnings allowed); 1: errors; 2: some input could not be read.
    Validate(cli::validate::ValidateArgs),
    /// Print the reboot pods and Jobs the controller would create for a Plan, batch by batch.
    Render(cli::render::RenderArgs),
    /// Ask a Plan's channel as the controller does; print the version and the latestHash.
    Resolve(cli::resolve::ResolveArgs),
    /// Show how far Plans, NodeMaintenances and RebootPolicies are, from the cluster (read-only):
    /// conditions, and per node its phase and why it waits.
    Status(cli::status::StatusArgs),
    /// Explain what goes next and why the rest waits: for a Plan, RebootPolicy, NodeMaintenance,
    /// DisruptionBudget or node, read-only, decided by the controller's own code.
    Explain(cli::explain::ExplainArgs),
    /// Run on a node (a DaemonSet): mark the node's own Node with slipway.dev/reboot-required
    /// while its sentinel (kured's /var/run/reboot-required, or a command) says it needs a
    /// reboot, and clear the mark once it no longer does.
    Agent(cli::agent::AgentArgs),
    /// Run a command in the host's namespaces (what `agent --sentinel-in-host` starts).
    #[command(name = "host-exec", hide = true)]
    HostExec(cli::agent::host::HostExecArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cli::generate::CompletionsArgs),
    /// Print slipway's manual page (roff), or a command's, or write them all into a directory.
    Man(cli::generate::ManArgs),
}

#[derive(clap::Args)]
struct CrdArgs {
    #[arg(value_enum, default_value_t = CrdResource::Plans)]
    resource: CrdResource,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = cli::render::Objects::Yaml)]
    output: cli::render::Objects,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CrdResource {
    Plans,
    Nodemaintenances,
    Rebootpolicies,
    Disruptionbudgets,
    Nodeops,
    Nodeopupgrades,
    StrictPlans,
}

#[derive(clap::Args)]
struct HashArgs {
    /// The resolved version (`+` is replaced by `-`, as in status.latestVersion).
    #[arg(long)]
    version: Option<String>,
    /// The Plan's service account (spec.serviceAccountName).
    #[arg(long, conflicts_with = "plan")]
    service_account: Option<String>,
    /// A Plan as YAML or JSON.
    #[arg(long)]
    plan: Option<PathBuf>,
    /// A Secret the Plan references, as YAML or JSON; repeat for several.
    #[arg(long = "secret", requires = "plan")]
    secrets: Vec<PathBuf>,
}

/// The name kubectl runs a plugin by: `kubectl slipway` runs `kubectl-slipway` on PATH.
const PLUGIN_EXECUTABLE: &str = "kubectl-slipway";

/// The command line's definition, named as the user called it: `kubectl slipway` when run as
/// kubectl's plugin, so that usage lines and help read as typed.
fn command() -> clap::Command {
    let invoked = std::env::args_os()
        .next()
        .map(PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    let cmd = Cli::command();
    if invoked.as_deref() == Some(PLUGIN_EXECUTABLE) {
        cmd.bin_name("kubectl slipway")
    } else {
        cmd
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::from_arg_matches(&command().get_matches()).unwrap_or_else(|e| e.exit());
    let done = match cli.command {
        Command::Crd(args) => crd(&args).map(|crd| print!("{crd}")),
        Command::Hash(args) => hash(args).map(|h| println!("{h}")),
        Command::Run(args) => run(*args),
        Command::Validate(args) => match cli::validate::run(&args) {
            Ok(code) => return std::process::ExitCode::from(code),
            Err(e) => Err(e),
        },
        Command::Render(args) => cli::render::run(&args),
        Command::Resolve(args) => cli::resolve::run(&args),
        Command::Status(args) => cli::status::run(&args),
        Command::Explain(args) => cli::explain::run(&args),
        Command::Agent(args) => cli::agent::run(&args),
        Command::HostExec(args) => return cli::agent::host::run(&args),
        Command::Completions(args) => {
            use std::io::Write;
            let script = cli::generate::completions(&args, Cli::command(), "slipway");
            std::io::stdout()
                .write_all(&script)
                .context("cannot write to stdout")
        }
        Command::Man(args) => cli::generate::man(&args, Cli::command()),
    };
    match done {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // One line, with the causes: no backtrace for bad input.
            eprintln!("slipway: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: cli::run::RunArgs) -> anyhow::Result<()> {
    cli::process::one_malloc_arena();
    let default_level = if args.debug { "debug" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    match args.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().flatten_event(true).init(),
    }
    // One rustls provider for kube and reqwest alike (see rust-stack.md, trap 4).
    let _ = rustls::crypto::ring::default_provider().install_default();

    let env = slipway::plan::core::config::EnvSettings::from_lookup(|k| std::env::var(k).ok());
    for warning in &env.warnings {
        tracing::warn!("{warning}");
    }
    let election = if args.leader_elect {
        Some(ElectionConfig::from_lookup(|k| std::env::var(k).ok())?)
    } else {
        None
    };
    let metrics_addr: Option<SocketAddr> = match args.metrics_addr.trim() {
        "" => None,
        a => Some(
            a.parse()
                .with_context(|| format!("bad --metrics-addr {a:?} (want host:port)"))?,
        ),
    };
    let settings = args.settings(env.job, env.polling_interval)?;
    let runtime = cli::process::runtime()?;
    runtime.block_on(async move {
        let config =
            cli::connect::client_config(&args.kubeconfig, &args.master, args.context.as_deref())
                .await?;
        // Evictions answered 429 (a PodDisruptionBudget) must come back at once, to be reported
        // and asked again on the next reconcile: kube's retry layer would wait minutes.
        let mut no_retry = config.clone();
        no_retry.default_retry = false;
        let eviction = cli::connect::client(no_retry)?;
        let client = cli::connect::client(config)?;
        operate(client, eviction, settings, election, metrics_addr).await
    })
}

/// Serves /metrics, /healthz and /readyz, waits for the lease if asked to, runs the controller
/// until SIGTERM or SIGINT, and releases the lease.
async fn operate(
    client: kube::Client,
    eviction: kube::Client,
    settings: cli::run::Settings,
    election: Option<ElectionConfig>,
    metrics_addr: Option<SocketAddr>,
) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::new());
    let health = Health::default();
    let shutdown = CancellationToken::new();
    let server_stop = CancellationToken::new();
    tokio::spawn(on_signals(shutdown.clone(), health.clone()));
    let server = match metrics_addr {
        None => None,
        Some(addr) => {
            let listener = slipway::runtime::server::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            let bound = listener.local_addr().unwrap_or(addr);
            info!(addr = %bound, "serving /metrics, /healthz and /readyz");
            Some(tokio::spawn(slipway::runtime::server::serve(
                listener,
                metrics.clone(),
                health.clone(),
                server_stop.clone(),
            )))
        }
    };
    let ops = Operations {
        metrics: metrics.clone(),
        health: health.clone(),
        shutdown: shutdown.clone(),
        guard: LeaseGuard::always(),
        eviction: Some(eviction),
    };
    let result = match election {
        None => {
            metrics.set_leader(true);
            run_controller(client, settings, ops).await.map(|_| ())
        }
        Some(config) => run_elected(client, settings, config, ops).await,
    };
    server_stop.cancel();
    if let Some(server) = server {
        match tokio::time::timeout(Duration::from_secs(2), server).await {
            Ok(Ok(Ok(()))) | Err(_) => {}
            Ok(Ok(Err(e))) => warn!("the metrics server failed: {e}"),
            Ok(Err(e)) => warn!("the metrics server task failed: {e}"),
        }
    }
    result?;
    info!("stopped");
    Ok(())
}

/// Runs the controller while this replica holds the leader lease, and only then.
async fn run_elected(
    client: kube::Client,
    settings: cli::run::Settings,
    config: ElectionConfig,
    ops: Operations,
) -> Result<(), slipway::runtime::Error> {
    let (metrics, health, shutdown) = (
        ops.metrics.clone(),
        ops.health.clone(),
        ops.shutdown.clone(),
    );
    let identity = slipway::runtime::leader::identity(
        |k| std::env::var(k).ok(),
        slipway::runtime::leader::kernel_hostname(),
    );
    let mut elector = LeaderElector::new(
        client.clone(),
        &settings.namespace,
        &settings.name,
        identity,
        config,
    );
    health.apply(Transition::WaitForLease);
    if !elector.acquire(&shutdown).await {
        info!("stopped while waiting for the leader lease");
        return Ok(());
    }
    metrics.set_leader(true);
    let ops = Operations {
        guard: elector.guard(),
        ..ops
    };
    let release = CancellationToken::new();
    let mut hold = tokio::spawn(elector.hold(release.clone()));
    tokio::select! {
        lost = &mut hold => {
            // Stop at once: a deposed leader must not write. The Deployment restarts
            // this replica, which then waits for the lease like any other.
            metrics.set_leader(false);
            match lost {
                Ok(Err(why)) => error!("lost the leader lease: {why}; exiting"),
                Ok(Ok(())) => error!("the leader lease task ended; exiting"),
                Err(e) => error!("the leader lease task failed: {e}; exiting"),
            }
            std::process::exit(1);
        }
        ran = run_controller(client, settings, ops) => {
            match ran {
                // Every reconcile finished (or none started): hand the lease over now.
                Ok(true) | Err(_) => release.cancel(),
                // Reconciles may still be writing: let the lease expire instead.
                Ok(false) => hold.abort(),
            }
            match hold.await {
                Ok(Ok(())) => {}
                Ok(Err(why)) => warn!("lost the leader lease while stopping: {why}"),
                Err(e) if e.is_cancelled() => {}
                Err(e) => warn!("the leader lease task failed: {e}"),
            }
            metrics.set_leader(false);
            ran.map(|_| ())
        }
    }
}

/// Runs the controller until it stops after a shutdown signal; `Ok(false)` when in-flight
/// reconciles did not finish within [`SHUTDOWN_GRACE`] (they are aborted).
async fn run_controller(
    client: kube::Client,
    settings: cli::run::Settings,
    ops: Operations,
) -> Result<bool, slipway::runtime::Error> {
    let shutdown = ops.shutdown.clone();
    tokio::select! {
        ran = cli::run::run(client, settings, ops) => ran.map(|()| true),
        _ = async {
            shutdown.cancelled().await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => {
            warn!("reconciles still running {}s after the shutdown signal; stopping anyway", SHUTDOWN_GRACE.as_secs());
            Ok(false)
        }
    }
}

/// The first SIGTERM or SIGINT starts a graceful shutdown; a second one exits at once.
async fn on_signals(shutdown: CancellationToken, health: Health) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        error!("cannot install signal handlers; SIGTERM will kill the process");
        return;
    };
    for n in 0.. {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        if n > 0 {
            warn!("{name} again: exiting now");
            std::process::exit(1);
        }
        info!("{name}: finishing running reconciles, then stopping");
        health.apply(Transition::Stop);
        shutdown.cancel();
    }
}

fn crd(args: &CrdArgs) -> anyhow::Result<String> {
    use cli::render::Objects;
    let crd = match args.resource {
        CrdResource::Plans => slipway::plan::api::crd::plan_crd(),
        CrdResource::Nodemaintenances => slipway::maintenance::api::maintenance_crd(),
        CrdResource::Rebootpolicies => slipway::reboot_policy::api::reboot_policy_crd(),
        CrdResource::Disruptionbudgets => slipway::node::budget::api::disruption_budget_crd(),
        CrdResource::Nodeops => slipway::nodeop::api::nodeop_crd(),
        CrdResource::Nodeopupgrades => slipway::nodeop::api::nodeopupgrade_crd(),
        CrdResource::StrictPlans => {
            let docs = slipway::plan::api::strict::strict_plan_policy();
            return Ok(match args.output {
                Objects::Yaml => slipway::plan::api::strict::strict_plan_policy_yaml()?,
                Objects::Json => serde_json::to_string_pretty(&docs)? + "\n",
            });
        }
    };
    // The YAML is what crds/ holds, as the library's *_crd_yaml functions write it.
    Ok(match args.output {
        Objects::Yaml => serde_saphyr::to_string(&crd).context("cannot write YAML")?,
        Objects::Json => serde_json::to_string_pretty(&crd)? + "\n",
    })
}

fn hash(args: HashArgs) -> anyhow::Result<String> {
    let Some(path) = args.plan else {
        let Some(version) = args.version else {
            bail!("give --version (and --service-account), or --plan");
        };
        return Ok(slipway::plan::core::hash::latest_hash(
            &slipway::plan::core::image::munge_version(&version),
            args.service_account.as_deref().unwrap_or(""),
            &[],
            &[],
        ));
    };
    let plan: Plan = cli::read_yaml(&path)?;
    let version = match (&args.version, &plan.spec.version) {
        (Some(v), _) => v.clone(),
        (None, Some(v)) if !v.is_empty() => v.clone(),
        _ => bail!(
            "{} has no spec.version; give the version its channel resolves to with --version",
            path.display()
        ),
    };
    let mut secrets = std::collections::BTreeMap::new();
    for p in &args.secrets {
        let secret = slipway::plan::core::secret::as_stored(cli::read_yaml::<Secret>(p)?);
        let name = secret
            .metadata
            .name
            .clone()
            .with_context(|| format!("{}: the Secret has no metadata.name", p.display()))?;
        secrets.insert(name, secret);
    }
    Ok(slipway::plan::core::hash::plan_latest_hash(
        &plan,
        &slipway::plan::core::image::munge_version(&version),
        &secrets,
    )?)
}
