//! The offline commands through the binary: exit codes, one line per problem, stdin, help,
//! structured output, completions and man pages, the kubectl plugin's name and krew manifest.

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
            .join("tests/lint/corpus/strict-drain-both.yaml"),
    )
    .expect("corpus file");
    let (code, out, _) = slipway(&["validate", "-o", "json", "-"], Some(&plan));
    assert_eq!(code, 1);
    let report: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(report["errors"], 1, "{out}");
    let error = (report["findings"].as_array().into_iter().flatten())
        .find(|f| f["severity"] == "error")
        .expect("an error");
    assert_eq!(error["field"], "spec.drain");
    assert_eq!(error["source"], "strict");
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
    for command in [
        "validate",
        "render",
        "resolve",
        "status",
        "completions",
        "man",
    ] {
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

/// `-o json` and `-o yaml` give the same document wherever the output is structured; text stays
/// the default.
#[test]
fn structured_output_as_json_and_yaml() {
    let same = |args: &[&str]| -> serde_json::Value {
        let (code, json, err) = slipway(&[args, &["-o", "json"]].concat(), None);
        assert!(code == 0 || code == 1, "{err}");
        let (_, yaml, err) = slipway(&[args, &["-o", "yaml"]].concat(), None);
        let from_json: serde_json::Value = serde_json::from_str(&json).expect("json");
        let from_yaml: serde_json::Value =
            serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("{e}: {yaml} {err}"));
        assert_eq!(from_json, from_yaml, "{args:?}");
        from_json
    };
    let report = same(&["validate", "examples/"]);
    assert_eq!(report["errors"], 0);
    assert_eq!(report["warnings"], 7);
    let resolved = same(&["resolve", "examples/os-packages.yaml"]);
    let (_, text, _) = slipway(&["resolve", "examples/os-packages.yaml"], None);
    assert!(text.starts_with("plan:          os-packages\n"), "{text}");
    let hash = resolved["latestHash"].as_str().expect("latestHash");
    assert!(text.contains(&format!("latestHash:    {hash}\n")), "{text}");
    assert_eq!(resolved["from"], "spec.version");
    let crd = same(&["crd", "rebootpolicies"]);
    assert_eq!(crd["metadata"]["name"], "rebootpolicies.slipway.dev");
}

