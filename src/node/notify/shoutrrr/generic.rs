//! shoutrrr's generic webhook: `generic://` and `generic+http(s)://`.

use reqwest::Url;
use serde_json::{Map, Value};

use super::*;

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
pub(super) fn header_name(key: &str) -> String {
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
pub(super) fn generic(url: &Url) -> Result<Vec<Request>, ShoutrrrError> {
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
pub(super) fn generic_custom(url: &Url, scheme: &str) -> Result<Vec<Request>, ShoutrrrError> {
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
