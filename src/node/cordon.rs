//! Who cordoned a node: one record on the node for every operation, so that slipway uncordons
//! only what it cordoned itself, never an admin's cordon (SUC #341: SUC uncordons every cordoned
//! node after a Plan that cordons; kured #1129 and FLUO #188 leave nodes cordoned).
//!
//! The record is the annotation [`CORDONED_BY`]: the key of the operation that cordoned the node
//! ([`Holder::key`]), or `admin` when an operation started on a node someone else had cordoned.
//! A NodeMaintenance and a RebootPolicy cordon the node themselves and record it at once. A Plan's
//! Job cordons the node itself (`kubectl drain` or `cordon` in the pod), so slipway records,
//! before it creates the Job, what the cordon will be: the Plan's if the node is schedulable then,
//! the admin's if it is already cordoned and slipway has no record of cordoning it. Plans share
//! nodes, so any Plan may undo another Plan's cordon, as SUC does. A node cordoned with no record
//! at all by a Plan's Job (a rollout SUC started) is uncordoned as SUC would.
//!
//! Records written by slipway before this one existed are read too, and rewritten when an
//! operation next touches the node: `slipway.dev/upgrade-cordon: slipway|admin` (Plans), and a
//! RebootPolicy's `status.nodes[].cordoned` (read by the policy itself). So is kairos-operator's
//! `operator.kairos.io/cordoned-by: <namespace>/<name>@<uid>`: a NodeOp slipway takes over from it
//! gives back the cordons kairos-operator made for it.

use std::collections::BTreeMap;

use super::NodeInfo;
use super::holders::Holder;

/// The node annotation with the record.
pub const CORDONED_BY: &str = "slipway.dev/cordoned-by";
/// The record's value for a cordon slipway did not make.
pub const ADMIN: &str = "admin";
/// Plans' record before [`CORDONED_BY`]: `slipway` or `admin`.
pub const LEGACY_UPGRADE_CORDON: &str = "slipway.dev/upgrade-cordon";
/// kairos-operator's record of a NodeOp's cordon: `<namespace>/<name>@<uid>`.
pub const KAIROS_CORDONED_BY: &str = "operator.kairos.io/cordoned-by";
/// Every form of the record: the node annotations the node index must keep.
pub const RECORDS: [&str; 3] = [CORDONED_BY, LEGACY_UPGRADE_CORDON, KAIROS_CORDONED_BY];

/// Who a node's cordon belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CordonOwner {
    /// A slipway operation cordoned the node (or a Plan's Job is about to).
    Operation(Holder),
    /// A Plan's Job cordoned the node; which Plan, a record from before [`CORDONED_BY`] does not
    /// say.
    SomePlan,
    /// Someone else: slipway leaves it cordoned.
    Admin,
}

impl CordonOwner {
    /// The node's record; a value that cannot be read counts as none.
    pub fn of(annotations: &BTreeMap<String, String>) -> Option<CordonOwner> {
        if let Some(value) = annotations.get(CORDONED_BY) {
            return match value.as_str() {
                ADMIN => Some(CordonOwner::Admin),
                key => Holder::from_key(key).map(CordonOwner::Operation),
            };
        }
        if let Some(owner) = annotations.get(KAIROS_CORDONED_BY).and_then(|v| kairos(v)) {
            return Some(owner);
        }
        match annotations.get(LEGACY_UPGRADE_CORDON).map(String::as_str) {
            Some("slipway") => Some(CordonOwner::SomePlan),
            Some(ADMIN) => Some(CordonOwner::Admin),
            _ => None,
        }
    }

    fn value(&self) -> String {
        match self {
            CordonOwner::Operation(h) => h.key(),
            // Written only where the Plan is known; a Plan reads it back as its own.
            CordonOwner::SomePlan => "plan".to_string(),
            CordonOwner::Admin => ADMIN.to_string(),
        }
    }

    /// Whether a Plan's cordon: any Plan may undo it.
    fn by_a_plan(&self) -> bool {
        match self {
            CordonOwner::Operation(h) => h.is_plan(),
            CordonOwner::SomePlan => true,
            CordonOwner::Admin => false,
        }
    }
}

