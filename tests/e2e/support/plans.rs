//! Reading and waiting on Plans.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use slipway::plan::api::{Plan, PlanCondition};

use super::controller::ControllerProcess;

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
    wait_until(
        api,
        name,
        &format!("plan {name} to complete"),
        timeout,
        is_complete,
    )
    .await
}

/// Waits up to `timeout` (saying `what`) until `done` holds for the Plan `name`, and returns it;
/// on timeout the panic shows the Plan's last status.
pub async fn wait_until(
    api: &Api<Plan>,
    name: &str,
    what: &str,
    timeout: Duration,
    done: impl Fn(&Plan) -> bool,
) -> Plan {
    super::wait_for(what, timeout, || async {
        let p = api.get(name).await?;
        if done(&p) {
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

/// Waits until the Plan's `Complete` condition has `reason`.
pub async fn wait_reason(api: &Api<Plan>, name: &str, reason: &str, timeout: Duration) -> Plan {
    wait_until(api, name, &format!("{name}: {reason}"), timeout, |p| {
        condition_reason(p, "Complete").as_deref() == Some(reason)
    })
    .await
}

/// The message of the Plan's `Complete` condition ("" without one).
pub fn complete_message(plan: &Plan) -> String {
    condition(plan, "Complete")
        .and_then(|c| c.message.clone())
        .unwrap_or_default()
}

/// Has `controller` decide once more on the Plan of the Job `job` and waits until it has: an
/// annotation of the Job that nothing reads changes, which triggers a reconcile of its Plan.
/// What the controller has not done by then, it decided not to do.
pub async fn settled(controller: &ControllerProcess, jobs: &Api<Job>, job: &str) {
    controller
        .reconciled_after("plan", async {
            let poke =
                json!({"metadata": {"annotations": {"slipway.test/poke": super::random_uuid()}}});
            jobs.patch(job, &PatchParams::default(), &Patch::Merge(&poke))
                .await
                .unwrap_or_else(|e| panic!("annotate the Job {job}: {e}"));
        })
        .await
}
