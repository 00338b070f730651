//! The messages a region carries: an [`Envelope`] addressed to an entity, and a [`Buffered`]
//! one waiting for its shard's home with the node it came from.
//!
//! Kept apart from the parent module so that the hosted shards' states (`hosted.rs`), which
//! hold waiting messages, and the region's parts can all name them without importing the
//! region itself.

use crate::membership::UniqueAddress;
use crate::sharding::shard_id::{EntityId, ShardId};

/// A message addressed to an entity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope<M> {
    /// The entity.
    pub entity: EntityId,
    /// Its shard.
    pub shard: ShardId,
    /// The payload (opaque to the region).
    pub msg: M,
}

/// A message waiting for its shard's home, with the node it came from (`None`: local, or
/// forwarded on as this region's own in a hand-off).
#[derive(Debug)]
pub(super) struct Buffered<M> {
    pub(super) from: Option<UniqueAddress>,
    pub(super) env: Envelope<M>,
    /// Sent by a sender on this node: what may follow a shard taken from this region to its
    /// next home (`revocation.rs`) or wait out a long pause here (`routing_order.rs`).
    pub(super) own: bool,
}
