//! Offline checks of the committed CRD, the examples and the CLI.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use slipway::plan::api::Plan;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn slipway(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_slipway"))
        .args(args)
        .output()
        .expect("run slipway");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every CRD of `crds/`, with the `slipway crd` argument that prints it.
const CRDS: [(&str, &str); 6] = [
    ("plans.upgrade.cattle.io", "plans"),
    (
        "nodemaintenances.nodemaintenance.medik8s.io",
        "nodemaintenances",
    ),
    ("rebootpolicies.slipway.dev", "rebootpolicies"),
    ("disruptionbudgets.slipway.dev", "disruptionbudgets"),
    ("nodeops.operator.kairos.io", "nodeops"),
    ("nodeopupgrades.operator.kairos.io", "nodeopupgrades"),
];

#[test]
fn every_committed_crd_is_what_slipway_crd_prints() {
    for (name, arg) in CRDS {
        let path = format!("crds/{name}.yaml");
        let committed = std::fs::read_to_string(repo().join(&path)).expect("read committed CRD");
        let (ok, printed, stderr) = slipway(&["crd", arg]);
        assert!(ok, "slipway crd {arg} failed: {stderr}");
        assert!(
            committed == printed,
            "{path} is stale: run `just crd` and commit the result"
        );
    }
    let (ok, printed, _) = slipway(&["crd"]);
    assert!(
        ok && printed.contains("name: plans.upgrade.cattle.io"),
        "the default"
    );
}

#[test]
fn crd_has_suc_names_columns_and_status() {
    let crd = slipway::plan::api::crd::plan_crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("plans.upgrade.cattle.io")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.kind, "Plan");
    assert_eq!(crd.spec.names.plural, "plans");
    let v = &crd.spec.versions[0];
    assert!(v.served && v.storage);
    assert!(
        v.subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    let columns: Vec<(String, String, Option<i32>)> = v
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.clone(), c.json_path.clone(), c.priority))
        .collect();
    assert_eq!(
        columns,
        vec![
            ("Image".into(), ".spec.upgrade.image".into(), None),
            ("Channel".into(), ".spec.channel".into(), None),
            ("Version".into(), ".spec.version".into(), None),
            (
                "Complete".into(),
                ".status.conditions[?(@.type=='Complete')].status".into(),
                None
            ),
            (
                "Message".into(),
                ".status.conditions[?(@.message!='')].message".into(),
                None
            ),
            ("Applying".into(), ".status.applying".into(), Some(10)),
        ]
    );
}

