//! The nodes a Plan's decision reads: from the node index, with this process' patches laid over
//! them, and the settled ones counted instead of read (see [`core::settled`]).

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;

use super::PlanOperation;
use crate::node::NodeInfo;
use crate::plan::api::Plan;
use crate::plan::core::{self as core, settled::SettledNodes};

impl PlanOperation {
    /// The Plan's candidate nodes from the index, with what this process patched onto them.
    pub(super) fn candidates(&self, plan: &Plan) -> Vec<Arc<NodeInfo>> {
        let candidates = self.shared.nodes_mut().candidates(
            &core::holder(plan),
            plan.metadata.uid.as_deref().unwrap_or_default(),
            plan.metadata.generation,
            || core::interest(plan),
        );
        self.overlaid(candidates)
    }

    /// The nodes the Plan's decision reads: when it rolls out to `hash` (and is not explained,
    /// which lists every node), the candidates not settled at it and those its records or this
    /// process' pending patches name, with the others counted; else every candidate.
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
        let patched = self.expect.patched_nodes();
        let mut named = core::settled::named(plan, &jobs, &pods);
        named.names.extend(patched.iter().map(String::as_str));
        let (nodes, count) = self.shared.nodes_mut().unsettled(
            &core::holder(plan),
            plan.metadata.uid.as_deref().unwrap_or_default(),
            plan.metadata.generation,
            || core::interest(plan),
            &core::settled::rule(plan, &hash),
            &named,
        );
        (self.overlaid(nodes), Some(SettledNodes { hash, count }))
    }

    fn overlaid(&self, nodes: Vec<Arc<NodeInfo>>) -> Vec<Arc<NodeInfo>> {
        (nodes.into_iter())
            .map(|n| match self.expect.node(&n) {
                Some(overlaid) => Arc::new(overlaid),
                None => n,
            })
            .collect()
    }
}
