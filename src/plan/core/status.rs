//! The status handler: the Plan's conditions, its validation, the version it resolves to and the
//! hash of that version. Everything the node decisions need is settled here first.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;

use super::{ChannelAnswer, ERR_UNRESOLVABLE, Rollout};
use crate::common::decision::EventType;
use crate::common::duration::GoDuration;
use crate::common::selector as selection;
use crate::common::window::TimeWindow;
use crate::plan::api::{Plan, PlanStatus, labels};
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
}

/// Conditions exist, the Plan is valid, the version is resolved, the hash is known. Returns whether
/// the rollout may go on (`Validated` and `LatestResolved` are both `True`).
pub(super) fn handle(
    input: &Resolving<'_>,
    st: &mut PlanStatus,
    out: &mut Rollout,
    now: &str,
) -> bool {
    let generation = input.plan.metadata.generation;
    for t in [COMPLETE, VALIDATED, LATEST_RESOLVED] {
        cond::ensure(st, t, now, generation);
    }
    match validate(input.plan, input.secrets) {
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
            cond::set(st, VALIDATED, FALSE, "Error", &message, now, generation);
        }
        Ok(()) => {
            if !cond::is(st, VALIDATED, TRUE) {
                out.event(EventType::Normal, "Validated", "Plan is valid".into());
            }
            cond::set(st, VALIDATED, TRUE, "PlanIsValid", "", now, generation);
            resolve(input, st, out, now);
        }
    }
    cond::is(st, VALIDATED, TRUE) && cond::is(st, LATEST_RESOLVED, TRUE)
}

/// etcd's default `--max-request-bytes`, which bounds every object the API server stores.
const MAX_OBJECT_BYTES: usize = 1_572_864;
/// What a Job adds to what it copies from the Plan: labels, environment, volumes, affinity.
const JOB_OVERHEAD_BYTES: usize = 16 * 1024;

/// SUC's `Validate()`, plus the checks slipway makes before touching nodes.
pub fn validate(plan: &Plan, secrets: &BTreeMap<String, Secret>) -> Result<(), String> {
    let spec = &plan.spec;
    // The name becomes a node label key and a Job label value: a longer one would fail at the
    // first node, after its status says it started.
    let name = plan.metadata.name.as_deref().unwrap_or_default();
    let key = labels::plan_node_label(name);
    let errors = selection::label_key_errors(&key);
    if !errors.is_empty() {
        return Err(format!(
            "metadata.name {name:?} cannot name the node label {key}: {}",
            errors.join("; ")
        ));
    }
    selection::Selector::from_label_selector(spec.node_selector.as_ref())
        .map_err(|e| format!("spec.nodeSelector: {e}"))?;
    if let Some(version) = spec.version.as_deref().filter(|v| !v.is_empty()) {
        version_label(version).map_err(|e| format!("spec.version {e}"))?;
    }
    if let Some(drain) = &spec.drain {
        if drain.delete_emptydir_data.is_some() && drain.delete_local_data.is_some() {
            return Err(
                "spec.drain cannot specify both deleteEmptydirData and deleteLocalData".into(),
            );
        }
        if let Some(sel) = &drain.pod_selector {
            selection::Selector::from_label_selector(Some(sel))
                .map_err(|e| format!("spec.drain.podSelector: {e}"))?;
        }
    }
    super::failure::FailurePolicy::of(spec.failure_policy.as_ref())?;
    crate::common::check::validate(
        spec.health_checks.as_deref().unwrap_or_default(),
        "spec.healthChecks",
    )?;
    super::hooks::read(plan)?;
    if let Some(disruption) = &spec.disruption {
        crate::node::disruption::validate_for_plan(disruption, "spec.disruption")?;
    }
    super::promotion::validate(plan)?;
    if let Some(window) = &spec.window {
        TimeWindow::new(window).map_err(|e| e.to_string())?;
    }
    if let Some(delay) = &spec.post_complete_delay {
        match delay.parse::<GoDuration>() {
            Ok(d) if d.is_negative() => return Err("spec.postCompleteDelay is negative".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("spec.postCompleteDelay is invalid: {e}")),
        }
    }
    // A Job carries the containers and tolerations verbatim; past this it would not be stored.
    let size = serde_json::to_vec(spec).map_or(0, |v| v.len());
    if size + JOB_OVERHEAD_BYTES > MAX_OBJECT_BYTES {
        return Err(format!(
            "spec is {size} bytes: its Jobs would be over the {MAX_OBJECT_BYTES} bytes the API server stores in one object"
        ));
    }
    let missing: Vec<String> = spec
        .secrets
        .iter()
        .flatten()
        .filter(|s| !s.ignore_updates.unwrap_or(false) && !secrets.contains_key(&s.name))
        .map(|s| format!("secret {:?} not found", s.name))
        .collect();
    if !missing.is_empty() {
        return Err(missing.join(", "));
    }
    Ok(())
}

