//! `slipway status`: how far each Plan's rollout, each NodeMaintenance, each RebootPolicy and each
//! NodeOp is, read-only.

mod report;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use slipway::maintenance::api::NodeMaintenance;
use slipway::node::NodeInfo;
use slipway::nodeop::api::NodeOp;
use slipway::plan::api::Plan;
use slipway::reboot_policy::api::RebootPolicy;

use report::Report;

#[derive(clap::Args)]
#[command(after_help = "Examples:\n  \
    slipway status\n  \
    slipway status k3s-server -n system-upgrade --watch\n  \
    slipway status nodemaintenances rebootpolicy/weekly\n  \
    kubectl slipway status plans --context prod -o json")]
pub struct StatusArgs {
    /// What to show: `plans`, `nodemaintenances` (`nm`), `rebootpolicies` (`rbp`), `nodeops` or
    /// `all`, `KIND/NAME` for one, or a bare NAME for a Plan. Default: every kind (those whose CRD
    /// the cluster lacks, or this user may not list, are left out with a note).
    #[arg(value_name = "RESOURCE")]
    pub resources: Vec<String>,
    /// The namespace of the Plans (NodeMaintenances and RebootPolicies are cluster-wide; NodeOps
    /// are shown from every namespace).
    #[arg(long, short, default_value = "system-upgrade")]
    pub namespace: String,
    /// Kubeconfig; empty means the usual lookup (KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, default_value = "")]
    pub kubeconfig: String,
    /// The kubeconfig context to use; default: its current context.
    #[arg(long)]
    pub context: Option<String>,
    /// Print again whenever the status changes (polls every 2 seconds) until interrupted.
    #[arg(long, short)]
    pub watch: bool,
    /// Output format: json and yaml are a list of objects, each with its `kind`.
    #[arg(long, short, value_enum, default_value_t = super::Output::Text)]
    pub output: super::Output,
}

/// The kinds `status` knows, in the order it prints them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Plan,
    NodeMaintenance,
    RebootPolicy,
    NodeOp,
}

impl Kind {
    const ALL: [Kind; 4] = [
        Kind::Plan,
        Kind::NodeMaintenance,
        Kind::RebootPolicy,
        Kind::NodeOp,
    ];

    fn parse(word: &str) -> Option<Kind> {
        match word.to_ascii_lowercase().as_str() {
            "plan" | "plans" | "plans.upgrade.cattle.io" => Some(Kind::Plan),
            "nodemaintenance"
            | "nodemaintenances"
            | "nm"
            | "nodemaintenances.nodemaintenance.medik8s.io" => Some(Kind::NodeMaintenance),
            "rebootpolicy" | "rebootpolicies" | "rbp" | "rebootpolicies.slipway.dev" => {
                Some(Kind::RebootPolicy)
            }
            "nodeop" | "nodeops" | "nodeops.operator.kairos.io" => Some(Kind::NodeOp),
            _ => None,
        }
    }

    /// The prefix of an object's name in the text (`plan/x`).
    fn singular(self) -> &'static str {
        match self {
            Kind::Plan => "plan",
            Kind::NodeMaintenance => "nodemaintenance",
            Kind::RebootPolicy => "rebootpolicy",
            Kind::NodeOp => "nodeop",
        }
    }

    fn plural(self) -> &'static str {
        match self {
            Kind::Plan => "plans",
            Kind::NodeMaintenance => "nodemaintenances",
            Kind::RebootPolicy => "rebootpolicies",
            Kind::NodeOp => "nodeops",
        }
    }
}

/// What to show of one kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// `None`: every object of the kind.
    pub names: Option<BTreeSet<String>>,
    /// Named on the command line: a kind the cluster cannot list is an error, not a note.
    pub explicit: bool,
}

