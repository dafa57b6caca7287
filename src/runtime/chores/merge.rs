//! JSON merge patches (RFC 7386): the status writes send only what changed.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::common::bounded::{STATUS_TEXT_BYTES, cut_strings, longest_literal};

/// The JSON merge patch that turns `old` into `new`; `None` when they are equal. Fields `new`
/// leaves out are set to null, so that they go.
pub fn merge_patch(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return Some(new.clone());
    };
    let mut patch = Map::new();
    for (key, value) in new {
        match old.get(key) {
            Some(before) => {
                if let Some(p) = merge_patch(before, value) {
                    patch.insert(key.clone(), p);
                }
            }
            None => {
                patch.insert(key.clone(), value.clone());
            }
        }
    }
    for key in old.keys().filter(|k| !new.contains_key(*k)) {
        patch.insert(key.clone(), Value::Null);
    }
    Some(Value::Object(patch))
}

/// One field of a [`status_patch`]: as `new` encodes it, or as [`merge_patch`] made it.
#[derive(Serialize)]
#[serde(untagged)]
enum Part<'a> {
    Encoded(&'a RawValue),
    Patched(Value),
}

/// The merge patch from `old` to `new`, encoded: what [`merge_patch`] gives for the two as JSON
/// trees, made without building either tree whole. A Plan's status lists up to thousands of
/// nodes, and building, comparing and dropping both trees at every status write was a few
/// percent of the controller's CPU at 5,000 nodes. A top-level field encoded the same on both
/// sides is left out unread; one that is not an object on both sides goes as `new` encodes it (a
/// merge patch replaces it whole); only objects on both sides are decoded and merged.
pub fn status_patch<S: Serialize>(
    old: Option<&S>,
    new: &S,
) -> serde_json::Result<Option<Box<RawValue>>> {
    let new_text = bounded(serde_json::to_string(new)?)?;
    let Some(old) = old else {
        // Nothing to patch: the whole of `new` replaces it, as `merge_patch(null, new)` does.
        return match new_text.as_str() {
            "null" => Ok(None),
            _ => RawValue::from_string(new_text).map(Some),
        };
    };
    let old_text = serde_json::to_string(old)?;
    fn fields(text: &str) -> Option<BTreeMap<&str, &RawValue>> {
        serde_json::from_str(text).ok()
    }
    let (Some(before), Some(after)) = (fields(&old_text), fields(&new_text)) else {
        // Not both objects: the trees' own patch.
        let (old, new) = (
            serde_json::from_str(&old_text)?,
            serde_json::from_str(&new_text)?,
        );
        return merge_patch(&old, &new)
            .map(|p| serde_json::value::to_raw_value(&p))
            .transpose();
    };
    let mut patch: BTreeMap<&str, Part> = BTreeMap::new();
    for (key, value) in &after {
        if let Some(part) = field_patch(before.get(key).copied(), value)? {
            patch.insert(key, part);
        }
    }
    for key in before.keys().filter(|k| !after.contains_key(*k)) {
        patch.insert(key, Part::Patched(Value::Null));
    }
    match patch.is_empty() {
        true => Ok(None),
        false => serde_json::value::to_raw_value(&patch).map(Some),
    }
}

/// `text` (a status encoded) with every string cut to [`STATUS_TEXT_BYTES`]: what the API server
/// keeps, and what the next decision's status is compared with. Only a status that has a longer
/// string is decoded.
fn bounded(text: String) -> serde_json::Result<String> {
    if longest_literal(&text) <= STATUS_TEXT_BYTES {
        return Ok(text);
    }
    let mut value: Value = serde_json::from_str(&text)?;
    cut_strings(&mut value, STATUS_TEXT_BYTES);
    serde_json::to_string(&value)
}

