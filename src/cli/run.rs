//! `slipway run`: its flags, and the kinds of node operation it runs ([`super::kinds`]), each
//! wired onto the one runtime, which knows none of them.
#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

use std::sync::{Arc, RwLock};

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use tracing::{info, warn};

use slipway::node::index::NodeIndex;
use slipway::plan::core::config::JobConfig;
use slipway::plan::shell::PlanSettings;
use slipway::runtime::health::Transition;
use slipway::runtime::kind::{Kinds, Place, Watching};
use slipway::runtime::notify::{Notifier, NotifySettings};
use slipway::runtime::silences::{self, AlertmanagerSettings};
use slipway::runtime::{
    Chores, Error, HoldSources, Operations, Shared, budget, cluster_id, install_crd, ledgers,
    spawn_sync_watch, watch,
};

use super::kinds::KindArgs;

/// `slipway run`'s flags.
#[derive(clap::Args)]
pub struct RunArgs {
    /// Controller name: the value of the upgrade.cattle.io/controller label on Jobs.
    #[arg(
        long,
        env = "SYSTEM_UPGRADE_CONTROLLER_NAME",
        default_value = "system-upgrade-controller"
    )]
    pub name: String,
    /// The namespace whose Plans, Jobs and Secrets are reconciled.
    #[arg(
        long,
        env = "SYSTEM_UPGRADE_CONTROLLER_NAMESPACE",
        default_value = "system-upgrade"
    )]
    pub namespace: String,
    /// Path to a kubeconfig; empty means in-cluster configuration (or the usual kubeconfig lookup).
    #[arg(
        long,
        env = "SYSTEM_UPGRADE_CONTROLLER_KUBE_CONFIG",
        default_value = ""
    )]
    pub kubeconfig: String,
    /// Overrides the API server URL of the kubeconfig.
    #[arg(long, env = "SYSTEM_UPGRADE_CONTROLLER_MASTER_URL", default_value = "")]
    pub master: String,
    /// The kubeconfig context to use; default: its current context.
    #[arg(long)]
    pub context: Option<String>,
    /// Plans reconciled at once.
    #[arg(long, env = "SYSTEM_UPGRADE_CONTROLLER_THREADS", default_value_t = 2)]
    pub threads: u16,
    /// The node this controller runs on (reported in events).
    #[arg(long, env = "SYSTEM_UPGRADE_CONTROLLER_NODE_NAME")]
    pub node_name: Option<String>,
    /// Debug logging (same as RUST_LOG=debug).
    #[arg(long, env = "SYSTEM_UPGRADE_CONTROLLER_DEBUG", default_value_t = false)]
    pub debug: bool,
    /// The ServiceAccount of --namespace whose rights every health check reads with: the API
    /// server is asked before each read whether it may (docs/plans.md, "Health checks").
    #[arg(
        long,
        env = "SLIPWAY_HEALTH_CHECK_ACCOUNT",
        default_value = slipway::runtime::checks::CheckAccount::DEFAULT_NAME,
        value_parser = clap::builder::NonEmptyStringValueParser::new()
    )]
    pub health_check_account: String,
    /// Install or update the CRD at start, as SUC does.
    #[arg(long, env = "SLIPWAY_INSTALL_CRD", default_value_t = true, action = clap::ArgAction::Set)]
    pub install_crd: bool,
    /// Elect a leader on the Lease <name> in <namespace>; only the leader reconciles. Timing
    /// comes from CATTLE_ELECTION_LEASE_DURATION, _RENEW_DEADLINE and _RETRY_PERIOD (45s, 30s,
    /// 2s); the identity is POD_NAME, else HOSTNAME, else the host name.
    #[arg(
        long,
        env = "SYSTEM_UPGRADE_CONTROLLER_LEADER_ELECT",
        default_value_t = false
    )]
    pub leader_elect: bool,
    /// Address of the HTTP server for /metrics, /healthz and /readyz; empty disables it.
    #[arg(long, env = "SLIPWAY_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: String,
    /// Log format.
    #[arg(long, env = "SLIPWAY_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Read DisruptionBudgets (slipway.dev, cluster-wide): every operation asks the budgets that
    /// select a node before it starts one, and each budget's status keeps the ledger of who holds
    /// its nodes. Off, the process needs neither their CRD nor the right to read them.
    #[arg(long, env = "SLIPWAY_DISRUPTION_BUDGETS", default_value_t = true, action = clap::ArgAction::Set)]
    pub disruption_budgets: bool,
    #[command(flatten)]
    pub kinds: KindArgs,
    #[command(flatten)]
    pub alertmanager: AlertmanagerArgs,
    #[command(flatten)]
    pub notify: NotifyArgs,
}

