//! The mark a region keeps on a shard whose per-sender order broke here (see
//! `routing_order.rs`): the mark's nonce and the nodes that have routed here since.
//!
//! Kept apart from `routing_order.rs` because the region holds the marks in a field while
//! `routing_order.rs` adds methods to the region: with the mark here, below both, neither
//! needs the other's file.

use std::collections::BTreeSet;

use crate::membership::UniqueAddress;

/// A shard whose order broke here: the mark's nonce and who has routed here since.
#[derive(Debug)]
pub(super) struct Mark {
    pub(super) nonce: u64,
    pub(super) routing: BTreeSet<UniqueAddress>,
}
