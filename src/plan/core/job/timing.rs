//! How long a Job may run and how long it stays once finished: SUC's rules, with the TTL raised
//! so that a finished Job outlives what the controller still waits for (`postCompleteDelay`, a
//! reboot and its health gate).

use crate::common::duration::GoDuration;
use crate::plan::api::Plan;
use crate::plan::core::config::JobConfig;
use crate::plan::core::reboot;

use super::RenderError;

/// `ttlSecondsAfterFinished`: SUC's rule, raised so that a rebooting node's completed Job
/// outlives the reboot and the health gate.
pub(super) fn job_ttl(plan: &Plan, config: &JobConfig) -> Result<i32, RenderError> {
    let ttl = ttl_seconds_after_finished(
        config.ttl_seconds_after_finished,
        plan.spec.post_complete_delay.as_deref(),
    )?;
    let Some(policy) = reboot::settings(plan, config) else {
        return Ok(ttl);
    };
    let gate = policy
        .health_gate
        .as_ref()
        .map_or(0, |g| g.timeout.as_secs());
    let needed = policy.timeout.as_secs() + gate + 60;
    Ok(ttl.max(i32::try_from(needed).unwrap_or(i32::MAX)))
}

/// `jobActiveDeadlineSecs`: >0 as is, 0 for no deadline, negative or unset for the controller
/// default; then at most the configured maximum, which also replaces "no deadline".
pub fn active_deadline_seconds(plan_value: Option<i64>, config: &JobConfig) -> Option<i64> {
    let deadline = match plan_value {
        None => Some(config.active_deadline_seconds),
        Some(v) if v < 0 => Some(config.active_deadline_seconds),
        Some(0) => None,
        Some(v) => Some(v),
    };
    let max = config.active_deadline_seconds_max;
    match deadline {
        _ if max <= 0 => deadline,
        None => Some(max),
        Some(d) => Some(d.min(max)),
    }
}

/// The Job TTL: the configured one, raised to `postCompleteDelay + 1m` (whole seconds, truncated)
/// so that the finished Job outlives the delay the controller waits for.
fn ttl_seconds_after_finished(
    config_ttl: i32,
    post_complete_delay: Option<&str>,
) -> Result<i32, RenderError> {
    let Some(delay) = post_complete_delay else {
        return Ok(config_ttl);
    };
    let delay: GoDuration = delay
        .parse()
        .map_err(|_| RenderError::InvalidPostCompleteDelay(delay.to_string()))?;
    let wanted_nanos = i128::from(delay.nanos) + 60_000_000_000;
    if i128::from(config_ttl) * 1_000_000_000 < wanted_nanos {
        // Go converts the float seconds to int32; clamp where Go's result is undefined.
        let secs = wanted_nanos / 1_000_000_000;
        Ok(i32::try_from(secs).unwrap_or(i32::MAX))
    } else {
        Ok(config_ttl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::api::labels;
    use crate::plan::core::job::fixtures::*;
    use crate::plan::core::job::render_job;
    use k8s_openapi::api::batch::v1::Job;

    fn deadline(job: &Job) -> Option<i64> {
        job.spec.as_ref().and_then(|s| s.active_deadline_seconds)
    }

    // --- SUC's job_suite_test.go ---

    #[test]
    fn deadline_positive_uses_the_plan_value() {
        assert_eq!(deadline(&render(&with_deadline(Some(12345)))), Some(12345));
    }

    #[test]
    fn deadline_unset_uses_the_controller_default() {
        assert_eq!(deadline(&render(&with_deadline(None))), Some(600));
        let config = JobConfig {
            active_deadline_seconds: 900,
            ..Default::default()
        };
        assert_eq!(
            deadline(&render_with(&with_deadline(None), &config)),
            Some(900)
        );
    }

    #[test]
    fn deadline_zero_means_none() {
        assert_eq!(deadline(&render(&with_deadline(Some(0)))), None);
    }

    #[test]
    fn deadline_negative_uses_the_controller_default() {
        assert_eq!(deadline(&render(&with_deadline(Some(-1)))), Some(600));
    }

    #[test]
    fn deadline_is_clamped_to_the_max() {
        let config = JobConfig {
            active_deadline_seconds_max: 300,
            ..Default::default()
        };
        assert_eq!(
            deadline(&render_with(&with_deadline(Some(600)), &config)),
            Some(300)
        );
        assert_eq!(
            deadline(&render_with(&with_deadline(Some(200)), &config)),
            Some(200)
        );
        // The default 600 is clamped too, and "none" becomes the max.
        assert_eq!(
            deadline(&render_with(&with_deadline(None), &config)),
            Some(300)
        );
        assert_eq!(
            deadline(&render_with(&with_deadline(Some(-5)), &config)),
            Some(300)
        );
        assert_eq!(
            deadline(&render_with(&with_deadline(Some(0)), &config)),
            Some(300)
        );
    }

    // --- Job spec and metadata ---

    #[test]
    fn ttl_is_raised_by_post_complete_delay() {
        let ttl = |delay: Option<&str>| {
            let mut p = basic();
            p.spec.post_complete_delay = delay.map(str::to_string);
            let job = render(&p);
            let spec_ttl = job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished);
            let annotation = job.metadata.annotations.as_ref().expect("annotations")
                [labels::TTL_SECONDS_AFTER_FINISHED]
                .clone();
            assert_eq!(spec_ttl.map(|t| t.to_string()), Some(annotation));
            spec_ttl
        };
        assert_eq!(ttl(None), Some(900));
        assert_eq!(ttl(Some("5m")), Some(900));
        assert_eq!(ttl(Some("14m")), Some(900));
        assert_eq!(ttl(Some("14m0.5s")), Some(900));
        assert_eq!(ttl(Some("14m1.5s")), Some(901));
        assert_eq!(ttl(Some("20m")), Some(1260));
        assert_eq!(ttl(Some("-30s")), Some(900));
        assert_eq!(ttl(Some("100000h")), Some(360_000_060));
        assert_eq!(ttl(Some("1000000h")), Some(i32::MAX));

        let mut p = basic();
        p.spec.post_complete_delay = Some("soon".into());
        assert_eq!(
            render_job(&p, &node("n"), "c", &JobConfig::default()),
            Err(RenderError::InvalidPostCompleteDelay("soon".into()))
        );
    }
}
