//! A Plan's reboot (a slipway extension, `spec.reboot`).
//!
//! The upgrade never reboots from inside its Job. Its last step writes a sentinel file only if the
//! upgrade succeeded; once slipway has seen the Job complete, it puts a reboot pod on the node that
//! waits for that file, so the Job is over before the node goes down and never runs again.
//! The reboot pod removes the sentinel, notes the boot ID it is leaving, and reboots the host through
//! PID 1. slipway counts the node as rebooted only when its `status.nodeInfo.bootID` has changed and
//! it is Ready again, optionally waits for selected pods on it to be Ready, and only then frees the slot.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodSpec, Volume};
use kube::api::ObjectMeta;

use super::config::JobConfig;
use crate::common::duration::GoDuration;
use crate::common::naming::safe_concat_name;
use crate::node::NodeInfo;
use crate::node::handoff;
use crate::node::reboot::{
    DEFAULT_HEALTH_TIMEOUT, DEFAULT_TIMEOUT, HealthGate, REBOOT_LABEL, reboot_pod_spec,
    sentinel_volume_at,
};
pub use crate::node::reboot::{
    SENTINEL_MOUNT, SENTINEL_NAME, reboot_script, sentinel_mount, sentinel_step_command,
};
use crate::plan::api::{Plan, labels};

/// Where sentinel files live on the host: persistent, so the reboot pod can tell after a restart
/// whether the node rebooted.
pub const DEFAULT_SENTINEL_PATH: &str = "/var/lib/slipway/reboot";
/// The Plan of a reboot pod. Not `upgrade.cattle.io/plan`: the Job's pod anti-affinity on that
/// label would keep the Job off the node its reboot pod waits on.
pub const REBOOT_PLAN_LABEL: &str = "slipway.dev/plan";
/// The reboot settings of a Plan, with defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct RebootSettings {
    pub timeout: Duration,
    pub image: String,
    pub sentinel_path: String,
    pub health_gate: Option<HealthGate>,
}

fn duration_or(text: Option<&str>, default: Duration) -> Duration {
    text.and_then(|t| t.parse::<GoDuration>().ok())
        .and_then(GoDuration::to_std)
        .filter(|d| !d.is_zero())
        .unwrap_or(default)
}

/// The Plan's reboot settings (`spec.reboot`), or `None` when it does not reboot (SUC's behaviour).
pub fn settings(plan: &Plan, config: &JobConfig) -> Option<RebootSettings> {
    let spec = plan.spec.reboot.as_ref()?;
    if !spec.enabled.unwrap_or(true) {
        return None;
    }
    Some(RebootSettings {
        timeout: duration_or(spec.timeout.as_deref(), DEFAULT_TIMEOUT),
        image: spec
            .image
            .clone()
            .filter(|i| !i.is_empty())
            .unwrap_or_else(|| config.reboot_image.clone()),
        sentinel_path: spec
            .sentinel_path
            .clone()
            .filter(|p| p.starts_with('/'))
            .unwrap_or_else(|| DEFAULT_SENTINEL_PATH.to_string()),
        health_gate: spec.health_gate.as_ref().map(|g| HealthGate {
            pod_selector: g.pod_selector.clone(),
            namespace: g.namespace.clone().filter(|n| !n.is_empty()),
            timeout: duration_or(g.timeout.as_deref(), DEFAULT_HEALTH_TIMEOUT),
        }),
    })
}

impl RebootSettings {
    /// The hand-off this policy asks for after the node went down.
    pub fn handoff(&self) -> handoff::HandoffPolicy {
        handoff::HandoffPolicy {
            timeout: self.timeout,
            health_gate: self.health_gate.as_ref().map(|g| handoff::GatePolicy {
                timeout: g.timeout,
                pods: g.describe_pods(),
            }),
        }
    }
}

/// The reboot pod of `plan` on `node` for `hash`: `reboot-<plan>-on-<node>-with-<hash>`, made safe.
pub fn reboot_pod_name(plan: &str, node_name: &str, hash: &str) -> String {
    let short_node = node_name.split('.').next().unwrap_or(node_name);
    safe_concat_name(&["reboot", plan, "on", short_node, "with", hash])
}

/// The reboot pod for `node`, created once its Job `job_name` completed.
pub fn render_reboot_pod(
    plan: &Plan,
    node: &NodeInfo,
    job_name: &str,
    controller_name: &str,
    policy: &RebootSettings,
) -> Option<Pod> {
    let plan_name = plan.metadata.name.as_deref()?;
    let plan_uid = plan.metadata.uid.as_deref()?;
    let hash = plan.status.as_ref()?.latest_hash.as_deref()?;
    let pod_labels = BTreeMap::from([
        // The controller label keeps `kubectl drain` (and so the upgrade Job's drain) off it.
        (labels::CONTROLLER.to_string(), controller_name.to_string()),
        (REBOOT_PLAN_LABEL.to_string(), plan_name.to_string()),
        (labels::NODE.to_string(), node.name.clone()),
        (REBOOT_LABEL.to_string(), "true".to_string()),
    ]);
    Some(Pod {
        metadata: ObjectMeta {
            name: Some(reboot_pod_name(plan_name, &node.name, hash)),
            namespace: plan.metadata.namespace.clone(),
            labels: Some(pod_labels),
            owner_references: Some(vec![crate::plan::api::plan_owner_reference(
                plan_name, plan_uid,
            )]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            volumes: Some(vec![sentinel_volume(policy)]),
            ..reboot_pod_spec(
                &node.name,
                &policy.image,
                reboot_script(job_name),
                Some(vec![sentinel_mount()]),
            )
        }),
        status: None,
    })
}

