//! Whose turn it is: which scenes run now, given what each cannot share and how many may run at
//! once.
//!
//! Every scene asks for a turn before it touches the cluster and gives it back when it ends
//! ([`Turn`] is dropped, also when the scene panics). A scene asks with the groups it cannot share
//! (at most one scene of a group runs at a time), whether it must run alone, and its priority:
//! among the scenes waiting, the first in priority order that can run now starts, so that the
//! longest chains (the real nodes, the groups) start first rather than in libtest's alphabetical
//! order. A scene waiting to run alone lets nothing start behind it, so it is never starved. A
//! scene may also ask for any one of a few groups (a set of real nodes among several): it starts
//! when one of them is free and holds that one.
//!
//! While a scene on real nodes waits for its guests to boot ([`Turn::booted`]), no other scene
//! starts, on real nodes or not: a boot under emulation is a host core's work for its whole
//! length, and the start of a chain.
//!
//! Each set of guests is a chain of scenes, one after the other, and the set with the most scenes
//! waiting goes first (its chain is the run's longest). At most `SLIPWAY_E2E_REAL_AT_ONCE` scenes
//! on real nodes run at once (1 by default), so one set of guests works at a time; the last scene
//! of a set stops its guests ([`wanted`]). A chain keeps about a host core busy, so on 2 cores two
//! chains slow each other down more than they gain.
//!
//! While scenes on real nodes run, the run takes at most `SLIPWAY_E2E_BESIDE_REAL` + 1 scenes
//! (1 + 1 by default), those on real nodes among them: a second chain takes the place of another
//! scene. An emulated guest is slow in proportion to the load, and the real nodes' waits (a boot,
//! a reboot, a kubelet's heartbeat) are measured in wall time. docs/testing.md ("How long a run
//! takes, and why") has the figures behind these limits.
//!
//! At most `SLIPWAY_E2E_SCENES` scenes run at once (6 by default; the real limit is libtest's
//! `--test-threads` when that is smaller). For the priorities to work, run with more test threads
//! than scenes (scripts/ci.sh does): every scene then asks at once, and the first turns are given
//! only after a short moment for all of them to ask.

use std::collections::BTreeSet;
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// The order in which waiting scenes start: lower first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Priority {
    /// Scenes on real nodes: the longest chain of the run.
    RealNodes,
    /// Scenes of a group: a chain, one at a time.
    Group,
    /// Everything else.
    Shared,
}

/// What a scene asks for.
#[derive(Clone, Debug)]
pub struct Ask {
    pub alone: bool,
    pub groups: BTreeSet<&'static str>,
    /// Any one of these groups, the first free one (none when empty).
    pub one_of: Vec<&'static str>,
    pub priority: Priority,
}

#[derive(Default)]
struct State {
    running: usize,
    /// Of which scenes on real nodes.
    real_running: usize,
    /// How many other scenes may run beside a scene on real nodes, each further scene on real
    /// nodes taking the place of one (read at the first ask; no limit when unset).
    beside_real: Option<usize>,
    /// How many scenes on real nodes may run at once (read at the first ask; no limit when
    /// unset).
    real_at_once: Option<usize>,
    /// The set of guests of the scene on real nodes that started last.
    active_set: Option<&'static str>,
    alone: bool,
    held: BTreeSet<&'static str>,
    /// Scenes on real nodes that have their turn and wait for their guests.
    booting: usize,
    waiting: Vec<(u64, Ask)>,
    next_id: u64,
    first_ask: Option<Instant>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Mutex::default);
static CHANGED: Notify = Notify::const_new();

/// Long enough for every scene libtest starts at once to ask before the first turn is given.
const GATHER: Duration = Duration::from_millis(500);

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A count from the environment variable `name`, if set to a number.
fn env_count(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn beside_real() -> usize {
    env_count("SLIPWAY_E2E_BESIDE_REAL").unwrap_or(1)
}

fn real_at_once() -> usize {
    env_count("SLIPWAY_E2E_REAL_AT_ONCE")
        .filter(|n| *n > 0)
        .unwrap_or(1)
}

fn limit() -> usize {
    env_count("SLIPWAY_E2E_SCENES")
        .filter(|n| *n > 0)
        .unwrap_or(6)
}

impl State {
    fn can_run(&self, ask: &Ask, limit: usize) -> bool {
        !self.alone
            && self.running < limit
            && (!ask.alone || self.running == 0)
            && ask.groups.is_disjoint(&self.held)
            && (ask.one_of.is_empty() || self.free_of(ask).is_some())
            && self.booting == 0
            && (ask.priority != Priority::RealNodes
                || self
                    .real_at_once
                    .is_none_or(|most| self.real_running < most))
            && (self.real_running == 0 && ask.priority != Priority::RealNodes
                || self.beside_real.is_none_or(|most| self.running <= most))
    }

    /// The first of the scene's `one_of` groups that no running scene holds.
    fn free_of(&self, ask: &Ask) -> Option<&'static str> {
        ask.one_of.iter().copied().find(|g| !self.held.contains(g))
    }

    /// The scene that starts next, if any may.
    fn next(&self, limit: usize) -> Option<u64> {
        let mut order: Vec<&(u64, Ask)> = self.waiting.iter().collect();
        // The set whose guests are up goes on first (another set would boot beside it), then the
        // set with the most scenes left: the longest chain starts first.
        let left = |set: Option<&'static str>| {
            (self.waiting.iter())
                .filter(|(_, a)| set.is_some() && set_of(a) == set)
                .count()
        };
        order.sort_by_key(|(id, ask)| {
            let set = set_of(ask);
            let longest = std::cmp::Reverse(left(set));
            (ask.priority, set != self.active_set, longest, set, *id)
        });
        for (id, ask) in order {
            if self.can_run(ask, limit) {
                return Some(*id);
            }
            if ask.alone {
                return None;
            }
        }
        None
    }
}

