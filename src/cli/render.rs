//! `slipway render`: the reboot pods and Jobs the controller would create for a Plan.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::{Api, ListParams};
use slipway::node::NodeInfo;
use slipway::plan::api::Plan;
use slipway::plan::core::ChannelAnswer;
use slipway::plan::core::lint::{self, Document};
use slipway::plan::core::render::{RenderInput, Rendering};

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    slipway render examples/k3s-stable.yaml --nodes nodes.yaml --version v1.34.2+k3s1\n  \
    kubectl get nodes -o yaml > nodes.yaml && slipway render plan.yaml --nodes nodes.yaml --summary\n  \
    slipway render plan.yaml --kubeconfig ~/.kube/config --secret secret.yaml\n  \
    slipway render plan.yaml --context prod -o json | jq -r '.items[].metadata.name'")]
pub struct RenderArgs {
    /// The Plan, as YAML or JSON; Secrets in the same file are used too. `-` reads stdin.
    pub plan: PathBuf,
    /// Node objects as YAML or JSON (`kubectl get nodes -o yaml` works); without it the nodes are
    /// read from the cluster.
    #[arg(long, conflicts_with = "kubeconfig")]
    pub nodes: Option<PathBuf>,
    /// Kubeconfig of the cluster to read nodes (and the live Plan's uid) from, read-only; empty
    /// means the usual lookup (KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<String>,
    /// The kubeconfig context to read the cluster of; default: its current context.
    #[arg(long, conflicts_with = "nodes")]
    pub context: Option<String>,
    /// The version to render: overrides spec.version, and is required for a Plan that follows a
    /// channel (see `slipway resolve`).
    #[arg(long)]
    pub version: Option<String>,
    /// A Secret the Plan references, as YAML or JSON; repeat for several.
    #[arg(long = "secret")]
    pub secrets: Vec<PathBuf>,
    /// The Plan's metadata.uid, which orders nodes across batches and owns the Jobs. Default: the
    /// file's, else the live Plan's (with --kubeconfig), else a stand-in (batches then may differ).
    #[arg(long)]
    pub uid: Option<String>,
    /// Print a table of nodes (batch, Job, or why not) instead of the objects.
    #[arg(long)]
    pub summary: bool,
    /// The format of the objects: a YAML stream (each object headed by its batch), or one JSON
    /// List (as `kubectl get -o json` prints, in the same order).
    #[arg(long, short, value_enum, default_value_t = Objects::Yaml, conflicts_with = "summary")]
    pub output: Objects,
    /// The controller's name (the upgrade.cattle.io/controller label).
    #[arg(
        long,
        env = "SYSTEM_UPGRADE_CONTROLLER_NAME",
        default_value = "system-upgrade-controller"
    )]
    pub name: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Objects {
    Yaml,
    Json,
}

/// The uid of a Plan that has none yet (it is only ever set by the API server).
const STAND_IN_UID: &str = "00000000-0000-0000-0000-000000000000";

pub fn run(args: &RenderArgs) -> anyhow::Result<()> {
    let docs = read_documents(&args.plan)?;
    let file = args.plan.display().to_string();
    let plan_doc = docs
        .iter()
        .find(|d| d.kind() == "Plan")
        .with_context(|| format!("{file}: no Plan in the file"))?;
    let api_version = plan_doc
        .value
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or("");
    if api_version != lint::API_VERSION {
        bail!(
            "{file}:{}: the Plan is {api_version:?}, not {}",
            plan_doc.line,
            lint::API_VERSION
        );
    }
    let mut plan: Plan = serde_json::from_value(plan_doc.value.clone())
        .with_context(|| format!("{file}:{}: not a valid Plan", plan_doc.line))?;
    let secrets = secrets_of(&docs, &file, &args.secrets)?;
    let nodes: Vec<NodeInfo> = match &args.nodes {
        Some(path) => read_nodes(path)?,
        None => {
            let runtime =
                tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
            runtime.block_on(live(args, &mut plan, &secrets))?
        }
    };
    if let Some(uid) = &args.uid {
        plan.metadata.uid = Some(uid.clone());
    }
    if plan.metadata.uid.is_none() {
        eprintln!(
            "note: plan/{} has no uid: which nodes go in which batch depends on it; give --uid",
            plan.metadata.name.as_deref().unwrap_or_default()
        );
        plan.metadata.uid = Some(STAND_IN_UID.into());
    }
    let channel = channel_answer(args, &mut plan)?;
    let env = slipway::plan::core::config::EnvSettings::from_lookup(|k| std::env::var(k).ok());
    let input = RenderInput {
        plan,
        nodes,
        secrets,
        channel,
        now: jiff::Timestamp::now(),
        controller_name: args.name.clone(),
        job_config: env.job,
    };
    let name = input.plan.metadata.name.clone().unwrap_or_default();
    let rendering = slipway::plan::core::render::render(&input)
        .with_context(|| format!("{file}: plan/{name}"))?;
    match (args.summary, args.output) {
        (true, _) => print!("{}", summary(&rendering)),
        (false, Objects::Yaml) => print!("{}", yaml(&rendering)?),
        (false, Objects::Json) => println!("{}", serde_json::to_string_pretty(&list(&rendering)?)?),
    }
    if let Some(why) = &rendering.stopped {
        eprintln!("note: {why}");
    }
    Ok(())
}

