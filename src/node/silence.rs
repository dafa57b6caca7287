//! The Alertmanager silences held while nodes are disrupted: which silences slipway wants (one per
//! node per holder whose `spec.disruption.silence` asks for one) against those Alertmanager has,
//! into what to create, extend and expire. Pure: the runtime lists and writes
//! (`runtime::silences`).
//!
//! Alertmanager is the record: each silence slipway creates carries its `createdBy` and, at the end
//! of its comment, a key naming the holder, the node and when the disruption's silencing began
//! ([`Key`]). After a restart the silences are listed and reconciled from that alone, so none is
//! leaked or made twice. A silence ends a few minutes ahead ([`AHEAD`]) and is extended while the
//! node is held: one a stopped controller no longer extends lapses by itself. It never lasts past
//! `maxDuration` from when the silencing began.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::disruption::{Matcher, SilenceSpec};
use super::holders::Holder;
use crate::common::decision::Event;

/// How far ahead of now a silence ends while its node is held.
pub const AHEAD: Duration = Duration::from_secs(5 * 60);
/// A silence is extended once less than this is left of it.
pub const RENEW_BELOW: Duration = Duration::from_secs(150);

/// A silence slipway wants: `holder` disrupts `node` and asks for one.
#[derive(Debug, Clone, PartialEq)]
pub struct Wanted {
    pub holder: Holder,
    pub node: String,
    /// The matchers with the node's name filled in.
    pub matchers: Vec<Matcher>,
    pub max_duration: Duration,
    pub comment: Option<String>,
}

impl Wanted {
    /// What `spec` asks of `holder` on `node`; `None` when the spec is invalid (its object's own
    /// validation says so).
    pub fn of(holder: &Holder, node: &str, spec: &SilenceSpec) -> Option<Wanted> {
        let probe = super::disruption::DisruptionSpec {
            silence: Some(spec.clone()),
            ..Default::default()
        };
        super::disruption::validate(&probe, "spec.disruption").ok()?;
        Some(Wanted {
            holder: holder.clone(),
            node: node.to_string(),
            matchers: spec.matchers.iter().map(|m| m.for_node(node)).collect(),
            max_duration: spec.max_duration("").ok()?,
            comment: spec.comment.clone().filter(|c| !c.trim().is_empty()),
        })
    }

    fn key(&self, since: Timestamp) -> Key {
        Key {
            holder: self.holder.clone(),
            node: self.node.clone(),
            since,
        }
    }

    fn comment_with(&self, key: &Key) -> String {
        let said = match &self.comment {
            Some(c) => c.trim().to_string(),
            None => format!("{} disrupts node {}", self.holder, self.node),
        };
        format!("{said} {}", key.text())
    }

    fn cap(&self, since: Timestamp) -> Timestamp {
        since
            .checked_add(self.max_duration)
            .unwrap_or(Timestamp::MAX)
    }
}

/// Alertmanager's state of a silence.
#[derive(Deserialize, Serialize, Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum SilenceState {
    Active,
    Pending,
    Expired,
}

/// `status` of a listed silence.
#[derive(Deserialize, Serialize, Debug, Clone, PartialEq, Eq)]
pub struct SilenceStatus {
    pub state: SilenceState,
}

/// A silence as Alertmanager's v2 API lists it (`gettableSilence`), the fields slipway reads.
#[derive(Deserialize, Serialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Silence {
    pub id: String,
    pub status: SilenceStatus,
    pub matchers: Vec<Matcher>,
    pub starts_at: Timestamp,
    pub ends_at: Timestamp,
    #[serde(default)]
    pub created_by: String,
    #[serde(default)]
    pub comment: String,
}

impl Silence {
    fn live(&self, now: Timestamp) -> bool {
        self.status.state != SilenceState::Expired && self.ends_at > now
    }
}

/// A silence to create or update (`postableSilence`; with `id`, an update of that silence).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Postable {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub matchers: Vec<Matcher>,
    pub starts_at: Timestamp,
    pub ends_at: Timestamp,
    pub created_by: String,
    pub comment: String,
}

/// What names a silence of slipway's, at the end of its comment:
/// `[slipway holder=<holder key> node=<node> since=<RFC 3339>]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub holder: Holder,
    pub node: String,
    /// When the silencing of this disruption began: `maxDuration` counts from here, across the
    /// silences that carry it on (a restart's, a changed matcher's).
    pub since: Timestamp,
}

const KEY_OPEN: &str = "[slipway ";

impl Key {
    pub fn text(&self) -> String {
        format!(
            "{KEY_OPEN}holder={} node={} since={}]",
            self.holder.key(),
            self.node,
            self.since
        )
    }

