//! kured's lock, as slipway reads it: an annotation on kured's own DaemonSet
//! (`weave.works/kured-node-lock` on `kube-system/kured` by default), one entry
//! `{"nodeID", "metadata": {"unschedulable"}, "created", "TTL"}`, or with `--concurrency` above 1
//! `{"maxOwners", "locks": [entry, ...]}`. What the policy does with the nodes it names is
//! [`super::kured`]'s.

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;

/// kured's defaults: `--ds-namespace`, `--ds-name`, `--lock-annotation`.
pub const DEFAULT_NAMESPACE: &str = "kube-system";
pub const DEFAULT_NAME: &str = "kured";
pub const DEFAULT_ANNOTATION: &str = "weave.works/kured-node-lock";

/// Where kured keeps its lock: its `--ds-namespace`, `--ds-name` and `--lock-annotation`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KuredLock {
    pub namespace: String,
    pub name: String,
    pub annotation: String,
}

impl Default for KuredLock {
    fn default() -> KuredLock {
        KuredLock {
            namespace: DEFAULT_NAMESPACE.into(),
            name: DEFAULT_NAME.into(),
            annotation: DEFAULT_ANNOTATION.into(),
        }
    }
}

impl KuredLock {
    /// The lock on DaemonSet `daemonset` (`<namespace>/<name>`) under `annotation`; `None` when
    /// `daemonset` is empty (kured's lock is not read).
    pub fn of(daemonset: &str, annotation: &str) -> Result<Option<KuredLock>, String> {
        let daemonset = daemonset.trim();
        if daemonset.is_empty() {
            return Ok(None);
        }
        let bad = || format!("{daemonset:?} is not <namespace>/<name> of kured's DaemonSet");
        let (namespace, name) = daemonset.split_once('/').ok_or_else(bad)?;
        if namespace.is_empty() || name.is_empty() || name.contains('/') {
            return Err(bad());
        }
        if annotation.trim().is_empty() {
            return Err("kured's lock annotation is empty".into());
        }
        Ok(Some(KuredLock {
            namespace: namespace.into(),
            name: name.into(),
            annotation: annotation.trim().into(),
        }))
    }
}

/// What the shell read of kured's lock.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum KuredView {
    /// The controller does not read kured's lock: nothing is taken over, and a node taken over
    /// before waits as if the lock could not be read.
    #[default]
    Off,
    /// kured's DaemonSet is not there: kured is not installed, or was uninstalled.
    Gone,
    /// The DaemonSet is there; the nodes its lock names, each with whether it was cordoned
    /// before kured took it.
    Holds(BTreeMap<String, bool>),
    /// The lock could not be read or understood: why.
    Unreadable(String),
}

impl KuredView {
    /// The view of the DaemonSet's lock annotation (`None`: no annotation, no lock taken).
    pub fn of_lock(value: Option<&str>, now: Timestamp) -> KuredView {
        match value.map(str::trim).filter(|v| !v.is_empty()) {
            None => KuredView::Holds(BTreeMap::new()),
            Some(v) => match parse_lock(v, now) {
                Ok(holds) => KuredView::Holds(holds),
                Err(e) => KuredView::Unreadable(format!("kured's lock {v:?} cannot be read: {e}")),
            },
        }
    }

    /// Whether kured's lock names `node`; `None` when that cannot be known now.
    pub fn holds(&self, node: &str) -> Option<bool> {
        match self {
            KuredView::Holds(nodes) => Some(nodes.contains_key(node)),
            KuredView::Gone => Some(false),
            KuredView::Off | KuredView::Unreadable(_) => None,
        }
    }
}

#[derive(Deserialize)]
struct Entry {
    #[serde(rename = "nodeID")]
    node_id: String,
    #[serde(default)]
    metadata: Option<Meta>,
    #[serde(default)]
    created: Option<String>,
    /// A Go `time.Duration`: nanoseconds; 0 never expires.
    #[serde(default, rename = "TTL")]
    ttl: i64,
}

#[derive(Deserialize, Default)]
struct Meta {
    #[serde(default)]
    unschedulable: bool,
}

#[derive(Deserialize)]
struct Multi {
    locks: Vec<Entry>,
}

/// The nodes the lock names, each with `metadata.unschedulable`. An entry past its TTL is free,
/// as kured reads it.
pub fn parse_lock(value: &str, now: Timestamp) -> Result<BTreeMap<String, bool>, String> {
    let json: serde_json::Value = serde_json::from_str(value).map_err(|e| e.to_string())?;
    let entries = if json.get("locks").is_some() {
        serde_json::from_value::<Multi>(json)
            .map_err(|e| e.to_string())?
            .locks
    } else {
        vec![serde_json::from_value::<Entry>(json).map_err(|e| e.to_string())?]
    };
    Ok(entries
        .into_iter()
        .filter(|e| !e.node_id.is_empty() && !expired(e, now))
        .map(|e| (e.node_id, e.metadata.unwrap_or_default().unschedulable))
        .collect())
}

