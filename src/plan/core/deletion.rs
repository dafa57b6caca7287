//! What a Plan leaves behind when it is deleted (SUC #71: SUC leaves the nodes its Jobs cordoned
//! cordoned, and its Jobs running until the garbage collector gets to them).
//!
//! The Plan carries a finalizer; on deletion slipway deletes its Jobs and reboot pods (no upgrade
//! or reboot starts after the Plan is gone) and uncordons the nodes it was upgrading, the ones
//! the Plan's own Jobs cordoned: never an admin's cordon (see [`crate::node::cordon`]), never a
//! node another Plan is still upgrading.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;

use super::PlanInput;
use super::decision::{JobDeletion, PlanDecision, PlanEffect};
use crate::common::decision::Decision;
use crate::node::NodeInfo;
use crate::node::change::NodeChange;
use crate::node::cordon;
use crate::plan::api::Plan;

/// The finalizer slipway puts on every Plan it reconciles.
pub const FINALIZER: &str = "slipway.dev/plan-cleanup";

/// What deleting the Plan undoes, before its finalizer goes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cleanup {
    pub delete_jobs: Vec<String>,
    pub delete_pods: Vec<String>,
    /// Uncordons, with the cordon record forgotten.
    pub node_patches: Vec<NodeChange>,
}

/// The decision on a Plan being deleted: its Jobs and reboot pods go first (nothing starts on a
/// node about to be uncordoned), then the uncordons; the runtime applies them in that order, then
/// removes the finalizer.
pub fn cleanup(input: &PlanInput<'_>) -> PlanDecision {
    let c = cleanup_of(
        input.plan,
        input.nodes,
        input.jobs,
        input.reboot_pods,
        |node| input.shared.contains(node),
    );
    let reason = || "its Plan is deleted".to_string();
    let effects = (c.delete_jobs.into_iter())
        .map(|name| {
            PlanEffect::DeleteJob(JobDeletion {
                name,
                reason: reason(),
            })
        })
        .chain(c.delete_pods.into_iter().map(PlanEffect::DeletePod))
        .chain(
            crate::node::prepull::leftovers(&super::pull_owner(input.plan), input.pull_pods)
                .into_iter()
                .map(PlanEffect::DeletePullPod),
        )
        .chain(c.node_patches.into_iter().map(PlanEffect::PatchNode))
        .collect();
    Decision {
        effects,
        ..PlanDecision::keep(input.plan.status.clone().unwrap_or_default())
    }
}

/// The cleanup of `plan`, being deleted: `nodes` are its candidates, `jobs` and `reboot_pods`
/// its own, `shared(node)` says whether another Plan is upgrading that node too.
pub fn cleanup_of(
    plan: &Plan,
    nodes: &[&NodeInfo],
    jobs: &[&Job],
    reboot_pods: &[&Pod],
    shared: impl Fn(&str) -> bool,
) -> Cleanup {
    let cordons = super::settings::cordons(&plan.spec);
    let applying = plan
        .status
        .as_ref()
        .map(|s| s.applying.as_slice())
        .unwrap_or_default();
    let quarantine =
        super::failure::quarantine_key(plan.metadata.name.as_deref().unwrap_or_default());
    let mut node_patches: Vec<NodeChange> = nodes
        .iter()
        .filter(|n| cordons && applying.iter().any(|h| h == n.hostname()))
        .filter(|n| cordon::plan_may_uncordon(n) && !shared(&n.name))
        .map(|n| NodeChange {
            annotations: match cordon::has_record(n) {
                true => cordon::forget(),
                false => Default::default(),
            },
            ..NodeChange::of(&n.name).cordon(false)
        })
        .collect();
    // The nodes it quarantined are released: nothing would ever lift their taint.
    node_patches.extend(
        nodes
            .iter()
            .filter(|n| n.labels.contains_key(&quarantine))
            .map(|n| {
                NodeChange::of(&n.name)
                    .label(&quarantine, None)
                    .remove_taint(&quarantine)
            }),
    );
    let names = |metas: Vec<Option<&String>>| metas.into_iter().flatten().cloned().collect();
    Cleanup {
        delete_jobs: names(jobs.iter().map(|j| j.metadata.name.as_ref()).collect()),
        delete_pods: names(
            reboot_pods
                .iter()
                .map(|p| p.metadata.name.as_ref())
                .collect(),
        ),
        node_patches,
    }
}

