//! slipway's offline tests, one test binary: what needs no cluster (the repository's files, the
//! binary's offline commands, Helm's rendering, promtool's rule tests, what kstatus, Argo CD and
//! Fleet make of every kind). A module per subject; `cargo test --test offline -- chart::` runs
//! one.

mod alertmanager;
mod architecture;
mod chart;
mod cli;
mod containerfile;
mod crd_and_examples;
mod deliberate;
mod deploy_manifests;
mod documented;
mod gitops_health;
mod image_index;
mod job_golden;
mod kairos_crd;
mod kairos_upgrade;
mod monitoring;
mod names;
mod suc_crd;
mod workflows;

/// A tool the tests run: the path in the environment variable `env` if set, else what the build
/// script `script` (from the repository's root; it builds once and caches) prints last.
fn tool(env: &str, script: &str) -> std::path::PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return p.into();
    }
    let out =
        std::process::Command::new(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(script))
            .stderr(std::process::Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("running {script}: {e}"));
    assert!(out.status.success(), "{script} failed");
    let said = String::from_utf8_lossy(&out.stdout);
    said.lines().last().unwrap_or_default().trim().into()
}
