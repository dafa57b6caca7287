//! What the API server would reject: the CRD's structural schema and its CEL rules, evaluated
//! with a CEL library; a rule the library cannot evaluate is reported, never taken as passed.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use super::documents::first_line;
use super::{Severity, Source};

/// A problem found by the schema at a path below the object's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaProblem {
    pub severity: Severity,
    pub path: Vec<String>,
    pub message: String,
    /// Found by a CEL rule. The Plan CRD slipway installs has none (src/plan/api/crd.rs): on its
    /// checker's schema, the CEL rules are the opt-in strict ones.
    pub by_rule: bool,
}

impl SchemaProblem {
    /// Who refuses it: a CEL rule is one of the opt-in strict ones (see [`SchemaProblem::by_rule`]).
    pub fn source(&self) -> Source {
        match self.by_rule {
            true => Source::Strict,
            false => Source::Schema,
        }
    }
}

/// The CRD's openAPIV3Schema with its CEL rules compiled once.
pub struct SchemaChecker {
    schema: Value,
    env: Arc<cel::Env>,
    rules: BTreeMap<String, Result<cel::Program, String>>,
    patterns: BTreeMap<String, Result<regex::Regex, String>>,
}

impl Default for SchemaChecker {
    fn default() -> Self {
        Self::new()
    }
}

