//! Per-phase gauges of one kind's objects: how many nodes are in each phase, and since when the
//! one there longest has been. A phase an object no longer has loses its series.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use crate::common::phase::PhaseTally;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabel {
    pub phase: String,
}

type Key<L> = (L, PhaseLabel);

/// The two families of one kind, and the phases each object shows.
pub struct PhaseGauges<L> {
    nodes: Family<Key<L>, Gauge>,
    since: Family<Key<L>, Gauge>,
    shown: Mutex<BTreeMap<L, Vec<&'static str>>>,
}

impl<L> Default for PhaseGauges<L>
where
    L: EncodeLabelSet
        + Clone
        + std::hash::Hash
        + Eq
        + Ord
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    fn default() -> Self {
        PhaseGauges {
            nodes: Family::default(),
            since: Family::default(),
            shown: Mutex::default(),
        }
    }
}

/// Where a kind's two families are registered, and what they say.
pub struct Names {
    pub nodes: &'static str,
    pub nodes_help: &'static str,
    /// Registered with the unit seconds: the exported name ends in `_timestamp_seconds`.
    pub since: &'static str,
    pub since_help: &'static str,
}

impl<L> PhaseGauges<L>
where
    L: EncodeLabelSet
        + Clone
        + std::hash::Hash
        + Eq
        + Ord
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    pub fn register(&self, registry: &mut Registry, names: &Names) {
        registry.register(names.nodes, names.nodes_help, self.nodes.clone());
        registry.register_with_unit(
            names.since,
            names.since_help,
            Unit::Seconds,
            self.since.clone(),
        );
    }

    /// Shows `phases` for `object`, and drops the phases it showed before and no longer has.
    pub fn set(&self, object: &L, phases: &[PhaseTally]) {
        let key = |phase: &str| {
            (
                object.clone(),
                PhaseLabel {
                    phase: phase.to_string(),
                },
            )
        };
        let mut shown = self.shown.lock().unwrap_or_else(PoisonError::into_inner);
        let before = shown.insert(object.clone(), phases.iter().map(|t| t.phase).collect());
        for gone in before
            .iter()
            .flatten()
            .filter(|p| !phases.iter().any(|t| t.phase == **p))
        {
            self.nodes.remove(&key(gone));
            self.since.remove(&key(gone));
        }
        for t in phases {
            let k = key(t.phase);
            self.nodes
                .get_or_create(&k)
                .set(i64::try_from(t.nodes).unwrap_or(i64::MAX));
            match t.oldest_since {
                Some(since) => {
                    self.since.get_or_create(&k).set(since.as_second());
                }
                None => {
                    self.since.remove(&k);
                }
            }
        }
    }

    /// Drops the series of the objects for which `exists` is false.
    pub fn retain(&self, mut exists: impl FnMut(&L) -> bool) {
        let mut shown = self.shown.lock().unwrap_or_else(PoisonError::into_inner);
        shown.retain(|object, phases| {
            if exists(object) {
                return true;
            }
            for phase in phases.iter() {
                let k = (
                    object.clone(),
                    PhaseLabel {
                        phase: phase.to_string(),
                    },
                );
                self.nodes.remove(&k);
                self.since.remove(&k);
            }
            false
        });
    }
}