#[test]
fn crd_schema_carries_the_validation_rules() {
    let crd = serde_json::to_value(slipway::plan::api::crd::plan_crd()).expect("json");
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let spec = &schema["properties"]["spec"];
    let rules = |v: &Value| -> Vec<String> {
        v["x-kubernetes-validations"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| r["message"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(spec["required"], serde_json::json!(["upgrade"]));
    assert_eq!(
        spec["properties"]["upgrade"]["required"],
        serde_json::json!(["image"])
    );
    // What SUC checks in its controller stays off the installed CRD (tests/offline/suc_crd.rs):
    // the strict rules are opt-in. slipway's own fields carry theirs.
    for field in ["concurrency", "postCompleteDelay", "drain", "window"] {
        assert!(rules(&spec["properties"][field]).is_empty(), "spec.{field}");
    }
    // slipway's own fields carry value validations, no CEL (src/plan/api/crd.rs says why).
    let reboot = &spec["properties"]["reboot"]["properties"];
    assert_eq!(reboot["sentinelPath"]["pattern"], "^/.");
    assert_eq!(reboot["image"]["minLength"], 1);
    let failure = &spec["properties"]["failurePolicy"]["properties"];
    assert!(!failure["then"]["enum"].to_string().contains("Retry"));
    assert_eq!(failure["retries"]["minimum"].as_f64(), Some(0.0));
    assert!(rules(&spec["properties"]["reboot"]).is_empty());
    let days = &spec["properties"]["window"]["properties"]["days"];
    assert_eq!(days["minItems"], 1);
    assert_eq!(days["items"]["enum"][4], "1");
    let conditions = &schema["properties"]["status"]["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map");
    assert_eq!(
        conditions["x-kubernetes-list-map-keys"],
        serde_json::json!(["type"])
    );
}

fn example_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("examples"))
        .expect("examples/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 5, "expected the examples, found {files:?}");
    files
}

fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("read example");
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

#[test]
fn every_example_parses_and_round_trips_without_loss() {
    for path in example_files() {
        // Beside a Plan, an example may carry the RBAC it needs (a health check's read).
        for doc in documents(&path).into_iter().filter(|d| d["kind"] == "Plan") {
            let plan: Plan = serde_json::from_value(doc.clone())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let back = serde_json::to_value(&plan).expect("serialize");
            assert_eq!(back, doc, "{} does not round-trip", path.display());
        }
    }
}

#[test]
fn unknown_fields_survive_a_round_trip() {
    let doc = serde_json::json!({
        "apiVersion": "upgrade.cattle.io/v1",
        "kind": "Plan",
        "metadata": {"name": "p"},
        "spec": {
            "concurrency": 0,
            "futureField": {"a": [1, 2]},
            "upgrade": {"image": "x", "futureContainerField": true},
            "drain": {"timeout": 300000000000_i64, "newFlag": "y"},
            "window": {"days": ["mo"], "startTime": "1", "endTime": "2", "extra": 1},
            "secrets": [{"name": "s", "path": "p", "mystery": null}]
        },
        "status": {"applying": ["n1"], "somethingNew": "kept"}
    });
    let plan: Plan = serde_json::from_value(doc.clone()).expect("parse");
    assert_eq!(serde_json::to_value(&plan).expect("serialize"), doc);
}

#[test]
fn hash_subcommand_prints_the_suc_vector() {
    let (ok, out, err) = slipway(&[
        "hash",
        "--version",
        "v1.30.1-k3s1",
        "--service-account",
        "system-upgrade",
    ]);
    assert!(ok, "{err}");
    assert_eq!(
        out.trim(),
        "a71d41ca3e2c6b5a1d92efcb9449397b0115d7e83e52a5c0055c484e"
    );
    // `+` is munged first, as in status.latestVersion.
    let (_, plus, _) = slipway(&[
        "hash",
        "--version",
        "v1.30.1+k3s1",
        "--service-account",
        "system-upgrade",
    ]);
    assert_eq!(plus, out);
}

#[test]
fn hash_subcommand_reads_plans_and_secrets() {
    let dir = std::env::temp_dir().join(format!("slipway-hash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp");
    let plan = dir.join("plan.yaml");
    let secret = dir.join("secret.yaml");
    std::fs::write(
        &plan,
        "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata: {name: p}\nspec:\n  version: v1.30.1+k3s1\n  serviceAccountName: system-upgrade\n  secrets: [{name: creds, path: creds}]\n  upgrade: {image: x}\n",
    )
    .expect("write plan");
    std::fs::write(
        &secret,
        "apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\ntype: Opaque\ndata: {token: aGVsbG8=}\n",
    )
    .expect("write secret");
    let plan_s = plan.to_str().expect("utf8");
    let (ok, with_secret, err) = slipway(&[
        "hash",
        "--plan",
        plan_s,
        "--secret",
        secret.to_str().expect("utf8"),
    ]);
    assert!(ok, "{err}");
    assert_eq!(with_secret.trim().len(), 56);
    assert_ne!(
        with_secret.trim(),
        "a71d41ca3e2c6b5a1d92efcb9449397b0115d7e83e52a5c0055c484e"
    );
    let (ok, _, err) = slipway(&["hash", "--plan", plan_s]);
    assert!(!ok);
    assert!(err.contains(r#"secret "creds" not found"#), "{err}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn every_subcommand_has_help() {
    for sub in [
        vec!["--help"],
        vec!["crd", "--help"],
        vec!["hash", "--help"],
        vec!["run", "--help"],
    ] {
        let (ok, out, err) = slipway(&sub);
        assert!(ok, "{sub:?}: {err}");
        assert!(out.contains("Usage"), "{sub:?}: {out}");
    }
}

#[test]
fn the_reboot_examples_are_valid_reboot_policies_that_round_trip() {
    let dir = repo().join("examples/reboot");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("examples/reboot") {
        let path = entry.expect("entry").path();
        for doc in documents(&path) {
            let p: slipway::reboot_policy::api::RebootPolicy = serde_json::from_value(doc.clone())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            if let Err(e) = slipway::reboot_policy::core::read_spec(&p.spec, "busybox") {
                panic!("{}: {e}", path.display());
            }
            assert_eq!(serde_json::to_value(&p).expect("serialize"), doc);
            seen += 1;
        }
    }
    assert!(seen >= 2, "examples in {}", dir.display());
}

#[test]
fn the_maintenance_examples_are_node_maintenances_that_round_trip() {
    let dir = repo().join("examples/maintenance");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("examples/maintenance") {
        let path = entry.expect("entry").path();
        for doc in documents(&path) {
            let nm: slipway::maintenance::api::NodeMaintenance =
                serde_json::from_value(doc.clone())
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(!nm.spec.node_name.is_empty());
            assert_eq!(serde_json::to_value(&nm).expect("serialize"), doc);
            seen += 1;
        }
    }
    assert!(seen > 0, "no example in {}", dir.display());
}