/// The kinds and names asked for. No word asks for every kind, each left out (with a note) when
/// the cluster has no CRD for it or the user may not list it; Plans are always explicit there,
/// as they were before the other kinds existed.
pub fn query(words: &[String]) -> anyhow::Result<BTreeMap<Kind, Wanted>> {
    let mut wanted: BTreeMap<Kind, Wanted> = BTreeMap::new();
    let every = |kind: Kind, explicit: bool| Wanted {
        names: None,
        explicit: explicit || kind == Kind::Plan,
    };
    if words.is_empty() {
        return Ok(Kind::ALL.map(|k| (k, every(k, false))).into());
    }
    for word in words {
        let (kind, name) = match word.split_once('/') {
            Some((kind, name)) => {
                let kind = Kind::parse(kind).with_context(|| {
                    format!("{word}: unknown kind {kind:?} (plan, nodemaintenance, rebootpolicy, nodeop)")
                })?;
                if name.is_empty() {
                    bail!("{word}: no name after the kind");
                }
                (kind, Some(name))
            }
            None if word.eq_ignore_ascii_case("all") => {
                for k in Kind::ALL {
                    wanted
                        .entry(k)
                        .and_modify(|w| w.names = None)
                        .or_insert(every(k, false));
                }
                continue;
            }
            None => match Kind::parse(word) {
                Some(kind) => (kind, None),
                None => (Kind::Plan, Some(word.as_str())),
            },
        };
        let entry = wanted.entry(kind).or_insert(Wanted {
            names: Some(BTreeSet::new()),
            explicit: true,
        });
        entry.explicit = true;
        match (name, entry.names.as_mut()) {
            (None, _) => entry.names = None,
            (Some(n), Some(names)) => {
                names.insert(n.to_string());
            }
            // The whole kind is already asked for.
            (Some(_), None) => {}
        }
    }
    Ok(wanted)
}

