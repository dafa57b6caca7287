//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's (and so SUC's) semantics.
//!
//! SUC elects its leader with wrangler's `leader.RunOrDie`, that is client-go's `leaderelection`:
//! a Lease named after the controller in its namespace, identity = the host (pod) name,
//! `CATTLE_ELECTION_LEASE_DURATION` / `_RENEW_DEADLINE` / `_RETRY_PERIOD` (45s / 30s / 2s), the lease
//! released on a clean stop and the process exiting when the lease is lost. This module is the same
//! loop, small enough to read in one go:
//!
//! * A candidate reads the Lease every retry period. It takes it when nobody holds it, or when the
//!   holder has not renewed it for the lease duration **as measured by the candidate's own clock**
//!   since it last saw the Lease change (so clock skew between nodes does not matter).
//! * Every write is a `replace` carrying the `resourceVersion` that was read: of two candidates, only
//!   one wins; the other gets a conflict.
//! * The leader renews every retry period. Leadership is valid until the start of the last
//!   successful renewal plus the renew deadline ([`LeaseGuard::is_leading`]); the renew deadline is
//!   shorter than the lease duration, so a leader that cannot renew (API server unreachable, process
//!   paused) stops considering itself leader well before anyone else may take the Lease.
//! * Releasing clears `holderIdentity` (and sets a 1 s duration, as client-go does), so a standby
//!   takes over at its next retry instead of waiting for the lease to expire.
//!
//! Not kubert's `LeaseManager` (linkerd's): it judges a claim by the holder's `renewTime` plus the
//! duration against the local clock, where client-go, and so SUC, judge by when the Lease was last
//! seen changing; SUC's and slipway's replicas must agree on who leads while a cluster migrates,
//! and a replica whose clock is off must not take the Lease early (the chaos scene `clock-skew`).
//! It also needs the Lease to exist before the first claim.

use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::common::duration::GoDuration;

/// `CATTLE_ELECTION_LEASE_DURATION`
pub const ENV_LEASE_DURATION: &str = "CATTLE_ELECTION_LEASE_DURATION";
/// `CATTLE_ELECTION_RENEW_DEADLINE`
pub const ENV_RENEW_DEADLINE: &str = "CATTLE_ELECTION_RENEW_DEADLINE";
/// `CATTLE_ELECTION_RETRY_PERIOD`
pub const ENV_RETRY_PERIOD: &str = "CATTLE_ELECTION_RETRY_PERIOD";
/// `CATTLE_DEV_MODE`: any non-empty value makes the defaults 45h / 30h, as in wrangler.
pub const ENV_DEV_MODE: &str = "CATTLE_DEV_MODE";

/// client-go's `JitterFactor`: the renew deadline must exceed the retry period times this.
const JITTER_FACTOR: f64 = 1.2;

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    #[error("{key}={value:?} is not a valid duration (Go syntax, e.g. 45s)")]
    BadDuration { key: &'static str, value: String },
    #[error("invalid leader election timing: {0}")]
    BadTiming(String),
}

/// The three durations of client-go's leader election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ElectionConfig {
    /// How long a standby waits, after it last saw the Lease change, before taking it over.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives leadership up.
    pub renew_deadline: Duration,
    /// How often candidates try to acquire, and the leader renews.
    pub retry_period: Duration,
}

