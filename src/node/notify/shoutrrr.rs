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
use serde_json::{Map, Value, json};

use super::Markup;

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
    Teams,
    Gotify,
    Ntfy,
    Generic,
}

impl Service {
    pub const ALL: [Service; 10] = [
        Service::Slack,
        Service::Discord,
        Service::GoogleChat,
        Service::Mattermost,
        Service::RocketChat,
        Service::Telegram,
        Service::Teams,
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
            Service::Teams => "teams",
            Service::Gotify => "gotify",
            Service::Ntfy => "ntfy",
            Service::Generic => "generic",
        }
    }

    /// The service of a URL's scheme (`hangouts` is Google Chat's old name, still taken by
    /// shoutrrr; `generic+https` and `teams+https` are shoutrrr's "custom URLs").
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
            // CommonMark-like: an Office 365 connector card with `markdown: true`, and Discord's
            // Markdown (which takes the same backslash escapes).
            Service::Teams | Service::Discord => Markup::Teams,
            // Sent as plain text: Telegram without a parse_mode, Gotify and ntfy without their
            // Markdown extras, Google Chat, and the generic webhook's own receiver.
            Service::GoogleChat
            | Service::Telegram
            | Service::Gotify
            | Service::Ntfy
            | Service::Generic => Markup::Plain,
        }
    }

    /// Whether the URL's host is the service's own server (shown in logs), not a token.
    fn host_is_a_server(self) -> bool {
        !matches!(
            self,
            Service::Slack | Service::Discord | Service::Telegram | Service::Teams
        )
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
    Service::of(scheme).is_some() || NOT_WEBHOOKS.contains(&service)
}

/// `url` as its service's request(s): a URL whose scheme [`is_shoutrrr`].
pub fn requests(url: &Url) -> Result<Shoutrrr, ShoutrrrError> {
    let scheme = url.scheme();
    let Some(service) = Service::of(scheme) else {
        let name = scheme.split('+').next().unwrap_or(scheme);
        return Err(ShoutrrrError::NotAWebhook(name.to_string()));
    };
    // shoutrrr's custom URLs (`service+https://...`): only generic and teams take them.
    let custom = scheme.split_once('+').map(|(_, inner)| inner);
    match (service, custom) {
        (Service::Generic, Some(inner @ ("http" | "https"))) => generic_custom(url, inner),
        (Service::Teams, Some("https" | "http")) => teams_custom(url),
        (_, Some(_)) => Err(invalid(
            service,
            format!(
                "shoutrrr takes no custom URL ({scheme}://) for {}",
                service.scheme()
            ),
        )),
        (Service::Slack, None) => slack(url),
        (Service::Discord, None) => discord(url),
        (Service::GoogleChat, None) => google_chat(url),
        (Service::Mattermost, None) => mattermost(url),
        (Service::RocketChat, None) => rocket_chat(url),
        (Service::Telegram, None) => telegram(url),
        (Service::Teams, None) => teams(url),
        (Service::Gotify, None) => gotify(url),
        (Service::Ntfy, None) => ntfy(url),
        (Service::Generic, None) => generic(url),
    }
    .map(|requests| Shoutrrr { service, requests })
}

