//! Liveness and readiness, as served on `/healthz` and `/readyz`.
//!
//! `/healthz` answers 200 while the process serves HTTP at all. `/readyz` follows [`Phase`]:
//!
//! | phase | `/readyz` | when |
//! |---|---|---|
//! | `Starting` | 503 | before the controller (or the lease candidate) started |
//! | `Standby` | **200** | leader election is on and another replica holds the Lease: this replica is healthy and waiting, so a Deployment with two replicas can roll out |
//! | `Syncing` | 503 | this replica leads (or runs without leader election) and its caches are filling |
//! | `Ready` | 200 | caches synced and, with leader election, the Lease held |
//! | `Stopping` | 503 | SIGTERM received: in-flight work is finishing |
//!
//! The leader is therefore ready once the Lease is held **and** its caches are synced; a standby is
//! ready while it waits. Kubernetes must not restart a standby for not leading, and sends no traffic
//! to the controller, so readiness only gates rollouts.

use std::sync::{Arc, Mutex, PoisonError};

/// Where the process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Starting,
    Standby,
    Syncing,
    Ready,
    Stopping,
}

impl Phase {
    /// The `/readyz` answer: whether it is ready, and the body.
    pub fn readiness(self) -> (bool, &'static str) {
        match self {
            Phase::Starting => (false, "starting"),
            Phase::Standby => (true, "ok: standby, waiting for the leader lease"),
            Phase::Syncing => (false, "syncing caches"),
            Phase::Ready => (true, "ok"),
            Phase::Stopping => (false, "shutting down"),
        }
    }

    /// The next phase after `event`, from this one. `Stopping` is final.
    pub fn on(self, event: Transition) -> Phase {
        match (self, event) {
            (Phase::Stopping, _) => Phase::Stopping,
            (_, Transition::Stop) => Phase::Stopping,
            (_, Transition::WaitForLease) => Phase::Standby,
            (_, Transition::Lead) => Phase::Syncing,
            (Phase::Syncing, Transition::CachesSynced) => Phase::Ready,
            // Caches reported after a loss of leadership (or twice) change nothing.
            (p, Transition::CachesSynced) => p,
        }
    }
}

/// What happens to the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Leader election is on and the Lease is not ours (yet).
    WaitForLease,
    /// The controller starts: the Lease was acquired, or leader election is off.
    Lead,
    /// Every watch cache has its first full list.
    CachesSynced,
    /// A shutdown signal arrived.
    Stop,
}

/// The shared phase. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Health {
    phase: Arc<Mutex<Phase>>,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            phase: Arc::new(Mutex::new(Phase::Starting)),
        }
    }
}

impl Health {
    pub fn phase(&self) -> Phase {
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn apply(&self, event: Transition) -> Phase {
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        *phase = phase.on(event);
        *phase
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Transition::*;

    fn run(events: &[Transition]) -> Vec<(Phase, bool)> {
        let h = Health::default();
        let mut seen = vec![(h.phase(), h.phase().readiness().0)];
        for e in events {
            let p = h.apply(*e);
            seen.push((p, p.readiness().0));
        }
        seen
    }

    #[test]
    fn without_leader_election_ready_once_synced() {
        assert_eq!(
            run(&[Lead, CachesSynced, Stop]),
            [
                (Phase::Starting, false),
                (Phase::Syncing, false),
                (Phase::Ready, true),
                (Phase::Stopping, false)
            ]
        );
    }

    #[test]
    fn a_standby_is_ready_and_the_leader_after_its_caches_sync() {
        assert_eq!(
            run(&[WaitForLease, Lead, CachesSynced]),
            [
                (Phase::Starting, false),
                (Phase::Standby, true),
                (Phase::Syncing, false),
                (Phase::Ready, true)
            ]
        );
    }

    #[test]
    fn stopping_is_final_and_late_cache_news_changes_nothing() {
        assert_eq!(Phase::Stopping.on(Lead), Phase::Stopping);
        assert_eq!(Phase::Stopping.on(CachesSynced), Phase::Stopping);
        assert_eq!(Phase::Standby.on(CachesSynced), Phase::Standby);
        assert_eq!(Phase::Starting.on(CachesSynced), Phase::Starting);
        assert_eq!(Phase::Standby.on(Stop), Phase::Stopping);
    }
}