impl Default for ElectionConfig {
    fn default() -> Self {
        ElectionConfig {
            lease_duration: Duration::from_secs(45),
            renew_deadline: Duration::from_secs(30),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl ElectionConfig {
    /// Reads the `CATTLE_ELECTION_*` variables (and `CATTLE_DEV_MODE`) as wrangler does: a value
    /// that does not parse is an error, not a warning.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ElectionError> {
        let mut config = ElectionConfig::default();
        if lookup(ENV_DEV_MODE).is_some_and(|v| !v.is_empty()) {
            config.lease_duration = Duration::from_secs(45 * 3600);
            config.renew_deadline = Duration::from_secs(30 * 3600);
        }
        let read = |key: &'static str, into: &mut Duration| -> Result<(), ElectionError> {
            let Some(value) = lookup(key).filter(|v| !v.is_empty()) else {
                return Ok(());
            };
            let bad = || ElectionError::BadDuration {
                key,
                value: value.clone(),
            };
            let parsed: GoDuration = value.trim().parse().map_err(|_| bad())?;
            *into = parsed.to_std().ok_or_else(bad)?;
            Ok(())
        };
        read(ENV_LEASE_DURATION, &mut config.lease_duration)?;
        read(ENV_RENEW_DEADLINE, &mut config.renew_deadline)?;
        read(ENV_RETRY_PERIOD, &mut config.retry_period)?;
        config.validate()?;
        Ok(config)
    }

    /// client-go's checks: lease duration > renew deadline > 1.2 × retry period > 0. The lease
    /// duration is written in whole seconds, so it must be at least 1 s.
    pub fn validate(&self) -> Result<(), ElectionError> {
        let show = |d: Duration| GoDuration::from_std(d).to_string();
        if self.retry_period.is_zero() {
            return Err(ElectionError::BadTiming(
                "the retry period must be positive".into(),
            ));
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Err(ElectionError::BadTiming(format!(
                "the lease duration {} is shorter than 1s",
                show(self.lease_duration)
            )));
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(ElectionError::BadTiming(format!(
                "the lease duration {} must be longer than the renew deadline {}",
                show(self.lease_duration),
                show(self.renew_deadline)
            )));
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return Err(ElectionError::BadTiming(format!(
                "the renew deadline {} must be longer than {JITTER_FACTOR} × the retry period {}",
                show(self.renew_deadline),
                show(self.retry_period)
            )));
        }
        Ok(())
    }

    /// `spec.leaseDurationSeconds`: the lease duration rounded up to whole seconds.
    pub fn lease_duration_seconds(&self) -> i32 {
        let secs =
            self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        i32::try_from(secs).unwrap_or(i32::MAX)
    }
}

/// This process's identity in the Lease: `POD_NAME`, else `HOSTNAME`, else the kernel's host name
/// (in a pod all three are the pod name), else `slipway-<pid>`. Two replicas must never share it.
pub fn identity(lookup: impl Fn(&str) -> Option<String>, hostname: Option<String>) -> String {
    ["POD_NAME", "HOSTNAME"]
        .into_iter()
        .filter_map(lookup)
        .chain(hostname)
        .map(|v| v.trim().to_string())
        .find(|v| !v.is_empty())
        .unwrap_or_else(|| format!("slipway-{}", std::process::id()))
}

/// The kernel's host name (what Go's `os.Hostname` reads on Linux).
pub fn kernel_hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname").ok()
}

/// Whether this process may act as the leader right now. Cheap to clone and to ask.
#[derive(Debug, Clone, Default)]
pub struct LeaseGuard {
    valid_until: Arc<Mutex<Option<Instant>>>,
}

impl LeaseGuard {
    /// A guard that is always leading: for a controller run without leader election.
    pub fn always() -> Self {
        let guard = LeaseGuard::default();
        guard.set(None, true);
        guard
    }

    /// True while the last successful renewal is younger than the renew deadline.
    pub fn is_leading(&self) -> bool {
        let valid_until = *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match valid_until {
            Some(t) => Instant::now() < t,
            None => false,
        }
    }

    fn valid_until(&self) -> Option<Instant> {
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// `until: None` with `forever` means "no deadline" (no leader election).
    fn set(&self, until: Option<Instant>, forever: bool) {
        let value = if forever {
            // Far enough away to never pass, near enough to never overflow.
            Some(Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600))
        } else {
            until
        };
        *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = value;
    }
}

/// What one look at the Lease gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// This process holds the Lease now (acquired or renewed).
    Held,
    /// Someone else holds it and it has not expired.
    HeldBy(String),
    /// Another candidate wrote the Lease between our read and our write.
    Conflict,
}

