//! Reboots done right (a slipway extension, `spec.reboot`).
//!
//! The upgrade never reboots from inside its Job. Instead, before a node's Job starts, slipway puts a
//! reboot pod on the node that waits for a sentinel file; the Job's last step writes that file only
//! if the upgrade succeeded, so the Job completes before the node goes down and never runs again.
//! The reboot pod removes the sentinel, notes the boot ID it is leaving, and reboots the host through
//! PID 1. slipway counts the node as rebooted only when its `status.nodeInfo.bootID` has changed and
//! it is Ready again, optionally waits for selected pods on it to be Ready, and only then frees the slot.

pub mod alerts;
pub mod handoff;
pub mod policy;
pub mod request;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, HostPathVolumeSource, Pod, PodSpec, SecurityContext, Toleration, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::ObjectMeta;

use crate::api::{Plan, labels};
use crate::config::JobConfig;
use crate::duration::GoDuration;
use crate::naming::safe_concat_name;
use crate::node::NodeInfo;

/// How long a node may take to come back after its reboot, unless the Plan says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How long the health gate waits, unless the Plan says otherwise.
pub const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// Where sentinel files live on the host: persistent, so the reboot pod can tell after a restart
/// whether the node rebooted.
pub const DEFAULT_SENTINEL_PATH: &str = "/var/lib/slipway/reboot";
/// Label on reboot pods (besides the controller and node labels).
pub const REBOOT_LABEL: &str = "slipway.dev/reboot";
/// The Plan of a reboot pod. Not `upgrade.cattle.io/plan`: the Job's pod anti-affinity on that
/// label would keep the Job off the node its reboot pod waits on.
pub const REBOOT_PLAN_LABEL: &str = "slipway.dev/plan";
/// Where the sentinel directory is mounted in the reboot pod and the Job's sentinel step.
pub const SENTINEL_MOUNT: &str = "/sentinel";
/// Name of the sentinel volume and of the Job's last container.
pub const SENTINEL_NAME: &str = "reboot-sentinel";

/// The reboot settings of a Plan, with defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct RebootPolicy {
    pub timeout: Duration,
    pub image: String,
    pub sentinel_path: String,
    pub health_gate: Option<HealthGate>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HealthGate {
    pub pod_selector: LabelSelector,
    pub namespace: Option<String>,
    pub timeout: Duration,
}

fn duration_or(text: Option<&str>, default: Duration) -> Duration {
    text.and_then(|t| t.parse::<GoDuration>().ok())
        .and_then(GoDuration::to_std)
        .filter(|d| !d.is_zero())
        .unwrap_or(default)
}

