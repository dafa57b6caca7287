//! The chat services: Slack, Discord, Google Chat, Mattermost, Rocket.Chat and Telegram.

use reqwest::Url;
use serde_json::{Map, Value, json};

use super::*;

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
pub(super) fn slack(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
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
pub(super) fn discord(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
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
pub(super) fn google_chat(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
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
pub(super) fn mattermost(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
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
pub(super) fn rocket_chat(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
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
pub(super) fn telegram(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
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
