//! shoutrrr URLs (containrrr/shoutrrr v0.8.0, what kured's `--notify-url` takes) as `--notify`
//! targets: for the services that send a message as one HTTP request, the request(s) shoutrrr
//! would make, derived from the URL as shoutrrr derives them, and a body the service's API takes
//! for a plain-text message. The other services are refused. Pure: nothing here sends.
//!
//! A shoutrrr URL carries its secrets in its user part, path or query (a Slack or Discord token, a
//! Telegram bot token, a Gotify app token, an ntfy password, a generic webhook's `@Authorization`
//! header): no error says any part of the URL but its scheme, its service's host and query keys,
//! and the `Debug` of [`Shoutrrr`] and [`Request`] shows no more.

use std::fmt;

use reqwest::Url;
use serde_json::{Map, Value};

use super::Markup;

mod chat;
mod generic;
mod push;

/// The shoutrrr services slipway sends: each is one HTTP request per message (Telegram: one per
/// chat).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Slack,
    Discord,
    GoogleChat,
    Mattermost,
    RocketChat,
    Telegram,
    Gotify,
    Ntfy,
    Generic,
}

impl Service {
    pub const ALL: [Service; 9] = [
        Service::Slack,
        Service::Discord,
        Service::GoogleChat,
        Service::Mattermost,
        Service::RocketChat,
        Service::Telegram,
        Service::Gotify,
        Service::Ntfy,
        Service::Generic,
    ];

    /// Its scheme in a shoutrrr URL.
    pub fn scheme(self) -> &'static str {
        match self {
            Service::Slack => "slack",
            Service::Discord => "discord",
            Service::GoogleChat => "googlechat",
            Service::Mattermost => "mattermost",
            Service::RocketChat => "rocketchat",
            Service::Telegram => "telegram",
            Service::Gotify => "gotify",
            Service::Ntfy => "ntfy",
            Service::Generic => "generic",
        }
    }

    /// The service of a URL's scheme (`hangouts` is Google Chat's old name, still taken by
    /// shoutrrr; `generic+https` is a shoutrrr "custom URL").
    fn of(scheme: &str) -> Option<Service> {
        let service = scheme.split('+').next().unwrap_or(scheme);
        match service {
            "hangouts" => Some(Service::GoogleChat),
            s => Service::ALL.into_iter().find(|v| v.scheme() == s),
        }
    }

    /// The markup the service reads in a message: what a value from the cluster is escaped for.
    pub fn markup(self) -> Markup {
        match self {
            // Slack's mrkdwn, and the Slack-compatible webhooks of Mattermost and Rocket.Chat.
            Service::Slack | Service::Mattermost | Service::RocketChat => Markup::Slack,
            // Discord's Markdown, which takes the backslash escapes of Teams' CommonMark.
            Service::Discord => Markup::Teams,
            // Plain text where a name in it mentions: Telegram without a parse_mode, Google Chat.
            Service::GoogleChat | Service::Telegram => Markup::Chat,
            // Plain text with no mentions: Gotify and ntfy without their Markdown extras, and the
            // generic webhook's own receiver.
            Service::Gotify | Service::Ntfy | Service::Generic => Markup::Plain,
        }
    }

    /// Whether the URL's host is the service's own server (shown in logs), not a token.
    fn host_is_a_server(self) -> bool {
        !matches!(self, Service::Slack | Service::Discord | Service::Telegram)
    }
}

/// shoutrrr v0.8.0's services that slipway does not send: not one webhook request per message, or
/// not a request at all (`logger`). Named so that the error says what to do instead.
const NOT_WEBHOOKS: [&str; 11] = [
    "bark",
    "ifttt",
    "join",
    "logger",
    "matrix",
    "opsgenie",
    "pushbullet",
    "pushover",
    "smtp",
    "xmpp",
    "zulip",
];

/// What is wrong with a shoutrrr URL. Never a part of the URL that may be a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShoutrrrError {
    #[error(
        "{0}:// is shoutrrr's {0} service, which slipway does not send (it sends the services \
         that take one webhook request: {sent}); point --notify at a bridge that takes a webhook \
         (Apprise's API server, a Matrix or mail bridge) instead",
        sent = sent()
    )]
    NotAWebhook(String),
    #[error(
        "teams:// posts to an Office 365 connector webhook, which Microsoft retired in 2026; create \
         a Workflows webhook (\"Send webhook alerts to a channel\") and give its https:// URL with \
         --notify-format teams"
    )]
    RetiredTeams,
    #[error("{service}://...: {why}")]
    Invalid { service: &'static str, why: String },
}

fn sent() -> String {
    Service::ALL.map(Service::scheme).join(", ")
}

fn invalid(service: Service, why: impl Into<String>) -> ShoutrrrError {
    ShoutrrrError::Invalid {
        service: service.scheme(),
        why: why.into(),
    }
}

