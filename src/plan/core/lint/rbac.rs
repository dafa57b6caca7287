//! Whether the controller installed from `deploy/` may read what a Plan's health checks name: the
//! shipped ClusterRole and Role, and the ClusterRoles among the inputs labelled for aggregation
//! into its health-check role. A check on a kind it cannot read is a warning before it becomes a
//! `Forbidden` in the status.

use serde_json::Value;

use super::documents::parse_documents;
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

/// The controller's RBAC as `deploy/` installs it.
const DEPLOY_RBAC: &str = include_str!("../../../../deploy/rbac.yaml");
/// The namespace of the controller's Role.
const NAMESPACE: &str = "system-upgrade";

/// `Some(message)` when neither the shipped RBAC nor the `aggregated` ClusterRoles let the
/// controller read the check's objects.
pub(super) fn unreadable(check: &HealthCheckSpec, aggregated: &[&Value]) -> Option<String> {
    let group = group_of(&check.api_version);
    let resource = guess_resource(&check.kind);
    let verb = if check.name.is_some() { "get" } else { "list" };
    let docs = parse_documents(DEPLOY_RBAC).unwrap_or_default();
    let allowed = docs.iter().any(|d| {
        let in_scope = match d.kind() {
            "ClusterRole" => d.name() == "system-upgrade-controller",
            // The controller's own Role: the Jobs' (`system-upgrade-jobs`) is another account's.
            "Role" => {
                d.name() == "system-upgrade-controller"
                    && check.namespace.as_deref() == Some(NAMESPACE)
            }
            _ => false,
        };
        in_scope && grants(&d.value, group, &resource, verb, check.name.as_deref())
    }) || aggregated
        .iter()
        .any(|role| grants(role, group, &resource, verb, check.name.as_deref()));
    (!allowed).then(|| {
        format!(
            "the RBAC in deploy/ does not let slipway {verb} {resource} (group {group:?}), and no ClusterRole of the input labelled {AGGREGATE_LABEL}=true does: until one grants it, the check reports Forbidden and holds the rollout"
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
    fn the_shipped_rbac_reads_pods_and_secrets_of_its_namespace_only() {
        // Pods are listed cluster-wide (health gates); Secrets only in the controller's namespace.
        assert_eq!(
            unreadable_alone(&check("v1", "Pod", Some("db"), None)),
            None
        );
        assert_eq!(
            unreadable_alone(&check("v1", "Secret", Some(NAMESPACE), None)),
            None
        );
        assert!(unreadable_alone(&check("v1", "Secret", Some("db"), None)).is_some());
        let cm = unreadable_alone(&check("v1", "ConfigMap", Some("ops"), Some("gate"))).unwrap();
        assert!(cm.contains("get configmaps"), "{cm}");
        let ceph = unreadable_alone(&check("ceph.rook.io/v1", "CephCluster", None, None)).unwrap();
        assert!(
            ceph.contains("list cephclusters (group \"ceph.rook.io\")"),
            "{ceph}"
        );
    }

    #[test]
    fn the_jobs_role_is_not_the_controllers() {
        // `system-upgrade-jobs` lets the Jobs get Plans; the controller's account does not hold it.
        let named = check(
            "upgrade.cattle.io/v1",
            "Plan",
            Some(NAMESPACE),
            Some("server-plan"),
        );
        assert!(unreadable_alone(&named).is_some());
        let listed = check("upgrade.cattle.io/v1", "Plan", Some(NAMESPACE), None);
        assert_eq!(unreadable_alone(&listed), None);
    }
}
