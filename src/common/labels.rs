//! Label keys every slipway operation puts on what it creates, and the well-known node labels.
//!
//! The controller label is SUC's: slipway's Jobs and pods carry it so that SUC's tools, and the
//! `kubectl drain` inside a Plan's Job (which skips the controller's own pods), see them as SUC's.

/// The annotation that resets an operation's failures: each new value is acted on once.
pub const RESET_FAILURES: &str = "slipway.dev/reset-failures";
/// On Jobs and pods: the name of the controller that made them.
pub const CONTROLLER: &str = "upgrade.cattle.io/controller";
/// On Jobs and pods: the node name.
pub const NODE: &str = "upgrade.cattle.io/node";
/// The well-known hostname label that Jobs are pinned to.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// The well-known OS label.
pub const OS: &str = "kubernetes.io/os";
