//! `slipway explain`: for a Plan, a RebootPolicy, a NodeMaintenance, a NodeOp, a DisruptionBudget
//! or a node,
//! which node goes next, why each waiting node waits, and when it can next move. Read-only: the
//! cluster is read once, and each object is decided on by the controller's own code
//! ([`slipway::runtime::predict`]), as a controller that starts now would decide: so the answer
//! cannot disagree with what the controller does next.

mod print;
mod world;

use std::collections::BTreeSet;

use anyhow::{Context, bail};
use jiff::Timestamp;
use kube::ResourceExt;
use serde::Serialize;
use slipway::common::decision::{Decision, Waiting};
use slipway::node::holders::Holder;

use world::World;

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    slipway explain k3s-agent\n  \
    slipway explain rebootpolicy/weekly -o json\n  \
    slipway explain node/worker-3\n  \
    slipway explain disruptionbudget/workers")]
pub struct ExplainArgs {
    /// What to explain: `plan/NAME` (or a bare NAME), `rebootpolicy/NAME` (`rbp/`),
    /// `nodemaintenance/NAME` (`nm/`), `nodeop/[NAMESPACE/]NAME`, `disruptionbudget/NAME`
    /// (`dbudget/`) or `node/NAME`.
    #[arg(value_name = "KIND/NAME")]
    pub target: String,
    /// The namespace of the Plans (and of the controller's Jobs and reboot pods).
    #[arg(long, short, default_value = "system-upgrade")]
    pub namespace: String,
    /// The controller's name: the `upgrade.cattle.io/controller` label of its Jobs and pods.
    #[arg(long, default_value = "system-upgrade-controller")]
    pub name: String,
    /// Kubeconfig; empty means the usual lookup (KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, default_value = "")]
    pub kubeconfig: String,
    /// The kubeconfig context to use; default: its current context.
    #[arg(long)]
    pub context: Option<String>,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = super::Output::Text)]
    pub output: super::Output,
}

/// What the command explains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Plan(String),
    RebootPolicy(String),
    NodeMaintenance(String),
    /// A NodeOp by name, and its namespace when given (else the one NodeOp of that name).
    NodeOp(Option<String>, String),
    DisruptionBudget(String),
    Node(String),
}

impl Target {
    pub fn parse(text: &str) -> anyhow::Result<Target> {
        let Some((kind, name)) = text.split_once('/') else {
            return Ok(Target::Plan(text.to_string()));
        };
        if name.is_empty() {
            bail!("{text:?}: give a name after the kind");
        }
        let name = name.to_string();
        Ok(match kind.to_ascii_lowercase().as_str() {
            "plan" | "plans" => Target::Plan(name),
            "rebootpolicy" | "rebootpolicies" | "rbp" => Target::RebootPolicy(name),
            "nodemaintenance" | "nodemaintenances" | "nm" => Target::NodeMaintenance(name),
            "nodeop" | "nodeops" => match name.split_once('/') {
                Some((ns, n)) if !ns.is_empty() && !n.is_empty() => {
                    Target::NodeOp(Some(ns.to_string()), n.to_string())
                }
                Some(_) => bail!("{text:?}: nodeop/NAME or nodeop/NAMESPACE/NAME"),
                None => Target::NodeOp(None, name),
            },
            "disruptionbudget" | "disruptionbudgets" | "dbudget" => Target::DisruptionBudget(name),
            "node" | "nodes" | "no" => Target::Node(name),
            other => bail!(
                "unknown kind {other:?}: plan, rebootpolicy, nodemaintenance, nodeop, disruptionbudget or node"
            ),
        })
    }
}

/// What one operation object does next.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// `plan/<namespace>/<name>`, `rebootpolicy/<name>`, `nodemaintenance/<name>`,
    /// `nodeop/<namespace>/<name>`.
    pub object: String,
    /// The nodes it holds now, by its own record.
    pub holding: Vec<String>,
    /// The nodes it starts next (this decision takes them).
    pub next: Vec<String>,
    /// The nodes that wait, grouped by why.
    pub waiting: Vec<Group>,
    /// When the first wait ends by the clock alone (a window opens, a soak or a schedule ends).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_move: Option<String>,
    /// When it looks again at the latest (it also does whenever something it reads changes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recheck: Option<String>,
}

/// Nodes that wait for one reason.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Group {
    pub reason: &'static str,
    pub message: String,
    pub nodes: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

impl Explanation {
    /// Reads a decision of `holder`, which holds `holding` by its record.
    pub fn of<S, E, R>(
        holder: &Holder,
        holding: BTreeSet<String>,
        d: &Decision<S, E, R>,
        now: Timestamp,
    ) -> Explanation {
        let next = d.holds.difference(&holding).cloned().collect();
        let rfc3339 = slipway::common::rfc3339;
        Explanation {
            object: holder.key(),
            holding: holding.into_iter().collect(),
            next,
            waiting: d.waiting.iter().map(group).collect(),
            next_move: d.waiting.iter().filter_map(|w| w.until).min().map(rfc3339),
            recheck: d.requeue.and_then(|r| now.checked_add(r).ok()).map(rfc3339),
        }
    }

