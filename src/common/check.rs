//! Health checks on any resource: a resource (apiVersion, kind, namespace, a name or a label
//! selector) and a CEL expression over it that must hold before an operation takes its next node.
//! Pure: the shell reads the objects ([`CheckRead`]); this module evaluates them and keeps the
//! checks' status ([`gate`]).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::common::Extra;
use crate::common::duration::GoDuration;
use crate::common::selector::Selector;

mod cost;
pub use cost::{MAX_COST, UNKNOWN_SIZE};

/// One health check (a slipway extension): every object it names must satisfy `expr`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckSpec {
    /// The API version of the resource, e.g. `v1`, `apps/v1`, `ceph.rook.io/v1`.
    pub api_version: String,
    /// The kind of the resource, e.g. `ConfigMap`, `Deployment`, `CephCluster`.
    pub kind: String,
    /// The namespace of a namespaced resource; absent: every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The object's name; absent: every object the selector matches (or every object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The objects' labels, instead of a name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
    /// A CEL expression that must be true for every object: the object is `object`, and its
    /// top-level fields are variables too (`status.readyReplicas == spec.replicas`).
    pub expr: String,
    /// How long the check may fail before the failure policy applies (a Go duration); absent:
    /// the check holds new nodes for as long as it fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,

    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// What the shell read for one check.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckRead {
    /// The objects the check names (with a name: exactly one).
    Objects(Vec<Value>),
    /// The API server refused to let slipway read them: the message says what to grant.
    Forbidden(String),
    /// The named object, or the kind itself, does not exist.
    NotFound(String),
    /// Anything else (the API server did not answer, the answer could not be read).
    Failed(String),
    /// Not read: the check fails.
    NotRead,
    /// Not read, and taken to hold: `slipway render` simulates a rollout offline.
    Assumed,
    /// Read and evaluated already, by the shell, off the controller's runtime thread
    /// (`src/runtime/checks.rs`): what [`evaluate`] said, or why it was not let finish.
    Judged(Result<(), String>),
}

/// The status of one check, as operations report it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckStatus {
    /// Which check: `<Kind> <namespace>/<name>`, or the selector.
    pub name: String,
    /// Whether the expression holds for every object.
    pub healthy: bool,
    /// Why it does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Since when it holds, or fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// It failed for longer than its timeout.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub timed_out: bool,
}

/// The name a check goes by in status, events and messages.
pub fn id(check: &HealthCheckSpec) -> String {
    let ns = check
        .namespace
        .as_deref()
        .map(|n| format!("{n}/"))
        .unwrap_or_default();
    match (&check.name, &check.selector) {
        (Some(name), _) => format!("{} {ns}{name}", check.kind),
        (None, Some(sel)) => {
            let text = Selector::from_label_selector(Some(sel))
                .map(|s| s.to_string())
                .unwrap_or_default();
            format!("{} {ns}[{text}]", check.kind)
        }
        (None, None) => format!("{} {ns}*", check.kind),
    }
}

/// The check's timeout; the error names the field (`field` is its path, e.g.
/// `spec.healthChecks[0]`).
pub fn timeout(check: &HealthCheckSpec, field: &str) -> Result<Option<Duration>, String> {
    let Some(text) = check.timeout.as_deref() else {
        return Ok(None);
    };
    match text.parse::<GoDuration>().map(GoDuration::to_std) {
        Ok(Some(d)) if !d.is_zero() => Ok(Some(d)),
        Ok(_) => Err(format!("{field}.timeout must be positive")),
        Err(e) => Err(format!("{field}.timeout is invalid: {e}")),
    }
}

/// Checks what the CRD's rules check, and what they cannot: the expression compiles, the
/// selector parses. The error names the field.
pub fn validate(checks: &[HealthCheckSpec], field: &str) -> Result<(), String> {
    for (i, check) in checks.iter().enumerate() {
        let at = format!("{field}[{i}]");
        if check.api_version.is_empty() || check.kind.is_empty() {
            return Err(format!("{at}: apiVersion and kind are required"));
        }
        if check.name.is_some() && check.selector.is_some() {
            return Err(format!("{at}: set name or selector, not both"));
        }
        if let Err(e) = Selector::from_label_selector(check.selector.as_ref()) {
            return Err(format!("{at}.selector is invalid: {e}"));
        }
        let program =
            compile(&check.expr).map_err(|e| format!("{at}.expr does not compile: {e}"))?;
        affordable(&program).map_err(|e| format!("{at}.expr is refused: {e}"))?;
        timeout(check, &at)?;
    }
    Ok(())
}

/// Compiles a check's expression (offline: `slipway validate` uses it too).
pub fn compile(expr: &str) -> Result<cel::Program, String> {
    if expr.trim().is_empty() {
        return Err("the expression is empty".into());
    }
    cel::Program::compile(expr).map_err(|e| first_line(&e.to_string()))
}

