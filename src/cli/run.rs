//! `slipway run`: which node operations the process runs, each wired onto the one runtime. The
//! runtime knows no operation; this is the one place that names them all, so a new kind of
//! operation is added here (its watches, its hold source, its run) and nowhere else.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::sync::{Arc, RwLock};

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use tracing::{info, warn};

use slipway::maintenance::core::LeaseSettings;
use slipway::node::index::NodeIndex;
use slipway::plan::core::config::JobConfig;
use slipway::plan::shell::PlanSettings;
use slipway::reboot_policy::core::kured::KuredLock;
use slipway::runtime::health::Transition;
use slipway::runtime::notify::{Notifier, NotifySettings};
use slipway::runtime::silences::{self, AlertmanagerSettings};
use slipway::runtime::{
    Chores, Error, HoldSources, Operations, Shared, budget, cluster_id, install_crd, ledgers,
    spawn_sync_watch, watch,
};
use slipway::{maintenance, nodeop, plan, reboot_policy};

/// What the controller is told at start.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `--name`: the value of the `upgrade.cattle.io/controller` label on Jobs.
    pub name: String,
    /// `--namespace`: where Plans, Jobs and Secrets are watched.
    pub namespace: String,
    /// `--health-check-account`: whose rights every health check reads with.
    pub check_account: slipway::runtime::checks::CheckAccount,
    /// Plan reconciles that may run at once.
    pub threads: u16,
    pub job: JobConfig,
    pub polling_interval: std::time::Duration,
    /// Install or update the CRDs at start, as SUC does.
    pub install_crd: bool,
    /// Who this process is, for events.
    pub instance: Option<String>,
    /// Reconcile NodeMaintenances (cluster-wide), taking nodes' medik8s Leases as configured.
    pub maintenance: Option<LeaseSettings>,
    /// Reconcile RebootPolicies (cluster-wide): reboot the nodes that ask for it.
    pub reboot_policies: bool,
    /// Where kured keeps its lock, read to take over the reboots kured started (`None`: not read).
    pub kured: Option<KuredLock>,
    /// Read DisruptionBudgets (cluster-wide) and keep their ledgers.
    pub disruption_budgets: bool,
    /// Reconcile kairos-operator's NodeOps and NodeOpUpgrades (every namespace).
    pub nodeops: bool,
    /// Where silences are held while nodes are disrupted; `None`: nowhere.
    pub alertmanager: Option<AlertmanagerSettings>,
    /// Where notifications go (no targets: none are sent).
    pub notify: NotifySettings,
}

/// The format of `slipway run`'s log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `slipway run`'s notification flags (docs/disruptions.md).
#[derive(clap::Args, Debug, Clone)]
pub struct NotifyArgs {
    /// Notify the target NAME at URL when a node starts, is drained, reboots, is back or fails,
    /// and when a rollout stops or completes; repeat for several targets (docs/disruptions.md).
    #[arg(long = "notify", value_name = "NAME=URL")]
    notify: Vec<String>,
    /// The body a target is posted: slack, teams or json (the default).
    #[arg(long, value_name = "NAME=FORMAT")]
    notify_format: Vec<String>,
    /// A header sent to a target; repeat for several.
    #[arg(long, value_name = "NAME=HEADER: VALUE")]
    notify_header: Vec<String>,
    /// A header sent to a target whose value is an environment variable's (from a Secret).
    #[arg(long, value_name = "NAME=HEADER=VARIABLE")]
    notify_header_from_env: Vec<String>,
    /// The notification kinds a target is told, comma-separated (default: all of them).
    #[arg(long, value_name = "NAME=KIND,...")]
    notify_kinds: Vec<String>,
    /// A target's message for one kind, with placeholders: {node}, {object}, {objectKind},
    /// {namespace}, {name}, {kind}, {reason}, {message}, {time}.
    #[arg(long, value_name = "NAME/KIND=TEXT")]
    notify_template: Vec<String>,
    /// Notifications kept per target while it does not take them; beyond, the oldest are dropped.
    #[arg(long, env = "SLIPWAY_NOTIFY_QUEUE", default_value_t = 1000)]
    notify_queue: usize,
    /// A target whose oldest waiting notification has waited this long is reported failing.
    #[arg(long, env = "SLIPWAY_NOTIFY_FAILING_AFTER", default_value = "5m")]
    notify_failing_after: String,
}

