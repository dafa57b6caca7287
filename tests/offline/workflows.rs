//! The GitHub Actions workflows (.github/workflows): actionlint (built from the Go module proxy by
//! tests/tools/actionlint/build.sh, cached) finds nothing in them, and the release workflow's work
//! is the project's own release script, which CI runs on every change (tests/release/check.sh).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// actionlint: `SLIPWAY_ACTIONLINT`, else what tests/tools/actionlint/build.sh builds.
fn actionlint() -> PathBuf {
    super::tool("SLIPWAY_ACTIONLINT", "tests/tools/actionlint/build.sh")
}

/// actionlint's findings on `files` (run in `dir`, a repository's root): empty when it has none.
fn lint(dir: &Path, files: &[PathBuf]) -> String {
    let out = Command::new(actionlint())
        .args(["-no-color", "-oneline"])
        .args(files)
        .current_dir(dir)
        .output()
        .expect("run actionlint");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match out.status.success() {
        true => String::new(),
        false => format!("{said} (exit {:?})", out.status.code()),
    }
}

fn workflows() -> Vec<PathBuf> {
    let dir = repo().join(".github/workflows");
    let mut files: Vec<PathBuf> = (std::fs::read_dir(&dir).expect(".github/workflows"))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "yml" || x == "yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn actionlint_finds_nothing_in_the_workflows_and_something_in_a_broken_one() {
    let files = workflows();
    assert!(!files.is_empty(), "no workflow");
    assert_eq!(lint(&repo(), &files), "", "actionlint");

    // The same release workflow with an expression that names no context: actionlint must say so.
    let dir = std::env::temp_dir().join(format!("slipway-workflows-{}", std::process::id()));
    std::fs::create_dir_all(dir.join(".github/workflows")).expect("temp dir");
    let release =
        std::fs::read_to_string(repo().join(".github/workflows/release.yml")).expect("release.yml");
    let broken = release.replace("secrets.GITHUB_TOKEN", "secret.GITHUB_TOKEN");
    assert_ne!(broken, release, "the release workflow reads a secret");
    let file = dir.join(".github/workflows/release.yml");
    std::fs::write(&file, broken).expect("write the broken copy");
    let said = lint(&dir, &[file]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        said.contains("secret"),
        "actionlint took a broken workflow: {said}"
    );
}

#[test]
fn a_tag_releases_with_the_release_script_that_ci_runs() {
    let text =
        std::fs::read_to_string(repo().join(".github/workflows/release.yml")).expect("release.yml");
    let workflow: Value = serde_saphyr::from_str(&text).expect("release.yml parses");
    assert_eq!(workflow["on"]["push"]["tags"], serde_json::json!(["v*"]));
    assert_eq!(
        workflow["permissions"]["contents"], "read",
        "least rights by default"
    );
    let steps = workflow["jobs"]["release"]["steps"]
        .as_array()
        .expect("the release job's steps");
    let runs: Vec<&str> = steps.iter().filter_map(|s| s["run"].as_str()).collect();
    assert!(
        runs.iter()
            .any(|r| r.trim() == r#"scripts/cut-release.sh "$GITHUB_REF_NAME""#),
        "a step runs the release script on the tag: {runs:?}"
    );
    // Every script a step names is in the repository and runnable; the check CI runs calls the
    // same release script.
    for script in (runs.iter().flat_map(|r| r.split_whitespace()))
        .map(|w| w.trim_matches(|c| c == '"' || c == '(' || c == '$'))
        .filter(|w| w.starts_with("scripts/") || w.starts_with("tests/"))
    {
        let script = script.split(')').next().unwrap_or(script);
        let path = repo().join(script);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path)
                .unwrap_or_else(|e| panic!("{script}: {e}"))
                .permissions(),
        );
        assert!(mode & 0o111 != 0, "{script} is not executable");
    }
    // It signs what it publishes, keyless: the job's OIDC identity, which installation.md's
    // `cosign verify` names.
    let release = steps
        .iter()
        .find(|s| {
            s["run"]
                .as_str()
                .is_some_and(|r| r.contains("cut-release.sh"))
        })
        .expect("the release step");
    assert_eq!(release["env"]["SLIPWAY_SIGN"], "keyless", "{release:?}");
    assert_eq!(
        workflow["jobs"]["release"]["permissions"]["id-token"], "write",
        "a keyless signature needs the job's OIDC token"
    );
    // The tools the release script needs beside the toolchains, each from the build script CI
    // uses (cut-release.sh refuses to run without them).
    for tool in [
        "tests/tools/registry/build.sh",
        "tests/tools/helm/build.sh",
        "tests/tools/cosign/build.sh",
        "tests/tools/cyclonedx/build.sh",
    ] {
        assert!(
            text.contains(tool),
            "the release workflow does not build {tool}"
        );
    }
    let docs = std::fs::read_to_string(repo().join("docs/installation.md")).expect("docs");
    assert!(
        docs.contains("slipway/\\.github/workflows/release\\.yml@refs/tags/v"),
        "installation.md verifies against this workflow's identity"
    );
    let check = std::fs::read_to_string(repo().join("tests/release/check.sh")).expect("check.sh");
    assert!(check.contains("scripts/cut-release.sh \"v$version\""));
}
