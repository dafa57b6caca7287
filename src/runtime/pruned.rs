//! A map by object (namespace, name) that forgets what no longer matters in amortized O(1): it is
//! pruned only once it has doubled since it was last pruned, so that a cluster that creates and
//! deletes objects every day keeps none of them for long and no insert pays for a full scan.

use std::collections::HashMap;

/// The size below which the map is never pruned.
pub(crate) const PRUNE_FLOOR: usize = 64;

/// A map by object (namespace, name), pruned when it has doubled since the last time.
pub(crate) struct Pruned<V> {
    pub map: HashMap<(String, String), V>,
    prune_at: usize,
}

impl<V> Default for Pruned<V> {
    fn default() -> Self {
        Pruned {
            map: HashMap::new(),
            prune_at: PRUNE_FLOOR,
        }
    }
}

impl<V> Pruned<V> {
    /// Keeps what `keep` says once the map has doubled: amortized O(1) per insert.
    pub fn prune(&mut self, keep: impl FnMut(&(String, String), &mut V) -> bool) {
        if self.map.len() < self.prune_at {
            return;
        }
        self.map.retain(keep);
        self.prune_at = (2 * self.map.len()).max(PRUNE_FLOOR);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruned_only_once_doubled() {
        let mut m = Pruned::<u32>::default();
        let key = |i: usize| (String::new(), i.to_string());
        for i in 0..PRUNE_FLOOR - 1 {
            m.map.insert(key(i), 0);
        }
        m.prune(|_, _| false);
        assert_eq!(m.map.len(), PRUNE_FLOOR - 1, "below the floor: kept");
        m.map.insert(key(PRUNE_FLOOR), 0);
        m.prune(|(_, name), _| name.len() == 1);
        assert_eq!(m.map.len(), 10, "at the floor: pruned");
        m.map.insert(key(1_000), 0);
        m.prune(|_, _| false);
        assert_eq!(m.map.len(), 11, "not doubled since: kept");
    }
}