impl NotifyArgs {
    /// The targets and delivery settings, checked: an error names the flag. `env` reads the
    /// variables of `--notify-header-from-env`.
    pub fn settings(&self, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<NotifySettings> {
        use anyhow::Context;
        use slipway::common::duration::GoDuration;
        use slipway::node::notify::{TargetFlags, targets};
        let flags = TargetFlags {
            targets: self.notify.clone(),
            formats: self.notify_format.clone(),
            headers: self.notify_header.clone(),
            header_envs: self.notify_header_from_env.clone(),
            kinds: self.notify_kinds.clone(),
            templates: self.notify_template.clone(),
        };
        let targets = targets(&flags, env)?;
        let after = (self.notify_failing_after.parse().ok())
            .filter(|d: &GoDuration| !d.is_negative())
            .with_context(|| {
                format!(
                    "bad --notify-failing-after {:?} (want a duration such as 5m)",
                    self.notify_failing_after
                )
            })?;
        if self.notify_queue == 0 {
            anyhow::bail!("bad --notify-queue 0: a target's queue holds one notification at least");
        }
        Ok(NotifySettings {
            targets,
            queue: self.notify_queue,
            failing_after: after.to_std().unwrap_or_default(),
            ..Default::default()
        })
    }
}

/// `--alertmanager-url` and `--alertmanager-secret` (docs/disruptions.md).
#[derive(Debug, Clone, clap::Args)]
pub struct AlertmanagerArgs {
    /// Alertmanager's URL (e.g. http://alertmanager.monitoring:9093): silences are held there
    /// while a node is disrupted, for each object whose spec.disruption.silence asks. Empty: none
    /// is made (each object that asks is told so in an event).
    #[arg(long, env = "SLIPWAY_ALERTMANAGER_URL", default_value = "")]
    pub alertmanager_url: String,
    /// A Secret of --namespace with Alertmanager's credentials: `token` (a bearer token), or
    /// `username` and `password` (basic auth), and optionally `ca.crt` (a PEM bundle to trust).
    #[arg(long, env = "SLIPWAY_ALERTMANAGER_SECRET", default_value = "")]
    pub alertmanager_secret: String,
}

impl AlertmanagerArgs {
    pub fn settings(&self) -> Result<Option<AlertmanagerSettings>, silences::AlertmanagerError> {
        AlertmanagerSettings::from_flags(&self.alertmanager_url, &self.alertmanager_secret)
    }
}

/// `--kured-daemonset` and `--kured-lock-annotation` (docs/migrating.md, "From kured").
#[derive(Debug, Clone, clap::Args)]
pub struct KuredArgs {
    /// kured's DaemonSet, `<namespace>/<name>` (kured's --ds-namespace and --ds-name): while it
    /// exists, RebootPolicies take over the nodes its lock names, and finish their reboots if
    /// kured is uninstalled first. Empty: kured's lock is not read.
    #[arg(
        long,
        env = "SLIPWAY_KURED_DAEMONSET",
        default_value = "kube-system/kured"
    )]
    pub kured_daemonset: String,
    /// The annotation of kured's lock on its DaemonSet (kured's --lock-annotation).
    #[arg(
        long,
        env = "SLIPWAY_KURED_LOCK_ANNOTATION",
        default_value = "weave.works/kured-node-lock"
    )]
    pub kured_lock_annotation: String,
}

impl KuredArgs {
    pub fn lock(&self) -> Result<Option<KuredLock>, Error> {
        KuredLock::of(&self.kured_daemonset, &self.kured_lock_annotation)
            .map_err(|e| Error::Startup(format!("--kured-daemonset: {e}")))
    }
}

/// Node annotations the index keeps: the few small ones that decisions read.
pub fn kept_annotations() -> Vec<&'static str> {
    let mut kept = vec![slipway::node::budget::HOLD_ANNOTATION];
    kept.extend(slipway::node::cordon::RECORDS);
    kept.extend(reboot_policy::core::SIGNAL_ANNOTATIONS);
    kept
}

