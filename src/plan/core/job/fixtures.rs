//! The Plans, nodes and accessors that the tests of the Job's modules share.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Container, PodSpec, Secret};
use kube::api::ObjectMeta;

use super::{RenderError, render_job};
use crate::node::NodeInfo;
use crate::plan::api::{Plan, PlanStatus, labels};
use crate::plan::core::config::JobConfig;
use crate::plan::core::settings::PlanSettings;

pub(super) const HASH: &str = "a71d41ca3e2c6b5a1d92efcb9449397b0115d7e83e52a5c0055c484e";
pub(super) const VERSION: &str = "v1.30.1-k3s1";

pub(super) fn plan(spec_yaml: &str) -> Plan {
    let yaml = format!(
        "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata:\n  name: k3s-server\n  namespace: system-upgrade\n  uid: plan-uid\nspec:\n{}",
        spec_yaml
            .lines()
            .map(|l| format!("  {l}\n"))
            .collect::<String>()
    );
    let mut p: Plan = serde_saphyr::from_str(&yaml).expect("test plan parses");
    p.status = Some(PlanStatus {
        latest_version: Some(VERSION.into()),
        latest_hash: Some(HASH.into()),
        ..Default::default()
    });
    p
}

pub(super) fn basic() -> Plan {
    plan("concurrency: 1\nupgrade:\n  image: rancher/k3s-upgrade\n")
}

pub(super) fn node(name: &str) -> NodeInfo {
    NodeInfo {
        name: name.into(),
        uid: format!("uid-{name}"),
        labels: BTreeMap::from([(labels::HOSTNAME.to_string(), name.to_string())]),
        ..Default::default()
    }
}

pub(super) fn windows_node() -> NodeInfo {
    let mut n = node("win-1");
    n.labels.insert(labels::OS.into(), "windows".into());
    n
}

/// The Plan's settings as the controller reads them, every Secret it names present.
pub(super) fn settings_of<'a>(p: &'a Plan, config: &JobConfig) -> PlanSettings<'a> {
    let secrets = (p.spec.secrets.iter().flatten())
        .map(|s| {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(s.name.clone()),
                    ..Default::default()
                },
                ..Default::default()
            };
            (s.name.clone(), secret)
        })
        .collect();
    PlanSettings::read(p, &secrets, config).expect("a valid test plan")
}

/// The Job of `p` on `n`, for the controller `c`.
pub(super) fn render_on(p: &Plan, n: &NodeInfo, config: &JobConfig) -> Result<Job, RenderError> {
    render_job(p, &settings_of(p, config), n, "c", config)
}

pub(super) fn render(p: &Plan) -> Job {
    render_with(p, &JobConfig::default())
}

pub(super) fn render_with(p: &Plan, config: &JobConfig) -> Job {
    let settings = settings_of(p, config);
    render_job(
        p,
        &settings,
        &node("node-1"),
        "system-upgrade-controller",
        config,
    )
    .expect("renders")
}

pub(super) fn pod(job: &Job) -> &PodSpec {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec")
}

pub(super) fn init(job: &Job) -> &[Container] {
    pod(job).init_containers.as_deref().unwrap_or_default()
}

pub(super) fn container<'a>(job: &'a Job, name: &str) -> &'a Container {
    init(job)
        .iter()
        .chain(pod(job).containers.iter())
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no container {name}"))
}

pub(super) fn init_names(job: &Job) -> Vec<&str> {
    init(job).iter().map(|c| c.name.as_str()).collect()
}

pub(super) fn mounts(c: &Container) -> Vec<(&str, &str, Option<bool>)> {
    c.volume_mounts
        .iter()
        .flatten()
        .map(|m| (m.name.as_str(), m.mount_path.as_str(), m.read_only))
        .collect()
}

pub(super) fn env_names(c: &Container) -> Vec<&str> {
    c.env.iter().flatten().map(|e| e.name.as_str()).collect()
}

pub(super) fn volume_names(job: &Job) -> Vec<&str> {
    pod(job)
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect()
}

pub(super) fn args(c: &Container) -> Vec<&str> {
    c.args.iter().flatten().map(String::as_str).collect()
}

pub(super) fn with_deadline(secs: Option<i64>) -> Plan {
    let mut p = basic();
    p.spec.job_active_deadline_secs = secs;
    p
}
