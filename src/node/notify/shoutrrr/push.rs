//! The push services with a server of their own: Gotify and ntfy.

use reqwest::Url;
use serde_json::{Map, Value};

use super::*;

// --- gotify ---

/// `gotify://HOST[:PORT][/PATH]/TOKEN`.
pub(super) fn gotify(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
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
pub(super) fn ntfy(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
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
