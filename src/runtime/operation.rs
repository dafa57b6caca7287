//! The one reconcile loop every node operation runs in.
//!
//! An [`Operation`] says how to observe one object of its kind, which pure core decides on it,
//! and how to perform one effect of the decision; the loop does the rest the same way for every
//! kind: the leader check, the finalizer, the decision and its claim on nodes under the budget's
//! lock, the order of effects and status, the events, the metrics, the backoff after errors, and
//! an event when a failure persists (so it reaches the object, not only the log).

use std::collections::BTreeSet;
use std::fmt::Debug;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use jiff::Timestamp;
use kube::core::object::HasStatus;
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::chores::{Object, Scope};
use super::error::{Error, ErrorKind};
use super::metrics::Kind;
use super::pruned::Pruned;
use super::shared::Shared;
use super::written::Written;
use crate::common::decision::{Decision, Effect, Event};
use crate::node::budget::Budget;
use crate::node::holders::Holder;

/// One kind of node operation, as the runtime drives it.
pub trait Operation: Send + Sync + Sized + 'static {
    /// The resource.
    type Object: Object + HasStatus<Status = Self::Status>;
    type Status: Serialize + Clone + PartialEq + Default + Send + Sync;
    type Effect: Effect + Debug + Send + Sync;
    /// What the kind reports besides its status (gauges).
    type Report: Default + Send;
    /// What the shell read for one decision, besides the object.
    type Observed: Send + Sync;

    const KIND: Kind;
    /// Held while the object has something to give back when it is deleted ([`Operation::holds`]).
    const FINALIZER: &'static str;

    fn shared(&self) -> &Shared;

    fn holder(&self, obj: &Self::Object) -> Holder;

    /// Runs once the caches every budget reads are synced (see [`Shared::synced`]): the caches
    /// this kind reads are synced; the object as this process last wrote it, when the cache has
    /// not shown that yet.
    fn prepare(
        &self,
        obj: Arc<Self::Object>,
    ) -> impl Future<Output = Result<Arc<Self::Object>, Error>> + Send;

    /// Reads what the decision needs (from the caches, and the few things read fresh).
    fn observe(
        &self,
        obj: &Self::Object,
        now: Timestamp,
    ) -> impl Future<Output = Result<Self::Observed, Error>> + Send;

    /// The kind's pure core, given the budget: who else holds which node, and the
    /// DisruptionBudgets that limit this object. An object being deleted is decided on once more:
    /// its decision gives back what it holds.
    fn decide(
        &self,
        obj: &Self::Object,
        observed: &Self::Observed,
        budget: &Budget,
        now: Timestamp,
    ) -> Decision<Self::Status, Self::Effect, Self::Report>;

    /// How many nodes the decision reads: what its cost grows with, which sets how soon the
    /// object may be reconciled again (see [`PER_NODE`]).
    fn size(&self, observed: &Self::Observed) -> usize;

    /// Performs one effect.
    fn perform(
        &self,
        obj: &Self::Object,
        observed: &Self::Observed,
        effect: &Self::Effect,
    ) -> impl Future<Output = Result<(), Error>> + Send;

    /// The objects of this kind as this process last wrote them (held by the kind's value, so
    /// that every reconcile of it sees the same).
    fn written(&self) -> &Written<Self::Object>;

    /// The decision was applied: gauges. `obj` carries the decided status (the object the status
    /// write returned, or the one read when the status did not change); being deleted, the last.
    fn applied(&self, _obj: &Self::Object, _report: &Self::Report) {}

    /// `obj`'s deletion is done: what the kind keeps of it goes (its gauges, its maps), or a
    /// cluster that creates and deletes objects every day keeps them all.
    fn forget(&self, _obj: &Self::Object) {}

    /// Whether `obj`, once `decision` is applied (its status written, its effects performed),
    /// holds something its deletion must give back (a node it cordoned or labelled, a pod it
    /// created): its finalizer is set before such a decision is applied, and removed
    /// after one that holds nothing. A finalizer nobody removes blocks the deletion of its object,
    /// its namespace and its CRD once the controller is gone (uninstalled with them); an object at
    /// rest then holds none. The default, always, is for the kinds whose finalizer is part of the
    /// API they share with another operator.
    fn holds(
        &self,
        _obj: &Self::Object,
        _decision: &Decision<Self::Status, Self::Effect, Self::Report>,
        _observed: &Self::Observed,
    ) -> bool {
        true
    }
}