/// The HTTP methods a generic webhook may be sent with: those that carry a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Post,
    Put,
    Patch,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Patch => "PATCH",
        }
    }
}

/// How the message goes in a request's body.
#[derive(Clone, PartialEq, Eq)]
pub enum Body {
    /// A JSON object: `fields`, and the message at `text_key`, after `first_line` (a title of the
    /// URL's) and cut to `max_chars` characters (the service refuses longer ones).
    Json {
        fields: Map<String, Value>,
        text_key: String,
        first_line: Option<String>,
        max_chars: Option<usize>,
    },
    /// The message as it is.
    Text,
}

// Its fields come from the URL's query: their keys only.
impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Body::Text => f.write_str("Text"),
            Body::Json {
                fields, text_key, ..
            } => f
                .debug_struct("Json")
                .field("fields", &fields.keys().collect::<Vec<_>>())
                .field("text_key", text_key)
                .finish_non_exhaustive(),
        }
    }
}

impl Body {
    /// The body for the message `text`.
    pub fn render(&self, text: &str) -> String {
        match self {
            Body::Text => text.to_string(),
            Body::Json {
                fields,
                text_key,
                first_line,
                max_chars,
            } => {
                let text = match first_line {
                    Some(title) => format!("{title}\n{text}"),
                    None => text.to_string(),
                };
                let text = match max_chars {
                    Some(max) => cut(&text, *max),
                    None => text,
                };
                let mut object = fields.clone();
                object.insert(text_key.clone(), Value::String(text));
                Value::Object(object).to_string()
            }
        }
    }
}

/// `text`, at most `max` characters: cut, with an ellipsis, when longer.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// One request a message makes.
#[derive(Clone, PartialEq, Eq)]
pub struct Request {
    pub method: Method,
    /// Without a user part (that is [`Request::basic_auth`]); its path or query may hold a token.
    pub url: String,
    /// The user and password of the URL, sent as HTTP basic authentication (as Go's client does).
    pub basic_auth: Option<(String, String)>,
    pub content_type: String,
    /// Sent besides `Content-Type` (their values may be secrets).
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

// The URL and the header values may hold secrets.
impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.method)
            .field("url", &super::redacted_url(&self.url))
            .field("basic_auth", &self.basic_auth.is_some())
            .field("content_type", &self.content_type)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("body", &self.body)
            .finish()
    }
}

/// What a shoutrrr URL sends: each request, with the same message, in order.
#[derive(Clone, PartialEq, Eq)]
pub struct Shoutrrr {
    pub service: Service,
    pub requests: Vec<Request>,
}

impl fmt::Debug for Shoutrrr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shoutrrr")
            .field("service", &self.service.scheme())
            .field("requests", &self.requests)
            .finish()
    }
}

/// Whether `scheme` is a shoutrrr service's, sent or refused.
pub fn is_shoutrrr(scheme: &str) -> bool {
    let service = scheme.split('+').next().unwrap_or(scheme);
    Service::of(scheme).is_some() || NOT_WEBHOOKS.contains(&service) || service == "teams"
}

/// `url` as its service's request(s): a URL whose scheme [`is_shoutrrr`].
pub fn requests(url: &Url) -> Result<Shoutrrr, ShoutrrrError> {
    let scheme = url.scheme();
    let Some(service) = Service::of(scheme) else {
        let name = scheme.split('+').next().unwrap_or(scheme);
        return Err(match name {
            "teams" => ShoutrrrError::RetiredTeams,
            _ => ShoutrrrError::NotAWebhook(name.to_string()),
        });
    };
    // shoutrrr's custom URLs (`service+https://...`): of those sent, only generic takes them.
    let custom = scheme.split_once('+').map(|(_, inner)| inner);
    match (service, custom) {
        (Service::Generic, Some(inner @ ("http" | "https"))) => generic::generic_custom(url, inner),
        (_, Some(_)) => Err(invalid(
            service,
            format!(
                "shoutrrr takes no custom URL ({scheme}://) for {}",
                service.scheme()
            ),
        )),
        (Service::Slack, None) => chat::slack(url),
        (Service::Discord, None) => chat::discord(url),
        (Service::GoogleChat, None) => chat::google_chat(url),
        (Service::Mattermost, None) => chat::mattermost(url),
        (Service::RocketChat, None) => chat::rocket_chat(url),
        (Service::Telegram, None) => chat::telegram(url),
        (Service::Gotify, None) => push::gotify(url),
        (Service::Ntfy, None) => push::ntfy(url),
        (Service::Generic, None) => generic::generic(url),
    }
    .map(|requests| Shoutrrr { service, requests })
}

/// The URL as logs show it: its scheme, and its host where that is a server (an http(s)
/// webhook's, a self-hosted service's), not a token; never its user part, path or query.
pub fn redacted(url: &Url) -> String {
    let shows_host = match url.scheme() {
        "http" | "https" => true,
        scheme => Service::of(scheme).is_some_and(Service::host_is_a_server),
    };
    match shows_host {
        true => format!(
            "{}://{}{}/...",
            url.scheme(),
            url.host_str().unwrap_or(""),
            url.port().map(|p| format!(":{p}")).unwrap_or_default()
        ),
        false => format!("{}://...", url.scheme()),
    }
}

