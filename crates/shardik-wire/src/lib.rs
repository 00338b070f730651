//! shardik's wire format.
//!
//! * [`frame`]: length-prefixed frames on a TCP stream (4-byte big-endian length, one kind
//!   byte, payload) and the incremental [`FrameCodec`] with a maximum frame size.
//! * [`handshake`]: the first exchange on every connection (protocol version, cluster name,
//!   unique addresses) and the pure [`check_handshake`].
//! * [`codec`]: membership [`Message`](shardik_core::membership::Message)s to and from
//!   protobuf (`proto/membership.proto`), gossip states gzip-compressed, every decoded input
//!   validated.
//! * [`sharding`]: sharding traffic inside user frames (`proto/sharding.proto`): envelopes to
//!   entities, replies to asks, the region/coordinator
//!   [`Protocol`](shardik_core::sharding::Protocol) and shard statistics requests and
//!   replies, with a copy-free envelope encoder and validated decoding.
//!
//! Nothing here panics on input: every decode path returns a typed error, and no decode
//! allocates more than the configured maxima.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod codec;
pub mod frame;
pub mod handshake;
pub mod sharding;

#[allow(missing_docs, clippy::all, clippy::pedantic)]
mod pb;

pub use codec::{
    DEFAULT_MAX_GOSSIP_BYTES, DecodeError, DecodeLimits, decode_gossip, decode_gossip_compressed,
    decode_message, encode_gossip, encode_gossip_compressed, encode_message,
};
pub use frame::{
    DEFAULT_MAX_FRAME_SIZE, Frame, FrameCodec, FrameError, FrameKind, LENGTH_PREFIX, RESERVE_STEP,
};
pub use handshake::{
    Handshake, HandshakeAck, HandshakeRefused, HandshakeReply, LocalIdentity, MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION, RefusalReason, check_handshake, check_handshake_peer,
};
pub use sharding::{
    BatchEnvelope, BatchFrameBuilder, ByteString, DEFAULT_MAX_ENVELOPES_PER_BATCH,
    DEFAULT_MAX_ID_LEN, DEFAULT_MAX_SHARDS_PER_MESSAGE, EnvelopeBatch, IdCache, ReplyError,
    ReplyErrorKind, ShardingBody, ShardingFrame, ShardingLimits, WireEnvelope, WireReply,
    WireStats, batch_item_len, decode_sharding, decode_sharding_bytes, decode_sharding_cached,
    encode_batch_item, encode_envelope, encode_sharding, envelope_encoded_len,
};