/// The host directory of the sentinel files, created if missing.
pub fn sentinel_volume(policy: &RebootSettings) -> Volume {
    sentinel_volume_at(&policy.sentinel_path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::api::{HealthGateSpec, PlanStatus, RebootSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn plan(reboot: Option<RebootSpec>) -> Plan {
        let mut p = Plan::default();
        p.metadata.name = Some("os".into());
        p.metadata.namespace = Some("system-upgrade".into());
        p.metadata.uid = Some("uid-1".into());
        p.spec.reboot = reboot;
        p.status = Some(PlanStatus {
            latest_hash: Some("abc".into()),
            ..Default::default()
        });
        p
    }

    #[test]
    fn no_reboot_section_means_no_reboot() {
        assert_eq!(settings(&plan(None), &JobConfig::default()), None);
        let disabled = RebootSpec {
            enabled: Some(false),
            ..Default::default()
        };
        assert_eq!(settings(&plan(Some(disabled)), &JobConfig::default()), None);
    }

    #[test]
    fn defaults_apply() {
        let p =
            settings(&plan(Some(RebootSpec::default())), &JobConfig::default()).expect("policy");
        assert_eq!(p.timeout, DEFAULT_TIMEOUT);
        assert_eq!(p.image, JobConfig::default().reboot_image);
        assert_eq!(p.sentinel_path, DEFAULT_SENTINEL_PATH);
        assert_eq!(p.health_gate, None);
        let spec = RebootSpec {
            timeout: Some("5m".into()),
            image: Some("registry.local/tools:1".into()),
            sentinel_path: Some("/var/lib/upgrades".into()),
            health_gate: Some(HealthGateSpec {
                pod_selector: LabelSelector::default(),
                namespace: Some("kube-system".into()),
                timeout: None,
                ..Default::default()
            }),
            ..Default::default()
        };
        let p = settings(&plan(Some(spec)), &JobConfig::default()).expect("policy");
        assert_eq!(p.timeout, Duration::from_secs(300));
        assert_eq!(p.image, "registry.local/tools:1");
        assert_eq!(p.sentinel_path, "/var/lib/upgrades");
        let gate = p.health_gate.expect("gate");
        assert_eq!(gate.timeout, DEFAULT_HEALTH_TIMEOUT);
        assert_eq!(gate.namespace.as_deref(), Some("kube-system"));
    }

    #[test]
    fn the_reboot_pod_is_pinned_privileged_hostpid_and_owned_by_the_plan() {
        let p = plan(Some(RebootSpec::default()));
        let pol = settings(&p, &JobConfig::default()).expect("policy");
        let node = NodeInfo {
            name: "node-1.example.com".into(),
            ..Default::default()
        };
        let pod =
            render_reboot_pod(&p, &node, "apply-os-on-node-1-with-abc", "suc", &pol).expect("pod");
        assert_eq!(
            pod.metadata.name.as_deref(),
            Some("reboot-os-on-node-1-with-abc")
        );
        let l = pod.metadata.labels.as_ref().expect("labels");
        assert_eq!(l.get(labels::CONTROLLER).map(String::as_str), Some("suc"));
        assert_eq!(l.get(REBOOT_LABEL).map(String::as_str), Some("true"));
        assert_eq!(l.get(REBOOT_PLAN_LABEL).map(String::as_str), Some("os"));
        assert!(
            !l.contains_key(labels::PLAN) && !l.contains_key(labels::EXCLUSIVE),
            "the Job's anti-affinity must not see the reboot pod"
        );
        assert_eq!(
            l.get(labels::NODE).map(String::as_str),
            Some("node-1.example.com")
        );
        let owner = &pod.metadata.owner_references.as_ref().expect("owner")[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Plan", "os"));
        let spec = pod.spec.expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("node-1.example.com"));
        assert_eq!(spec.host_pid, Some(true));
        assert_eq!(spec.restart_policy.as_deref(), Some("OnFailure"));
        assert_eq!(spec.automount_service_account_token, Some(false));
        let c = &spec.containers[0];
        assert_eq!(
            c.security_context.as_ref().and_then(|s| s.privileged),
            Some(true)
        );
        let script = &c.command.as_ref().expect("command")[2];
        assert!(script.contains("/sentinel/apply-os-on-node-1-with-abc"));
        assert!(script.contains("nsenter -t 1 -m -u -i -n -p -- systemctl reboot"));
        let vol = &spec.volumes.expect("volumes")[0];
        let hp = vol.host_path.as_ref().expect("hostPath");
        assert_eq!(hp.path, DEFAULT_SENTINEL_PATH);
        assert_eq!(hp.type_.as_deref(), Some("DirectoryOrCreate"));
    }

    #[test]
    fn the_script_removes_the_sentinel_before_rebooting_and_exits_after_a_new_boot() {
        let s = reboot_script("job-1");
        let marker = s
            .find("echo \"$boot\" > \"$marker\"")
            .expect("records the boot");
        let remove = s.find("rm -f \"$sentinel\"").expect("removes the sentinel");
        let reboot = s.find("systemctl reboot").expect("reboots");
        assert!(marker < remove && remove < reboot);
        assert!(s.contains("exit 0"));
        assert!(sentinel_step_command("job-1")[2].starts_with("touch /sentinel/job-1 &&"));
    }
}
