//! The gauges of RebootPolicies, NodeMaintenances and NodeOps, and where the notification targets'
//! series are.

use super::*;

impl Metrics {
    /// How many objects of `kind` each per-object map holds (`slipway_tracked_objects`).
    pub fn tracked(&self, kind: Kind, maps: [(&'static str, usize); 3]) {
        for (map, n) in maps {
            let key = TrackedLabels { kind, map };
            self.tracked.get_or_create(&key).set(count(n));
        }
    }

    /// Sets a RebootPolicy's gauges.
    pub fn reboot_policy(&self, policy: &str, wanting: usize, rebooting: usize) {
        let key = PolicyLabels {
            policy: policy.to_string(),
        };
        self.reboot_wanting.get_or_create(&key).set(count(wanting));
        self.reboot_rebooting
            .get_or_create(&key)
            .set(count(rebooting));
        self.policies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key);
    }

    /// Drops the gauges of RebootPolicies for which `exists` is false.
    pub fn retain_policies(&self, mut exists: impl FnMut(&str) -> bool) {
        let mut policies = self.policies.lock().unwrap_or_else(PoisonError::into_inner);
        policies.retain(|key| {
            if exists(&key.policy) {
                return true;
            }
            self.reboot_wanting.remove(key);
            self.reboot_rebooting.remove(key);
            false
        });
        self.reboot_phases.retain(|key| exists(&key.policy));
    }

    /// Sets the per-phase gauges of a RebootPolicy's nodes (`status.nodes`).
    pub fn reboot_phases(&self, policy: &str, phases: &[PhaseTally]) {
        let key = PolicyLabels {
            policy: policy.to_string(),
        };
        self.reboot_phases.set(&key, phases);
    }

    /// Sets a NodeMaintenance's phase (`None`: not decided yet, or being deleted: no series).
    pub fn maintenance(&self, name: &str, node: &str, phase: Option<PhaseTally>) {
        let key = MaintenanceLabels {
            nodemaintenance: name.to_string(),
            node: node.to_string(),
        };
        self.maintenance_phases.set(&key, phase.as_slice());
    }

    /// Drops the gauges of NodeMaintenances for which `exists` is false.
    pub fn retain_maintenances(&self, mut exists: impl FnMut(&str) -> bool) {
        self.maintenance_phases
            .retain(|key| exists(&key.nodemaintenance));
    }

    /// Sets the per-phase gauges of a NodeOp's nodes (`status.nodeStatuses`).
    pub fn nodeop_phases(&self, namespace: &str, nodeop: &str, phases: &[PhaseTally]) {
        let key = NodeOpLabels {
            namespace: namespace.to_string(),
            nodeop: nodeop.to_string(),
        };
        self.nodeop_phases.set(&key, phases);
    }

    /// Drops the gauges of NodeOps for which `exists` is false.
    pub fn retain_nodeops(&self, mut exists: impl FnMut(&str, &str) -> bool) {
        self.nodeop_phases
            .retain(|key| exists(&key.namespace, &key.nodeop));
    }

    /// The notification targets' series.
    pub fn notifications(&self) -> &NotificationMetrics {
        &self.notifications
    }
}
