//! slipway: a drop-in, faster and safer replacement for rancher/system-upgrade-controller.
//!
//! One module per node operation ([`plan`], [`maintenance`], [`reboot_policy`], [`nodeop`]), each with the
//! same three parts: `api` (the resource), `core` (the pure decision) and `shell` (reads the
//! cluster and applies the decision). [`node`] holds what the operations share on a node,
//! [`common`] the vocabulary of their specs, and [`runtime`] the controller process and its
//! Kubernetes chores, written once.
#![forbid(unsafe_code)]
// The functional core cannot reach the cluster, the clock, the network or the disk (clippy.toml);
// only the shells and the runtime, which allow these two lints, can.
#![deny(clippy::disallowed_types, clippy::disallowed_methods)]

pub mod common;
pub mod maintenance;
pub mod node;
pub mod nodeop;
pub mod plan;
pub mod reboot_policy;
pub mod runtime;

/// Errors of the slipway library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot render YAML: {0}")]
    Yaml(String),
    #[error("cannot encode JSON: {0}")]
    Json(#[from] serde_json::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