/// kured's `ttlExpired`: a TTL of 0 never expires; a time it cannot read counts as long ago.
fn expired(e: &Entry, now: Timestamp) -> bool {
    if e.ttl <= 0 {
        return false;
    }
    let created = e
        .created
        .as_deref()
        .and_then(|c| c.parse::<Timestamp>().ok());
    match created {
        Some(c) => c + SignedDuration::from_nanos(e.ttl) < now,
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2026-11-27T10:00:00Z".parse().expect("time")
    }

    #[test]
    fn the_lock_is_named_namespace_slash_name_or_not_read_at_all() {
        assert_eq!(
            KuredLock::of("kube-system/kured", DEFAULT_ANNOTATION),
            Ok(Some(KuredLock::default()))
        );
        assert_eq!(KuredLock::of("", DEFAULT_ANNOTATION), Ok(None));
        for bad in ["kured", "/kured", "kube-system/", "a/b/c"] {
            let e = KuredLock::of(bad, DEFAULT_ANNOTATION).expect_err(bad);
            assert!(e.contains("<namespace>/<name>"), "{e}");
        }
        assert!(KuredLock::of("kured/kured", " ").is_err());
    }

    #[test]
    fn a_single_lock_names_one_node_and_whether_it_was_cordoned() {
        let v = r#"{"nodeID":"n1","metadata":{"unschedulable":false},"created":"2026-11-27T09:00:00Z","TTL":0}"#;
        assert_eq!(
            parse_lock(v, now()),
            Ok(BTreeMap::from([("n1".into(), false)]))
        );
        let v = r#"{"nodeID":"n2","metadata":{"unschedulable":true},"created":"2026-11-27T09:00:00Z","TTL":0}"#;
        assert_eq!(
            parse_lock(v, now()),
            Ok(BTreeMap::from([("n2".into(), true)]))
        );
    }

    #[test]
    fn a_multi_lock_names_each_owner() {
        let v = r#"{"maxOwners":3,"locks":[
            {"nodeID":"a","metadata":{"unschedulable":false},"created":"2026-11-27T09:00:00Z","TTL":0},
            {"nodeID":"b","metadata":{"unschedulable":true},"created":"2026-11-27T09:00:00Z","TTL":0}]}"#;
        assert_eq!(
            parse_lock(v, now()),
            Ok(BTreeMap::from([("a".into(), false), ("b".into(), true)]))
        );
        let empty = r#"{"maxOwners":2,"locks":[]}"#;
        assert_eq!(parse_lock(empty, now()), Ok(BTreeMap::new()));
    }

    #[test]
    fn an_entry_past_its_ttl_is_free_as_kured_reads_it() {
        let hour = 3_600_000_000_000_i64;
        let lock = |created: &str, ttl: i64| {
            format!(
                r#"{{"nodeID":"n","metadata":{{"unschedulable":false}},"created":"{created}","TTL":{ttl}}}"#
            )
        };
        let held = |v: String| parse_lock(&v, now()).map(|m| m.contains_key("n"));
        assert_eq!(held(lock("2026-11-27T09:30:00Z", hour)), Ok(true));
        assert_eq!(held(lock("2026-11-27T08:30:00Z", hour)), Ok(false));
        assert_eq!(held(lock("2020-01-01T00:00:00Z", 0)), Ok(true));
        assert_eq!(held(lock("not a time", hour)), Ok(false));
    }

    #[test]
    fn metadata_left_out_reads_as_a_node_that_was_schedulable() {
        let v = r#"{"nodeID":"manual"}"#;
        assert_eq!(
            parse_lock(v, now()),
            Ok(BTreeMap::from([("manual".into(), false)]))
        );
    }

    #[test]
    fn no_annotation_is_no_lock_and_garbage_is_unreadable_not_empty() {
        assert_eq!(
            KuredView::of_lock(None, now()),
            KuredView::Holds(BTreeMap::new())
        );
        assert_eq!(
            KuredView::of_lock(Some("  "), now()),
            KuredView::Holds(BTreeMap::new())
        );
        for bad in ["{", "[]", r#"{"locks": 3}"#, r#"{"nodeID": 7}"#] {
            assert!(
                matches!(KuredView::of_lock(Some(bad), now()), KuredView::Unreadable(ref m) if m.contains("cannot be read")),
                "{bad}"
            );
        }
    }

    #[test]
    fn whether_kured_holds_a_node_is_unknown_unless_its_lock_was_read() {
        let holds = KuredView::Holds(BTreeMap::from([("a".into(), false)]));
        assert_eq!(holds.holds("a"), Some(true));
        assert_eq!(holds.holds("b"), Some(false));
        assert_eq!(KuredView::Gone.holds("a"), Some(false));
        assert_eq!(KuredView::Off.holds("a"), None);
        assert_eq!(KuredView::Unreadable("x".into()).holds("a"), None);
    }
}