impl SchemaChecker {
    /// The checker of the CRD that slipway installs, with the opt-in strict rules: a Plan the
    /// strict policy would refuse is one no controller can run as written.
    pub fn new() -> Self {
        let crd = crate::plan::api::strict::strict_plan_crd();
        let schema = crd
            .spec
            .versions
            .iter()
            .find(|v| v.name == "v1")
            .and_then(|v| v.schema.as_ref())
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| serde_json::to_value(s).ok())
            .unwrap_or(Value::Null);
        Self::from_schema(schema)
    }

    pub fn from_schema(schema: Value) -> Self {
        let env = Arc::new(cel::Env::stdlib());
        let mut rules = BTreeMap::new();
        let mut patterns = BTreeMap::new();
        collect_rules(&schema, &env, &mut rules, &mut patterns);
        SchemaChecker {
            schema,
            env,
            rules,
            patterns,
        }
    }

    /// The CEL rules of the schema, with whether the library could compile each.
    pub fn rules(&self) -> impl Iterator<Item = (&str, bool)> {
        self.rules.iter().map(|(r, p)| (r.as_str(), p.is_ok()))
    }

    /// Checks `spec` (what a create or update sends; `status` is ignored by the API server through
    /// the status subresource, and `metadata` is checked by the server itself).
    pub fn check(&self, object: &Value) -> Vec<SchemaProblem> {
        let mut out = Vec::new();
        let Some(spec_schema) = self.schema.pointer("/properties/spec") else {
            return out;
        };
        match object.get("spec") {
            None | Some(Value::Null) => {
                if required(&self.schema).any(|r| r == "spec") {
                    out.push(problem(&[], "spec: Required value"));
                }
            }
            Some(spec) => {
                let mut path = vec!["spec".to_string()];
                self.walk(spec_schema, spec, &mut path, &mut out);
            }
        }
        out
    }

    fn walk(
        &self,
        schema: &Value,
        value: &Value,
        path: &mut Vec<String>,
        out: &mut Vec<SchemaProblem>,
    ) {
        // The API server prunes nulls of fields that are not nullable before validating.
        if value.is_null() {
            return;
        }
        if let Some(message) = type_mismatch(schema, value) {
            out.push(problem(path, &message));
            return;
        }
        match value {
            Value::Object(map) => self.walk_object(schema, map, path, out),
            Value::Array(items) => self.walk_array(schema, items, path, out),
            Value::String(s) => self.check_string(schema, s, path, out),
            Value::Number(n) => check_number(schema, n, path, out),
            _ => {}
        }
        check_not(schema, value, path, out);
        self.check_rules(schema, value, path, out);
    }

    fn walk_object(
        &self,
        schema: &Value,
        map: &serde_json::Map<String, Value>,
        path: &mut Vec<String>,
        out: &mut Vec<SchemaProblem>,
    ) {
        let props = schema.get("properties").and_then(Value::as_object);
        let preserve = schema
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        for r in required(schema) {
            if map.get(r).is_none_or(Value::is_null) {
                path.push(r.to_string());
                out.push(problem(path, "Required value"));
                path.pop();
            }
        }
        for (k, v) in map {
            path.push(k.clone());
            match (
                props.and_then(|p| p.get(k)),
                schema.get("additionalProperties"),
            ) {
                (Some(s), _) => self.walk(s, v, path, out),
                (None, Some(extra)) if extra.is_object() => self.walk(extra, v, path, out),
                (None, _) if preserve => {}
                // kubectl asks for strict field validation by default: unknown fields fail.
                (None, _) => out.push(problem(path, "unknown field")),
            }
            path.pop();
        }
    }

    fn walk_array(
        &self,
        schema: &Value,
        items: &[Value],
        path: &mut Vec<String>,
        out: &mut Vec<SchemaProblem>,
    ) {
        if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
            && (items.len() as u64) < min
        {
            out.push(problem(
                path,
                &format!("Invalid value: must have at least {min} items"),
            ));
        }
        if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
            && (items.len() as u64) > max
        {
            out.push(problem(
                path,
                &format!("Too many: {}: must have at most {max} items", items.len()),
            ));
        }
        if let Some(item_schema) = schema.get("items") {
            for (i, v) in items.iter().enumerate() {
                path.push(i.to_string());
                self.walk(item_schema, v, path, out);
                path.pop();
            }
        }
    }

    fn check_string(&self, schema: &Value, s: &str, path: &[String], out: &mut Vec<SchemaProblem>) {
        if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
            && (s.chars().count() as u64) < min
        {
            out.push(problem(
                path,
                &format!("Invalid value: {s:?}: should be at least {min} chars long"),
            ));
        }
        if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
            && (s.chars().count() as u64) > max
        {
            out.push(problem(
                path,
                &format!("Too long: may not be more than {max} bytes"),
            ));
        }
        if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
            match self
                .patterns
                .get(pattern)
                .cloned()
                .unwrap_or_else(|| regex::Regex::new(pattern).map_err(|e| e.to_string()))
            {
                Ok(re) if !re.is_match(s) => out.push(problem(
                    path,
                    &format!("Invalid value: {s:?}: should match '{pattern}'"),
                )),
                Ok(_) => {}
                Err(e) => out.push(SchemaProblem {
                    severity: Severity::Warning,
                    by_rule: false,
                    path: path.to_vec(),
                    message: format!("pattern {pattern:?} cannot be checked locally: {e}"),
                }),
            }
        }
        if let Some(options) = schema.get("enum").and_then(Value::as_array)
            && !options.iter().any(|o| o.as_str() == Some(s))
        {
            out.push(problem(path, &format!("Unsupported value: {s:?}")));
        }
    }

    fn check_rules(
        &self,
        schema: &Value,
        value: &Value,
        path: &[String],
        out: &mut Vec<SchemaProblem>,
    ) {
        for rule in schema
            .get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let text = rule.get("rule").and_then(Value::as_str).unwrap_or("");
            let message = rule
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| format!("failed rule: {text}"));
            match self.evaluate(text, value) {
                Ok(true) => {}
                Ok(false) => out.push(SchemaProblem {
                    by_rule: true,
                    ..problem(path, &format!("Invalid value: {message}"))
                }),
                Err(why) => out.push(SchemaProblem {
                    severity: Severity::Warning,
                    by_rule: false,
                    path: path.to_vec(),
                    message: format!(
                        "not checked: the CEL rule {text:?} cannot be evaluated locally: {why}"
                    ),
                }),
            }
        }
    }

    fn evaluate(&self, rule: &str, value: &Value) -> Result<bool, String> {
        let program = match self.rules.get(rule) {
            Some(Ok(p)) => p,
            Some(Err(e)) => return Err(e.clone()),
            None => return Err("rule not compiled".into()),
        };
        let mut ctx = cel::Context::with_env(self.env.clone());
        ctx.add_variable("self", value.clone())
            .map_err(|e| e.to_string())?;
        match program.execute(&ctx) {
            Ok(cel::Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("the rule returned {other:?}, not a bool")),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// `minimum`, as the API server words it.
fn check_number(
    schema: &Value,
    n: &serde_json::Number,
    path: &[String],
    out: &mut Vec<SchemaProblem>,
) {
    if let (Some(min), Some(v)) = (schema.get("minimum").and_then(Value::as_f64), n.as_f64())
        && v < min
    {
        out.push(problem(
            path,
            &format!("Invalid value: {n}: should be greater than or equal to {min}"),
        ));
    }
}

/// `not` with the one shape slipway's schemas use: fields that must not all be set together.
fn check_not(schema: &Value, value: &Value, path: &[String], out: &mut Vec<SchemaProblem>) {
    let Some(not) = schema.get("not") else {
        return;
    };
    let all: Vec<&str> = required(not).collect();
    if !all.is_empty()
        && all
            .iter()
            .all(|f| value.get(f).is_some_and(|v| !v.is_null()))
    {
        out.push(problem(
            path,
            &format!("Invalid value: must not set all of {}", all.join(", ")),
        ));
    }
}

fn collect_rules(
    schema: &Value,
    env: &Arc<cel::Env>,
    rules: &mut BTreeMap<String, Result<cel::Program, String>>,
    patterns: &mut BTreeMap<String, Result<regex::Regex, String>>,
) {
    match schema {
        Value::Object(map) => {
            if let Some(p) = map.get("pattern").and_then(Value::as_str) {
                patterns
                    .entry(p.to_string())
                    .or_insert_with(|| regex::Regex::new(p).map_err(|e| e.to_string()));
            }
            for rule in map
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(text) = rule.get("rule").and_then(Value::as_str) {
                    rules.entry(text.to_string()).or_insert_with(|| {
                        env.compile(text).map_err(|e| first_line(&e.to_string()))
                    });
                }
            }
            for v in map.values() {
                collect_rules(v, env, rules, patterns);
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|v| collect_rules(v, env, rules, patterns)),
        _ => {}
    }
}

fn required(schema: &Value) -> impl Iterator<Item = &str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// Why `value` does not have the schema's type, as the API server words it.
fn type_mismatch(schema: &Value, value: &Value) -> Option<String> {
    let int_or_string = schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let type_ok = match (schema.get("type").and_then(Value::as_str), value) {
        _ if int_or_string => value.is_i64() || value.is_u64() || value.is_string(),
        (None, _) => true,
        (Some("object"), Value::Object(_)) => true,
        (Some("array"), Value::Array(_)) => true,
        (Some("string"), Value::String(_)) => true,
        (Some("boolean"), Value::Bool(_)) => true,
        (Some("integer"), Value::Number(n)) => n.is_i64() || n.is_u64(),
        (Some("number"), Value::Number(_)) => true,
        _ => false,
    };
    if type_ok {
        return None;
    }
    let want = if int_or_string {
        "integer or string"
    } else {
        schema.get("type").and_then(Value::as_str).unwrap_or("?")
    };
    Some(format!(
        "Invalid value: must be of type {want}, not {}",
        type_name(value)
    ))
}

fn problem(path: &[String], message: &str) -> SchemaProblem {
    SchemaProblem {
        severity: Severity::Error,
        path: path.to_vec(),
        message: message.to_string(),
        by_rule: false,
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::core::lint::Source;
    use crate::plan::core::lint::fixtures::*;

    #[test]
    fn every_cel_rule_of_the_crd_compiles() {
        let checker = SchemaChecker::new();
        let rules: Vec<(&str, bool)> = checker.rules().collect();
        // The distinct rule texts of the CRD (some are shared by several fields).
        assert_eq!(rules.len(), 9, "{rules:?}");
        for (rule, ok) in rules {
            assert!(ok, "the CEL library cannot compile {rule}");
        }
    }

    #[test]
    fn cel_rules_reject_and_accept() {
        let bad = PLAN.replace("concurrency: 1", "concurrency: -1");
        let f = findings(&bad);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].field, "spec.concurrency");
        assert_eq!(f[0].source, Source::Strict);
        assert_eq!(f[0].line, 6);
        let window = format!(
            "{PLAN}  window:\n    days: [mo, Funday]\n    startTime: \"3pm\"\n    endTime: \"25:00\"\n"
        );
        let f = findings(&window);
        let fields: Vec<&str> = f.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["spec.window.days.1", "spec.window.endTime"],
            "{f:?}"
        );
    }

    #[test]
    fn a_rule_the_library_cannot_evaluate_is_reported_not_passed() {
        let schema = serde_json::json!({
            "properties": {"spec": {"type": "object", "x-kubernetes-validations": [
                {"rule": "self.noSuchFunction()", "message": "m"}
            ]}}
        });
        let checker = SchemaChecker::from_schema(schema);
        let problems = checker.check(&serde_json::json!({"spec": {}}));
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].severity, Severity::Warning);
        assert!(problems[0].message.contains("cannot be evaluated locally"));
    }
}
