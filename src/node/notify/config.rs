//! The targets as `slipway run`'s flags give them, checked at start: every error names the flag
//! and the target, and never the value of a secret header.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::shoutrrr::{self, Shoutrrr, ShoutrrrError};
use super::{Kind, Template, TemplateError};

/// How a target wants its body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Slack's incoming webhooks (and Mattermost's, Rocket.Chat's): `{"text": ...}`.
    Slack,
    /// Microsoft Teams Workflows: a message with an Adaptive Card.
    Teams,
    /// slipway's own object: kind, object, node, reason, message, time, text.
    Json,
}

impl Format {
    fn parse(s: &str) -> Option<Format> {
        match s {
            "slack" => Some(Format::Slack),
            "teams" => Some(Format::Teams),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
}

/// One place notifications go.
#[derive(Clone, PartialEq, Eq)]
pub struct Target {
    /// Its name in flags, logs and metric labels.
    pub name: String,
    /// As given: an http(s) webhook, or a shoutrrr URL ([`Target::service`]).
    pub url: String,
    /// The body of an http(s) webhook.
    pub format: Format,
    /// A shoutrrr URL's request(s) and body, which its service decides (not [`Target::format`]).
    pub service: Option<Shoutrrr>,
    /// Sent with every request (an `Authorization` from a Secret, say).
    pub headers: Vec<(String, String)>,
    /// What it is told (default: every kind).
    pub kinds: BTreeSet<Kind>,
    pub templates: BTreeMap<Kind, Template>,
}

impl Target {
    pub fn wants(&self, kind: Kind) -> bool {
        self.kinds.contains(&kind)
    }
}

// Header values may be secrets: never in a log line.
impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("url", &redacted_url(&self.url))
            .field("format", &self.format)
            .field("service", &self.service)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("kinds", &self.kinds)
            .finish_non_exhaustive()
    }
}

/// The URL without its user part, path and query, where webhook services put their token; a
/// shoutrrr URL without its host too where that is a token (Slack, Discord, Telegram).
pub fn redacted_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => shoutrrr::redacted(&u),
        Err(_) => "<invalid URL>".into(),
    }
}

/// The flags' values, as given (each flag may be repeated).
#[derive(Debug, Clone, Default)]
pub struct TargetFlags {
    /// `--notify NAME=URL`
    pub targets: Vec<String>,
    /// `--notify-format NAME=slack|teams|json`
    pub formats: Vec<String>,
    /// `--notify-header NAME=Header: value`
    pub headers: Vec<String>,
    /// `--notify-header-from-env NAME=Header=VARIABLE`: the value is the variable's.
    pub header_envs: Vec<String>,
    /// `--notify-kinds NAME=kind,kind`
    pub kinds: Vec<String>,
    /// `--notify-template NAME/KIND=TEXT`
    pub templates: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{flag} {value:?}: want {want}")]
    Shape {
        flag: &'static str,
        value: String,
        want: &'static str,
    },
    #[error("--notify {0}=...: a target's name is lower-case letters, digits and '-', at most 63")]
    Name(String),
    #[error("--notify {0}=...: the target is given twice")]
    Twice(String),
    #[error("--notify {target}=...: {why}")]
    Url { target: String, why: String },
    #[error("--notify {target}=...: {error}")]
    Shoutrrr {
        target: String,
        error: ShoutrrrError,
    },
    #[error(
        "--notify-format {target}=...: {target} is a shoutrrr {service}:// URL, whose service \
         decides the body: drop --notify-format {target}"
    )]
    FormatOfShoutrrr {
        target: String,
        service: &'static str,
    },
    #[error("{flag} {target}...: no target {target} (give --notify {target}=URL)")]
    NoTarget { flag: &'static str, target: String },
    #[error("--notify-format {target}={format}: not a format (slack, teams, json)")]
    Format { target: String, format: String },
    #[error("--notify-format {0}=...: given twice")]
    FormatTwice(String),
    #[error("{flag} {target}=...: {kind:?} is not a notification kind ({known})", known = kinds())]
    Kind {
        flag: &'static str,
        target: String,
        kind: String,
    },
    #[error("--notify-kinds {0}=...: given twice")]
    KindsTwice(String),
    #[error("--notify-template {target}/{kind}=...: {error}")]
    Template {
        target: String,
        kind: String,
        error: TemplateError,
    },
    #[error("--notify-template {target}/{kind}=...: given twice")]
    TemplateTwice { target: String, kind: String },
    #[error("{flag} {target}=...: {header:?} is not a header name")]
    HeaderName {
        flag: &'static str,
        target: String,
        header: String,
    },
    #[error("{flag} {target}={header}...: the value has a line break or a control character")]
    HeaderValue {
        flag: &'static str,
        target: String,
        header: String,
    },
    #[error("--notify-header-from-env {target}={header}={variable}: {variable} is not set")]
    NoVariable {
        target: String,
        header: String,
        variable: String,
    },
}