/// The Secrets in the Plan's file and in the files of `--secret`, by name.
fn secrets_of(
    docs: &[Document],
    file: &str,
    more: &[std::path::PathBuf],
) -> anyhow::Result<BTreeMap<String, Secret>> {
    let mut secrets: BTreeMap<String, Secret> = BTreeMap::new();
    for d in docs.iter().filter(|d| d.kind() == "Secret") {
        add_secret(&mut secrets, d, file)?;
    }
    for p in more {
        for d in read_documents(p)?.iter().filter(|d| d.kind() == "Secret") {
            add_secret(&mut secrets, d, &p.display().to_string())?;
        }
    }
    Ok(secrets)
}

/// What to render with for the version: `--version` replaces a pinned version or stands in for
/// the channel's answer; a Plan that follows a channel needs it.
fn channel_answer(args: &RenderArgs, plan: &mut Plan) -> anyhow::Result<Option<ChannelAnswer>> {
    Ok(match (&args.version, plan.spec.version.as_deref()) {
        (Some(v), Some(_)) => {
            plan.spec.version = Some(v.clone());
            None
        }
        (Some(v), None) => Some(ChannelAnswer::Version(v.clone())),
        (None, Some(v)) if !v.is_empty() => None,
        (None, _) if plan.spec.channel.as_deref().is_some_and(|c| !c.is_empty()) => bail!(
            "plan/{} follows a channel: give the version to render with --version (slipway resolve prints it)",
            plan.metadata.name.as_deref().unwrap_or_default()
        ),
        (None, _) => None,
    })
}

/// Every object of every batch as one multi-document YAML stream, Jobs before the reboot pods
/// made once they complete.
pub fn yaml(r: &Rendering) -> anyhow::Result<String> {
    let mut out = String::new();
    for (i, b) in r.batches.iter().enumerate() {
        let objects = b
            .jobs
            .iter()
            .map(serde_saphyr::to_string)
            .chain(b.pods.iter().map(serde_saphyr::to_string));
        for o in objects {
            out.push_str(&format!("---\n# batch {}\n", i + 1));
            out.push_str(&o.context("cannot render YAML")?);
        }
    }
    Ok(out)
}

/// Every object of every batch, Jobs before reboot pods, as a `v1` List.
pub fn list(r: &Rendering) -> anyhow::Result<serde_json::Value> {
    // k8s-openapi writes each object's apiVersion and kind.
    let mut items = Vec::new();
    for b in &r.batches {
        for j in &b.jobs {
            items.push(serde_json::to_value(j)?);
        }
        for p in &b.pods {
            items.push(serde_json::to_value(p)?);
        }
    }
    Ok(serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}))
}

/// The hooks' Jobs, as rows of the summary.
fn hook_rows(r: &Rendering) -> Vec<[String; 4]> {
    use slipway::plan::core::hooks::HOOK_LABEL;
    let mut rows = Vec::new();
    for (i, batch) in r.batches.iter().enumerate() {
        for job in &batch.jobs {
            let hook = job.metadata.labels.as_ref().and_then(|l| l.get(HOOK_LABEL));
            let (label, note) = match hook.map(String::as_str) {
                Some("pre") => (
                    "(pre hook)",
                    "before the first node; no node starts if it fails",
                ),
                Some("post") => ("(post hook)", "after the last node"),
                _ => continue,
            };
            rows.push([
                label.to_string(),
                (i + 1).to_string(),
                job.metadata.name.clone().unwrap_or_default(),
                note.to_string(),
            ]);
        }
    }
    rows
}

