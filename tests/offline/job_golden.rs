//! The Job slipway renders for SUC's README example, compared with a committed, hand-checked copy.
//!
//! Run with `SLIPWAY_BLESS=1` to rewrite `tests/golden/k3os-latest-job.json` after a deliberate
//! change, then review the diff against the SUC behaviour reference before committing it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use slipway::node::NodeInfo;
use slipway::plan::api::{Plan, PlanStatus, labels};
use slipway::plan::core::config::JobConfig;
use slipway::plan::core::hash::plan_latest_hash;
use slipway::plan::core::job::{compute_pod_template_hash, pod_template_hash, render_job};
use slipway::plan::core::selection::select_concurrent_nodes;
use slipway::plan::core::settings::PlanSettings;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn k3os_plan() -> Plan {
    let text =
        std::fs::read_to_string(repo().join("examples/k3os-latest.yaml")).expect("read example");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("example parses");
    let doc = docs.into_iter().find(|d| !d.is_null()).expect("one plan");
    let mut plan: Plan = serde_json::from_value(doc).expect("a Plan");
    plan.metadata.uid = Some("8d0e1b7c-0b4e-4c4f-9b7a-2f4c5e6d7a8b".into());
    let hash = plan_latest_hash(&plan, "v0.10.0", &BTreeMap::new()).expect("hash");
    plan.status = Some(PlanStatus {
        latest_version: Some("v0.10.0".into()),
        latest_hash: Some(hash),
        applying: vec!["k3os-node-1".into()],
        ..Default::default()
    });
    plan
}

fn k3os_node() -> NodeInfo {
    NodeInfo {
        name: "k3os-node-1".into(),
        uid: "2c9e3f1a-5d6b-4e7f-8a9b-0c1d2e3f4a5b".into(),
        labels: BTreeMap::from([
            (labels::HOSTNAME.to_string(), "k3os-node-1".to_string()),
            (labels::OS.to_string(), "linux".to_string()),
            ("k3os.io/mode".to_string(), "local".to_string()),
            (
                "plan.upgrade.cattle.io/k3os-latest".to_string(),
                "enabled".to_string(),
            ),
        ]),
        ready: true,
        ..Default::default()
    }
}

#[test]
fn k3os_example_renders_the_committed_job() {
    let plan = k3os_plan();
    let settings =
        PlanSettings::read(&plan, &BTreeMap::new(), &JobConfig::default()).expect("valid");
    let job = render_job(
        &plan,
        &settings,
        &k3os_node(),
        "system-upgrade-controller",
        &JobConfig::default(),
    )
    .expect("renders");
    let rendered = serde_json::to_string_pretty(&job).expect("json") + "\n";
    let golden = repo().join("tests/golden/k3os-latest-job.json");
    if std::env::var_os("SLIPWAY_BLESS").is_some() {
        std::fs::write(&golden, &rendered).expect("write golden");
    }
    let expected = std::fs::read_to_string(&golden).expect("read golden");
    assert!(
        rendered == expected,
        "the rendered Job differs from tests/golden/k3os-latest-job.json:\n{rendered}"
    );
    let template = &job.spec.as_ref().expect("spec").template;
    assert_eq!(
        pod_template_hash(&job),
        Some(compute_pod_template_hash(template).expect("hash").as_str())
    );
}

#[test]
fn k3os_example_selects_opted_in_non_live_nodes() {
    let plan = k3os_plan();
    let status = plan.status.as_ref().expect("status");
    let mut live = k3os_node();
    live.name = "live".into();
    live.uid = "uid-live".into();
    live.labels.insert(labels::HOSTNAME.into(), "live".into());
    live.labels.insert("k3os.io/mode".into(), "live".into());
    let mut not_opted_in = k3os_node();
    not_opted_in.name = "other".into();
    not_opted_in
        .labels
        .insert(labels::HOSTNAME.into(), "other".into());
    not_opted_in
        .labels
        .remove("plan.upgrade.cattle.io/k3os-latest");
    let nodes = vec![live, k3os_node(), not_opted_in];
    let selected = select_concurrent_nodes(
        plan.metadata.name.as_deref().expect("name"),
        plan.metadata.uid.as_deref().expect("uid"),
        plan.spec.node_selector.as_ref(),
        status.latest_hash.as_deref().expect("hash"),
        plan.spec.concurrency.unwrap_or(0),
        &status.applying,
        &nodes,
    )
    .expect("selects");
    let names: Vec<&str> = selected.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, vec!["k3os-node-1"]);
}
