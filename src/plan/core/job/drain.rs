//! The arguments of the kubectl container that drains the node, flags in SUC's order, and the
//! check SUC warns with when a drain may outlast its Job.

use crate::common::duration::GoDuration;
use crate::plan::api::{DrainSpec, DrainTimeout, PlanSpec};
use crate::plan::core::selection::drain_pod_selector;

use super::RenderError;

/// The arguments of the `drain` container, flags in SUC's order.
pub fn drain_args(node_name: &str, drain: &DrainSpec) -> Result<Vec<String>, RenderError> {
    let mut args = vec![
        "drain".to_string(),
        node_name.to_string(),
        "--pod-selector".to_string(),
        drain_pod_selector(drain.pod_selector.as_ref())?,
    ];
    if drain.ignore_daemon_sets.unwrap_or(true) {
        args.push("--ignore-daemonsets".to_string());
    }
    if drain.delete_local_data.unwrap_or(true) && drain.delete_emptydir_data.unwrap_or(true) {
        args.push("--delete-emptydir-data".to_string());
    }
    if drain.force.unwrap_or(false) {
        args.push("--force".to_string());
    }
    if let Some(timeout) = &drain.timeout {
        args.push("--timeout".to_string());
        args.push(match timeout {
            DrainTimeout::Nanoseconds(n) => GoDuration { nanos: *n }.to_string(),
            DrainTimeout::Text(s) => s.clone(),
        });
    }
    if let Some(grace) = drain.grace_period {
        args.push("--grace-period".to_string());
        args.push(grace.to_string());
    }
    if drain.disable_eviction.unwrap_or(false) {
        args.push("--disable-eviction=true".to_string());
    }
    if let Some(skip) = drain.skip_wait_for_delete_timeout.filter(|s| *s > 0) {
        args.push("--skip-wait-for-delete-timeout".to_string());
        args.push(skip.to_string());
    }
    Ok(args)
}

