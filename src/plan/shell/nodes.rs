//! The nodes a Plan's decision reads: from the node index (which has this process's own patches
//! already, see [`crate::node::index::NodeIndex::written`]), the settled ones counted instead of
//! read (see [`core::settled`]).

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;

use super::PlanOperation;
use crate::node::NodeInfo;
use crate::plan::api::Plan;
use crate::plan::core::{self as core, settled::SettledNodes};

impl PlanOperation {
    /// The Plan's candidate nodes from the index.
    pub(super) fn candidates(&self, plan: &Plan) -> Vec<Arc<NodeInfo>> {
        self.shared.nodes_mut().candidates(
            &core::holder(plan),
            plan.metadata.uid.as_deref().unwrap_or_default(),
            plan.metadata.generation,
            || core::interest(plan),
        )
    }

    /// The nodes the Plan's decision reads: when it rolls out to `hash` (and is not explained,
    /// which lists every node), the candidates not settled at it and those its records name, with
    /// the others counted; else every candidate.
    pub(super) fn nodes_read(
        &self,
        plan: &Plan,
        hash: Option<String>,
        jobs: &[Arc<Job>],
        reboot_pods: &[Arc<Pod>],
        pull_pods: &[Pod],
    ) -> (Vec<Arc<NodeInfo>>, Option<SettledNodes>) {
        let Some(hash) = hash.filter(|_| !self.explaining) else {
            return (self.candidates(plan), None);
        };
        let jobs: Vec<&Job> = jobs.iter().map(AsRef::as_ref).collect();
        let pods: Vec<&Pod> = (reboot_pods.iter().map(AsRef::as_ref))
            .chain(pull_pods)
            .collect();
        let named = core::settled::named(plan, &jobs, &pods);
        let (nodes, count) = self.shared.nodes_mut().unsettled(
            &core::holder(plan),
            plan.metadata.uid.as_deref().unwrap_or_default(),
            plan.metadata.generation,
            || core::interest(plan),
            &core::settled::rule(plan, &hash),
            &named,
        );
        (nodes, Some(SettledNodes { hash, count }))
    }
}
