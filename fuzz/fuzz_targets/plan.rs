//! A Plan file as `slipway validate` and `slipway render` read it: YAML documents decoded,
//! checked against the CRD's schema and CEL rules and the controller's own checks, then every
//! Plan that decodes rendered (resolve, hash, selection, Jobs) over three nodes.
#![no_main]

use std::collections::BTreeMap;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use slipway::node::NodeInfo;
use slipway::plan::api::Plan;
use slipway::plan::core::ChannelAnswer;
use slipway::plan::core::config::JobConfig;
use slipway::plan::core::lint::{self, Input, SchemaChecker};
use slipway::plan::core::render::{self, RenderInput};

fn nodes() -> Vec<NodeInfo> {
    ["cp", "w1", "w2"]
        .iter()
        .map(|n| NodeInfo {
            name: n.to_string(),
            uid: format!("uid-{n}"),
            labels: [
                ("kubernetes.io/hostname".to_string(), n.to_string()),
                ("kubernetes.io/os".to_string(), "linux".to_string()),
            ]
            .into(),
            ready: true,
            boot_id: "b1".into(),
            ..Default::default()
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(docs) = lint::parse_documents(text) else {
        return;
    };
    let now: jiff::Timestamp = "2026-11-22T10:00:00Z".parse().expect("a constant time");
    let inputs: Vec<Input<'_>> = docs
        .iter()
        .map(|doc| Input {
            file: "fuzz.yaml",
            doc,
        })
        .collect();
    // The checker compiles the CRD's schema and CEL rules: once, not per input.
    static CHECKER: OnceLock<SchemaChecker> = OnceLock::new();
    let _ = lint::lint(CHECKER.get_or_init(SchemaChecker::new), &inputs, now);
    for doc in &docs {
        let Ok(plan) = serde_json::from_value::<Plan>(doc.value.clone()) else {
            continue;
        };
        let input = RenderInput {
            plan,
            nodes: nodes(),
            secrets: BTreeMap::new(),
            channel: Some(ChannelAnswer::Version("v1.30.1+k3s1".into())),
            now,
            controller_name: "system-upgrade-controller".into(),
            job_config: JobConfig::default(),
        };
        let _ = render::render(&input);
    }
});