/// The drain's timeout in whole seconds, when it is longer than the deadline the Plan itself gives
/// its Job (`jobActiveDeadlineSecs` above 0): the Job would be stopped mid-drain. SUC logs a
/// warning for this when it renders the Job; `slipway validate` warns before the Plan is applied.
pub fn drain_outlasts_deadline(spec: &PlanSpec) -> Option<(i128, i64)> {
    let timeout = spec.drain.as_ref().and_then(|d| d.timeout.as_ref())?;
    let deadline = spec.job_active_deadline_secs.filter(|d| *d > 0)?;
    let nanos = match timeout {
        DrainTimeout::Nanoseconds(n) => *n,
        // An unparseable string counts as zero, as in SUC.
        DrainTimeout::Text(s) => s.parse::<GoDuration>().map(|d| d.nanos).unwrap_or(0),
    };
    let millis = i128::from(nanos / 1_000_000);
    (millis > i128::from(deadline) * 1000).then_some((millis / 1000, deadline))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::core::job::fixtures::*;

    // --- SUC's flags_test.go ---

    #[test]
    fn skip_wait_for_delete_timeout_only_when_positive() {
        let with_skip = |n: i64| {
            let drain = DrainSpec {
                skip_wait_for_delete_timeout: Some(n),
                ..Default::default()
            };
            drain_args("n", &drain).expect("args")
        };
        assert!(!with_skip(-1).contains(&"--skip-wait-for-delete-timeout".to_string()));
        assert!(!with_skip(0).contains(&"--skip-wait-for-delete-timeout".to_string()));
        let one = with_skip(1);
        let at = one
            .iter()
            .position(|a| a == "--skip-wait-for-delete-timeout")
            .expect("flag");
        assert_eq!(one[at + 1], "1");
    }

    // --- drain and cordon ---

    #[test]
    fn drain_defaults() {
        assert_eq!(
            drain_args("node-1", &DrainSpec::default()).expect("args"),
            vec![
                "drain",
                "node-1",
                "--pod-selector",
                "!upgrade.cattle.io/controller",
                "--ignore-daemonsets",
                "--delete-emptydir-data",
            ]
        );
    }

    #[test]
    fn every_drain_flag_in_suc_order() {
        let drain: DrainSpec = serde_json::from_value(serde_json::json!({
            "timeout": 300000000000i64,
            "gracePeriod": 30,
            "deleteLocalData": true,
            "ignoreDaemonSets": true,
            "force": true,
            "disableEviction": true,
            "skipWaitForDeleteTimeout": 60,
            "podSelector": {"matchExpressions": [
                {"key": "component", "operator": "NotIn", "values": ["sonobuoy"]}
            ]}
        }))
        .expect("drain spec");
        assert_eq!(
            drain_args("node-1", &drain).expect("args"),
            vec![
                "drain",
                "node-1",
                "--pod-selector",
                "component notin (sonobuoy),!upgrade.cattle.io/controller",
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--force",
                "--timeout",
                "5m0s",
                "--grace-period",
                "30",
                "--disable-eviction=true",
                "--skip-wait-for-delete-timeout",
                "60",
            ]
        );
    }

    #[test]
    fn drain_flags_that_can_be_turned_off() {
        let args = |json: serde_json::Value| {
            let drain: DrainSpec = serde_json::from_value(json).expect("drain spec");
            drain_args("n", &drain).expect("args")
        };
        let base = [
            "drain",
            "n",
            "--pod-selector",
            "!upgrade.cattle.io/controller",
        ];
        assert_eq!(
            args(serde_json::json!({"ignoreDaemonSets": false, "deleteLocalData": false})),
            base
        );
        assert_eq!(
            args(serde_json::json!({"ignoreDaemonSets": false, "deleteEmptydirData": false})),
            base
        );
        // Both explicitly true (Validate rejects setting both, but the render rule is SUC's).
        assert_eq!(
            args(
                serde_json::json!({"ignoreDaemonSets": false, "deleteLocalData": true, "deleteEmptydirData": true})
            ),
            [&base[..], &["--delete-emptydir-data"]].concat()
        );
        assert_eq!(
            args(serde_json::json!({"ignoreDaemonSets": false, "deleteEmptydirData": true})),
            [&base[..], &["--delete-emptydir-data"]].concat()
        );
        assert_eq!(
            args(
                serde_json::json!({"force": false, "disableEviction": false, "ignoreDaemonSets": false, "deleteLocalData": false, "gracePeriod": 0})
            ),
            [&base[..], &["--grace-period", "0"]].concat()
        );
        assert_eq!(
            args(
                serde_json::json!({"gracePeriod": -1, "ignoreDaemonSets": false, "deleteLocalData": false})
            ),
            [&base[..], &["--grace-period", "-1"]].concat()
        );
    }

    #[test]
    fn drain_timeouts() {
        let timeout = |t: DrainTimeout| {
            let drain = DrainSpec {
                timeout: Some(t),
                ..Default::default()
            };
            let a = drain_args("n", &drain).expect("args");
            let at = a.iter().position(|x| x == "--timeout").expect("flag");
            a[at + 1].clone()
        };
        assert_eq!(timeout(DrainTimeout::Nanoseconds(300_000_000_000)), "5m0s");
        assert_eq!(timeout(DrainTimeout::Nanoseconds(1_500_000_000)), "1.5s");
        assert_eq!(timeout(DrainTimeout::Nanoseconds(0)), "0s");
        assert_eq!(timeout(DrainTimeout::Text("10m".into())), "10m");
        // Strings are passed verbatim, even ones kubectl will reject.
        assert_eq!(timeout(DrainTimeout::Text("soon".into())), "soon");
    }

    #[test]
    fn an_invalid_drain_pod_selector_is_an_error() {
        let drain: DrainSpec = serde_json::from_value(serde_json::json!({
            "podSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}
        }))
        .expect("drain spec");
        assert!(matches!(
            drain_args("n", &drain),
            Err(RenderError::DrainPodSelector(_))
        ));
    }

    #[test]
    fn drain_timeout_longer_than_the_deadline_is_flagged() {
        let check = |timeout: DrainTimeout, deadline: Option<i64>| {
            let mut p = with_deadline(deadline);
            p.spec.drain = Some(DrainSpec {
                timeout: Some(timeout),
                ..Default::default()
            });
            drain_outlasts_deadline(&p.spec)
        };
        assert_eq!(
            check(DrainTimeout::Text("11m".into()), Some(600)),
            Some((660, 600))
        );
        assert_eq!(check(DrainTimeout::Text("10m".into()), Some(600)), None);
        assert_eq!(
            check(DrainTimeout::Nanoseconds(601_000_000_000), Some(600)),
            Some((601, 600))
        );
        // No deadline of the Plan's own (unset, 0: none, below 0: the controller's).
        assert_eq!(check(DrainTimeout::Text("11m".into()), None), None);
        assert_eq!(check(DrainTimeout::Text("1h".into()), Some(0)), None);
        assert_eq!(check(DrainTimeout::Text("1h".into()), Some(-1)), None);
        assert_eq!(check(DrainTimeout::Text("bogus".into()), Some(1)), None);
        assert_eq!(drain_outlasts_deadline(&basic().spec), None);
    }
}
