//! A Plan on a CRD that is not slipway's (SUC's chart's, Rancher's, with `--install-crd=false`)
//! says what that CRD drops: the API server prunes slipway's own fields at admission and its
//! status fields on every write, without an error, so a Plan written with `spec.reboot` would
//! otherwise run without its reboot and say nothing. The condition `FieldsPruned` names what is
//! lost; what the Plan's author wrote and lost is told from the last configuration `kubectl apply`
//! recorded (server-side apply and other clients keep no copy of what was pruned).

use serde_json::Value;

use super::conditions as cond;
use crate::plan::api::{Plan, PlanStatus};

/// The condition, present only while the installed CRD prunes something.
pub const FIELDS_PRUNED: &str = "FieldsPruned";
/// Its reason.
pub const INSTALLED_CRD: &str = "InstalledCRD";
/// Where client-side `kubectl apply` keeps what it applied, pruned fields included.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// How many of the fields not written are named before "and N more".
const NAMED: usize = 6;

/// Sets or removes [`FIELDS_PRUNED`]: `pruned` lists what the installed Plan CRD's schema drops
/// of slipway's (`common::pruning::pruned`); `None` when that is not known (the CRD could not be
/// read), which leaves the condition as it is.
pub fn note(status: &mut PlanStatus, plan: &Plan, pruned: Option<&[String]>, at: cond::Stamp<'_>) {
    let Some(pruned) = pruned else { return };
    if pruned.is_empty() {
        status.conditions.retain(|c| c.type_ != FIELDS_PRUNED);
        return;
    }
    cond::set(
        status,
        at,
        FIELDS_PRUNED,
        cond::TRUE,
        INSTALLED_CRD,
        &message(plan, pruned),
    );
}

