//! Offline checks of Plans kept in files: what the API server would reject (the CRD's structural
//! schema and its CEL rules, evaluated with a CEL library), what the controller would refuse
//! ([`crate::plan::core::validate`]), and warnings for the usual mistakes.
//!
//! Nothing here talks to a cluster; `slipway validate` reads the files and prints the findings.

mod controller;
mod cross_plan;
mod documents;
#[cfg(test)]
mod fixtures;
mod rbac;
mod schema;

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use serde_json::Value;

use crate::plan::api::Plan;

pub use cross_plan::may_overlap;
pub use documents::{Document, parse_documents};
pub use schema::{SchemaChecker, SchemaProblem};

use controller::controller_checks;
use cross_plan::cross_plan_checks;

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
    /// The CRD's schema: `kubectl apply` fails.
    Schema,
    /// The opt-in strict policy (deploy/components/strict-plans) refuses it at `kubectl apply`;
    /// without it, the Plan is applied and the controller says why it does not run.
    Strict,
    /// The controller: the Plan is applied but never rolls out (`Validated` is `False`).
    Controller,
    /// A likely mistake that neither rejects.
    Advice,
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

/// How strict the checks are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// A Secret that a Plan mounts must be among the inputs: its absence is an error (the
    /// controller's verdict on a cluster without it) rather than a warning. Off by default: in
    /// Git, Secrets are usually sealed or kept elsewhere, and reach the cluster another way.
    pub require_secrets: bool,
}

/// Checks every Plan of the inputs with the default [`Options`]; see [`lint_with`].
pub fn lint(checker: &SchemaChecker, inputs: &[Input<'_>], now: Timestamp) -> Vec<FileFinding> {
    lint_with(checker, inputs, now, Options::default())
}

/// Checks every Plan of the inputs; other kinds are skipped, Secrets are used for the controller's
/// checks. `now` is when "a window that never opens" is judged.
pub fn lint_with(
    checker: &SchemaChecker,
    inputs: &[Input<'_>],
    now: Timestamp,
    options: Options,
) -> Vec<FileFinding> {
    let secrets = secrets_of(inputs);
    let mut out = Vec::new();
    let mut plans: Vec<(&Input<'_>, Plan)> = Vec::new();
    for input in inputs {
        let (found, plan) = lint_plan(checker, input, &secrets, now, options);
        out.extend(found.into_iter().map(|f| in_file(input.file, f)));
        plans.extend(plan.map(|p| (input, p)));
    }
    cross_plan_checks(&plans, &mut out);
    rbac::health_check_access(&plans, inputs, &mut out);
    out
}

/// The Secrets among the inputs, by namespace and name.
fn secrets_of(inputs: &[Input<'_>]) -> BTreeMap<(String, String), Secret> {
    let mut secrets = BTreeMap::new();
    for input in inputs {
        if input.doc.kind() == "Secret"
            && let Ok(secret) = crate::plan::core::secret::from_manifest(&input.doc.value)
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
    options: Options,
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
        let source = source_of(p.severity, p.source());
        found.push(mk(source, p.severity, &path, p.message));
    }
    // What the strict policy alone refuses is applied by default: the controller's checks follow.
    if (found.iter()).any(|f| f.severity == Severity::Error && f.source == Source::Schema) {
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
    controller_checks(&plan, secrets, now, options, &mut |s, p, m| {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::core::lint::fixtures::*;

    #[test]
    fn a_clean_plan_has_no_findings() {
        assert_eq!(findings(PLAN), vec![]);
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
    fn a_silence_that_would_silence_everything_is_an_error_on_its_field() {
        let silence = |value: &str| {
            format!(
                "{PLAN}  disruption:\n    silence:\n      matchers:\n      - name: instance\n        value: \"{value}\"\n        isRegex: true\n"
            )
        };
        let f = findings(&silence(".*"));
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].severity, Severity::Error);
        assert_eq!(f[0].field, "spec.disruption.silence.matchers");
        assert!(f[0].message.contains("would match every alert"), "{f:?}");
        let f = findings(&silence("(unclosed"));
        assert_eq!(f[0].field, "spec.disruption.silence.matchers.value");
        assert_eq!(findings(&silence("$(NODE_NAME)")), vec![]);
    }
}