/// One line per node: batch, Job, or why it gets none.
pub fn summary(r: &Rendering) -> String {
    let mut rows = vec![[
        "NODE".to_string(),
        "BATCH".to_string(),
        "JOB".to_string(),
        "NOTE".to_string(),
    ]];
    let hooks = hook_rows(r);
    rows.extend(hooks.iter().filter(|h| h[0] == "(pre hook)").cloned());
    for n in &r.nodes {
        rows.push([
            n.node.clone(),
            n.batch.map_or("-".into(), |b| b.to_string()),
            n.job.clone().unwrap_or_else(|| "-".into()),
            n.note.clone(),
        ]);
    }
    rows.extend(hooks.into_iter().filter(|h| h[0] == "(post hook)"));
    let mut widths = [0usize; 4];
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = format!(
        "version {}, latestHash {}\n",
        r.status.latest_version.as_deref().unwrap_or("?"),
        r.status.latest_hash.as_deref().unwrap_or("?")
    );
    for row in rows {
        let line = format!(
            "{:w0$}  {:w1$}  {:w2$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

pub fn read_documents(path: &Path) -> anyhow::Result<Vec<Document>> {
    let name = path.display();
    let text = if path.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin()).context("cannot read stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {name}"))?
    };
    lint::parse_documents(&text).map_err(|e| anyhow::anyhow!("{name}:{e}"))
}

fn add_secret(
    secrets: &mut BTreeMap<String, Secret>,
    doc: &Document,
    file: &str,
) -> anyhow::Result<()> {
    let secret = slipway::plan::core::secret::from_manifest(&doc.value)
        .with_context(|| format!("{file}:{}: not a valid Secret", doc.line))?;
    let name = secret
        .metadata
        .name
        .clone()
        .with_context(|| format!("{file}:{}: the Secret has no metadata.name", doc.line))?;
    secrets.insert(name, secret);
    Ok(())
}

/// Nodes from a file of Node objects or lists of them.
pub fn read_nodes(path: &Path) -> anyhow::Result<Vec<NodeInfo>> {
    let file = path.display().to_string();
    let mut nodes = Vec::new();
    for d in read_documents(path)? {
        let items: Vec<serde_json::Value> = match d.kind() {
            "Node" => vec![d.value.clone()],
            "List" | "NodeList" => d
                .value
                .get("items")
                .and_then(|i| i.as_array())
                .cloned()
                .unwrap_or_default(),
            _ => continue,
        };
        for item in items {
            if item.get("kind").and_then(|k| k.as_str()).unwrap_or("Node") != "Node" {
                continue;
            }
            let node: Node = serde_json::from_value(item)
                .with_context(|| format!("{file}:{}: not a valid Node", d.line))?;
            nodes.push(NodeInfo::from_node(&node));
        }
    }
    if nodes.is_empty() {
        bail!("{file}: no Node objects");
    }
    Ok(nodes)
}

/// Reads the nodes, the live Plan's identity and missing Secrets from the cluster (get and list only).
async fn live(
    args: &RenderArgs,
    plan: &mut Plan,
    secrets: &BTreeMap<String, Secret>,
) -> anyhow::Result<Vec<NodeInfo>> {
    let client = super::client(
        args.kubeconfig.as_deref().unwrap_or(""),
        args.context.as_deref(),
    )
    .await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let list = nodes
        .list(&ListParams::default())
        .await
        .map_err(|e| anyhow::anyhow!("cannot list nodes: {}", super::kube_error(&e)))?;
    let namespace = plan
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "system-upgrade".into());
    let name = plan.metadata.name.clone().unwrap_or_default();
    // The node order of a rollout depends on the Plan's uid: take the live one when the Plan exists.
    let plans: Api<Plan> = Api::namespaced(client.clone(), &namespace);
    if let Ok(Some(live)) = plans.get_opt(&name).await
        && args.uid.is_none()
    {
        plan.metadata.uid = live.metadata.uid;
        plan.metadata.generation = live.metadata.generation;
    }
    let missing: Vec<String> = plan
        .spec
        .secrets
        .iter()
        .flatten()
        .filter(|s| !secrets.contains_key(&s.name))
        .map(|s| s.name.clone())
        .collect();
    if !missing.is_empty() {
        bail!(
            "plan/{name} mounts secret(s) {} not given with --secret",
            missing.join(", ")
        );
    }
    Ok(list.items.iter().map(NodeInfo::from_node).collect())
}