/// The URL as logs show it: its scheme, and its host where that is a server (not a token).
pub fn redacted(url: &Url) -> String {
    match Service::of(url.scheme()) {
        Some(s) if s.host_is_a_server() => format!(
            "{}://{}{}/...",
            url.scheme(),
            url.host_str().unwrap_or(""),
            url.port().map(|p| format!(":{p}")).unwrap_or_default()
        ),
        _ => format!("{}://...", url.scheme()),
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

// --- slack ---

/// A Slack token as shoutrrr's pattern reads it: `[TYPE(-|:)]P1 S P2 S P3`, where TYPE is `hook`
/// or `xox?`, P1 and P2 are 9 or more of `A-Z0-9`, P3 24 or more of `A-Za-z0-9`, and both
/// separators S are the same one of `-`, `/` and `,`. The type (`hook` when none) and the parts.
fn slack_token(s: &str) -> Result<(String, [String; 3]), &'static str> {
    let (kind, rest) = if let Some(r) = s
        .strip_prefix("hook")
        .and_then(|r| r.strip_prefix(['-', ':']))
    {
        ("hook".to_string(), r)
    } else if s.starts_with("xox")
        && s.chars().nth(4).is_some_and(|c| c == '-' || c == ':')
        && s.is_char_boundary(4)
    {
        (s[..4].to_string(), &s[5..])
    } else {
        ("hook".to_string(), s.strip_prefix(':').unwrap_or(s))
    };
    let upper = |c: char| c.is_ascii_uppercase() || c.is_ascii_digit();
    let span = |s: &str, ok: &dyn Fn(char) -> bool| s.find(|c: char| !ok(c)).unwrap_or(s.len());
    let n1 = span(rest, &upper);
    let (p1, rest) = rest.split_at(n1);
    let mut chars = rest.chars();
    let s1 = chars.next();
    let rest = chars.as_str();
    let n2 = span(rest, &upper);
    let (p2, rest) = rest.split_at(n2);
    let mut chars = rest.chars();
    let s2 = chars.next();
    let p3 = chars.as_str();
    // A trailing slash (`slack://T/B/X/`) is no part of the token.
    let p3 = p3.strip_suffix('/').unwrap_or(p3);
    let seps = ['-', '/', ','];
    if p1.len() < 9
        || p2.len() < 9
        || p3.len() < 24
        || !p3.chars().all(|c| c.is_ascii_alphanumeric())
        || !s1.is_some_and(|c| seps.contains(&c))
        || !s2.is_some_and(|c| seps.contains(&c))
    {
        return Err(
            "the token is not shoutrrr's TOKEN-A/TOKEN-B/TOKEN-C (hook:A-B-C in the user part)",
        );
    }
    if s1 != s2 {
        return Err("the token's two separators differ");
    }
    Ok((kind, [p1.to_string(), p2.to_string(), p3.to_string()]))
}

/// `slack://[botname@]TOKEN-A/TOKEN-B/TOKEN-C` (the old form: the token is the host and path) or
/// `slack://hook:TOKEN-A-TOKEN-B-TOKEN-C@CHANNEL` (`webhook` for the webhook's own channel).
fn slack(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
    let s = Service::Slack;
    let (name, password) = user(s, url)?;
    let (token, channel, mut botname) = if url.path().len() > 1 {
        let token = format!("{}{}", host(url), path(s, url)?);
        (token, "webhook".to_string(), Some(name))
    } else {
        let token = match password {
            Some(p) => format!("{name}:{p}"),
            None => name,
        };
        (token, host(url), None)
    };
    let (kind, [a, b, c]) = slack_token(&token).map_err(|why| invalid(s, why))?;
    if kind != "hook" {
        return Err(invalid(
            s,
            format!(
                "a Slack API token ({kind}) posts through chat.postMessage, which answers 200 \
                 even when it refuses a message: slipway sends Slack's incoming webhooks only \
                 (slack://hook:A-B-C@webhook, or the https://hooks.slack.com/services/... URL \
                 with --notify-format slack)"
            ),
        ));
    }
    let mut q = Query::of(s, url);
    if let Some(b) = q.take(&["botname", "username"]) {
        botname = Some(b);
    }
    let icon = q.take(&["icon", "icon_emoji", "icon_url"]);
    let title = q.take(&["title"]);
    let thread = q.take(&["thread_ts"]);
    // The attachments' colour: no attachment is sent.
    let _color = q.take(&["color"]);
    q.done(&["botname", "username", "icon", "color", "title", "thread_ts"])?;
    let mut fields = Map::new();
    put(&mut fields, "username", botname);
    put_icon(&mut fields, icon);
    put(&mut fields, "thread_ts", thread);
    if channel != "webhook" {
        put(&mut fields, "channel", Some(channel));
    }
    Ok(vec![post_json(
        format!("https://hooks.slack.com/services/{a}/{b}/{c}"),
        json_body(fields, "text", title, None),
    )])
}

// --- discord ---

/// Discord refuses a `content` longer than this.
const DISCORD_MAX: usize = 2000;

/// `discord://TOKEN@WEBHOOK-ID`.
fn discord(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
    let s = Service::Discord;
    let id = host(url);
    let (token, _) = user(s, url)?;
    match url.path() {
        "" => {}
        "/raw" => {
            return Err(invalid(
                s,
                "the /raw form posts the message as Discord's JSON, and slipway's messages are text: drop /raw",
            ));
        }
        _ => {
            return Err(invalid(
                s,
                "the URL has a path: want discord://TOKEN@WEBHOOK-ID",
            ));
        }
    }
    if id.is_empty() {
        return Err(invalid(s, "no webhook ID: want discord://TOKEN@WEBHOOK-ID"));
    }
    if token.is_empty() {
        return Err(invalid(s, "no token: want discord://TOKEN@WEBHOOK-ID"));
    }
    let mut q = Query::of(s, url);
    if q.flag("json", false)? {
        return Err(invalid(
            s,
            "json=yes posts the message as Discord's JSON, and slipway's messages are text: drop it",
        ));
    }
    let title = q.take(&["title"]);
    let username = q.take(&["username"]);
    let avatar = q.take(&["avatar", "avatarurl"]);
    // Embeds' colours and line splitting: no embed is sent.
    for key in [
        "color",
        "colorerror",
        "colorwarn",
        "colorinfo",
        "colordebug",
    ] {
        q.take(&[key]);
    }
    q.flag("splitlines", true)?;
    q.done(&[
        "title",
        "username",
        "avatar",
        "avatarurl",
        "color",
        "colorerror",
        "colorwarn",
        "colorinfo",
        "colordebug",
        "splitlines",
        "json",
    ])?;
    let mut fields = Map::new();
    put(&mut fields, "username", username);
    put(&mut fields, "avatar_url", avatar);
    // A value from the cluster never pings anyone, whatever it says.
    fields.insert("allowed_mentions".into(), json!({ "parse": [] }));
    Ok(vec![post_json(
        format!("https://discord.com/api/webhooks/{id}/{token}"),
        json_body(fields, "content", title, Some(DISCORD_MAX)),
    )])
}

// --- google chat ---

/// `googlechat://chat.googleapis.com/v1/spaces/SPACE/messages?key=KEY&token=TOKEN`: the
/// webhook's URL with `googlechat` for `https`.
fn google_chat(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
    let s = Service::GoogleChat;
    if host(url).is_empty() {
        return Err(invalid(s, "the URL has no host (chat.googleapis.com)"));
    }
    // shoutrrr reads these two exactly so named, and drops the rest of the query.
    let get = |key: &str| {
        url.query_pairs()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
            .filter(|v| !v.is_empty())
    };
    let key = get("key").ok_or_else(|| invalid(s, "the query has no key"))?;
    // shoutrrr v0.8.0 means to refuse a missing token too (it checks `key` twice); Google does.
    let token = get("token").ok_or_else(|| invalid(s, "the query has no token"))?;
    let mut endpoint = Url::parse(&format!("https://{}", host_port(url)))
        .map_err(|_| invalid(s, "the host is not a valid host name"))?;
    endpoint.set_path(&path(s, url)?);
    endpoint
        .query_pairs_mut()
        .append_pair("key", &key)
        .append_pair("token", &token);
    Ok(vec![post_json(
        endpoint.into(),
        json_body(Map::new(), "text", None, None),
    )])
}

// --- mattermost ---

/// `mattermost://[USERNAME@]HOST/TOKEN[/CHANNEL]`.
fn mattermost(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
    let s = Service::Mattermost;
    let host = host(url);
    if host.is_empty() {
        return Err(invalid(s, "the URL has no host"));
    }
    let path = path(s, url)?;
    let mut segments = path.trim_start_matches('/').split('/');
    let token = segments.next().unwrap_or("");
    if token.is_empty() {
        return Err(invalid(
            s,
            "no token: want mattermost://[USERNAME@]HOST/TOKEN[/CHANNEL]",
        ));
    }
    let channel = segments.next().map(str::to_string);
    let (username, _) = user(s, url)?;
    let mut q = Query::of(s, url);
    let icon = q.take(&["icon", "icon_emoji", "icon_url"]);
    // "Notification title, optionally set by the sender (not used)", says shoutrrr.
    q.take(&["title"]);
    q.done(&["icon", "icon_emoji", "icon_url", "title"])?;
    let mut fields = Map::new();
    put(&mut fields, "username", Some(username));
    put(&mut fields, "channel", channel);
    put_icon(&mut fields, icon);
    // shoutrrr v0.8.0 posts to the host alone: a port in the URL is not used.
    Ok(vec![post_json(
        format!("https://{host}/hooks/{token}"),
        json_body(fields, "text", None, None),
    )])
}

// --- rocket.chat ---

/// `rocketchat://[USERNAME@]HOST[:PORT]/TOKEN-A/TOKEN-B[/CHANNEL|/@USER]`.
fn rocket_chat(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
    let s = Service::RocketChat;
    if host(url).is_empty() {
        return Err(invalid(s, "the URL has no host"));
    }
    let path = path(s, url)?;
    let segments: Vec<&str> = path.split('/').collect();
    let want = "want rocketchat://[USERNAME@]HOST[:PORT]/TOKEN-A/TOKEN-B[/CHANNEL]";
    let (a, b) = match segments.as_slice() {
        [_, a, b, ..] if !a.is_empty() && !b.is_empty() => (*a, *b),
        _ => return Err(invalid(s, format!("no token: {want}"))),
    };
    // shoutrrr's channel: the fragment when there is a fourth segment (`.../B/#channel`), else
    // that segment, `#` before it unless it is a `@user`.
    let channel = match segments.get(3) {
        Some(_) if url.fragment().is_some_and(|f| !f.is_empty()) => {
            url.fragment().map(|f| format!("#{f}"))
        }
        Some(&"") => None,
        Some(c) if c.starts_with('@') => Some(c.to_string()),
        Some(c) => Some(format!("#{c}")),
        None => None,
    };
    let (username, _) = user(s, url)?;
    // shoutrrr's rocketchat reads no query.
    let mut fields = Map::new();
    put(&mut fields, "username", Some(username));
    put(&mut fields, "channel", channel);
    Ok(vec![post_json(
        format!("https://{}/hooks/{a}/{b}", host_port(url)),
        json_body(fields, "text", None, None),
    )])
}

// --- telegram ---

/// Telegram refuses a message longer than this.
const TELEGRAM_MAX: usize = 4096;

/// `telegram://BOT-ID:BOT-SECRET@telegram?chats=CHAT[,CHAT...]`: one request per chat.
fn telegram(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
    let s = Service::Telegram;
    let (id, secret) = user(s, url)?;
    let secret = secret.unwrap_or_default();
    let valid = !id.is_empty()
        && id.chars().all(|c| c.is_ascii_digit())
        && !secret.is_empty()
        && secret
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !valid {
        return Err(invalid(
            s,
            "the bot token is not Telegram's DIGITS:SECRET (want telegram://TOKEN@telegram?chats=...)",
        ));
    }
    let mut q = Query::of(s, url);
    let chats = q.take(&["chats", "channels"]).unwrap_or_default();
    let preview = q.flag("preview", true)?;
    let notification = q.flag("notification", true)?;
    let title = q.take(&["title"]);
    // The text is sent plain, without Telegram's parse mode: values from the cluster are no markup.
    match q.take(&["parsemode"]).map(|m| m.to_lowercase()).as_deref() {
        None | Some("none" | "markdown" | "html" | "markdownv2") => {}
        Some(_) => {
            return Err(invalid(
                s,
                "the query's parsemode is not None, Markdown, HTML or MarkdownV2",
            ));
        }
    }
    q.done(&[
        "chats",
        "channels",
        "preview",
        "notification",
        "parsemode",
        "title",
    ])?;
    if chats.is_empty() {
        return Err(invalid(s, "no chats: add ?chats=CHAT-ID or @channel"));
    }
    let endpoint = format!("https://api.telegram.org/bot{id}:{secret}/sendMessage");
    chats
        .split(',')
        .map(|chat| {
            let (chat_id, thread) = match chat.split_once(':') {
                Some((c, t)) => (c, t.parse::<i64>().ok()),
                None => (chat, None),
            };
            if chat_id.is_empty() {
                return Err(invalid(s, "a chat in ?chats= is empty"));
            }
            let mut fields = Map::new();
            fields.insert("chat_id".into(), Value::String(chat_id.into()));
            if let Some(t) = thread {
                fields.insert("message_thread_id".into(), Value::from(t));
            }
            fields.insert("disable_notification".into(), Value::Bool(!notification));
            fields.insert("disable_web_page_preview".into(), Value::Bool(!preview));
            Ok(post_json(
                endpoint.clone(),
                json_body(fields, "text", title.clone(), Some(TELEGRAM_MAX)),
            ))
        })
        .collect()
}

// --- teams ---

/// shoutrrr's default host, whose path is `webhook`; any other's is `webhookb2`.
const TEAMS_LEGACY_HOST: &str = "outlook.office.com";

/// A version 4 UUID in lower-case hex, as shoutrrr checks a group, tenant and group owner.
fn uuid4(s: &str) -> bool {
    let hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
    let parts: Vec<&str> = s.split('-').collect();
    let lens = [8, 4, 4, 4, 12];
    parts.len() == 5
        && parts
            .iter()
            .zip(lens)
            .all(|(p, n)| p.len() == n && p.chars().all(hex))
        && parts[2].starts_with('4')
        && parts[3].starts_with(['8', '9', 'a', 'b'])
}

/// The webhook's four parts, checked as shoutrrr checks them.
fn teams_parts(parts: [String; 4]) -> Result<[String; 4], ShoutrrrError> {
    let s = Service::Teams;
    let [group, tenant, alt, owner] = &parts;
    let names = [
        (uuid4(group), "group"),
        (uuid4(tenant), "tenant"),
        (
            alt.len() == 32 && alt.chars().all(|c| c.is_ascii_alphanumeric()),
            "altId",
        ),
        (uuid4(owner), "groupOwner"),
    ];
    match names.iter().find(|(ok, _)| !ok) {
        Some((_, name)) => Err(invalid(
            s,
            format!(
                "the webhook's {name} is not what shoutrrr takes (want teams://GROUP@TENANT/ALT-ID/GROUP-OWNER?host=ORG.webhook.office.com)"
            ),
        )),
        None => Ok(parts),
    }
}

/// `teams://GROUP@TENANT/ALT-ID/GROUP-OWNER?host=ORG.webhook.office.com`, or the older
/// `teams://GROUP@TENANT:ALT-ID@GROUP-OWNER`.
fn teams(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
    let s = Service::Teams;
    let (name, password) = user(s, url)?;
    let parts = match password {
        Some(alt) => {
            let Some((group, tenant)) = name.split_once('@') else {
                return Err(invalid(s, "want teams://GROUP@TENANT/ALT-ID/GROUP-OWNER"));
            };
            [group.into(), tenant.into(), alt, host(url)]
        }
        None => {
            let path = path(s, url)?;
            let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
            let [alt, owner] = segments.as_slice() else {
                return Err(invalid(s, "want teams://GROUP@TENANT/ALT-ID/GROUP-OWNER"));
            };
            [name, host(url), alt.to_string(), owner.to_string()]
        }
    };
    teams_request(teams_parts(parts)?, TEAMS_LEGACY_HOST.into(), url)
}

/// `teams+https://ORG.webhook.office.com/webhookb2/GROUP@TENANT/IncomingWebhook/ALT-ID/OWNER`:
/// the webhook's own URL.
fn teams_custom(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
    let s = Service::Teams;
    let path = path(s, url)?;
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    // shoutrrr finds GROUP@TENANT/ANY/ALT-ID/OWNER anywhere in the URL; the webhook's path is
    // `webhookb2` (or `webhook`) before it.
    let parts = segments.windows(4).find_map(|w| {
        let (group, tenant) = w[0].split_once('@')?;
        Some([group.into(), tenant.into(), w[2].into(), w[3].into()])
    });
    let Some(parts) = parts else {
        return Err(invalid(
            s,
            "want teams+https://ORG.webhook.office.com/webhookb2/GROUP@TENANT/IncomingWebhook/ALT-ID/GROUP-OWNER",
        ));
    };
    teams_request(teams_parts(parts)?, host_port(url), url)
}

fn teams_request(
    [group, tenant, alt, owner]: [String; 4],
    default_host: String,
    url: &Url,
) -> Result<Vec<Request>, ShoutrrrError> {
    let s = Service::Teams;
    let mut q = Query::of(s, url);
    let title = q.take(&["title"]);
    let color = q.take(&["color"]);
    let host = q.take(&["host"]).unwrap_or(default_host);
    q.done(&["title", "color", "host"])?;
    if host.is_empty() {
        return Err(invalid(s, "the webhook has no host"));
    }
    let kind = if host == TEAMS_LEGACY_HOST {
        "webhook"
    } else {
        "webhookb2"
    };
    // An Office 365 connector's MessageCard, with the message as its text.
    let mut fields = Map::new();
    fields.insert("@type".into(), json!("MessageCard"));
    fields.insert("@context".into(), json!("http://schema.org/extensions"));
    fields.insert("markdown".into(), json!(true));
    put(&mut fields, "title", title.clone());
    put(&mut fields, "summary", title);
    put(&mut fields, "themeColor", color);
    Ok(vec![post_json(
        format!("https://{host}/{kind}/{group}@{tenant}/IncomingWebhook/{alt}/{owner}"),
        json_body(fields, "text", None, None),
    )])
}

// --- gotify ---

/// `gotify://HOST[:PORT][/PATH]/TOKEN`.
fn gotify(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
    let s = Service::Gotify;
    let host = host_port(url);
    if host.is_empty() {
        return Err(invalid(s, "the URL has no host"));
    }
    let path = path(s, url)?;
    let path = path.strip_suffix('/').unwrap_or(&path);
    let (prefix, token) = path.rsplit_once('/').unwrap_or(("", path));
    // Gotify's own rule for an application token, as shoutrrr checks it.
    let chars = |c: char| c.is_ascii_alphanumeric() || ".-_".contains(c);
    if token.len() != 15 || !token.starts_with('A') || !token.chars().all(chars) {
        return Err(invalid(
            s,
            "the token is not a Gotify application token (15 characters, the first A)",
        ));
    }
    let mut q = Query::of(s, url);
    let priority = match q.take(&["priority"]) {
        None => 0,
        Some(p) => p
            .parse::<i64>()
            .map_err(|_| invalid(s, "the query's priority is not a number"))?,
    };
    let title = q.take(&["title"]).unwrap_or_else(|| "slipway".into());
    let plain = q.flag("disabletls", false)?;
    q.done(&["priority", "title", "disabletls"])?;
    let scheme = if plain { "http" } else { "https" };
    let mut fields = Map::new();
    fields.insert("title".into(), Value::String(title));
    fields.insert("priority".into(), Value::from(priority));
    // shoutrrr writes PATH/ then /message: one slash here.
    Ok(vec![post_json(
        format!("{scheme}://{host}{prefix}/message?token={token}"),
        json_body(fields, "message", None, None),
    )])
}

// --- ntfy ---

/// `ntfy://[USER:PASSWORD@]HOST[:PORT]/TOPIC`.
fn ntfy(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
    let s = Service::Ntfy;
    let host = host_port(url);
    if host.is_empty() {
        return Err(invalid(
            s,
            "the URL has no host (ntfy.sh for the public server)",
        ));
    }
    let path = path(s, url)?;
    let topic = path.trim_start_matches('/');
    if topic.is_empty() {
        return Err(invalid(
            s,
            "no topic: want ntfy://[USER:PASSWORD@]HOST/TOPIC",
        ));
    }
    let (username, password) = user(s, url)?;
    let mut q = Query::of(s, url);
    let scheme = q.take(&["scheme"]).unwrap_or_else(|| "https".into());
    if scheme != "https" && scheme != "http" {
        return Err(invalid(s, "the query's scheme is not http or https"));
    }
    let mut headers: Vec<(String, String)> = Vec::new();
    let mut header = |name: &str, value: Option<String>| {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            headers.push((name.to_string(), v));
        }
    };
    header("Title", q.take(&["title"]));
    let priority = match q.take(&["priority"]).map(|p| p.to_lowercase()).as_deref() {
        None | Some("" | "default" | "3") => None,
        Some("min" | "1") => Some("1"),
        Some("low" | "2") => Some("2"),
        Some("high" | "4") => Some("4"),
        Some("max" | "urgent" | "5") => Some("5"),
        Some(_) => {
            return Err(invalid(
                s,
                "the query's priority is not min, low, default, high, max or 1 to 5",
            ));
        }
    };
    header("Priority", priority.map(str::to_string));
    header("Tags", q.take(&["tags"]));
    header("Delay", q.take(&["delay", "at", "in"]));
    header("Actions", q.take(&["actions"]));
    header("Click", q.take(&["click"]));
    header("Attach", q.take(&["attach"]));
    header("X-Icon", q.take(&["icon"]));
    header("Filename", q.take(&["filename"]));
    header("Email", q.take(&["email"]));
    let cache = q.flag("cache", true)?;
    let firebase = q.flag("firebase", true)?;
    q.done(&[
        "title", "scheme", "tags", "priority", "actions", "click", "attach", "filename", "delay",
        "at", "in", "email", "icon", "cache", "firebase",
    ])?;
    if !cache {
        headers.push(("Cache".into(), "no".into()));
    }
    if !firebase {
        headers.push(("Firebase".into(), "no".into()));
    }
    // shoutrrr sends the user and password only with a password.
    let basic_auth = password.filter(|p| !p.is_empty()).map(|p| (username, p));
    Ok(vec![Request {
        method: Method::Post,
        url: format!("{scheme}://{host}/{topic}"),
        basic_auth,
        content_type: "text/plain; charset=utf-8".into(),
        headers,
        body: Body::Text,
    }])
}

