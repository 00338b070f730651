//! The messages a kind's task receives: commands from local senders, input that does not
//! depend on the entity type (network, management API, shutdown, strategy answers), and the
//! payload its region routes. Kept apart from the task so that the code that sends to it
//! (`allocation.rs`, `mod.rs`) does not depend on the task itself.

use std::collections::BTreeSet;
use std::num::NonZeroU64;

use bytes::Bytes;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{EntityId, LeaseAnswer, LeaseKey, Protocol, ShardId};
use shardik_wire::{EnvelopeBatch, WireEnvelope};
use tokio::sync::oneshot;
use tokio::time::Instant as TokioInstant;

use super::api::{Entity, ShardingError};

/// A reply a local asker waits for.
pub(crate) struct LocalReply<R> {
    pub tx: oneshot::Sender<Result<R, ShardingError>>,
    pub deadline: TokioInstant,
}

/// A command from a sender on this node.
pub(crate) struct LocalMsg<E: Entity> {
    /// The entity reference's ids (see [`RefIds`](super::RefIds)).
    pub ids: std::sync::Arc<super::RefIds>,
    pub cmd: E::Command,
    pub reply: Option<LocalReply<E::Reply>>,
}

/// Input that does not depend on the entity type: from the network, the management API, the
/// node's shutdown.
pub(crate) enum Control {
    Remote {
        from: UniqueAddress,
        env: WireEnvelope,
    },
    /// Envelopes that arrived in one batch frame, in order, read in place.
    RemoteBatch {
        from: UniqueAddress,
        batch: EnvelopeBatch,
    },
    Protocol {
        from: UniqueAddress,
        msg: Protocol,
    },
    State(oneshot::Sender<RegionState>),
    Stats(oneshot::Sender<Vec<(ShardId, usize)>>),
    Shutdown(oneshot::Sender<()>),
    /// The kind's asynchronous allocation strategy answered where `shard` goes.
    AllocationAnswered {
        requester: UniqueAddress,
        shard: ShardId,
        answer: Option<UniqueAddress>,
    },
    /// The kind's asynchronous allocation strategy answered which shards to move.
    RebalanceAnswered(BTreeSet<ShardId>),
    /// Remembered entities of `shard` to start, if the shard still runs here.
    StartRemembered {
        shard: ShardId,
        ids: Vec<EntityId>,
        /// The load's last step (sent even when nothing was remembered).
        last: bool,
    },
    /// Shards with remembered entities, whose homes are to be found without a message.
    WantHomes(Vec<ShardId>),
    /// The store answered a lease call.
    LeaseAnswered {
        key: LeaseKey,
        id: u64,
        answer: LeaseAnswer,
    },
}

/// What a region reports about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegionState {
    /// Each hosted shard with its live entity ids, in shard order.
    pub shards: Vec<(ShardId, Vec<EntityId>)>,
    /// Whether the region is registered with a coordinator.
    pub registered: bool,
    /// Messages waiting for a shard home.
    pub buffered: usize,
}

/// The message a region routes: typed for local senders, bytes for remote ones.
pub(crate) enum Payload<E: Entity> {
    Local {
        cmd: E::Command,
        reply: Option<LocalReply<E::Reply>>,
    },
    Remote {
        bytes: Bytes,
        reply_to: Option<(UniqueAddress, NonZeroU64)>,
    },
}