/// `Ok` when the program's worst case ([`cost::cost`]) is within [`MAX_COST`].
pub fn affordable(program: &cel::Program) -> Result<(), String> {
    let steps = cost::cost(program.expression());
    match steps <= MAX_COST {
        true => Ok(()),
        false => Err(format!(
            "its worst case is {} steps, over the limit of {MAX_COST} (each comprehension runs its body once per element; a list of the object counts as {UNKNOWN_SIZE}): nest fewer comprehensions or use shorter lists",
            match steps {
                u64::MAX => "more than 18446744073709551615".to_string(),
                n => n.to_string(),
            }
        )),
    }
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}

/// `Ok` when the check holds: every object read satisfies the expression (and there is at
/// least one); otherwise why not, in words an operator can act on.
pub fn evaluate(check: &HealthCheckSpec, read: &CheckRead) -> Result<(), String> {
    let objects = match read {
        CheckRead::Objects(objects) => objects,
        CheckRead::Forbidden(why) | CheckRead::NotFound(why) | CheckRead::Failed(why) => {
            return Err(why.clone());
        }
        CheckRead::NotRead => return Err("not read".into()),
        CheckRead::Assumed => return Ok(()),
        CheckRead::Judged(verdict) => return verdict.clone(),
    };
    if objects.is_empty() {
        return Err("no object found".into());
    }
    let program = compile(&check.expr)?;
    // Never evaluated past its budget, whatever validation said (an object written before it).
    affordable(&program)?;
    for object in objects {
        holds(&program, &check.expr, object).map_err(|why| match object_name(object) {
            Some(name) if check.name.is_none() => format!("{name}: {why}"),
            _ => why,
        })?;
    }
    Ok(())
}

/// Why not is said without a value read: a check's message goes into a status that readers of the
/// object see, and the object it read (a Secret, a Pod's spec) may be one they may not read.
fn holds(program: &cel::Program, expr: &str, object: &Value) -> Result<(), String> {
    let mut ctx = cel::Context::default();
    if let Value::Object(fields) = object {
        for (key, value) in fields {
            ctx.add_variable(key.as_str(), value)
                .map_err(|e| e.to_string())?;
        }
    }
    ctx.add_variable("object", object)
        .map_err(|e| e.to_string())?;
    match program.execute(&ctx) {
        Ok(cel::Value::Bool(true)) => Ok(()),
        Ok(cel::Value::Bool(false)) => Err("the expression is false".into()),
        Ok(other) => Err(format!(
            "the expression gave a {}, not a bool",
            other.type_of()
        )),
        Err(e) => Err(format!("the expression failed: {}", failure(&e, expr))),
    }
}

/// An evaluation error in words that name types, never values: cel's own messages print the
/// values involved (`Unsupported binary operator '+': String("..."), Int(1)`). A missing key is
/// named only when the expression spells it (else it may have been computed from a value).
fn failure(e: &cel::ExecutionError, expr: &str) -> String {
    use cel::ExecutionError as E;
    let ty = |v: &cel::Value| v.type_of();
    match e {
        E::InvalidArgumentCount { .. }
        | E::UnexpectedType { .. }
        | E::NoSuchOverload(_)
        | E::UndeclaredReference(_)
        | E::MissingArgumentOrTarget => e.to_string(),
        E::NoSuchKey(key) if expr.contains(key.as_str()) => e.to_string(),
        E::NoSuchKey(_) => "No such key".into(),
        E::UnsupportedTargetType { target } => format!("Invalid argument type: {}", ty(target)),
        E::NotSupportedAsMethod { method, target } if expr.contains(method.as_str()) => {
            format!("Method '{method}' not supported on type '{}'", ty(target))
        }
        E::NotSupportedAsMethod { target, .. } => {
            format!("Method not supported on type '{}'", ty(target))
        }
        E::UnsupportedKeyType(key) => format!("Unable to use a {} as a key", ty(key)),
        E::ValuesNotComparable(a, b) => format!("A {} can not be compared to a {}", ty(a), ty(b)),
        E::UnsupportedBinaryOperator(op, a, b) => {
            format!(
                "Unsupported binary operator '{op}' on a {} and a {}",
                ty(a),
                ty(b)
            )
        }
        E::UnsupportedIndex(index, of) => {
            format!("Cannot use a {} to index a {}", ty(index), ty(of))
        }
        E::FunctionError { function, .. } => format!("Error executing function '{function}'"),
        E::DivisionByZero(_) => "Division by zero".into(),
        E::RemainderByZero(_) => "Remainder by zero".into(),
        E::Overflow(op, a, b) => {
            format!(
                "Overflow from binary operator '{op}' on a {} and a {}",
                ty(a),
                ty(b)
            )
        }
        E::IndexOutOfBounds(_) => "Index out of bounds".into(),
        E::DuplicateKey(_) => "A map repeats a key".into(),
        _ => "an evaluation error".into(),
    }
}