/// Whether the Plan, once `decision` is applied, holds what [`cleanup`] would give back: a node
/// its Jobs may have cordoned (one it is upgrading, when it cordons or drains), a node it
/// quarantined or is quarantining, a reboot or pull pod it has or is creating. Only then does it
/// carry [`FINALIZER`]: a Plan at rest carries none, so that deleting it, its namespace or its CRD
/// never waits for a controller that went with them (SUC's own e2e suite deletes namespaces that
/// hold the controller and its Plans). What the decision itself creates counts: the finalizer is
/// set before it is applied, or a deletion right after it would leave the node tainted. Jobs are
/// not counted: they are the Plan's own (an owner reference), and the garbage collector deletes
/// them.
pub fn holds(plan: &Plan, decision: &PlanDecision, nodes: &[&NodeInfo], pods: usize) -> bool {
    let cordons = super::settings::cordons(&plan.spec);
    let quarantine =
        super::failure::quarantine_key(plan.metadata.name.as_deref().unwrap_or_default());
    let creates = decision.effects.iter().any(|e| match e {
        PlanEffect::CreatePod(_) | PlanEffect::PullImages(_) => true,
        PlanEffect::PatchNode(c) => c.labels.get(&quarantine).is_some_and(Option::is_some),
        _ => false,
    });
    (cordons && !decision.status.applying.is_empty())
        || nodes.iter().any(|n| n.labels.contains_key(&quarantine))
        || pods > 0
        || creates
}

