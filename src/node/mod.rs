//! What every node operation shares on a node: how a node is seen ([`NodeInfo`], the node index),
//! who holds it ([`holders`], the one budget), the record of who cordoned it ([`cordon`]), the
//! drain (and what happens when it takes too long), what an operation asks for around a
//! disruption ([`disruption`]), the reboot hand-off with its reboot pod and health gate, and what is
//! told to chat and incident tools about them ([`notify`]). The [`shell`] is the only part here
//! that talks to the cluster.

pub mod budget;
pub mod change;
pub mod cordon;
pub mod disruption;
pub mod drain;
pub mod handoff;
pub mod holders;
pub mod index;
pub mod info;
pub mod next;
pub mod notify;
pub mod prepull;
pub mod reboot;
pub mod shell;
pub mod silence;

pub use info::NodeInfo;
