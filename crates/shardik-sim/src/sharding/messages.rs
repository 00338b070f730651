//! What travels between the parts of the sharding simulation: a simulated client's message
//! ([`SimMsg`]) and what a durable entity persists of it ([`EventRec`]), what nodes send each
//! other ([`Wire`]), and what a node's layer reports to the world ([`Output`]).
//!
//! Kept apart from the node (`node.rs`) and the durable entities (`durable.rs`), which both
//! produce these, so that the world, the network and the checkers take them from here.

use std::sync::Arc;

use bytes::Bytes;
use shardik_core::delivery::{ConsumerReply, StreamId};
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{
    CoordinatorEvent, DropReason, EntityId, Envelope, LeaseKey, LeaseRequest, Protocol, ShardId,
};
use shardik_persistence::{AtomicWrite, PersistenceId, SnapshotPlan};

use super::reliable::{persists_nothing, stream_order};

/// The payload of a simulated client message: who sent it and its number in that sender's
/// stream to the entity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimMsg {
    /// Unique over the run (the ledger's key).
    pub id: u64,
    /// The node incarnation whose client sent it.
    pub sender: UniqueAddress,
    /// 1, 2, 3, … per sender, kind and entity.
    pub seq: u64,
    /// For a message a reliable producer sent: its delivery header (`None`: a plain tell).
    pub delivery: Option<Arc<Sequencing>>,
}

impl SimMsg {
    /// A plain client message (no delivery header).
    pub fn plain(id: u64, sender: UniqueAddress, seq: u64) -> Self {
        SimMsg {
            id,
            sender,
            seq,
            delivery: None,
        }
    }

    /// What the message's events name it by: the offer a reliable producer sent it for (every
    /// copy of one offer persists under one id, so a copy processed twice shows), else the
    /// message itself.
    pub fn event_id(&self) -> u64 {
        self.delivery.as_ref().map_or(self.id, |d| d.offer)
    }
}

/// The delivery header of a message a reliable producer sent (the runtime's
/// `SequencedCommand`), and where its entity answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sequencing {
    /// The offer it carries (unique over the run, from
    /// [`OFFER_BASE`](super::reliable::OFFER_BASE)).
    pub offer: u64,
    /// The producer's id.
    pub producer: Arc<str>,
    /// The producer's code, which the events carry as their sender.
    pub code: u64,
    /// The stream.
    pub stream: StreamId,
    /// The sequence number in the stream.
    pub seq: u64,
    /// Whether the entity may start following the stream here.
    pub first: bool,
    /// The node incarnation of the producer that sent it, where the answer goes.
    pub reply_to: UniqueAddress,
    /// That producer's incarnation on its node (an answer for an earlier one is not heard, as
    /// the runtime's asks die with their producer task).
    pub incarnation: u64,
}

/// An entity's answer to a reliable producer about one of its streams.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeliveryReply {
    /// The producer.
    pub producer: Arc<str>,
    /// The producer's incarnation that sent the message answered.
    pub incarnation: u64,
    /// The entity.
    pub entity: EntityId,
    /// The stream.
    pub stream: StreamId,
    /// The answer.
    pub reply: ConsumerReply,
}

/// What travels between nodes' sharding layers.
#[derive(Clone, Debug)]
pub enum Wire {
    /// A protocol message between regions and coordinators.
    Proto(Protocol),
    /// A client message on its way to its shard's home.
    User(Envelope<SimMsg>),
    /// An entity's answer to a reliable producer, on its way to the producer's node.
    Reply(DeliveryReply),
}

