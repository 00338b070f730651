//! Sharding traffic inside [`Frame::User`](crate::Frame::User) payloads
//! (`proto/sharding.proto`).
//!
//! One [`ShardingFrame`] per user frame: the entity kind it concerns and one body, which is a
//! user message to an entity ([`WireEnvelope`]), the answer to an ask ([`WireReply`]), a
//! message of the region/coordinator [`Protocol`](shardik_core::sharding::Protocol), or a
//! request for a region's shard statistics ([`ShardingBody::StatsRequest`]) and its answer
//! ([`WireStats`]).
//!
//! Envelopes are the hot path, so they have their own encoder, [`encode_envelope`], which
//! writes the protobuf straight from borrowed ids and payload into the caller's buffer
//! (typically right behind the frame header) instead of building owned messages first. Its
//! output is byte for byte what prost produces for the same message, which the tests check.
//!
//! Decoding validates everything, because a peer's bytes decide what a region or coordinator
//! does next: kind and ids must be non-empty and at most [`ShardingLimits::max_id_len`] bytes,
//! shard lists at most [`ShardingLimits::max_shards_per_message`] long and free of repeats, a
//! `oneof` must hold a variant this version knows, enumerations a known value, and every
//! address the protocol needs must be present. Payload bytes are sliced out of the input, not
//! copied, when decoding with [`decode_sharding_bytes`].

pub use bytestring::ByteString;

mod batch;
mod convert;
mod envelope;
mod message;
mod reply;
mod validate;

#[cfg(test)]
mod tests;

pub use batch::{
    BatchEnvelope, BatchFrameBuilder, EnvelopeBatch, IdCache, batch_item_len, encode_batch_item,
};
pub use convert::{
    decode_sharding, decode_sharding_bytes, decode_sharding_cached, encode_sharding,
};
pub use envelope::{encode_envelope, envelope_encoded_len};
pub use message::{
    DEFAULT_MAX_ENVELOPES_PER_BATCH, DEFAULT_MAX_ID_LEN, DEFAULT_MAX_SHARDS_PER_MESSAGE,
    ReplyError, ReplyErrorKind, ShardingBody, ShardingFrame, ShardingLimits, WireEnvelope,
    WireReply, WireStats,
};