fn kinds() -> String {
    Kind::ALL.map(Kind::name).join(", ")
}

/// `NAME=rest` of `value`, or the flag's shape error.
fn split<'a>(
    flag: &'static str,
    value: &'a str,
    want: &'static str,
) -> Result<(&'a str, &'a str), ConfigError> {
    value
        .split_once('=')
        .filter(|(n, r)| !n.is_empty() && !r.is_empty())
        .ok_or_else(|| ConfigError::Shape {
            flag,
            // A header's value may be a secret: only the name is repeated.
            value: if flag == "--notify-header" {
                value.split('=').next().unwrap_or("").to_string() + "=..."
            } else {
                value.to_string()
            },
            want,
        })
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The targets the flags give, checked; `env` reads the variables of `--notify-header-from-env`.
pub fn targets(
    flags: &TargetFlags,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Vec<Target>, ConfigError> {
    let mut out = named(&flags.targets)?;
    formats(&mut out, &flags.formats)?;
    headers(&mut out, &flags.headers)?;
    header_envs(&mut out, &flags.header_envs, env)?;
    kinds_of(&mut out, &flags.kinds)?;
    templates(&mut out, &flags.templates)?;
    Ok(out)
}

/// `--notify`: the targets, with their defaults.
fn named(values: &[String]) -> Result<Vec<Target>, ConfigError> {
    let mut out: Vec<Target> = Vec::new();
    for value in values {
        let (name, url) = split("--notify", value, "NAME=URL")?;
        if !valid_name(name) {
            return Err(ConfigError::Name(name.into()));
        }
        if out.iter().any(|t| t.name == name) {
            return Err(ConfigError::Twice(name.into()));
        }
        let service = check_url(name, url)?;
        out.push(Target {
            name: name.into(),
            url: url.into(),
            format: Format::Json,
            service,
            headers: Vec::new(),
            kinds: Kind::ALL.into_iter().collect(),
            templates: BTreeMap::new(),
        });
    }
    Ok(out)
}

/// The target `name` that `flag` names.
fn find<'a>(
    out: &'a mut [Target],
    flag: &'static str,
    name: &str,
) -> Result<&'a mut Target, ConfigError> {
    out.iter_mut()
        .find(|t| t.name == name)
        .ok_or_else(|| ConfigError::NoTarget {
            flag,
            target: name.into(),
        })
}

fn formats(out: &mut [Target], values: &[String]) -> Result<(), ConfigError> {
    let mut seen = BTreeSet::new();
    for value in values {
        let (name, format) = split("--notify-format", value, "NAME=slack|teams|json")?;
        let target = find(out, "--notify-format", name)?;
        if !seen.insert(name) {
            return Err(ConfigError::FormatTwice(name.into()));
        }
        if let Some(s) = &target.service {
            return Err(ConfigError::FormatOfShoutrrr {
                target: name.into(),
                service: s.service.scheme(),
            });
        }
        target.format = Format::parse(format).ok_or_else(|| ConfigError::Format {
            target: name.into(),
            format: format.into(),
        })?;
    }
    Ok(())
}

fn headers(out: &mut [Target], values: &[String]) -> Result<(), ConfigError> {
    let flag = "--notify-header";
    for value in values {
        let (name, header) = split(flag, value, "NAME=Header: value")?;
        let target = find(out, flag, name)?;
        let (header, v) = header.split_once(':').ok_or_else(|| ConfigError::Shape {
            flag,
            value: format!("{name}=..."),
            want: "NAME=Header: value",
        })?;
        let (header, v) = (header.trim(), v.trim());
        check_header(flag, name, header, v)?;
        target.headers.push((header.into(), v.into()));
    }
    Ok(())
}

