//! Offline checks of Plans kept in files: what the API server would reject (the CRD's structural
//! schema and its CEL rules, evaluated with a CEL library), what the controller would refuse
//! ([`crate::plan::core::validate`]), and warnings for the usual mistakes.
//!
//! Nothing here talks to a cluster; `slipway validate` reads the files and prints the findings.

use std::collections::BTreeMap;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use serde_json::Value;

use crate::common::selector::{Operator, Requirement, Selector};
use crate::common::window::TimeWindow;
use crate::plan::api::Plan;

/// The apiVersion of Plans.
pub const API_VERSION: &str = "upgrade.cattle.io/v1";

#[derive(Debug, thiserror::Error)]
pub enum LintError {
    #[error("{line}: not YAML: {message}")]
    Yaml { line: usize, message: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// One problem with one Plan (or one document).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    pub severity: Severity,
    /// 1-based line in the file where the field (or the document) starts.
    pub line: usize,
    /// `plan/<name>`, or the document's kind when it has no name.
    pub object: String,
    /// The field the message is about, e.g. `spec.concurrency`; empty for the whole object.
    pub field: String,
    pub message: String,
    /// Who would report it: the API server, the controller, or only this check.
    pub source: Source,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// The CRD's schema or CEL rules: `kubectl apply` fails.
    Schema,
    /// The controller: the Plan is applied but never rolls out (`Validated` is `False`).
    Controller,
    /// A likely mistake that neither rejects.
    Advice,
}

/// One YAML document of a file.
#[derive(Debug, Clone)]
pub struct Document {
    /// 1-based line of the document's first line in the file.
    pub line: usize,
    pub text: String,
    pub value: Value,
}

impl Document {
    pub fn kind(&self) -> &str {
        self.value.get("kind").and_then(Value::as_str).unwrap_or("")
    }

    pub fn name(&self) -> &str {
        self.value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// The line of a field given as a path of keys, found by looking for each key in turn
    /// below the previous one; the document's line when a key is not found.
    pub fn line_of(&self, path: &[&str]) -> usize {
        let lines: Vec<&str> = self.text.lines().collect();
        let mut at = 0;
        let mut found = 0;
        for key in path {
            let plain = format!("{key}:");
            let hit = lines.iter().enumerate().skip(at).find(|(_, l)| {
                let t = l.trim_start().trim_start_matches("- ");
                t.starts_with(&plain)
                    || t.starts_with(&format!("\"{key}\":"))
                    || t.starts_with(&format!("'{key}':"))
            });
            match hit {
                Some((i, _)) => {
                    found = i;
                    at = i + 1;
                }
                None => break,
            }
        }
        self.line + found
    }
}

/// Splits a multi-document YAML text at `---` lines and parses each non-empty document.
pub fn parse_documents(text: &str) -> Result<Vec<Document>, LintError> {
    let mut chunks: Vec<(usize, String)> = vec![(1, String::new())];
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("---") && line[3..].trim().is_empty() || line.starts_with("--- ") {
            chunks.push((i + 2, String::new()));
            continue;
        }
        if line.starts_with("...") && line[3..].trim().is_empty() {
            continue;
        }
        if let Some((_, chunk)) = chunks.last_mut() {
            chunk.push_str(line);
            chunk.push('\n');
        }
    }
    let mut docs = Vec::new();
    for (line, chunk) in chunks {
        let meaningful = chunk.lines().any(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#')
        });
        if !meaningful {
            continue;
        }
        let value: Value = serde_saphyr::from_str(&chunk).map_err(|e| LintError::Yaml {
            line,
            message: first_line(&e.to_string()),
        })?;
        if value.is_null() {
            continue;
        }
        docs.push(Document {
            line,
            text: chunk,
            value,
        });
    }
    Ok(docs)
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_string()
}

/// A problem found by the schema at a path below the object's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaProblem {
    pub severity: Severity,
    pub path: Vec<String>,
    pub message: String,
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
    /// The checker of the CRD that slipway installs.
    pub fn new() -> Self {
        let crd = crate::plan::api::crd::plan_crd();
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
            _ => {}
        }
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
                Ok(false) => out.push(problem(path, &format!("Invalid value: {message}"))),
                Err(why) => out.push(SchemaProblem {
                    severity: Severity::Warning,
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

/// All documents of all inputs, with where each came from.
pub struct Input<'a> {
    pub file: &'a str,
    pub doc: &'a Document,
}

/// A finding together with the file it is in.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileFinding {
    pub file: String,
    #[serde(flatten)]
    pub finding: Finding,
}

