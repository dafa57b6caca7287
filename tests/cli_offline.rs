//! The offline commands through the binary: exit codes, one line per problem, stdin, help.

use std::io::Write;
use std::process::{Command, Stdio};

fn slipway(args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_slipway"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run slipway");
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).expect("stdin");
    }
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_examples_pass() {
    let (code, out, err) = slipway(&["validate", "examples/"], None);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.ends_with("0 errors, 7 warnings\n"), "{out}");
}

/// The corpus's verdicts are the cluster's, where its Plans' Secrets do not exist: `--strict`.
#[test]
fn every_broken_plan_of_the_corpus_gets_an_error_line_naming_it() {
    let (code, out, _) = slipway(&["validate", "--strict", "tests/lint/corpus"], None);
    assert_eq!(code, 1);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/lint/corpus");
    for entry in std::fs::read_dir(dir).expect("corpus") {
        let path = entry.expect("entry").path();
        let name = path.file_stem().and_then(|s| s.to_str()).expect("name");
        let errors = out
            .lines()
            .filter(|l| l.contains(&format!("plan/{name}: ")) && l.contains(": error: "))
            .count();
        if name.starts_with("valid") {
            assert_eq!(errors, 0, "{name}: {out}");
        } else {
            assert!(errors >= 1, "{name}: {out}");
        }
    }
}

#[test]
fn stdin_json_and_unreadable_input() {
    let plan = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/lint/corpus/api-drain-both.yaml"),
    )
    .expect("corpus file");
    let (code, out, _) = slipway(&["validate", "-o", "json", "-"], Some(&plan));
    assert_eq!(code, 1);
    let report: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report["errors"], 1, "{out}");
    assert_eq!(report["findings"][0]["field"], "spec.drain");
    assert_eq!(report["findings"][0]["source"], "schema");
    let (code, _, err) = slipway(&["validate", "-"], Some("a: [\n"));
    assert_eq!(code, 2);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("<stdin>:1: not YAML"), "{err}");
    let (code, _, err) = slipway(&["render", "no-such-file.yaml", "--nodes", "x"], None);
    assert_eq!(code, 1);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no-such-file.yaml"), "{err}");
}

#[test]
fn every_tool_has_help_with_an_example() {
    for command in ["validate", "render", "resolve", "status"] {
        let (code, out, _) = slipway(&[command, "--help"], None);
        assert_eq!(code, 0);
        assert!(
            out.contains(&format!("Examples:\n  slipway {command}")),
            "{command}: {out}"
        );
    }
}

/// A file's Secret counts as the API server stores it: written with `stringData` or with `data`,
/// `hash`, `resolve` and `render` give the same latestHash, and another than with no Secret data.
#[test]
fn a_secret_hashes_the_same_written_with_string_data_or_data() {
    let dir = std::env::temp_dir().join(format!("slipway-cli-secret-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let plan = "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata:\n  name: p\n  namespace: system-upgrade\nspec:\n  concurrency: 1\n  nodeSelector: {}\n  version: v1\n  secrets:\n  - name: s\n    path: /s\n  upgrade:\n    image: busybox:1\n";
    let node = "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n";
    let secrets = [
        "stringData:\n  run.sh: |\n    echo hi\n",
        "type: Opaque\ndata:\n  run.sh: ZWNobyBoaQo=\n",
        "data:\n  run.sh: b2xkCg==\nstringData:\n  run.sh: |\n    echo hi\n",
        "data: {}\n",
    ];
    let mut hashes = Vec::new();
    for (i, body) in secrets.iter().enumerate() {
        let secret = format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\n{body}");
        let (p, s, n) = (
            dir.join("plan.yaml"),
            dir.join(format!("s{i}.yaml")),
            dir.join("nodes.yaml"),
        );
        std::fs::write(&p, plan).expect("write");
        std::fs::write(&s, &secret).expect("write");
        std::fs::write(&n, node).expect("write");
        let (p, s, n) = (
            p.display().to_string(),
            s.display().to_string(),
            n.display().to_string(),
        );
        let (code, hash, err) = slipway(&["hash", "--plan", &p, "--secret", &s], None);
        assert_eq!(code, 0, "{err}");
        let (code, resolved, err) = slipway(&["resolve", &p, "--secret", &s], None);
        assert_eq!(code, 0, "{err}");
        assert!(
            resolved.contains(&format!("latestHash:    {}", hash.trim())),
            "{resolved}"
        );
        let (code, summary, err) = slipway(
            &["render", &p, "--secret", &s, "--nodes", &n, "--summary"],
            None,
        );
        assert_eq!(code, 0, "{err}");
        assert!(
            summary.contains(&format!("latestHash {}", hash.trim())),
            "{summary}"
        );
        hashes.push(hash.trim().to_string());
    }
    assert_eq!(hashes[0], hashes[1]);
    assert_eq!(hashes[0], hashes[2]);
    assert_ne!(hashes[0], hashes[3]);
    let _ = std::fs::remove_dir_all(dir);
}

/// A Plan whose Secret is not in the input passes with a warning (in Git, Secrets are sealed or
/// external); `--strict` makes it an error. With the Secret in the input, both pass clean.
#[test]
fn a_missing_secret_is_a_warning_unless_strict() {
    let plan = "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata:\n  name: p\nspec:\n  concurrency: 1\n  nodeSelector:\n    matchLabels:\n      pool: a\n  version: v1\n  secrets:\n  - name: sealed\n    path: /s\n  upgrade:\n    image: busybox:1\n";
    let (code, out, err) = slipway(&["validate", "-"], Some(plan));
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(
            "<stdin>:11: plan/p: spec.secrets: warning: secret \"sealed\" not found in the input"
        ),
        "{out}"
    );
    assert!(out.ends_with("0 errors, 1 warning\n"), "{out}");
    let (code, out, err) = slipway(&["validate", "--strict", "-o", "json", "-"], Some(plan));
    assert_eq!(code, 1, "{out}{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report["errors"], 1, "{out}");
    assert_eq!(report["findings"][0]["severity"], "error", "{out}");
    assert_eq!(report["findings"][0]["source"], "controller", "{out}");
    let with_secret =
        format!("{plan}---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: sealed\n");
    for strict in [&["validate", "-"][..], &["validate", "--strict", "-"]] {
        let (code, out, err) = slipway(strict, Some(&with_secret));
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.ends_with("0 errors, 0 warnings\n"), "{out}");
    }
}