/// Runs the operations until `ops.shutdown` is cancelled, then lets running reconciles finish.
///
/// With leader election, call this only while holding the Lease: it installs the CRDs and writes.
pub async fn run(client: Client, settings: Settings, ops: Operations) -> Result<(), Error> {
    ops.health.apply(Transition::Lead);
    let cluster_id = cluster_id(&client).await?;
    if settings.install_crd {
        install_crds(&client, &settings).await?;
    }
    let nodes = Arc::new(RwLock::new(NodeIndex::new()));
    let triggers = Arc::new(watch::NodeTriggers::default());
    let Watches {
        plans,
        maintenances,
        policies,
        nodeops,
        budgets,
    } = watches(&client, &settings, &triggers);
    let node_watch = watch::nodes(&client, nodes.clone(), kept_annotations(), triggers.clone());
    let mut ready = plans.ready();
    ready.push(("node", watch::index_ready(nodes.clone())));
    ready.extend(
        budgets
            .as_ref()
            .map(|b| ("disruption budget", b.budgets.ready())),
    );
    spawn_sync_watch(ready, ops.health.clone(), ops.shutdown.clone());
    let sources = hold_sources(&plans, &policies, &nodeops, &maintenances);
    let (chores, notifier) = notifier(chores(&client, &settings, &ops), &settings, &ops)?;
    let shared = Arc::new(
        Shared::new(
            chores.clone(),
            settings.name.clone(),
            settings.namespace.clone(),
            nodes,
            sources,
            triggers,
            budgets.as_ref().map(|b| b.budgets.clone()),
        )
        .with_check_account(settings.check_account.clone()),
    );
    info!(namespace = %settings.namespace, name = %settings.name, "starting controller");
    let shutdown = ops.shutdown.clone();
    let plan = plan::shell::run(
        shared.clone(),
        PlanSettings {
            job: settings.job.clone(),
            polling_interval: settings.polling_interval,
            threads: settings.threads,
            cluster_id: cluster_id.clone(),
        },
        plans,
        shutdown.clone(),
    );
    let others = operations(
        &shared,
        &settings,
        maintenances,
        policies,
        nodeops,
        &shutdown,
    );
    let nodes = async {
        tokio::select! {
            _ = node_watch => warn!("the node watch stopped"),
            _ = shutdown.cancelled() => {}
        }
    };
    let around = chores_around(
        &shared,
        &settings,
        &cluster_id,
        budgets,
        notifier,
        &shutdown,
    );
    let (plan, ..) = futures::join!(plan, others, nodes, around);
    info!("controller stopped");
    plan
}

/// What the operations of the process hold, source by source, in the order in which the budget
/// lets what survived a restart keep a node: a Plan's, a policy's or a NodeOp's step under way
/// finishes before a maintenance starts.
fn hold_sources(
    plans: &plan::shell::PlanWatches,
    policies: &Option<reboot_policy::shell::PolicyWatches>,
    nodeops: &Option<(
        nodeop::shell::NodeOpWatches,
        nodeop::shell::upgrade::UpgradeWatches,
    )>,
    maintenances: &Option<maintenance::shell::MaintenanceWatches>,
) -> HoldSources {
    let mut sources: HoldSources = vec![plans.holds()];
    sources.extend(policies.as_ref().map(|p| p.holds()));
    sources.extend(nodeops.as_ref().map(|(n, _)| n.holds()));
    sources.extend(maintenances.as_ref().map(|m| m.holds()));
    sources
}

/// The chores around the operations, until `shutdown`: the budgets' ledgers, the silences, the
/// notifications and the taint of the nodes taken next.
async fn chores_around(
    shared: &Arc<Shared>,
    settings: &Settings,
    cluster_id: &str,
    budgets: Option<budget::BudgetWatch>,
    notifier: Option<slipway::runtime::notify::Notifier>,
    shutdown: &tokio_util::sync::CancellationToken,
) {
    let ledgers = async {
        if let Some(b) = budgets {
            ledgers::keep_ledgers(shared.clone(), b.budgets, b.changes, shutdown.clone()).await;
        }
    };
    let silences = keep_silences(shared, settings, cluster_id, shutdown);
    let chores = shared.chores().clone();
    let notifications = notifier.map(|n| n.run(chores, shutdown.clone()));
    let notifications = futures::future::OptionFuture::from(notifications);
    let next_up = slipway::runtime::next_up::keep(shared.clone(), shutdown.clone());
    futures::join!(ledgers, silences, notifications, next_up);
}

/// The Alertmanager silences of every operation, until `shutdown`. Every controller of this name
/// in this cluster signs its silences alike: a restart or a new leader finds them; another
/// cluster's slipway on the same Alertmanager leaves them alone.
async fn keep_silences(
    shared: &Arc<Shared>,
    settings: &Settings,
    cluster_id: &str,
    shutdown: &tokio_util::sync::CancellationToken,
) {
    let created_by = format!("slipway/{}@{cluster_id}", settings.name);
    let am = settings.alertmanager.clone();
    silences::keep(shared.clone(), am, created_by, shutdown.clone()).await;
}

