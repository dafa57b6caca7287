//! How `slipway explain` shows what it found: lines for people, or one JSON or YAML document.

use std::fmt::Write as _;

use kube::ResourceExt;
use serde::Serialize;
use slipway::node::budget::DisruptionBudget;
use slipway::node::budget::api::DisruptionBudgetStatus;

use super::{Explanation, NodeView};
use crate::cli::{Output, structured};

/// How many node names a line shows before it counts the rest.
const SHOWN: usize = 8;

fn names(nodes: &[String]) -> String {
    let shown: Vec<&str> = nodes.iter().take(SHOWN).map(String::as_str).collect();
    match nodes.len().saturating_sub(SHOWN) {
        0 => shown.join(", "),
        more => format!("{} (and {more} more)", shown.join(", ")),
    }
}

fn count(n: usize) -> String {
    format!("{n} node{}", if n == 1 { "" } else { "s" })
}

/// The waits and the next move of one object, indented under its line.
fn body(out: &mut String, e: &Explanation) {
    match e.next.is_empty() {
        true => out.push_str("  next: no node starts now\n"),
        false => {
            let _ = writeln!(out, "  next: {}", names(&e.next));
        }
    }
    for g in &e.waiting {
        let until = g
            .until
            .as_ref()
            .map(|u| format!(" (until {u})"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  waiting: {} {}: {}{until}\n    {}",
            count(g.nodes.len()),
            g.reason,
            g.message,
            names(&g.nodes)
        );
    }
    if let Some(at) = &e.next_move {
        let _ = writeln!(
            out,
            "  can move: at {at}, when the first wait ends by the clock"
        );
    }
    match &e.recheck {
        Some(at) => {
            let _ = writeln!(
                out,
                "  looks again: when something changes, at {at} at the latest"
            );
        }
        None => out.push_str("  looks again: when something changes\n"),
    }
}

pub fn object(e: &Explanation, output: Output) -> anyhow::Result<String> {
    if let Some(doc) = structured(e, output)? {
        return Ok(doc);
    }
    let mut out = format!("{}\n", e.object);
    let _ = writeln!(
        out,
        "  holding: {}",
        match e.holding.is_empty() {
            true => "no node".to_string(),
            false => names(&e.holding),
        }
    );
    body(&mut out, e);
    Ok(out.trim_end().to_string())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BudgetDoc<'a> {
    name: String,
    status: &'a DisruptionBudgetStatus,
    /// The operations that wait on this budget for a node.
    waiting: &'a [Explanation],
}

pub fn budget(
    b: &DisruptionBudget,
    status: &DisruptionBudgetStatus,
    waiting: &[Explanation],
    output: Output,
) -> anyhow::Result<String> {
    let doc = BudgetDoc {
        name: b.name_any(),
        status,
        waiting,
    };
    if let Some(text) = structured(&doc, output)? {
        return Ok(text);
    }
    let mut out = format!(
        "disruptionbudget {}: {} of {} unavailable nodes in a pool of {}; {} more may go now{}\n",
        doc.name,
        status.unavailable,
        status.max_unavailable,
        status.nodes,
        status.allowed,
        if b.spec.halt == Some(true) {
            " (halted)"
        } else {
            ""
        }
    );
    if let Some(s) = &status.schedule {
        let _ = writeln!(
            out,
            "  schedule {} in force until {}: at most {}",
            s.name, s.until, s.max_unavailable
        );
    }
    if let Some(at) = &status.next_change {
        let _ = writeln!(out, "  the limit changes next at {at}");
    }
    for c in status
        .conditions
        .iter()
        .filter(|c| c.type_ == "Validated" && c.status == "False")
    {
        let _ = writeln!(out, "  invalid: {}", c.message);
    }
    for e in &status.holders {
        let why = e
            .message
            .as_ref()
            .map(|m| format!(": {m}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {} held by {} ({}, since {}){why}",
            e.node, e.holder, e.reason, e.since
        );
    }
    for e in waiting {
        let _ = writeln!(out, "{} waits on it:", e.object);
        body(&mut out, e);
    }
    Ok(out.trim_end().to_string())
}

pub fn node(v: &NodeView, output: Output) -> anyhow::Result<String> {
    if let Some(doc) = structured(v, output)? {
        return Ok(doc);
    }
    let mut out = format!(
        "node {}: {}, {}\n",
        v.node,
        if v.ready { "Ready" } else { "NotReady" },
        if v.cordoned {
            "cordoned"
        } else {
            "schedulable"
        }
    );
    if let Some(hold) = &v.held_by_annotation {
        let _ = writeln!(out, "  held by the slipway.dev/hold annotation: {hold}");
    }
    match v.holders.is_empty() {
        true => out.push_str("  held by no slipway operation\n"),
        false => {
            let _ = writeln!(out, "  held by: {}", v.holders.join(", "));
        }
    }
    for b in &v.budgets {
        let state = match (&b.invalid, b.halted) {
            (Some(e), _) => format!("invalid: {e}"),
            (None, true) => "halted".to_string(),
            (None, false) => format!("{} of {} unavailable", b.unavailable, b.max_unavailable),
        };
        let _ = writeln!(out, "  disruptionbudget {}: {state}", b.name);
    }
    for o in &v.operations {
        let why = match (&o.reason, &o.message) {
            (Some(r), Some(m)) => format!(": {r}: {m}"),
            _ => String::new(),
        };
        let until = o
            .until
            .as_ref()
            .map(|u| format!(" (until {u})"))
            .unwrap_or_default();
        let _ = writeln!(out, "  {} {} it{why}{until}", o.object, o.does);
    }
    Ok(out.trim_end().to_string())
}