/// After this many failures in a row, a reconcile's error becomes a Warning event on the object.
const ERRORS_BEFORE_EVENT: u32 = 3;
/// The longest wait after a failure.
const BACKOFF_MAX: Duration = Duration::from_secs(60);
/// How soon an object whose decision could not claim its nodes (another operation took one in
/// between) is looked at again.
const CLAIM_RETRY: Duration = Duration::from_secs(10);
/// The time between the starts of two reconciles of one object grows with the nodes its decision
/// reads (what its cost grows with: about a microsecond a node, observing and deciding), by
/// [`PER_NODE`], between a floor and [`MAX_INTERVAL`]. Two milliseconds a node, not one: at 1,000
/// nodes that cut a rollout's Plan reconciles from 220 to 132 and its CPU by an eighth, for 1 s
/// more in 300 (a finished Job is acted on within 2 s, in waves whose Jobs take 30 s). A busy
/// rollout triggers its decision on every Job that finishes: without a floor, a 5,000-node rollout
/// decided 3 times a second, each time over every node. Triggers that come sooner are folded into
/// one reconcile at the end of the interval. The size, not a measured time, so that the interval is
/// the same on a busy machine and in a debug build. The floor is [`MIN_INTERVAL`] after a reconcile
/// that wrote nothing, and [`QUICK_INTERVAL`] after one that wrote (a cordon, a Job, a status): the
/// next step of a small operation waits on what it just wrote (a three-node NodeOp took 12.2 s with
/// a one-second floor and 6.6 s with 0.1 s), while an object whose reconciles change nothing
/// (something else moves) is not decided more than once a second. A floor of 0.1 s after every
/// reconcile made CI's real nodes, emulated guests beside the scenes' debug-build controllers, miss
/// their bounds twice in two runs.
pub(crate) const PER_NODE: Duration = Duration::from_millis(2);
const MIN_INTERVAL: Duration = Duration::from_secs(1);
const QUICK_INTERVAL: Duration = Duration::from_millis(100);
const MAX_INTERVAL: Duration = Duration::from_secs(5);
/// The interval of an object whose size is not known yet (its first decision is under way).
const FIRST_INTERVAL: Duration = Duration::from_secs(1);

/// The interval after a decision that read `nodes` nodes, and whose reconcile `wrote` or not.
pub(crate) fn interval_for(nodes: usize, wrote: bool) -> Duration {
    let floor = match wrote {
        true => QUICK_INTERVAL,
        false => MIN_INTERVAL,
    };
    PER_NODE
        .saturating_mul(u32::try_from(nodes).unwrap_or(u32::MAX))
        .clamp(floor, MAX_INTERVAL)
}

/// What a reconcile says of itself that sets the interval before the next one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Pace {
    /// How many nodes its decision read (`None`: it did not get to a decision).
    pub nodes: Option<usize>,
    /// Whether it wrote anything: an effect performed or its status written.
    pub wrote: bool,
}

/// What the loop keeps for one kind. Its maps hold an entry only while it can matter: an object's
/// entries go when its deletion is done, a start older than [`MIN_INTERVAL`] when the map has
/// doubled since it was last pruned, and the failures of an object that left the controller's
/// cache (its finalizer removed by someone else) when their map has; so a cluster that creates
/// and deletes objects every day keeps none of them here.
pub struct Driver<O: Operation> {
    op: Arc<O>,
    /// Failures in a row, by object.
    failures: Mutex<Pruned<u32>>,
    /// When each object's last reconcile started, and how it went.
    started: Mutex<Pruned<Start>>,
    /// The controller's cache of the kind, when it runs under one.
    cache: Option<Store<O::Object>>,
}

