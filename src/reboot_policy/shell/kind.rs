//! RebootPolicy as a kind of node operation: its flags, its watches and run, and its objects
//! listed once.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use super::{PolicyOperation, PolicyWatches, hold_source, run, watch};
use crate::common::labels::CONTROLLER;
use crate::reboot_policy::api::RebootPolicy;
use crate::reboot_policy::core::kured::{DEFAULT_ANNOTATION, KuredLock};
use crate::reboot_policy::core::pod::REBOOT_POLICY_LABEL;
use crate::runtime::kind::{Foreseen, Kind, Place, list, list_served};
use crate::runtime::watch::NodeTriggers;
use crate::runtime::{Error, HoldSource, Shared, listed};

/// kured's DaemonSet as its chart names it.
const KURED_DAEMONSET: &str = "kube-system/kured";

/// `slipway run`'s flags of RebootPolicies, kured's lock among them (docs/migrating.md, "From
/// kured").
#[derive(clap::Args, Debug, Clone)]
pub struct RebootPolicyArgs {
    /// Also reconcile RebootPolicies (slipway.dev, cluster-wide): reboot the nodes that ask for
    /// it (slipway agent, Flatcar's or Container Linux's update-agent), in one budget with the
    /// Plans and NodeMaintenances. Do not enable it where kured or FLUO's operator runs.
    #[arg(long, env = "SLIPWAY_REBOOT_POLICIES", default_value_t = false, action = clap::ArgAction::Set)]
    reboot_policies: bool,
    /// kured's DaemonSet, `<namespace>/<name>` (kured's --ds-namespace and --ds-name): while it
    /// exists, RebootPolicies take over the nodes its lock names, and finish their reboots if
    /// kured is uninstalled first. Empty: kured's lock is not read.
    #[arg(
        long,
        env = "SLIPWAY_KURED_DAEMONSET",
        default_value = KURED_DAEMONSET
    )]
    kured_daemonset: String,
    /// The annotation of kured's lock on its DaemonSet (kured's --lock-annotation).
    #[arg(
        long,
        env = "SLIPWAY_KURED_LOCK_ANNOTATION",
        default_value = DEFAULT_ANNOTATION
    )]
    kured_lock_annotation: String,
}

impl RebootPolicyArgs {
    /// RebootPolicies reconciled, kured's lock read where kured's chart puts it (`slipway
    /// explain`).
    pub fn enabled() -> RebootPolicyArgs {
        RebootPolicyArgs {
            reboot_policies: true,
            kured_daemonset: KURED_DAEMONSET.into(),
            kured_lock_annotation: DEFAULT_ANNOTATION.into(),
        }
    }

    /// The kind, when the flags ask for it, rebooting with `reboot_image` unless a policy names
    /// its own.
    pub fn kind(&self, reboot_image: &str) -> Result<Option<RebootPolicyKind>, Error> {
        if !self.reboot_policies {
            return Ok(None);
        }
        let kured = KuredLock::of(&self.kured_daemonset, &self.kured_lock_annotation)
            .map_err(|e| Error::Startup(format!("--kured-daemonset: {e}")))?;
        Ok(Some(RebootPolicyKind::new(reboot_image, kured)))
    }
}

/// RebootPolicies, cluster-wide, and their reboot pods in the controller's namespace.
pub struct RebootPolicyKind {
    image: String,
    kured: Option<KuredLock>,
}

impl RebootPolicyKind {
    /// `kured`: where kured keeps its lock (`None`: not read).
    pub fn new(reboot_image: &str, kured: Option<KuredLock>) -> RebootPolicyKind {
        RebootPolicyKind {
            image: reboot_image.to_string(),
            kured,
        }
    }
}

impl Kind for RebootPolicyKind {
    type Op = PolicyOperation;
    type Watches = PolicyWatches;
    /// The policies, and their reboot pods.
    type Lists = (Store<RebootPolicy>, Store<Pod>);

    fn words(&self) -> &'static [&'static str] {
        &["rebootpolicy", "rebootpolicies", "rbp"]
    }

    fn crds(&self) -> Vec<CustomResourceDefinition> {
        vec![crate::reboot_policy::api::reboot_policy_crd()]
    }

    fn node_annotations(&self) -> &'static [&'static str] {
        &crate::reboot_policy::core::SIGNAL_ANNOTATIONS
    }

    fn watch(&self, at: Place<'_>, triggers: &NodeTriggers) -> PolicyWatches {
        watch(at.client, at.namespace, at.name, triggers)
    }

    fn holds(&self, watches: &PolicyWatches) -> Arc<dyn HoldSource> {
        watches.holds()
    }

    fn run(
        &self,
        watches: PolicyWatches,
        shared: Arc<Shared>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), Error>> {
        let (image, kured) = (self.image.clone(), self.kured.clone());
        run(shared, image, kured, watches, shutdown).map(Ok).boxed()
    }

    fn list<'a>(&'a self, at: Place<'a>) -> BoxFuture<'a, Result<Self::Lists, Error>> {
        Box::pin(async move {
            let policies = list_served(Api::all(at.client.clone())).await?;
            let pods = format!("{CONTROLLER}={},{REBOOT_POLICY_LABEL}", at.name);
            let pods = list(at.namespaced(), &pods).await?;
            Ok((listed(policies), listed(pods)))
        })
    }

    fn listed_holds(&self, (policies, _): &Self::Lists) -> Arc<dyn HoldSource> {
        hold_source(policies.clone())
    }

    fn operation(
        &self,
        (policies, pods): Self::Lists,
        shared: Arc<Shared>,
    ) -> Result<Foreseen<PolicyOperation>, Error> {
        let objects = policies.state();
        let (image, kured) = (self.image.clone(), self.kured.clone());
        let op = PolicyOperation::new(shared, image, kured, policies, pods);
        Ok(Foreseen { op, objects })
    }
}