/// The set of guests a scene on real nodes takes (the first of the pairs it may take, or its own
/// cluster's group), so that the scenes of one set go one after the other; none for the others.
fn set_of(ask: &Ask) -> Option<&'static str> {
    match ask.priority {
        Priority::RealNodes => ask.one_of.first().or(ask.groups.iter().next()).copied(),
        _ => None,
    }
}

/// Whether a scene still waiting would take `group`'s guests: when none would, the scene that
/// holds them is the set's last, and stops them once it ends.
pub fn wanted(group: &str) -> bool {
    state()
        .waiting
        .iter()
        .any(|(_, ask)| ask.groups.contains(group) || ask.one_of.contains(&group))
}

/// A scene's turn; giving it back (dropping it) lets the next scenes start.
pub struct Turn {
    ask: Ask,
    chosen: Option<&'static str>,
    booting: bool,
}

impl Turn {
    /// Which of the `one_of` groups the scene holds.
    pub fn chosen(&self) -> Option<&'static str> {
        self.chosen
    }

    /// The scene on real nodes has its guests (booted now or before): other scenes may start.
    pub fn booted(&mut self) {
        if std::mem::take(&mut self.booting) {
            state().booting -= 1;
            CHANGED.notify_waiters();
        }
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        let mut s = state();
        s.running -= 1;
        if self.ask.priority == Priority::RealNodes {
            s.real_running -= 1;
        }
        if self.booting {
            s.booting -= 1;
        }
        if self.ask.alone {
            s.alone = false;
        }
        for g in self.ask.groups.iter().chain(&self.chosen) {
            s.held.remove(g);
        }
        drop(s);
        CHANGED.notify_waiters();
    }
}