/// An object's last reconcile: when it started, and how the last decided one went.
#[derive(Debug, Clone, Copy)]
struct Start {
    at: tokio::time::Instant,
    pace: Pace,
}

impl Start {
    /// The interval before the next reconcile.
    fn interval(&self) -> Duration {
        self.pace
            .nodes
            .map_or(FIRST_INTERVAL, |n| interval_for(n, self.pace.wrote))
    }
}

impl<O: Operation> Driver<O> {
    pub fn new(op: Arc<O>) -> Driver<O> {
        Driver {
            op,
            failures: Mutex::default(),
            started: Mutex::default(),
            cache: None,
        }
    }

    /// Forgets the failures of objects that are not in `cache` (the controller's own).
    pub fn with_cache(mut self, cache: Store<O::Object>) -> Driver<O> {
        self.cache = Some(cache);
        self
    }

    /// `Some(wait)` when `obj`'s last reconcile started less than its interval ago; otherwise
    /// records that one starts now.
    pub(crate) fn too_soon(&self, obj: &O::Object) -> Option<Duration> {
        let now = tokio::time::Instant::now();
        let mut started = lock(&self.started);
        let key = Self::key(obj);
        let last = started.map.get(&key).copied();
        if let Some(wait) = last
            .map(|l| l.interval().saturating_sub(now.duration_since(l.at)))
            .filter(|wait| !wait.is_zero())
        {
            return Some(wait);
        }
        let pace = last.map(|l| l.pace).unwrap_or_default();
        started.map.insert(key, Start { at: now, pace });
        // A start older than its interval holds nothing back: the same as none.
        started.prune(|_, l| now.duration_since(l.at) < l.interval());
        None
    }

    /// How `obj`'s reconcile went, which sets the interval before its next one.
    pub(crate) fn paced(&self, obj: &O::Object, pace: Pace) {
        if let Some(start) = lock(&self.started).map.get_mut(&Self::key(obj)) {
            start.pace = pace;
        }
    }

    fn key(obj: &O::Object) -> (String, String) {
        (obj.namespace().unwrap_or_default(), obj.name_any())
    }

    /// Counts a failure of `obj`'s reconcile; the new count.
    fn failed(&self, obj: &O::Object) -> u32 {
        let mut failures = lock(&self.failures);
        let key = Self::key(obj);
        let n = *failures.map.entry(key).and_modify(|n| *n += 1).or_insert(1);
        if self.cache.is_some() {
            failures.prune(|(ns, name), _| self.cached(ns, name));
        }
        n
    }

    /// Whether the controller's cache has the object (or there is no cache to ask).
    fn cached(&self, ns: &str, name: &str) -> bool {
        let Some(cache) = &self.cache else {
            return true;
        };
        let at = ObjectRef::new(name);
        let at = match ns.is_empty() {
            true => at,
            false => at.within(ns),
        };
        cache.get(&at).is_some()
    }

    fn succeeded(&self, obj: &O::Object) {
        lock(&self.failures).map.remove(&Self::key(obj));
    }

    /// `obj`'s deletion is done (or under way): nothing of it is kept.
    fn forget(&self, obj: &O::Object) {
        let key = Self::key(obj);
        lock(&self.failures).map.remove(&key);
        lock(&self.started).map.remove(&key);
    }

    /// How many objects each map holds: (failures, starts).
    pub(crate) fn tracked(&self) -> (usize, usize) {
        (
            lock(&self.failures).map.len(),
            lock(&self.started).map.len(),
        )
    }
}

