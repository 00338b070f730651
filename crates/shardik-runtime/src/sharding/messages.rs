//! The messages a kind's task receives: commands from local senders, input that does not
//! depend on the entity type (network, management API, shutdown, strategy answers), and the
//! payload its region routes. Kept apart from the task so that the code that sends to it
//! (`allocation.rs`, `entity_ref.rs`, `handle.rs`) does not depend on the task itself.
//! The ids a local command carries ([`RefIds`]) are here too, beside the message that holds
//! them.

use std::collections::BTreeSet;
use std::num::NonZeroU64;

use bytes::Bytes;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{EntityId, LeaseAnswer, LeaseKey, Protocol, ShardId};
use shardik_wire::{EnvelopeBatch, WireEnvelope};
use tokio::sync::oneshot;

use super::api::{Entity, ShardingError};

/// An ask's answer slot, as the node sees it whatever the answer's type: it can fail it, and
/// complete it with an answer that came back encoded from another node.
pub(crate) trait AskSlot: Send + Sync {
    /// Completes the ask with `why`, unless it was answered already.
    fn fail(&self, why: ShardingError);

    /// Completes the ask with an answer from another node (decoded here), or with the failure
    /// that node reported, unless it was answered already.
    fn answer_encoded(&self, answer: Result<Bytes, ShardingError>);

    /// The ask's id in this node's table of waiting asks (the command's `ReplyTo` answers by
    /// it, and a node the command is sent to reports a failure by it): the one it was given,
    /// or else `fresh()`, from now on its own.
    fn ask_id(&self, fresh: &dyn Fn() -> NonZeroU64) -> NonZeroU64;

    /// When the asker stops waiting (`None` for a slot that is not an ask of this node's).
    fn deadline(&self) -> Option<tokio::time::Instant>;
}

/// The host's side of a local ask. Once the command is handled, the handle is disarmed with
/// [`handled`](Self::handled) and the answer comes through the command's `ReplyTo`; a command
/// sent to another node hands the slot over to the table of waiting asks
/// ([`pass_on`](Self::pass_on)), where that node's answer or report finds it by the ask's id
/// (an ask answered on its own node enters it only if its `ReplyTo` travels); a command that
/// is not handled fails the ask with [`fail`](Self::fail). Dropped armed (the command was lost
/// with its region or node, unreported), it fails the ask as lost, so that the asker does not
/// wait for its timeout. Nothing is sent to the asker when the command is handled: no wake-up but the
/// answer's.
///
/// A told command carries an empty handle ([`none`](Self::none)): one field rather than an
/// `Option` beside it keeps a queued command as small as before asks had slots (the local
/// queue copies each one across cores).
pub(crate) struct AskHandle(Option<std::sync::Arc<dyn AskSlot>>);

// Two words, so that a queued ask is no larger than before the reply model: see above.
const _: () = assert!(std::mem::size_of::<AskHandle>() == 2 * std::mem::size_of::<usize>());

impl AskHandle {
    pub fn new(slot: std::sync::Arc<dyn AskSlot>) -> Self {
        AskHandle(Some(slot))
    }

    /// The handle of a told command: nobody waits.
    pub fn none() -> Self {
        AskHandle(None)
    }

    /// Whether an asker waits for this command.
    pub fn is_ask(&self) -> bool {
        self.0.is_some()
    }

    /// The ask's id, if the command is an ask (see [`AskSlot::ask_id`]).
    pub fn ask_id(&self, fresh: &dyn Fn() -> NonZeroU64) -> Option<NonZeroU64> {
        self.0.as_ref().map(|slot| slot.ask_id(fresh))
    }

    /// The command was handled here: its answer comes through its `ReplyTo`.
    pub fn handled(mut self) {
        self.0 = None;
    }

    /// The command leaves for another node: its slot, for the table of waiting asks, where
    /// that node's answer or report finds it by the ask's id.
    pub fn pass_on(mut self) -> Option<std::sync::Arc<dyn AskSlot>> {
        self.0.take()
    }