fn object_name(object: &Value) -> Option<String> {
    let meta = object.get("metadata")?;
    let name = meta.get("name")?.as_str()?;
    Some(match meta.get("namespace").and_then(Value::as_str) {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    })
}

/// What the checks decide for the next node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Gate {
    /// The checks' status, one entry per check, in spec order.
    pub status: Vec<HealthCheckStatus>,
    /// The first check that keeps new nodes from starting, and why.
    pub blocking: Option<Blocking>,
    /// When to read the checks again: they are not watched.
    pub recheck: Option<Duration>,
}

/// A check that keeps new nodes from starting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocking {
    pub check: String,
    pub message: String,
    /// It failed past its timeout.
    pub timed_out: bool,
    /// The failure policy stops the rollout on a timed-out check: it stays stopped, even once
    /// the check holds again, until the operation changes or its failures are reset.
    pub stopped: bool,
}

/// How often failing checks are read again.
pub const RECHECK: Duration = Duration::from_secs(10);

/// What the gate reads besides the checks.
#[derive(Debug, Clone, Copy)]
pub struct GateContext<'a> {
    /// The checks' status of the last decision.
    pub old: &'a [HealthCheckStatus],
    pub now: jiff::Timestamp,
    /// A timed-out check stops the rollout (the failure policy ends in Stop or Quarantine).
    pub stops: bool,
    /// The operation changed, or its failures were reset: a stopped gate starts over.
    pub fresh: bool,
    /// The path of the checks in the spec, for messages (`spec.healthChecks`).
    pub field: &'a str,
}

/// Evaluates every check against what was read and keeps when each began to fail.
pub fn gate(checks: &[HealthCheckSpec], reads: &[CheckRead], cx: &GateContext<'_>) -> Gate {
    let old: BTreeMap<&str, &HealthCheckStatus> =
        cx.old.iter().map(|s| (s.name.as_str(), s)).collect();
    let now_text = crate::common::rfc3339(cx.now);
    let mut out = Gate::default();
    for (i, check) in checks.iter().enumerate() {
        let name = id(check);
        let read = reads.get(i).unwrap_or(&CheckRead::NotRead);
        let verdict = evaluate(check, read);
        let before = old.get(name.as_str()).filter(|_| !cx.fresh);
        let since = match before {
            Some(b) if b.healthy == verdict.is_ok() => b.since.clone(),
            _ => None,
        }
        .unwrap_or_else(|| now_text.clone());
        let was_stopped = before.is_some_and(|b| b.timed_out) && cx.stops;
        let limit = timeout(check, &format!("{}[{i}]", cx.field)).unwrap_or(None);
        let overdue = verdict.is_err() && limit.is_some_and(|t| elapsed(&since, cx.now) >= t);
        let timed_out = overdue || was_stopped;
        if verdict.is_err() {
            // Read again soon, and no later than the moment the check times out.
            let left = limit.filter(|_| !overdue).map(|t| {
                t.saturating_sub(elapsed(&since, cx.now))
                    .max(Duration::from_secs(1))
            });
            let next = left.map_or(RECHECK, |l| RECHECK.min(l));
            out.recheck = Some(out.recheck.map_or(next, |r| r.min(next)));
        }
        let message = match (&verdict, was_stopped) {
            (Err(m), _) => Some(m.clone()),
            (Ok(()), true) => Some("it holds now".to_string()),
            (Ok(()), false) => None,
        };
        if out.blocking.is_none() && (verdict.is_err() || was_stopped) {
            out.blocking = Some(Blocking {
                check: name.clone(),
                message: message.clone().unwrap_or_default(),
                timed_out,
                stopped: timed_out && cx.stops,
            });
        }
        out.status.push(HealthCheckStatus {
            name,
            healthy: verdict.is_ok(),
            message,
            since: Some(since),
            timed_out,
        });
    }
    out
}

fn elapsed(since: &str, now: jiff::Timestamp) -> Duration {
    since
        .parse::<jiff::Timestamp>()
        .ok()
        .and_then(|t| Duration::try_from(now.duration_since(t)).ok())
        .unwrap_or_default()
}

/// The resource a kind is read through when nothing better is known: kubectl's guess (lower case,
/// plural by English rules), for offline warnings only.
pub fn guess_resource(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    if lower.ends_with('s')
        || lower.ends_with('x')
        || lower.ends_with('z')
        || lower.ends_with("ch")
        || lower.ends_with("sh")
    {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

/// The API group of an apiVersion (`apps/v1` is `apps`, `v1` is the core group, `""`).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

#[cfg(test)]
mod tests;
