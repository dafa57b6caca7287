//! The ledger a `DisruptionBudget`'s status keeps: every unavailable node of its pool, who holds
//! it, since when and why, with the pool's counts and the limit in force. Pure: the runtime measures
//! the pool and writes what [`status`] returns.

use std::collections::BTreeMap;

use jiff::Timestamp;

use super::api::{DisruptionBudgetStatus, LedgerEntry, ScheduleInForce};
use super::{HOLD_ANNOTATION, PoolState, reason_of};
use crate::common::condition::{Condition, Standing, set_condition, set_standing};
use crate::common::rfc3339;
use crate::node::NodeInfo;
use crate::node::cordon::CORDONED_BY;
use crate::node::holders::Holder;

/// Who holds a node of the pool, as the ledger reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding<'a> {
    pub holder: &'a Holder,
    /// What the holder says about it (a NodeMaintenance's `spec.reason`, say).
    pub message: Option<&'a str>,
}

/// What a budget's status reads.
pub struct LedgerInput<'a> {
    pub pool: &'a PoolState,
    /// The pool's unavailable nodes, by name (nodes the index no longer has are left out).
    pub nodes: &'a BTreeMap<String, &'a NodeInfo>,
    /// The slipway operations holding each node.
    pub holders: &'a BTreeMap<String, Vec<Holding<'a>>>,
    pub old: &'a DisruptionBudgetStatus,
    pub generation: Option<i64>,
}

/// The budget's status now.
pub fn status(input: &LedgerInput<'_>, now: Timestamp) -> DisruptionBudgetStatus {
    let pool = input.pool;
    let now_text = rfc3339(now);
    let since: BTreeMap<(&str, &str), &str> = input
        .old
        .holders
        .iter()
        .map(|e| ((e.node.as_str(), e.holder.as_str()), e.since.as_str()))
        .collect();
    let mut holders = Vec::new();
    for name in &pool.unavailable {
        let Some(node) = input.nodes.get(name) else {
            continue;
        };
        for (holder, reason, message) in causes(node, input.holders.get(name)) {
            let since = since
                .get(&(name.as_str(), holder.as_str()))
                .map_or_else(|| now_text.clone(), |s| s.to_string());
            holders.push(LedgerEntry {
                node: name.clone(),
                holder,
                reason: reason.to_string(),
                since,
                message,
            });
        }
    }
    let unavailable = pool.unavailable.len();
    let allowed = match pool.halt || pool.invalid.is_some() {
        true => 0,
        false => pool.room(),
    };
    DisruptionBudgetStatus {
        observed_generation: input.generation,
        nodes: count(pool.members),
        max_unavailable: count(pool.limit.max),
        unavailable: count(unavailable),
        allowed: count(allowed),
        schedule: pool.limit.schedule.as_ref().map(|s| ScheduleInForce {
            name: s.name.clone(),
            max_unavailable: count(s.max),
            since: rfc3339(s.period.start),
            until: rfc3339(s.period.end),
        }),
        next_change: pool.limit.next_change.map(rfc3339),
        holders,
        conditions: conditions(input, now),
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Why a node is unavailable, one entry per cause: the slipway operations that hold it, or else
/// what made it so by itself.
fn causes(
    node: &NodeInfo,
    holding: Option<&Vec<Holding<'_>>>,
) -> Vec<(String, &'static str, Option<String>)> {
    let ours: Vec<_> = holding
        .into_iter()
        .flatten()
        .filter_map(|h| {
            let reason = reason_of(h.holder)?;
            Some((
                h.holder.key(),
                reason.as_str(),
                h.message.map(str::to_string),
            ))
        })
        .collect();
    if !ours.is_empty() {
        return ours;
    }
    if let Some(hold) = node.annotations.get(HOLD_ANNOTATION) {
        let (who, why) = match hold.split_once(':') {
            Some((who, why)) => (who.trim(), Some(why.trim().to_string())),
            None => (hold.trim(), None),
        };
        return vec![(format!("hold/{who}"), "hold", why)];
    }
    if holding.is_some_and(|h| h.iter().any(|h| *h.holder == Holder::MaintenanceTaint)) {
        let taint = Holder::MaintenanceTaint;
        return vec![(taint.key(), "maintenance", None)];
    }
    if node.unschedulable {
        let by = node
            .annotations
            .get(CORDONED_BY)
            .map(|b| format!("cordoned by {b}"));
        return vec![("cordoned".to_string(), "cordoned", by)];
    }
    vec![("notReady".to_string(), "notReady", None)]
}

fn conditions(input: &LedgerInput<'_>, now: Timestamp) -> Vec<Condition> {
    let pool = input.pool;
    let mut conditions = input.old.conditions.clone();
    let (valid, reason, message) = match &pool.invalid {
        Some(error) => (false, "Invalid", error.as_str()),
        None => (true, "Valid", "the budget is in force"),
    };
    set_condition(
        &mut conditions,
        "Validated",
        valid,
        reason,
        message,
        input.generation,
        now,
    );
    let (reason, message) = match pool.halt {
        true => (
            "Halted",
            "spec.halt is set: no operation starts a node of this pool",
        ),
        false => ("Running", "spec.halt is not set"),
    };
    set_condition(
        &mut conditions,
        "Halted",
        pool.halt,
        reason,
        message,
        input.generation,
        now,
    );
    // A budget is in force once valid, halted or not: halting is what it was told to do.
    let standing = match &pool.invalid {
        Some(error) => Standing::Stalled("Invalid", error.as_str()),
        None => Standing::Ready("Valid", "the budget is in force"),
    };
    set_standing(&mut conditions, standing, input.generation, now);
    conditions
}
