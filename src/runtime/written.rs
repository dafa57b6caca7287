//! What this process wrote, laid over caches that do not show it yet: read-your-writes, for
//! every kind.
//!
//! A reconcile can run before a watch brings back what the previous one wrote: another trigger
//! (a node event, a wake) fires in between. Deciding on the stale copy would write again: a
//! status guarded by the resourceVersion it was decided on fails with a conflict (a wasted
//! request, a warning and a backoff), a Job not seen yet is created again. So the loop remembers
//! each write and decides on the newer of it and the cache:
//!
//! - [`Written`]: an object as its own write (a status, a finalizer) returned it, until the cache
//!   is as new (resourceVersions compared);
//! - [`Created`]: an object this process created, until the watch brings it back (even deleted)
//!   or, at most, for [`PATIENCE`];
//! - nodes need neither: the node index is this process's own, and each node patch's answer goes
//!   into it at once (`Shared::patch_node`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::{Resource, ResourceExt};

use super::pruned::Pruned;

/// How long a creation is laid over a cache that does not show it. Past that, the cache is
/// believed (the object may have been deleted by someone else before the watch showed it).
pub const PATIENCE: Duration = Duration::from_secs(30);
/// How long after a creation's patience ends its owner is looked at again: past the end, so that
/// the reconcile believes the cache.
const PAST_PATIENCE: Duration = Duration::from_millis(100);
/// When to look at an object again after it created something, though no watch event comes.
pub const LOOK_AGAIN: Duration = PATIENCE.saturating_add(PAST_PATIENCE);

/// One kind's objects as this process last wrote them, by namespace and name.
pub struct Written<K> {
    objects: Mutex<Pruned<Arc<K>>>,
}

impl<K> Default for Written<K> {
    fn default() -> Self {
        Written {
            objects: Mutex::default(),
        }
    }
}

fn key<K: Resource>(obj: &K) -> (String, String) {
    (obj.namespace().unwrap_or_default(), obj.name_any())
}

/// resourceVersions are etcd revisions: compared as numbers; anything else is no revision.
fn revision<K: Resource>(obj: &K) -> Option<u64> {
    obj.meta().resource_version.as_deref()?.parse().ok()
}

impl<K: Resource + Clone> Written<K> {
    /// Shared, not copied: a Plan's status lists up to thousands of nodes.
    pub fn remember(&self, written: Arc<K>) {
        self.lock().map.insert(key(written.as_ref()), written);
    }

    /// The newer of the cached object and the one this process last wrote. The cache wins, and
    /// the written copy is forgotten, once it is as new, when it is another object of the same
    /// name (a new uid), or when either revision is not a number.
    pub fn latest(&self, cached: Arc<K>) -> Arc<K> {
        let mut objects = self.lock();
        let k = key(cached.as_ref());
        let Some(written) = objects.map.get(&k) else {
            return cached;
        };
        match (revision(cached.as_ref()), revision(written.as_ref())) {
            (Some(c), Some(w)) if w > c && written.meta().uid == cached.meta().uid => {
                written.clone()
            }
            _ => {
                objects.map.remove(&k);
                cached
            }
        }
    }

    /// Forgets the object (it is gone).
    pub fn forget(&self, obj: &K) {
        self.lock().map.remove(&key(obj));
    }

    /// Forgets the objects for which `exists` (namespace, name) is false, once the map has
    /// doubled since it was last pruned (amortized O(1) a call): an object deleted by someone else
    /// before the cache showed this process's last write is never reconciled deleted.
    pub fn prune(&self, mut exists: impl FnMut(&str, &str) -> bool) {
        self.lock().prune(|(ns, name), _| exists(ns, name));
    }

    /// Whether no object is remembered.
    pub fn is_empty(&self) -> bool {
        self.lock().map.is_empty()
    }