/// Whether the Plan carries slipway's finalizer.
pub fn has_finalizer(plan: &Plan) -> bool {
    plan.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_plan_releases_the_nodes_it_quarantined() {
        let key = "quarantine.slipway.dev/k3s";
        let quarantined = NodeInfo {
            name: "n1".into(),
            labels: [(key.to_string(), "h".to_string())].into(),
            ..Default::default()
        };
        let other = NodeInfo {
            name: "n2".into(),
            ..Default::default()
        };
        let c = cleanup_of(&plan(false, &[]), &[&quarantined, &other], &[], &[], |_| {
            false
        });
        assert_eq!(
            c.node_patches,
            [NodeChange::of("n1").label(key, None).remove_taint(key)]
        );
    }
    use crate::plan::api::{PlanSpec, PlanStatus};
    use kube::api::ObjectMeta;

    fn plan(cordon: bool, applying: &[&str]) -> Plan {
        Plan {
            metadata: ObjectMeta {
                name: Some("k3s".into()),
                finalizers: Some(vec![FINALIZER.into()]),
                ..Default::default()
            },
            spec: PlanSpec {
                cordon: Some(cordon),
                ..Default::default()
            },
            status: Some(PlanStatus {
                applying: applying.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }),
        }
    }

    fn node(name: &str, unschedulable: bool, record: Option<&str>) -> NodeInfo {
        NodeInfo {
            name: name.into(),
            unschedulable,
            annotations: record
                .map(|r| [(cordon::LEGACY_UPGRADE_CORDON.to_string(), r.to_string())].into())
                .unwrap_or_default(),
            ..Default::default()
        }
    }

    fn job(name: &str) -> Job {
        Job {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// The finalizer is held only while a deletion would have something to give back.
    #[test]
    fn a_plan_holds_only_what_its_deletion_gives_back() {
        let at_rest = |p: &Plan| PlanDecision::keep(p.status.clone().unwrap_or_default());
        let holds = |p: &Plan, nodes: &[&NodeInfo], pods| holds(p, &at_rest(p), nodes, pods);
        let free = node("n2", false, None);
        // Upgrading a node, a Plan that cordons may have cordoned it; one that does not, not.
        assert!(holds(&plan(true, &["n1"]), &[&free], 0));
        assert!(!holds(&plan(false, &["n1"]), &[&free], 0));
        let mut drains = plan(false, &["n1"]);
        drains.spec.drain = Some(Default::default());
        assert!(holds(&drains, &[], 0));
        // At rest: nothing, unless a node is quarantined or a pod is left.
        assert!(!holds(&plan(true, &[]), &[&free], 0));
        let mut quarantined = free.clone();
        quarantined
            .labels
            .insert("quarantine.slipway.dev/k3s".into(), "h".into());
        assert!(holds(&plan(true, &[]), &[&quarantined], 0));
        assert!(holds(&plan(false, &[]), &[], 1));
    }

    /// What the decision creates is held before it exists: a deletion right after the decision
    /// that quarantines a node, or creates a reboot or pull pod, still gives it back.
    #[test]
    fn a_plan_holds_what_its_decision_creates() {
        let p = plan(false, &[]);
        let with = |effect: PlanEffect| PlanDecision {
            effects: vec![effect],
            ..PlanDecision::keep(Default::default())
        };
        let key = "quarantine.slipway.dev/k3s";
        let quarantining = NodeChange::of("n1").label(key, Some("h"));
        assert!(holds(
            &p,
            &with(PlanEffect::PatchNode(quarantining)),
            &[],
            0
        ));
        let releasing = NodeChange::of("n1").label(key, None);
        assert!(!holds(&p, &with(PlanEffect::PatchNode(releasing)), &[], 0));
        let other = NodeChange::of("n1").label("quarantine.slipway.dev/other", Some("h"));
        assert!(!holds(&p, &with(PlanEffect::PatchNode(other)), &[], 0));
        let pod = || Box::new(Pod::default());
        assert!(holds(&p, &with(PlanEffect::CreatePod(pod())), &[], 0));
        assert!(holds(&p, &with(PlanEffect::PullImages(pod())), &[], 0));
        assert!(!holds(&p, &with(PlanEffect::DeletePod("r".into())), &[], 0));
    }

    fn uncordoned(c: &Cleanup) -> Vec<&str> {
        c.node_patches
            .iter()
            .filter(|p| p.unschedulable == Some(false))
            .map(|p| p.node.as_str())
            .collect()
    }

    #[test]
    fn deleting_a_plan_uncordons_only_what_its_jobs_cordoned() {
        let nodes = [
            node("mine", true, Some("slipway")),
            node("admins", true, Some("admin")),
            node("sucs", true, None),
            node("schedulable", false, Some("slipway")),
            node("not-applying", true, Some("slipway")),
            node("shared", true, Some("slipway")),
        ];
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let p = plan(true, &["mine", "admins", "sucs", "schedulable", "shared"]);
        let c = cleanup_of(&p, &refs, &[], &[], |n| n == "shared");
        assert_eq!(uncordoned(&c), ["mine", "sucs"]);
        assert_eq!(c.node_patches[0].annotations, cordon::forget());
        assert!(
            c.node_patches[1].annotations.is_empty(),
            "no record to forget"
        );
    }

    #[test]
    fn a_plan_that_does_not_cordon_uncordons_nothing() {
        let nodes = [node("n1", true, None)];
        let refs: Vec<&NodeInfo> = nodes.iter().collect();
        let c = cleanup_of(&plan(false, &["n1"]), &refs, &[], &[], |_| false);
        assert!(c.node_patches.is_empty());
    }

    #[test]
    fn its_jobs_and_reboot_pods_go() {
        let jobs = [job("apply-k3s-on-n1"), job("apply-k3s-on-n2")];
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("reboot-k3s-on-n1".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let c = cleanup_of(
            &plan(false, &[]),
            &[],
            &jobs.iter().collect::<Vec<_>>(),
            &[&pod],
            |_| false,
        );
        assert_eq!(c.delete_jobs, ["apply-k3s-on-n1", "apply-k3s-on-n2"]);
        assert_eq!(c.delete_pods, ["reboot-k3s-on-n1"]);
    }

    #[test]
    fn the_finalizer_is_seen() {
        assert!(has_finalizer(&plan(false, &[])));
        let mut p = plan(false, &[]);
        p.metadata.finalizers = None;
        assert!(!has_finalizer(&p));
    }
}