/// The Plan's reboot policy, or `None` when it does not reboot (SUC's behaviour).
pub fn policy(plan: &Plan, config: &JobConfig) -> Option<RebootPolicy> {
    let spec = plan.spec.reboot.as_ref()?;
    if !spec.enabled.unwrap_or(true) {
        return None;
    }
    Some(RebootPolicy {
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

impl RebootPolicy {
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

impl HealthGate {
    /// `app=x in namespace y`, for messages.
    pub fn describe_pods(&self) -> String {
        let selector = crate::selection::Selector::from_label_selector(Some(&self.pod_selector))
            .map(|s| s.to_string())
            .unwrap_or_default();
        match &self.namespace {
            Some(ns) => format!("{selector} in namespace {ns}"),
            None => selector,
        }
    }
}

/// The reboot pod of `plan` on `node` for `hash`: `reboot-<plan>-on-<node>-with-<hash>`, made safe.
pub fn reboot_pod_name(plan: &str, node_name: &str, hash: &str) -> String {
    let short_node = node_name.split('.').next().unwrap_or(node_name);
    safe_concat_name(&["reboot", plan, "on", short_node, "with", hash])
}

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
sync
echo "upgrade done; rebooting the host from boot $boot"
sleep 5
nsenter -t 1 -m -u -i -n -p -- systemctl reboot \
  || nsenter -t 1 -m -- reboot \
  || kill -39 1
sleep 600
echo "the host did not reboot" >&2
exit 1
"#
    )
}

/// The reboot pod for `node`, created before its Job.
pub fn render_reboot_pod(
    plan: &Plan,
    node: &NodeInfo,
    job_name: &str,
    controller_name: &str,
    policy: &RebootPolicy,
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
            owner_references: Some(vec![crate::api::plan_owner_reference(plan_name, plan_uid)]),
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

/// A reboot pod's spec: pinned to `node` by name (it must land there even once the node is
/// cordoned), privileged in the host's PID namespace, running `script`.
fn reboot_pod_spec(
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

/// On a RebootPolicy's reboot pods: the policy.
pub const REBOOT_POLICY_LABEL: &str = "slipway.dev/reboot-policy";

/// The reboot pod of `policy` on `node`: `reboot-<policy>-on-<node>`, made safe. One at a time:
/// it is deleted once the node is back.
pub fn policy_reboot_pod_name(policy: &str, node_name: &str) -> String {
    let short_node = node_name.split('.').next().unwrap_or(node_name);
    safe_concat_name(&["reboot", policy, "on", short_node])
}

/// The script of a RebootPolicy's reboot pod: reboot at once, unless the node already runs a boot
/// other than `before` (a pod restarted after the reboot, or recreated after a crash of the
/// controller, never reboots twice).
pub fn policy_reboot_script(before: &str) -> String {
    format!(
        r#"set -u
before='{before}'
boot=$(cat /proc/sys/kernel/random/boot_id)
if [ "$boot" != "$before" ]; then
  echo "rebooted: boot $before is now $boot"
  exit 0
fi
echo "the node asked for a reboot and is drained; rebooting the host from boot $boot"
sync
sleep 5
nsenter -t 1 -m -u -i -n -p -- systemctl reboot \
  || nsenter -t 1 -m -- reboot \
  || kill -39 1
sleep 600
echo "the host did not reboot" >&2
exit 1
"#
    )
}

/// Who a RebootPolicy's reboot pod belongs to.
pub struct PolicyPod<'a> {
    pub policy: &'a str,
    pub policy_uid: &'a str,
    /// The controller's namespace.
    pub namespace: &'a str,
    /// The controller's name (`upgrade.cattle.io/controller`).
    pub controller: &'a str,
    pub image: &'a str,
}

/// The pod that reboots `node` (running boot `before`) for a RebootPolicy, owned by the policy.
pub fn render_policy_reboot_pod(owner: &PolicyPod<'_>, node: &str, before: &str) -> Pod {
    let pod_labels = BTreeMap::from([
        (labels::CONTROLLER.to_string(), owner.controller.to_string()),
        (REBOOT_POLICY_LABEL.to_string(), owner.policy.to_string()),
        (labels::NODE.to_string(), node.to_string()),
        (REBOOT_LABEL.to_string(), "true".to_string()),
    ]);
    let boot_id: String = before
        .chars()
        .filter(|c| c.is_ascii_hexdigit() || *c == '-')
        .collect();
    Pod {
        metadata: ObjectMeta {
            name: Some(policy_reboot_pod_name(owner.policy, node)),
            namespace: Some(owner.namespace.to_string()),
            labels: Some(pod_labels),
            owner_references: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                    api_version: format!("{}/v1alpha1", crate::api::reboot_policy::GROUP),
                    kind: "RebootPolicy".to_string(),
                    name: owner.policy.to_string(),
                    uid: owner.policy_uid.to_string(),
                    controller: Some(true),
                    block_owner_deletion: Some(false),
                },
            ]),
            ..Default::default()
        },
        spec: Some(reboot_pod_spec(
            node,
            owner.image,
            policy_reboot_script(&boot_id),
            None,
        )),
        status: None,
    }
}

/// The host directory of the sentinel files, created if missing.
pub fn sentinel_volume(policy: &RebootPolicy) -> Volume {
    Volume {
        name: SENTINEL_NAME.to_string(),
        host_path: Some(HostPathVolumeSource {
            path: policy.sentinel_path.clone(),
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
    #[test]
    fn a_policy_reboot_pod_reboots_only_from_the_boot_it_was_made_for() {
        let owner = super::PolicyPod {
            policy: "kured",
            policy_uid: "u1",
            namespace: "system-upgrade",
            controller: "system-upgrade-controller",
            image: "busybox",
        };
        let pod = super::render_policy_reboot_pod(&owner, "worker-1.example", "b1-'; rm -rf /");
        assert_eq!(
            pod.metadata.name.as_deref(),
            Some("reboot-kured-on-worker-1")
        );
        let spec = pod.spec.expect("spec");
        assert_eq!(spec.node_name.as_deref(), Some("worker-1.example"));
        let script = spec.containers[0].command.clone().unwrap_or_default()[2].clone();
        assert!(
            script.contains("before='b1--f'"),
            "only boot ID characters: {script}"
        );
        let owners = pod.metadata.owner_references.unwrap_or_default();
        assert_eq!(owners[0].kind, "RebootPolicy");
        assert_eq!(owners[0].api_version, "slipway.dev/v1alpha1");
    }

    use super::*;
    use crate::api::{HealthGateSpec, PlanStatus, RebootSpec};

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
        assert_eq!(policy(&plan(None), &JobConfig::default()), None);
        let disabled = RebootSpec {
            enabled: Some(false),
            ..Default::default()
        };
        assert_eq!(policy(&plan(Some(disabled)), &JobConfig::default()), None);
    }

    #[test]
    fn defaults_apply() {
        let p = policy(&plan(Some(RebootSpec::default())), &JobConfig::default()).expect("policy");
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
        let p = policy(&plan(Some(spec)), &JobConfig::default()).expect("policy");
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
        let pol = policy(&p, &JobConfig::default()).expect("policy");
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