    /// Whether it waits on the DisruptionBudget `name` for a node.
    pub fn waits_on_budget(&self, name: &str) -> bool {
        let prefix = format!("disruptionbudget {name} ");
        self.waiting.iter().any(|g| g.message.starts_with(&prefix))
    }
}

fn group(w: &Waiting) -> Group {
    Group {
        reason: w.reason,
        message: w.message.clone(),
        nodes: w.nodes.clone(),
        until: w.until.map(slipway::common::rfc3339),
    }
}

pub fn run(args: &ExplainArgs) -> anyhow::Result<()> {
    let target = Target::parse(&args.target)?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    let text = runtime.block_on(async {
        let client = super::client(&args.kubeconfig, args.context.as_deref()).await?;
        let world = World::load(&client, &args.namespace, &args.name).await?;
        explain(&world, &target, args.output).await
    })?;
    println!("{text}");
    Ok(())
}

async fn explain(world: &World, target: &Target, output: super::Output) -> anyhow::Result<String> {
    let now = slipway::runtime::clock::now();
    match target {
        Target::Plan(name)
        | Target::RebootPolicy(name)
        | Target::NodeMaintenance(name)
        | Target::NodeOp(_, name) => {
            let e = world.explain(target, now).await?;
            let name = name.as_str();
            let e = e.with_context(|| format!("no {} named {name}", kind_word(target)))?;
            print::object(&e, output)
        }
        Target::DisruptionBudget(name) => {
            let Some((budget, status)) = world.ledger(name, now) else {
                bail!("no disruptionbudget named {name}");
            };
            let mut waiting = Vec::new();
            for e in world.explain_all(now).await? {
                if e.waits_on_budget(&budget.name_any()) {
                    waiting.push(e);
                }
            }
            print::budget(&budget, &status, &waiting, output)
        }
        Target::Node(name) => {
            let node = world
                .node(name)
                .with_context(|| format!("no node named {name}"))?;
            let view = world.node_view(&node, now).await?;
            print::node(&view, output)
        }
    }
}

fn kind_word(target: &Target) -> &'static str {
    match target {
        Target::Plan(_) => "plan",
        Target::RebootPolicy(_) => "rebootpolicy",
        Target::NodeMaintenance(_) => "nodemaintenance",
        Target::NodeOp(..) => "nodeop",
        Target::DisruptionBudget(_) => "disruptionbudget",
        Target::Node(_) => "node",
    }
}

/// Every record of a node, as `explain node/NAME` shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    pub node: String,
    pub ready: bool,
    pub cordoned: bool,
    /// The `slipway.dev/hold` annotation's holder, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by_annotation: Option<String>,
    /// Who holds it, by every operation's own record.
    pub holders: Vec<String>,
    /// The DisruptionBudgets that select it.
    pub budgets: Vec<BudgetRoom>,
    /// What each operation that reads the node does with it next.
    pub operations: Vec<NodeOperation>,
}

/// A budget's room as one node sees it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetRoom {
    pub name: String,
    pub unavailable: usize,
    pub max_unavailable: usize,
    pub halted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
}

/// One operation and the node.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeOperation {
    pub object: String,
    /// `holds`, `starts`, `waits` or `nothing` (the node asks nothing of it now).
    pub does: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
}

impl NodeOperation {
    /// What `e` does with `node`.
    pub fn of(e: &Explanation, node: &str) -> NodeOperation {
        let mut n = NodeOperation {
            object: e.object.clone(),
            does: "nothing",
            reason: None,
            message: None,
            until: None,
        };
        if e.holding.iter().any(|h| h == node) {
            n.does = "holds";
        } else if e.next.iter().any(|h| h == node) {
            n.does = "starts";
        } else if let Some(g) = e.waiting.iter().find(|g| g.nodes.iter().any(|h| h == node)) {
            n.does = "waits";
            n.reason = Some(g.reason);
            n.message = Some(g.message.clone());
            n.until = g.until.clone();
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_read_as_kubectl_names_them() {
        assert_eq!(Target::parse("k3s").ok(), Some(Target::Plan("k3s".into())));
        assert_eq!(
            Target::parse("rbp/weekly").ok(),
            Some(Target::RebootPolicy("weekly".into()))
        );
        assert_eq!(
            Target::parse("dbudget/workers").ok(),
            Some(Target::DisruptionBudget("workers".into()))
        );
        assert_eq!(
            Target::parse("node/n1").ok(),
            Some(Target::Node("n1".into()))
        );
        assert_eq!(
            Target::parse("nodeop/upgrade").ok(),
            Some(Target::NodeOp(None, "upgrade".into()))
        );
        assert_eq!(
            Target::parse("nodeop/default/upgrade").ok(),
            Some(Target::NodeOp(Some("default".into()), "upgrade".into()))
        );
        assert!(Target::parse("nodeop/default/").is_err());
        assert!(Target::parse("pod/x").is_err());
        assert!(Target::parse("plan/").is_err());
    }
}
