//! What every reboot slipway asks for has in common: the pod that reboots a node (pinned to it,
//! privileged in the host's PID namespace), the sentinel file through which a Job that succeeded
//! tells it to reboot (so the Job is complete before the node goes down and never runs again), and
//! the health gate a rebooted node must pass before its slot is free again. The hand-off that
//! waits for the new boot is [`super::handoff`]. Plans (`spec.reboot`) and NodeOps
//! (`rebootOnSuccess`) reboot this way.

use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, HostPathVolumeSource, Pod, PodSpec, SecurityContext, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::common::Extra;
use crate::common::selector::Selector;

/// How long a node may take to come back after its reboot, unless the operation says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How long the health gate waits, unless the operation says otherwise.
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// Label on reboot pods (besides the controller and node labels).
pub const REBOOT_LABEL: &str = "slipway.dev/reboot";

/// Pods that must be Ready again on a rebooted node before the rollout moves on.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthGateSpec {
    /// Pods on the node that must all be Ready (every namespace unless `namespace` is set).
    pub pod_selector: LabelSelector,
    /// Only pods of this namespace count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// How long to wait for them (a Go duration; default 10m).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,

    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HealthGate {
    pub pod_selector: LabelSelector,
    pub namespace: Option<String>,
    pub timeout: Duration,
}

impl HealthGate {
    /// `app=x in namespace y`, for messages.
    pub fn describe_pods(&self) -> String {
        let selector = Selector::from_label_selector(Some(&self.pod_selector))
            .map(|s| s.to_string())
            .unwrap_or_default();
        match &self.namespace {
            Some(ns) => format!("{selector} in namespace {ns}"),
            None => selector,
        }
    }
}

/// The end of every reboot pod's script: reboot the host through PID 1 (systemd, else `reboot`,
/// else SIGRTMIN+5 to init), and fail if it does not go down.
pub const REBOOT_HOST: &str = r#"sync
sleep 5
nsenter -t 1 -m -u -i -n -p -- systemctl reboot \
  || nsenter -t 1 -m -- reboot \
  || kill -39 1
sleep 600
echo "the host did not reboot" >&2
exit 1
"#;

/// A reboot pod's spec: pinned to `node` by name (it must land there even once the node is
/// cordoned), privileged in the host's PID namespace, running `script`.
pub fn reboot_pod_spec(
    node: &str,
    image: &str,
    script: String,
    volume_mounts: Option<Vec<VolumeMount>>,
) -> PodSpec {
    PodSpec {
        node_name: Some(node.to_string()),
        host_pid: Some(true),
        restart_policy: Some("OnFailure".to_string()),
        automount_service_account_token: Some(false),
        termination_grace_period_seconds: Some(5),
        tolerations: Some(vec![Toleration {
            operator: Some("Exists".to_string()),
            ..Default::default()
        }]),
        containers: vec![Container {
            name: "reboot".to_string(),
            image: Some(image.to_string()),
            command: Some(vec!["sh".into(), "-c".into(), script]),
            security_context: Some(SecurityContext {
                privileged: Some(true),
                run_as_user: Some(0),
                ..Default::default()
            }),
            volume_mounts,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Where the sentinel directory is mounted in the reboot pod and the Job's sentinel step.
pub const SENTINEL_MOUNT: &str = "/sentinel";
/// Name of the sentinel volume and of the Job's last container.
pub const SENTINEL_NAME: &str = "reboot-sentinel";

/// The Job's last step: runs only if every step before it succeeded, and writes the sentinel the
/// reboot pod waits for. The file is named after the Job, so a stale file never matches.
pub fn sentinel_step_command(job_name: &str) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "touch {SENTINEL_MOUNT}/{job_name} && echo \"upgrade succeeded; {SENTINEL_MOUNT}/{job_name} tells the reboot pod to reboot\""
        ),
    ]
}

/// The reboot pod's script. It exits 0 once the node runs a boot other than the one it rebooted
/// from (recorded on the host before rebooting), so a restart of the pod never reboots twice.
pub fn reboot_script(job_name: &str) -> String {
    format!(
        r#"set -u
sentinel="{SENTINEL_MOUNT}/{job_name}"
marker="{SENTINEL_MOUNT}/{job_name}.rebooting-from"
boot=$(cat /proc/sys/kernel/random/boot_id)
if [ -f "$marker" ] && [ "$(cat "$marker")" != "$boot" ]; then
  echo "rebooted: boot $(cat "$marker") is now $boot"
  rm -f "$marker"
  exit 0
fi
echo "waiting for $sentinel (written when the upgrade succeeds)"
while [ ! -f "$sentinel" ] && [ ! -f "$marker" ]; do sleep 5; done
echo "$boot" > "$marker"
rm -f "$sentinel"
echo "upgrade done; rebooting the host from boot $boot"
{REBOOT_HOST}"#
    )
}

/// The host directory of the sentinel files, created if missing.
pub fn sentinel_volume_at(path: &str) -> Volume {
    Volume {
        name: SENTINEL_NAME.to_string(),
        host_path: Some(HostPathVolumeSource {
            path: path.to_string(),
            type_: Some("DirectoryOrCreate".to_string()),
        }),
        ..Default::default()
    }
}

pub fn sentinel_mount() -> VolumeMount {
    VolumeMount {
        name: SENTINEL_NAME.to_string(),
        mount_path: SENTINEL_MOUNT.to_string(),
        ..Default::default()
    }
}

/// What the controller saw of the health gate's pods on a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthObservation {
    /// Names (`namespace/name`) of matching pods that are not Ready.
    pub not_ready: Vec<String>,
    /// How many matching pods there are.
    pub total: usize,
}

impl HealthObservation {
    pub fn healthy(&self) -> bool {
        self.not_ready.is_empty()
    }

    /// Reads the gate's pods on one node; pods being deleted do not count.
    pub fn of_pods(pods: &[Pod]) -> HealthObservation {
        let mut o = HealthObservation::default();
        for pod in pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            o.total += 1;
            let ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if !ready {
                o.not_ready.push(format!(
                    "{}/{}",
                    pod.metadata.namespace.as_deref().unwrap_or_default(),
                    pod.metadata.name.as_deref().unwrap_or_default()
                ));
            }
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_is_all_matching_pods_ready() {
        assert!(HealthObservation::default().healthy());
        let o = HealthObservation {
            not_ready: vec!["kube-system/cilium-x".into()],
            total: 2,
        };
        assert!(!o.healthy());
    }
}
