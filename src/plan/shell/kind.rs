//! The Plan as a kind of node operation: its watches and run, and its objects listed once.

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use super::{JobCache, PlanOperation, PlanSettings, PlanWatches, hold_source, run, watch};
use crate::common::labels::CONTROLLER;
use crate::plan::api::Plan;
use crate::runtime::kind::{Foreseen, Kind, Place, list};
use crate::runtime::watch::NodeTriggers;
use crate::runtime::{Error, HoldSource, ReadyFuture, Shared, listed};

/// Plans, in the controller's namespace.
pub struct PlanKind {
    settings: PlanSettings,
}

impl PlanKind {
    pub fn new(settings: PlanSettings) -> PlanKind {
        PlanKind { settings }
    }
}

impl Kind for PlanKind {
    type Op = PlanOperation;
    type Watches = PlanWatches;
    /// The Plans, their Jobs, Secrets and reboot pods.
    type Lists = (Store<Plan>, JobCache, Store<Secret>, Store<Pod>);

    fn words(&self) -> &'static [&'static str] {
        &["plan", "plans"]
    }

    fn crds(&self) -> Vec<CustomResourceDefinition> {
        vec![crate::plan::api::crd::plan_crd()]
    }

    fn watch(&self, at: Place<'_>, triggers: &NodeTriggers) -> PlanWatches {
        watch(at.client, at.namespace, at.name, triggers)
    }

    fn ready(&self, watches: &PlanWatches) -> Vec<(&'static str, ReadyFuture)> {
        watches.ready()
    }

    fn holds(&self, watches: &PlanWatches) -> Arc<dyn HoldSource> {
        watches.holds()
    }

    fn run(
        &self,
        watches: PlanWatches,
        shared: Arc<Shared>,
        shutdown: CancellationToken,
    ) -> BoxFuture<'static, Result<(), Error>> {
        Box::pin(run(shared, self.settings.clone(), watches, shutdown))
    }

    fn list<'a>(&'a self, at: Place<'a>) -> BoxFuture<'a, Result<Self::Lists, Error>> {
        Box::pin(async move {
            let mine = format!("{CONTROLLER}={}", at.name);
            let reboot_pods = format!("{mine},{}", crate::node::reboot::REBOOT_LABEL);
            Ok((
                listed(list(at.namespaced(), "").await?),
                JobCache::listed(list(at.namespaced(), &mine).await?),
                listed(list(at.namespaced(), "").await?),
                listed(list(at.namespaced(), &reboot_pods).await?),
            ))
        })
    }

    fn listed_holds(&self, (plans, ..): &Self::Lists) -> Arc<dyn HoldSource> {
        hold_source(plans.clone())
    }

    fn operation(
        &self,
        (plans, jobs, secrets, pods): Self::Lists,
        shared: Arc<Shared>,
    ) -> Result<Foreseen<PlanOperation>, Error> {
        let objects = plans.state();
        let settings = self.settings.clone();
        let op = PlanOperation::new(shared, settings, (plans, jobs, secrets), pods)?.explaining();
        Ok(Foreseen { op, objects })
    }
}
