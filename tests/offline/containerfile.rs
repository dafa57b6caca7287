//! The top-level Containerfile against scripts/image.sh, read: what an engine would build is read
//! from the Containerfile's instructions and compared with what
//! scripts/oci_image.py writes (run with python3, as image.sh runs it): the same binary build
//! command, the same files (both come from `oci_image.py`), the same user, entrypoint, command,
//! working directory, labels and exposed ports. A change to either side alone fails here. CI also
//! has buildah build it (tests/containerfile/engine.sh) and compares the two images.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

fn crate_version() -> String {
    let cargo = read("Cargo.toml");
    let line = cargo
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .expect("Cargo.toml has a version");
    line.trim_end_matches('"').to_string()
}

/// The Containerfile's instructions, continuation lines joined, comments dropped: (keyword, rest).
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                let (keyword, rest) = current.split_once(' ').unwrap_or((&current, ""));
                out.push((keyword.to_uppercase(), rest.trim().to_string()));
                current.clear();
            }
        }
    }
    assert!(
        current.is_empty(),
        "the Containerfile ends in a continuation"
    );
    out
}

/// `LABEL k="v" k2="v2"`: the pairs (values double-quoted, no escapes).
fn labels(rest: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut s = rest.trim();
    while !s.is_empty() {
        let (key, after) = s.split_once("=\"").expect("LABEL key=\"value\"");
        let (value, after) = after.split_once('"').expect("a closing quote");
        out.insert(key.trim().to_string(), value.to_string());
        s = after.trim();
    }
    out
}

/// What an engine puts in the image config from the last stage of the Containerfile, in the
/// image config's terms, and that stage's file sources.
struct FinalStage {
    config: Value,
    copies: Vec<String>,
}

fn final_stage(all: &[(String, String)]) -> FinalStage {
    let start = all.iter().rposition(|(k, _)| k == "FROM").expect("a FROM");
    assert_eq!(all[start].1, "scratch", "the image is FROM scratch");
    let mut config = serde_json::Map::new();
    let mut all_labels = BTreeMap::new();
    let mut ports = Vec::new();
    let mut copies = Vec::new();
    for (keyword, rest) in &all[start + 1..] {
        match keyword.as_str() {
            "USER" => {
                config.insert("User".into(), json!(rest));
            }
            "WORKDIR" => {
                config.insert("WorkingDir".into(), json!(rest));
            }
            "ENTRYPOINT" | "CMD" => {
                let exec: Value = serde_json::from_str(rest)
                    .unwrap_or_else(|e| panic!("{keyword} in exec (JSON) form: {e}"));
                let key = if keyword == "CMD" {
                    "Cmd"
                } else {
                    "Entrypoint"
                };
                config.insert(key.into(), exec);
            }
            "LABEL" => all_labels.extend(labels(rest)),
            "EXPOSE" => ports.extend(rest.split_whitespace().map(str::to_string)),
            "COPY" | "ADD" => copies.push(rest.clone()),
            other => panic!("unexpected {other} in the final stage: compare it here too"),
        }
    }
    config.insert("Labels".into(), json!(all_labels));
    if !ports.is_empty() {
        let exposed: serde_json::Map<String, Value> =
            ports.into_iter().map(|p| (p, json!({}))).collect();
        config.insert("ExposedPorts".into(), Value::Object(exposed));
    }
    FinalStage {
        config: Value::Object(config),
        copies,
    }
}

/// scripts/oci_image.py's image, as image.sh writes it: its config and its layer's files
/// (path and mode).
fn image_sh(version: &str) -> (Value, Vec<(String, u32)>) {
    const READ: &str = r#"
import io, json, sys, tarfile
sys.path.insert(0, "scripts")
import oci_image
archive, _ = oci_image.build(b"binary", b"ca", "registry.example/slipway", sys.argv[1], "amd64", 0)
blobs = {}
with tarfile.open(fileobj=io.BytesIO(archive)) as t:
    for m in t.getmembers():
        if m.isfile():
            blobs[m.name] = t.extractfile(m).read()
def blob(d):
    return blobs["blobs/sha256/" + d.split(":")[1]]
index = json.loads(blobs["index.json"])
manifest = json.loads(blob(index["manifests"][0]["digest"]))
config = json.loads(blob(manifest["config"]["digest"]))
with tarfile.open(fileobj=io.BytesIO(blob(manifest["layers"][0]["digest"])), mode="r:gz") as layer:
    files = sorted([m.name, m.mode] for m in layer.getmembers())
print(json.dumps({"config": config["config"], "files": files}))
"#;
    let out = Command::new("python3")
        .current_dir(repo())
        .args(["-c", READ, version])
        .output()
        .expect("python3 runs (scripts/image.sh needs it too)");
    assert!(
        out.status.success(),
        "oci_image.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON from the reader");
    let files = v["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| {
            let path = f[0].as_str().expect("a path").to_string();
            let mode = u32::try_from(f[1].as_u64().expect("a mode")).expect("a small mode");
            (path, mode)
        })
        .collect();
    (v["config"].clone(), files)
}