/// How leadership ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseLost {
    #[error("the lease was taken over by {0}")]
    TakenOver(String),
    #[error("the lease could not be renewed within the renew deadline")]
    NotRenewed,
}

/// The decision at the heart of [`LeaderElector::try_acquire_or_renew`], as a pure function:
/// whether `me` may write itself into a Lease held by `holder`, given when this candidate last saw
/// the Lease change (`observed_at`), the Lease's duration and the current instant.
pub fn may_take(
    holder: Option<&str>,
    me: &str,
    observed_at: Instant,
    lease_duration: Duration,
    now: Instant,
) -> Result<(), String> {
    match holder.filter(|h| !h.is_empty()) {
        None => Ok(()),
        Some(h) if h == me => Ok(()),
        Some(h) if now < observed_at + lease_duration => Err(h.to_string()),
        Some(_) => Ok(()),
    }
}

/// The Lease spec `me` writes when taking or renewing `old` at `now`: acquire time and transitions
/// are kept on a renewal and bumped on a takeover (client-go's rules).
pub fn next_spec(
    old: &LeaseSpec,
    me: &str,
    lease_duration_seconds: i32,
    now: MicroTime,
) -> LeaseSpec {
    let renewing = old.holder_identity.as_deref() == Some(me);
    let transitions = old.lease_transitions.unwrap_or(0);
    LeaseSpec {
        holder_identity: Some(me.to_string()),
        lease_duration_seconds: Some(lease_duration_seconds),
        acquire_time: if renewing {
            old.acquire_time.clone().or_else(|| Some(now.clone()))
        } else {
            Some(now.clone())
        },
        renew_time: Some(now),
        lease_transitions: Some(if renewing {
            transitions
        } else {
            transitions.saturating_add(1)
        }),
        ..old.clone()
    }
}

/// The spec of a released Lease: no holder, a one-second duration (client-go's `ReleaseOnCancel`).
pub fn released_spec(old: &LeaseSpec, now: MicroTime) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(now.clone()),
        renew_time: Some(now),
        ..old.clone()
    }
}

/// One candidate for the Lease `name` in `namespace`.
pub struct LeaderElector {
    api: Api<Lease>,
    name: String,
    identity: String,
    config: ElectionConfig,
    /// The resourceVersion last seen, and when (by this process's clock) it was first seen.
    observed: Option<(String, Instant)>,
    /// The Lease as this process last wrote it while holding it: renewed over without a read.
    written: Option<Lease>,
    guard: LeaseGuard,
}

