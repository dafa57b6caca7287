//! slipway's end-to-end scenes, one test binary: each test is a scene on the local cluster
//! (`tests/cluster/`, shared by every scene of a run) with a namespace and nodes of its own, set up
//! and cleaned up by [`support::scene`], which also says which scenes may run side by side.
//!
//! One module per subject. `cargo test --test e2e -- budgets::` runs one subject's scenes;
//! `SLIPWAY_TEST_KUBECONFIG` points them at a running cluster (`just cluster-up`), otherwise
//! the binary starts a private one.

mod support;

mod agent;
mod bad_input;
mod budgets;
mod channel;
mod chaos;
mod cli;
mod cluster;
mod cluster_scale;
mod compat;
mod controller;
mod crd;
mod disruption;
mod failure_policy;
mod health_checks;
mod hooks;
mod maintenance;
mod migration;
mod nodeop;
mod notify;
mod operations;
mod quickstart;
mod rbac;
mod real;
mod real_faults;
mod real_ops;
mod real_own_node;
mod reboot;
mod reboot_policy;
mod silences;
mod upgrade;