    /// How many objects are remembered.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pruned<Arc<K>>> {
        self.objects.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Objects of one kind this process created, by name (one namespace), until the cache shows them.
pub struct Created<K> {
    objects: Mutex<HashMap<String, (Instant, Arc<K>)>>,
}

impl<K> Default for Created<K> {
    fn default() -> Self {
        Created {
            objects: Mutex::default(),
        }
    }
}

impl<K: Resource> Created<K> {
    /// `obj` as its creation returned it.
    pub fn created(&self, obj: K) {
        if let Some(name) = obj.meta().name.clone() {
            self.lock().insert(name, (Instant::now(), Arc::new(obj)));
        }
    }

    /// The watch brought back `watched` (created, changed or deleted): the cache is at or past
    /// it, so its creation is believed from the cache from now on, and one deleted before a
    /// reconcile saw it counts as gone at once, not after [`PATIENCE`]. Only the object of that
    /// name and uid: an older object of the name, deleted, says nothing of the new one. (During a
    /// relist the cache shows the list only at its end: a decision in between may create the
    /// object again, and is told it exists.)
    pub fn watched(&self, watched: &K) {
        let (Some(name), Some(uid)) = (&watched.meta().name, &watched.meta().uid) else {
            return;
        };
        let mut objects = self.lock();
        if (objects.get(name)).is_some_and(|(_, k)| k.meta().uid.as_ref() == Some(uid)) {
            objects.remove(name);
        }
    }

    /// `cached`, the cache's objects of one owner, with the owner's (`mine`) creations the cache
    /// does not have (`shown` tells whether it has an object of that name).
    pub fn over(
        &self,
        cached: Vec<Arc<K>>,
        mine: impl Fn(&K) -> bool,
        shown: impl Fn(&str) -> bool,
    ) -> Vec<Arc<K>> {
        let mut objects = self.lock();
        let now = Instant::now();
        if !objects.is_empty() {
            objects.retain(|name, (at, _)| now.duration_since(*at) < PATIENCE && !shown(name));
        }
        let mut all = cached;
        all.extend(
            (objects.values())
                .map(|(_, k)| k)
                .filter(|k| mine(k))
                .cloned(),
        );
        all
    }

    /// How long until the first of `mine`'s creations runs out of patience, and a bit more: when
    /// to look at the owner again though no watch event comes (a creation deleted before the
    /// watch showed it is then seen gone).
    pub fn look_again(&self, mine: impl Fn(&K) -> bool) -> Option<Duration> {
        (self.lock().values())
            .filter(|(_, k)| mine(k))
            .map(|(at, _)| PATIENCE.saturating_sub(at.elapsed()))
            .min()
            .map(|end| end + PAST_PATIENCE)
    }