/// The operations besides Plans that the process runs, until `shutdown`.
async fn operations(
    shared: &Arc<Shared>,
    settings: &Settings,
    maintenances: Option<maintenance::shell::MaintenanceWatches>,
    policies: Option<reboot_policy::shell::PolicyWatches>,
    nodeops: Option<(
        nodeop::shell::NodeOpWatches,
        nodeop::shell::upgrade::UpgradeWatches,
    )>,
    shutdown: &tokio_util::sync::CancellationToken,
) {
    let image = &settings.job.reboot_image;
    let nm = async {
        if let (Some(watches), Some(lease)) = (maintenances, settings.maintenance.clone()) {
            maintenance::shell::run(shared.clone(), lease, watches, shutdown.clone()).await;
        }
    };
    let rp = async {
        if let Some(watches) = policies {
            let image = image.clone();
            let kured = settings.kured.clone();
            reboot_policy::shell::run(shared.clone(), image, kured, watches, shutdown.clone())
                .await;
        }
    };
    let no = async {
        if let Some((watches, upgrades)) = nodeops {
            let image = image.clone();
            let upgrades = nodeop::shell::upgrade::run(shared.clone(), upgrades, shutdown.clone());
            let nodeops = nodeop::shell::run(shared.clone(), image, watches, shutdown.clone());
            futures::join!(nodeops, upgrades);
        }
    };
    futures::join!(nm, rp, no);
}

/// The watches of the kinds the process runs (nothing runs until they are polled).
struct Watches {
    plans: plan::shell::PlanWatches,
    maintenances: Option<maintenance::shell::MaintenanceWatches>,
    policies: Option<reboot_policy::shell::PolicyWatches>,
    /// NodeOps and NodeOpUpgrades.
    nodeops: Option<(
        nodeop::shell::NodeOpWatches,
        nodeop::shell::upgrade::UpgradeWatches,
    )>,
    budgets: Option<budget::BudgetWatch>,
}

fn watches(client: &Client, settings: &Settings, triggers: &watch::NodeTriggers) -> Watches {
    let (ns, name) = (&settings.namespace, &settings.name);
    Watches {
        plans: plan::shell::watch(client, ns, name, triggers),
        maintenances: (settings.maintenance.is_some())
            .then(|| maintenance::shell::watch(client, triggers)),
        policies: (settings.reboot_policies)
            .then(|| reboot_policy::shell::watch(client, ns, name, triggers)),
        nodeops: settings.nodeops.then(|| {
            (
                nodeop::shell::watch(client, triggers),
                nodeop::shell::upgrade::watch(client),
            )
        }),
        budgets: settings.disruption_budgets.then(|| budget::watch(client)),
    }
}

/// The chores telling the notifier its events, and the notifier (none without targets).
fn notifier(
    chores: Chores,
    settings: &Settings,
    ops: &Operations,
) -> Result<(Chores, Option<Notifier>), Error> {
    if settings.notify.targets.is_empty() {
        return Ok((chores, None));
    }
    let notifier = Notifier::new(settings.notify.clone(), ops.metrics.clone())
        .map_err(|e| Error::Startup(e.to_string()))?;
    Ok((chores.with_notifier(notifier.clone()), Some(notifier)))
}

/// The chores every operation does through: the clients, the leader guard, the event recorder.
fn chores(client: &Client, settings: &Settings, ops: &Operations) -> Chores {
    Chores::new(
        client.clone(),
        ops.eviction.clone().unwrap_or_else(|| client.clone()),
        ops.guard.clone(),
        Recorder::new(
            client.clone(),
            Reporter {
                controller: settings.name.clone(),
                instance: settings.instance.clone(),
            },
        ),
        ops.metrics.clone(),
    )
}

/// The Plan CRD, and the CRDs of the operations this process runs.
async fn install_crds(client: &Client, settings: &Settings) -> Result<(), Error> {
    install_crd(client, plan::api::crd::plan_crd()).await?;
    if settings.disruption_budgets {
        let crd = slipway::node::budget::api::disruption_budget_crd();
        install_crd(client, crd).await?;
    }
    if settings.maintenance.is_some() {
        install_crd(client, maintenance::api::maintenance_crd()).await?;
    }
    if settings.reboot_policies {
        install_crd(client, reboot_policy::api::reboot_policy_crd()).await?;
    }
    if settings.nodeops {
        install_crd(client, nodeop::api::nodeop_crd()).await?;
        install_crd(client, nodeop::api::nodeopupgrade_crd()).await?;
    }
    Ok(())
}
