//! The taint on the nodes operations take next (`spec.disruption.preferNoSchedule`, kured's
//! `--prefer-no-schedule-taint`): `slipway.dev/next:PreferNoSchedule`, so that the scheduler
//! prefers other nodes for new pods than those about to be drained. Each decision names its next
//! batch; one chore of the process keeps the taint on their union and off every other node. A
//! node taken (held) is no longer next: the operation's own cordon and drain take over. Pure.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Taint;

use super::change::NodeChange;

/// The taint's key.
pub const NEXT_TAINT: &str = "slipway.dev/next";

/// The taint itself.
pub fn taint() -> Taint {
    Taint {
        key: NEXT_TAINT.into(),
        effect: "PreferNoSchedule".into(),
        ..Default::default()
    }
}

/// The node changes that make the taint follow `next` (the union of every object's next batch):
/// on the nodes next and not `held`, off the `tainted` ones that are not. Nodes the index does
/// not know (`known`) are left alone.
pub fn changes(
    next: &BTreeSet<String>,
    held: &BTreeSet<String>,
    tainted: &BTreeSet<String>,
    known: impl Fn(&str) -> bool,
) -> Vec<NodeChange> {
    let wanted: BTreeSet<&String> = next.iter().filter(|n| !held.contains(*n)).collect();
    let add = (wanted.iter())
        .filter(|n| !tainted.contains(**n) && known(n))
        .map(|n| NodeChange::of(n).add_taint(taint()));
    let remove = (tainted.iter())
        .filter(|n| !wanted.contains(n))
        .map(|n| NodeChange::of(n).remove_taint(NEXT_TAINT));
    add.chain(remove).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn summary(changes: &[NodeChange]) -> Vec<(String, bool)> {
        (changes.iter())
            .map(|c| (c.node.clone(), c.taint_edits[NEXT_TAINT].is_some()))
            .collect()
    }

    #[test]
    fn the_taint_follows_the_next_nodes_and_leaves_the_taken_ones() {
        let next = set(&["n2", "n3", "n4"]);
        let held = set(&["n3"]);
        let tainted = set(&["n1", "n3", "n4"]);
        let c = changes(&next, &held, &tainted, |_| true);
        assert_eq!(
            summary(&c),
            [
                ("n2".into(), true),
                ("n1".into(), false),
                ("n3".into(), false)
            ]
        );
        let added = &c[0].taint_edits[NEXT_TAINT];
        assert_eq!(
            added.as_ref().map(|t| t.effect.as_str()),
            Some("PreferNoSchedule")
        );
    }

    #[test]
    fn nothing_changes_when_the_taint_is_where_it_should_be() {
        let next = set(&["n1"]);
        assert!(changes(&next, &set(&[]), &set(&["n1"]), |_| true).is_empty());
        // A node the index does not know is not tainted (it is gone, or not yet seen).
        assert!(changes(&next, &set(&[]), &set(&[]), |_| false).is_empty());
    }
}
