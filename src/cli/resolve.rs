//! `slipway resolve`: what a Plan's channel answers now, and the latestHash that follows.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::Api;
use slipway::plan::api::Plan;
use slipway::plan::shell::channel::{ChannelClient, ChannelConfig};

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    slipway resolve examples/k3s-stable.yaml\n  \
    slipway resolve plan.yaml --cluster-id \"$(kubectl get ns kube-system -o jsonpath='{.metadata.uid}')\"\n  \
    slipway resolve plan.yaml --kubeconfig ~/.kube/config --secret secret.yaml\n  \
    slipway resolve plan.yaml --context prod -o json")]
pub struct ResolveArgs {
    /// The Plan, as YAML or JSON; Secrets in the same file are used for the hash. `-` reads stdin.
    pub plan: PathBuf,
    /// Sent to the channel as the controller does (the uid of the kube-system namespace).
    #[arg(long, conflicts_with = "kubeconfig")]
    pub cluster_id: Option<String>,
    /// Read the cluster id from this cluster (get on the kube-system namespace only).
    #[arg(long)]
    pub kubeconfig: Option<String>,
    /// Read the cluster id from this context of the kubeconfig (default: its current context).
    #[arg(long, conflicts_with = "cluster_id")]
    pub context: Option<String>,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = super::Output::Text)]
    pub output: super::Output,
    /// A Secret the Plan references, as YAML or JSON; repeat for several.
    #[arg(long = "secret")]
    pub secrets: Vec<PathBuf>,
}

pub fn run(args: &ResolveArgs) -> anyhow::Result<()> {
    let (plan, secrets) = read_plan(args)?;
    let name = plan.metadata.name.clone().unwrap_or_default();
    let (raw, source) = match (
        plan.spec.version.as_deref().filter(|v| !v.is_empty()),
        plan.spec.channel.as_deref().filter(|c| !c.is_empty()),
    ) {
        (Some(v), _) => (v.to_string(), "spec.version".to_string()),
        (None, Some(url)) => (fetch_channel(args, &plan, url)?, format!("channel {url}")),
        (None, None) => bail!("plan/{name}: {}", slipway::plan::core::ERR_UNRESOLVABLE),
    };
    let latest = slipway::plan::core::image::munge_version(&raw);
    let hash = slipway::plan::core::hash::plan_latest_hash(&plan, &latest, &secrets)
        .with_context(|| format!("plan/{name}: cannot compute the latestHash"))?;
    let resolved = Resolved {
        plan: name,
        from: source,
        version: raw,
        latest_version: latest,
        latest_hash: hash,
    };
    println!("{}", resolved.show(args.output)?);
    Ok(())
}

/// The first Plan of the file, and the Secrets of the file and of `--secrets` by name.
fn read_plan(args: &ResolveArgs) -> anyhow::Result<(Plan, BTreeMap<String, Secret>)> {
    let file = args.plan.display().to_string();
    let docs = super::render::read_documents(&args.plan)?;
    let doc = docs
        .iter()
        .find(|d| d.kind() == "Plan")
        .with_context(|| format!("{file}: no Plan in the file"))?;
    let plan: Plan = serde_json::from_value(doc.value.clone())
        .with_context(|| format!("{file}:{}: not a valid Plan", doc.line))?;
    let mut secrets: BTreeMap<String, Secret> = BTreeMap::new();
    let extra: Vec<_> = args
        .secrets
        .iter()
        .map(|p| super::render::read_documents(p))
        .collect::<anyhow::Result<_>>()?;
    for d in docs.iter().chain(extra.iter().flatten()) {
        if d.kind() == "Secret" {
            let s = slipway::plan::core::secret::from_manifest(&d.value)
                .with_context(|| format!("line {}: not a valid Secret", d.line))?;
            if let Some(n) = s.metadata.name.clone() {
                secrets.insert(n, s);
            }
        }
    }
    Ok((plan, secrets))
}

/// The version the channel `url` serves now, asked as SUC asks it (with the cluster's id: given,
/// read from the cluster, or none offline).
fn fetch_channel(args: &ResolveArgs, plan: &Plan, url: &str) -> anyhow::Result<String> {
    let name = plan.metadata.name.clone().unwrap_or_default();
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let cluster_id = match (&args.cluster_id, &args.kubeconfig) {
            (Some(id), _) => id.clone(),
            (None, None) if args.context.is_none() => String::new(),
            (None, k) => {
                let k = k.as_deref().unwrap_or("");
                let client = super::client(k, args.context.as_deref()).await?;
                let ns = Api::<Namespace>::all(client)
                    .get("kube-system")
                    .await
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "cannot read namespace kube-system: {}",
                            super::kube_error(&e)
                        )
                    })?;
                ns.metadata.uid.unwrap_or_default()
            }
        };
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = ChannelClient::new(cluster_id, &ChannelConfig::default())?;
        let current = plan
            .status
            .as_ref()
            .and_then(|s| s.latest_version.clone())
            .unwrap_or_default();
        client
            .fetch(url, &current)
            .await
            .with_context(|| format!("plan/{name}: cannot resolve the channel {url}"))
    })
}

/// What `resolve` prints.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Resolved {
    plan: String,
    /// `spec.version`, or `channel <url>`.
    from: String,
    /// The version as given or as the channel answered.
    version: String,
    latest_version: String,
    latest_hash: String,
}

impl Resolved {
    fn show(&self, output: super::Output) -> anyhow::Result<String> {
        Ok(match super::structured(self, output)? {
            Some(doc) => doc,
            None => format!(
                "plan:          {}\nfrom:          {}\nversion:       {}\nlatestVersion: {}\nlatestHash:    {}",
                self.plan, self.from, self.version, self.latest_version, self.latest_hash
            ),
        })
    }
}
