//! The CustomResourceDefinition of `plans.upgrade.cattle.io`.
//!
//! The schema is derived from the Rust types; this module adds what derive attributes cannot say
//! cleanly: the CEL rules for what SUC only checks inside its controller, bounds that keep those rules
//! cheap, and the list-map merge keys of `status.conditions`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use super::Plan;
use crate::common::crd::{
    GO_DURATION_PATTERN, extend, health_check_rules, map_list, positive_duration, push_rule, rule,
    window_rules, with_rules,
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