/// Something a node's layer did that the world must route, check or record.
#[derive(Clone, Debug)]
pub enum Output {
    /// Send to another node.
    Send {
        /// Entity kind.
        kind: usize,
        /// Destination.
        to: UniqueAddress,
        /// The message.
        wire: Wire,
    },
    /// A message reached its entity.
    Delivered {
        /// Entity kind.
        kind: usize,
        /// The message.
        env: Envelope<SimMsg>,
    },
    /// An entity started.
    EntityStarted {
        /// Entity kind.
        kind: usize,
        /// The entity's shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
    },
    /// A client command was handled by its entity.
    Handled {
        /// Entity kind.
        kind: usize,
        /// The command's number.
        msg: u64,
        /// The entity.
        entity: EntityId,
    },
    /// A client command reached its entity's queue but was answered with an error instead of
    /// being handled.
    Unhandled {
        /// Entity kind.
        kind: usize,
        /// The command's number.
        msg: u64,
        /// Why.
        why: String,
    },
    /// A timer reached another incarnation of its entity than the one that set it.
    StrayTick {
        /// Entity kind.
        kind: usize,
        /// The entity.
        entity: EntityId,
        /// The incarnation that set the timer.
        set_by: u64,
        /// The incarnation that got it.
        got: u64,
    },
    /// An entity stopped.
    EntityStopped {
        /// Entity kind.
        kind: usize,
        /// The entity's shard.
        shard: ShardId,
        /// The entity.
        entity: EntityId,
    },
    /// The region started hosting a shard.
    ShardStarted {
        /// Entity kind.
        kind: usize,
        /// The shard.
        shard: ShardId,
    },
    /// The region stopped hosting a shard.
    ShardStopped {
        /// Entity kind.
        kind: usize,
        /// The shard.
        shard: ShardId,
    },
    /// The region reported a message as not delivered.
    Dropped {
        /// Entity kind.
        kind: usize,
        /// The message.
        env: Envelope<SimMsg>,
        /// Why.
        reason: DropReason,
    },
    /// The coordinator started (`true`) or stopped here.
    Coordinator {
        /// Entity kind.
        kind: usize,
        /// Started or stopped.
        running: bool,
    },
    /// The coordinator reported something.
    CoordinatorEvent {
        /// Entity kind.
        kind: usize,
        /// What.
        event: CoordinatorEvent,
    },
    /// The region stopped (shutdown complete, or stopped because the node is down).
    RegionStopped {
        /// Entity kind.
        kind: usize,
    },
    /// The node died holding these client messages (buffered, held for a predecessor, or
    /// waiting in or written by a durable entity that had not answered).
    LostWithNode {
        /// Message ids.
        ids: Vec<u64>,
    },
    /// A durable entity sent a journal write to the store.
    JournalWrite {
        /// Names the write in the answer ([`ShardNode::write_done`]).
        token: u64,
        /// The events.
        write: AtomicWrite,
    },
    /// A durable entity's command is committed, and the entity answered it.
    Acked {
        /// The entity's journal.
        pid: PersistenceId,
        /// The command.
        msg: SimMsg,
        /// The number of its first event.
        first_seq: u64,
        /// The number of its last event.
        last_seq: u64,
    },
    /// A durable entity judged a reliably delivered message not to be processed (a
    /// duplicate, a gap, a stream it does not follow, a stale one) and answered it, or not
    /// (stale), at once.
    Judged {
        /// The message.
        msg: SimMsg,
    },
    /// A durable entity's command failed: its recovery or its write failed, or its shard
    /// was stopped before it ran. The asker is told.
    CommandFailed {
        /// The command.
        msg: SimMsg,
        /// Why.
        why: String,
    },
    /// A durable entity recovered its state from the store.
    Recovered {
        /// The entity's journal.
        pid: PersistenceId,
        /// The number of the last event recovered.
        seq: u64,
        /// The state: every event applied.
        state: Vec<EventRec>,
    },
    /// A lease call to the store (answered, for acquisitions and renewals, through
    /// [`ShardNode::lease_answered`]).
    Lease {
        /// Entity kind.
        kind: usize,
        /// The call.
        request: LeaseRequest<LeaseKey>,
    },
    /// A read of shard leases from the store, for the coordinator's takeover of a silent
    /// member's shards (answered through [`ShardNode::leases_read`]).
    ReadLeases {
        /// Entity kind.
        kind: usize,
        /// Quoted back in the answer.
        id: u64,
        /// The shards.
        shards: Vec<ShardId>,
    },
    /// Something about a lease worth a line in the timeline.
    LeaseNote {
        /// Entity kind.
        kind: usize,
        /// What.
        what: String,
    },
    /// A durable entity's write made a snapshot due.
    SnapshotDue {
        /// The entity's journal.
        pid: PersistenceId,
        /// What the snapshot does.
        plan: SnapshotPlan,
        /// The state at the snapshot.
        payload: Bytes,
    },
}