/// Waits for the scene's turn.
pub async fn take(ask: Ask) -> Turn {
    let id = {
        let mut s = state();
        let id = s.next_id;
        s.next_id += 1;
        s.first_ask.get_or_insert_with(Instant::now);
        s.beside_real.get_or_insert_with(beside_real);
        s.real_at_once.get_or_insert_with(real_at_once);
        s.waiting.push((id, ask.clone()));
        id
    };
    loop {
        let changed = CHANGED.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let gathering = {
            let mut s = state();
            let since = s.first_ask.map(|t| t.elapsed()).unwrap_or_default();
            if since >= GATHER && s.next(limit()) == Some(id) {
                s.waiting.retain(|(w, _)| *w != id);
                s.running += 1;
                if ask.priority == Priority::RealNodes {
                    s.real_running += 1;
                    s.active_set = set_of(&ask);
                }
                s.alone |= ask.alone;
                s.held.extend(ask.groups.iter().copied());
                let chosen = s.free_of(&ask);
                s.held.extend(chosen);
                let booting = ask.priority == Priority::RealNodes;
                s.booting += usize::from(booting);
                drop(s);
                // The next scene may be able to start too.
                CHANGED.notify_waiters();
                return Turn {
                    ask,
                    chosen,
                    booting,
                };
            }
            (since < GATHER).then(|| GATHER - since)
        };
        match gathering {
            Some(rest) => tokio::time::sleep(rest).await,
            None => changed.await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask(alone: bool, groups: &[&'static str], priority: Priority) -> Ask {
        Ask {
            alone,
            groups: groups.iter().copied().collect(),
            one_of: Vec::new(),
            priority,
        }
    }

    fn state_with(waiting: Vec<Ask>) -> State {
        State {
            waiting: waiting
                .into_iter()
                .enumerate()
                .map(|(i, a)| (i as u64, a))
                .collect(),
            ..State::default()
        }
    }

    #[test]
    fn the_first_in_priority_order_that_can_run_starts() {
        let mut s = state_with(vec![
            ask(false, &[], Priority::Shared),
            ask(false, &["real"], Priority::RealNodes),
        ]);
        assert_eq!(s.next(6), Some(1));
        s.held.insert("real");
        s.running = 1;
        s.waiting.retain(|(id, _)| *id != 1);
        assert_eq!(s.next(6), Some(0));
        s.running = 6;
        assert_eq!(s.next(6), None, "no more than the limit");
    }

    #[test]
    fn a_group_runs_one_scene_at_a_time_and_others_pass_it() {
        let mut s = state_with(vec![
            ask(false, &["g"], Priority::Group),
            ask(false, &["g"], Priority::Group),
            ask(false, &[], Priority::Shared),
        ]);
        s.held.insert("g");
        s.running = 1;
        assert_eq!(s.next(6), Some(2));
    }

    #[test]
    fn a_scene_waiting_alone_lets_nothing_pass_it() {
        let mut s = state_with(vec![
            ask(true, &[], Priority::Group),
            ask(false, &[], Priority::Shared),
        ]);
        s.running = 1;
        assert_eq!(s.next(6), None);
        s.running = 0;
        assert_eq!(s.next(6), Some(0));
        s.alone = true;
        s.running = 1;
        s.waiting.retain(|(id, _)| *id != 0);
        assert_eq!(s.next(6), None, "nothing beside a scene alone");
    }

    #[test]
    fn a_scene_takes_any_free_one_of_its_groups() {
        let either = |alone| Ask {
            one_of: vec!["a", "b"],
            ..ask(alone, &[], Priority::RealNodes)
        };
        let mut s = state_with(vec![either(false), either(false), either(false)]);
        assert_eq!(s.next(6), Some(0));
        assert_eq!(s.free_of(&either(false)), Some("a"));
        s.held.insert("a");
        s.running = 1;
        s.waiting.retain(|(id, _)| *id != 0);
        assert_eq!(s.next(6), Some(1), "the other group is free");
        assert_eq!(s.free_of(&either(false)), Some("b"));
        s.held.insert("b");
        s.running = 2;
        s.waiting.retain(|(id, _)| *id != 1);
        assert_eq!(s.next(6), None, "both groups held");
        s.held.remove("a");
        assert_eq!(s.next(6), Some(2));
        assert_eq!(s.free_of(&either(false)), Some("a"));
    }

    #[test]
    fn nothing_starts_while_guests_boot() {
        let mut s = state_with(vec![
            ask(false, &[], Priority::Shared),
            ask(false, &["g"], Priority::Group),
            ask(false, &["other set"], Priority::RealNodes),
        ]);
        s.booting = 1;
        s.running = 1;
        s.real_running = 1;
        assert_eq!(s.next(6), None, "a boot under way holds every other scene");
        s.booting = 0;
        assert_eq!(s.next(6), Some(2), "then the other set's chain first");
        s.waiting.retain(|(id, _)| *id != 2);
        s.running = 2;
        s.real_running = 2;
        assert_eq!(s.next(6), Some(1), "the group's scene, then the shared one");
    }

    #[test]
    fn the_longest_chain_first_its_scenes_one_after_the_other() {
        // A scene on the pair may share a group too ("a cluster-wide kind"): the pair is its set.
        let pair = |group| Ask {
            one_of: vec!["pair"],
            ..ask(false, &[group], Priority::RealNodes)
        };
        let installs = || ask(false, &["installs"], Priority::RealNodes);
        let mut s = state_with(vec![
            installs(),
            pair("a cluster-wide kind"),
            pair("b"),
            installs(),
            pair("c"),
        ]);
        s.real_at_once = Some(1);
        assert_eq!(
            s.next(6),
            Some(1),
            "the pair's chain first: three scenes against two"
        );
        s.waiting.retain(|(id, _)| *id != 1);
        s.held.extend(["pair", "a cluster-wide kind"]);
        s.active_set = Some("pair");
        s.running = 1;
        s.real_running = 1;
        assert_eq!(s.next(6), None, "one scene on real nodes at a time");
        s.real_at_once = Some(2);
        assert_eq!(
            s.next(6),
            Some(0),
            "two when asked: the other set beside it"
        );
        s.held.clear();
        s.running = 0;
        s.real_running = 0;
        assert_eq!(s.next(6), Some(2), "a set that is up goes on first");
        s.active_set = Some("installs");
        assert_eq!(s.next(6), Some(0));
        s.held.insert("installs");
        assert_eq!(s.next(6), Some(2), "a held set lets the other pass");
        s.held.insert("pair");
        assert_eq!(s.next(6), None, "both sets held");
    }

    #[test]
    fn scenes_on_real_nodes_take_places_of_the_others_beside_them() {
        let mut s = state_with(vec![
            ask(false, &[], Priority::Shared),
            ask(false, &[], Priority::Shared),
            ask(false, &["real b"], Priority::RealNodes),
        ]);
        s.beside_real = Some(2);
        s.real_at_once = Some(2);
        s.held.insert("real a");
        s.running = 2;
        s.real_running = 1;
        assert_eq!(s.next(6), Some(2), "a second chain takes the second place");
        s.waiting.retain(|(id, _)| *id != 2);
        s.running = 3;
        s.real_running = 2;
        assert_eq!(
            s.next(6),
            None,
            "two chains and one other scene fill the run"
        );
        s.running = 2;
        assert_eq!(s.next(6), Some(0), "a place left");
        s.real_running = 1;
        s.running = 3;
        assert_eq!(
            s.next(6),
            None,
            "one chain and two other scenes fill it too"
        );
        s.real_running = 0;
        s.running = 5;
        assert_eq!(
            s.next(6),
            Some(0),
            "without scenes on real nodes, the limit is the run's"
        );
    }
}
