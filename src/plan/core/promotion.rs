//! Staged promotion (a slipway extension): a Plan that goes `after` other Plans starts no node of
//! a version until each of them has completed that same version and soaked; and a channel's new
//! version must be `minVersionAge` old before it rolls out (see [`super::status`]).

use std::time::Duration;

use jiff::Timestamp;

use super::settings::Stage;
use crate::common::rfc3339;
use crate::plan::api::Plan;

/// The reason of `Complete=False` while a Plan waits for the Plans it goes after.
pub const WAITING_FOR_PLAN: &str = "WaitingForPlan";

/// What the shell read of a Plan another one goes after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageRead {
    pub plan: String,
    /// `None`: no such Plan in the namespace.
    pub found: Option<StagePlan>,
}

/// The part of a Plan that gates the ones after it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StagePlan {
    /// Its `status.latestVersion`.
    pub version: Option<String>,
    /// When its `Complete` condition last became `True`; `None` while it is not.
    pub complete_since: Option<Timestamp>,
}

impl StagePlan {
    /// Reads a Plan's version and completion from its status.
    pub fn of(plan: &Plan) -> StagePlan {
        let status = plan.status.as_ref();
        let complete = status
            .into_iter()
            .flat_map(|s| s.conditions.iter())
            .find(|c| c.type_ == super::conditions::COMPLETE && c.status == "True");
        StagePlan {
            version: status.and_then(|s| s.latest_version.clone()),
            complete_since: complete
                .and_then(|c| c.last_transition_time.as_deref())
                .and_then(|t| t.parse().ok()),
        }
    }
}

/// Why a Plan may not start a node of `version` yet, and when it may (if the clock alone decides).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub message: String,
    pub until: Option<Timestamp>,
}

/// When the channel's newest version may roll out (`spec.minVersionAge`, `min_age`, after it was
/// first seen).
pub fn rolls_out_at(
    min_age: Option<Duration>,
    st: &crate::plan::api::PlanStatus,
) -> Option<Timestamp> {
    let seen: Timestamp = st.channel_version.as_ref()?.first_seen.parse().ok()?;
    seen.checked_add(min_age?).ok()
}

/// The first Plan of `spec.after` that keeps `plan` from starting a node of `version` at `now`;
/// `None` when every one has completed it and soaked.
pub fn gate(
    stages: &[Stage<'_>],
    read: &[StageRead],
    version: &str,
    now: Timestamp,
) -> Option<Waiting> {
    for after in stages {
        let stage = read.iter().find(|r| r.plan == after.plan);
        let Some(found) = stage.and_then(|s| s.found.as_ref()) else {
            return Some(Waiting {
                message: format!("waiting: plan {} (spec.after) does not exist", after.plan),
                until: None,
            });
        };
        let (Some(since), true) = (
            found.complete_since,
            found.version.as_deref() == Some(version),
        ) else {
            let message = match found.version.as_deref() {
                Some(v) if v == version => format!(
                    "waiting: plan {} (spec.after) is still rolling out version {version}",
                    after.plan
                ),
                at => format!(
                    "waiting: plan {} (spec.after) has not completed version {version} (it is at {})",
                    after.plan,
                    at.unwrap_or("no version")
                ),
            };
            return Some(Waiting {
                message,
                until: None,
            });
        };
        let until = since.checked_add(after.soak).unwrap_or(since);
        if now < until {
            return Some(Waiting {
                message: format!(
                    "waiting: plan {} completed version {version} at {}; soaking until {} (spec.after)",
                    after.plan,
                    rfc3339(since),
                    rfc3339(until)
                ),
                until: Some(until),
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a timestamp")
    }

    fn stages<'a>(after: &[(&'a str, u64)]) -> Vec<Stage<'a>> {
        (after.iter())
            .map(|&(plan, soak)| Stage {
                plan,
                soak: Duration::from_secs(soak),
            })
            .collect()
    }

    fn read(plan: &str, version: Option<&str>, since: Option<&str>) -> StageRead {
        StageRead {
            plan: plan.into(),
            found: Some(StagePlan {
                version: version.map(str::to_string),
                complete_since: since.map(at),
            }),
        }
    }

    #[test]
    fn a_plan_waits_until_every_earlier_stage_completed_its_version_and_soaked() {
        let p = stages(&[("test", 0), ("stage", 3600)]);
        let now = at("2026-11-25T12:00:00Z");
        let v = "v1.31.2-k3s1";
        let stages = [
            read("test", Some(v), Some("2026-11-25T09:00:00Z")),
            read("stage", Some(v), Some("2026-11-25T11:30:00Z")),
        ];
        let waiting = gate(&p, &stages, v, now).expect("stage soaks");
        assert_eq!(
            waiting.message,
            "waiting: plan stage completed version v1.31.2-k3s1 at 2026-11-25T11:30:00Z; soaking until 2026-11-25T12:30:00Z (spec.after)"
        );
        assert_eq!(waiting.until, Some(at("2026-11-25T12:30:00Z")));
        assert_eq!(gate(&p, &stages, v, at("2026-11-25T12:30:00Z")), None);
        // The same Plan at another version, or not complete: no end known.
        let older = [
            stages[0].clone(),
            read("stage", Some("v1.30.0-k3s1"), Some("2026-11-01T00:00:00Z")),
        ];
        let w = gate(&p, &older, v, now).expect("stage is behind");
        assert_eq!(
            w.message,
            "waiting: plan stage (spec.after) has not completed version v1.31.2-k3s1 (it is at v1.30.0-k3s1)"
        );
        assert_eq!(w.until, None);
        let running = [stages[0].clone(), read("stage", Some(v), None)];
        assert!(gate(&p, &running, v, now).is_some());
        let missing = [
            stages[0].clone(),
            StageRead {
                plan: "stage".into(),
                found: None,
            },
        ];
        assert_eq!(
            gate(&p, &missing, v, now).map(|w| w.message),
            Some("waiting: plan stage (spec.after) does not exist".into())
        );
    }
}
