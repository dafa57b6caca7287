//! slipway's Plan CRD against SUC v0.20.1's, field by field: every Plan SUC's CRD accepts,
//! slipway's accepts (issue 59: a GitOps repository SUC syncs today must sync unchanged).
//!
//! `tests/suc/upgrade.cattle.io_plans.yaml` is SUC's published CRD, vendored unchanged. At every
//! property of SUC's schema, slipway's must have the property, the same type, and no constraint
//! SUC's lacks (a pattern, a bound, an enum, a required field, a CEL rule). slipway may accept
//! more (a constraint SUC has and slipway does not) and add fields of its own. Every difference
//! that refuses more must be listed in [`DELIBERATE`] (and in COMPATIBILITY.md).

use std::collections::BTreeSet;

use serde_json::Value;

const SUC_PLANS: &str = include_str!("../suc/upgrade.cattle.io_plans.yaml");

/// Where slipway's schema refuses what SUC's accepts, and why.
const DELIBERATE: &[(&str, &str)] = &[(
    ": required spec, which SUC's does not require",
    "a Plan is decoded whole; SUC's own e2e suite and every example write a spec (its upgrade \
     is required whenever it is given)",
)];

/// The constraints that can refuse a value.
const CONSTRAINTS: [&str; 9] = [
    "pattern",
    "maxLength",
    "minLength",
    "maxItems",
    "minItems",
    "minimum",
    "maximum",
    "enum",
    "x-kubernetes-validations",
];

fn schema_of(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

fn names(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn stricter(path: &str, suc: &Value, ours: &Value, out: &mut Vec<String>) {
    if suc["type"] != ours["type"] {
        out.push(format!(
            "{path}: type {} in slipway, {} in SUC's",
            ours["type"], suc["type"]
        ));
    }
    for key in CONSTRAINTS {
        let (s, o) = (&suc[key], &ours[key]);
        let same = match key {
            // An enum refuses less when it lists more.
            "enum" => names(o).is_superset(&names(s)) || o.is_null(),
            _ if s.is_number() && o.is_number() => s.as_f64() == o.as_f64(),
            _ => s == o || o.is_null(),
        };
        if !same {
            out.push(format!("{path}: {key} {o}, which SUC's does not have"));
        }
    }
    for extra in names(&ours["required"]).difference(&names(&suc["required"])) {
        out.push(format!(
            "{path}: required {extra}, which SUC's does not require"
        ));
    }
    let props = |v: &Value| -> BTreeSet<String> {
        v["properties"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    let open = ours["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true);
    // The API server keeps these of every object whatever its schema says.
    let always = ["apiVersion", "kind", "metadata"];
    for name in props(suc) {
        if path.is_empty() && always.contains(&name.as_str()) {
            continue;
        }
        let sub = format!("{path}.{name}");
        match props(ours).contains(&name) {
            true => stricter(
                &sub,
                &suc["properties"][&name],
                &ours["properties"][&name],
                out,
            ),
            false if open => {}
            false => out.push(format!("{sub}: pruned by slipway's schema")),
        }
    }
    for nested in ["items", "additionalProperties"] {
        let (s, o) = (&suc[nested], &ours[nested]);
        if s.is_object() {
            let sub = match nested {
                "items" => format!("{path}[]"),
                _ => format!("{path}.*"),
            };
            stricter(&sub, s, o, out);
        }
    }
}

#[test]
fn slipways_plan_crd_accepts_every_plan_sucs_accepts() {
    let suc: Value = serde_saphyr::from_str(SUC_PLANS).expect("SUC's CRD");
    let ours = serde_json::to_value(slipway::plan::api::crd::plan_crd()).expect("slipway's CRD");
    for key in ["group", "scope"] {
        assert_eq!(ours["spec"][key], suc["spec"][key], "spec.{key}");
    }
    assert_eq!(ours["spec"]["names"]["kind"], suc["spec"]["names"]["kind"]);
    assert_eq!(ours["metadata"]["name"], suc["metadata"]["name"]);
    let mut found = Vec::new();
    stricter("", schema_of(&suc), schema_of(&ours), &mut found);
    crate::deliberate::only_deliberate(
        &found,
        DELIBERATE,
        "SUC v0.20.1's Plan CRD (refusing what it accepts)",
    );
}

/// The strict rules are what the opt-in policy refuses and `slipway validate` reports: none of
/// them is on the CRD slipway installs, each is on the schema `validate` checks.
#[test]
fn the_strict_rules_are_opt_in() {
    let installed = serde_json::to_string(&slipway::plan::api::crd::plan_crd()).expect("CRD");
    let checked =
        serde_json::to_string(&slipway::plan::api::strict::strict_plan_crd()).expect("CRD");
    let policy = slipway::plan::api::strict::strict_plan_policy_yaml().expect("policy");
    let [vap, _binding] = slipway::plan::api::strict::strict_plan_policy();
    let expressions: Vec<&str> = vap["spec"]["validations"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["expression"].as_str())
        .collect();
    for r in slipway::plan::api::strict::strict_rules() {
        let message = serde_json::to_string(&r.message).expect("message");
        assert!(
            !installed.contains(&message),
            "on the installed CRD: {}",
            r.message
        );
        assert!(
            checked.contains(&message),
            "not checked by validate: {}",
            r.message
        );
        assert!(
            expressions.contains(&slipway::plan::api::strict::policy_expression(&r).as_str()),
            "not in the policy: {}",
            r.message
        );
    }
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/components/strict-plans/policy.yaml"
    ))
    .expect("deploy/components/strict-plans/policy.yaml");
    assert_eq!(committed, policy, "regenerate with `just crd`");
}
