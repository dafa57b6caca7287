//! What a Plan owns in the caches: its Jobs, its hooks' Jobs and its reboot pods, with those this
//! process created that the caches do not show yet.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::PlanOperation;
use crate::node::NodeInfo;
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
        let pods = self
            .reboot_pods
            .state()
            .into_iter()
            .filter(|p| {
                p.labels()
                    .get(core::reboot::REBOOT_PLAN_LABEL)
                    .map(String::as_str)
                    == Some(plan)
            })
            .collect();
        let cached = |name: &str| {
            self.jobs
                .store
                .get(&ObjectRef::new(name).within(ns))
                .is_some()
        };
        Owned {
            jobs: self.expect.jobs(jobs, plan, cached),
            hook_jobs: self.jobs.get(hook_names, ns),
            reboot_pods: self.expect.pods(pods, plan),
        }
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
