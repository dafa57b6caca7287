//! SUC's choice of the nodes a Plan runs on (`SelectConcurrentNodes`), and the drain's pod selector.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use sha2::{Digest, Sha256};

use crate::common::selector::{Operator, Requirement, SelectionError, Selector};
use crate::node::NodeInfo;
use crate::plan::api::{NodeOrder, labels};

/// The `--pod-selector` of the drain container: `!upgrade.cattle.io/controller`, so that drain
/// never evicts the controller or an upgrade pod, and the requirements of `drain.podSelector`.
pub fn drain_pod_selector(pod_selector: Option<&LabelSelector>) -> Result<String, SelectionError> {
    let controller = Requirement::new(labels::CONTROLLER, Operator::DoesNotExist, Vec::new())?;
    let mut selector = Selector::everything().and([controller]);
    if let Some(user) = pod_selector {
        let user = Selector::from_label_selector(Some(user))?;
        if let Some(reqs) = user.requirements() {
            selector = selector.and(reqs.iter().cloned());
        }
    }
    Ok(selector.to_string())
}

/// The eligibility rule of SUC's `SelectConcurrentNodes`, built once per decision: the Plan's
/// selector, a `kubernetes.io/hostname` label, and a `plan.upgrade.cattle.io/<plan>` label that is
/// neither `disabled` nor the latest hash.
#[derive(Debug, Clone)]
pub struct Eligibility {
    base: Selector,
}

impl Eligibility {
    /// Built (and so validated) in SUC's order, also when the selector selects nothing: a plan
    /// name too long for a label key fails here. `applying` is validated as SUC's
    /// `hostname in (applying)` would be, which rejects values that are not label values.
    pub fn new(
        plan_name: &str,
        node_selector: Option<&LabelSelector>,
        latest_hash: &str,
        applying: &[String],
    ) -> Result<Eligibility, SelectionError> {
        let selector = Selector::from_label_selector(node_selector)?;
        Eligibility::of(plan_name, &selector, latest_hash, applying)
    }

    /// [`Eligibility::new`] of a selector already read.
    pub fn of(
        plan_name: &str,
        selector: &Selector,
        latest_hash: &str,
        applying: &[String],
    ) -> Result<Eligibility, SelectionError> {
        let base = (selector.clone())
            .and([Requirement::new(
                labels::HOSTNAME,
                Operator::Exists,
                Vec::new(),
            )?])
            .and([Requirement::new(
                &labels::plan_node_label(plan_name),
                Operator::NotIn,
                vec![labels::DISABLED.to_string(), latest_hash.to_string()],
            )?]);
        if !applying.is_empty() {
            Requirement::new(labels::HOSTNAME, Operator::In, applying.to_vec())?;
        }
        Ok(Eligibility { base })
    }

    pub fn admits(&self, node: &NodeInfo) -> bool {
        self.base.matches(&node.labels)
    }
}

/// The `n` candidates that come first in the Plan's per-hash order, in that order.
pub fn first_in_order<'a>(
    n: usize,
    plan_uid: &str,
    latest_hash: &str,
    candidates: impl IntoIterator<Item = &'a NodeInfo>,
) -> Vec<&'a NodeInfo> {
    first_in_plan_order(n, plan_uid, latest_hash, NodeOrder::Default, candidates)
}

/// Node labels that make a node a control-plane node for [`NodeOrder::ControlPlaneFirst`].
pub const CONTROL_PLANE_LABELS: [&str; 2] = [
    "node-role.kubernetes.io/control-plane",
    "node-role.kubernetes.io/master",
];

/// The `n` candidates that come first in the order `order` asks for, in that order: SUC's
/// per-hash order, within control-plane nodes first and then the others for
/// [`NodeOrder::ControlPlaneFirst`].
pub fn first_in_plan_order<'a>(
    n: usize,
    plan_uid: &str,
    latest_hash: &str,
    order: NodeOrder,
    candidates: impl IntoIterator<Item = &'a NodeInfo>,
) -> Vec<&'a NodeInfo> {
    if n == 0 {
        return Vec::new();
    }
    // One digest per candidate; raw digest bytes order exactly as their lower-case hex does. Only
    // the `n` smallest are kept (a max-heap), so a fleet's candidates are never all held at once.
    let mut first: BinaryHeap<Keyed<'a>> = BinaryHeap::with_capacity(n.saturating_add(1).min(4096));
    for c in candidates {
        let key = plan_order_key(c, plan_uid, latest_hash, order);
        if first.len() < n {
            first.push(Keyed(key, c));
        } else if first.peek().is_some_and(|top| key < top.0) {
            first.pop();
            first.push(Keyed(key, c));
        }
    }
    first.into_sorted_vec().into_iter().map(|k| k.1).collect()
}

