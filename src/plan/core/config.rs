//! Controller settings that shape Jobs and polling, read from SUC's environment variables with
//! SUC's code defaults and parse rules (a value that does not parse is reported and the default kept).

use std::time::Duration;

use crate::common::duration::GoDuration;

/// Settings applied to every Job (SUC's `SYSTEM_UPGRADE_JOB_*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobConfig {
    /// `SYSTEM_UPGRADE_JOB_ACTIVE_DEADLINE_SECONDS`
    pub active_deadline_seconds: i64,
    /// `SYSTEM_UPGRADE_JOB_ACTIVE_DEADLINE_SECONDS_MAX`; 0 means no maximum.
    pub active_deadline_seconds_max: i64,
    /// `SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT`
    pub backoff_limit: i32,
    /// `SYSTEM_UPGRADE_JOB_IMAGE_PULL_POLICY`
    pub image_pull_policy: String,
    /// `SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE`
    pub kubectl_image: String,
    /// `SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE_WINDOWS`; required only for Windows nodes.
    pub kubectl_image_windows: String,
    /// `SYSTEM_UPGRADE_JOB_PRIVILEGED`
    pub privileged: bool,
    /// `SYSTEM_UPGRADE_JOB_TTL_SECONDS_AFTER_FINISH`
    pub ttl_seconds_after_finished: i32,
    /// `SYSTEM_UPGRADE_JOB_POD_REPLACEMENT_POLICY`
    pub pod_replacement_policy: String,
    /// `SLIPWAY_REBOOT_IMAGE`: image of reboot pods and sentinel steps, for Plans with `spec.reboot`.
    pub reboot_image: String,
}

impl Default for JobConfig {
    fn default() -> Self {
        JobConfig {
            active_deadline_seconds: 600,
            active_deadline_seconds_max: 0,
            backoff_limit: 2,
            image_pull_policy: "IfNotPresent".into(),
            kubectl_image: "rancher/kubectl:v1.30.3".into(),
            kubectl_image_windows: String::new(),
            privileged: true,
            ttl_seconds_after_finished: 900,
            pod_replacement_policy: "TerminatingOrFailed".into(),
            reboot_image: "busybox:1.36".into(),
        }
    }
}

/// SUC's default channel polling interval.
pub const DEFAULT_POLLING_INTERVAL: Duration = Duration::from_secs(15 * 60);

/// Settings read from the environment, and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvSettings {
    pub job: JobConfig,
    /// `SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL`: used only when longer than one minute, as in SUC.
    pub polling_interval: Duration,
    /// One line per variable that was set but ignored.
    pub warnings: Vec<String>,
}

impl EnvSettings {
    /// Reads the settings through `lookup` (for example `|k| std::env::var(k).ok()`): one step
    /// per group of SUC variables, each with SUC's parse rule, warnings in SUC's order.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut warnings = Vec::new();
        let mut job = JobConfig::default();
        read_job_numbers(&lookup, &mut job, &mut warnings);
        read_job_texts(&lookup, &mut job);
        read_job_privileged(&lookup, &mut job, &mut warnings);
        let polling_interval = read_polling_interval(&lookup, &mut warnings);
        EnvSettings {
            job,
            polling_interval,
            warnings,
        }
    }
}

/// The deadlines, the backoff limit and the TTL: integers, the last two within `i32`.
fn read_job_numbers(
    lookup: &impl Fn(&str) -> Option<String>,
    job: &mut JobConfig,
    warnings: &mut Vec<String>,
) {
    let mut number = |key: &str, into: &mut i64| {
        if let Some(v) = lookup(key) {
            match v.trim().parse::<i64>() {
                Ok(n) => *into = n,
                Err(_) => warnings.push(format!("{key}={v:?} is not an integer; using {into}")),
            }
        }
    };
    number(
        "SYSTEM_UPGRADE_JOB_ACTIVE_DEADLINE_SECONDS",
        &mut job.active_deadline_seconds,
    );
    number(
        "SYSTEM_UPGRADE_JOB_ACTIVE_DEADLINE_SECONDS_MAX",
        &mut job.active_deadline_seconds_max,
    );
    let mut backoff = i64::from(job.backoff_limit);
    number("SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT", &mut backoff);
    let mut ttl = i64::from(job.ttl_seconds_after_finished);
    number("SYSTEM_UPGRADE_JOB_TTL_SECONDS_AFTER_FINISH", &mut ttl);
    match i32::try_from(backoff) {
        Ok(b) => job.backoff_limit = b,
        Err(_) => warnings.push(format!(
            "SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT={backoff} is out of range; using {}",
            job.backoff_limit
        )),
    }
    match i32::try_from(ttl) {
        Ok(t) => job.ttl_seconds_after_finished = t,
        Err(_) => warnings.push(format!(
            "SYSTEM_UPGRADE_JOB_TTL_SECONDS_AFTER_FINISH={ttl} is out of range; using {}",
            job.ttl_seconds_after_finished
        )),
    }
}

