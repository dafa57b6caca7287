//! The strict checks of a Plan: what SUC v0.20.1's CRD accepts but no Plan can run with, refused
//! at `kubectl apply` only when an operator opts in.
//!
//! slipway's CRD accepts every Plan SUC's accepts (a GitOps repository SUC syncs today must sync
//! unchanged: one refused object fails the whole sync), and the controller reports these Plans as
//! SUC does, in `Validated` or `Complete`. The same rules, one list, are also
//! - a ValidatingAdmissionPolicy and its binding ([`strict_plan_policy`], shipped as
//!   `deploy/components/strict-plans` and the chart's `strictPlans.enabled`), which an operator
//!   installs to refuse such Plans at admission, each message naming the field;
//! - CEL rules on the CRD's schema ([`strict_plan_crd`]), which `slipway validate` evaluates, so
//!   that a pipeline finds them before a cluster does.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::{Value, json};

use crate::common::crd::{GO_DURATION_PATTERN, TIME_OF_DAY_PATTERN, push_rule, rule, with_rules};

/// The name of the policy and of its binding.
pub const POLICY_NAME: &str = "slipway-strict-plans";

/// One strict rule: a CEL expression over `self`, the field at `path` (the object for an empty
/// path), which holds whenever the field is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StrictRule {
    pub path: &'static [&'static str],
    pub rule: String,
    pub message: String,
}

fn strict(path: &'static [&'static str], rule: &str, message: &str) -> StrictRule {
    StrictRule {
        path,
        rule: rule.to_string(),
        message: message.to_string(),
    }
}

/// A pattern as a CEL string literal.
fn quoted(pattern: &str) -> String {
    format!("'{}'", pattern.replace('\\', "\\\\"))
}

/// Every strict rule, in the order SUC's own checks come (then slipway's).
pub fn strict_rules() -> Vec<StrictRule> {
    let clock = |field: &str| {
        format!(
            "spec.window.{field} must be a time of day such as 15:04, 15:04:05, 03:04pm, 15, 03pm or 3pm"
        )
    };
    vec![
        strict(
            &["spec", "drain"],
            "!(has(self.deleteLocalData) && has(self.deleteEmptydirData))",
            "spec.drain cannot specify both deleteEmptydirData and deleteLocalData",
        ),
        strict(
            &["spec", "window"],
            "has(self.startTime) && has(self.endTime)",
            "spec.window needs both startTime and endTime",
        ),
        strict(
            &["spec", "window"],
            "has(self.days)",
            "spec.window.days needs at least one day",
        ),
        strict(
            &["spec", "window", "startTime"],
            &format!("self.matches({})", quoted(TIME_OF_DAY_PATTERN)),
            &clock("startTime"),
        ),
        strict(
            &["spec", "window", "endTime"],
            &format!("self.matches({})", quoted(TIME_OF_DAY_PATTERN)),
            &clock("endTime"),
        ),
        strict(
            &["spec", "postCompleteDelay"],
            &format!("self.matches({})", quoted(GO_DURATION_PATTERN)),
            "spec.postCompleteDelay must be a duration such as 30s or 5m",
        ),
        strict(
            &["spec", "postCompleteDelay"],
            "!self.startsWith('-')",
            "spec.postCompleteDelay must not be negative",
        ),
        strict(
            &[],
            "size(self.metadata.name) <= 63",
            "metadata.name must be at most 63 characters: it becomes the node label plan.upgrade.cattle.io/<name>",
        ),
        strict(
            &["spec", "concurrency"],
            "self >= 0",
            "spec.concurrency must not be negative",
        ),
        strict(
            &["spec", "upgrade", "image"],
            "self != ''",
            "spec.upgrade.image is required",
        ),
        strict(
            &["spec", "prepare", "image"],
            "self != ''",
            "spec.prepare.image is required",
        ),
    ]
}

/// slipway's Plan CRD with the strict rules on its schema: what `slipway validate` checks.
pub fn strict_plan_crd() -> CustomResourceDefinition {
    with_rules(super::crd::plan_crd(), |root| {
        for r in strict_rules() {
            let pointer: String = r.path.iter().map(|p| format!("/properties/{p}")).collect();
            if let Some(schema) = root.pointer_mut(&pointer) {
                push_rule(schema, rule(&r.rule, &r.message));
            }
        }
    })
}

/// The rule as a policy's expression over `object`: true when a field on the way is not set.
pub fn policy_expression(r: &StrictRule) -> String {
    let mut field = "object".to_string();
    let mut unset = Vec::new();
    for p in r.path {
        field = format!("{field}.{p}");
        unset.push(format!("!has({field})"));
    }
    let body = replace_self(&r.rule, &field);
    match unset.is_empty() {
        true => body,
        false => format!("{} || ({body})", unset.join(" || ")),
    }
}

