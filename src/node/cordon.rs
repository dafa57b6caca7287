//! Who cordoned a node that a Plan's Job cordons, so that slipway never uncordons a node an
//! admin cordoned (SUC #341: SUC uncordons every cordoned node after a Plan that cordons).
//!
//! The Job cordons the node itself (`kubectl drain` or `cordon` in the pod), so slipway records
//! before it creates the Job what the cordon will be: its own if the node is schedulable then,
//! the admin's if the node is already cordoned and slipway has no record of cordoning it. A node
//! with no record (a rollout SUC started) is uncordoned as SUC would.

use crate::node::NodeInfo;

/// The node annotation with the record: `slipway` or `admin`.
pub const UPGRADE_CORDON: &str = "slipway.dev/upgrade-cordon";

/// Who the cordon of a node a Plan upgrades belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CordonOwner {
    /// The Plan's Job cordons a node that was schedulable: slipway uncordons it when it is done.
    Slipway,
    /// The node was cordoned before the Plan's Job: it stays cordoned after.
    Admin,
}

impl CordonOwner {
    pub fn as_str(self) -> &'static str {
        match self {
            CordonOwner::Slipway => "slipway",
            CordonOwner::Admin => "admin",
        }
    }

    /// The node's record; an unknown value counts as none.
    pub fn of(node: &NodeInfo) -> Option<CordonOwner> {
        match node.annotations.get(UPGRADE_CORDON).map(String::as_str) {
            Some("slipway") => Some(CordonOwner::Slipway),
            Some("admin") => Some(CordonOwner::Admin),
            _ => None,
        }
    }
}

/// The record to write before a Plan that cordons creates its Job on `node`, when it changes:
/// a schedulable node is cordoned by the Job; a cordoned node keeps its record (slipway's own
/// cordon of an earlier, failed Job stays slipway's), or is the admin's if it has none.
pub fn record_at_start(node: &NodeInfo) -> Option<CordonOwner> {
    let now = CordonOwner::of(node);
    let record = match (node.unschedulable, now) {
        (false, _) => CordonOwner::Slipway,
        (true, Some(owner)) => owner,
        (true, None) => CordonOwner::Admin,
    };
    (now != Some(record)).then_some(record)
}

/// Whether slipway may uncordon `node` once a Plan that cordons is done with it.
pub fn may_uncordon(node: &NodeInfo) -> bool {
    node.unschedulable && CordonOwner::of(node) != Some(CordonOwner::Admin)
}

/// Whether the record goes once a Plan is done with `node` (`uncordon`: slipway uncordons it
/// now): after slipway's own cordon is undone, or once an admin's cordon is gone. An admin's
/// cordon keeps its record while it lasts, for the other Plans upgrading the node.
pub fn forget_after_done(node: &NodeInfo, uncordon: bool) -> bool {
    CordonOwner::of(node).is_some() && (uncordon || !node.unschedulable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(unschedulable: bool, record: Option<&str>) -> NodeInfo {
        NodeInfo {
            name: "n1".into(),
            unschedulable,
            annotations: record
                .map(|r| [(UPGRADE_CORDON.to_string(), r.to_string())].into())
                .unwrap_or_default(),
            ..Default::default()
        }
    }

    #[test]
    fn the_record_says_who_cordoned_before_the_job_runs() {
        use CordonOwner::*;
        let cases = [
            // schedulable: the Job cordons it
            (false, None, Some(Slipway)),
            (false, Some("slipway"), None),
            (false, Some("admin"), Some(Slipway)),
            // cordoned: by slipway's earlier Job, by an admin, or by someone with no record
            (true, Some("slipway"), None),
            (true, Some("admin"), None),
            (true, None, Some(Admin)),
            (true, Some("garbage"), Some(Admin)),
        ];
        for (unschedulable, record, want) in cases {
            assert_eq!(
                record_at_start(&node(unschedulable, record)),
                want,
                "unschedulable {unschedulable}, record {record:?}"
            );
        }
    }

    #[test]
    fn an_admins_cordon_stays_and_any_other_goes() {
        assert!(may_uncordon(&node(true, Some("slipway"))));
        assert!(may_uncordon(&node(true, None)), "SUC's rollout: as SUC");
        assert!(!may_uncordon(&node(true, Some("admin"))));
        assert!(!may_uncordon(&node(false, Some("slipway"))), "not cordoned");
    }

    #[test]
    fn the_record_goes_with_the_cordon() {
        assert!(forget_after_done(&node(true, Some("slipway")), true));
        assert!(!forget_after_done(&node(true, Some("admin")), false));
        assert!(forget_after_done(&node(false, Some("admin")), false));
        assert!(
            !forget_after_done(&node(true, None), true),
            "nothing to forget"
        );
    }

    #[test]
    fn records_read_back() {
        for owner in [CordonOwner::Slipway, CordonOwner::Admin] {
            assert_eq!(
                CordonOwner::of(&node(true, Some(owner.as_str()))),
                Some(owner)
            );
        }
    }
}
