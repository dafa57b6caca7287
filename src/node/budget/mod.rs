//! The cluster's disruption budgets as decisions read them: which pools a node is in, how many of
//! each pool's nodes may be unavailable now, and whether an operation may start one more.
//!
//! A [`Pool`] is a `DisruptionBudget` read once per generation. Before a decision, the runtime
//! measures each pool ([`Pool::measure`]: its members, which of them are unavailable, the limit in
//! force) and hands the decision a [`Budget`]: the nodes other operations hold against it, and the
//! pools that limit its reason. The decision asks [`Budget::take`] for each node it would start;
//! a node already unavailable costs nothing, an available one takes a unit of room in every pool
//! that selects it. Without budgets, [`Budget::take`] refuses only what another operation holds:
//! exactly the behaviour before budgets existed.

pub mod api;
pub mod ledger;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::NodeInfo;
use super::holders::Holder;
use crate::common::duration::GoDuration;
use crate::common::rfc3339;
use crate::common::schedule::{Cron, Period, Recurring};
use crate::common::selector::Selector;
pub use api::{DisruptionBudget, Reason};

/// On a node: a person or another controller holds it (`<who>` or `<who>: <why>`). Every budget
/// counts it unavailable and no slipway operation starts it; slipway does nothing else to it.
pub const HOLD_ANNOTATION: &str = "slipway.dev/hold";

/// The reason an operation's holder takes nodes for; `None` for holds that are not slipway's.
pub fn reason_of(holder: &Holder) -> Option<Reason> {
    match holder {
        Holder::Plan { .. } => Some(Reason::Upgrade),
        Holder::Maintenance { .. } => Some(Reason::Maintenance),
        Holder::Reboot { .. } => Some(Reason::Reboot),
        Holder::NodeOp { .. } | Holder::NodeOpUpgrade { .. } => Some(Reason::Nodeop),
        Holder::MaintenanceTaint | Holder::Hold { .. } => None,
    }
}

/// A number or a percentage of `total`, percentages rounded up (a PodDisruptionBudget's
/// `maxUnavailable`); never negative.
pub fn scaled(value: &IntOrString, total: usize) -> Result<usize, String> {
    match value {
        IntOrString::Int(n) => usize::try_from(*n).map_err(|_| format!("{n} is negative")),
        IntOrString::String(s) => {
            let pct: usize = s
                .strip_suffix('%')
                .and_then(|p| p.parse().ok())
                .filter(|p| *p <= 100)
                .ok_or_else(|| format!("{s:?} is not a number or a percentage from 0% to 100%"))?;
            Ok((pct * total).div_ceil(100))
        }
    }
}

/// One schedule of a budget, read.
#[derive(Debug, Clone, PartialEq)]
struct Schedule {
    name: String,
    period: Recurring,
    max: IntOrString,
}

/// A `DisruptionBudget` as decisions read it: parsed, or why it cannot be. An invalid budget holds
/// every node it may cover (an error must not open a freeze).
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    pub name: String,
    pub selector: Selector,
    /// `None`: every reason.
    pub reasons: Option<BTreeSet<Reason>>,
    max: IntOrString,
    schedules: Vec<Schedule>,
    pub halt: bool,
    /// Why the budget cannot be read: it then admits nothing.
    pub invalid: Option<String>,
}

impl Pool {
    /// Reads a budget. Errors name the field.
    pub fn new(budget: &DisruptionBudget) -> Pool {
        let spec = &budget.spec;
        let name = budget.metadata.name.clone().unwrap_or_default();
        // Absent, the pool is every node.
        let selector = match &spec.node_selector {
            Some(s) => Selector::from_label_selector(Some(s)),
            None => Ok(Selector::everything()),
        };
        let schedules = spec
            .schedules
            .iter()
            .enumerate()
            .map(|(i, s)| read_schedule(i, s))
            .collect::<Result<Vec<_>, String>>();
        let invalid = match (&selector, &schedules) {
            (Err(e), _) => Some(format!("spec.nodeSelector: {e}")),
            (_, Err(e)) => Some(e.clone()),
            _ => scaled(&spec.max_unavailable, 0)
                .err()
                .map(|e| format!("spec.maxUnavailable: {e}")),
        };
        Pool {
            name,
            // An unreadable selector covers every node: the budget then holds them all.
            selector: selector.unwrap_or_else(|_| Selector::everything()),
            reasons: spec.reasons.as_ref().map(|r| r.iter().copied().collect()),
            max: spec.max_unavailable.clone(),
            schedules: schedules.unwrap_or_default(),
            halt: spec.halt.unwrap_or(false),
            invalid,
        }
    }