    /// The command was not handled, because of `why`.
    pub fn fail(mut self, why: ShardingError) {
        if let Some(slot) = self.0.take() {
            slot.fail(why);
        }
    }
}

impl Drop for AskHandle {
    // Inlined, with the failure out of line: every told command drops an empty handle, and a
    // call for that cost about nine instructions per tell (callgrind, `bench sharding local`).
    #[inline]
    fn drop(&mut self) {
        if let Some(slot) = self.0.take() {
            lost(slot);
        }
    }
}

/// Fails the ask of a command dropped with its handle armed.
#[cold]
#[inline(never)]
fn lost(slot: std::sync::Arc<dyn AskSlot>) {
    slot.fail(ShardingError::ShardUnavailable(
        "the command was lost with its region or shard (node stopping or failing); it may \
         not have been handled"
            .into(),
    ));
}

/// A command from a sender on this node.
pub(crate) struct LocalMsg<E: Entity> {
    /// The entity reference's ids (see [`RefIds`]).
    pub ids: std::sync::Arc<RefIds>,
    pub cmd: E::Command,
    /// Who waits for an answer (empty for a tell).
    pub reply: AskHandle,
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
    Stats(oneshot::Sender<RegionCounts>),
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
    /// The store answered a read of shard leases (or the read failed).
    LeasesRead {
        id: u64,
        answer: shardik_core::sharding::coordinator::LeasesRead,
    },
}

/// A region's shards with their live entity counts, and whether it is registered with its
/// coordinator (what a stats request is answered with).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RegionCounts {
    /// Each hosted shard with its number of live entities, in shard order.
    pub(crate) shards: Vec<(ShardId, usize)>,
    /// Whether the region is registered with a coordinator, so it can be given shards.
    pub(crate) registered: bool,
}

/// What a region reports about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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
        reply: AskHandle,
    },
    Remote {
        bytes: Bytes,
        reply_to: Option<(UniqueAddress, NonZeroU64)>,
    },
}

/// An entity reference's ids, shared behind one more pointer so that a message carries them
/// with one reference count of their own: the sender's thread then never writes to the ids'
/// own counts, which share a cache line with their text, so the kind's thread, which hashes
/// that text for every message, does not lose the line to the sender's thread each time.
///
/// The ids are also kept off the cache line of this value's own counts, which the sender
/// writes for every message: the 48 bytes before them fill that line with the 16 bytes of the
/// counts whatever the allocation's place in its line, so the kind's thread reads the ids
/// without waiting for a line the sender's thread has just written. Measured (`bench sharding
/// local`, retry mode): 7.1–7.95 M tells/s against 5.2–7.7 M without, and steadier. Padding
/// rather than `align(64)`: an over-aligned allocation takes the allocator's slow aligned path
/// for every reference made, and fragmented the heap of a node creating a million entities;
/// padding after the ids as well measured within the noise of this, and cost another 48 bytes
/// per reference (`bench sharding memory`, which makes one reference per entity, rose from
/// 148 to 151 bytes per entity; 141.5 without padding).
#[repr(C)]
pub(crate) struct RefIds {
    _apart_from_counts: [u64; 6],
    pub shard: ShardId,
    pub id: EntityId,
}

impl RefIds {
    pub(super) fn new(shard: ShardId, id: EntityId) -> Self {
        RefIds {
            _apart_from_counts: [0; 6],
            shard,
            id,
        }
    }
}

#[cfg(test)]
mod ref_ids_tests {
    use super::RefIds;

    #[test]
    fn the_ids_start_a_full_cache_line_after_the_reference_counts() {
        // An `Arc`'s two counts take the allocation's first 16 bytes; with 48 more before the
        // ids, the ids begin 64 bytes in, so never on the counts' line.
        assert_eq!(std::mem::offset_of!(RefIds, shard), 48);
        assert!(std::mem::offset_of!(RefIds, id) > std::mem::offset_of!(RefIds, shard));
        assert_eq!(
            std::mem::align_of::<RefIds>(),
            8,
            "no over-aligned allocation"
        );
    }
}
