//! The CustomResourceDefinition of `plans.upgrade.cattle.io`.
//!
//! The schema is derived from the Rust types; this module adds what derive attributes cannot say
//! cleanly: SUC's own schema where it differs from the derived one, the CEL rules of slipway's own
//! fields (with bounds that keep them cheap), and the list-map merge keys of `status.conditions`.
//! What SUC accepts at admission and checks in its controller is accepted here too; the opt-in
//! [`super::strict`] rules refuse it.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use super::Plan;
use crate::common::crd::{
    DAY_NAMES, extend, health_check_rules, map_list, positive_duration, push_rule, rule, with_rules,
};

/// The CRD that `slipway crd` prints and `slipway run` installs.
pub fn plan_crd() -> CustomResourceDefinition {
    with_rules(Plan::crd(), add_rules)
}

/// The CRD as YAML, exactly as committed in `crds/plans.upgrade.cattle.io.yaml`.
pub fn plan_crd_yaml() -> Result<String, crate::Error> {
    serde_saphyr::to_string(&plan_crd()).map_err(|e| crate::Error::Yaml(e.to_string()))
}

fn add_rules(root: &mut Value) {
    let spec = "/properties/spec";
    suc_schema(root, spec);
    reboot_rules(root, &format!("{spec}/properties/reboot"));
    failure_rules(root, &format!("{spec}/properties/failurePolicy"));
    health_check_rules(
        root,
        &format!("{spec}/properties/healthChecks"),
        "spec.healthChecks",
    );
    hook_rules(root, &format!("{spec}/properties/hooks"));
    let disruption = format!("{spec}/properties/disruption");
    crate::node::disruption::crd_rules(root, &disruption, "spec.disruption");
    promotion_rules(root, spec);
    // Lists merged by key, so that server-side apply and strategic tools treat entries as a map.
    map_list(root, "/properties/status/properties/nodes", "name");
    map_list(root, "/properties/status/properties/conditions", "type");
    without_cel(root);
}

/// A Go duration above zero: [`crate::common::crd::GO_DURATION_PATTERN`] with a digit other than 0 and no sign but `+`.
pub const POSITIVE_GO_DURATION_PATTERN: &str = concat!(
    r"^\+?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))*",
    r"([0-9]*[1-9][0-9]*(\.[0-9]*)?|[0-9]*\.[0-9]*[1-9][0-9]*)(ns|us|µs|μs|ms|s|m|h)",
    r"(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))*$"
);

/// The rules of slipway's own fields, as value validations (a pattern, a bound, an enum) instead
/// of CEL. With any CEL rule in a CRD, the API server adds to every refusal by the schema a second
/// cause, `some validation rules were not checked because the object was invalid`, so a Plan SUC's
/// CRD refuses (a day that is no day) would be refused with another message than SUC's, which
/// tools and SUC's own e2e suite read. The rules the shared helpers write are rewritten here; any
/// other fails the CRD's tests.
fn without_cel(schema: &mut Value) {
    if let Some(rules) = schema
        .as_object_mut()
        .and_then(|o| o.remove("x-kubernetes-validations"))
    {
        for r in rules.as_array().into_iter().flatten() {
            let text = r["rule"].as_str().unwrap_or_default();
            match text {
                "!self.startsWith('-') && self.matches('[1-9]')" => {
                    schema["pattern"] = json!(POSITIVE_GO_DURATION_PATTERN)
                }
                "self >= 0" => schema["minimum"] = json!(0),
                "self != ''" => schema["minLength"] = json!(1),
                "self.startsWith('/') && self != '/'" => schema["pattern"] = json!("^/."),
                "self != 'Retry'" => {
                    if let Some(values) = schema["enum"].as_array_mut() {
                        values.retain(|v| v != "Retry");
                    }
                }
                "!(has(self.name) && has(self.selector))" => {
                    schema["not"] = json!({"required": ["name", "selector"]})
                }
                other => panic!("the Plan CRD has a CEL rule with no value validation: {other}"),
            }
        }
    }
    match schema {
        Value::Object(map) => map.values_mut().for_each(without_cel),
        Value::Array(items) => items.iter_mut().for_each(without_cel),
        _ => {}
    }
}

/// `after` names other Plans with positive soaks; `minVersionAge` is a positive duration.
fn promotion_rules(root: &mut Value, spec: &str) {
    positive_duration(
        root,
        &format!("{spec}/properties/minVersionAge"),
        "spec.minVersionAge",
    );
    extend(root, &format!("{spec}/properties/after"), |s| {
        s["maxItems"] = json!(16);
    });
    let item = format!("{spec}/properties/after/items");
    extend(root, &format!("{item}/properties/plan"), |s| {
        s["minLength"] = json!(1);
        s["maxLength"] = json!(63);
    });
    positive_duration(
        root,
        &format!("{item}/properties/soak"),
        "spec.after[].soak",
    );
}

