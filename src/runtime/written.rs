//! The objects this process last wrote, until its cache shows them.
//!
//! A reconcile can run before the watch brings back the finalizer or the status the previous one
//! wrote: another trigger (a node event, a wake) fires in between. Deciding on the stale copy
//! would make the next write, guarded by the resourceVersion it was decided on, fail with a
//! conflict: a wasted request, a warning and a backoff. So the loop remembers each object as its
//! own write returned it and decides on the newer of the two.

use std::sync::{Arc, Mutex, PoisonError};

use kube::{Resource, ResourceExt};

use super::pruned::Pruned;

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
}
