//! One node, composed: the membership core and the rules that bind the layers above it
//! ([`NodeCore`]). The runtime's node task and the simulator's world drive the same type.

mod node_core;
#[cfg(test)]
mod tests;

pub use node_core::{ClusterView, NodeCore, Overdue};