/// Every candidate in the order [`first_in_plan_order`] gives, taken lazily: the digests are
/// computed once, then each next candidate comes off a heap, so a decision that walks the order
/// until its slots are full (past nodes a DisruptionBudget refuses) sorts no more than it takes.
pub fn in_plan_order<'a>(
    plan_uid: &str,
    latest_hash: &str,
    order: NodeOrder,
    candidates: impl IntoIterator<Item = &'a NodeInfo>,
) -> PlanOrder<'a> {
    let keyed: Vec<Reverse<Keyed<'a>>> = candidates
        .into_iter()
        .map(|c| Reverse(Keyed(plan_order_key(c, plan_uid, latest_hash, order), c)))
        .collect();
    PlanOrder(BinaryHeap::from(keyed))
}

/// The candidates left in the Plan's order ([`in_plan_order`]).
pub struct PlanOrder<'a>(BinaryHeap<Reverse<Keyed<'a>>>);

impl<'a> Iterator for PlanOrder<'a> {
    type Item = &'a NodeInfo;

    fn next(&mut self) -> Option<&'a NodeInfo> {
        self.0.pop().map(|Reverse(k)| k.1)
    }
}

/// A node's place in the Plan's order: control-plane nodes first if `order` asks, then SUC's
/// digest.
fn plan_order_key(
    c: &NodeInfo,
    plan_uid: &str,
    latest_hash: &str,
    order: NodeOrder,
) -> (u8, [u8; 32]) {
    let rank = match order {
        NodeOrder::ControlPlaneFirst
            if CONTROL_PLANE_LABELS
                .iter()
                .any(|l| c.labels.contains_key(*l)) =>
        {
            0
        }
        _ => 1,
    };
    (rank, order_key(&c.uid, plan_uid, latest_hash))
}

/// A candidate with its order key (rank, then digest), ordered by the key alone.
struct Keyed<'a>((u8, [u8; 32]), &'a NodeInfo);

impl PartialEq for Keyed<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl Eq for Keyed<'_> {}

impl PartialOrd for Keyed<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Keyed<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

/// SUC's `SelectConcurrentNodes`: the nodes that should be running `plan` now, sorted by name.
///
/// A node is eligible by [`Eligibility`]. Eligible nodes whose hostname is in `applying` are all
/// kept, even above `concurrency`; free slots go to the other eligible nodes in ascending order of
/// `sha256(node uid + plan uid + latest_hash)`, a per-plan, per-hash order that every replica and
/// every reconcile agrees on.
pub fn select_concurrent_nodes<'a>(
    plan_name: &str,
    plan_uid: &str,
    node_selector: Option<&LabelSelector>,
    latest_hash: &str,
    concurrency: i64,
    applying: &[String],
    nodes: &'a [NodeInfo],
) -> Result<Vec<&'a NodeInfo>, SelectionError> {
    let eligibility = Eligibility::new(plan_name, node_selector, latest_hash, applying)?;
    let applying: HashSet<&str> = applying.iter().map(String::as_str).collect();
    let mut selected = Vec::new();
    let mut candidates = Vec::new();
    for node in nodes.iter().filter(|n| eligibility.admits(n)) {
        match node.labels.get(labels::HOSTNAME) {
            Some(h) if applying.contains(h.as_str()) => selected.push(node),
            _ => candidates.push(node),
        }
    }
    let free = usize::try_from(concurrency)
        .unwrap_or(0)
        .saturating_sub(selected.len());
    selected.extend(first_in_order(free, plan_uid, latest_hash, candidates));
    selected.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(selected)
}

