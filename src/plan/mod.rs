//! Plans (`upgrade.cattle.io/v1`): system-upgrade-controller's upgrade Jobs, node by node.
//!
//! - [`api`]: the Plan resource, field for field as SUC defines it, and its CRD.
//! - [`core`]: the pure decision: which nodes go next and why the others wait, the Jobs, the
//!   hash, the status; and the offline tools built on it (`validate`, `render`).
//! - [`shell`]: reads the cluster, asks [`core::decide`], applies the decision.

pub mod api;
pub mod core;
pub mod shell;