/// A poisoned lock still holds a usable map: a panic elsewhere loses at most one count.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `controller` (the kind's watches and triggers) until `shutdown`, reconciling with `op`.
pub async fn drive<O>(
    op: Arc<O>,
    controller: Controller<O::Object>,
    concurrency: u16,
    shutdown: CancellationToken,
) where
    O: Operation,
    <O::Object as kube::Resource>::Scope: Scope,
{
    info!(kind = %O::KIND, "reconciling");
    op.shared().metrics().kind_running(O::KIND);
    let driver = Driver::new(op).with_cache(controller.store());
    controller
        .with_config(Config::default().concurrency(concurrency))
        .graceful_shutdown_on(shutdown.cancelled_owned())
        .run(throttled, error_policy, Arc::new(driver))
        .for_each(|result| async move {
            if let Err(e) = result {
                warn!(kind = %O::KIND, "reconcile failed: {e}");
            }
        })
        .await;
}

/// [`reconcile`], at most once per interval for one object (see [`PER_NODE`]): a trigger that
/// comes sooner is looked at when the interval ends.
async fn throttled<O>(obj: Arc<O::Object>, driver: Arc<Driver<O>>) -> Result<Action, Error>
where
    O: Operation,
    <O::Object as kube::Resource>::Scope: Scope,
{
    if let Some(wait) = driver.too_soon(&obj) {
        return Ok(Action::requeue(wait));
    }
    reconcile(obj, driver).await
}

pub(crate) async fn reconcile<O>(
    obj: Arc<O::Object>,
    driver: Arc<Driver<O>>,
) -> Result<Action, Error>
where
    O: Operation,
    <O::Object as kube::Resource>::Scope: Scope,
{
    let metrics = driver.op.shared().metrics();
    metrics.reconcile_started(O::KIND);
    let started = Instant::now();
    let mut pace = Pace::default();
    let result = reconcile_paced(driver.op.as_ref(), obj.clone(), &mut pace).await;
    if pace.nodes.is_some() {
        driver.paced(&obj, pace);
    }
    metrics.reconcile_finished(
        O::KIND,
        started.elapsed(),
        result.as_ref().err().map(Error::kind),
    );
    match (&result, obj.meta().deletion_timestamp.is_some()) {
        (Ok(_), true) => driver.forget(&obj),
        (Ok(_), false) => driver.succeeded(&obj),
        (Err(_), _) => {}
    }
    // Writes of objects gone from the cache that were never reconciled deleted.
    if driver.cache.is_some() {
        driver
            .op
            .written()
            .prune(|ns, name| driver.cached(ns, name));
    }
    let (failures, starts) = driver.tracked();
    let written = driver.op.written().len();
    metrics.tracked(
        O::KIND,
        [
            ("failures", failures),
            ("starts", starts),
            ("written", written),
        ],
    );
    result
}

#[cfg(test)]
pub(crate) async fn reconcile_once<O>(op: &O, obj: Arc<O::Object>) -> Result<Action, Error>
where
    O: Operation,
    <O::Object as kube::Resource>::Scope: Scope,
{
    reconcile_paced(op, obj, &mut Pace::default()).await
}