/// `rule` with every `self` identifier (not one inside a string literal or a longer name) read
/// as `field`.
fn replace_self(rule: &str, field: &str) -> String {
    let mut out = String::with_capacity(rule.len() + field.len());
    let mut quote: Option<char> = None;
    let mut rest = rule;
    while let Some(c) = rest.chars().next() {
        let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        let after_ident = out.chars().last().is_some_and(ident);
        if quote.is_none() && !after_ident && rest.starts_with("self") {
            let next = rest[4..].chars().next();
            if !next.is_some_and(ident) {
                out.push_str(field);
                rest = &rest[4..];
                continue;
            }
        }
        match (quote, c) {
            (Some(q), '\\') => {
                out.push(c);
                rest = &rest[1..];
                if let Some(escaped) = rest.chars().next() {
                    out.push(escaped);
                    rest = &rest[escaped.len_utf8()..];
                }
                let _ = q;
                continue;
            }
            (Some(q), c) if c == q => quote = None,
            (None, '\'' | '"') => quote = Some(c),
            _ => {}
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// The opt-in ValidatingAdmissionPolicy and its binding. It judges a Plan when it is created and
/// when its spec changes: a Plan admitted before the policy keeps its finalizer and status writes.
pub fn strict_plan_policy() -> [Value; 2] {
    let labels =
        json!({"app.kubernetes.io/name": "slipway", "app.kubernetes.io/component": "strict-plans"});
    let validations: Vec<Value> = strict_rules()
        .iter()
        .map(|r| {
            json!({
                "expression": policy_expression(r),
                "message": r.message,
                "reason": "Invalid",
            })
        })
        .collect();
    [
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": POLICY_NAME, "labels": labels},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [super::GROUP],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["plans"],
                }]},
                "matchConditions": [{
                    "name": "spec-written",
                    "expression": "oldObject == null || object.spec != oldObject.spec",
                }],
                "validations": validations,
            },
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": POLICY_NAME, "labels": labels},
            "spec": {"policyName": POLICY_NAME, "validationActions": ["Deny"]},
        }),
    ]
}

/// The policy and its binding as YAML, exactly as committed in
/// `deploy/components/strict-plans/policy.yaml`.
pub fn strict_plan_policy_yaml() -> Result<String, crate::Error> {
    let docs = strict_plan_policy()
        .iter()
        .map(|d| serde_saphyr::to_string(d).map_err(|e| crate::Error::Yaml(e.to_string())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(docs.join("---\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_is_read_as_the_field_outside_string_literals() {
        assert_eq!(
            replace_self("!(has(self.a) && has(self.b))", "object.spec.drain"),
            "!(has(object.spec.drain.a) && has(object.spec.drain.b))"
        );
        assert_eq!(
            replace_self("self.matches('self\\'s myself') && itself == self", "x"),
            "x.matches('self\\'s myself') && itself == x"
        );
        assert_eq!(
            replace_self("size(self.metadata.name) <= 63", "object"),
            "size(object.metadata.name) <= 63"
        );
    }

    #[test]
    fn a_rule_holds_when_a_field_on_its_way_is_not_set() {
        let r = strict(&["spec", "window", "endTime"], "self != ''", "m");
        assert_eq!(
            policy_expression(&r),
            "!has(object.spec) || !has(object.spec.window) || !has(object.spec.window.endTime) || (object.spec.window.endTime != '')"
        );
        let root = strict(&[], "size(self.metadata.name) <= 63", "m");
        assert_eq!(policy_expression(&root), "size(object.metadata.name) <= 63");
    }

    /// Every rule compiles, both as the schema's rule and as the policy's expression, and the
    /// policy's expressions judge Plans as the schema's rules do.
    #[test]
    fn the_policy_judges_as_the_schema_rules_do() {
        let env = std::sync::Arc::new(cel::Env::stdlib());
        let plans = [
            json!({"metadata": {"name": "ok"}, "spec": {"upgrade": {"image": "u"}}}),
            json!({"metadata": {"name": "x".repeat(64)}, "spec": {"upgrade": {"image": "u"}}}),
            json!({"metadata": {"name": "p"}, "spec": {"concurrency": -1, "upgrade": {"image": ""}}}),
            json!({"metadata": {"name": "p"}, "spec": {"upgrade": {"image": "u"},
                "drain": {"deleteLocalData": true, "deleteEmptydirData": true},
                "postCompleteDelay": "-30s", "window": {"startTime": "25:00"}}}),
            json!({"metadata": {"name": "p"}, "spec": {"upgrade": {"image": "u"}, "prepare": {"image": ""},
                "postCompleteDelay": "5 minutes", "window": {"days": ["mo"], "startTime": "1am", "endTime": "03:00"}}}),
        ];
        for plan in &plans {
            for r in strict_rules() {
                let field = r.path.iter().try_fold(plan, |v, p| v.get(*p));
                let by_schema = match field {
                    None => true,
                    Some(value) => eval(&env, &r.rule, "self", value),
                };
                let by_policy = eval(&env, &policy_expression(&r), "object", plan);
                assert_eq!(by_schema, by_policy, "{} on {plan}", r.message);
            }
        }
        let failing = |plan: &Value| {
            strict_rules()
                .into_iter()
                .filter(|r| !eval(&env, &policy_expression(r), "object", plan))
                .map(|r| r.message)
                .collect::<Vec<_>>()
        };
        assert!(failing(&plans[0]).is_empty());
        assert_eq!(failing(&plans[2]).len(), 2, "{:?}", failing(&plans[2]));
        assert_eq!(failing(&plans[3]).len(), 5, "{:?}", failing(&plans[3]));
        assert_eq!(failing(&plans[4]).len(), 2, "{:?}", failing(&plans[4]));
    }

    fn eval(env: &std::sync::Arc<cel::Env>, expr: &str, name: &str, value: &Value) -> bool {
        let program = env.compile(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
        let mut ctx = cel::Context::with_env(env.clone());
        ctx.add_variable(name, value.clone())
            .unwrap_or_else(|e| panic!("{expr}: {e}"));
        match program.execute(&ctx) {
            Ok(cel::Value::Bool(b)) => b,
            other => panic!("{expr}: {other:?}"),
        }
    }
}
