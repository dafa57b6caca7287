//! NodeMaintenances (`nodemaintenance.medik8s.io/v1beta1`): node-maintenance-operator's
//! declarative maintenance of one node: cordon, taint, drain, until the resource is deleted.
//!
//! - [`api`]: the NodeMaintenance resource as NMO defines it, and its CRD.
//! - [`core`]: the pure decision: where the maintenance stands and what to change next.
//! - [`shell`]: reads the node, its pods and its Lease, asks [`core::decide`], applies the step.

pub mod api;
pub mod core;
pub mod shell;
