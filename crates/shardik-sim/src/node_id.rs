//! The node slot index, in a module of its own because both the world and the checker use it
//! and neither should depend on the other for it.

/// Index of a node slot (an address; restarts reuse the slot with a new incarnation).
pub type NodeId = usize;