impl RunArgs {
    /// What the controller is told, the flags checked (an error names the flag): `job` and
    /// `polling_interval` are SUC's environment's.
    pub fn settings(
        &self,
        job: JobConfig,
        polling_interval: std::time::Duration,
    ) -> anyhow::Result<Settings> {
        Ok(Settings {
            name: self.name.clone(),
            check_account: slipway::runtime::checks::CheckAccount {
                namespace: self.namespace.clone(),
                name: self.health_check_account.clone(),
            },
            namespace: self.namespace.clone(),
            threads: self.threads.max(1),
            job,
            polling_interval,
            install_crd: self.install_crd,
            instance: (self.node_name.clone()).or_else(|| std::env::var("HOSTNAME").ok()),
            disruption_budgets: self.disruption_budgets,
            kinds: self.kinds.clone(),
            alertmanager: self.alertmanager.settings()?,
            notify: self.notify.settings(|k| std::env::var(k).ok())?,
        })
    }
}

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
    /// Read DisruptionBudgets (cluster-wide) and keep their ledgers.
    pub disruption_budgets: bool,
    /// The kinds besides Plans that run.
    pub kinds: KindArgs,
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
    /// and when a rollout stops or completes; repeat for several targets. URL is an http(s)
    /// webhook or a shoutrrr URL, as kured's --notify-url takes (slack://, discord://,
    /// telegram://...: docs/disruptions.md).
    #[arg(long = "notify", value_name = "NAME=URL")]
    notify: Vec<String>,
    /// The body an http(s) target is posted: slack, teams or json (the default). A shoutrrr
    /// URL's service decides its body.
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

/// Node annotations the index keeps: the few small ones that decisions read.
pub fn kept_annotations(kinds: &Kinds) -> Vec<&'static str> {
    let mut kept = vec![slipway::node::budget::HOLD_ANNOTATION];
    kept.extend(slipway::node::cordon::RECORDS);
    kept.extend(kinds.iter().flat_map(|k| k.node_annotations()));
    kept
}

/// Runs the operations until `ops.shutdown` is cancelled, then lets running reconciles finish.
///
/// With leader election, call this only while holding the Lease: it installs the CRDs and writes.
pub async fn run(client: Client, settings: Settings, ops: Operations) -> Result<(), Error> {
    ops.health.apply(Transition::Lead);
    let cluster_id = cluster_id(&client).await?;
    let kinds = settings.kinds.kinds(PlanSettings {
        job: settings.job.clone(),
        polling_interval: settings.polling_interval,
        threads: settings.threads,
        cluster_id: cluster_id.clone(),
    })?;
    if settings.install_crd {
        install_crds(&client, &settings, &kinds).await?;
    }
    let nodes = Arc::new(RwLock::new(NodeIndex::keeping(kept_annotations(&kinds))));
    let triggers = Arc::new(watch::NodeTriggers::default());
    let place = Place {
        client: &client,
        namespace: &settings.namespace,
        name: &settings.name,
    };
    let watching: Vec<Box<dyn Watching>> = (kinds.iter())
        .map(|k| k.clone().watch(place, &triggers))
        .collect();
    let budgets = settings.disruption_budgets.then(|| budget::watch(&client));
    let node_watch = watch::nodes(&client, nodes.clone(), triggers.clone());
    let mut ready: Vec<_> = watching.iter().flat_map(|w| w.ready()).collect();
    ready.push(("node", watch::index_ready(nodes.clone())));
    ready.extend(
        budgets
            .as_ref()
            .map(|b| ("disruption budget", b.budgets.ready())),
    );
    spawn_sync_watch(ready, ops.health.clone(), ops.shutdown.clone());
    // In the kinds' order: the order in which the budget lets their records keep a node.
    let sources: HoldSources = watching.iter().map(|w| w.holds()).collect();
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
    let operations = futures::future::join_all(
        (watching.into_iter()).map(|w| w.run(shared.clone(), shutdown.clone())),
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
    let (ran, ..) = futures::join!(operations, nodes, around);
    info!("controller stopped");
    ran.into_iter().collect()
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

/// The CRDs of the kinds this process runs, and the DisruptionBudgets' when it reads them.
async fn install_crds(client: &Client, settings: &Settings, kinds: &Kinds) -> Result<(), Error> {
    for crd in kinds.iter().flat_map(|k| k.crds()) {
        install_crd(client, crd).await?;
    }
    if settings.disruption_budgets {
        let crd = slipway::node::budget::api::disruption_budget_crd();
        install_crd(client, crd).await?;
    }
    Ok(())
}
