//! The pod that reboots a node for a RebootPolicy.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ObjectMeta;

use crate::common::labels;
use crate::common::naming::safe_concat_name;
use crate::node::reboot::{REBOOT_HOST, REBOOT_LABEL, reboot_pod_spec};

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
{REBOOT_HOST}"#
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
                    api_version: format!("{}/v1alpha1", crate::reboot_policy::api::GROUP),
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
}
