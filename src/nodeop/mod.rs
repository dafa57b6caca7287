//! NodeOps (`operator.kairos.io/v1alpha1`): kairos-operator's command on selected nodes, with the
//! host's root mounted, run by slipway in the one budget with its other operations; and
//! NodeOpUpgrades, the Kairos upgrade each runs through a NodeOp of its own.
//!
//! - [`api`]: NodeOp and NodeOpUpgrade as kairos-operator defines them, and their CRDs.
//! - [`core`]: the pure decision: which node starts next, what each started node does next.
//! - [`shell`]: reads the nodes, the Jobs and pods of the NodeOp, asks [`core::decide`], acts.

pub mod api;
pub mod core;
pub mod shell;