/// The images and policies: any non-empty value is taken as is.
fn read_job_texts(lookup: &impl Fn(&str) -> Option<String>, job: &mut JobConfig) {
    let text = |key: &str, into: &mut String| {
        if let Some(v) = lookup(key).filter(|v| !v.is_empty()) {
            *into = v;
        }
    };
    text(
        "SYSTEM_UPGRADE_JOB_IMAGE_PULL_POLICY",
        &mut job.image_pull_policy,
    );
    text("SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE", &mut job.kubectl_image);
    text(
        "SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE_WINDOWS",
        &mut job.kubectl_image_windows,
    );
    text(
        "SYSTEM_UPGRADE_JOB_POD_REPLACEMENT_POLICY",
        &mut job.pod_replacement_policy,
    );
    text("SLIPWAY_REBOOT_IMAGE", &mut job.reboot_image);
}

/// `SYSTEM_UPGRADE_JOB_PRIVILEGED`, a Go boolean.
fn read_job_privileged(
    lookup: &impl Fn(&str) -> Option<String>,
    job: &mut JobConfig,
    warnings: &mut Vec<String>,
) {
    if let Some(v) = lookup("SYSTEM_UPGRADE_JOB_PRIVILEGED") {
        match parse_go_bool(&v) {
            Some(b) => job.privileged = b,
            None => warnings.push(format!(
                "SYSTEM_UPGRADE_JOB_PRIVILEGED={v:?} is not a boolean; using {}",
                job.privileged
            )),
        }
    }
}

/// `SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL`, a Go duration taken only when longer than one minute.
fn read_polling_interval(
    lookup: &impl Fn(&str) -> Option<String>,
    warnings: &mut Vec<String>,
) -> Duration {
    let mut polling_interval = DEFAULT_POLLING_INTERVAL;
    if let Some(v) = lookup("SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL") {
        match v.parse::<GoDuration>().ok().and_then(GoDuration::to_std) {
            Some(d) if d > Duration::from_secs(60) => polling_interval = d,
            Some(_) => warnings.push(format!(
                "SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL={v:?} is not longer than 1m; using 15m"
            )),
            None => warnings.push(format!(
                "SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL={v:?} is not a duration; using 15m"
            )),
        }
    }
    polling_interval
}

/// Go's `strconv.ParseBool`.
pub fn parse_go_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> EnvSettings {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        EnvSettings::from_lookup(|k| map.get(k).cloned())
    }

    #[test]
    fn defaults_are_suc_code_defaults() {
        let s = env(&[]);
        assert_eq!(s.job, JobConfig::default());
        assert_eq!(s.job.active_deadline_seconds, 600);
        assert_eq!(s.job.backoff_limit, 2);
        assert_eq!(s.job.ttl_seconds_after_finished, 900);
        assert_eq!(s.job.kubectl_image, "rancher/kubectl:v1.30.3");
        assert_eq!(s.polling_interval, Duration::from_secs(900));
        assert!(s.warnings.is_empty());
    }

    #[test]
    fn manifest_values_are_read() {
        let s = env(&[
            ("SYSTEM_UPGRADE_JOB_ACTIVE_DEADLINE_SECONDS", "900"),
            ("SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT", "99"),
            ("SYSTEM_UPGRADE_JOB_IMAGE_PULL_POLICY", "Always"),
            ("SYSTEM_UPGRADE_JOB_PRIVILEGED", "false"),
            ("SYSTEM_UPGRADE_JOB_POD_REPLACEMENT_POLICY", "Failed"),
            ("SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL", "1h"),
        ]);
        assert_eq!(s.job.active_deadline_seconds, 900);
        assert_eq!(s.job.backoff_limit, 99);
        assert_eq!(s.job.image_pull_policy, "Always");
        assert!(!s.job.privileged);
        assert_eq!(s.job.pod_replacement_policy, "Failed");
        assert_eq!(s.polling_interval, Duration::from_secs(3600));
        assert!(s.warnings.is_empty());
    }

    #[test]
    fn bad_values_keep_defaults_and_warn() {
        let s = env(&[
            ("SYSTEM_UPGRADE_JOB_BACKOFF_LIMIT", "lots"),
            ("SYSTEM_UPGRADE_JOB_TTL_SECONDS_AFTER_FINISH", "99999999999"),
            ("SYSTEM_UPGRADE_JOB_PRIVILEGED", "yes"),
            ("SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL", "30s"),
            ("SYSTEM_UPGRADE_JOB_KUBECTL_IMAGE", ""),
        ]);
        assert_eq!(s.job, JobConfig::default());
        assert_eq!(s.polling_interval, DEFAULT_POLLING_INTERVAL);
        assert_eq!(s.warnings.len(), 4, "{:?}", s.warnings);
    }

    #[test]
    fn polling_interval_of_exactly_one_minute_is_ignored() {
        assert_eq!(
            env(&[("SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL", "1m")]).polling_interval,
            DEFAULT_POLLING_INTERVAL
        );
        assert_eq!(
            env(&[("SYSTEM_UPGRADE_PLAN_POLLING_INTERVAL", "61s")]).polling_interval,
            Duration::from_secs(61)
        );
    }
}
