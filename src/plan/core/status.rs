//! The status handler: the Plan's conditions, its validation, the version it resolves to and the
//! hash of that version. Everything the node decisions need is settled here first.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;

use super::config::JobConfig;
use super::settings::{PlanSettings, Source, version_label};
use super::{ChannelAnswer, ERR_UNRESOLVABLE, Rollout};
use crate::common::decision::EventType;
use crate::plan::api::{Plan, PlanStatus};
use crate::plan::core::conditions::{
    self as cond, COMPLETE, FALSE, LATEST_RESOLVED, TRUE, VALIDATED,
};
use crate::plan::core::hash;
use crate::plan::core::image::munge_version;

/// What the status handler reads: no node, so that the hash is known before the nodes are read
/// ([`super::settled::target`]).
pub(super) struct Resolving<'a> {
    pub(super) plan: &'a Plan,
    pub(super) secrets: &'a BTreeMap<String, Secret>,
    pub(super) channel: Option<&'a ChannelAnswer>,
    pub(super) config: &'a JobConfig,
}

/// Conditions exist, the Plan is valid, the version is resolved, the hash is known. Returns the
/// Plan's settings when it is valid; the rollout goes on when `LatestResolved` is `True` too
/// ([`rolls`]).
pub(super) fn handle<'a>(
    input: &Resolving<'a>,
    st: &mut PlanStatus,
    out: &mut Rollout,
    now: &str,
) -> Option<PlanSettings<'a>> {
    let at = cond::Stamp::new(now, input.plan.metadata.generation);
    for t in [COMPLETE, VALIDATED, LATEST_RESOLVED] {
        cond::ensure(st, t, at);
    }
    match PlanSettings::read(input.plan, input.secrets, input.config) {
        Err(message) => {
            if !cond::is(st, VALIDATED, FALSE)
                || cond::get(st, VALIDATED).and_then(|c| c.message.as_deref())
                    != Some(message.as_str())
            {
                out.event(
                    EventType::Warning,
                    "ValidateFailed",
                    format!("Failed to validate plan: {message}"),
                );
            }
            cond::set(st, at, VALIDATED, FALSE, "Error", &message);
            None
        }
        Ok(settings) => {
            if !cond::is(st, VALIDATED, TRUE) {
                out.event(EventType::Normal, "Validated", "Plan is valid".into());
            }
            cond::set(st, at, VALIDATED, TRUE, "PlanIsValid", "");
            resolve(input, &settings, st, out, now);
            Some(settings)
        }
    }
}

/// Whether a Plan whose status handler gave `settings` rolls out: valid and resolved.
pub(super) fn rolls(settings: Option<&PlanSettings<'_>>, st: &PlanStatus) -> bool {
    settings.is_some() && cond::is(st, LATEST_RESOLVED, TRUE)
}

/// Resolves the version from `spec.version` or the channel, and computes the hash.
fn resolve(
    input: &Resolving<'_>,
    settings: &PlanSettings<'_>,
    st: &mut PlanStatus,
    out: &mut Rollout,
    now: &str,
) {
    let plan = input.plan;
    let generation = plan.metadata.generation;
    let at = cond::Stamp::new(now, generation);
    let (latest, reason) = match settings.source {
        Source::Version(v) => (munge_version(v), "Version"),
        Source::Channel(url) => match input.channel {
            Some(ChannelAnswer::Version(v)) => match version_label(v) {
                Ok(()) => match old_enough(input, settings.min_version_age, st, out, v, now) {
                    true => (munge_version(v), "Channel"),
                    false => {
                        digest(input, st);
                        return;
                    }
                },
                Err(e) => {
                    channel_failed(
                        st,
                        out,
                        url,
                        &format!("the channel's version {e}"),
                        now,
                        generation,
                    );
                    digest(input, st);
                    return;
                }
            },
            Some(ChannelAnswer::Failed(e)) => {
                channel_failed(st, out, url, e, now, generation);
                digest(input, st);
                return;
            }
            // Not asked yet: nothing changes until the channel answers.
            None => return,
        },
        Source::Unresolvable => {
            if !cond::is(st, LATEST_RESOLVED, FALSE) {
                out.event(
                    EventType::Warning,
                    "ResolveFailed",
                    format!("Failed to resolve latest version: {ERR_UNRESOLVABLE}"),
                );
            }
            cond::set(
                st,
                at,
                LATEST_RESOLVED,
                FALSE,
                cond::UNRESOLVABLE,
                ERR_UNRESOLVABLE,
            );
            return;
        }
    };
    let resolved_before = cond::is(st, LATEST_RESOLVED, TRUE);
    if !resolved_before || st.latest_version.as_deref() != Some(latest.as_str()) {
        let source = if reason == "Version" {
            "Spec.Version"
        } else {
            "Spec.Channel"
        };
        out.event(
            EventType::Normal,
            "Resolved",
            format!("Resolved latest version from {source}: {latest}"),
        );
        cond::set(st, at, COMPLETE, FALSE, "Resolved", "");
    }
    st.latest_version = Some(latest);
    cond::set(st, at, LATEST_RESOLVED, TRUE, reason, "");
    digest(input, st);
}