/// What `oci_image.py --rootfs` (the Containerfile's build stage) writes: path and mode of each.
fn rootfs_files() -> Vec<(String, u32)> {
    let dir = std::env::temp_dir().join(format!("slipway-rootfs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs).expect("a temporary directory");
    std::fs::write(dir.join("binary"), b"binary").expect("writing");
    std::fs::write(dir.join("ca"), b"ca").expect("writing");
    let status = Command::new("python3")
        .current_dir(repo())
        .arg("scripts/oci_image.py")
        .args(["--binary", &dir.join("binary").to_string_lossy()])
        .args(["--ca-bundle", &dir.join("ca").to_string_lossy()])
        .args(["--version", "unused", "--rootfs", &rootfs.to_string_lossy()])
        .output()
        .expect("python3 runs");
    assert!(
        status.status.success(),
        "oci_image.py --rootfs: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let mut files = Vec::new();
    walk(&rootfs, &rootfs, &mut files);
    std::fs::remove_dir_all(&dir).ok();
    files.sort();
    files
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, u32)>) {
    for entry in std::fs::read_dir(dir).expect("reading the rootfs") {
        let path = entry.expect("an entry").path();
        let meta = std::fs::symlink_metadata(&path).expect("metadata");
        let rel = path.strip_prefix(base).expect("under the base");
        out.push((
            rel.to_string_lossy().into_owned(),
            meta.permissions().mode() & 0o7777,
        ));
        if meta.is_dir() {
            walk(base, &path, out);
        }
    }
}

#[test]
fn the_containerfile_gives_image_shs_user_entrypoint_command_labels_and_ports() {
    let version = crate_version();
    let stage = final_stage(&instructions(&read("Containerfile")));
    let (config, _) = image_sh(&version);
    assert_eq!(
        stage.config, config,
        "the Containerfile's final stage and scripts/oci_image.py's image config differ"
    );
    assert_eq!(
        config["Labels"]["org.opencontainers.image.version"], version,
        "the image's version label is the crate's version (change the Containerfile's with Cargo.toml)"
    );
}

#[test]
fn the_containerfile_builds_the_binary_and_the_files_as_image_sh_does() {
    let all = instructions(&read("Containerfile"));
    let run = all
        .iter()
        .filter(|(k, _)| k == "RUN")
        .map(|(_, r)| r.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let image_sh = read("scripts/image.sh");
    let build = image_sh
        .lines()
        .map(str::trim)
        .find(|l| l.contains("cargo build --release"))
        .expect("image.sh builds a release binary");
    assert!(
        run.contains(build),
        "the Containerfile builds the binary as image.sh does: `{build}`"
    );
    for needed in [
        ". scripts/static-env.sh",
        "host=$SLIPWAY_STATIC_TARGET",
        "scripts/oci_image.py",
        "--rootfs /rootfs",
    ] {
        assert!(run.contains(needed), "the build stage runs `{needed}`");
    }
    let stage = final_stage(&all);
    assert_eq!(
        stage.copies,
        ["--from=build /rootfs/ /"],
        "the image holds only what oci_image.py wrote"
    );
}

#[test]
fn oci_image_writes_the_same_files_into_a_directory_as_into_the_archive() {
    let (_, layer) = image_sh(&crate_version());
    let layer: Vec<(String, u32)> = layer
        .into_iter()
        .map(|(p, m)| (p.trim_end_matches('/').to_string(), m))
        .collect();
    assert_eq!(rootfs_files(), layer);
}

#[test]
fn the_engine_is_not_sent_the_build_output() {
    let ignore = read(".dockerignore");
    let entries: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for needed in ["target", ".git"] {
        assert!(entries.contains(&needed), ".dockerignore lists {needed}");
    }
}