    /// Forgets `mine`'s creations (their owner is gone).
    pub fn forget(&self, mine: impl Fn(&K) -> bool) {
        self.lock().retain(|_, (_, k)| !mine(k));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Arc<K>)>> {
        self.objects.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn object(uid: &str, rv: &str) -> ConfigMap {
        let mut o = ConfigMap::default();
        o.metadata.name = Some("o".into());
        o.metadata.namespace = Some("ns".into());
        o.metadata.uid = Some(uid.into());
        o.metadata.resource_version = Some(rv.into());
        o
    }

    fn rv(o: &ConfigMap) -> &str {
        o.metadata.resource_version.as_deref().unwrap_or_default()
    }

    #[test]
    fn the_newer_object_wins_until_the_cache_catches_up() {
        let w = Written::default();
        w.remember(Arc::new(object("u", "11")));
        assert_eq!(rv(&w.latest(Arc::new(object("u", "10")))), "11");
        assert_eq!(rv(&w.latest(Arc::new(object("u", "12")))), "12");
        // Forgotten once the cache moved past it.
        assert_eq!(rv(&w.latest(Arc::new(object("u", "10")))), "10");
    }

    #[test]
    fn another_object_of_the_same_name_or_no_revision_is_believed() {
        let w = Written::default();
        w.remember(Arc::new(object("u", "11")));
        assert_eq!(rv(&w.latest(Arc::new(object("other", "10")))), "10");
        w.remember(Arc::new(object("u", "11")));
        assert_eq!(rv(&w.latest(Arc::new(object("u", "x")))), "x");
        w.remember(Arc::new(object("u", "11")));
        w.forget(&object("u", "11"));
        assert_eq!(rv(&w.latest(Arc::new(object("u", "10")))), "10");
    }

    #[test]
    fn writes_of_objects_gone_from_the_cache_are_pruned() {
        let w = Written::default();
        let named = |name: String| {
            let mut o = object("u", "11");
            o.metadata.name = Some(name);
            o
        };
        let exists = |_: &str, name: &str| name.starts_with("kept-");
        for i in 0..10 {
            w.remember(Arc::new(named(format!("kept-{i}"))));
        }
        // Deleted (finalizer and all) by someone else before the cache showed the write.
        for i in 0..1000 {
            w.remember(Arc::new(named(format!("gone-{i}"))));
            w.prune(exists);
        }
        assert!(w.len() < 64, "{} kept", w.len());
        w.prune(|_, _| true);
        for i in 0..10 {
            let cached = Arc::new(named(format!("kept-{i}")));
            assert_eq!(rv(&w.latest(cached)), "11", "still laid over the cache");
        }
    }

    fn owned(name: &str, owner: &str) -> ConfigMap {
        let mut o = object("u", "1");
        o.metadata.name = Some(name.into());
        o.metadata.labels = Some([("owner".to_string(), owner.to_string())].into());
        o
    }

    fn of(owner: &str) -> impl Fn(&ConfigMap) -> bool + '_ {
        move |o| o.labels().get("owner").map(String::as_str) == Some(owner)
    }

    #[test]
    fn a_creation_counts_for_its_owner_until_the_cache_has_it() {
        let c = Created::default();
        c.created(owned("a", "p"));
        assert_eq!(c.over(vec![], of("p"), |_| false).len(), 1);
        assert!(
            c.over(vec![], of("other"), |_| false).is_empty(),
            "another owner's creation is not this one's"
        );
        let cached = vec![Arc::new(owned("a", "p"))];
        assert_eq!(c.over(cached, of("p"), |n| n == "a").len(), 1);
        // Seen once: forgotten, even if the cache loses it later (deleted by someone).
        assert!(c.over(vec![], of("p"), |_| false).is_empty());
    }

    #[test]
    fn a_creation_the_watch_brought_back_is_believed_from_the_cache() {
        let c = Created::default();
        let with_uid = |uid: &str| {
            let mut o = owned("a", "p");
            o.metadata.uid = Some(uid.into());
            o
        };
        c.created(with_uid("new"));
        c.watched(&with_uid("old"));
        assert_eq!(
            c.over(vec![], of("p"), |_| false).len(),
            1,
            "an older object of that name"
        );
        // Created, then deleted before a reconcile saw it in the cache: gone at once.
        c.watched(&with_uid("new"));
        assert!(c.over(vec![], of("p"), |_| false).is_empty());
        assert_eq!(c.look_again(of("p")), None);
    }

    #[test]
    fn an_owner_looks_again_when_its_first_creation_not_shown_stops_counting() {
        let c = Created::default();
        assert_eq!(c.look_again(of("p")), None, "nothing created");
        c.created(owned("a", "p"));
        let first = c.look_again(of("p")).expect("a creation not shown yet");
        assert!(first > PATIENCE - Duration::from_secs(1) && first <= LOOK_AGAIN);
        assert_eq!(c.look_again(of("other")), None, "another owner's");
        c.over(vec![Arc::new(owned("a", "p"))], of("p"), |n| n == "a");
        assert_eq!(c.look_again(of("p")), None, "shown");
        c.created(owned("b", "p"));
        c.forget(of("p"));
        assert_eq!(c.look_again(of("p")), None, "its owner is gone");
    }
}