/// The reason of `LatestResolved` (and of `Complete=False` when no version is in force yet) while
/// the channel's version is younger than `spec.minVersionAge`.
pub const VERSION_TOO_NEW: &str = "VersionTooNew";

/// With `spec.minVersionAge`: whether the channel's `version` has been seen long enough to roll
/// out. Until it has, the version in force stays (and `LatestResolved` says when the new one
/// goes); with none in force yet, `LatestResolved` is `False`. Records when each new version was
/// first seen.
fn old_enough(
    input: &Resolving<'_>,
    min_age: Option<std::time::Duration>,
    st: &mut PlanStatus,
    out: &mut Rollout,
    version: &str,
    now: &str,
) -> bool {
    let Some(age) = min_age else {
        st.channel_version = None;
        return true;
    };
    let seen = match &st.channel_version {
        Some(seen) if seen.version == version => seen.first_seen.clone(),
        _ => {
            st.channel_version = Some(crate::plan::api::SeenVersion {
                version: version.to_string(),
                first_seen: now.to_string(),
            });
            now.to_string()
        }
    };
    let (Ok(seen_at), Ok(now_at)) = (
        seen.parse::<jiff::Timestamp>(),
        now.parse::<jiff::Timestamp>(),
    ) else {
        return true;
    };
    let from = seen_at.checked_add(age).unwrap_or(seen_at);
    if now_at >= from {
        return true;
    }
    let at = cond::Stamp::new(now, input.plan.metadata.generation);
    let waits = format!(
        "the channel's version {version}, first seen at {seen}, rolls out from {} (spec.minVersionAge)",
        super::rfc3339(from)
    );
    out.requeue(crate::common::until(now_at, from));
    let shown = cond::get(st, LATEST_RESOLVED).and_then(|c| c.message.clone());
    match st.latest_version.clone() {
        Some(kept) if cond::is(st, LATEST_RESOLVED, TRUE) => {
            let message = format!("keeping {kept}: {waits}");
            if shown.as_deref() != Some(message.as_str()) {
                out.event(EventType::Normal, VERSION_TOO_NEW, message.clone());
            }
            cond::set(st, at, LATEST_RESOLVED, TRUE, "Channel", &message);
        }
        _ => {
            if shown.as_deref() != Some(waits.as_str()) {
                out.event(EventType::Normal, VERSION_TOO_NEW, waits.clone());
            }
            cond::set(st, at, LATEST_RESOLVED, FALSE, VERSION_TOO_NEW, &waits);
        }
    }
    false
}

/// The channel could not be asked: keep rolling out the last version it gave, and say so.
fn channel_failed(
    st: &mut PlanStatus,
    out: &mut Rollout,
    url: &str,
    error: &str,
    now: &str,
    generation: Option<i64>,
) {
    let at = cond::Stamp::new(now, generation);
    let message = format!("cannot resolve the channel {url}: {error}");
    let shown = cond::get(st, LATEST_RESOLVED).and_then(|c| c.message.clone());
    if shown.as_deref() != Some(message.as_str()) {
        out.event(
            EventType::Warning,
            "ResolveFailed",
            format!("Failed to resolve latest version from Spec.Channel: {error}"),
        );
    }
    match st.latest_version.clone() {
        Some(kept) if cond::is(st, LATEST_RESOLVED, TRUE) => {
            let message = format!("{message}; keeping {kept}");
            cond::set(st, at, LATEST_RESOLVED, TRUE, "Channel", &message);
        }
        _ => cond::set(st, at, LATEST_RESOLVED, FALSE, "ResolveFailed", &message),
    }
}

fn digest(input: &Resolving<'_>, st: &mut PlanStatus) {
    if let Some(latest) = st.latest_version.clone()
        && let Ok(h) = hash::plan_latest_hash(input.plan, &latest, input.secrets)
    {
        st.latest_hash = Some(h);
    }
}
