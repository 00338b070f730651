//! What travels on the simulated membership network: a message on its way ([`Delivery`]) and
//! a connection's handshake reply ([`Identification`]).
//!
//! Kept apart from `network.rs` because the world holds both in its queues while `network.rs`
//! adds the sending and delivering methods to the world: with them here, below both, neither
//! needs the other's file.

use shardik_core::Instant;
use shardik_core::membership::{Address, Message, UniqueAddress};

use crate::node_id::NodeId;

/// A connection's handshake reply, as the runtime's transport reports it: node `to` (this
/// incarnation of it) dialled `dialled` and `node` answered there.
#[derive(Clone, Debug)]
pub(super) struct Identification {
    pub(super) to: NodeId,
    pub(super) incarnation: u32,
    pub(super) dialled: Address,
    pub(super) node: UniqueAddress,
}

/// A membership message on its way.
#[derive(Clone, Debug)]
pub(super) struct Delivery {
    pub(super) from: NodeId,
    /// The sending incarnation, as its connection would authenticate it.
    pub(super) sender: UniqueAddress,
    pub(super) to: Address,
    pub(super) msg: Message,
    /// Set when the message reached a paused node and had to wait.
    pub(super) arrived_at: Option<Instant>,
}