/// `s` with its `%XX` escapes decoded, as Go's URL parser gives the user part and the path; an
/// escape that is not UTF-8 is an error.
fn decoded(service: Service, what: &str, s: &str) -> Result<String, ShoutrrrError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(h), Some(l)) => {
                        // Two hex digits are at most 255.
                        out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                        i += 3;
                    }
                    _ => {
                        out.push(b'%');
                        i += 1;
                    }
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| invalid(service, format!("the {what} is not UTF-8")))
}

/// The URL's user name and password, decoded (empty when absent).
fn user(service: Service, url: &Url) -> Result<(String, Option<String>), ShoutrrrError> {
    let name = decoded(service, "user part", url.username())?;
    let password = url
        .password()
        .map(|p| decoded(service, "user part", p))
        .transpose()?;
    Ok((name, password))
}

/// The URL's host, without a port; empty when it has none.
fn host(url: &Url) -> String {
    url.host_str().unwrap_or("").to_string()
}

/// The URL's host and port, as Go's `URL.Host`.
fn host_port(url: &Url) -> String {
    match url.port() {
        Some(p) => format!("{}:{p}", host(url)),
        None => host(url),
    }
}

/// The URL's path segments after the leading `/`, decoded (as Go's `URL.Path`).
fn path(service: Service, url: &Url) -> Result<String, ShoutrrrError> {
    decoded(service, "path", url.path())
}

/// A URL's query, as shoutrrr's services read it: each key's first value.
struct Query {
    service: Service,
    pairs: Vec<(String, String)>,
}

impl Query {
    /// shoutrrr's config keys are case-insensitive (its resolver lowers them).
    fn of(service: Service, url: &Url) -> Query {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (k, v) in url.query_pairs() {
            let k = k.to_lowercase();
            if !pairs.iter().any(|(seen, _)| *seen == k) {
                pairs.push((k, v.into_owned()));
            }
        }
        Query { service, pairs }
    }

    /// The value of the first of `keys` (a key and its aliases) the query has, and takes them.
    fn take(&mut self, keys: &[&str]) -> Option<String> {
        let mut found = None;
        for key in keys {
            if let Some(at) = self.pairs.iter().position(|(k, _)| k == key) {
                let (_, v) = self.pairs.remove(at);
                found = found.or(Some(v));
            }
        }
        found
    }

    /// A yes/no key, as shoutrrr's ParseBool reads it; the value is not repeated in an error
    /// (it may be a mistyped secret).
    fn flag(&mut self, key: &str, default: bool) -> Result<bool, ShoutrrrError> {
        match self.take(&[key]).map(|v| v.to_lowercase()).as_deref() {
            None => Ok(default),
            Some("true" | "1" | "yes" | "y") => Ok(true),
            Some("false" | "0" | "no" | "n") => Ok(false),
            Some(_) => Err(invalid(
                self.service,
                format!("the query's {key} is not yes or no"),
            )),
        }
    }

    /// shoutrrr refuses a key its service does not know: a typo does not go unnoticed.
    fn done(self, known: &[&str]) -> Result<(), ShoutrrrError> {
        match self.pairs.first() {
            None => Ok(()),
            Some((k, _)) => Err(invalid(
                self.service,
                format!(
                    "the query's {k:?} is not a key of shoutrrr's {} (known: {})",
                    self.service.scheme(),
                    known.join(", ")
                ),
            )),
        }
    }
}

fn json_body(
    fields: Map<String, Value>,
    text_key: &str,
    first_line: Option<String>,
    max_chars: Option<usize>,
) -> Body {
    Body::Json {
        fields,
        text_key: text_key.to_string(),
        first_line: first_line.filter(|t| !t.is_empty()),
        max_chars,
    }
}

fn post_json(url: String, body: Body) -> Request {
    Request {
        method: Method::Post,
        url,
        basic_auth: None,
        content_type: "application/json".into(),
        headers: Vec::new(),
        body,
    }
}

/// Sets `key` to `value` when there is one.
fn put(fields: &mut Map<String, Value>, key: &str, value: Option<String>) {
    if let Some(v) = value.filter(|v| !v.is_empty()) {
        fields.insert(key.to_string(), Value::String(v));
    }
}

/// shoutrrr's icon: a URL is `icon_url`, anything else an emoji.
fn put_icon(fields: &mut Map<String, Value>, icon: Option<String>) {
    if let Some(icon) = icon.filter(|i| !i.is_empty()) {
        let key = if icon.contains("http://") || icon.contains("https://") {
            "icon_url"
        } else {
            "icon_emoji"
        };
        fields.insert(key.into(), Value::String(icon));
    }
}

#[cfg(test)]
mod tests;
