//! Whether the health checks' account installed from `deploy/` may read what a Plan's health
//! checks name: it holds only the ClusterRoles labelled for aggregation into its role (none by
//! default), never the controller's own rights. A check on a kind it cannot read is a warning
//! before it becomes a `Forbidden` in the status.

use serde_json::Value;

use super::{FileFinding, Finding, Input, Severity, Source, in_file};
use crate::common::check::{HealthCheckSpec, group_of, guess_resource, id};
use crate::plan::api::Plan;

/// The label of a ClusterRole whose rules the controller's health-check role aggregates.
pub const AGGREGATE_LABEL: &str = "slipway.dev/aggregate-to-health-checks";

/// Warns for each health check of the Plans that neither `deploy/` nor the input's aggregated
/// ClusterRoles let the controller read.
pub(super) fn health_check_access(
    plans: &[(&Input<'_>, Plan)],
    inputs: &[Input<'_>],
    out: &mut Vec<FileFinding>,
) {
    let aggregated: Vec<&Value> = inputs
        .iter()
        .filter(|i| i.doc.kind() == "ClusterRole")
        .map(|i| &i.doc.value)
        .filter(|v| {
            v.pointer(&format!(
                "/metadata/labels/{}",
                AGGREGATE_LABEL.replace('/', "~1")
            )) == Some(&Value::from("true"))
        })
        .collect();
    for (input, plan) in plans {
        for check in plan.spec.health_checks.iter().flatten() {
            let Some(message) = unreadable(check, &aggregated) else {
                continue;
            };
            out.push(in_file(
                input.file,
                Finding {
                    severity: Severity::Warning,
                    line: input.doc.line_of(&["spec", "healthChecks"]),
                    object: format!("plan/{}", input.doc.name()),
                    field: "spec.healthChecks".into(),
                    source: Source::Advice,
                    message: format!("health check {}: {message}", id(check)),
                },
            ));
        }
    }
}

/// `Some(message)` when none of the `aggregated` ClusterRoles lets the health checks' account
/// read the check's objects.
pub(super) fn unreadable(check: &HealthCheckSpec, aggregated: &[&Value]) -> Option<String> {
    let group = group_of(&check.api_version);
    let resource = guess_resource(&check.kind);
    let verb = if check.name.is_some() { "get" } else { "list" };
    let allowed = aggregated
        .iter()
        .any(|role| grants(role, group, &resource, verb, check.name.as_deref()));
    (!allowed).then(|| {
        format!(
            "no ClusterRole of the input labelled {AGGREGATE_LABEL}=true lets the health checks' account {verb} {resource} (group {group:?}): until one does, the check reports Forbidden and holds the rollout"
        )
    })
}

fn grants(role: &Value, group: &str, resource: &str, verb: &str, name: Option<&str>) -> bool {
    let has = |rule: &Value, key: &str, want: &str| {
        rule.get(key)
            .and_then(Value::as_array)
            .is_some_and(|v| v.iter().any(|x| x == want || x == "*"))
    };
    let rules = role.get("rules").and_then(Value::as_array);
    rules.into_iter().flatten().any(|rule| {
        let names = rule.get("resourceNames").and_then(Value::as_array);
        let named = match (names, name) {
            (None, _) => true,
            (Some(list), Some(n)) => list.is_empty() || list.iter().any(|x| x == n),
            (Some(list), None) => list.is_empty(),
        };
        has(rule, "apiGroups", group)
            && has(rule, "resources", resource)
            && has(rule, "verbs", verb)
            && named
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(
        api_version: &str,
        kind: &str,
        ns: Option<&str>,
        name: Option<&str>,
    ) -> HealthCheckSpec {
        HealthCheckSpec {
            api_version: api_version.into(),
            kind: kind.into(),
            namespace: ns.map(str::to_string),
            name: name.map(str::to_string),
            expr: "true".into(),
            ..Default::default()
        }
    }

    fn unreadable_alone(c: &HealthCheckSpec) -> Option<String> {
        unreadable(c, &[])
    }

    #[test]
    fn an_aggregated_role_of_the_input_grants_reads() {
        let role = serde_json::json!({"rules": [
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"],
             "resourceNames": ["coredns"]}]});
        let c = check(
            "apps/v1",
            "Deployment",
            Some("kube-system"),
            Some("coredns"),
        );
        assert_eq!(unreadable(&c, &[&role]), None);
        let other = check("apps/v1", "Deployment", Some("kube-system"), Some("other"));
        assert!(unreadable(&other, &[&role]).is_some(), "another name");
        let listed = check("apps/v1", "Deployment", Some("kube-system"), None);
        assert!(
            unreadable(&listed, &[&role]).is_some(),
            "list is not granted"
        );
    }

    #[test]
    fn the_controllers_own_rights_grant_a_check_nothing() {
        // The controller lists pods cluster-wide, Secrets and Plans in its namespace: a check
        // reads none of them without a grant of its own.
        for c in [
            check("v1", "Pod", Some("db"), None),
            check("v1", "Secret", Some("system-upgrade"), None),
            check("upgrade.cattle.io/v1", "Plan", Some("system-upgrade"), None),
        ] {
            assert!(unreadable_alone(&c).is_some(), "{c:?}");
        }
        let cm = unreadable_alone(&check("v1", "ConfigMap", Some("ops"), Some("gate")));
        assert!(cm.is_some_and(|m| m.contains("get configmaps")));
        let ceph = unreadable_alone(&check("ceph.rook.io/v1", "CephCluster", None, None));
        assert!(
            ceph.as_deref()
                .is_some_and(|m| m.contains("list cephclusters (group \"ceph.rook.io\")")),
            "{ceph:?}"
        );
    }
}