fn order_key(node_uid: &str, plan_uid: &str, latest_hash: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(node_uid.as_bytes());
    h.update(plan_uid.as_bytes());
    h.update(latest_hash.as_bytes());
    h.finalize().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::selector::fixtures::{expr, labels, sel};

    #[test]
    fn drain_pod_selector_adds_the_controller_requirement() {
        assert_eq!(
            drain_pod_selector(None).expect("valid"),
            "!upgrade.cattle.io/controller"
        );
        assert_eq!(
            drain_pod_selector(Some(&LabelSelector::default())).expect("valid"),
            "!upgrade.cattle.io/controller"
        );
        // The SUC e2e case.
        let sonobuoy = sel(&[], vec![expr("component", "NotIn", &["sonobuoy"])]);
        assert_eq!(
            drain_pod_selector(Some(&sonobuoy)).expect("valid"),
            "component notin (sonobuoy),!upgrade.cattle.io/controller"
        );
        let later = sel(&[("zz", "1")], vec![]);
        assert_eq!(
            drain_pod_selector(Some(&later)).expect("valid"),
            "!upgrade.cattle.io/controller,zz=1"
        );
        assert!(drain_pod_selector(Some(&sel(&[], vec![expr("a", "In", &[])]))).is_err());
    }

    const HASH: &str = "a71d41ca3e2c6b5a1d92efcb9449397b0115d7e83e52a5c0055c484e";
    const PLAN: &str = "k3s-server";
    const PLAN_UID: &str = "plan-uid";

    fn node(name: &str, extra: &[(&str, &str)]) -> NodeInfo {
        let mut l = labels(extra);
        l.entry(labels::HOSTNAME.to_string())
            .or_insert_with(|| name.to_string());
        NodeInfo {
            name: name.into(),
            uid: format!("uid-{name}"),
            labels: l,
            ..Default::default()
        }
    }

    fn names(v: &[&NodeInfo]) -> Vec<String> {
        v.iter().map(|n| n.name.clone()).collect()
    }

    fn select(
        selector: Option<&LabelSelector>,
        concurrency: i64,
        applying: &[&str],
        nodes: &[NodeInfo],
    ) -> Vec<String> {
        let applying: Vec<String> = applying.iter().map(|s| s.to_string()).collect();
        names(
            &select_concurrent_nodes(
                PLAN,
                PLAN_UID,
                selector,
                HASH,
                concurrency,
                &applying,
                nodes,
            )
            .expect("selects"),
        )
    }

    fn hex_key(node: &NodeInfo) -> String {
        crate::common::naming::hex(&order_key(&node.uid, PLAN_UID, HASH))
    }

    #[test]
    fn nil_selector_selects_no_node_and_empty_selects_all() {
        let nodes: Vec<_> = (0..5).map(|i| node(&format!("n{i}"), &[])).collect();
        assert!(select(None, 10, &[], &nodes).is_empty());
        assert_eq!(
            select(Some(&LabelSelector::default()), 10, &[], &nodes),
            vec!["n0", "n1", "n2", "n3", "n4"]
        );
    }

    #[test]
    fn nodes_without_hostname_done_or_disabled_are_skipped() {
        let plan_label = labels::plan_node_label(PLAN);
        let mut no_hostname = node("a", &[]);
        no_hostname.labels.clear();
        let nodes = vec![
            no_hostname,
            node("b", &[(&plan_label, HASH)]),
            node("c", &[(&plan_label, "disabled")]),
            node("d", &[(&plan_label, "old-hash")]),
            node("e", &[]),
        ];
        assert_eq!(
            select(Some(&LabelSelector::default()), 10, &[], &nodes),
            vec!["d", "e"]
        );
    }

    #[test]
    fn the_user_selector_is_applied() {
        let nodes = vec![
            node("a", &[("role", "worker")]),
            node("b", &[("role", "server")]),
            node("c", &[]),
        ];
        let s = sel(&[("role", "worker")], vec![]);
        assert_eq!(select(Some(&s), 10, &[], &nodes), vec!["a"]);
    }

    #[test]
    fn candidates_are_taken_in_sha256_order_and_returned_by_name() {
        let nodes: Vec<_> = (0..20).map(|i| node(&format!("n{i:02}"), &[])).collect();
        let mut by_key: Vec<&NodeInfo> = nodes.iter().collect();
        by_key.sort_by_key(|n| hex_key(n));
        for concurrency in [1, 3, 19, 20, 25] {
            let take = usize::try_from(concurrency).unwrap_or(0).min(nodes.len());
            let mut expected = names(&by_key[..take]);
            expected.sort();
            assert_eq!(
                select(Some(&LabelSelector::default()), concurrency, &[], &nodes),
                expected,
                "concurrency {concurrency}"
            );
        }
    }

    #[test]
    fn input_order_does_not_change_the_choice() {
        let nodes: Vec<_> = (0..30).map(|i| node(&format!("n{i:02}"), &[])).collect();
        let mut reversed = nodes.clone();
        reversed.reverse();
        let all = LabelSelector::default();
        assert_eq!(
            select(Some(&all), 4, &[], &nodes),
            select(Some(&all), 4, &[], &reversed)
        );
    }

    #[test]
    fn applying_nodes_are_kept_even_above_concurrency() {
        let nodes: Vec<_> = (0..6).map(|i| node(&format!("n{i}"), &[])).collect();
        let all = LabelSelector::default();
        assert_eq!(
            select(Some(&all), 1, &["n4", "n2", "n0"], &nodes),
            vec!["n0", "n2", "n4"]
        );
        // Free slots are filled from the others.
        let chosen = select(Some(&all), 4, &["n5"], &nodes);
        assert_eq!(chosen.len(), 4);
        assert!(chosen.contains(&"n5".to_string()));
    }

    #[test]
    fn applying_nodes_must_still_be_eligible() {
        let plan_label = labels::plan_node_label(PLAN);
        let nodes = vec![
            node("done", &[(&plan_label, HASH)]),
            node("other", &[("role", "x")]),
        ];
        let s = sel(&[], vec![expr("role", "DoesNotExist", &[])]);
        assert!(select(Some(&s), 0, &["done", "other"], &nodes).is_empty());
    }

    #[test]
    fn applying_lists_hostnames_not_node_names() {
        let nodes = vec![
            node("node-1.example.com", &[(labels::HOSTNAME, "node-1")]),
            node("node-2.example.com", &[(labels::HOSTNAME, "node-2")]),
        ];
        let all = LabelSelector::default();
        assert_eq!(
            select(Some(&all), 0, &["node-1"], &nodes),
            vec!["node-1.example.com"]
        );
        assert!(select(Some(&all), 0, &["node-2.example.com"], &nodes).is_empty());
    }

    #[test]
    fn zero_or_negative_concurrency_selects_only_applying_nodes() {
        let nodes: Vec<_> = (0..3).map(|i| node(&format!("n{i}"), &[])).collect();
        let all = LabelSelector::default();
        assert!(select(Some(&all), 0, &[], &nodes).is_empty());
        assert!(select(Some(&all), -1, &[], &nodes).is_empty());
        assert_eq!(select(Some(&all), -5, &["n1"], &nodes), vec!["n1"]);
    }

    #[test]
    fn a_plan_name_too_long_for_a_label_key_is_an_error() {
        let nodes = vec![node("n", &[])];
        let long = "p".repeat(64);
        let err = select_concurrent_nodes(
            &long,
            PLAN_UID,
            Some(&LabelSelector::default()),
            HASH,
            1,
            &[],
            &nodes,
        )
        .expect_err("too long");
        assert!(
            err.to_string()
                .contains("name part must be no more than 63 bytes"),
            "{err}"
        );
        // Even when the selector selects nothing, as in SUC.
        assert!(select_concurrent_nodes(&long, PLAN_UID, None, HASH, 1, &[], &nodes).is_err());
        // 63 is fine, and so are dots.
        let ok = "p".repeat(63);
        assert!(select_concurrent_nodes(&ok, PLAN_UID, None, HASH, 1, &[], &nodes).is_ok());
        assert!(select_concurrent_nodes("a.b", PLAN_UID, None, HASH, 1, &[], &nodes).is_ok());
    }

    #[test]
    fn invalid_selectors_and_applying_values_are_errors() {
        let nodes = vec![node("n", &[])];
        let bad = sel(&[], vec![expr("a", "Bogus", &[])]);
        assert_eq!(
            select_concurrent_nodes(PLAN, PLAN_UID, Some(&bad), HASH, 1, &[], &nodes),
            Err(SelectionError::UnknownOperator("Bogus".into()))
        );
        let applying = vec!["not a hostname".to_string()];
        assert!(select_concurrent_nodes(PLAN, PLAN_UID, None, HASH, 1, &applying, &nodes).is_err());
    }

    #[test]
    fn order_key_is_sha256_of_the_concatenation() {
        let n = node("n", &[]);
        let expected = crate::common::naming::hex(&Sha256::digest(
            format!("{}{}{}", n.uid, PLAN_UID, HASH).as_bytes(),
        ));
        assert_eq!(hex_key(&n), expected);
    }

    /// Taken lazily, the order is the one the bounded pick gives, whatever is asked for.
    #[test]
    fn the_lazy_order_is_the_plan_order() {
        let cp = [("node-role.kubernetes.io/control-plane", "true")];
        let nodes: Vec<NodeInfo> = (0..40)
            .map(|i| node(&format!("n{i}"), if i % 7 == 3 { &cp } else { &[] }))
            .collect();
        for order in [NodeOrder::Default, NodeOrder::ControlPlaneFirst] {
            let all = first_in_plan_order(nodes.len(), PLAN_UID, HASH, order, &nodes);
            let lazy: Vec<&NodeInfo> = in_plan_order(PLAN_UID, HASH, order, &nodes).collect();
            assert_eq!(names(&lazy), names(&all), "{order:?}");
            let first: Vec<&NodeInfo> = in_plan_order(PLAN_UID, HASH, order, &nodes)
                .take(5)
                .collect();
            let picked = first_in_plan_order(5, PLAN_UID, HASH, order, &nodes);
            assert_eq!(names(&first), names(&picked), "{order:?}");
        }
        let lazy: Vec<&NodeInfo> =
            in_plan_order(PLAN_UID, HASH, NodeOrder::ControlPlaneFirst, &nodes).collect();
        assert!(lazy[..6].iter().all(|n| n.labels.contains_key(cp[0].0)));
    }
}