    /// Whether an operation taking nodes for `reason` must ask this budget.
    pub fn limits(&self, reason: Reason) -> bool {
        self.reasons.as_ref().is_none_or(|r| r.contains(&reason))
    }

    /// The limit in force at `now` for a pool of `total` nodes, with the schedule that sets it,
    /// and when it changes next.
    pub fn limit(&self, total: usize, now: Timestamp) -> Limit {
        let mut next_change: Option<Timestamp> = None;
        let mut in_force: Option<InForce> = None;
        for s in &self.schedules {
            let max = scaled(&s.max, total).unwrap_or(0);
            let current = s.period.current(now);
            let next = s.period.next(now);
            for t in [current.map(|p| p.end), next.map(|p| p.start)]
                .into_iter()
                .flatten()
            {
                next_change = Some(next_change.map_or(t, |c| c.min(t)));
            }
            if let Some(period) = current
                && in_force.as_ref().is_none_or(|f| max < f.max)
            {
                in_force = Some(InForce {
                    name: s.name.clone(),
                    max,
                    period,
                });
            }
        }
        Limit {
            max: in_force
                .as_ref()
                .map_or_else(|| scaled(&self.max, total).unwrap_or(0), |f| f.max),
            schedule: in_force,
            next_change,
        }
    }

    /// The pool now: its members among `nodes`, which are unavailable (`held`: the nodes any
    /// slipway operation holds), and the limit in force.
    pub fn measure<'a>(
        &self,
        nodes: impl IntoIterator<Item = &'a NodeInfo>,
        held: &BTreeSet<String>,
        now: Timestamp,
    ) -> PoolState {
        self.measure_for(nodes, held, &BTreeSet::new(), now)
    }

    /// The pool as one decision sees it: `held` by others, `mine` by the deciding object alone.
    /// A node of `mine` the decision lets go of ([`Budget::release`]) gives its room back.
    /// Walks every node: the controller keeps [`Members`] instead ([`Pool::measure_kept`]).
    pub fn measure_for<'a>(
        &self,
        nodes: impl IntoIterator<Item = &'a NodeInfo>,
        held: &BTreeSet<String>,
        mine: &BTreeSet<String>,
        now: Timestamp,
    ) -> PoolState {
        let mut members = Members::default();
        let mut matched = BTreeSet::new();
        for n in nodes {
            if self.selector.matches(&n.labels) {
                members.change(self, None, Some(n));
                matched.insert(n.name.as_str());
            }
        }
        self.measure_kept(&members, |n| matched.contains(n), held, mine, now)
    }

    /// [`Pool::measure_for`] from the pool's [`Members`] as kept node by node: costs the held
    /// nodes, not the fleet. `member` says whether a node exists and this pool selects it.
    pub fn measure_kept(
        &self,
        kept: &Members,
        member: impl Fn(&str) -> bool,
        held: &BTreeSet<String>,
        mine: &BTreeSet<String>,
        now: Timestamp,
    ) -> PoolState {
        let mut unavailable = kept.down.clone();
        let mut releasable = BTreeSet::new();
        for n in held.union(mine).filter(|n| member(n)) {
            unavailable.insert(n.clone());
            if !held.contains(n) && !kept.down.contains(n) {
                releasable.insert(n.clone());
            }
        }
        PoolState {
            name: self.name.clone(),
            selector: self.selector.clone(),
            members: kept.count,
            unavailable,
            releasable,
            limit: self.limit(kept.count, now),
            halt: self.halt,
            invalid: self.invalid.clone(),
            reasons: self.reasons.clone(),
        }
    }
}

/// A pool's members as the node index keeps them, node by node: how many nodes its selector
/// matches, and which of those are unavailable by themselves ([`unavailable_by_itself`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Members {
    pub count: usize,
    pub down: BTreeSet<String>,
}

impl Members {
    /// The members of `pool` among `nodes`.
    pub fn of<'a>(pool: &Pool, nodes: impl IntoIterator<Item = &'a NodeInfo>) -> Members {
        let mut members = Members::default();
        for n in nodes {
            members.change(pool, None, Some(n));
        }
        members
    }

    /// A node changed from `old` to `new` (`None`: absent).
    pub fn change(&mut self, pool: &Pool, old: Option<&NodeInfo>, new: Option<&NodeInfo>) {
        let selects = |n: &&NodeInfo| pool.selector.matches(&n.labels);
        if let Some(o) = old.filter(selects) {
            self.count = self.count.saturating_sub(1);
            self.down.remove(&o.name);
        }
        if let Some(n) = new.filter(selects) {
            self.count += 1;
            if unavailable_by_itself(n) {
                self.down.insert(n.name.clone());
            }
        }
    }
}

