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
use slipway::plan::shell::PlanSettings;

use super::kinds::KindArgs;
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
    /// An object of a kind of operation (by the kind's first word), by name, and by namespace
    /// when the kind's objects are in every namespace and one is given (else the one object of
    /// that name).
    Object {
        kind: &'static str,
        namespace: Option<String>,
        name: String,
    },
    DisruptionBudget(String),
    Node(String),
}

impl Target {
    pub fn parse(text: &str) -> anyhow::Result<Target> {
        let Some((kind, name)) = text.split_once('/') else {
            return Ok(Target::object(PLAN, None, text));
        };
        if name.is_empty() {
            bail!("{text:?}: give a name after the kind");
        }
        let kind = kind.to_ascii_lowercase();
        let found = (words().into_iter()).find(|(word, ..)| *word == kind);
        Ok(match (kind.as_str(), found) {
            (_, Some((_, kind, true))) => match name.split_once('/') {
                Some((ns, n)) if !ns.is_empty() && !n.is_empty() => {
                    Target::object(kind, Some(ns), n)
                }
                Some(_) => bail!("{text:?}: {kind}/NAME or {kind}/NAMESPACE/NAME"),
                None => Target::object(kind, None, name),
            },
            (_, Some((_, kind, false))) => Target::object(kind, None, name),
            ("disruptionbudget" | "disruptionbudgets" | "dbudget", None) => {
                Target::DisruptionBudget(name.to_string())
            }
            ("node" | "nodes" | "no", None) => Target::Node(name.to_string()),
            (other, None) => {
                let mut kinds: Vec<&str> = (words().into_iter()).map(|(_, kind, _)| kind).collect();
                kinds.dedup();
                bail!(
                    "unknown kind {other:?}: {}, disruptionbudget or node",
                    kinds.join(", ")
                )
            }
        })
    }

    fn object(kind: &'static str, namespace: Option<&str>, name: &str) -> Target {
        Target::Object {
            kind,
            namespace: namespace.map(str::to_string),
            name: name.to_string(),
        }
    }
}

/// The word of the kind a bare name is of.
const PLAN: &str = "plan";

/// Every word of every kind: `(word, the kind's first word, whether it takes a namespace)`.
fn words() -> Vec<(&'static str, &'static str, bool)> {
    // Every kind's flags at their defaults can be read: none is left out.
    let kinds = (KindArgs::every().kinds(PlanSettings::default())).unwrap_or_default();
    (kinds.iter())
        .flat_map(|k| (k.words().iter()).map(|w| (*w, k.words()[0], k.across_namespaces())))
        .collect()
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
        Target::Object { kind, name, .. } => {
            let e = world.explain(target, now).await?;
            let e = e.with_context(|| format!("no {kind} named {name}"))?;
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
        let object =
            |kind, namespace: Option<&str>, name| Some(Target::object(kind, namespace, name));
        assert_eq!(Target::parse("k3s").ok(), object("plan", None, "k3s"));
        assert_eq!(
            Target::parse("rbp/weekly").ok(),
            object("rebootpolicy", None, "weekly")
        );
        assert_eq!(
            Target::parse("NM/disk").ok(),
            object("nodemaintenance", None, "disk")
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
            object("nodeop", None, "upgrade")
        );
        assert_eq!(
            Target::parse("nodeop/default/upgrade").ok(),
            object("nodeop", Some("default"), "upgrade")
        );
        assert!(Target::parse("nodeop/default/").is_err());
        let unknown = Target::parse("pod/x").expect_err("not a kind");
        assert_eq!(
            unknown.to_string(),
            "unknown kind \"pod\": plan, rebootpolicy, nodeop, nodemaintenance, disruptionbudget or node"
        );
        assert!(Target::parse("plan/").is_err());
    }
}
