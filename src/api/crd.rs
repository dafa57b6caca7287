//! The CustomResourceDefinition of `plans.upgrade.cattle.io`.
//!
//! The schema is derived from the Rust types; this module adds what derive attributes cannot say
//! cleanly: the CEL rules for what SUC only checks inside its controller, bounds that keep those rules
//! cheap, and the list-map merge keys of `status.conditions`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use super::Plan;

/// Every day name SUC's CRD accepts (kured's names, lower case).
pub const DAY_NAMES: [&str; 28] = [
    "0",
    "su",
    "sun",
    "sunday",
    "1",
    "mo",
    "mon",
    "monday",
    "2",
    "tu",
    "tue",
    "tuesday",
    "3",
    "we",
    "wed",
    "wednesday",
    "4",
    "th",
    "thu",
    "thursday",
    "5",
    "fr",
    "fri",
    "friday",
    "6",
    "sa",
    "sat",
    "saturday",
];

/// The clock formats kured accepts (`15:04`, `15:04:05`, `03:04pm`, `15`, `03pm`, `3pm`) as one RE2 pattern.
pub const TIME_OF_DAY_PATTERN: &str = concat!(
    r"^(([01]?[0-9]|2[0-3])(:[0-5][0-9](:[0-5][0-9]([.,][0-9]+)?)?)?",
    r"|(0[0-9]|1[0-2]):[0-5][0-9](am|pm)",
    r"|(0?[0-9]|1[0-2])(am|pm))$"
);

/// Go's `time.ParseDuration` syntax, as `metav1.Duration` accepts it.
pub const GO_DURATION_PATTERN: &str =
    r"^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$";

/// The CRD that `slipway crd` prints and `slipway run` installs.
pub fn plan_crd() -> CustomResourceDefinition {
    with_rules(Plan::crd(), add_rules)
}

/// `crd` with its schema edited by `add`: what derive attributes cannot say (CEL rules, bounds,
/// list-map keys).
pub(crate) fn with_rules(
    mut crd: CustomResourceDefinition,
    add: impl Fn(&mut Value),
) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            let mut value = serde_json::to_value(&*schema).unwrap_or(Value::Null);
            add(&mut value);
            if let Ok(patched) = serde_json::from_value(value) {
                *schema = patched;
            }
        }
    }
    crd
}

/// The CRD as YAML, exactly as committed in `crds/plans.upgrade.cattle.io.yaml`.
pub fn plan_crd_yaml() -> Result<String, crate::Error> {
    serde_saphyr::to_string(&plan_crd()).map_err(|e| crate::Error::Yaml(e.to_string()))
}

pub(crate) fn rule(rule: &str, message: &str) -> Value {
    json!({ "rule": rule, "message": message })
}

fn add_rules(root: &mut Value) {
    let spec = "/properties/spec";
    push_rule(
        root,
        rule(
            "size(self.metadata.name) <= 63",
            "metadata.name must be at most 63 characters: it becomes the node label plan.upgrade.cattle.io/<name>",
        ),
    );
    spec_rules(root, spec);
    window_rules(root, &format!("{spec}/properties/window"));
    reboot_rules(root, &format!("{spec}/properties/reboot"));
    // Lists merged by key, so that server-side apply and strategic tools treat entries as a map.
    map_list(root, "/properties/status/properties/nodes", "name");
    map_list(root, "/properties/status/properties/conditions", "type");
}

/// `concurrency`, `postCompleteDelay`, `drain` and the containers' images.
fn spec_rules(root: &mut Value, spec: &str) {
    extend(root, &format!("{spec}/properties/concurrency"), |s| {
        push_rule(
            s,
            rule("self >= 0", "spec.concurrency must not be negative"),
        );
    });
    extend(root, &format!("{spec}/properties/postCompleteDelay"), |s| {
        s["pattern"] = json!(GO_DURATION_PATTERN);
        s["maxLength"] = json!(64);
        push_rule(
            s,
            rule(
                "!self.startsWith('-')",
                "spec.postCompleteDelay must not be negative",
            ),
        );
    });
    extend(root, &format!("{spec}/properties/drain"), |s| {
        push_rule(
            s,
            rule(
                "!(has(self.deleteLocalData) && has(self.deleteEmptydirData))",
                "spec.drain cannot specify both deleteEmptydirData and deleteLocalData",
            ),
        );
    });
    for container in ["upgrade", "prepare"] {
        extend(
            root,
            &format!("{spec}/properties/{container}/properties/image"),
            |s| {
                push_rule(
                    s,
                    rule("self != ''", &format!("spec.{container}.image is required")),
                );
            },
        );
    }
}

/// `window`: days and times in kured's formats.
pub(crate) fn window_rules(root: &mut Value, window: &str) {
    extend(root, window, |s| {
        push_rule(
            s,
            rule(
                "has(self.startTime) && has(self.endTime)",
                "spec.window needs both startTime and endTime",
            ),
        );
        push_rule(
            s,
            rule("has(self.days)", "spec.window.days needs at least one day"),
        );
    });
    extend(root, &format!("{window}/properties/days"), |s| {
        s["minItems"] = json!(1);
        s["maxItems"] = json!(28);
        s["items"]["maxLength"] = json!(16);
        let names = DAY_NAMES.map(|d| format!("'{d}'")).join(", ");
        push_rule(
            s,
            rule(
                &format!("self.all(d, d in [{names}])"),
                "spec.window.days: every day must be one of su, mo, tu, we, th, fr, sa, \
                 their three-letter or full names, or 0-6",
            ),
        );
    });
    for field in ["startTime", "endTime"] {
        extend(root, &format!("{window}/properties/{field}"), |s| {
            s["maxLength"] = json!(16);
            push_rule(
                s,
                rule(
                    &format!(
                        "self.matches('{}')",
                        TIME_OF_DAY_PATTERN.replace('\\', "\\\\")
                    ),
                    &format!(
                        "spec.window.{field} must be a time of day such as 15:04, 15:04:05, 03:04pm, 15, 03pm or 3pm"
                    ),
                ),
            );
        });
    }
    extend(root, &format!("{window}/properties/timeZone"), |s| {
        s["maxLength"] = json!(64);
    });
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

/// A list merged by `key`, so that server-side apply and strategic tools treat entries as a map.
pub(crate) fn map_list(root: &mut Value, pointer: &str, key: &str) {
    extend(root, pointer, |s| {
        s["x-kubernetes-list-type"] = json!("map");
        s["x-kubernetes-list-map-keys"] = json!([key]);
    });
}

/// A Go duration field that must be positive, its message naming `field`.
pub(crate) fn positive_duration(root: &mut Value, pointer: &str, field: &str) {
    extend(root, pointer, |s| {
        s["pattern"] = json!(GO_DURATION_PATTERN);
        s["maxLength"] = json!(64);
        push_rule(
            s,
            rule(
                "!self.startsWith('-') && self.matches('[1-9]')",
                &format!("{field} must be a positive duration such as 15m"),
            ),
        );
    });
}

pub(crate) fn extend(root: &mut Value, pointer: &str, f: impl FnOnce(&mut Value)) {
    match root.pointer_mut(pointer) {
        Some(schema) => f(schema),
        // The types and this list are edited together; a stale path must fail loudly in the CRD test.
        None => panic!("CRD schema has no {pointer}"),
    }
}

pub(crate) fn push_rule(schema: &mut Value, rule: Value) {
    let rules = &mut schema["x-kubernetes-validations"];
    if !rules.is_array() {
        *rules = json!([]);
    }
    if let Some(list) = rules.as_array_mut() {
        list.push(rule);
    }
}
