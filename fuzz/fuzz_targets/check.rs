//! Health checks (`spec.healthChecks[].expr`): a CEL expression (the input's first line) compiled,
//! its worst case estimated, and, when affordable, evaluated over an object (the rest, as JSON).
//! A check must never panic, and never run long: the cost budget is what keeps it short.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slipway::common::check::{self, CheckRead, HealthCheckSpec};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (expr, object) = text.split_once('\n').unwrap_or((text, "{}"));
    let spec = HealthCheckSpec {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: Some("gate".into()),
        expr: expr.into(),
        ..Default::default()
    };
    let _ = check::validate(std::slice::from_ref(&spec), "spec.healthChecks");
    let object = serde_json::from_str(object).unwrap_or_else(|_| serde_json::json!({}));
    let _ = check::evaluate(&spec, &CheckRead::Objects(vec![object]));
});