    /// The key at the end of `comment`; `None` when it has none (a silence not made by slipway,
    /// or edited by a person).
    pub fn parse(comment: &str) -> Option<Key> {
        let start = comment.rfind(KEY_OPEN)?;
        let body = comment[start + KEY_OPEN.len()..].strip_suffix(']')?;
        let mut holder = None;
        let mut node = None;
        let mut since = None;
        for part in body.split(' ') {
            match part.split_once('=')? {
                ("holder", v) => holder = Holder::from_key(v),
                ("node", v) if !v.is_empty() => node = Some(v.to_string()),
                ("since", v) => since = v.parse().ok(),
                _ => return None,
            }
        }
        Some(Key {
            holder: holder?,
            node: node?,
            since: since?,
        })
    }
}

/// One write to Alertmanager.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// A new silence for a node taken.
    Create { key: Key, silence: Postable },
    /// A silence still wanted: ends later, or carries changed matchers or comment.
    Extend { key: Key, silence: Postable },
    /// A silence no longer wanted (its node given back, a duplicate, its cap lowered).
    Expire { id: String, key: Key },
}

impl Action {
    pub fn key(&self) -> &Key {
        match self {
            Action::Create { key, .. }
            | Action::Extend { key, .. }
            | Action::Expire { key, .. } => key,
        }
    }
}

/// When this process saw a wanted hold begin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// The node was taken at this time, while the process was watching: a silence that ended
    /// before it was another disruption's.
    Began(Timestamp),
    /// The node was already held when the process started: when the disruption began is told by
    /// the silences alone.
    AtStart,
}

/// What the process saw of each wanted hold, by holder and node.
pub type HeldSince = BTreeMap<(Holder, String), Seen>;

/// The silences of `created_by`, by holder and node.
type Ours<'a> = BTreeMap<(Holder, String), Vec<(Key, &'a Silence)>>;

fn ours<'a>(current: &'a [Silence], created_by: &str) -> Ours<'a> {
    let mut by_key: Ours<'a> = BTreeMap::new();
    for s in current.iter().filter(|s| s.created_by == created_by) {
        if let Some(key) = Key::parse(&s.comment) {
            let at = (key.holder.clone(), key.node.clone());
            by_key.entry(at).or_default().push((key, s));
        }
    }
    by_key
}

/// What to write so that Alertmanager holds exactly the silences `wanted`, as of `now`.
/// `current` is every silence Alertmanager lists (others' are left alone); `created_by` is this
/// controller's name in them; `held_since` is what this process saw of each wanted hold (what
/// tells this disruption's silences from those of an earlier one of the same node; missing:
/// [`Seen::AtStart`]).
pub fn reconcile(
    wanted: &[Wanted],
    current: &[Silence],
    created_by: &str,
    held_since: &HeldSince,
    now: Timestamp,
) -> Vec<Action> {
    let ours = ours(current, created_by);
    let mut actions = Vec::new();
    let mut seen = BTreeSet::new();
    for w in wanted {
        let at = (w.holder.clone(), w.node.clone());
        if !seen.insert(at.clone()) {
            continue;
        }
        let mine = ours.get(&at).map(Vec::as_slice).unwrap_or_default();
        let seen_as = held_since.get(&at).copied().unwrap_or(Seen::AtStart);
        hold(w, mine, created_by, seen_as, now, &mut actions);
    }
    for (at, silences) in &ours {
        if seen.contains(at) {
            continue;
        }
        for (key, s) in silences.iter().filter(|(_, s)| s.live(now)) {
            actions.push(Action::Expire {
                id: s.id.clone(),
                key: key.clone(),
            });
        }
    }
    actions
}

/// The writes that keep one wanted silence.
fn hold(
    w: &Wanted,
    mine: &[(Key, &Silence)],
    created_by: &str,
    seen: Seen,
    now: Timestamp,
    actions: &mut Vec<Action>,
) {
    let mut live: Vec<&(Key, &Silence)> = mine.iter().filter(|(_, s)| s.live(now)).collect();
    live.sort_by(|(a, sa), (b, sb)| (a.since, &sa.id).cmp(&(b.since, &sb.id)));
    if let Some(((key, keep), duplicates)) = live.split_first() {
        for (dkey, d) in duplicates {
            actions.push(Action::Expire {
                id: d.id.clone(),
                key: dkey.clone(),
            });
        }
        extend(w, key, keep, created_by, now, actions);
        return;
    }
    // None live: the first silence of this disruption, or the next after one of this disruption
    // that lapsed (a controller that was down), which keeps its start: `maxDuration` counts from
    // it, and one past its cap is not renewed.
    let last = mine
        .iter()
        .map(|(k, s)| (k, *s))
        .max_by_key(|(k, _)| k.since);
    let since = match last.map(|(k, s)| (k, this_disruption(w, s, seen, now))) {
        Some((k, true)) if w.cap(k.since) > now => k.since,
        Some((_, true)) => return,
        None | Some((_, false)) => now,
    };
    let key = w.key(since);
    let ends_at = ends_at(w, since, now);
    if ends_at <= now {
        return;
    }
    actions.push(Action::Create {
        silence: Postable {
            id: None,
            matchers: w.matchers.clone(),
            starts_at: now,
            ends_at,
            created_by: created_by.to_string(),
            comment: w.comment_with(&key),
        },
        key,
    });
}