// --- generic ---

/// The generic webhook's config keys (shoutrrr reads them lower-case only).
const GENERIC_KEYS: [&str; 7] = [
    "contenttype",
    "disabletls",
    "template",
    "title",
    "titlekey",
    "messagekey",
    "method",
];

/// shoutrrr's header name of a `@key` query key: `@acceptLanguage` is `Accept-Language`.
fn header_name(key: &str) -> String {
    let mut out = String::new();
    let mut prev: Option<char> = None;
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            if prev.is_some_and(|p| p != '-') {
                out.push('-');
            }
            out.push(c);
        } else if prev.is_none_or(|p| p == '-') {
            out.push(c.to_ascii_uppercase());
        } else {
            out.push(c);
        }
        prev = Some(c);
    }
    out
}

/// The parts of a generic webhook's query: its headers (`@key`), its extra JSON fields (`$key`),
/// its config keys (when `config`), and what is forwarded to the webhook (`__key` as `key`).
struct GenericQuery {
    headers: Vec<(String, String)>,
    extra: Map<String, Value>,
    config: Vec<(String, String)>,
    forwarded: Vec<(String, String)>,
}

fn generic_query(url: &Url, config: bool) -> Result<GenericQuery, ShoutrrrError> {
    let s = Service::Generic;
    let mut out = GenericQuery {
        headers: Vec::new(),
        extra: Map::new(),
        config: Vec::new(),
        forwarded: Vec::new(),
    };
    for (k, v) in url.query_pairs() {
        let (k, v) = (k.into_owned(), v.into_owned());
        if let Some(name) = k.strip_prefix('@') {
            let name = header_name(name);
            let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if name.is_empty() || !name.chars().all(token) {
                return Err(invalid(
                    s,
                    format!("the query's @{name} is not a header name"),
                ));
            }
            if v.chars().any(|c| c.is_control() && c != '\t') {
                return Err(invalid(
                    s,
                    format!("the query's @{name} has a line break or a control character"),
                ));
            }
            if !out.headers.iter().any(|(n, _)| *n == name) {
                out.headers.push((name, v));
            }
        } else if let Some(name) = k.strip_prefix('$') {
            out.extra
                .entry(name.to_string())
                .or_insert(Value::String(v));
        } else if config && GENERIC_KEYS.contains(&k.as_str()) {
            if !out.config.iter().any(|(n, _)| *n == k) {
                out.config.push((k, v));
            }
        } else {
            let k = match k.strip_prefix("__") {
                Some(escaped) if GENERIC_KEYS.contains(&escaped) => escaped.to_string(),
                _ => k,
            };
            out.forwarded.push((k, v));
        }
    }
    // Go encodes a query sorted by key, each key's values in order.
    out.forwarded.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The webhook's URL: `scheme`, the URL's host, port and path, the forwarded query.
fn generic_endpoint(
    url: &Url,
    scheme: &str,
    forwarded: &[(String, String)],
) -> Result<String, ShoutrrrError> {
    let s = Service::Generic;
    if host(url).is_empty() {
        return Err(invalid(s, "the URL has no host"));
    }
    let mut endpoint = Url::parse(&format!("{scheme}://{}", host_port(url)))
        .map_err(|_| invalid(s, "the host is not a valid host name"))?;
    endpoint.set_path(url.path());
    if !forwarded.is_empty() {
        let mut pairs = endpoint.query_pairs_mut();
        for (k, v) in forwarded {
            pairs.append_pair(k, v);
        }
    }
    Ok(endpoint.into())
}

/// The URL's user and password, as HTTP basic authentication (Go's client sends them so).
fn generic_auth(url: &Url) -> Result<Option<(String, String)>, ShoutrrrError> {
    let (name, password) = user(Service::Generic, url)?;
    Ok((!name.is_empty() || password.is_some()).then(|| (name, password.unwrap_or_default())))
}

/// `generic://HOST[:PORT]/PATH?QUERY`: posted over https (http with `disabletls=yes`), the
/// message as the body (or in a JSON object with `template=json`).
fn generic(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
    let s = Service::Generic;
    let q = generic_query(url, true)?;
    let get = |key: &str| {
        q.config
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
    };
    let plain = match get("disabletls").map(|v| v.to_lowercase()).as_deref() {
        None => false,
        Some("true" | "1" | "yes" | "y") => true,
        Some("false" | "0" | "no" | "n") => false,
        Some(_) => return Err(invalid(s, "the query's disabletls is not yes or no")),
    };
    let method = match get("method").map(|m| m.to_uppercase()).as_deref() {
        None | Some("POST") => Method::Post,
        Some("PUT") => Method::Put,
        Some("PATCH") => Method::Patch,
        Some(_) => {
            return Err(invalid(
                s,
                "the query's method is not POST, PUT or PATCH (slipway sends a body)",
            ));
        }
    };
    let body = match get("template").as_deref() {
        None | Some("") => Body::Text,
        Some("json" | "JSON") => {
            let key = get("messagekey").unwrap_or_else(|| "message".into());
            // shoutrrr v0.8.0 puts a title in only when its caller passes one, and kured passes
            // none: `title` is not sent.
            json_body(q.extra.clone(), &key, None, None)
        }
        Some(_) => {
            return Err(invalid(
                s,
                "the query's template is not json: kured loads no other template",
            ));
        }
    };
    let content_type = get("contenttype").unwrap_or_else(|| "application/json".into());
    if content_type.chars().any(char::is_control) {
        return Err(invalid(
            s,
            "the query's contenttype has a line break or a control character",
        ));
    }
    let scheme = if plain { "http" } else { "https" };
    generic_request(
        url,
        scheme,
        method,
        content_type,
        q.headers,
        &q.forwarded,
        body,
    )
}

/// `generic+https://...` (or `generic+http://`): the webhook's own URL. Its whole query is
/// forwarded but for `@` headers (shoutrrr escapes the config keys of a custom URL), so the message
/// is the body, with `Content-Type: application/json`.
fn generic_custom(url: &Url, scheme: &str) -> Result<Vec<Request>, ShoutrrrError> {
    let q = generic_query(url, false)?;
    generic_request(
        url,
        scheme,
        Method::Post,
        "application/json".into(),
        q.headers,
        &q.forwarded,
        Body::Text,
    )
}

fn generic_request(
    url: &Url,
    scheme: &str,
    method: Method,
    content_type: String,
    extra_headers: Vec<(String, String)>,
    forwarded: &[(String, String)],
    body: Body,
) -> Result<Vec<Request>, ShoutrrrError> {
    let mut headers = vec![("Accept".to_string(), content_type.clone())];
    headers.extend(extra_headers);
    Ok(vec![Request {
        method,
        url: generic_endpoint(url, scheme, forwarded)?,
        basic_auth: generic_auth(url)?,
        content_type,
        headers,
        body,
    }])
}

#[cfg(test)]
mod tests;