/// One top-level field of a [`status_patch`]: `None` when it did not change.
fn field_patch<'a>(
    was: Option<&RawValue>,
    value: &'a RawValue,
) -> serde_json::Result<Option<Part<'a>>> {
    let is_object = |raw: &RawValue| raw.get().starts_with('{');
    match was {
        Some(was) if was.get() == value.get() => Ok(None),
        Some(was) if is_object(was) && is_object(value) => {
            let was: Value = serde_json::from_str(was.get())?;
            let value: Value = serde_json::from_str(value.get())?;
            Ok(merge_patch(&was, &value).map(Part::Patched))
        }
        _ => Ok(Some(Part::Encoded(value))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_merge_patch_carries_only_what_changed_and_removes_what_went() {
        let old = json!({"phase": "Running", "pendingPods": ["a"], "nested": {"x": 1, "y": 2}});
        let new = json!({"phase": "Succeeded", "nested": {"x": 1, "y": 3}});
        assert_eq!(
            merge_patch(&old, &new),
            Some(json!({"phase": "Succeeded", "pendingPods": null, "nested": {"y": 3}}))
        );
        assert_eq!(merge_patch(&new, &new), None);
        assert_eq!(
            merge_patch(&Value::Null, &json!({"a": 1})),
            Some(json!({"a": 1}))
        );
    }

    /// `status_patch` is `merge_patch` of the two encoded, decoded: over every pair of a set of
    /// statuses that differ in each way a field can (added, gone, changed, nested, a list, a
    /// type changed, equal but encoded apart).
    #[test]
    fn a_status_patch_is_the_merge_patch_of_the_trees() {
        let statuses = [
            json!({}),
            json!({"phase": "Running"}),
            json!({"phase": "Succeeded", "nodes": [{"name": "a"}, {"name": "b"}]}),
            json!({"phase": "Running", "nodes": [{"name": "a"}]}),
            json!({"nested": {"x": 1, "y": {"z": [1, 2]}}, "phase": "Running"}),
            json!({"nested": {"x": 1, "y": {"z": [1, 3]}, "w": null}}),
            json!({"nested": {"x": 2}, "nodes": []}),
            json!({"nested": "flat now", "count": 3}),
            json!({"count": 3.0, "nested": {}}),
            json!({"nested": {"y": {"z": [1, 2]}, "x": 1}, "phase": "Running"}),
        ];
        let reference =
            |old: Option<&Value>, new: &Value| merge_patch(old.unwrap_or(&Value::Null), new);
        for new in &statuses {
            let got = |old: Option<&Value>| {
                status_patch(old, new)
                    .unwrap()
                    .map(|raw| serde_json::from_str::<Value>(raw.get()).unwrap())
            };
            assert_eq!(got(None), reference(None, new), "from nothing to {new}");
            for old in &statuses {
                assert_eq!(got(Some(old)), reference(Some(old), new), "{old} to {new}");
            }
        }
    }

    /// A text longer than the API server keeps is cut on its way out, and the status read back
    /// (cut) is what the next decision's (not cut) is compared with: no write again.
    #[test]
    fn a_status_writes_no_text_past_its_bound_and_once() {
        let long = "pod shop/web-1 refuses the drain; ".repeat(2000);
        let new = json!({"nodes": [{"name": "n1", "message": long}], "phase": "Running"});
        let patch = status_patch(Some(&json!({"phase": "Running"})), &new)
            .unwrap()
            .map(|raw| serde_json::from_str::<Value>(raw.get()).unwrap())
            .unwrap();
        let message = patch["nodes"][0]["message"].as_str().unwrap();
        assert_eq!(message.len(), crate::common::bounded::STATUS_TEXT_BYTES);
        assert!(message.ends_with(crate::common::bounded::MARKER));
        let written = json!({"nodes": [{"name": "n1", "message": message}], "phase": "Running"});
        assert!(status_patch(Some(&written), &new).unwrap().is_none());
    }

    #[test]
    fn a_status_that_is_not_an_object_is_patched_as_a_tree() {
        let patch = status_patch(Some(&json!([1])), &json!({"a": 1})).unwrap();
        assert_eq!(patch.unwrap().get(), r#"{"a":1}"#);
        assert!(status_patch(Some(&json!(2)), &json!(2)).unwrap().is_none());
    }
}
