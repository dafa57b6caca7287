//! The answers of the Eviction API, as the next decision reads them: why each pod is still there,
//! and how long to wait after a PodDisruptionBudget refused.

use std::collections::BTreeSet;
use std::time::Duration;

use jiff::Timestamp;

use super::{DRAIN_RECHECK, REFUSAL_BACKOFF_MAX};
use crate::node::drain::{EvictionResult, PodKey};

/// The wait before asking again after the `refused`-th refused round of evictions in a row
/// (429: a PodDisruptionBudget): `DRAIN_RECHECK`, then twice the previous wait, at most
/// `REFUSAL_BACKOFF_MAX`.
pub fn refusal_backoff(refused: u32) -> Duration {
    let doublings = refused.saturating_sub(1).min(16);
    DRAIN_RECHECK
        .saturating_mul(1 << doublings)
        .min(REFUSAL_BACKOFF_MAX)
}

/// The answers of the last round of evictions: the input of the next decision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EvictionRound {
    pub at: Option<Timestamp>,
    pub results: Vec<(PodKey, EvictionResult)>,
    /// Rounds in a row in which a PodDisruptionBudget refused an eviction, this one included.
    pub refused_in_a_row: u32,
}

impl EvictionRound {
    /// The round after `previous`, which got `results` at `at`.
    pub fn next(
        previous: Option<&EvictionRound>,
        results: Vec<(PodKey, EvictionResult)>,
        at: Timestamp,
    ) -> EvictionRound {
        let refused = results
            .iter()
            .any(|(_, r)| matches!(r, EvictionResult::Refused(_)));
        EvictionRound {
            at: Some(at),
            refused_in_a_row: match refused {
                true => previous.map_or(0, |p| p.refused_in_a_row) + 1,
                false => 0,
            },
            results,
        }
    }

    /// When evictions may be asked again: at once, unless the last round was refused.
    pub(super) fn next_ask(&self) -> Option<Timestamp> {
        (self.refused_in_a_row > 0)
            .then(|| {
                self.at?
                    .checked_add(refusal_backoff(self.refused_in_a_row))
                    .ok()
            })
            .flatten()
    }

    /// A PodDisruptionBudget in `namespace` allows a disruption again: if it may be what refused
    /// this round (a refused pod lives there), the wait is over and the next decision asks at once
    /// (the count stays: refused again, the next wait is as long as it would have been). Whether
    /// it may be.
    pub fn budget_allows(&mut self, namespace: &str) -> bool {
        let refused_there = self.refused_in_a_row > 0
            && self.results.iter().any(|(pod, result)| {
                pod.namespace == namespace && matches!(result, EvictionResult::Refused(_))
            });
        if refused_there {
            self.at = None;
        }
        refused_there
    }
}

/// A round of evictions being asked: its answers are recorded only once it is back, so a budget
/// that allows a disruption meanwhile finds no refused round to wake, and the drain would wait
/// out its backoff (up to a minute) for a budget that already allows it. Kept while the round
/// is asked, and given to the round it becomes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asking {
    namespaces: BTreeSet<String>,
    allowed: BTreeSet<String>,
}

impl Asking {
    /// The evictions of `pods` being asked.
    pub fn of(pods: &[PodKey]) -> Asking {
        Asking {
            namespaces: pods.iter().map(|p| p.namespace.clone()).collect(),
            allowed: BTreeSet::new(),
        }
    }

    /// A budget in `namespace` allows a disruption: whether it may answer this round.
    pub fn budget_allows(&mut self, namespace: &str) -> bool {
        let there = self.namespaces.contains(namespace);
        if there {
            self.allowed.insert(namespace.to_string());
        }
        there
    }

    /// The round it became, told of the budgets that allowed a disruption while it was asked.
    pub fn answered(self, mut round: EvictionRound) -> EvictionRound {
        for namespace in &self.allowed {
            round.budget_allows(namespace);
        }
        round
    }
}
