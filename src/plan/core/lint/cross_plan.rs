//! Warnings across the Plans of the input: a Plan that another waits for is missing, or exclusive
//! Plans may select the same nodes (where only one of them runs at a time).

use std::collections::BTreeMap;

use crate::common::selector::{Operator, Requirement, Selector};
use crate::plan::api::Plan;

use super::{FileFinding, Finding, Input, Severity, Source, in_file};

pub(super) fn cross_plan_checks(plans: &[(&Input<'_>, Plan)], out: &mut Vec<FileFinding>) {
    let names: std::collections::BTreeSet<(String, &str)> = plans
        .iter()
        .map(|(i, p)| {
            (
                p.metadata.namespace.clone().unwrap_or_default(),
                i.doc.name(),
            )
        })
        .collect();
    for (input, plan) in plans {
        // SUC's images wait for another Plan with `prepare <plan>` (k3s and rke2 agents on servers).
        let args: Vec<&str> = plan
            .spec
            .prepare
            .iter()
            .flat_map(|c| c.args.iter().flatten())
            .map(String::as_str)
            .collect();
        if let [first, waited, ..] = args.as_slice()
            && *first == "prepare"
        {
            let ns = plan.metadata.namespace.clone().unwrap_or_default();
            if !names.contains(&(ns, *waited)) {
                out.push(in_file(
                    input.file,
                    Finding {
                        severity: Severity::Warning,
                        line: input.doc.line_of(&["spec", "prepare", "args"]),
                        object: format!("plan/{}", input.doc.name()),
                        field: "spec.prepare.args".into(),
                        source: Source::Advice,
                        message: format!("waits for plan {waited:?}, which is not in the input"),
                    },
                ));
            }
        }
    }
    let exclusive: Vec<(&Input<'_>, &Plan, Selector)> = plans
        .iter()
        .filter(|(_, p)| p.spec.exclusive == Some(true))
        .filter_map(|(i, p)| {
            Selector::from_label_selector(p.spec.node_selector.as_ref())
                .ok()
                .map(|s| (*i, p, s))
        })
        .collect();
    for (a, (ia, pa, sa)) in exclusive.iter().enumerate() {
        for (ib, pb, sb) in exclusive.iter().skip(a + 1) {
            if pa.metadata.namespace != pb.metadata.namespace || !may_overlap(sa, sb) {
                continue;
            }
            out.push(in_file(
                ia.file,
                Finding {
                    severity: Severity::Warning,
                    line: ia.doc.line_of(&["spec", "nodeSelector"]),
                    object: format!("plan/{}", ia.doc.name()),
                    field: "spec.nodeSelector".into(),
                    source: Source::Advice,
                    message: format!(
                        "may select the same nodes as exclusive plan {:?} ({}:{}): on such a node only one of them runs at a time",
                        ib.doc.name(),
                        ib.file,
                        ib.doc.line
                    ),
                },
            ));
        }
    }
}

/// Whether some set of labels satisfies both selectors: false only when a requirement of one
/// contradicts a requirement of the other on the same key.
pub fn may_overlap(a: &Selector, b: &Selector) -> bool {
    let (Some(ra), Some(rb)) = (a.requirements(), b.requirements()) else {
        return false;
    };
    let all: Vec<&Requirement> = ra.iter().chain(rb).collect();
    let mut by_key: BTreeMap<&str, Vec<&Requirement>> = BTreeMap::new();
    for r in &all {
        by_key.entry(r.key()).or_default().push(r);
    }
    by_key.values().all(|reqs| satisfiable(reqs))
}

fn satisfiable(reqs: &[&Requirement]) -> bool {
    let absent_ok = reqs
        .iter()
        .all(|r| matches!(r.operator(), Operator::NotIn | Operator::DoesNotExist));
    if absent_ok {
        return true;
    }
    // The key must be present: some value must pass every requirement. The only candidates that
    // matter are the values named by positive requirements.
    let mut candidates: Vec<&str> = Vec::new();
    let mut positive = false;
    for r in reqs {
        match r.operator() {
            Operator::Equals | Operator::In => {
                positive = true;
                candidates.extend(r.values().iter().map(String::as_str));
            }
            Operator::DoesNotExist => return false,
            _ => {}
        }
    }
    if !positive {
        // Only Exists and NotIn: some value outside every NotIn list exists.
        return true;
    }
    candidates.iter().any(|v| {
        reqs.iter().all(|r| match r.operator() {
            Operator::Equals | Operator::In => r.values().iter().any(|x| x == v),
            Operator::NotIn => !r.values().iter().any(|x| x == v),
            Operator::Exists => true,
            Operator::DoesNotExist => false,
        })
    })
}

#[cfg(test)]
mod tests {
    use crate::plan::core::lint::fixtures::*;

    #[test]
    fn exclusive_plans_and_prepare() {
        let a = format!("{PLAN}  exclusive: true\n")
            .replace("nodeSelector: {}", "nodeSelector: {matchLabels: {pool: a}}");
        let b = a.replace("name: p", "name: q");
        let c = a
            .replace("name: p", "name: r")
            .replace("pool: a", "pool: b");
        let f = findings(&format!("{a}---\n{b}---\n{c}"));
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].message.contains("exclusive plan \"q\""));
        let prep = format!("{PLAN}  prepare:\n    image: busybox:1\n    args: [prepare, server]\n");
        let f = findings(&prep);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].field, "spec.prepare.args");
    }
}
