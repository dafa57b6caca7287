//! slipway's NodeOp and NodeOpUpgrade CRDs against kairos-operator v0.1.3's, field by field.
//!
//! `tests/kairos/` holds kairos-operator's published CRDs as they are at its tag v0.1.3
//! (`config/crd/bases/operator.kairos.io_nodeops.yaml` and `..._nodeopupgrades.yaml` of
//! github.com/kairos-io/kairos-operator, Apache-2.0), vendored unchanged as test data. For NodeOp
//! and NodeOpUpgrade the test walks slipway's schema and kairos-operator's and compares, at every property, its type, format, default, minimum, the
//! required fields and the list and map types. Every difference must be one listed in
//! [`DELIBERATE`] (and in COMPATIBILITY.md): anything else fails.

use std::collections::BTreeSet;

use serde_json::Value;

const KAIROS_NODEOP: &str = include_str!("../kairos/operator.kairos.io_nodeops.yaml");
const KAIROS_NODEOPUPGRADE: &str = include_str!("../kairos/operator.kairos.io_nodeopupgrades.yaml");

/// What slipway's schema has that kairos-operator's has not, and why (COMPATIBILITY.md, NodeOp).
const DELIBERATE: &[(&str, &str)] = &[
    (
        ".spec.disruption: only in slipway",
        "what happens around each node's disruption (the drain's timeout), as in every kind",
    ),
    (
        ".status.message: only in slipway",
        "why the nodes not started yet wait",
    ),
    (
        ".status.conditions: only in slipway",
        "kstatus' Ready, Reconciling and Stalled, for GitOps tools",
    ),
    (
        ".status.observedGeneration: only in slipway",
        "the generation the status is of: kstatus reads a status as out of date by it",
    ),
    (
        ".status.prePull: only in slipway",
        "the pull of the images before the first node (spec.disruption.prePull)",
    ),
    (
        ".status.nodeStatuses.*.bootID: only in slipway",
        "the hand-off waits for another boot after a reboot",
    ),
    (
        ".status.nodeStatuses.*.since: only in slipway",
        "when the drain or the wait for the reboot started (their timeouts)",
    ),
    (
        ".spec.disruption: only in slipway",
        "what slipway does around each disruption (Alertmanager silences), the field of every kind",
    ),
];

/// The same for NodeOpUpgrade: its status copies the NodeOp's node entries.
const DELIBERATE_UPGRADE: &[(&str, &str)] = &[
    (
        ".status.conditions: only in slipway",
        "kstatus' Ready, Reconciling and Stalled, for GitOps tools",
    ),
    (
        ".status.observedGeneration: only in slipway",
        "the generation the status is of: kstatus reads a status as out of date by it",
    ),
    (
        ".status.nodeStatuses.*.bootID: only in slipway",
        "copied from the NodeOp",
    ),
    (
        ".status.nodeStatuses.*.since: only in slipway",
        "copied from the NodeOp",
    ),
];

/// The keys compared at every schema node.
const KEYS: [&str; 8] = [
    "type",
    "format",
    "default",
    "minimum",
    "required",
    "x-kubernetes-map-type",
    "x-kubernetes-list-type",
    "x-kubernetes-preserve-unknown-fields",
];

fn schema_of(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

fn required(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn compare(path: &str, theirs: &Value, ours: &Value, out: &mut Vec<String>) {
    for key in KEYS {
        let (t, o) = (&theirs[key], &ours[key]);
        let same = match key {
            "required" => required(t) == required(o),
            // YAML's `0` and the API's `0.0` are one number.
            _ if t.is_number() && o.is_number() => t.as_f64() == o.as_f64(),
            _ => t == o,
        };
        if !same {
            out.push(format!(
                "{path}: {key} is {o} in slipway, {t} in kairos-operator"
            ));
        }
    }
    let props = |v: &Value| -> BTreeSet<String> {
        v["properties"]
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    let (tp, op) = (props(theirs), props(ours));
    for name in tp.union(&op) {
        let sub = format!("{path}.{name}");
        match (tp.contains(name), op.contains(name)) {
            (true, true) => compare(
                &sub,
                &theirs["properties"][name],
                &ours["properties"][name],
                out,
            ),
            (true, false) => out.push(format!("{sub}: missing in slipway")),
            _ => out.push(format!("{sub}: only in slipway")),
        }
    }
    for nested in ["items", "additionalProperties"] {
        let (t, o) = (&theirs[nested], &ours[nested]);
        if t.is_object() || o.is_object() {
            let sub = match nested {
                "items" => format!("{path}[]"),
                _ => format!("{path}.*"),
            };
            compare(&sub, t, o, out);
        }
    }
}

/// Compares slipway's CRD `ours` with kairos-operator's `theirs` (YAML): names, scope, version,
/// then the schema field by field; every difference must be in `deliberate`, and every one listed
/// there must be found.
fn same_as_kairos(theirs: &str, ours: Value, deliberate: &[(&str, &str)]) {
    let theirs: Value = serde_saphyr::from_str(theirs).expect("kairos-operator's CRD");
    for key in ["group", "scope"] {
        assert_eq!(ours["spec"][key], theirs["spec"][key], "spec.{key}");
    }
    for key in ["kind", "listKind", "plural", "singular"] {
        assert_eq!(
            ours["spec"]["names"][key], theirs["spec"]["names"][key],
            "names.{key}"
        );
    }
    assert_eq!(ours["metadata"]["name"], theirs["metadata"]["name"]);
    let version = |v: &Value| v["spec"]["versions"][0]["name"].clone();
    assert_eq!(version(&ours), version(&theirs));
    assert!(ours["spec"]["versions"][0]["subresources"]["status"].is_object());

    let mut found = Vec::new();
    let (t, o) = (schema_of(&theirs), schema_of(&ours));
    for part in ["spec", "status"] {
        compare(
            &format!(".{part}"),
            &t["properties"][part],
            &o["properties"][part],
            &mut found,
        );
    }
    crate::deliberate::only_deliberate(&found, deliberate, "kairos-operator v0.1.3");
}

#[test]
fn the_nodeop_crd_is_kairos_operators_field_by_field() {
    let ours = serde_json::to_value(slipway::nodeop::api::nodeop_crd()).expect("slipway's CRD");
    same_as_kairos(KAIROS_NODEOP, ours, DELIBERATE);
}

#[test]
fn the_nodeopupgrade_crd_is_kairos_operators_field_by_field() {
    let ours =
        serde_json::to_value(slipway::nodeop::api::nodeopupgrade_crd()).expect("slipway's CRD");
    same_as_kairos(KAIROS_NODEOPUPGRADE, ours, DELIBERATE_UPGRADE);
}

#[test]
fn kairos_operators_examples_are_nodeops_that_round_trip() {
    for file in [
        "tests/kairos/kairos.io_v1alpha1_nodeop.yaml",
        "tests/kairos/nodeop-generateName-demo.yaml",
    ] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let text = std::fs::read_to_string(&path).expect("example");
        let doc: Value = serde_saphyr::from_str(&text).expect("YAML");
        let op: slipway::nodeop::api::NodeOp =
            serde_json::from_value(doc.clone()).expect("a NodeOp");
        assert_eq!(serde_json::to_value(&op).expect("JSON"), doc, "{file}");
    }
}
