//! The `slipway` command line: the controller and offline tools for Plans.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use k8s_openapi::api::core::v1::Secret;
use slipway::api::Plan;

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
    /// Print the CustomResourceDefinition of plans.upgrade.cattle.io as YAML.
    Crd,
    /// Print the latestHash of a Plan, exactly as system-upgrade-controller computes it.
    ///
    /// Either give the resolved version (and service account), or a Plan file (and the Secrets it
    /// references, as Secret YAML). With a Plan that follows a channel, give --version too.
    Hash(HashArgs),
    /// Run the controller: reconcile the Plans of one namespace over the cluster's nodes.
    ///
    /// Flags and environment variables are SUC's; SYSTEM_UPGRADE_JOB_* and
    /// SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL are read from the environment with SUC's defaults.
    Run(RunArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Controller name: the value of the upgrade.cattle.io/controller label on Jobs.
    #[arg(
        long,
        env = "SYSTEM_UPGRADE_CONTROLLER_NAME",
        default_value = "system-upgrade-controller"
    )]
    name: String,
    /// The namespace whose Plans, Jobs and Secrets are reconciled.
    #[arg(
        long,
        env = "SYSTEM_UPGRADE_CONTROLLER_NAMESPACE",
        default_value = "system-upgrade"
    )]
    namespace: String,
    /// Path to a kubeconfig; empty means in-cluster configuration (or the usual kubeconfig lookup).
    #[arg(
        long,
        env = "SYSTEM_UPGRADE_CONTROLLER_KUBE_CONFIG",
        default_value = ""
    )]
    kubeconfig: String,
    /// Overrides the API server URL of the kubeconfig.
    #[arg(long, env = "SYSTEM_UPGRADE_CONTROLLER_MASTER_URL", default_value = "")]
    master: String,
    /// Plans reconciled at once.
    #[arg(long, env = "SYSTEM_UPGRADE_CONTROLLER_THREADS", default_value_t = 2)]
    threads: u16,
    /// The node this controller runs on (reported in events).
    #[arg(long, env = "SYSTEM_UPGRADE_CONTROLLER_NODE_NAME")]
    node_name: Option<String>,
    /// Debug logging (same as RUST_LOG=debug).
    #[arg(long, env = "SYSTEM_UPGRADE_CONTROLLER_DEBUG", default_value_t = false)]
    debug: bool,
    /// Install or update the CRD at start, as SUC does.
    #[arg(long, env = "SLIPWAY_INSTALL_CRD", default_value_t = true, action = clap::ArgAction::Set)]
    install_crd: bool,
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

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => {
            print!("{}", slipway::api::crd::plan_crd_yaml()?);
            Ok(())
        }
        Command::Hash(args) => {
            println!("{}", hash(args)?);
            Ok(())
        }
        Command::Run(args) => run(args),
    }
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let default_level = if args.debug { "debug" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    tracing_subscriber::fmt().with_env_filter(filter).init();
    // One rustls provider for kube and reqwest alike (see rust-stack.md, trap 4).
    let _ = rustls::crypto::ring::default_provider().install_default();

    let env = slipway::config::EnvSettings::from_lookup(|k| std::env::var(k).ok());
    for warning in &env.warnings {
        tracing::warn!("{warning}");
    }
    let settings = slipway::controller::Settings {
        name: args.name,
        namespace: args.namespace,
        threads: args.threads.max(1),
        job: env.job,
        polling_interval: env.polling_interval,
        install_crd: args.install_crd,
        instance: args.node_name.or_else(|| std::env::var("HOSTNAME").ok()),
    };
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let client = client(&args.kubeconfig, &args.master).await?;
        slipway::controller::run(client, settings).await?;
        Ok(())
    })
}

async fn client(kubeconfig: &str, master: &str) -> anyhow::Result<kube::Client> {
    let mut config = if kubeconfig.is_empty() {
        kube::Config::infer()
            .await
            .context("cannot find a Kubernetes configuration")?
    } else {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig)
            .with_context(|| format!("cannot read kubeconfig {kubeconfig}"))?;
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .with_context(|| format!("cannot use kubeconfig {kubeconfig}"))?
    };
    if !master.is_empty() {
        config.cluster_url = master
            .parse()
            .with_context(|| format!("bad --master URL {master}"))?;
    }
    kube::Client::try_from(config).context("cannot build the Kubernetes client")
}

fn hash(args: HashArgs) -> anyhow::Result<String> {
    let Some(path) = args.plan else {
        let Some(version) = args.version else {
            bail!("give --version (and --service-account), or --plan");
        };
        return Ok(slipway::hash::latest_hash(
            &slipway::image::munge_version(&version),
            args.service_account.as_deref().unwrap_or(""),
            &[],
            &[],
        ));
    };
    let plan: Plan = read_yaml(&path)?;
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
        let secret: Secret = read_yaml(p)?;
        let name = secret
            .metadata
            .name
            .clone()
            .with_context(|| format!("{}: the Secret has no metadata.name", p.display()))?;
        secrets.insert(name, secret);
    }
    Ok(slipway::hash::plan_latest_hash(
        &plan,
        &slipway::image::munge_version(&version),
        &secrets,
    )?)
}

fn read_yaml<T: serde::de::DeserializeOwned>(path: &PathBuf) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_saphyr::from_str(&text).with_context(|| format!("cannot parse {}", path.display()))
}
