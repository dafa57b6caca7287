//! The scripts of a NodeOpUpgrade, run with `sh` against release files made up for the test: the
//! preflight skips a node that already runs the image's version and lets every other node go, and
//! the upgrade itself stops early on such a node.

use std::path::{Path, PathBuf};
use std::process::Command;

use slipway::nodeop::api::NodeOpUpgradeSpec;
use slipway::nodeop::core::upgrade::{upgrade_command, upgrade_preflight};

/// A scratch directory with an image root and a host root.
struct Roots {
    dir: PathBuf,
}

impl Roots {
    fn new(case: &str) -> Roots {
        let dir =
            std::env::temp_dir().join(format!("slipway-kairos-{case}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for root in ["image/etc", "host/etc"] {
            std::fs::create_dir_all(dir.join(root)).expect("mkdir");
        }
        Roots { dir }
    }

    fn release(&self, root: &str, file: &str, version: &str, k3s: &str) -> &Roots {
        let text = format!(
            "KAIROS_NAME=\"kairos\"\nKAIROS_VERSION=\"{version}\"\nKAIROS_SOFTWARE_VERSION_PREFIX=\"k3s\"\nKAIROS_SOFTWARE_VERSION=\"{k3s}\"\n"
        );
        std::fs::write(self.dir.join(root).join("etc").join(file), text).expect("write");
        self
    }

    /// Runs `script` with the image's root for `/` and the host's for `/host`; the exit code and
    /// what it wrote to the termination log.
    fn run(&self, script: &str) -> (i32, String, String) {
        let log = self.dir.join("termination-log");
        let _ = std::fs::remove_file(&log);
        let script = script
            .replace(
                "release_version \"\"",
                &format!("release_version {}", self.path("image")),
            )
            .replace(
                "release_version /host",
                &format!("release_version {}", self.path("host")),
            )
            .replace("/dev/termination-log", &log.display().to_string());
        let out = Command::new("sh")
            .arg("-c")
            .arg(&script)
            .output()
            .expect("sh");
        let written = std::fs::read_to_string(&log).unwrap_or_default();
        (
            out.status.code().unwrap_or(-1),
            written,
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    }

    fn path(&self, root: &str) -> String {
        Path::new(&self.dir).join(root).display().to_string()
    }
}

impl Drop for Roots {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn preflight() -> String {
    upgrade_preflight(&NodeOpUpgradeSpec::default())
        .expect("a preflight")
        .command[2]
        .clone()
}

#[test]
fn the_preflight_skips_a_node_at_the_images_version_and_only_that() {
    let same = Roots::new("same");
    same.release("image", "kairos-release", "v3.5.0", "v1.33.1+k3s1")
        .release("host", "kairos-release", "v3.5.0", "v1.33.1+k3s1");
    let (code, log, _) = same.run(&preflight());
    assert_eq!(
        (code, log.trim()),
        (0, "node is already at v3.5.0-k3sv1.33.1+k3s1")
    );

    let older = Roots::new("older");
    older
        .release("image", "kairos-release", "v3.5.0", "v1.33.1+k3s1")
        .release("host", "kairos-release", "v3.4.2", "v1.33.1+k3s1");
    let (code, log, out) = older.run(&preflight());
    assert_eq!((code, log.as_str()), (0, ""), "{out}");

    // kairos-release missing on the host: os-release says the version.
    let fallback = Roots::new("fallback");
    fallback
        .release("image", "kairos-release", "v3.5.0", "v1.33.1+k3s1")
        .release("host", "os-release", "v3.5.0", "v1.33.1+k3s1");
    assert!(fallback.run(&preflight()).1.contains("already at v3.5.0"));

    // Unknown on one side: the node goes.
    let unknown = Roots::new("unknown");
    unknown.release("image", "kairos-release", "v3.5.0", "v1.33.1+k3s1");
    let (code, log, out) = unknown.run(&preflight());
    assert_eq!((code, log.as_str()), (0, ""), "{out}");
    assert!(out.contains("host: unknown, image: v3.5.0"), "{out}");
}

#[test]
fn the_upgrade_stops_early_on_a_node_at_the_images_version() {
    let same = Roots::new("upgrade-same");
    same.release("image", "kairos-release", "v3.5.0", "v1.33.1+k3s1")
        .release("host", "kairos-release", "v3.5.0", "v1.33.1+k3s1");
    let command = upgrade_command(&NodeOpUpgradeSpec::default());
    let (code, _, out) = same.run(&command[2]);
    assert_eq!(code, 0);
    assert!(
        out.contains("already at v3.5.0-k3sv1.33.1+k3s1: nothing to upgrade"),
        "{out}"
    );
}