pub fn run(args: &StatusArgs) -> anyhow::Result<()> {
    let wanted = query(&args.resources)?;
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let client = super::client(&args.kubeconfig, args.context.as_deref()).await?;
        let nothing = format!(
            "no {}",
            wanted
                .keys()
                .map(|k| k.plural())
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut last = String::new();
        let mut noted = BTreeSet::new();
        loop {
            let (reports, notes) = gather(&client, args, &wanted).await?;
            for n in notes {
                if noted.insert(n.clone()) {
                    eprintln!("note: {n}");
                }
            }
            let text = match super::structured(&reports, args.output)? {
                Some(doc) => doc,
                None => report::text(&reports, &nothing),
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

/// The reports of every kind wanted, and notes on the kinds left out.
async fn gather(
    client: &kube::Client,
    args: &StatusArgs,
    wanted: &BTreeMap<Kind, Wanted>,
) -> anyhow::Result<(Vec<Report>, Vec<String>)> {
    let mut reports = Vec::new();
    let mut notes = Vec::new();
    for (&kind, want) in wanted {
        let found: Vec<(String, Report)> = match list_kind(client, args, kind).await {
            Ok(found) => found?,
            Err(e) => {
                let why = unlistable(kind, &e, &args.namespace);
                if want.explicit {
                    bail!("{why}");
                }
                notes.push(format!("{why}; left out"));
                continue;
            }
        };
        if let Some(names) = &want.names {
            let missing: Vec<&String> = names
                .iter()
                .filter(|n| !found.iter().any(|(f, _)| f == *n))
                .collect();
            if let Some(n) = missing.first() {
                let place = match kind {
                    Kind::Plan => format!(" in namespace {}", args.namespace),
                    _ => String::new(),
                };
                bail!("{}/{n} not found{place}", kind.singular());
            }
        }
        reports.extend(
            found
                .into_iter()
                .filter(|(n, _)| want.names.as_ref().is_none_or(|names| names.contains(n)))
                .map(|(_, r)| r),
        );
    }
    Ok((reports, notes))
}

/// Every object of `kind` the caller may list, each as its report by name. The outer error is the
/// list's (the caller says why it cannot list); the inner one, reading a listed Plan's Jobs.
async fn list_kind(
    client: &kube::Client,
    args: &StatusArgs,
    kind: Kind,
) -> Result<anyhow::Result<Vec<(String, Report)>>, kube::Error> {
    Ok(match kind {
        Kind::Plan => {
            let plans = Api::<Plan>::namespaced(client.clone(), &args.namespace)
                .list(&ListParams::default())
                .await?;
            plan_reports(client, &args.namespace, &plans.items).await
        }
        Kind::NodeMaintenance => Ok(list::<NodeMaintenance>(client)
            .await?
            .iter()
            .map(|m| {
                let r = report::maintenance_report(m);
                (r.name.clone(), Report::NodeMaintenance(r))
            })
            .collect()),
        Kind::RebootPolicy => Ok(list::<RebootPolicy>(client)
            .await?
            .iter()
            .map(|p| {
                let r = report::reboot_policy_report(p);
                (r.name.clone(), Report::RebootPolicy(r))
            })
            .collect()),
        Kind::NodeOp => Ok(Api::<NodeOp>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(|op| {
                let r = report::nodeop_report(op);
                (r.name.clone(), Report::NodeOp(r))
            })
            .collect()),
    })
}

/// Why a kind could not be listed, in a user's words.
fn unlistable(kind: Kind, e: &kube::Error, namespace: &str) -> String {
    let crd = match kind {
        Kind::Plan => "plans.upgrade.cattle.io: is slipway or SUC installed?",
        Kind::NodeMaintenance => {
            "nodemaintenances.nodemaintenance.medik8s.io: slipway runs them with --maintenance"
        }
        Kind::RebootPolicy => {
            "rebootpolicies.slipway.dev: slipway runs them with --reboot-policies"
        }
        Kind::NodeOp => "nodeops.operator.kairos.io: slipway runs them with --nodeops",
    };
    let place = match kind {
        Kind::Plan => format!(" in namespace {namespace}"),
        _ => String::new(),
    };
    match e {
        kube::Error::Api(s) if s.code == 404 => format!("the cluster has no CRD {crd}"),
        _ => format!(
            "cannot list {}{place}: {}",
            kind.plural(),
            super::kube_error(e)
        ),
    }
}

async fn list<K>(client: &kube::Client) -> Result<Vec<K>, kube::Error>
where
    K: kube::Resource<Scope = kube::core::ClusterResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    Ok(Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items)
}

/// The Plans' progress over the nodes and the Jobs of their namespace.
async fn plan_reports(
    client: &kube::Client,
    namespace: &str,
    plans: &[Plan],
) -> anyhow::Result<Vec<(String, Report)>> {
    if plans.is_empty() {
        return Ok(Vec::new());
    }
    let nodes: Vec<NodeInfo> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(|e| anyhow::anyhow!("cannot list nodes: {}", super::kube_error(&e)))?
        .items
        .iter()
        .map(NodeInfo::from_node)
        .collect();
    let jobs: Vec<Job> = Api::<Job>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(|e| {
            anyhow::anyhow!(
                "cannot list jobs in namespace {namespace}: {}",
                super::kube_error(&e)
            )
        })?
        .items;
    Ok(plans
        .iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            (name, Report::Plan(report::plan_report(p, &nodes, &jobs)))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(words: &[&str]) -> anyhow::Result<BTreeMap<Kind, Wanted>> {
        query(&words.iter().map(|w| w.to_string()).collect::<Vec<_>>())
    }

    fn names(w: &Wanted) -> Option<Vec<&str>> {
        w.names
            .as_ref()
            .map(|n| n.iter().map(String::as_str).collect())
    }

    #[test]
    fn no_word_asks_for_every_kind_plans_explicitly() {
        let all = q(&[]).expect("query");
        assert_eq!(all.keys().copied().collect::<Vec<_>>(), Kind::ALL.to_vec());
        assert!(all[&Kind::Plan].explicit);
        assert!(!all[&Kind::NodeMaintenance].explicit);
        assert!(!all[&Kind::RebootPolicy].explicit);
        assert!(all.values().all(|w| w.names.is_none()));
        assert_eq!(q(&["all"]).expect("query"), all);
    }

    #[test]
    fn kinds_names_and_bare_plan_names() {
        let w = q(&["k3s-server", "nm", "rebootpolicy/weekly", "plan/agents"]).expect("query");
        assert_eq!(names(&w[&Kind::Plan]), Some(vec!["agents", "k3s-server"]));
        assert_eq!(names(&w[&Kind::NodeMaintenance]), None);
        assert_eq!(names(&w[&Kind::RebootPolicy]), Some(vec!["weekly"]));
        assert!(w.values().all(|w| w.explicit));
        let w = q(&["nodeop/canary"]).expect("query");
        assert_eq!(names(&w[&Kind::NodeOp]), Some(vec!["canary"]));
        // A kind and a name of it: the whole kind.
        let w = q(&["rbp/weekly", "rebootpolicies"]).expect("query");
        assert_eq!(names(&w[&Kind::RebootPolicy]), None);
        assert_eq!(w.len(), 1);
        // `all` with a name, in either order: every kind, the named one explicit.
        for words in [["all", "nodemaintenance/m"], ["nodemaintenance/m", "all"]] {
            let w = q(&words).expect("query");
            assert_eq!(w.len(), 4);
            assert!(w[&Kind::NodeMaintenance].explicit);
            assert_eq!(names(&w[&Kind::NodeMaintenance]), None);
            assert!(!w[&Kind::RebootPolicy].explicit);
        }
    }

    #[test]
    fn bad_words() {
        let e = q(&["pods/x"]).expect_err("unknown kind");
        assert!(e.to_string().contains("unknown kind \"pods\""), "{e}");
        assert!(q(&["plan/"]).is_err());
    }
}