/// Checks every Plan of the inputs; other kinds are skipped, Secrets are used for the controller's
/// checks. `now` is when "a window that never opens" is judged.
pub fn lint(checker: &SchemaChecker, inputs: &[Input<'_>], now: Timestamp) -> Vec<FileFinding> {
    let secrets = secrets_of(inputs);
    let mut out = Vec::new();
    let mut plans: Vec<(&Input<'_>, Plan)> = Vec::new();
    for input in inputs {
        let (found, plan) = lint_plan(checker, input, &secrets, now);
        out.extend(found.into_iter().map(|f| in_file(input.file, f)));
        plans.extend(plan.map(|p| (input, p)));
    }
    cross_plan_checks(&plans, &mut out);
    out
}

/// The Secrets among the inputs, by namespace and name.
fn secrets_of(inputs: &[Input<'_>]) -> BTreeMap<(String, String), Secret> {
    let mut secrets = BTreeMap::new();
    for input in inputs {
        if input.doc.kind() == "Secret"
            && let Ok(secret) = serde_json::from_value::<Secret>(input.doc.value.clone())
            && let Some(name) = secret.metadata.name.clone()
        {
            let ns = secret.metadata.namespace.clone().unwrap_or_default();
            secrets.insert((ns, name), secret);
        }
    }
    secrets
}

/// The findings of one document, and the Plan it holds when it is a Plan the controller would
/// read (for the checks across Plans). Documents that are not SUC Plans have no findings.
fn lint_plan(
    checker: &SchemaChecker,
    input: &Input<'_>,
    secrets: &BTreeMap<(String, String), Secret>,
    now: Timestamp,
) -> (Vec<Finding>, Option<Plan>) {
    let doc = input.doc;
    let api_version = doc
        .value
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    // A Plan of some other API group is not ours to check.
    if doc.kind() != "Plan" || api_version.split('/').next() != Some("upgrade.cattle.io") {
        return (Vec::new(), None);
    }
    let object = if doc.name().is_empty() {
        "plan".to_string()
    } else {
        format!("plan/{}", doc.name())
    };
    let mut found: Vec<Finding> = Vec::new();
    let mk = |source: Source, severity, path: &[&str], message: String| Finding {
        source,
        severity,
        line: doc.line_of(path),
        object: object.clone(),
        field: path.join("."),
        message,
    };
    if api_version != API_VERSION {
        let message = format!("{api_version:?} is not served; Plans are {API_VERSION}");
        found.push(mk(
            Source::Schema,
            Severity::Error,
            &["apiVersion"],
            message,
        ));
        return (found, None);
    }
    if doc.name().is_empty() && doc.value.pointer("/metadata/generateName").is_none() {
        let message = "Required value".into();
        found.push(mk(
            Source::Schema,
            Severity::Error,
            &["metadata", "name"],
            message,
        ));
    }
    for p in checker.check(&doc.value) {
        let path: Vec<&str> = p.path.iter().map(String::as_str).collect();
        found.push(mk(
            source_of(p.severity, Source::Schema),
            p.severity,
            &path,
            p.message,
        ));
    }
    if found.iter().any(|f| f.severity == Severity::Error) {
        return (found, None);
    }
    let plan: Plan = match serde_json::from_value(doc.value.clone()) {
        Ok(p) => p,
        Err(e) => {
            let message = format!("cannot be read: {e}");
            found.push(mk(Source::Schema, Severity::Error, &["spec"], message));
            return (found, None);
        }
    };
    controller_checks(&plan, secrets, now, &mut |s, p, m| {
        found.push(mk(source_of(s, Source::Controller), s, p, m))
    });
    // The schema and the controller may both report the same rule; say it once.
    let mut seen = std::collections::BTreeSet::new();
    found.retain(|f| seen.insert((f.field.clone(), f.message.replace("Invalid value: ", ""))));
    (found, Some(plan))
}

/// Errors come from `source`; warnings are advice whoever gives them.
fn source_of(severity: Severity, source: Source) -> Source {
    match severity {
        Severity::Error => source,
        Severity::Warning => Source::Advice,
    }
}

fn in_file(file: &str, finding: Finding) -> FileFinding {
    FileFinding {
        file: file.to_string(),
        finding,
    }
}

fn controller_checks(
    plan: &Plan,
    secrets: &BTreeMap<(String, String), Secret>,
    now: Timestamp,
    push: &mut impl FnMut(Severity, &[&str], String),
) {
    let spec = &plan.spec;
    let by_name = plan_secrets(plan, secrets, push);
    if let Err(e) = crate::plan::core::validate(plan, &by_name) {
        let field = e
            .split_whitespace()
            .next()
            .unwrap_or("spec")
            .trim_end_matches(':');
        let path: Vec<&str> = if field.starts_with("spec.") {
            field.split('.').collect()
        } else {
            vec!["spec"]
        };
        push(Severity::Error, &path, e.clone());
    }
    match Selector::from_label_selector(spec.node_selector.as_ref()) {
        Err(e) => push(Severity::Error, &["spec", "nodeSelector"], e.to_string()),
        Ok(Selector::Nothing) => push(
            Severity::Warning,
            &["spec"],
            "no nodeSelector: the Plan selects no node ({} selects every node)".into(),
        ),
        Ok(_) => {}
    }
    match spec.concurrency {
        None => push(
            Severity::Warning,
            &["spec"],
            "no concurrency: it defaults to 0 and no node is upgraded".into(),
        ),
        Some(0) => push(
            Severity::Warning,
            &["spec", "concurrency"],
            "0 upgrades no node".into(),
        ),
        _ => {}
    }
    let version = spec.version.as_deref().filter(|v| !v.is_empty());
    let channel = spec.channel.as_deref().filter(|c| !c.is_empty());
    if version.is_none() && channel.is_none() {
        push(
            Severity::Warning,
            &["spec"],
            format!(
                "neither version nor channel: the controller reports {:?}",
                crate::plan::core::ERR_UNRESOLVABLE
            ),
        );
    }
    image_checks(plan, version, push);
    if let Some(w) = &spec.window
        && let Ok(window) = TimeWindow::new(w)
        && window.next_opening(now).is_none()
        && !window.contains(now)
    {
        push(
            Severity::Warning,
            &["spec", "window"],
            "the window never opens".into(),
        );
    }
}

/// The Plan's Secrets by name as the controller would read them. A missing Secret is reported
/// here with a clearer message and stood in for by an empty one, so that the controller's other
/// checks are not hidden behind it.
fn plan_secrets(
    plan: &Plan,
    secrets: &BTreeMap<(String, String), Secret>,
    push: &mut impl FnMut(Severity, &[&str], String),
) -> BTreeMap<String, Secret> {
    let namespace = plan.metadata.namespace.clone().unwrap_or_default();
    let mut by_name = BTreeMap::new();
    for s in plan.spec.secrets.iter().flatten() {
        let key = (namespace.clone(), s.name.clone());
        let found = secrets
            .get(&key)
            .or_else(|| secrets.get(&(String::new(), s.name.clone())));
        if found.is_none() && !s.ignore_updates.unwrap_or(false) {
            push(
                Severity::Error,
                &["spec", "secrets"],
                format!(
                    "secret {:?} not found in the input: the controller does not validate a Plan whose Secret is missing, and the latestHash depends on its content",
                    s.name
                ),
            );
        }
        by_name.insert(s.name.clone(), found.cloned().unwrap_or_default());
    }
    by_name
}

/// Image references the kubelet cannot pull, and untagged images (the controller adds a tag).
fn image_checks(
    plan: &Plan,
    version: Option<&str>,
    push: &mut impl FnMut(Severity, &[&str], String),
) {
    let spec = &plan.spec;
    for (container, c) in [
        ("upgrade", Some(&spec.upgrade)),
        ("prepare", spec.prepare.as_ref()),
    ] {
        let Some(c) = c.filter(|c| !c.image.is_empty()) else {
            continue;
        };
        match crate::plan::core::image::parse(&c.image) {
            None => push(
                Severity::Warning,
                &["spec", container, "image"],
                format!(
                    "{:?} is not a valid image reference: its pods will not start",
                    c.image
                ),
            ),
            Some(r) if r.tag.is_none() && r.digest.is_none() => {
                let runs = match version {
                    Some(v) => crate::plan::core::image::with_latest_tag(
                        &c.image,
                        &crate::plan::core::image::munge_version(v),
                    ),
                    None => format!("{}:<the channel's version>", c.image),
                };
                push(
                    Severity::Warning,
                    &["spec", container, "image"],
                    format!("{:?} has no tag: the controller runs {runs}", c.image),
                );
            }
            Some(_) => {}
        }
    }
}

fn cross_plan_checks(plans: &[(&Input<'_>, Plan)], out: &mut Vec<FileFinding>) {
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
    use super::*;

    const PLAN: &str = "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata:\n  name: p\nspec:\n  concurrency: 1\n  nodeSelector: {}\n  version: v1\n  upgrade:\n    image: busybox:1\n";

    fn findings(text: &str) -> Vec<Finding> {
        let docs = parse_documents(text).expect("yaml");
        let inputs: Vec<Input<'_>> = docs.iter().map(|doc| Input { file: "f", doc }).collect();
        lint(&SchemaChecker::new(), &inputs, Timestamp::UNIX_EPOCH)
            .into_iter()
            .map(|f| f.finding)
            .collect()
    }

    #[test]
    fn every_cel_rule_of_the_crd_compiles() {
        let checker = SchemaChecker::new();
        let rules: Vec<(&str, bool)> = checker.rules().collect();
        // The distinct rule texts of the CRD (some are shared by several fields).
        assert_eq!(rules.len(), 11, "{rules:?}");
        for (rule, ok) in rules {
            assert!(ok, "the CEL library cannot compile {rule}");
        }
    }

    #[test]
    fn a_clean_plan_has_no_findings() {
        assert_eq!(findings(PLAN), vec![]);
    }

    #[test]
    fn cel_rules_reject_and_accept() {
        let bad = PLAN.replace("concurrency: 1", "concurrency: -1");
        let f = findings(&bad);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].field, "spec.concurrency");
        assert_eq!(f[0].source, Source::Schema);
        assert_eq!(f[0].line, 6);
        let window = format!(
            "{PLAN}  window:\n    days: [mo, Funday]\n    startTime: \"3pm\"\n    endTime: \"25:00\"\n"
        );
        let f = findings(&window);
        let fields: Vec<&str> = f.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["spec.window.days", "spec.window.endTime"],
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

    #[test]
    fn controller_checks_and_warnings() {
        let text = PLAN
            .replace("  concurrency: 1\n", "")
            .replace("  nodeSelector: {}\n", "")
            .replace("  version: v1\n", "")
            .replace("busybox:1", "busybox");
        let f = findings(&format!(
            "{text}  secrets:\n  - name: s\n    path: /s\n  window:\n    days: [mo]\n    startTime: \"1\"\n    endTime: \"2\"\n    timeZone: Nowhere/Else\n"
        ));
        let got: Vec<(Severity, Source, &str)> = f
            .iter()
            .map(|f| (f.severity, f.source, f.field.as_str()))
            .collect();
        assert!(
            got.contains(&(Severity::Error, Source::Controller, "spec.window")),
            "{f:?}"
        );
        assert!(
            got.contains(&(Severity::Error, Source::Controller, "spec.secrets")),
            "{f:?}"
        );
        let advice = got.iter().filter(|g| g.1 == Source::Advice).count();
        // No selector, no concurrency, neither version nor channel, an untagged image.
        assert_eq!(advice, 4, "{f:?}");
        // The Secret in the input satisfies the controller.
        let secret = "---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n";
        let f = findings(&format!(
            "{PLAN}  secrets:\n  - name: s\n    path: /s\n{secret}"
        ));
        assert_eq!(f, vec![]);
    }

    #[test]
    fn other_documents_and_versions() {
        let f = findings("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n");
        assert_eq!(f, vec![]);
        let f = findings(&PLAN.replace("upgrade.cattle.io/v1", "upgrade.cattle.io/v2"));
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].field, "apiVersion");
        assert!(parse_documents("a: [\n").is_err());
        let docs = parse_documents(&format!("# c\n---\n{PLAN}---\n\n")).expect("yaml");
        assert_eq!(docs.len(), 1);
        assert_eq!(docs[0].line, 3);
    }

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
