//! Editing a derived CRD schema: what derive attributes cannot say cleanly (CEL rules, bounds
//! that keep them cheap, list-map keys), written once for every slipway CRD.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

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

/// `crd` with its schema edited by `add`: what derive attributes cannot say (CEL rules, bounds,
/// list-map keys).
pub fn with_rules(
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

pub fn rule(rule: &str, message: &str) -> Value {
    json!({ "rule": rule, "message": message })
}

/// `window`: days and times in kured's formats.
pub fn window_rules(root: &mut Value, window: &str) {
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

/// A list merged by `key`, so that server-side apply and strategic tools treat entries as a map.
pub fn map_list(root: &mut Value, pointer: &str, key: &str) {
    extend(root, pointer, |s| {
        s["x-kubernetes-list-type"] = json!("map");
        s["x-kubernetes-list-map-keys"] = json!([key]);
    });
}

/// A Go duration field that must be positive, its message naming `field`.
/// The rules of a list of health checks at `pointer` (`field` is its path in messages).
pub fn health_check_rules(root: &mut Value, pointer: &str, field: &str) {
    extend(root, pointer, |s| {
        s["maxItems"] = json!(16);
    });
    let item = format!("{pointer}/items");
    extend(root, &item, |s| {
        push_rule(
            s,
            rule(
                "!(has(self.name) && has(self.selector))",
                &format!("{field}[]: set name or selector, not both"),
            ),
        );
    });
    for (key, max) in [("apiVersion", 253), ("kind", 63), ("expr", 2048)] {
        extend(root, &format!("{item}/properties/{key}"), |s| {
            s["minLength"] = json!(1);
            s["maxLength"] = json!(max);
        });
    }
    positive_duration(
        root,
        &format!("{item}/properties/timeout"),
        &format!("{field}[].timeout"),
    );
}

pub fn positive_duration(root: &mut Value, pointer: &str, field: &str) {
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

pub fn extend(root: &mut Value, pointer: &str, f: impl FnOnce(&mut Value)) {
    match root.pointer_mut(pointer) {
        Some(schema) => f(schema),
        // The types and this list are edited together; a stale path must fail loudly in the CRD test.
        None => panic!("CRD schema has no {pointer}"),
    }
}

pub fn push_rule(schema: &mut Value, rule: Value) {
    let rules = &mut schema["x-kubernetes-validations"];
    if !rules.is_array() {
        *rules = json!([]);
    }
    if let Some(list) = rules.as_array_mut() {
        list.push(rule);
    }
}
