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

use super::config::JobConfig;
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

/// What the Plan rolls out now: its hash and its version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub hash: String,
    pub version: String,
}

/// What the Plan rolls out now, found as its decision finds it; `None` when it does not roll out
/// (invalid, unresolved, being deleted): its decision then reads every candidate and every Job.
pub fn target(
    plan: &Plan,
    secrets: &BTreeMap<String, Secret>,
    channel: Option<&ChannelAnswer>,
    config: &JobConfig,
    now: Timestamp,
) -> Option<Target> {
    if plan.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let mut st = plan.status.clone().unwrap_or_default();
    let resolving = Resolving {
        plan,
        secrets,
        channel,
        config,
    };
    let settings = status::handle(&resolving, &mut st, &mut Rollout::default(), &rfc3339(now));
    let rolls = status::rolls(settings.as_ref(), &st);
    let hash = st.latest_hash.filter(|h| rolls && !h.is_empty())?;
    Some(Target {
        hash,
        version: st.latest_version.unwrap_or_default(),
    })
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

/// A Job that completed, with the Plan's labels and no TTL of SUC's annotation: the node and
/// version it names. At the version the Plan rolls out, such a Job concerns a decision only
/// through its node: the sweep leaves it to the TTL controller, no node waits for it, and only
/// its node's state looks it up. So a decision that rolls out reads it only when it reads that
/// node; mid-rollout, the Plan's Jobs are mostly these, waiting for their TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quiet<'a> {
    pub node: &'a str,
    pub version: &'a str,
}

pub fn quiet(job: &Job) -> Option<Quiet<'_>> {
    let label = |key: &str| {
        (job.metadata.labels.as_ref())
            .and_then(|l| l.get(key))
            .map(String::as_str)
    };
    label(labels::PLAN)?;
    let (node, version) = (label(labels::NODE)?, label(labels::VERSION)?);
    (PlanJob::completed(job) && !PlanJob::ttl_annotated(job)).then_some(Quiet { node, version })
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

    /// A Job of the Plan as its rollout leaves it: labelled, at `version`, completed.
    fn done_job(version: &str) -> Job {
        use k8s_openapi::api::batch::v1::{JobCondition, JobSpec, JobStatus};
        let labels = [
            (labels::PLAN, "p"),
            (labels::NODE, "n1"),
            (labels::VERSION, version),
        ];
        Job {
            metadata: kube::api::ObjectMeta {
                name: Some("apply-p-on-n1".into()),
                labels: Some(
                    (labels.iter())
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(JobSpec {
                ttl_seconds_after_finished: Some(900),
                ..Default::default()
            }),
            status: Some(JobStatus {
                conditions: Some(vec![JobCondition {
                    type_: "Complete".into(),
                    status: "True".into(),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_quiet_job_completed_with_the_plans_labels_and_no_annotated_ttl() {
        let done = done_job("v2");
        assert_eq!(
            quiet(&done),
            Some(Quiet {
                node: "n1",
                version: "v2"
            })
        );
        let mut loud: Vec<(&str, Job)> = Vec::new();
        let mut running = done.clone();
        running.status = None;
        loud.push(("running", running));
        let mut failed = done.clone();
        (failed.status.as_mut().and_then(|s| s.conditions.as_mut()))
            .expect("conditions")
            .push(k8s_openapi::api::batch::v1::JobCondition {
                type_: "Failed".into(),
                status: "True".into(),
                ..Default::default()
            });
        loud.push(("failed too", failed));
        let mut deleting = done.clone();
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::UNIX_EPOCH),
        );
        loud.push(("being deleted", deleting));
        for missing in [labels::PLAN, labels::NODE, labels::VERSION] {
            let mut unlabelled = done.clone();
            (unlabelled.metadata.labels.as_mut())
                .expect("labels")
                .remove(missing);
            loud.push((missing, unlabelled));
        }
        let mut annotated = done.clone();
        annotated.spec = None;
        annotated.metadata.annotations =
            Some([(labels::TTL_SECONDS_AFTER_FINISHED.to_string(), "60".into())].into());
        loud.push(("with SUC's TTL annotation", annotated));
        for (what, job) in loud {
            assert_eq!(quiet(&job), None, "{what}");
        }
    }
}