/// Whether `s`, not live, was this disruption's. Seen begin: if it ended after. Held at the
/// start: if it ended less than `maxDuration` ago (it lapsed while no controller ran, or reached
/// its cap); the process cannot tell that from an earlier disruption's, and erring this way
/// leaves a page unsilenced rather than a silence too long.
fn this_disruption(w: &Wanted, s: &Silence, seen: Seen, now: Timestamp) -> bool {
    match seen {
        Seen::Began(at) => s.ends_at > at,
        Seen::AtStart => s
            .ends_at
            .checked_add(w.max_duration)
            .is_ok_and(|until| until > now),
    }
}

/// The end a silence of `w` begun at `since` gets now: [`AHEAD`], never past its cap.
fn ends_at(w: &Wanted, since: Timestamp, now: Timestamp) -> Timestamp {
    let ahead = now.checked_add(AHEAD).unwrap_or(Timestamp::MAX);
    ahead.min(w.cap(since))
}

/// The write that keeps `keep` (live) as `w` wants it, if any.
fn extend(
    w: &Wanted,
    key: &Key,
    keep: &Silence,
    created_by: &str,
    now: Timestamp,
    actions: &mut Vec<Action>,
) {
    let ends = ends_at(w, key.since, now);
    if ends <= now {
        // `maxDuration` was lowered below what the silence has lasted.
        actions.push(Action::Expire {
            id: keep.id.clone(),
            key: key.clone(),
        });
        return;
    }
    let comment = w.comment_with(key);
    let changed = keep.matchers != w.matchers || keep.comment != comment;
    let short = keep
        .ends_at
        .duration_since(now)
        .unsigned_abs()
        .lt(&RENEW_BELOW);
    let renew = short && keep.ends_at < ends;
    if !(changed || renew || keep.ends_at > ends) {
        return;
    }
    actions.push(Action::Extend {
        key: key.clone(),
        silence: Postable {
            id: Some(keep.id.clone()),
            matchers: w.matchers.clone(),
            starts_at: keep.starts_at,
            ends_at: ends,
            created_by: created_by.to_string(),
            comment,
        },
    });
}

/// The event on the holder's object once `action` was done in Alertmanager as silence `id`: a
/// silence made (and until when it may last) or expired; none for an extension.
pub fn event_of(action: &Action, id: &str, wanted: &[Wanted]) -> Option<Event> {
    match action {
        Action::Create { key, silence } => {
            let cap = (wanted.iter())
                .find(|w| w.holder == key.holder && w.node == key.node)
                .map_or(silence.ends_at, |w| w.cap(key.since));
            let message = format!(
                "Alertmanager silence {id} for node {} (extended while the node is held, until {cap} at most)",
                key.node
            );
            Some(Event::normal("SilenceCreated", message))
        }
        Action::Extend { .. } => None,
        Action::Expire { key, .. } => {
            let message = format!("Alertmanager silence {id} for node {} expired", key.node);
            Some(Event::normal("SilenceExpired", message))
        }
    }
}

/// How many of `created_by`'s silences Alertmanager lists in each state.
pub fn tally(current: &[Silence], created_by: &str) -> BTreeMap<SilenceState, usize> {
    let mut counts = BTreeMap::from([
        (SilenceState::Active, 0),
        (SilenceState::Pending, 0),
        (SilenceState::Expired, 0),
    ]);
    for s in current.iter().filter(|s| s.created_by == created_by) {
        if Key::parse(&s.comment).is_some() {
            *counts.entry(s.status.state).or_default() += 1;
        }
    }
    counts
}

impl SilenceState {
    /// The state as Alertmanager and the metric name it.
    pub fn as_str(self) -> &'static str {
        match self {
            SilenceState::Active => "active",
            SilenceState::Pending => "pending",
            SilenceState::Expired => "expired",
        }
    }
}

#[cfg(test)]
mod tests;
