//! Notification templates (`--notify-template NAME/KIND=TEXT`, the operator's) rendered with a
//! message (the cluster's: a hold reason a node wrote) for every target's markup.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slipway::common::decision::Event;
use slipway::node::notify::{Markup, Template, escape, notification};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (template, message) = text.split_once('\0').unwrap_or((text, ""));
    let now: jiff::Timestamp = "2026-11-22T10:00:00Z".parse().expect("a constant time");
    let event = Event::normal("Rebooted", message).on("node-1");
    let Some(n) = notification("RebootPolicy", None, "weekly", &event, now) else {
        return;
    };
    for markup in [Markup::Plain, Markup::Slack, Markup::Teams, Markup::Chat] {
        let escaped = escape(markup, message);
        if matches!(markup, Markup::Slack | Markup::Teams) {
            // Escaped, a value starts no line...
            assert!(!escaped.contains(['\n', '\r']), "{escaped:?}");
        }
        // ...and opens no mention and no link: Slack's `<` are entities, every Markdown
        // character of a Teams card follows a backslash, a chat's `@` and `<` a zero-width space.
        match markup {
            Markup::Plain => {}
            Markup::Slack => assert!(!escaped.contains(['<', '>']), "{escaped:?}"),
            Markup::Teams => assert!(unescaped_markdown(&escaped).is_none(), "{escaped:?}"),
            Markup::Chat => assert!(unbroken_mention(&escaped).is_none(), "{escaped:?}"),
        }
        if let Ok(t) = Template::parse(template) {
            let _ = t.render_for(&n, markup);
        }
    }
});

/// The first `@` or `<` of `text` that no zero-width space follows: a mention in a chat.
fn unbroken_mention(text: &str) -> Option<char> {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if matches!(c, '@' | '<') && chars.peek() != Some(&'\u{200B}') {
            return Some(c);
        }
    }
    None
}

/// The first Markdown character of `text` that no backslash escapes.
fn unescaped_markdown(text: &str) -> Option<char> {
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '*' | '_' | '[' | ']' | '(' | ')' | '<' | '>' | '`' | '#' | '{' | '}' => {
                return Some(c);
            }
            _ => {}
        }
    }
    None
}
