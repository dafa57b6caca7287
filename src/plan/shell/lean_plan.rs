//! A Plan as the caches keep it: without its `managedFields`. slipway writes a Plan's status
//! often, and the API server records every field of it for slipway's field manager, so a Plan's
//! `managedFields` grow as big as its status; decoded whole, they were a tenth of the controller's
//! CPU at 1,000 nodes (decoded, cloned with the Plan, dropped), and nothing reads them.

use serde::{Deserialize, Deserializer};

use crate::plan::api::{Plan, PlanSpec, PlanStatus};
use crate::runtime::lean::{LeanMeta, lean_resource};

/// A Plan without its `managedFields`.
#[derive(Clone, Debug)]
pub struct LeanPlan(pub Plan);

lean_resource!(LeanPlan, Plan);

/// What a Plan requires and may have, as [`Plan`] decodes it.
#[derive(Deserialize)]
struct Wire {
    metadata: LeanMeta,
    spec: PlanSpec,
    status: Option<PlanStatus>,
}

impl<'de> Deserialize<'de> for LeanPlan {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(d)?;
        let metadata = LeanMeta::into_meta(Some(wire.metadata));
        Ok(LeanPlan(Plan {
            metadata,
            spec: wire.spec,
            status: wire.status,
        }))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn full_plan() -> Value {
        json!({
            "apiVersion": "upgrade.cattle.io/v1",
            "kind": "Plan",
            "metadata": {
                "name": "k3s-server", "namespace": "system-upgrade", "uid": "u1",
                "generation": 3, "resourceVersion": "812",
                "creationTimestamp": "2026-11-27T10:00:00Z",
                "labels": {"app": "k3s"},
                "annotations": {"upgrade.cattle.io/digest": "spec.upgrade.envs"},
                "finalizers": ["slipway.dev/plan-cleanup"],
                "managedFields": [{
                    "manager": "slipway", "operation": "Update", "subresource": "status",
                    "apiVersion": "upgrade.cattle.io/v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:applying": {}, "f:latestHash": {}}}
                }]
            },
            "spec": {
                "concurrency": 2,
                "nodeSelector": {"matchExpressions": [
                    {"key": "node-role.kubernetes.io/control-plane", "operator": "In", "values": ["true"]}
                ]},
                "serviceAccountName": "system-upgrade",
                "cordon": true,
                "upgrade": {"image": "rancher/k3s-upgrade"},
                "channel": "https://update.k3s.io/v1-release/channels/stable"
            },
            "status": {
                "latestVersion": "v1.30.1-k3s1",
                "latestHash": "abc",
                "applying": ["n1"],
                "conditions": [{"type": "LatestResolved", "status": "True",
                                "lastUpdateTime": "2026-11-27T10:00:01Z", "reason": "Channel"}]
            }
        })
    }

    /// The Plan the caches kept before: decoded whole, its managedFields dropped.
    fn pruned(v: &Value) -> Result<Plan, String> {
        let mut plan: Plan = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
        plan.metadata.managed_fields = None;
        Ok(plan)
    }

    fn lean(v: &Value) -> Result<Plan, String> {
        (serde_json::from_value::<LeanPlan>(v.clone()))
            .map(|p| p.0)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_lean_plan_is_the_plan_without_its_managed_fields() {
        let full = full_plan();
        let plan = lean(&full).expect("a Plan");
        assert_eq!(Ok(plan.clone()), pruned(&full));
        assert_eq!(plan.spec.concurrency, Some(2));
        assert_eq!(
            plan.status.and_then(|s| s.latest_hash).as_deref(),
            Some("abc")
        );
    }

    #[test]
    fn plans_missing_parts_decode_or_fail_as_whole_plans_do() {
        let full = full_plan();
        let mut cases = Vec::new();
        for drop in ["metadata", "spec", "status"] {
            let mut v = full.clone();
            v.as_object_mut().expect("an object").remove(drop);
            cases.push(v);
        }
        for field in ["labels", "annotations", "finalizers", "managedFields"] {
            let mut v = full.clone();
            v["metadata"][field] = Value::Null;
            cases.push(v);
        }
        let mut bad = full.clone();
        bad["spec"]["concurrency"] = json!("two");
        cases.push(bad);
        for case in cases {
            assert_eq!(lean(&case).is_ok(), pruned(&case).is_ok(), "{case}");
            if let Ok(plan) = pruned(&case) {
                assert_eq!(lean(&case), Ok(plan), "{case}");
            }
        }
    }
}
