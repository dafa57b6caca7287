//! Reading and waiting on Plans.

use std::time::Duration;

use kube::Api;
use slipway::plan::api::{Plan, PlanCondition};

/// A Plan from a YAML literal of the test (panics if it does not parse).
pub fn plan_from_yaml(yaml: &str) -> Plan {
    serde_saphyr::from_str(yaml).expect("test plan parses")
}

/// The Plan's condition of type `type_` (`Complete`, `Validated`, `LatestResolved`...).
pub fn condition<'a>(plan: &'a Plan, type_: &str) -> Option<&'a PlanCondition> {
    plan.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// The reason of the condition of type `type_`, if the Plan has that condition.
pub fn condition_reason(plan: &Plan, type_: &str) -> Option<String> {
    condition(plan, type_).map(|c| c.reason.clone().unwrap_or_default())
}

/// `Complete` is `True`.
pub fn is_complete(plan: &Plan) -> bool {
    condition(plan, "Complete").is_some_and(|c| c.status == "True")
}

/// Waits up to `timeout` for the Plan `name` to be complete, and returns it.
pub async fn wait_complete(api: &Api<Plan>, name: &str, timeout: Duration) -> Plan {
    super::wait_for(&format!("plan {name} to complete"), timeout, || async {
        let p = api.get(name).await?;
        if is_complete(&p) {
            Ok(p)
        } else {
            Err(anyhow::anyhow!(
                "status: {}",
                serde_json::to_string(&p.status)?
            ))
        }
    })
    .await
}