/// One event: part `part` of the `parts` events message `msg` persisted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EventRec {
    /// The message (the ledger's id).
    pub msg: u64,
    /// The sending node incarnation's uid.
    pub sender: u64,
    /// The sender's sequence number of that message.
    pub sender_seq: u64,
    /// Which part, from 0.
    pub part: u8,
    /// Of how many.
    pub parts: u8,
}

const EVENT_LEN: usize = 26;

impl EventRec {
    /// The events message `msg` persists: one to three, by its id. A reliably delivered
    /// message persists under its offer, sent by its producer, numbered by its place in its
    /// stream (so the journal's order per sender is the order of acceptance); some persist
    /// nothing ([`persists_nothing`]).
    pub fn for_msg(msg: &SimMsg) -> Vec<EventRec> {
        if let Some(d) = &msg.delivery {
            if persists_nothing(d.offer) {
                return Vec::new();
            }
            let parts = 1 + (d.offer % 3) as u8;
            return (0..parts)
                .map(|part| EventRec {
                    msg: d.offer,
                    sender: d.code,
                    sender_seq: stream_order(d.stream, d.seq),
                    part,
                    parts,
                })
                .collect();
        }
        let parts = 1 + (msg.id % 3) as u8;
        (0..parts)
            .map(|part| EventRec {
                msg: msg.id,
                sender: msg.sender.uid,
                sender_seq: msg.seq,
                part,
                parts,
            })
            .collect()
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.msg.to_le_bytes());
        out.extend_from_slice(&self.sender.to_le_bytes());
        out.extend_from_slice(&self.sender_seq.to_le_bytes());
        out.push(self.part);
        out.push(self.parts);
    }

    fn decode(b: &[u8]) -> Option<EventRec> {
        if b.len() != EVENT_LEN {
            return None;
        }
        Some(EventRec {
            msg: u64::from_le_bytes(b[0..8].try_into().ok()?),
            sender: u64::from_le_bytes(b[8..16].try_into().ok()?),
            sender_seq: u64::from_le_bytes(b[16..24].try_into().ok()?),
            part: b[24],
            parts: b[25],
        })
    }

    /// The payload of this event in the journal.
    pub fn payload(&self) -> Bytes {
        let mut v = Vec::with_capacity(EVENT_LEN);
        self.encode(&mut v);
        Bytes::from(v)
    }

    /// An event from its journal payload.
    pub fn from_payload(b: &[u8]) -> Result<EventRec, String> {
        Self::decode(b).ok_or_else(|| format!("an event payload of {} bytes", b.len()))
    }
}

/// A state (the events applied, in order) as a snapshot payload.
pub fn encode_state(state: &[EventRec]) -> Bytes {
    let mut v = Vec::with_capacity(state.len() * EVENT_LEN);
    for e in state {
        e.encode(&mut v);
    }
    Bytes::from(v)
}

pub(crate) fn decode_state(b: &[u8]) -> Result<Vec<EventRec>, String> {
    if !b.len().is_multiple_of(EVENT_LEN) {
        return Err(format!("a snapshot of {} bytes", b.len()));
    }
    b.chunks(EVENT_LEN)
        .map(|c| EventRec::decode(c).ok_or_else(|| "a snapshot entry".to_string()))
        .collect()
}