/// kairos-operator's record, read as the NodeOp's own cordon (the uid is not kept: slipway names
/// its holders by namespace and name).
fn kairos(value: &str) -> Option<CordonOwner> {
    let (reference, _uid) = value.rsplit_once('@').unwrap_or((value, ""));
    let (namespace, name) = reference.split_once('/')?;
    (!namespace.is_empty() && !name.is_empty()).then(|| {
        CordonOwner::Operation(Holder::NodeOp {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    })
}

/// The annotation changes that record `owner` (and drop a record in another form).
pub fn record(owner: &CordonOwner) -> BTreeMap<String, Option<String>> {
    BTreeMap::from([
        (CORDONED_BY.to_string(), Some(owner.value())),
        (LEGACY_UPGRADE_CORDON.to_string(), None),
        (KAIROS_CORDONED_BY.to_string(), None),
    ])
}

/// The annotation changes that remove the record, whichever form it has.
pub fn forget() -> BTreeMap<String, Option<String>> {
    BTreeMap::from([
        (CORDONED_BY.to_string(), None),
        (LEGACY_UPGRADE_CORDON.to_string(), None),
        (KAIROS_CORDONED_BY.to_string(), None),
    ])
}

/// Whether the node carries a record in any form.
pub fn has_record(node: &NodeInfo) -> bool {
    RECORDS.iter().any(|k| node.annotations.contains_key(*k))
}

/// The record to write before `plan`'s Job that cordons starts on `node`, when it changes: a
/// schedulable node is cordoned by the Job; a cordoned node keeps its owner (a Plan's cordon of
/// an earlier, failed Job stays a Plan's), or is the admin's if it has no record. A record in the
/// old form is rewritten in the new one.
pub fn record_at_plan_start(plan: &Holder, node: &NodeInfo) -> Option<CordonOwner> {
    let now = CordonOwner::of(&node.annotations);
    let record = match (node.unschedulable, &now) {
        (false, _) => CordonOwner::Operation(plan.clone()),
        (true, Some(CordonOwner::SomePlan)) => CordonOwner::Operation(plan.clone()),
        (true, Some(owner)) => owner.clone(),
        (true, None) => CordonOwner::Admin,
    };
    let legacy = node.annotations.contains_key(LEGACY_UPGRADE_CORDON);
    (now.as_ref() != Some(&record) || legacy).then_some(record)
}

/// Whether a Plan may uncordon `node` once it is done with it: a Plan's cordon, or one with no
/// record (SUC's rollout, as SUC would).
pub fn plan_may_uncordon(node: &NodeInfo) -> bool {
    node.unschedulable && CordonOwner::of(&node.annotations).is_none_or(|owner| owner.by_a_plan())
}

/// Whether the record goes once a Plan is done with `node` (`uncordon`: it uncordons it now):
/// after a Plan's cordon is undone, or once an admin's cordon is gone. An admin's cordon keeps its
/// record while it lasts, for the other Plans upgrading the node.
pub fn plan_forgets(node: &NodeInfo, uncordon: bool) -> bool {
    has_record(node) && (uncordon || !node.unschedulable)
}

/// Whether `me` cordoned `node` (an operation that cordons for itself: a maintenance, a reboot).
pub fn cordoned_by(node: &BTreeMap<String, String>, me: &Holder) -> bool {
    CordonOwner::of(node) == Some(CordonOwner::Operation(me.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Holder {
        Holder::Plan {
            namespace: "system-upgrade".into(),
            name: "k3s".into(),
        }
    }

    fn node(unschedulable: bool, record: Option<(&str, &str)>) -> NodeInfo {
        NodeInfo {
            name: "n1".into(),
            unschedulable,
            annotations: record
                .map(|(k, v)| [(k.to_string(), v.to_string())].into())
                .unwrap_or_default(),
            ..Default::default()
        }
    }

    const NEW: &str = CORDONED_BY;
    const OLD: &str = LEGACY_UPGRADE_CORDON;

    #[test]
    fn the_record_says_who_cordoned_before_the_job_runs() {
        let ours = Some(CordonOwner::Operation(plan()));
        let cases = [
            // schedulable: the Job cordons it
            (false, None, ours.clone()),
            (false, Some((NEW, "plan/system-upgrade/k3s")), None),
            (false, Some((NEW, "admin")), ours.clone()),
            (false, Some((OLD, "slipway")), ours.clone()),
            // cordoned: by a Plan's earlier Job, by an admin, or by someone with no record
            (true, Some((NEW, "plan/system-upgrade/k3s")), None),
            (true, Some((NEW, "plan/system-upgrade/other")), None),
            (true, Some((NEW, "admin")), None),
            (true, None, Some(CordonOwner::Admin)),
            (true, Some((NEW, "garbage")), Some(CordonOwner::Admin)),
            // records of an older slipway are rewritten
            (true, Some((OLD, "slipway")), ours.clone()),
            (true, Some((OLD, "admin")), Some(CordonOwner::Admin)),
        ];
        for (unschedulable, record, want) in cases {
            assert_eq!(
                record_at_plan_start(&plan(), &node(unschedulable, record)),
                want,
                "unschedulable {unschedulable}, record {record:?}"
            );
        }
    }

    #[test]
    fn an_admins_cordon_stays_and_a_plans_goes() {
        assert!(plan_may_uncordon(&node(true, Some((NEW, "plan/ns/other")))));
        assert!(plan_may_uncordon(&node(true, Some((OLD, "slipway")))));
        assert!(
            plan_may_uncordon(&node(true, None)),
            "SUC's rollout: as SUC"
        );
        assert!(!plan_may_uncordon(&node(true, Some((NEW, "admin")))));
        assert!(!plan_may_uncordon(&node(true, Some((OLD, "admin")))));
        assert!(!plan_may_uncordon(&node(
            true,
            Some((NEW, "nodemaintenance/m"))
        )));
        assert!(
            !plan_may_uncordon(&node(false, Some((NEW, "plan/ns/k3s")))),
            "not cordoned"
        );
    }

    #[test]
    fn the_record_goes_with_the_cordon() {
        assert!(plan_forgets(&node(true, Some((NEW, "plan/ns/k3s"))), true));
        assert!(plan_forgets(&node(true, Some((OLD, "slipway"))), true));
        assert!(!plan_forgets(&node(true, Some((NEW, "admin"))), false));
        assert!(plan_forgets(&node(false, Some((OLD, "admin"))), false));
        assert!(!plan_forgets(&node(true, None), true), "nothing to forget");
        assert_eq!(forget().len(), 3, "every form goes");
    }

    #[test]
    fn a_cordon_kairos_operator_made_for_a_nodeop_is_that_nodeops() {
        let op = Holder::NodeOp {
            namespace: "default".into(),
            name: "upgrade".into(),
        };
        let theirs = node(
            true,
            Some((KAIROS_CORDONED_BY, "default/upgrade@5f0c-11ee")),
        );
        assert!(cordoned_by(&theirs.annotations, &op));
        assert!(has_record(&theirs));
        let other = Holder::NodeOp {
            namespace: "default".into(),
            name: "other".into(),
        };
        assert!(!cordoned_by(&theirs.annotations, &other));
        assert!(
            !plan_may_uncordon(&theirs),
            "a NodeOp's cordon is not a Plan's to undo"
        );
        for garbage in ["", "upgrade", "/upgrade@x", "default/@x"] {
            let n = node(true, Some((KAIROS_CORDONED_BY, garbage)));
            assert_eq!(CordonOwner::of(&n.annotations), None, "{garbage:?}");
        }
        // slipway's record wins, and is what is written from then on.
        let mut both = theirs.clone();
        both.annotations.insert(CORDONED_BY.into(), "admin".into());
        assert_eq!(CordonOwner::of(&both.annotations), Some(CordonOwner::Admin));
        assert_eq!(
            record(&CordonOwner::Operation(op))[KAIROS_CORDONED_BY],
            None,
            "kairos-operator's record goes"
        );
    }

    #[test]
    fn operations_that_cordon_for_themselves_know_their_own_cordon() {
        let me = Holder::Reboot {
            policy: "kured".into(),
        };
        let mine = node(true, Some((NEW, "rebootpolicy/kured")));
        assert!(cordoned_by(&mine.annotations, &me));
        assert!(!cordoned_by(
            &node(true, Some((NEW, "admin"))).annotations,
            &me
        ));
        assert!(!cordoned_by(&node(true, None).annotations, &me));
        assert_eq!(
            record(&CordonOwner::Operation(me.clone()))[CORDONED_BY].as_deref(),
            Some("rebootpolicy/kured")
        );
    }
}