/// render prints its objects as a YAML stream or one JSON List with the same objects in the same
/// order; the summary table is text only.
#[test]
fn render_objects_as_yaml_or_a_json_list() {
    let dir = std::env::temp_dir().join(format!("slipway-cli-render-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let nodes = dir.join("nodes.yaml");
    std::fs::write(
        &nodes,
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Node\n  metadata:\n    name: n1\n    labels: {kubernetes.io/hostname: n1, node-role.kubernetes.io/control-plane: \"true\"}\n  status:\n    conditions: [{type: Ready, status: \"True\"}]\n- apiVersion: v1\n  kind: Node\n  metadata:\n    name: n2\n    labels: {kubernetes.io/hostname: n2, node-role.kubernetes.io/control-plane: \"true\"}\n  status:\n    conditions: [{type: Ready, status: \"True\"}]\n",
    )
    .expect("write nodes");
    let nodes = nodes.display().to_string();
    let base = [
        "render",
        "examples/k3s-stable.yaml",
        "--nodes",
        &nodes,
        "--version",
        "v1.34.2+k3s1",
        "--uid",
        "3c0e3b0a-9c2e-4d7e-a1d5-6f0c8f6d2b11",
    ];
    let (code, yaml, err) = slipway(&base, None);
    assert_eq!(code, 0, "{err}");
    let (code, json, err) = slipway(&[&base[..], &["-o", "json"]].concat(), None);
    assert_eq!(code, 0, "{err}");
    let list: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(list["kind"], "List");
    let from_yaml: Vec<serde_json::Value> = serde_saphyr::from_multiple(&yaml).expect("yaml");
    assert_eq!(from_yaml.len(), 2, "{yaml}");
    assert_eq!(list["items"].as_array(), Some(&from_yaml));
    assert!(from_yaml.iter().all(|o| o["kind"] == "Job"), "{yaml}");
    let (code, _, err) = slipway(&[&base[..], &["--summary", "-o", "json"]].concat(), None);
    assert_eq!(code, 2, "--summary is a table: {err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// `--context` picks a context of the kubeconfig; one it does not have is one line naming it.
#[test]
fn an_unknown_context_is_one_line() {
    let dir = std::env::temp_dir().join(format!("slipway-cli-context-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kc = dir.join("kubeconfig");
    std::fs::write(
        &kc,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: \"https://127.0.0.1:1\"}\nusers:\n- name: u\n  user: {token: t}\ncontexts:\n- name: here\n  context: {cluster: c, user: u}\ncurrent-context: here\n",
    )
    .expect("write kubeconfig");
    let kc = kc.display().to_string();
    let plan = "examples/k3s-stable.yaml";
    for args in [
        &["status", "--kubeconfig", &kc, "--context", "elsewhere"][..],
        &[
            "render",
            plan,
            "--version",
            "v1",
            "--kubeconfig",
            &kc,
            "--context",
            "elsewhere",
        ],
        &[
            "resolve",
            plan,
            "--kubeconfig",
            &kc,
            "--context",
            "elsewhere",
        ],
    ] {
        let (code, _, err) = slipway(args, None);
        assert_eq!(code, 1, "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("context \"elsewhere\""), "{args:?}: {err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The commands `slipway --help` lists (without `help`).
fn commands() -> Vec<String> {
    let (code, help, _) = slipway(&["--help"], None);
    assert_eq!(code, 0);
    let names: Vec<String> = help
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| *n != "help")
        .map(str::to_string)
        .collect();
    assert!(names.len() >= 10, "{help}");
    names
}

/// Completion scripts for every shell name every command; bash's parses and registers itself.
#[test]
fn completions_cover_every_command() {
    let commands = commands();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let (code, script, err) = slipway(&["completions", shell], None);
        assert_eq!(code, 0, "{shell}: {err}");
        for c in &commands {
            assert!(script.contains(c.as_str()), "{shell}: no {c}");
        }
        // A flag of a command, not only the command names.
        assert!(script.contains("strict"), "{shell}");
    }
    let (_, script, _) = slipway(&["completions", "bash"], None);
    let out = Command::new("bash")
        .args(["-c", "eval \"$1\" && complete -p slipway", "bash", &script])
        .output()
        .expect("run bash");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("_slipway"));
}

/// A roff page for slipway listing every command, one page per command in `--dir`, each with the
/// sections a man page has and the command's own options.
#[test]
fn man_pages_for_slipway_and_every_command() {
    let commands = commands();
    let (code, page, err) = slipway(&["man"], None);
    assert_eq!(code, 0, "{err}");
    assert!(page.contains(".TH slipway 1"), "{page}");
    for c in &commands {
        assert!(
            page.contains(&format!("slipway\\-{}(1)", c.replace('-', "\\-"))),
            "{c}: {page}"
        );
    }
    let (code, page, err) = slipway(&["man", "validate"], None);
    assert_eq!(code, 0, "{err}");
    assert!(page.contains(".TH slipway-validate 1"), "{page}");
    assert!(page.contains("\\fB\\-\\-strict\\fR"), "{page}");
    let (code, _, err) = slipway(&["man", "nope"], None);
    assert_eq!(code, 1);
    assert!(err.contains("validate"), "{err}");

    let dir = std::env::temp_dir().join(format!("slipway-cli-man-{}", std::process::id()));
    let (code, written, err) = slipway(&["man", "--dir", &dir.display().to_string()], None);
    assert_eq!(code, 0, "{err}");
    let mut expected: Vec<String> = std::iter::once("slipway.1".to_string())
        .chain(commands.iter().map(|c| format!("slipway-{c}.1")))
        .collect();
    expected.sort();
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("the man directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, expected);
    assert_eq!(written.lines().count(), expected.len(), "{written}");
    for f in &files {
        let page = std::fs::read_to_string(dir.join(f)).expect("page");
        for section in [".TH ", ".SH NAME", ".SH SYNOPSIS", ".SH OPTIONS"] {
            assert!(page.contains(section), "{f}: no {section}");
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Run as `kubectl-slipway` (how kubectl finds the plugin), usage and help say `kubectl slipway`.
#[test]
fn as_a_kubectl_plugin_it_names_itself_so() {
    let dir = std::env::temp_dir().join(format!("slipway-cli-plugin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let plugin = dir.join("kubectl-slipway");
    let _ = std::fs::remove_file(&plugin);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_slipway"), &plugin).expect("symlink");
    let out = Command::new(&plugin)
        .args(["status", "--help"])
        .output()
        .expect("run the plugin");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        help.contains("Usage: kubectl slipway status [OPTIONS]"),
        "{help}"
    );
    let out = Command::new(&plugin).arg("nope").output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Usage: kubectl slipway <COMMAND>"), "{err}");
    let (_, help, _) = slipway(&["status", "--help"], None);
    assert!(help.contains("Usage: slipway status [OPTIONS]"), "{help}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The krew manifest template: a Plugin named slipway at Cargo.toml's version, whose every
/// platform installs the `slipway` binary from its archive, and whose only placeholders are the
/// release archive's URL and sha256.
#[test]
fn the_krew_manifest_template() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("plugins/krew/slipway.yaml");
    let text = std::fs::read_to_string(&path).expect("plugins/krew/slipway.yaml");
    let m: serde_json::Value = serde_saphyr::from_str(&text).expect("YAML");
    assert_eq!(
        m["apiVersion"],
        "krew.googlecontainertools.github.com/v1alpha2"
    );
    assert_eq!(m["kind"], "Plugin");
    assert_eq!(m["metadata"]["name"], "slipway");
    let spec = &m["spec"];
    assert_eq!(
        spec["version"],
        format!("v{}", env!("CARGO_PKG_VERSION")),
        "spec.version follows Cargo.toml"
    );
    let short = spec["shortDescription"].as_str().expect("shortDescription");
    assert!(!short.is_empty() && short.len() <= 50, "{short}");
    let description = spec["description"].as_str().expect("description");
    // The commands the description shows exist.
    let (_, help, _) = slipway(&["--help"], None);
    for line in description
        .lines()
        .filter_map(|l| l.trim().strip_prefix("kubectl slipway "))
    {
        let command = line.split_whitespace().next().expect("a command");
        assert!(help.contains(&format!("\n  {command} ")), "{command}");
    }
    let platforms = spec["platforms"].as_array().expect("platforms");
    assert!(!platforms.is_empty());
    let placeholder = regex::Regex::new(r"^@(URI|SHA256)_[A-Z0-9_]+@$").expect("regex");
    let mut placeholders = Vec::new();
    for p in platforms {
        let labels = &p["selector"]["matchLabels"];
        let (os, arch) = (labels["os"].as_str(), labels["arch"].as_str());
        let suffix = format!("{}_{}", os.expect("os"), arch.expect("arch")).to_uppercase();
        assert_eq!(p["uri"], format!("@URI_{suffix}@"));
        assert_eq!(p["sha256"], format!("@SHA256_{suffix}@"));
        placeholders.extend([p["uri"].clone(), p["sha256"].clone()]);
        assert_eq!(p["bin"], "slipway");
        let files = p["files"].as_array().expect("files");
        assert!(
            files
                .iter()
                .any(|f| f["from"] == "slipway" && f["to"] == "."),
            "{files:?}"
        );
    }
    assert!(
        placeholders
            .iter()
            .all(|p| p.as_str().is_some_and(|s| placeholder.is_match(s)))
    );
    // No other placeholder anywhere.
    assert_eq!(text.matches("\"@").count(), placeholders.len(), "{text}");
}

/// Health checks: an expression that does not compile is an error naming the field; a check on a
/// kind the health checks' account cannot read is a warning, gone once the input carries an
/// aggregated ClusterRole that grants the read.
#[test]
fn health_checks_are_compiled_and_their_reads_checked_offline() {
    let plan = |expr: &str| {
        format!(
            "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata:\n  name: p\nspec:\n  concurrency: 1\n  nodeSelector:\n    matchLabels:\n      pool: a\n  version: v1\n  upgrade:\n    image: busybox:1\n  healthChecks:\n  - apiVersion: ceph.rook.io/v1\n    kind: CephCluster\n    namespace: rook-ceph\n    name: rook-ceph\n    expr: \"{expr}\"\n"
        )
    };
    let (code, out, _) = slipway(&["validate", "-"], Some(&plan("status.ceph.health ==")));
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            ":18: plan/p: spec.healthChecks.expr: error: spec.healthChecks[0].expr does not compile"
        ),
        "{out}"
    );
    let good = plan("status.ceph.health == 'HEALTH_OK'");
    let (code, out, _) = slipway(&["validate", "-"], Some(&good));
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("health check CephCluster rook-ceph/rook-ceph: no ClusterRole of the input labelled slipway.dev/aggregate-to-health-checks=true lets the health checks' account get cephclusters"), "{out}");
    let role = "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: ceph-health\n  labels:\n    slipway.dev/aggregate-to-health-checks: \"true\"\nrules:\n- apiGroups: [ceph.rook.io]\n  resources: [cephclusters]\n  verbs: [get]\n";
    let (code, out, _) = slipway(&["validate", "-"], Some(&format!("{good}{role}")));
    assert_eq!(code, 0, "{out}");
    assert!(out.ends_with("0 errors, 0 warnings\n"), "{out}");
}

/// render shows a Plan's hooks where the controller runs them: the pre hook's Job alone in the
/// first batch, the post hook's after the last node.
#[test]
fn render_shows_the_hooks_around_the_nodes() {
    let plan = "apiVersion: upgrade.cattle.io/v1\nkind: Plan\nmetadata: {name: k3s, namespace: system-upgrade, uid: u1}\nspec:\n  concurrency: 1\n  version: v1.30.1+k3s1\n  nodeSelector: {matchLabels: {pool: a}}\n  upgrade: {image: rancher/k3s-upgrade}\n  hooks:\n    pre:\n      template:\n        spec:\n          containers: [{name: snap, image: rancher/k3s, command: [k3s, etcd-snapshot, save]}]\n    post:\n      template:\n        spec:\n          containers: [{name: notify, image: curlimages/curl}]\n";
    let dir = std::env::temp_dir().join(format!("slipway-cli-hooks-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let nodes = dir.join("nodes.yaml");
    std::fs::write(
        &nodes,
        "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: n1, labels: {pool: a, kubernetes.io/hostname: n1}}}\n- {apiVersion: v1, kind: Node, metadata: {name: n2, labels: {pool: a, kubernetes.io/hostname: n2}}}\n",
    )
    .expect("write nodes");
    let nodes = nodes.display().to_string();
    let (code, out, err) = slipway(&["render", "-", "--nodes", &nodes, "--summary"], Some(plan));
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[2].starts_with("(pre hook)   1      k3s-pre-hook-"),
        "{out}"
    );
    assert!(
        lines[5].starts_with("(post hook)  4      k3s-post-hook-"),
        "{out}"
    );
    let (code, json, err) = slipway(
        &["render", "-", "--nodes", &nodes, "-o", "json"],
        Some(plan),
    );
    assert_eq!(code, 0, "{err}");
    let list: serde_json::Value = serde_json::from_str(&json).expect("json");
    let first = &list["items"][0];
    assert_eq!(
        first["metadata"]["labels"]["slipway.dev/hook"], "pre",
        "{json}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
