//! Text cut to what the API server keeps: an Event's note is at most 1 KiB (longer ones are
//! refused, and the event is lost), a condition's message at most 32 KiB. A message built from
//! names the cluster holds (pods, nodes, budgets) can grow past either with the cluster, so every
//! note and message goes through [`cut`] on its way out, and says that it was cut. Every other
//! text of a status (a node's message, a maintenance's last error) is cut on the way out too
//! ([`cut_strings`]), at the same bound as a condition's message.

use std::borrow::Cow;

use serde_json::Value;

/// `events.k8s.io/v1` Event `note`: the API server refuses a longer one.
pub const EVENT_NOTE_BYTES: usize = 1024;
/// `metav1.Condition.message`'s maxLength.
pub const CONDITION_MESSAGE_BYTES: usize = 32 * 1024;

/// What ends a cut text.
pub const MARKER: &str = " [cut]";

/// `text` if it holds in `max` bytes; else its longest prefix that does (on a character
/// boundary) with [`MARKER`] after it, `max` bytes at most in all.
pub fn cut(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let room = max.saturating_sub(MARKER.len());
    let end = (0..=room)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    Cow::Owned(format!("{}{MARKER}", &text[..end]))
}

/// Any text of a status, other than a condition's message (cut already, to the same bound).
pub const STATUS_TEXT_BYTES: usize = CONDITION_MESSAGE_BYTES;

/// The length of the longest string literal of the JSON text `json`, as encoded (escapes
/// count): never less than the string's own length, so a text whose longest literal fits needs
/// no [`cut_strings`], and finding that out allocates nothing.
pub fn longest_literal(json: &str) -> usize {
    let bytes = json.as_bytes();
    let (mut longest, mut i) = (0, 0);
    while i < bytes.len() {
        if bytes[i] == b'"' {
            let start = i + 1;
            i = start;
            while i < bytes.len() && bytes[i] != b'"' {
                // An escape's next byte is part of it: `\"` does not end the string.
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            longest = longest.max(i.min(bytes.len()) - start);
        }
        i += 1;
    }
    longest
}

/// Cuts every string of `value` (keys apart) longer than `max` bytes, as [`cut`] does; `true`
/// when one was.
pub fn cut_strings(value: &mut Value, max: usize) -> bool {
    match value {
        Value::String(s) if s.len() > max => {
            *s = cut(s, max).into_owned();
            true
        }
        Value::Array(items) => cut_each(items.iter_mut(), max),
        Value::Object(fields) => cut_each(fields.values_mut(), max),
        _ => false,
    }
}

/// [`cut_strings`] of every one of `values` (all of them: no stop at the first cut).
fn cut_each<'a>(values: impl Iterator<Item = &'a mut Value>, max: usize) -> bool {
    let mut cut_one = false;
    for v in values {
        cut_one |= cut_strings(v, max);
    }
    cut_one
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_long_string_of_a_tree_is_cut_and_the_rest_kept() {
        let long = "pod shop/web-1 refuses the drain; ".repeat(2000);
        let mut status = serde_json::json!({
            "nodes": [{"name": "n1", "message": long}, {"name": "n2", "message": "back"}],
            "lastError": long,
            "rebooting": 1,
        });
        let text = status.to_string();
        assert!(longest_literal(&text) >= long.len());
        assert!(cut_strings(&mut status, STATUS_TEXT_BYTES));
        let cut_one = status["nodes"][0]["message"].as_str().unwrap_or_default();
        assert_eq!(cut_one.len(), STATUS_TEXT_BYTES);
        assert!(cut_one.ends_with(MARKER));
        assert_eq!(status["lastError"], status["nodes"][0]["message"]);
        assert_eq!(status["nodes"][1]["message"], "back");
        assert_eq!(status["rebooting"], 1);
        assert!(longest_literal(&status.to_string()) <= STATUS_TEXT_BYTES);
        assert!(
            !cut_strings(&mut status, STATUS_TEXT_BYTES),
            "nothing left to cut"
        );
    }

    #[test]
    fn the_longest_literal_counts_escapes_and_never_less_than_the_string() {
        for text in ["", "a", "a\"b", "\\", "line\nbreak \u{1}", "é€𝄞"] {
            let json = serde_json::to_string(&serde_json::json!({"k": text, "n": [1, "xy"]}))
                .unwrap_or_default();
            let longest = longest_literal(&json);
            assert!(
                longest >= text.len().max(2),
                "{text:?} in {json}: {longest}"
            );
        }
        assert_eq!(longest_literal(r#"{"a":"\"\"\"","b":1}"#), 6);
        // An unterminated literal (not JSON) ends with the text.
        assert_eq!(longest_literal(r#"{"abc"#), 3);
    }

    #[test]
    fn short_text_is_kept_as_it_is() {
        assert!(matches!(cut("node n1 is back", 1024), Cow::Borrowed(_)));
        let exact = "x".repeat(1024);
        assert_eq!(cut(&exact, 1024), exact);
    }

    #[test]
    fn long_text_is_cut_to_the_limit_and_says_so() {
        let long = "pod shop/web-1 refuses the drain; ".repeat(100);
        let out = cut(&long, EVENT_NOTE_BYTES);
        assert_eq!(out.len(), EVENT_NOTE_BYTES);
        assert!(out.ends_with(MARKER));
        assert!(long.starts_with(out.trim_end_matches(MARKER)));
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        // Every length around a multi-byte character: the result is valid and within bounds.
        let text = "é€𝄞".repeat(300);
        for max in 0..64 {
            let out = cut(&text, max);
            assert!(out.len() <= max.max(MARKER.len()), "{max}: {}", out.len());
            assert!(out.ends_with(MARKER));
        }
    }
}
