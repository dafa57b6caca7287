//! The multi-platform image (`SLIPWAY_IMAGE_PLATFORMS="amd64 arm64" scripts/image.sh`, written by
//! scripts/oci_image.py): an OCI layout whose index.json names one image index of a linux/amd64 and
//! a linux/arm64 image, each with its own binary, read by go-containerregistry's validators as
//! containerd and `docker load` would (tests/tools/ocicheck), the same bytes on every build.
//! Stand-in binaries: the layout, not the compile, is under test here (CI runs the real arm64
//! binary under qemu in its `arm64` phase).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::write(path, bytes).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

/// The archive oci_image.py writes for the two stand-in binaries.
fn build(dir: &Path, out: &str) -> Vec<u8> {
    let out = dir.join(out);
    let status = Command::new("python3")
        .arg(repo().join("scripts/oci_image.py"))
        .args([
            "--binary",
            &format!("amd64={}", dir.join("amd64").display()),
        ])
        .args([
            "--binary",
            &format!("arm64={}", dir.join("arm64").display()),
        ])
        .args(["--ca-bundle", &dir.join("ca.crt").display().to_string()])
        .args([
            "--name",
            "registry.example/team/slipway",
            "--version",
            "1.2.3",
        ])
        .args(["--out", &out.display().to_string()])
        .env("SOURCE_DATE_EPOCH", "1764000000")
        .status()
        .expect("run python3 scripts/oci_image.py");
    assert!(status.success(), "oci_image.py failed");
    std::fs::read(&out).expect("the archive")
}

/// The archive's file `name` (tar entries read with `tar`, as the layout is a plain tar).
fn entry(archive: &Path, name: &str) -> Vec<u8> {
    let out = Command::new("tar")
        .arg("-xOf")
        .arg(archive)
        .arg(name)
        .output()
        .expect("run tar");
    assert!(out.status.success(), "no {name} in the archive");
    out.stdout
}

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).expect("JSON")
}

#[test]
fn the_multi_platform_image_is_one_index_of_amd64_and_arm64_and_reproducible() {
    let dir = std::env::temp_dir().join(format!("slipway-image-index-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    write(&dir.join("amd64"), b"\x7fELF amd64 stand-in");
    write(&dir.join("arm64"), b"\x7fELF arm64 stand-in");
    write(&dir.join("ca.crt"), b"-----BEGIN CERTIFICATE-----\n");
    let first = build(&dir, "a.oci.tar");
    assert_eq!(first, build(&dir, "b.oci.tar"), "the same bytes twice");
    let archive = dir.join("a.oci.tar");

    let index = json(&entry(&archive, "index.json"));
    let top = &index["manifests"];
    assert_eq!(top.as_array().map(Vec::len), Some(1), "{index}");
    assert_eq!(
        top[0]["mediaType"],
        "application/vnd.oci.image.index.v1+json"
    );
    assert_eq!(
        top[0]["annotations"]["io.containerd.image.name"],
        "registry.example/team/slipway:1.2.3"
    );
    let digest = top[0]["digest"].as_str().expect("a digest");
    let inner = json(&entry(&archive, &format!("blobs/sha256/{}", &digest[7..])));
    let platforms: Vec<String> = (inner["manifests"].as_array().into_iter().flatten())
        .map(|m| format!("{}/{}", m["platform"]["os"], m["platform"]["architecture"]))
        .collect();
    assert_eq!(platforms, ["\"linux\"/\"amd64\"", "\"linux\"/\"arm64\""]);

    let checker = Command::new(repo().join("tests/tools/ocicheck.sh"))
        .output()
        .expect("build the image checker");
    assert!(checker.status.success(), "tests/tools/ocicheck.sh failed");
    let ocicheck = String::from_utf8_lossy(&checker.stdout).trim().to_string();
    let checked = Command::new(&ocicheck)
        .arg(&archive)
        .arg("registry.example/team/slipway:1.2.3")
        .output()
        .expect("run ocicheck");
    assert!(
        checked.status.success(),
        "ocicheck refused it: {}",
        String::from_utf8_lossy(&checked.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&checked.stdout).trim(),
        format!("ok registry.example/team/slipway:1.2.3 {digest}")
    );
    let _ = std::fs::remove_dir_all(&dir);
}
