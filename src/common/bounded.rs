//! Text cut to what the API server keeps: an Event's note is at most 1 KiB (longer ones are
//! refused, and the event is lost), a condition's message at most 32 KiB. A message built from
//! names the cluster holds (pods, nodes, budgets) can grow past either with the cluster, so every
//! note and message goes through [`cut`] on its way out, and says that it was cut.

use std::borrow::Cow;

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

#[cfg(test)]
mod tests {
    use super::*;

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
