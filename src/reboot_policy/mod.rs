//! RebootPolicies (`slipway.dev/v1alpha1`): reboot the nodes that ask for it (what kured and
//! Flatcar's update operator do), a few at a time, drained, and handed off by boot ID and health.
//!
//! - [`api`]: the RebootPolicy resource and its CRD.
//! - [`core`]: the pure decision: which node reboots next and why the others wait.
//! - [`shell`]: reads the nodes and their pods, asks [`core::decide`], applies the decision.

pub mod api;
pub mod core;
pub mod shell;
