//! The message templates: text with `{placeholder}`s, `{{` and `}}` for literal braces.

use super::{Notification, object_name};

/// What a placeholder stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    /// The node's name (empty when the notification is about no node).
    Node,
    /// `namespace/name` or `name`.
    Object,
    ObjectKind,
    Namespace,
    Name,
    /// The notification kind (`node-back`).
    Kind,
    Reason,
    Message,
    /// RFC 3339.
    Time,
}

const FIELDS: [(&str, Field); 9] = [
    ("node", Field::Node),
    ("object", Field::Object),
    ("objectKind", Field::ObjectKind),
    ("namespace", Field::Namespace),
    ("name", Field::Name),
    ("kind", Field::Kind),
    ("reason", Field::Reason),
    ("message", Field::Message),
    ("time", Field::Time),
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field(Field),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template(Vec<Piece>);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unknown placeholder {{{0}}} (known: {known})", known = known())]
    Unknown(String),
    #[error("a {{ at byte {0} is not closed (write {{{{ for a brace)")]
    Unclosed(usize),
    #[error("a }} at byte {0} closes nothing (write }}}} for a brace)")]
    Unopened(usize),
}

fn known() -> String {
    FIELDS
        .iter()
        .map(|(n, _)| format!("{{{n}}}"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Template {
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        let mut pieces = Vec::new();
        let mut literal = String::new();
        let mut rest = text.char_indices().peekable();
        while let Some((at, c)) = rest.next() {
            match c {
                '{' if rest.peek().map(|(_, c)| *c) == Some('{') => {
                    rest.next();
                    literal.push('{');
                }
                '}' if rest.peek().map(|(_, c)| *c) == Some('}') => {
                    rest.next();
                    literal.push('}');
                }
                '}' => return Err(TemplateError::Unopened(at)),
                '{' => {
                    let mut name = String::new();
                    loop {
                        match rest.next() {
                            Some((_, '}')) => break,
                            Some((_, c)) => name.push(c),
                            None => return Err(TemplateError::Unclosed(at)),
                        }
                    }
                    let field = FIELDS
                        .iter()
                        .find(|(n, _)| *n == name)
                        .map(|(_, f)| *f)
                        .ok_or(TemplateError::Unknown(name))?;
                    if !literal.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut literal)));
                    }
                    pieces.push(Piece::Field(field));
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Text(literal));
        }
        Ok(Template(pieces))
    }

    /// The text for `n`, its values as they are.
    pub fn render(&self, n: &Notification) -> String {
        self.render_for(n, Markup::Plain)
    }

    /// The text for `n`, its values escaped for `markup`; the template's own text is the
    /// operator's, and keeps its markup and mentions.
    pub fn render_for(&self, n: &Notification, markup: Markup) -> String {
        let mut out = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Field(f) => out.push_str(&escape(markup, &value(*f, n))),
            }
        }
        out
    }
}

/// The markup a receiver reads in a message's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Markup {
    /// Nothing is markup (slipway's JSON object).
    Plain,
    /// Slack's mrkdwn (and Mattermost's, Rocket.Chat's): `<!channel>`, `<@U123>` and `<url|text>`
    /// mention and link; Mattermost and Rocket.Chat also ping on a plain `@channel`.
    Slack,
    /// An Adaptive Card's TextBlock (Microsoft Teams): a CommonMark subset, links and lists.
    Teams,
    /// Plain text in a chat that mentions by name in it: Telegram's `@username`, Google Chat's
    /// `<users/all>`.
    Chat,
}

/// `value` as text that `markup` shows as it is: a value comes from the cluster (a hold reason a
/// node wrote, a pod's name in a message), and must neither ping a channel nor make a link.
pub fn escape(markup: Markup, value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match (markup, c) {
            (Markup::Plain, c) => out.push(c),
            // Slack's own escaping of its control characters.
            (Markup::Slack, '&') => out.push_str("&amp;"),
            (Markup::Slack, '<') => out.push_str("&lt;"),
            (Markup::Slack, '>') => out.push_str("&gt;"),
            // A zero-width space after it: still `@` (or `<`) to read, no longer a mention.
            (Markup::Slack | Markup::Chat, '@') => out.push_str("@\u{200B}"),
            (Markup::Chat, '<') => out.push_str("<\u{200B}"),
            // CommonMark's backslash escapes, for what the card's subset reads as markup.
            (
                Markup::Teams,
                '\\' | '*' | '_' | '[' | ']' | '(' | ')' | '<' | '>' | '`' | '#' | '{' | '}',
            ) => {
                out.push('\\');
                out.push(c);
            }
            // A value never starts a line: no list, no heading.
            (Markup::Slack | Markup::Teams, '\n' | '\r') => out.push(' '),
            (_, c) => out.push(c),
        }
    }
    out
}

fn value(field: Field, n: &Notification) -> String {
    match field {
        Field::Node => n.node.clone().unwrap_or_default(),
        Field::Object => object_name(&n.object),
        Field::ObjectKind => n.object.kind.name().to_string(),
        Field::Namespace => n.object.namespace.clone().unwrap_or_default(),
        Field::Name => n.object.name.clone(),
        Field::Kind => n.kind.name().to_string(),
        Field::Reason => n.reason.to_string(),
        Field::Message => n.message.clone(),
        Field::Time => n.time.to_string(),
    }
}