impl LeaderElector {
    pub fn new(
        client: Client,
        namespace: &str,
        name: &str,
        identity: String,
        config: ElectionConfig,
    ) -> Self {
        LeaderElector {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity,
            config,
            observed: None,
            written: None,
            guard: LeaseGuard::default(),
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Tells reconciles whether this process still leads.
    pub fn guard(&self) -> LeaseGuard {
        self.guard.clone()
    }

    /// Tries every retry period (jittered as client-go does) until this process holds the Lease.
    /// Returns false if `cancel` fires first.
    pub async fn acquire(&mut self, cancel: &CancellationToken) -> bool {
        info!(lease = %self.name, identity = %self.identity, "waiting to acquire the leader lease");
        let mut last_holder: Option<String> = None;
        loop {
            let started = Instant::now();
            let attempt = tokio::select! {
                _ = cancel.cancelled() => return false,
                a = tokio::time::timeout(self.config.renew_deadline, self.try_acquire_or_renew()) => a,
            };
            match attempt {
                Ok(Ok(Attempt::Held)) => {
                    self.guard
                        .set(Some(started + self.config.renew_deadline), false);
                    info!(lease = %self.name, identity = %self.identity, "acquired the leader lease");
                    return true;
                }
                Ok(Ok(Attempt::HeldBy(holder))) => {
                    if last_holder.as_deref() != Some(holder.as_str()) {
                        info!(lease = %self.name, %holder, "the leader lease is held by another replica");
                        last_holder = Some(holder);
                    }
                }
                Ok(Ok(Attempt::Conflict)) => {
                    debug!(lease = %self.name, "lost a race for the lease")
                }
                Ok(Err(e)) => warn!(lease = %self.name, "cannot acquire the leader lease: {e}"),
                Err(_) => warn!(lease = %self.name, "acquiring the leader lease timed out"),
            }
            let wait = jittered(self.config.retry_period);
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Renews the Lease every retry period until `stop` fires, then releases it and returns
    /// `Ok(())`; returns `Err` as soon as leadership is lost (the caller must stop writing: the
    /// guard already says so).
    pub async fn hold(mut self, stop: CancellationToken) -> Result<(), LeaseLost> {
        loop {
            tokio::select! {
                _ = stop.cancelled() => {
                    self.release().await;
                    return Ok(());
                }
                _ = tokio::time::sleep(self.config.retry_period) => {}
            }
            let now = Instant::now();
            let deadline = self.guard.valid_until().unwrap_or(now);
            if now >= deadline {
                return Err(self.lose(LeaseLost::NotRenewed));
            }
            let attempt = tokio::select! {
                _ = stop.cancelled() => {
                    self.release().await;
                    return Ok(());
                }
                a = tokio::time::timeout(deadline - now, self.try_acquire_or_renew()) => a,
            };
            match attempt {
                Ok(Ok(Attempt::Held)) => {
                    self.guard
                        .set(Some(now + self.config.renew_deadline), false);
                    debug!(lease = %self.name, "renewed the leader lease");
                }
                Ok(Ok(Attempt::HeldBy(holder))) => {
                    return Err(self.lose(LeaseLost::TakenOver(holder)));
                }
                Ok(Ok(Attempt::Conflict)) => {
                    warn!(lease = %self.name, "conflict renewing the leader lease; retrying");
                }
                Ok(Err(e)) => warn!(lease = %self.name, "cannot renew the leader lease: {e}"),
                Err(_) => return Err(self.lose(LeaseLost::NotRenewed)),
            }
        }
    }

    fn lose(&mut self, why: LeaseLost) -> LeaseLost {
        self.written = None;
        self.guard.set(None, false);
        why
    }

    /// Gives the Lease up if this process still holds it. Best effort: on failure the Lease simply
    /// expires.
    pub async fn release(&mut self) {
        let was_leading = self.guard.is_leading();
        self.written = None;
        self.guard.set(None, false);
        if !was_leading {
            return;
        }
        let result = async {
            let Some(mut lease) = self.api.get_opt(&self.name).await? else {
                return Ok(false);
            };
            let spec = lease.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return Ok(false);
            }
            lease.spec = Some(released_spec(&spec, MicroTime(jiff::Timestamp::now())));
            self.api
                .replace(&self.name, &PostParams::default(), &lease)
                .await?;
            Ok::<_, kube::Error>(true)
        };
        match tokio::time::timeout(self.config.retry_period.max(Duration::from_secs(5)), result)
            .await
        {
            Ok(Ok(true)) => info!(lease = %self.name, "released the leader lease"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => warn!(lease = %self.name, "cannot release the leader lease: {e}"),
            Err(_) => warn!(lease = %self.name, "releasing the leader lease timed out"),
        }
    }

    /// One read and at most one write of the Lease (client-go's `tryAcquireOrRenew`); while
    /// this process leads, first a write over the Lease as it last wrote it, without the read
    /// (client-go's fast path), and the read only if that write fails.
    pub async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        let now = Instant::now();
        let stamp = MicroTime(jiff::Timestamp::now());
        let seconds = self.config.lease_duration_seconds();
        if self.renewed_unread(seconds, &stamp, now).await {
            return Ok(Attempt::Held);
        }
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(seconds),
                    acquire_time: Some(stamp.clone()),
                    renew_time: Some(stamp),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(&created, now);
                    self.written = Some(created);
                    Ok(Attempt::Held)
                }
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Conflict),
                Err(e) => Err(e),
            };
        };
        self.observe(&lease, now);
        let observed_at = self.observed.as_ref().map_or(now, |(_, at)| *at);
        let spec = lease.spec.clone().unwrap_or_default();
        let duration = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .filter(|s| *s > 0)
            .map_or(self.config.lease_duration, Duration::from_secs);
        if let Err(holder) = may_take(
            spec.holder_identity.as_deref(),
            &self.identity,
            observed_at,
            duration,
            now,
        ) {
            return Ok(Attempt::HeldBy(holder));
        }
        lease.spec = Some(next_spec(&spec, &self.identity, seconds, stamp));
        // `lease.metadata.resourceVersion` is the one just read: a concurrent write makes this a
        // conflict instead of two holders.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observe(&written, now);
                self.written = Some(written);
                Ok(Attempt::Held)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::Conflict),
            Err(e) => Err(e),
        }
    }

    /// While this process leads: whether a write over the Lease as it last wrote it renewed
    /// it. Its resourceVersion is the one written: should anyone have written since, the write is
    /// refused, and a read decides.
    async fn renewed_unread(&mut self, seconds: i32, stamp: &MicroTime, now: Instant) -> bool {
        let Some(mut lease) = self.written.take().filter(|_| self.guard.is_leading()) else {
            return false;
        };
        let spec = lease.spec.take().unwrap_or_default();
        lease.spec = Some(next_spec(&spec, &self.identity, seconds, stamp.clone()));
        match (self.api)
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observe(&written, now);
                self.written = Some(written);
                true
            }
            Err(e) => {
                debug!(lease = %self.name, "renewing the lease unread failed: {e}");
                false
            }
        }
    }

    fn observe(&mut self, lease: &Lease, now: Instant) {
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        if self.observed.as_ref().map(|(v, _)| v) != Some(&rv) {
            self.observed = Some((rv, now));
        }
    }
}

