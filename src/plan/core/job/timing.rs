//! How long a Job may run and how long it stays once finished: SUC's rules, with the TTL raised
//! so that a finished Job outlives what the controller still waits for (`postCompleteDelay`, a
//! reboot and its health gate).

use std::time::Duration;

use crate::plan::core::config::JobConfig;
use crate::plan::core::settings::PlanSettings;

/// `ttlSecondsAfterFinished`: SUC's rule, raised so that a rebooting node's completed Job
/// outlives the reboot and the health gate.
pub(super) fn job_ttl(settings: &PlanSettings<'_>, config: &JobConfig) -> i32 {
    let ttl = ttl_seconds_after_finished(
        config.ttl_seconds_after_finished,
        settings.post_complete_delay,
    );
    let Some(policy) = &settings.reboot else {
        return ttl;
    };
    let gate = policy
        .health_gate
        .as_ref()
        .map_or(0, |g| g.timeout.as_secs());
    let needed = policy.timeout.as_secs() + gate + 60;
    ttl.max(i32::try_from(needed).unwrap_or(i32::MAX))
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
fn ttl_seconds_after_finished(config_ttl: i32, post_complete_delay: Duration) -> i32 {
    let wanted_nanos = post_complete_delay.as_nanos() + 60_000_000_000;
    let config_nanos = i128::from(config_ttl) * 1_000_000_000;
    if u128::try_from(config_nanos).is_ok_and(|c| c >= wanted_nanos) {
        return config_ttl;
    }
    // Go converts the float seconds to int32; clamp where Go's result is undefined.
    i32::try_from(wanted_nanos / 1_000_000_000).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::api::labels;
    use crate::plan::core::job::fixtures::*;
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
        assert_eq!(ttl(Some("100000h")), Some(360_000_060));
        assert_eq!(ttl(Some("1000000h")), Some(i32::MAX));
        // A configured TTL below zero is raised too, as in SUC.
        assert_eq!(ttl_seconds_after_finished(-5, Duration::ZERO), 60);
    }

    #[test]
    fn a_reboot_raises_the_ttl_past_its_timeout_and_health_gate() {
        let p = plan(
            "upgrade:\n  image: u\nreboot:\n  timeout: 30m\n  healthGate:\n    podSelector: {}\n    timeout: 5m\n",
        );
        let ttl = render(&p).spec.and_then(|s| s.ttl_seconds_after_finished);
        assert_eq!(ttl, Some(30 * 60 + 5 * 60 + 60));
    }
}
