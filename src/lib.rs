//! slipway: a drop-in, faster and safer replacement for rancher/system-upgrade-controller.
//!
//! The library is a functional core: the modules below decide from plain data, and the
//! `controller` module (and the CLI) read the cluster and apply what they decide.
#![forbid(unsafe_code)]

pub mod api;
pub mod budget;
pub mod channel;
pub mod conditions;
pub mod config;
pub mod controller;
pub mod drain;
pub mod duration;
pub mod expansion;
pub mod hash;
pub mod health;
pub mod image;
pub mod job;
pub mod leader;
pub mod lint;
pub mod maintenance;
pub mod metrics;
pub mod naming;
pub mod node;
pub mod node_index;
pub mod reboot;
pub mod render;
pub mod rollout;
pub mod selection;
pub mod server;
pub mod window;

/// Errors of the slipway library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot render YAML: {0}")]
    Yaml(String),
    #[error("cannot encode JSON: {0}")]
    Json(#[from] serde_json::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
