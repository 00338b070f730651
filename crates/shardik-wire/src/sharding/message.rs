//! The sharding message types: a [`ShardingFrame`] and what its [`ShardingBody`] carries
//! (envelopes, replies and their errors, protocol messages, shard statistics), and the
//! [`ShardingLimits`] a decoded frame must keep within.

use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;

use bytes::Bytes;
use bytestring::ByteString;

use shardik_core::sharding::{Protocol, ShardId};

/// Default for [`ShardingLimits::max_envelopes_per_batch`]: 1 024, four times what a sender
/// puts in one batch.
pub const DEFAULT_MAX_ENVELOPES_PER_BATCH: usize = 1024;

/// Default for [`ShardingLimits::max_id_len`]: 1 KiB, far above any sensible entity id while
/// keeping a hostile peer from making every routing table entry huge.
pub const DEFAULT_MAX_ID_LEN: usize = 1024;

/// Default for [`ShardingLimits::max_shards_per_message`]: 100 000, a hundred times the
/// reference's default number of shards.
pub const DEFAULT_MAX_SHARDS_PER_MESSAGE: usize = 100_000;

/// Bounds applied while decoding sharding traffic.
///
/// The frame size already bounds how much a decode allocates; these bound what the decoded
/// value may then cost the region or coordinator that keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardingLimits {
    /// The longest entity kind, entity id or shard id accepted, in bytes (UTF-8).
    pub max_id_len: usize,
    /// The most shards one protocol message may list (`Register.hosted`, all shards of
    /// `ShardHomes` together, `StatsReply.shards`).
    pub max_shards_per_message: usize,
    /// The most envelopes one batch may carry
    /// ([`ShardingBody::Envelopes`]).
    pub max_envelopes_per_batch: usize,
}

impl Default for ShardingLimits {
    fn default() -> Self {
        ShardingLimits {
            max_id_len: DEFAULT_MAX_ID_LEN,
            max_shards_per_message: DEFAULT_MAX_SHARDS_PER_MESSAGE,
            max_envelopes_per_batch: DEFAULT_MAX_ENVELOPES_PER_BATCH,
        }
    }
}

/// One unit of sharding traffic: the entity kind it concerns and what it carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardingFrame {
    /// The entity kind (the name the kind was started under); never empty on the wire.
    pub kind: Arc<str>,
    /// What the frame carries.
    pub body: ShardingBody,
}

/// What a [`ShardingFrame`] carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShardingBody {
    /// A user message to one entity.
    Envelope(WireEnvelope),
    /// Several user messages to entities of the kind, in order (one frame for a burst to
    /// one node). At most [`ShardingLimits::max_envelopes_per_batch`] on decode.
    Envelopes(Vec<WireEnvelope>),
    /// The answer to an ask, back to the asking node.
    Reply(WireReply),
    /// A region/coordinator protocol message.
    Protocol(Protocol),
    /// Asks the receiving node's region of [`ShardingFrame::kind`] how many entities each shard
    /// it hosts has; answered with a [`ShardingBody::StatsReply`].
    StatsRequest {
        /// The asker's correlation id, echoed in [`WireStats::request_id`].
        request_id: NonZeroU64,
    },
    /// The answer to a [`ShardingBody::StatsRequest`], back to the asking node.
    StatsReply(WireStats),
}

/// A user message to one entity, as it travels between nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireEnvelope {
    /// The entity. Decoded, it shares the frame's bytes: the receiver usually knows the
    /// entity already and uses its own copy of the id, so decoding does not allocate one.
    pub entity_id: ByteString,
    /// Its shard, as computed by the sender (the receiver routes by it without re-extracting).
    pub shard: ShardId,
    /// The message, serialized by the kind's own codec; opaque here.
    pub payload: Bytes,
    /// The sender's correlation id if this is an ask; `None` for a tell (no reply wanted).
    pub ask_id: Option<NonZeroU64>,
}

/// The answer to an ask.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireReply {
    /// The [`WireEnvelope::ask_id`] of the ask; never 0 on the wire, since 0 marks a tell.
    pub ask_id: u64,
    /// The answer (serialized by the kind's codec), or why there is none.
    pub result: Result<Bytes, ReplyError>,
}

/// A region's shard statistics for one entity kind: the answer to a
/// [`ShardingBody::StatsRequest`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireStats {
    /// The request's [`ShardingBody::StatsRequest::request_id`].
    pub request_id: NonZeroU64,
    /// Each shard the region hosts, with its number of live entities. No shard appears twice,
    /// and there are at most [`ShardingLimits::max_shards_per_message`] on decode.
    pub shards: Vec<(ShardId, u32)>,
    /// Whether the answering node runs the kind and its region is registered with the
    /// coordinator: it can be given shards. `false` from a node that does not run the kind,
    /// and from nodes of releases before this field.
    pub registered: bool,
}

/// Why an ask produced no answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ReplyError {
    /// The category, for the asker's error type and for metrics.
    pub kind: ReplyErrorKind,
    /// Details for humans.
    pub message: String,
}

/// The category of a [`ReplyError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReplyErrorKind {
    /// The receiving node has no region for the entity kind.
    UnknownKind,
    /// The receiver could not decode the message payload.
    DecodeFailed,
    /// The entity failed while handling the message.
    EntityFailed,
    /// The shard could not be reached (no home, or a hand-off did not finish).
    ShardUnavailable,
    /// A buffer on the way was full and the message was dropped.
    BufferFull,
    /// The region stopped before the message was handled.
    RegionStopped,
}

impl ReplyErrorKind {
    /// Every kind, in wire-number order.
    pub const ALL: [ReplyErrorKind; 6] = [
        ReplyErrorKind::UnknownKind,
        ReplyErrorKind::DecodeFailed,
        ReplyErrorKind::EntityFailed,
        ReplyErrorKind::ShardUnavailable,
        ReplyErrorKind::BufferFull,
        ReplyErrorKind::RegionStopped,
    ];

    /// A stable kebab-case name, for metric labels and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplyErrorKind::UnknownKind => "unknown-kind",
            ReplyErrorKind::DecodeFailed => "decode-failed",
            ReplyErrorKind::EntityFailed => "entity-failed",
            ReplyErrorKind::ShardUnavailable => "shard-unavailable",
            ReplyErrorKind::BufferFull => "buffer-full",
            ReplyErrorKind::RegionStopped => "region-stopped",
        }
    }
}

impl fmt::Display for ReplyErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