/// A hook is a Job spec, kept whole but for its required `template` (the API server checks the
/// rest when the Job is created; the controller reads it first and names a field it cannot use).
fn hook_rules(root: &mut Value, hooks: &str) {
    for hook in ["pre", "post"] {
        extend(root, &format!("{hooks}/properties/{hook}"), |s| {
            if let Some(o) = s.as_object_mut() {
                o.remove("additionalProperties");
            }
            s["x-kubernetes-preserve-unknown-fields"] = json!(true);
            s["required"] = json!(["template"]);
            s["properties"] = json!({"template": {
                "description": "The Job's pod template.",
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": true
            }});
        });
    }
}

/// Where SUC's fields differ from what the derived schema says: every Plan SUC v0.20.1's CRD
/// accepts is accepted ([`super::strict`] holds the rules it leaves to the controller), and
/// `tests/offline/suc_crd.rs` compares the two schemas field by field.
fn suc_schema(root: &mut Value, spec: &str) {
    // SUC's day names, as SUC's schema lists them (its e2e suite expects `never` refused here).
    extend(
        root,
        &format!("{spec}/properties/window/properties/days"),
        |s| {
            s["minItems"] = json!(1);
            s["items"]["enum"] = json!(DAY_NAMES);
        },
    );
    // Kubernetes' LocalObjectReference: a name SUC's schema defaults to "" rather than requires.
    let mut references = vec![format!("{spec}/properties/imagePullSecrets/items")];
    for container in ["upgrade", "prepare"] {
        let c = format!("{spec}/properties/{container}/properties");
        references.push(format!("{c}/envFrom/items/properties/configMapRef"));
        references.push(format!("{c}/envFrom/items/properties/secretRef"));
        references.push(format!(
            "{c}/envs/items/properties/valueFrom/properties/configMapKeyRef"
        ));
        references.push(format!(
            "{c}/envs/items/properties/valueFrom/properties/secretKeyRef"
        ));
    }
    for pointer in references {
        extend(root, &pointer, |s| {
            if let Some(required) = s.get_mut("required").and_then(Value::as_array_mut) {
                required.retain(|r| r != "name");
                if required.is_empty() {
                    s.as_object_mut().map(|o| o.remove("required"));
                }
            }
            s["properties"]["name"]["default"] = json!("");
        });
    }
}

/// `reboot`: positive timeouts, an absolute sentinel directory, a non-empty image.
fn reboot_rules(root: &mut Value, reboot: &str) {
    for (path, field) in [
        (
            format!("{reboot}/properties/timeout"),
            "spec.reboot.timeout",
        ),
        (
            format!("{reboot}/properties/healthGate/properties/timeout"),
            "spec.reboot.healthGate.timeout",
        ),
    ] {
        positive_duration(root, &path, field);
    }
    extend(root, &format!("{reboot}/properties/sentinelPath"), |s| {
        s["maxLength"] = json!(1024);
        push_rule(
            s,
            rule(
                "self.startsWith('/') && self != '/'",
                "spec.reboot.sentinelPath must be an absolute directory other than /",
            ),
        );
    });
    extend(root, &format!("{reboot}/properties/image"), |s| {
        push_rule(s, rule("self != ''", "spec.reboot.image must not be empty"));
    });
}

/// `failurePolicy`: counts not negative, a positive backoff, no retry after the retries.
fn failure_rules(root: &mut Value, policy: &str) {
    for field in ["retries", "maxQuarantined"] {
        extend(root, &format!("{policy}/properties/{field}"), |s| {
            push_rule(
                s,
                rule(
                    "self >= 0",
                    &format!("spec.failurePolicy.{field} must not be negative"),
                ),
            );
        });
    }
    positive_duration(
        root,
        &format!("{policy}/properties/backoff"),
        "spec.failurePolicy.backoff",
    );
    extend(root, &format!("{policy}/properties/then"), |s| {
        push_rule(
            s,
            rule(
                "self != 'Retry'",
                "spec.failurePolicy.then must be Hold, Stop or Quarantine",
            ),
        );
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::crd::GO_DURATION_PATTERN;

    /// The pattern says what the rule it replaces said: Go's syntax, not negative, not zero.
    #[test]
    fn the_positive_duration_pattern_is_the_rule_it_replaces() {
        let syntax = regex::Regex::new(GO_DURATION_PATTERN).expect("syntax");
        let positive = regex::Regex::new(POSITIVE_GO_DURATION_PATTERN).expect("positive");
        let atoms = [
            "", "0", "1", "00", "10", ".", ".5", "0.", "1.5", "0.0", "-", "+", "s", "m", "ms",
            "µs", "h", "x",
        ];
        let mut checked = 0;
        for a in atoms {
            for b in atoms {
                for c in atoms {
                    for d in ["", "s", "1m", "0h"] {
                        let text = format!("{a}{b}{c}{d}");
                        let by_rule = syntax.is_match(&text)
                            && !text.starts_with('-')
                            && text.chars().any(|c| ('1'..='9').contains(&c));
                        assert_eq!(positive.is_match(&text), by_rule, "{text:?}");
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 20_000);
    }

    #[test]
    fn the_plan_crd_has_no_cel() {
        let crd = serde_json::to_string(&plan_crd()).expect("json");
        assert!(!crd.contains("x-kubernetes-validations"));
    }
}
