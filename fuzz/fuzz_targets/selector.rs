//! A Plan's `nodeSelector` (any JSON a client can send): compiled as SUC's selector, printed,
//! matched; and its keys and values checked as label keys and values.
#![no_main]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use libfuzzer_sys::fuzz_target;
use slipway::common::selector::{self, Selector};
use slipway::plan::core::selection;

fuzz_target!(|data: &[u8]| {
    let Ok(selector) = serde_json::from_slice::<LabelSelector>(data) else {
        if let Ok(text) = std::str::from_utf8(data) {
            let _ = selector::label_key_errors(text);
            let _ = selector::label_value_errors(text);
        }
        return;
    };
    let labels: BTreeMap<String, String> = selector.match_labels.clone().unwrap_or_default();
    if let Ok(compiled) = Selector::from_label_selector(Some(&selector)) {
        let _ = compiled.to_string();
        let _ = compiled.matches(&labels);
        let _ = compiled.matches(&BTreeMap::new());
    }
    let _ = selection::drain_pod_selector(Some(&selector));
});