/// `wait.Jitter(period, 1.2)`: between `period` and 2.2 × `period`.
fn jittered(period: Duration) -> Duration {
    let random = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    // The top 53 bits as a fraction in [0, 1).
    let fraction = (random >> 11) as f64 / (1u64 << 53) as f64;
    period.mul_f64(1.0 + JITTER_FACTOR * fraction)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::testing::{Answer, ApiServer, CONFLICT, NOT_FOUND};
    use serde_json::json;

    /// The holder renews with one write and no read; should that write be refused (someone
    /// wrote the Lease since), it reads the Lease and yields to the holder it names.
    #[tokio::test]
    async fn the_holder_renews_unread_and_reads_when_that_fails() {
        let api = ApiServer::new();
        api.on("GET", "leases/slipway", NOT_FOUND)
            .on("POST", "leases", Answer::Echo(201))
            .on("PUT", "leases/slipway", Answer::Echo(200));
        let mut elector = LeaderElector::new(
            api.client(),
            "ns",
            "slipway",
            "me".into(),
            Default::default(),
        );
        assert!(elector.acquire(&CancellationToken::new()).await);
        let verbs = |api: &ApiServer| -> Vec<String> {
            (api.sent().iter())
                .filter(|s| !s.is_event())
                .map(|s| s.method.clone())
                .collect()
        };
        assert_eq!(verbs(&api), ["GET", "POST"], "acquired: read, then created");
        assert!(matches!(
            elector.try_acquire_or_renew().await,
            Ok(Attempt::Held)
        ));
        assert!(matches!(
            elector.try_acquire_or_renew().await,
            Ok(Attempt::Held)
        ));
        assert_eq!(verbs(&api), ["GET", "POST", "PUT", "PUT"], "renewed unread");
        let renewed = &api.sent()[3].body["spec"];
        assert_eq!(renewed["holderIdentity"], "me");

        let now = jiff::Timestamp::now().to_string();
        let theirs = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "slipway", "namespace": "ns", "resourceVersion": "9"},
            "spec": {"holderIdentity": "other", "leaseDurationSeconds": 45,
                     "acquireTime": now, "renewTime": now},
        });
        api.on("PUT", "leases/slipway", CONFLICT).on(
            "GET",
            "leases/slipway",
            Answer::Json(200, theirs),
        );
        let attempt = elector.try_acquire_or_renew().await;
        assert!(
            matches!(&attempt, Ok(Attempt::HeldBy(h)) if h == "other"),
            "{attempt:?}"
        );
        assert_eq!(verbs(&api)[4..], ["PUT", "GET"], "refused, then read");
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |key| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    }

    #[test]
    fn defaults_are_wrangler_s() {
        let c = ElectionConfig::from_lookup(env(&[])).unwrap();
        assert_eq!(c, ElectionConfig::default());
        assert_eq!(c.lease_duration, Duration::from_secs(45));
        assert_eq!(c.renew_deadline, Duration::from_secs(30));
        assert_eq!(c.retry_period, Duration::from_secs(2));
        assert_eq!(c.lease_duration_seconds(), 45);
    }

    #[test]
    fn go_durations_are_read() {
        let c = ElectionConfig::from_lookup(env(&[
            (ENV_LEASE_DURATION, "10s"),
            (ENV_RENEW_DEADLINE, "6s"),
            (ENV_RETRY_PERIOD, "500ms"),
        ]))
        .unwrap();
        assert_eq!(c.lease_duration, Duration::from_secs(10));
        assert_eq!(c.renew_deadline, Duration::from_secs(6));
        assert_eq!(c.retry_period, Duration::from_millis(500));
        let c = ElectionConfig::from_lookup(env(&[(ENV_LEASE_DURATION, "1m0.5s")])).unwrap();
        assert_eq!(c.lease_duration, Duration::from_millis(60_500));
        assert_eq!(c.lease_duration_seconds(), 61, "rounded up");
    }

    #[test]
    fn dev_mode_stretches_the_defaults_only() {
        let c = ElectionConfig::from_lookup(env(&[(ENV_DEV_MODE, "true")])).unwrap();
        assert_eq!(c.lease_duration, Duration::from_secs(45 * 3600));
        assert_eq!(c.renew_deadline, Duration::from_secs(30 * 3600));
        assert_eq!(c.retry_period, Duration::from_secs(2));
        let c = ElectionConfig::from_lookup(env(&[
            (ENV_DEV_MODE, "1"),
            (ENV_LEASE_DURATION, "20s"),
            (ENV_RENEW_DEADLINE, "10s"),
        ]))
        .unwrap();
        assert_eq!(c.lease_duration, Duration::from_secs(20));
    }

    #[test]
    fn bad_values_are_errors() {
        for (key, value) in [
            (ENV_LEASE_DURATION, "45"),
            (ENV_RENEW_DEADLINE, "soon"),
            (ENV_RETRY_PERIOD, "-2s"),
        ] {
            let e = ElectionConfig::from_lookup(env(&[(key, value)])).unwrap_err();
            assert!(
                matches!(&e, ElectionError::BadDuration { key: k, .. } if *k == key),
                "{e}"
            );
        }
        // Empty means unset, as in wrangler.
        assert!(ElectionConfig::from_lookup(env(&[(ENV_RETRY_PERIOD, "")])).is_ok());
    }

    #[test]
    fn timing_is_checked_like_client_go() {
        let bad = [
            (ENV_LEASE_DURATION, "30s", ENV_RENEW_DEADLINE, "30s"),
            (ENV_RENEW_DEADLINE, "2s", ENV_RETRY_PERIOD, "2s"),
            (ENV_RENEW_DEADLINE, "2.4s", ENV_RETRY_PERIOD, "2s"),
            (ENV_RETRY_PERIOD, "0s", ENV_RENEW_DEADLINE, "30s"),
            (ENV_LEASE_DURATION, "500ms", ENV_RENEW_DEADLINE, "300ms"),
        ];
        for (k1, v1, k2, v2) in bad {
            let e = ElectionConfig::from_lookup(env(&[(k1, v1), (k2, v2)])).unwrap_err();
            assert!(
                matches!(e, ElectionError::BadTiming(_)),
                "{k1}={v1} {k2}={v2}: {e}"
            );
        }
        assert!(
            ElectionConfig::from_lookup(env(&[
                (ENV_RENEW_DEADLINE, "2.5s"),
                (ENV_RETRY_PERIOD, "2s")
            ]))
            .is_ok()
        );
    }

    #[test]
    fn identity_prefers_pod_name_then_hostname() {
        let host = Some("kernel-host\n".to_string());
        assert_eq!(
            identity(
                env(&[("POD_NAME", "suc-abc"), ("HOSTNAME", "h")]),
                host.clone()
            ),
            "suc-abc"
        );
        assert_eq!(identity(env(&[("HOSTNAME", "h")]), host.clone()), "h");
        assert_eq!(identity(env(&[("POD_NAME", " ")]), host), "kernel-host");
        assert!(identity(env(&[]), None).starts_with("slipway-"));
    }

    #[test]
    fn a_held_lease_is_taken_only_after_the_duration_by_our_clock() {
        let t0 = Instant::now();
        let d = Duration::from_secs(10);
        assert_eq!(may_take(None, "me", t0, d, t0), Ok(()));
        assert_eq!(may_take(Some(""), "me", t0, d, t0), Ok(()));
        assert_eq!(may_take(Some("me"), "me", t0, d, t0), Ok(()));
        assert_eq!(
            may_take(Some("other"), "me", t0, d, t0 + Duration::from_secs(9)),
            Err("other".to_string())
        );
        assert_eq!(
            may_take(Some("other"), "me", t0, d, t0 + Duration::from_secs(10)),
            Ok(())
        );
    }

    fn at(s: &str) -> MicroTime {
        MicroTime(s.parse().unwrap())
    }

    #[test]
    fn renewing_keeps_acquire_time_and_transitions_taking_over_bumps_them() {
        let old = LeaseSpec {
            holder_identity: Some("me".into()),
            acquire_time: Some(at("2026-01-01T00:00:00Z")),
            renew_time: Some(at("2026-01-01T00:00:10Z")),
            lease_duration_seconds: Some(45),
            lease_transitions: Some(3),
            ..Default::default()
        };
        let renewed = next_spec(&old, "me", 45, at("2026-01-01T00:00:12Z"));
        assert_eq!(renewed.acquire_time, old.acquire_time);
        assert_eq!(renewed.renew_time, Some(at("2026-01-01T00:00:12Z")));
        assert_eq!(renewed.lease_transitions, Some(3));

        let taken = next_spec(&old, "you", 10, at("2026-01-01T00:01:00Z"));
        assert_eq!(taken.holder_identity.as_deref(), Some("you"));
        assert_eq!(taken.acquire_time, Some(at("2026-01-01T00:01:00Z")));
        assert_eq!(taken.lease_duration_seconds, Some(10));
        assert_eq!(taken.lease_transitions, Some(4));

        let released = released_spec(&renewed, at("2026-01-01T00:00:20Z"));
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_duration_seconds, Some(1));
        assert_eq!(released.lease_transitions, Some(3));
    }

    #[test]
    fn the_guard_expires() {
        let g = LeaseGuard::default();
        assert!(!g.is_leading());
        g.set(Some(Instant::now() + Duration::from_secs(60)), false);
        assert!(g.is_leading());
        g.set(Some(Instant::now()), false);
        assert!(!g.is_leading());
        assert!(LeaseGuard::always().is_leading());
    }

    #[test]
    fn jitter_stays_within_client_go_bounds() {
        for _ in 0..100 {
            let j = jittered(Duration::from_secs(2));
            assert!(
                j >= Duration::from_secs(2) && j <= Duration::from_millis(4400),
                "{j:?}"
            );
        }
    }
}