/// A node unavailable whoever holds it: not Ready, cordoned, or held by [`HOLD_ANNOTATION`].
pub fn unavailable_by_itself(n: &NodeInfo) -> bool {
    !n.ready || n.unschedulable || n.annotations.contains_key(HOLD_ANNOTATION)
}

fn read_schedule(i: usize, s: &api::BudgetSchedule) -> Result<Schedule, String> {
    let field = format!("spec.schedules[{i}]");
    let cron: Cron = s
        .schedule
        .parse()
        .map_err(|e| format!("{field}.schedule: {e}"))?;
    let duration = s
        .duration
        .parse::<GoDuration>()
        .ok()
        .and_then(GoDuration::to_std)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            format!(
                "{field}.duration: {:?} is not a positive duration",
                s.duration
            )
        })?;
    let tz = match s.time_zone.as_deref() {
        None | Some("") | Some("UTC") => TimeZone::UTC,
        Some(name) => TimeZone::get(name)
            .map_err(|_| format!("{field}.timeZone: unknown time zone {name:?}"))?,
    };
    scaled(&s.max_unavailable, 0).map_err(|e| format!("{field}.maxUnavailable: {e}"))?;
    Ok(Schedule {
        name: s.name.clone().unwrap_or_else(|| format!("schedules[{i}]")),
        period: Recurring { cron, duration, tz },
        max: s.max_unavailable.clone(),
    })
}

/// The limit of a pool in force now.
#[derive(Debug, Clone, PartialEq)]
pub struct Limit {
    /// How many nodes may be unavailable.
    pub max: usize,
    /// The schedule that sets it, if one does.
    pub schedule: Option<InForce>,
    /// When a schedule starts or ends next.
    pub next_change: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct InForce {
    pub name: String,
    pub max: usize,
    pub period: Period,
}

/// A pool as measured for one decision.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolState {
    pub name: String,
    selector: Selector,
    pub members: usize,
    /// Unavailable members (with those taken in this decision).
    pub unavailable: BTreeSet<String>,
    /// Members unavailable only because the deciding object holds them.
    releasable: BTreeSet<String>,
    pub limit: Limit,
    pub halt: bool,
    pub invalid: Option<String>,
    reasons: Option<BTreeSet<Reason>>,
}

impl PoolState {
    /// How many more nodes may be taken.
    pub fn room(&self) -> usize {
        self.limit.max.saturating_sub(self.unavailable.len())
    }

    pub fn contains(&self, node: &NodeInfo) -> bool {
        self.selector.matches(&node.labels)
    }

    pub fn limits(&self, reason: Reason) -> bool {
        self.reasons.as_ref().is_none_or(|r| r.contains(&reason))
    }
}

/// The reason of a node that a budget's schedule holds with `maxUnavailable: 0` (a freeze, on
/// purpose, until the schedule's period ends).
pub const FROZEN: &str = "Frozen";

/// Why a budget does not let a node start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Another operation holds the node.
    Held(Holder),
    /// The budget's kill switch is on.
    Halted { budget: String },
    /// The pool has no room: `unavailable` of its nodes are, and `max` may be.
    Full {
        budget: String,
        max: usize,
        unavailable: usize,
        /// The schedule that sets `max`, and when its period ends.
        schedule: Option<(String, Timestamp)>,
    },
    /// The budget cannot be read.
    Invalid { budget: String, error: String },
}

impl Refusal {
    /// A short word for statuses and events. A schedule that allows no node at all is a freeze
    /// its author set, which ends by itself: [`FROZEN`], not the pool's room.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::Held(_) => "HeldByOther",
            Refusal::Halted { .. } => "Halted",
            Refusal::Full {
                max: 0,
                schedule: Some(_),
                ..
            } => FROZEN,
            Refusal::Full { .. } => "DisruptionBudget",
            Refusal::Invalid { .. } => "DisruptionBudgetInvalid",
        }
    }

    /// When the refusal ends by itself, if the clock alone ends it (a schedule's period).
    pub fn until(&self) -> Option<Timestamp> {
        match self {
            Refusal::Full {
                schedule: Some((_, until)),
                ..
            } => Some(*until),
            _ => None,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Held(h) => write!(f, "held by {h}"),
            Refusal::Halted { budget } => {
                write!(f, "disruptionbudget {budget} is halted (spec.halt)")
            }
            Refusal::Full {
                budget,
                max: 0,
                schedule: Some((name, until)),
                ..
            } => write!(
                f,
                "disruptionbudget {budget} is frozen (schedule {name} until {})",
                rfc3339(*until)
            ),
            Refusal::Full {
                budget,
                max,
                unavailable,
                schedule,
            } => {
                write!(
                    f,
                    "disruptionbudget {budget} allows {max} unavailable node{} and {unavailable} {}",
                    if *max == 1 { "" } else { "s" },
                    if *unavailable == 1 { "is" } else { "are" }
                )?;
                match schedule {
                    Some((name, until)) => {
                        write!(f, " (schedule {name} until {})", rfc3339(*until))
                    }
                    None => Ok(()),
                }
            }
            Refusal::Invalid { budget, error } => {
                write!(f, "disruptionbudget {budget} is invalid: {error}")
            }
        }
    }
}