fn header_envs(
    out: &mut [Target],
    values: &[String],
    env: impl Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let flag = "--notify-header-from-env";
    for value in values {
        let (name, rest) = split(flag, value, "NAME=Header=VARIABLE")?;
        let target = find(out, flag, name)?;
        let (header, variable) = split(flag, rest, "NAME=Header=VARIABLE")?;
        let v = env(variable).ok_or_else(|| ConfigError::NoVariable {
            target: name.into(),
            header: header.into(),
            variable: variable.into(),
        })?;
        let v = v.trim();
        check_header(flag, name, header, v)?;
        target.headers.push((header.into(), v.into()));
    }
    Ok(())
}

fn kinds_of(out: &mut [Target], values: &[String]) -> Result<(), ConfigError> {
    let flag = "--notify-kinds";
    let mut seen = BTreeSet::new();
    for value in values {
        let (name, list) = split(flag, value, "NAME=kind,kind...")?;
        let target = find(out, flag, name)?;
        if !seen.insert(name) {
            return Err(ConfigError::KindsTwice(name.into()));
        }
        target.kinds = list
            .split(',')
            .map(str::trim)
            .map(|k| {
                Kind::parse(k).ok_or_else(|| ConfigError::Kind {
                    flag,
                    target: name.into(),
                    kind: k.into(),
                })
            })
            .collect::<Result<_, _>>()?;
    }
    Ok(())
}

fn templates(out: &mut [Target], values: &[String]) -> Result<(), ConfigError> {
    let flag = "--notify-template";
    for value in values {
        let (key, text) = value
            .split_once('=')
            .filter(|(k, _)| k.contains('/'))
            .ok_or_else(|| ConfigError::Shape {
                flag,
                value: value.clone(),
                want: "NAME/KIND=TEXT",
            })?;
        let (name, kind_name) = key.split_once('/').unwrap_or((key, ""));
        let target = find(out, flag, name)?;
        let kind = Kind::parse(kind_name).ok_or_else(|| ConfigError::Kind {
            flag,
            target: name.into(),
            kind: kind_name.into(),
        })?;
        let template = Template::parse(text).map_err(|error| ConfigError::Template {
            target: name.into(),
            kind: kind_name.into(),
            error,
        })?;
        if target.templates.insert(kind, template).is_some() {
            return Err(ConfigError::TemplateTwice {
                target: name.into(),
                kind: kind_name.into(),
            });
        }
    }
    Ok(())
}

/// An http(s) webhook (`None`), or a shoutrrr URL's requests.
fn check_url(target: &str, url: &str) -> Result<Option<Shoutrrr>, ConfigError> {
    let why = match reqwest::Url::parse(url) {
        // The parser's error names no part of the URL.
        Err(e) => format!("not a URL: {e}"),
        Ok(u) if shoutrrr::is_shoutrrr(u.scheme()) => {
            return shoutrrr::requests(&u)
                .map(Some)
                .map_err(|error| ConfigError::Shoutrrr {
                    target: target.into(),
                    error,
                });
        }
        Ok(u) if !matches!(u.scheme(), "http" | "https") => format!(
            "the scheme is {:?}: not http, https or a shoutrrr service slipway sends ({})",
            u.scheme(),
            shoutrrr::Service::ALL
                .map(shoutrrr::Service::scheme)
                .join(", ")
        ),
        Ok(u) if u.host_str().is_none_or(str::is_empty) => "the URL has no host".into(),
        Ok(_) => return Ok(None),
    };
    Err(ConfigError::Url {
        target: target.into(),
        why,
    })
}

fn check_header(
    flag: &'static str,
    target: &str,
    header: &str,
    value: &str,
) -> Result<(), ConfigError> {
    // RFC 9110's token characters.
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if header.is_empty() || !header.chars().all(token) {
        return Err(ConfigError::HeaderName {
            flag,
            target: target.into(),
            header: header.into(),
        });
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(ConfigError::HeaderValue {
            flag,
            target: target.into(),
            header: header.into(),
        });
    }
    Ok(())
}