/// [`reconcile_once`], saying in `pace` how many nodes the decision read (when it got there) and
/// whether it wrote.
async fn reconcile_paced<O>(op: &O, obj: Arc<O::Object>, pace: &mut Pace) -> Result<Action, Error>
where
    O: Operation,
    <O::Object as kube::Resource>::Scope: Scope,
{
    let shared = op.shared();
    shared.chores().leading()?;
    // Before anything reads the budget or forgets the claims of objects it cannot find.
    shared.synced().await?;
    let obj = op.prepare(op.written().latest(obj)).await?;
    let me = op.holder(&obj);
    let deleting = obj.meta().deletion_timestamp.is_some();
    let finalized = obj.finalizers().iter().any(|f| f == O::FINALIZER);
    let before = shared.claimed_by(&me);
    if deleting && !finalized {
        deleted(op, &obj, &me, &before);
        return Ok(Action::await_change());
    }
    let now = super::clock::now();
    let observed = op.observe(&obj, now).await?;
    pace.nodes = Some(op.size(&observed));
    let decided = shared.decide_and_claim(
        &me,
        deleting,
        |budget| op.decide(&obj, &observed, budget, now),
        |d| &d.holds,
    );
    let decision = match decided {
        Ok(d) => d,
        Err((node, refusal)) => {
            warn!(kind = %O::KIND, name = %obj.name_any(), "node {node} may not be taken ({refusal}); deciding again");
            return Ok(Action::requeue(CLAIM_RETRY));
        }
    };
    let requeue = decision.requeue;
    if !deleting {
        shared.set_next(&me, decision.next.clone());
    }
    let holds = deleting || op.holds(&obj, &decision, &observed);
    let obj = match holds && !finalized {
        // Before any node is touched: deleting the object then gives its nodes back. The patched
        // object carries the resourceVersion the status write must name.
        true => match finalize(op, &obj, true).await? {
            Some(patched) => patched,
            None => return Ok(Action::await_change()),
        },
        false => obj,
    };
    let applied = apply(op, &obj, &observed, decision, &mut pace.wrote).await;
    pace.wrote |= holds && !finalized;
    // After the status write: the woken find this object's record already letting go.
    shared.wake_readers(&me, &before);
    applied?;
    if deleting {
        shared
            .chores()
            .set_finalizer(obj.as_ref(), O::FINALIZER, false)
            .await?;
        deleted(op, &obj, &me, &before);
        info!(kind = %O::KIND, name = %obj.name_any(), "deleted: cleaned up");
        return Ok(Action::await_change());
    }
    if finalized && !holds {
        // After the decision that gave the last node back, as written.
        pace.wrote |= finalize(op, &op.written().latest(obj), false)
            .await?
            .is_some();
    }
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// Adds (`on`) or removes `O`'s finalizer; the patched object, remembered as written (the status
/// write that follows names its resourceVersion), or `None` when the object is gone.
async fn finalize<O: Operation>(
    op: &O,
    obj: &Arc<O::Object>,
    on: bool,
) -> Result<Option<Arc<O::Object>>, Error>
where
    <O::Object as kube::Resource>::Scope: Scope,
{
    let chores = op.shared().chores();
    let Some(patched) = chores.set_finalizer(obj.as_ref(), O::FINALIZER, on).await? else {
        return Ok(None);
    };
    let patched = Arc::new(patched);
    op.written().remember(patched.clone());
    Ok(Some(patched))
}

/// `obj` (held as `me`, holding `before`) is deleted and let go of: nothing of it is kept.
fn deleted<O: Operation>(op: &O, obj: &O::Object, me: &Holder, before: &BTreeSet<String>) {
    let shared = op.shared();
    op.written().forget(obj);
    shared.release(me);
    shared.wake_readers(me, before);
    // At once, not when another object's reconcile prunes the gone (none may come), and after
    // the wake, which asks the index who else reads the nodes let go of.
    shared.nodes_mut().forget(me);
    op.forget(obj);
}

/// What `obj`'s next decision is, now, claiming nothing and applying nothing: what
/// `slipway explain` shows, decided by the same code as a reconcile.
pub async fn predict<O>(
    op: &O,
    obj: Arc<O::Object>,
) -> Result<Decision<O::Status, O::Effect, O::Report>, Error>
where
    O: Operation,
{
    op.shared().synced().await?;
    let obj = op.prepare(obj).await?;
    let now = super::clock::now();
    let observed = op.observe(&obj, now).await?;
    let budget = op.shared().budget_for(&op.holder(&obj));
    Ok(op.decide(&obj, &observed, &budget, now))
}

/// Applies a decision: the effects that give back, the status, the events, then the effects that
/// take, in the order decided. The first failure stops it: a later effect may rest on an earlier
/// one (the Lease before the cordon), and the next reconcile decides again from what the cluster
/// shows. An object being deleted has no status to write: its cleanup runs in the order decided.
/// `wrote` says whether anything was written (even when a later step failed).
async fn apply<O>(
    op: &O,
    obj: &O::Object,
    observed: &O::Observed,
    decision: Decision<O::Status, O::Effect, O::Report>,
    wrote: &mut bool,
) -> Result<(), Error>
where
    O: Operation,
    <O::Object as kube::Resource>::Scope: Scope,
{
    let chores = op.shared().chores();
    let deleting = obj.meta().deletion_timestamp.is_some();
    let (first, then): (Vec<_>, Vec<_>) = decision
        .effects
        .iter()
        .partition(|e| !deleting && e.before_status());
    let changed = match obj.status() {
        Some(status) => *status != decision.status,
        None => decision.status != O::Status::default(),
    };
    *wrote = !decision.effects.is_empty();
    for effect in first {
        op.perform(obj, observed, effect).await?;
    }
    let mut written = None;
    if !deleting && changed {
        *wrote = true;
        let Some(w) = chores.write_status(obj, &decision.status).await? else {
            // Gone: nothing is taken for an object that no longer exists.
            return Ok(());
        };
        // The same resourceVersion: the status differed only in text past what a status keeps
        // (common::bounded), so nothing was sent.
        if w.resource_version() == obj.resource_version() {
            *wrote = !decision.effects.is_empty();
        } else {
            let w = Arc::new(w);
            op.written().remember(w.clone());
            written = Some(w);
        }
    }
    // Effects on the object itself name the resourceVersion the status write left.
    let obj = written.as_deref().unwrap_or(obj);
    chores.publish(obj, &decision.events).await;
    for effect in then {
        if let Err(e) = op.perform(obj, observed, effect).await {
            warn!(kind = %O::KIND, name = %obj.name_any(), ?effect, "failed: {e}");
            return Err(e);
        }
    }
    op.applied(obj, &decision.report);
    Ok(())
}

pub(crate) fn error_policy<O>(obj: Arc<O::Object>, error: &Error, driver: Arc<Driver<O>>) -> Action
where
    O: Operation,
    <O::Object as kube::Resource>::Scope: Scope,
{
    let kind = error.kind();
    let failures = driver.failed(&obj);
    warn!(kind = %O::KIND, name = %obj.name_any(), failures, "reconcile failed: {error}");
    if failures >= ERRORS_BEFORE_EVENT && kind != ErrorKind::not_leader {
        // Published apart: the error policy cannot wait. Identical messages fold into one series.
        let message = error.to_string();
        tokio::spawn(async move {
            let event = Event::warning("ReconcileError", message);
            driver
                .op
                .shared()
                .chores()
                .publish(obj.as_ref(), &[event])
                .await;
        });
    }
    Action::requeue(backoff(kind, failures))
}

/// How long to wait after the `failures`-th failure in a row: from 1 s (a conflict: the object
/// moved on, decide again soon) or 2 s, doubling, at most [`BACKOFF_MAX`].
pub fn backoff(kind: ErrorKind, failures: u32) -> Duration {
    let base = match kind {
        ErrorKind::conflict => Duration::from_secs(1),
        _ => Duration::from_secs(2),
    };
    let doublings = failures.saturating_sub(1).min(16);
    base.saturating_mul(1 << doublings).min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_one_or_two_seconds_up_to_a_minute() {
        let waits: Vec<u64> = (1..=8)
            .map(|n| backoff(ErrorKind::server, n).as_secs())
            .collect();
        assert_eq!(waits, [2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(backoff(ErrorKind::conflict, 1), Duration::from_secs(1));
        assert_eq!(backoff(ErrorKind::conflict, 100), BACKOFF_MAX);
    }
}
