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
    }
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