/// What one decision may take: the nodes other operations hold against it, and the pools that
/// limit its reason, with the room taken in this decision.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Budget {
    held: BTreeMap<String, Holder>,
    pools: Vec<PoolState>,
}

impl Budget {
    /// No hold and no DisruptionBudget: every node may start.
    pub const fn unlimited() -> Budget {
        Budget {
            held: BTreeMap::new(),
            pools: Vec::new(),
        }
    }

    /// A budget of only the holds against the decision: no DisruptionBudget limits it.
    pub fn holds_only(held: BTreeMap<String, Holder>) -> Budget {
        Budget {
            held,
            pools: Vec::new(),
        }
    }

    /// The holds against an operation that takes nodes for `reason`, and the pools that limit it.
    pub fn new(held: BTreeMap<String, Holder>, pools: &[PoolState], reason: Reason) -> Budget {
        Budget {
            held,
            pools: pools.iter().filter(|p| p.limits(reason)).cloned().collect(),
        }
    }

    /// The nodes other operations hold, with who holds each.
    pub fn held(&self) -> &BTreeMap<String, Holder> {
        &self.held
    }

    /// Who else holds `node`.
    pub fn holder_of(&self, node: &str) -> Option<&Holder> {
        self.held.get(node)
    }

    /// Whether any DisruptionBudget limits this decision.
    pub fn is_limited(&self) -> bool {
        !self.pools.is_empty()
    }

    /// Whether `node` may start now, without taking it.
    pub fn check(&self, node: &NodeInfo) -> Result<(), Refusal> {
        if let Some(h) = self.held.get(&node.name) {
            return Err(Refusal::Held(h.clone()));
        }
        for pool in self.pools.iter().filter(|p| p.contains(node)) {
            if let Some(error) = &pool.invalid {
                return Err(Refusal::Invalid {
                    budget: pool.name.clone(),
                    error: error.clone(),
                });
            }
            if pool.halt {
                return Err(Refusal::Halted {
                    budget: pool.name.clone(),
                });
            }
            if !pool.unavailable.contains(&node.name) && pool.room() == 0 {
                return Err(Refusal::Full {
                    budget: pool.name.clone(),
                    max: pool.limit.max,
                    unavailable: pool.unavailable.len(),
                    schedule: pool
                        .limit
                        .schedule
                        .as_ref()
                        .map(|s| (s.name.clone(), s.period.end)),
                });
            }
        }
        Ok(())
    }

    /// Why no node like `node` may start whatever the room: a halted or unreadable budget
    /// selects it.
    pub fn stopped(&self, node: &NodeInfo) -> Option<Refusal> {
        self.check(node)
            .err()
            .filter(|r| matches!(r, Refusal::Halted { .. } | Refusal::Invalid { .. }))
    }

    /// Starts `node` if every budget lets it: it then counts as unavailable in each pool.
    pub fn take(&mut self, node: &NodeInfo) -> Result<(), Refusal> {
        self.check(node)?;
        for pool in self.pools.iter_mut().filter(|p| p.contains(node)) {
            pool.unavailable.insert(node.name.clone());
        }
        Ok(())
    }

    /// The decision lets go of `node`: if only it made the node unavailable, its room comes back.
    pub fn release(&mut self, node: &str) {
        self.keep_only(|n| n != node);
    }

    /// The decision keeps only the nodes `kept` picks of those it held: the room of the others
    /// comes back (where only it made them unavailable).
    pub fn keep_only(&mut self, kept: impl Fn(&str) -> bool) {
        for pool in &mut self.pools {
            let PoolState {
                releasable,
                unavailable,
                ..
            } = pool;
            releasable.retain(|n| {
                let keep = kept(n);
                if !keep {
                    unavailable.remove(n);
                }
                keep
            });
        }
    }

    /// The earliest time a schedule of a limiting pool changes: a wait for room may end then.
    pub fn next_change(&self) -> Option<Timestamp> {
        self.pools.iter().filter_map(|p| p.limit.next_change).min()
    }

    /// How long until [`Budget::next_change`], for a recheck.
    pub fn recheck(&self, now: Timestamp) -> Option<Duration> {
        Some(crate::common::until(now, self.next_change()?))
    }
}

#[cfg(test)]
mod tests;
