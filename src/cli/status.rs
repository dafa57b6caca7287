//! `slipway status`: how far each Plan's rollout is, read-only.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use slipway::common::selector::Selector;
use slipway::node::NodeInfo;
use slipway::plan::api::{Plan, labels};

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    slipway status\n  \
    slipway status k3s-server -n system-upgrade --watch\n  \
    kubectl slipway status -o json")]
pub struct StatusArgs {
    /// Only this Plan.
    pub plan: Option<String>,
    /// The namespace of the Plans.
    #[arg(long, short, default_value = "system-upgrade")]
    pub namespace: String,
    /// Kubeconfig; empty means the usual lookup (KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, default_value = "")]
    pub kubeconfig: String,
    /// Print again whenever the status changes (polls every 2 seconds) until interrupted.
    #[arg(long, short)]
    pub watch: bool,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = super::validate::Output::Text)]
    pub output: super::validate::Output,
}

#[derive(serde::Serialize, PartialEq)]
struct PlanReport {
    name: String,
    latest_version: Option<String>,
    latest_hash: Option<String>,
    conditions: Vec<slipway::plan::api::PlanCondition>,
    done: usize,
    applying: usize,
    remaining: usize,
    nodes: Vec<NodeReport>,
}

#[derive(serde::Serialize, PartialEq)]
struct NodeReport {
    name: String,
    phase: String,
    since: Option<String>,
    job: Option<String>,
    reason: Option<String>,
    message: Option<String>,
    /// The Job's failure message, when it failed.
    job_failure: Option<String>,
}

pub fn run(args: &StatusArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let client = super::client(&args.kubeconfig).await?;
        let mut last = String::new();
        loop {
            let reports = gather(&client, args).await?;
            let text = match args.output {
                super::validate::Output::Json => serde_json::to_string_pretty(&reports)?,
                super::validate::Output::Text => text(&reports),
            };
            if text != last {
                println!("{text}");
                last = text;
            }
            if !args.watch {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    })
}

async fn gather(client: &kube::Client, args: &StatusArgs) -> anyhow::Result<Vec<PlanReport>> {
    let plans: Api<Plan> = Api::namespaced(client.clone(), &args.namespace);
    let list = plans.list(&ListParams::default()).await.map_err(|e| match &e {
        kube::Error::Api(s) if s.code == 404 => anyhow::anyhow!(
            "the cluster has no Plan CRD (plans.upgrade.cattle.io): is slipway or SUC installed?"
        ),
        _ => anyhow::anyhow!(
            "cannot list plans in namespace {}: {}",
            args.namespace,
            super::kube_error(&e)
        ),
    })?;
    let nodes: Vec<NodeInfo> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| anyhow::anyhow!("cannot list nodes: {}", super::kube_error(&e)))?
        .items
        .iter()
        .map(NodeInfo::from_node)
        .collect();
    let jobs: Vec<Job> = Api::<Job>::namespaced(client.clone(), &args.namespace)
        .list(&ListParams::default())
        .await
        .map_err(|e| anyhow::anyhow!("cannot list jobs: {}", super::kube_error(&e)))?
        .items;
    let mut out = Vec::new();
    for plan in list.items {
        let name = plan.metadata.name.clone().unwrap_or_default();
        if args.plan.as_ref().is_some_and(|p| *p != name) {
            continue;
        }
        let st = plan.status.clone().unwrap_or_default();
        let hash = st.latest_hash.clone().unwrap_or_default();
        let label = labels::plan_node_label(&name);
        let selector = Selector::from_label_selector(plan.spec.node_selector.as_ref())
            .unwrap_or(Selector::Nothing);
        let selected: Vec<&NodeInfo> = nodes
            .iter()
            .filter(|n| selector.matches(&n.labels))
            .filter(|n| n.labels.get(&label).map(String::as_str) != Some(labels::DISABLED))
            .collect();
        let done = selected
            .iter()
            .filter(|n| !hash.is_empty() && n.labels.get(&label) == Some(&hash))
            .count();
        let node_reports = st
            .nodes
            .iter()
            .map(|p| NodeReport {
                name: p.name.clone(),
                phase: p.phase.to_string(),
                since: p.since.clone(),
                job: p.job.clone(),
                reason: p.reason.clone(),
                message: p.message.clone(),
                job_failure: p.job.as_ref().and_then(|j| failure(&jobs, j)),
            })
            .collect();
        out.push(PlanReport {
            name,
            latest_version: st.latest_version.clone(),
            latest_hash: st.latest_hash.clone(),
            conditions: st.conditions.clone(),
            done,
            applying: st.applying.len(),
            remaining: selected.len().saturating_sub(done + st.applying.len()),
            nodes: node_reports,
        });
    }
    if let Some(p) = &args.plan
        && out.is_empty()
    {
        anyhow::bail!("plan/{p} not found in namespace {}", args.namespace);
    }
    Ok(out)
}

fn failure(jobs: &[Job], name: &str) -> Option<String> {
    let job = jobs
        .iter()
        .find(|j| j.metadata.name.as_deref() == Some(name))?;
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Failed" && c.status == "True")
        .map(|c| {
            format!(
                "{}: {}",
                c.reason.as_deref().unwrap_or_default(),
                c.message.as_deref().unwrap_or_default()
            )
        })
}

fn text(reports: &[PlanReport]) -> String {
    let mut out = String::new();
    for r in reports {
        out.push_str(&format!(
            "plan/{}  version {}  done {}  applying {}  remaining {}\n",
            r.name,
            r.latest_version.as_deref().unwrap_or("-"),
            r.done,
            r.applying,
            r.remaining
        ));
        for c in &r.conditions {
            let why = [c.reason.as_deref(), c.message.as_deref()]
                .into_iter()
                .flatten()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(": ");
            out.push_str(&format!("  {}={}  {why}\n", c.type_, c.status));
        }
        for n in &r.nodes {
            let mut line = format!(
                "  node {}  {}  since {}  job {}",
                n.name,
                n.phase,
                n.since.as_deref().unwrap_or("-"),
                n.job.as_deref().unwrap_or("-")
            );
            if let Some(m) = n.job_failure.as_ref().or(n.message.as_ref()) {
                line.push_str(&format!("  {m}"));
            }
            out.push_str(&line);
            out.push('\n');
        }
    }
    if reports.is_empty() {
        out.push_str("no plans\n");
    }
    out.trim_end().to_string()
}
