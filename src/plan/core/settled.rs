//! The nodes a Plan's decision may count instead of reading. A candidate is settled at the Plan's
//! hash when it has a hostname, carries the Plan's label at that hash and no quarantine of the
//! Plan, and none of the Plan's own records names it (its status, its Jobs but those that
//! completed, its reboot and pull pods). Nothing a decision does concerns such a node: it is not eligible, holds no slot and has
//! no Job or pod to sweep; it counts among the targeted and upgraded nodes, and it is something
//! the selector matches. So the controller reads the others and counts these: the node index
//! keeps the unsettled candidates node by node ([`NodeIndex::unsettled`]), and a done Plan of
//! 100,000 nodes decides over none. The tests decide every world of the Plan's tests both ways and
//! compare the decisions.
//!
//! [`NodeIndex::unsettled`]: crate::node::index::NodeIndex::unsettled

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};

use super::jobs::PlanJob;
use super::status::{self, Resolving};
use super::{ChannelAnswer, Rollout, rfc3339};
use crate::node::index::{Named, Settled};
use crate::plan::api::{Plan, labels};
use crate::plan::core::failure;

/// Candidates left out of a decision's `nodes`: `count` nodes settled at `hash`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettledNodes {
    pub hash: String,
    pub count: usize,
}

/// The hash the Plan rolls out now, found as its decision finds it; `None` when it does not roll
/// out (invalid, unresolved, being deleted): its decision then reads every candidate.
pub fn target_hash(
    plan: &Plan,
    secrets: &BTreeMap<String, Secret>,
    channel: Option<&ChannelAnswer>,
    now: Timestamp,
) -> Option<String> {
    if plan.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let mut st = plan.status.clone().unwrap_or_default();
    let resolving = Resolving {
        plan,
        secrets,
        channel,
    };
    let rolls = status::handle(&resolving, &mut st, &mut Rollout::default(), &rfc3339(now));
    st.latest_hash.filter(|h| rolls && !h.is_empty())
}

/// What makes a candidate settled at `hash` by its own labels.
pub fn rule(plan: &Plan, hash: &str) -> Settled {
    let name = plan.metadata.name.as_deref().unwrap_or_default();
    Settled {
        label: labels::plan_node_label(name),
        value: hash.to_string(),
        unless: failure::quarantine_key(name),
    }
}

/// The nodes the Plan's own records name: by hostname (its status) and by name (its Jobs that
/// did not complete, and its pods). A decision reads them whatever their labels say.
pub fn named<'a>(plan: &'a Plan, jobs: &[&'a Job], pods: &[&'a Pod]) -> Named<'a> {
    let status = plan.status.iter();
    let hostnames = (status.clone().flat_map(|s| s.applying.iter()))
        .chain(status.flat_map(|s| s.nodes.iter().map(|p| &p.name)))
        .map(String::as_str)
        .collect();
    let labelled = |labels: Option<&'a BTreeMap<String, String>>| {
        labels.and_then(|l| l.get(labels::NODE)).map(String::as_str)
    };
    // A Job that completed names nothing: its node's progress lives in the status until the
    // node is done, and a done node's Job waits for its TTL in the sweep, which reads Jobs, not
    // nodes. Mid-rollout, most of a Plan's Jobs have completed.
    let names = (jobs.iter())
        .filter(|j| !PlanJob::completed(j))
        .filter_map(|j| labelled(j.metadata.labels.as_ref()))
        .chain(pods.iter().flat_map(|p| {
            let scheduled = p.spec.as_ref().and_then(|s| s.node_name.as_deref());
            labelled(p.metadata.labels.as_ref())
                .into_iter()
                .chain(scheduled)
        }))
        .collect();
    Named { hostnames, names }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::NodeInfo;

    fn node(labels: &[(&str, &str)]) -> NodeInfo {
        NodeInfo {
            name: "n".into(),
            labels: (labels.iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn settled_is_at_the_hash_with_a_hostname_and_no_quarantine() {
        let plan = Plan {
            metadata: kube::api::ObjectMeta {
                name: Some("p".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let r = rule(&plan, "h1");
        let host = (labels::HOSTNAME, "n");
        let at = ("plan.upgrade.cattle.io/p", "h1");
        assert!(r.holds(&node(&[host, at])));
        assert!(!r.holds(&node(&[at])), "no hostname");
        assert!(!r.holds(&node(&[host, ("plan.upgrade.cattle.io/p", "h0")])));
        assert!(!r.holds(&node(&[host, ("plan.upgrade.cattle.io/p", "disabled")])));
        assert!(!r.holds(&node(&[host, at, ("quarantine.slipway.dev/p", "h0")])));
        assert!(!r.holds(&node(&[host])));
    }
}
