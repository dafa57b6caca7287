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