/// Resolves the version from `spec.version` or the channel, and computes the hash.
pub(super) fn resolve(input: &Resolving<'_>, st: &mut PlanStatus, out: &mut Rollout, now: &str) {
    let plan = input.plan;
    let generation = plan.metadata.generation;
    let spec_version = plan.spec.version.as_deref().filter(|v| !v.is_empty());
    let channel = plan.spec.channel.as_deref().filter(|c| !c.is_empty());
    let (latest, reason) = match (spec_version, channel) {
        (Some(v), _) => (munge_version(v), "Version"),
        (None, Some(url)) => match input.channel {
            Some(ChannelAnswer::Version(v)) => match version_label(v) {
                Ok(()) => match old_enough(input, st, out, v, now) {
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
        (None, None) => {
            if !cond::is(st, LATEST_RESOLVED, FALSE) {
                out.event(
                    EventType::Warning,
                    "ResolveFailed",
                    format!("Failed to resolve latest version: {ERR_UNRESOLVABLE}"),
                );
            }
            cond::set(
                st,
                LATEST_RESOLVED,
                FALSE,
                cond::UNRESOLVABLE,
                ERR_UNRESOLVABLE,
                now,
                generation,
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
        cond::set(st, COMPLETE, FALSE, "Resolved", "", now, generation);
    }
    st.latest_version = Some(latest);
    cond::set(st, LATEST_RESOLVED, TRUE, reason, "", now, generation);
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
    st: &mut PlanStatus,
    out: &mut Rollout,
    version: &str,
    now: &str,
) -> bool {
    let Some(age) = super::promotion::min_version_age(input.plan) else {
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
    let generation = input.plan.metadata.generation;
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
            cond::set(
                st,
                LATEST_RESOLVED,
                TRUE,
                "Channel",
                &message,
                now,
                generation,
            );
        }
        _ => {
            if shown.as_deref() != Some(waits.as_str()) {
                out.event(EventType::Normal, VERSION_TOO_NEW, waits.clone());
            }
            cond::set(
                st,
                LATEST_RESOLVED,
                FALSE,
                VERSION_TOO_NEW,
                &waits,
                now,
                generation,
            );
        }
    }
    false
}

/// A version (before `+` becomes `-`) is the Jobs' `upgrade.cattle.io/version` label: one that
/// cannot be would fail every Job.
fn version_label(version: &str) -> Result<(), String> {
    let errors = selection::label_value_errors(&munge_version(version));
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{version:?} cannot be the Jobs' label {}: {}",
            labels::VERSION,
            errors.join("; ")
        ))
    }
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
            cond::set(
                st,
                LATEST_RESOLVED,
                TRUE,
                "Channel",
                &message,
                now,
                generation,
            );
        }
        _ => cond::set(
            st,
            LATEST_RESOLVED,
            FALSE,
            "ResolveFailed",
            &message,
            now,
            generation,
        ),
    }
}

fn digest(input: &Resolving<'_>, st: &mut PlanStatus) {
    if let Some(latest) = st.latest_version.clone()
        && let Ok(h) = hash::plan_latest_hash(input.plan, &latest, input.secrets)
    {
        st.latest_hash = Some(h);
    }
}
