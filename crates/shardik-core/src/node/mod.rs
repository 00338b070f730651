//! One node, composed: the membership core and the rules that bind the layers above it
//! ([`NodeCore`]), and the settings every driver builds a node from ([`NodeSettings`]). The
//! runtime's node task and the simulator's world drive the same type.

mod node_core;
mod settings;
#[cfg(test)]
mod tests;

pub use node_core::{ClusterView, DEFAULT_LEAVE_TIMEOUT, NodeCore, Overdue};
pub use settings::*;
