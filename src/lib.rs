//! slipway: a drop-in, faster and safer replacement for rancher/system-upgrade-controller.
#![forbid(unsafe_code)]
