//! The vocabulary every operation's spec and status share: Go durations, time windows, label
//! selectors, names, labels and the CRD schema rules. Pure: nothing here reaches the cluster.

pub mod bounded;
pub mod check;
pub mod condition;
pub mod crd;
pub mod decision;
pub mod duration;
pub mod labels;
pub mod naming;
pub mod phase;
pub mod pruning;
pub mod schedule;
pub mod selector;
pub mod window;

use std::collections::BTreeMap;

use jiff::Timestamp;

/// Fields that a type does not model, kept verbatim (a Plan read from YAML writes back as read).
pub type Extra = BTreeMap<String, serde_json::Value>;

/// Formats a time as SUC does (RFC 3339, whole seconds, UTC).
pub fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// How long from `now` until `then` (zero when it has passed).
pub fn until(now: Timestamp, then: Timestamp) -> std::time::Duration {
    std::time::Duration::try_from(then.duration_since(now)).unwrap_or_default()
}