fn message(plan: &Plan, pruned: &[String]) -> String {
    let (spec, status): (Vec<&String>, Vec<&String>) =
        pruned.iter().partition(|p| p.starts_with("spec."));
    let applied = (plan.metadata.annotations.as_ref())
        .and_then(|a| a.get(LAST_APPLIED))
        .and_then(|text| serde_json::from_str::<Value>(text).ok());
    let written: Vec<&str> = (spec.iter())
        .filter(|p| applied.as_ref().is_some_and(|a| present(a, p)))
        .map(|p| p.as_str())
        .collect();
    let mut text = String::from("the installed Plan CRD is not slipway's");
    if !written.is_empty() {
        text += &format!(
            ": it dropped {} from this Plan, which runs without them, as SUC would run it",
            written.join(", ")
        );
    } else if !spec.is_empty() {
        let named: Vec<&str> = spec.iter().take(NAMED).map(|p| p.as_str()).collect();
        let more = match spec.len().saturating_sub(NAMED) {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        text += &format!(
            ": it drops slipway's fields ({}{more}) from any Plan that sets them",
            named.join(", ")
        );
    }
    if status.iter().any(|p| p.as_str() == "status.nodes") {
        text += "; it keeps no status.nodes, so the per-node progress is not shown";
    }
    text + "; install slipway's CRD (the default, --install-crd) for them"
}

/// Whether the dotted `path` (`[]`: any item of a list, `{}`: any value of a map) is set in
/// `value`.
fn present(value: &Value, path: &str) -> bool {
    let (head, rest) = path.split_once('.').unwrap_or((path, ""));
    let (name, each) = match head.find(['[', '{']) {
        Some(at) => (&head[..at], &head[at..]),
        None => (head, ""),
    };
    let Some(mut found) = value.get(name).map(|v| vec![v]) else {
        return false;
    };
    for marker in each.as_bytes().chunks(2) {
        found = match marker {
            b"[]" => found
                .iter()
                .filter_map(|v| v.as_array())
                .flatten()
                .collect(),
            b"{}" => (found.iter().filter_map(|v| v.as_object()))
                .flat_map(|m| m.values())
                .collect(),
            _ => return false,
        };
    }
    match rest {
        "" => found.iter().any(|v| !v.is_null()),
        rest => found.iter().any(|v| present(v, rest)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::pruning::pruned;
    use crate::plan::api::crd::plan_crd;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::ObjectMeta;

    fn sucs_crd() -> CustomResourceDefinition {
        serde_saphyr::from_str(include_str!(
            "../../../tests/suc/upgrade.cattle.io_plans.yaml"
        ))
        .expect("SUC's CRD")
    }

    fn applied(text: &str) -> Plan {
        Plan {
            metadata: ObjectMeta {
                name: Some("k3s".into()),
                generation: Some(2),
                annotations: Some([(LAST_APPLIED.to_string(), text.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn sucs_crd_prunes_slipways_fields_and_status_and_slipways_prunes_nothing() {
        let lost = pruned(&plan_crd(), &sucs_crd(), "v1");
        for field in [
            "spec.reboot",
            "spec.failurePolicy",
            "spec.healthChecks",
            "status.nodes",
        ] {
            assert!(lost.iter().any(|l| l == field), "{field} in {lost:?}");
        }
        assert!(
            lost.iter()
                .all(|l| l.starts_with("spec.") || l.starts_with("status."))
        );
        assert!(
            !lost
                .iter()
                .any(|l| l == "spec.upgrade" || l == "status.conditions")
        );
        assert!(pruned(&plan_crd(), &plan_crd(), "v1").is_empty());
    }

    #[test]
    fn the_condition_names_what_the_author_wrote_and_lost() {
        let lost = pruned(&plan_crd(), &sucs_crd(), "v1");
        let plan = applied(
            r#"{"spec":{"concurrency":1,"reboot":{},"failurePolicy":{"action":"Stop"},
                "upgrade":{"image":"x"}}}"#,
        );
        let mut status = PlanStatus::default();
        note(
            &mut status,
            &plan,
            Some(&lost),
            cond::Stamp::new("t0", plan.metadata.generation),
        );
        let c = cond::get(&status, FIELDS_PRUNED).expect("the condition");
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("True", Some(INSTALLED_CRD))
        );
        assert_eq!(c.observed_generation, Some(2));
        let text = c.message.as_deref().unwrap_or_default();
        assert!(
            text.starts_with("the installed Plan CRD is not slipway's: it dropped spec.failurePolicy, spec.reboot from this Plan"),
            "{text}"
        );
        assert!(text.contains("keeps no status.nodes"), "{text}");
        assert!(!text.contains("concurrency"), "{text}");

        // Nothing of slipway's written (or no record of it): the fields it would drop, some.
        let mut status = PlanStatus::default();
        note(
            &mut status,
            &applied("{}"),
            Some(&lost),
            cond::Stamp::new("t0", None),
        );
        let text = cond::message(&status, FIELDS_PRUNED);
        assert!(text.contains("drops slipway's fields ("), "{text}");
        assert!(
            text.contains(" more) from any Plan that sets them"),
            "{text}"
        );

        // slipway's CRD installed since: gone. Not known: left as it is.
        note(&mut status, &plan, None, cond::Stamp::new("t1", None));
        assert!(cond::get(&status, FIELDS_PRUNED).is_some());
        note(&mut status, &plan, Some(&[]), cond::Stamp::new("t1", None));
        assert!(cond::get(&status, FIELDS_PRUNED).is_none());
    }

    #[test]
    fn a_path_is_present_through_lists_and_maps() {
        let v: Value = serde_json::from_str(
            r#"{"spec":{"a":{"b":1},"l":[{"x":null},{"y":2}],"m":{"k":{"z":3}},"n":null}}"#,
        )
        .expect("json");
        assert!(present(&v, "spec.a.b"));
        assert!(present(&v, "spec.l[].y"));
        assert!(!present(&v, "spec.l[].x"), "null is not set");
        assert!(present(&v, "spec.m{}.z"));
        assert!(!present(&v, "spec.n"));
        assert!(!present(&v, "spec.a.c"));
        assert!(!present(&v, "spec.a[].b"), "not a list");
    }
}
