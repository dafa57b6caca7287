//! What a Plan owns in the caches: its Jobs, its hooks' Jobs and its reboot pods, with those this
//! process created that the caches do not show yet.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::PlanOperation;
use crate::node::NodeInfo;
use crate::plan::api::labels;
use crate::plan::core::{self as core, settled::Target};

impl PlanOperation {
    /// The Plan's Jobs, its hooks' Jobs and its reboot pods: the caches' and those created but
    /// not in the caches yet. Of the Plan's Jobs, when it rolls out to `target`, not the quiet
    /// ones at its version ([`core::settled::quiet`]): mid-rollout they are most of them, and a
    /// decision reads only those of the nodes it reads ([`PlanOperation::quiet_jobs`]).
    pub(super) fn owned_by(&self, plan: &str, target: Option<&Target>) -> Owned {
        let ns = &self.shared.namespace;
        let (names, hook_names) = {
            let index = self.jobs.index();
            let version = target.map(|t| t.version.as_str());
            (index.plan_jobs(plan, version), index.hook_jobs(plan))
        };
        let jobs = self.jobs.get(names, ns);
        let pods: Vec<Arc<Pod>> = (self.reboot_pods.state().into_iter())
            .filter(|p| reboot_pod(plan)(p))
            .collect();
        let cached = |name: &str| {
            self.jobs
                .store
                .get(&ObjectRef::new(name).within(ns))
                .is_some()
        };
        let shown: HashSet<String> = (pods.iter()).map(|p| p.name_any()).collect();
        Owned {
            jobs: (self.created_jobs).over(jobs, plan_job(plan), cached),
            hook_jobs: self.jobs.get(hook_names, ns),
            reboot_pods: (self.created_pods).over(pods, reboot_pod(plan), |n| shown.contains(n)),
        }
    }

    /// When to look at `plan` again though no watch event comes: just after the first of its
    /// Jobs and reboot pods created and not shown by the caches runs out of patience.
    pub(super) fn look_again(&self, plan: &str) -> Option<Duration> {
        let jobs = self.created_jobs.look_again(plan_job(plan));
        jobs.into_iter()
            .chain(self.created_pods.look_again(reboot_pod(plan)))
            .min()
    }

    /// `plan` is deleted: its creations are not waited for.
    pub(super) fn forget_created(&self, plan: &str) {
        self.created_jobs.forget(plan_job(plan));
        self.created_pods.forget(reboot_pod(plan));
    }

    /// The Plan's quiet Jobs at `target`'s version of the `nodes` its decision reads.
    pub(super) fn quiet_jobs(
        &self,
        plan: &str,
        target: Option<&Target>,
        nodes: &[Arc<NodeInfo>],
    ) -> Vec<Arc<Job>> {
        let Some(target) = target else {
            return Vec::new();
        };
        let names = (self.jobs.index()).quiet_of(
            plan,
            &target.version,
            nodes.iter().map(|n| n.name.as_str()),
        );
        self.jobs.get(names, &self.shared.namespace)
    }
}

/// What [`PlanOperation::owned_by`] finds of a Plan.
pub(super) struct Owned {
    pub jobs: Vec<Arc<Job>>,
    pub hook_jobs: Vec<Arc<Job>>,
    pub reboot_pods: Vec<Arc<Pod>>,
}

/// Whether `k`'s label `label` names `plan`.
fn of_plan<K: Resource>(k: &K, label: &str, plan: &str) -> bool {
    (k.meta().labels.as_ref())
        .and_then(|l| l.get(label))
        .map(String::as_str)
        == Some(plan)
}

/// Whether a Job is one of `plan`'s nodes' Jobs.
pub(super) fn plan_job(plan: &str) -> impl Fn(&Job) -> bool + '_ {
    move |j| of_plan(j, labels::PLAN, plan)
}

/// Whether a pod is one of `plan`'s reboot pods.
fn reboot_pod(plan: &str) -> impl Fn(&Pod) -> bool + '_ {
    move |p| of_plan(p, core::reboot::REBOOT_PLAN_LABEL, plan)
}
