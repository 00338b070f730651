//! Sharding traffic inside [`Frame::User`](crate::Frame::User) payloads
//! (`proto/sharding.proto`).
//!
//! One [`ShardingFrame`] per user frame: the entity kind it concerns and one body, which is a
//! user message to an entity ([`WireEnvelope`]), the answer to an ask ([`WireReply`]), a
//! message of the region/coordinator [`Protocol`], or a request for a region's shard statistics
//! ([`ShardingBody::StatsRequest`]) and its answer ([`WireStats`]).
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

use std::collections::HashSet;
use std::fmt;
use std::num::NonZeroU64;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
pub use bytestring::ByteString;
use prost::Message as _;

use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{Protocol, ShardId};

use crate::codec::{DecodeError, required_unique, unique_address_from_pb, unique_address_to_pb};
use crate::pb::m as pbm;
use crate::pb::s as pb;

use pb::protocol_message::Message as PM;

mod batch;
mod reply;
pub use batch::{
    BatchEnvelope, BatchFrameBuilder, EnvelopeBatch, IdCache, batch_item_len, encode_batch_item,
};

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

    fn to_pb(self) -> pb::ErrorKind {
        match self {
            ReplyErrorKind::UnknownKind => pb::ErrorKind::UnknownKind,
            ReplyErrorKind::DecodeFailed => pb::ErrorKind::DecodeFailed,
            ReplyErrorKind::EntityFailed => pb::ErrorKind::EntityFailed,
            ReplyErrorKind::ShardUnavailable => pb::ErrorKind::ShardUnavailable,
            ReplyErrorKind::BufferFull => pb::ErrorKind::BufferFull,
            ReplyErrorKind::RegionStopped => pb::ErrorKind::RegionStopped,
        }
    }

    fn from_pb(v: i32) -> Result<ReplyErrorKind, DecodeError> {
        let unknown = || DecodeError::UnknownEnum {
            field: "ReplyError.kind".into(),
            value: v,
        };
        Ok(match pb::ErrorKind::try_from(v).map_err(|_| unknown())? {
            // Never sent: a sender that leaves the kind unset has a bug we should not mask.
            pb::ErrorKind::Unspecified => return Err(unknown()),
            pb::ErrorKind::UnknownKind => ReplyErrorKind::UnknownKind,
            pb::ErrorKind::DecodeFailed => ReplyErrorKind::DecodeFailed,
            pb::ErrorKind::EntityFailed => ReplyErrorKind::EntityFailed,
            pb::ErrorKind::ShardUnavailable => ReplyErrorKind::ShardUnavailable,
            pb::ErrorKind::BufferFull => ReplyErrorKind::BufferFull,
            pb::ErrorKind::RegionStopped => ReplyErrorKind::RegionStopped,
        })
    }
}

impl fmt::Display for ReplyErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

// ---------------------------------------------------------------------------------------------
// The envelope fast path: hand-written protobuf, checked against prost by the tests.

/// Field numbers from `proto/sharding.proto`; the tests pin that these writes decode with
/// the generated types.
const FRAME_KIND: u8 = 1;
const FRAME_ENVELOPE: u8 = 2;
const ENVELOPE_ENTITY_ID: u8 = 1;
const ENVELOPE_SHARD_ID: u8 = 2;
const ENVELOPE_PAYLOAD: u8 = 3;
const ENVELOPE_ASK_ID: u8 = 4;

const WIRE_VARINT: u8 = 0;
const WIRE_LEN: u8 = 2;

/// A field key. All field numbers written by hand are below 16, so every key is one byte.
const fn key(field: u8, wire_type: u8) -> u8 {
    (field << 3) | wire_type
}

fn varint_len(v: u64) -> usize {
    // 7 payload bits per byte; 0 still takes one byte.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Writes `v` as a varint into the front of `buf`; returns how many bytes it took.
fn write_varint(mut v: u64, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while v >= 0x80 {
        buf[n] = (v as u8 & 0x7f) | 0x80;
        v >>= 7;
        n += 1;
    }
    buf[n] = v as u8;
    n + 1
}

/// Writes a one-byte field key and a varint after it, in one append: gathered on the stack,
/// since `BufMut::put_u8` per byte costs a capacity check and a copy call each (half the cost
/// of a reply frame, measured with callgrind).
fn put_key_varint(key: u8, v: u64, out: &mut impl BufMut) {
    let mut buf = [0u8; 11];
    buf[0] = key;
    let n = write_varint(v, &mut buf[1..]);
    out.put_slice(&buf[..=n]);
}

/// Encoded size of a proto3 length-delimited field holding `len` bytes: nothing when empty,
/// since proto3 omits default values (and prost does, which keeps the two encoders equal).
fn len_field_len(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        1 + varint_len(len as u64) + len
    }
}

fn put_len_field(field: u8, value: &[u8], out: &mut impl BufMut) {
    if !value.is_empty() {
        put_key_varint(key(field, WIRE_LEN), value.len() as u64, out);
        out.put_slice(value);
    }
}

fn envelope_body_len(
    entity_id: &str,
    shard: &str,
    payload_len: usize,
    ask_id: Option<NonZeroU64>,
) -> usize {
    len_field_len(entity_id.len())
        + len_field_len(shard.len())
        + len_field_len(payload_len)
        + ask_id.map_or(0, |a| 1 + varint_len(a.get()))
}

/// The number of bytes [`encode_envelope`] appends for these arguments, so a caller can write
/// the frame's length prefix before the body without encoding twice.
pub fn envelope_encoded_len(
    kind: &str,
    entity_id: &str,
    shard: &str,
    payload_len: usize,
    ask_id: Option<NonZeroU64>,
) -> usize {
    let body = envelope_body_len(entity_id, shard, payload_len, ask_id);
    // The envelope is a oneof member: written even when its body is empty.
    len_field_len(kind.len()) + 1 + varint_len(body as u64) + body
}

/// Appends the `ShardingFrame` encoding of an envelope to `out`, straight from borrowed parts.
///
/// The result decodes with [`decode_sharding`] to a [`ShardingBody::Envelope`] and is
/// identical to what [`encode_sharding`] produces for the same envelope. `out` is grown once,
/// by exactly [`envelope_encoded_len`] bytes; what it already holds is kept.
pub fn encode_envelope(
    kind: &str,
    entity_id: &str,
    shard: &str,
    payload: &[u8],
    ask_id: Option<NonZeroU64>,
    out: &mut BytesMut,
) {
    out.reserve(envelope_encoded_len(
        kind,
        entity_id,
        shard,
        payload.len(),
        ask_id,
    ));
    // prost writes fields in field-number order; doing the same keeps the bytes identical.
    put_len_field(FRAME_KIND, kind.as_bytes(), out);
    put_envelope_field(FRAME_ENVELOPE, entity_id, shard, payload, ask_id, out);
}

/// Appends an `Envelope` as length-delimited field `field` of the enclosing message (the
/// frame's body, or an item of a batch).
fn put_envelope_field(
    field: u8,
    entity_id: &str,
    shard: &str,
    payload: &[u8],
    ask_id: Option<NonZeroU64>,
    out: &mut BytesMut,
) {
    let body = envelope_body_len(entity_id, shard, payload.len(), ask_id);
    put_key_varint(key(field, WIRE_LEN), body as u64, out);
    put_len_field(ENVELOPE_ENTITY_ID, entity_id.as_bytes(), out);
    put_len_field(ENVELOPE_SHARD_ID, shard.as_bytes(), out);
    put_len_field(ENVELOPE_PAYLOAD, payload, out);
    if let Some(a) = ask_id {
        put_key_varint(key(ENVELOPE_ASK_ID, WIRE_VARINT), a.get(), out);
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding

fn ids_to_pb(ids: &[ShardId]) -> Vec<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

fn protocol_to_pb(p: &Protocol) -> pb::ProtocolMessage {
    let shard = |s: &ShardId| s.to_string();
    let message = match p {
        Protocol::Register { hosted, proxy } => PM::Register(pb::Register {
            hosted: ids_to_pb(hosted),
            proxy: *proxy,
        }),
        Protocol::GetShardHome { shard: s } => {
            PM::GetShardHome(pb::GetShardHome { shard: shard(s) })
        }
        Protocol::BeginHandOffAck { shard: s, drained } => {
            PM::BeginHandOffAck(pb::BeginHandOffAck {
                shard: shard(s),
                drained: *drained,
            })
        }
        Protocol::ShardStopped {
            shard: s,
            forwarding,
        } => PM::ShardStopped(pb::ShardStopped {
            shard: shard(s),
            forwarding: *forwarding,
        }),
        Protocol::GracefulShutdownReq => PM::GracefulShutdownReq(pb::GracefulShutdownReq {}),
        Protocol::RegionStopped => PM::RegionStopped(pb::RegionStopped {}),
        Protocol::ShardStarted { shard: s } => {
            PM::ShardStarted(pb::ShardStarted { shard: shard(s) })
        }
        Protocol::RegisterAck => PM::RegisterAck(pb::RegisterAck {}),
        Protocol::CoordinatorStarted { epoch } => {
            PM::CoordinatorStarted(pb::CoordinatorStarted { epoch: *epoch })
        }
        Protocol::KindNotStarted { epoch } => {
            PM::KindNotStarted(pb::KindNotStarted { epoch: *epoch })
        }
        Protocol::ShardHome { shard: s, region } => PM::ShardHome(pb::ShardHome {
            shard: shard(s),
            region: Some(unique_address_to_pb(region)),
        }),
        Protocol::ShardHomes { homes } => PM::ShardHomes(pb::ShardHomes {
            homes: region_shards_to_pb(homes),
        }),
        Protocol::SilentHomes { homes } => PM::SilentHomes(pb::SilentHomes {
            homes: region_shards_to_pb(homes),
        }),
        Protocol::HostShard {
            shard: s,
            predecessor,
        } => PM::HostShard(pb::HostShard {
            shard: shard(s),
            predecessor: predecessor.as_ref().map(unique_address_to_pb),
        }),
        Protocol::BeginHandOff { shard: s } => {
            PM::BeginHandOff(pb::BeginHandOff { shard: shard(s) })
        }
        Protocol::HandOff {
            shard: s,
            drained_from,
        } => PM::HandOff(pb::HandOff {
            shard: shard(s),
            drained_from: drained_from.iter().map(unique_address_to_pb).collect(),
        }),
        Protocol::RoutingHere { shard: s, nonce } => PM::RoutingHere(pb::RoutingHere {
            shard: shard(s),
            nonce: *nonce,
        }),
        Protocol::NotHere { shard: s, nonce } => PM::NotHere(pb::NotHere {
            shard: shard(s),
            nonce: *nonce,
        }),
        Protocol::ShardsRevoked { shards } => PM::ShardsRevoked(pb::ShardsRevoked {
            shards: ids_to_pb(shards),
        }),
        Protocol::HandOffDrained { shard: s } => {
            PM::HandOffDrained(pb::HandOffDrained { shard: shard(s) })
        }
        Protocol::HandOverDone { shard: s } => {
            PM::HandOverDone(pb::HandOverDone { shard: shard(s) })
        }
    };
    pb::ProtocolMessage {
        message: Some(message),
    }
}

#[cfg(test)]
fn reply_to_pb(r: &WireReply) -> pb::Reply {
    use pb::reply::Result as R;
    pb::Reply {
        ask_id: r.ask_id,
        result: Some(match &r.result {
            // A refcount, not a copy: the generated type holds `Bytes` (tests/generated_code.rs).
            Ok(payload) => R::Payload(payload.clone()),
            Err(e) => R::Error(pb::ReplyError {
                kind: e.kind.to_pb() as i32,
                message: e.message.clone(),
            }),
        }),
    }
}

fn stats_to_pb(s: &WireStats) -> pb::StatsReply {
    pb::StatsReply {
        request_id: s.request_id.get(),
        shards: s
            .shards
            .iter()
            .map(|(shard, entities)| pb::ShardStats {
                shard: shard.to_string(),
                entities: *entities,
            })
            .collect(),
        registered: s.registered,
    }
}

/// Encodes a sharding frame as a `ShardingFrame` protobuf (the payload of a
/// [`Frame::User`](crate::Frame::User)).
///
/// Envelopes go through [`encode_envelope`]; the rest through the generated types.
pub fn encode_sharding(frame: &ShardingFrame) -> Bytes {
    use pb::sharding_frame::Body;
    let body = match &frame.body {
        ShardingBody::Envelope(e) => {
            let mut out = BytesMut::new();
            encode_envelope(
                &frame.kind,
                &e.entity_id,
                &e.shard,
                &e.payload,
                e.ask_id,
                &mut out,
            );
            return out.freeze();
        }
        ShardingBody::Envelopes(envelopes) => {
            let mut out = BytesMut::new();
            let builder = BatchFrameBuilder::begin(&frame.kind, &mut out);
            for e in envelopes {
                encode_batch_item(&e.entity_id, &e.shard, &e.payload, e.ask_id, &mut out);
            }
            return builder.finish(&frame.kind, out);
        }
        ShardingBody::Reply(r) => return reply::encode_reply(&frame.kind, r),
        ShardingBody::Protocol(p) => Body::Protocol(protocol_to_pb(p)),
        ShardingBody::StatsRequest { request_id } => Body::StatsRequest(pb::StatsRequest {
            request_id: request_id.get(),
        }),
        ShardingBody::StatsReply(s) => Body::StatsReply(stats_to_pb(s)),
    };
    let m = pb::ShardingFrame {
        kind: frame.kind.to_string(),
        body: Some(body),
    };
    Bytes::from(m.encode_to_vec())
}

// ---------------------------------------------------------------------------------------------
// Decoding and validation

/// Validates one identifier (kind, entity id or shard id) and shares it. `field` runs only
/// on error, so the happy path formats nothing.
fn id(
    s: String,
    limits: &ShardingLimits,
    field: impl FnOnce() -> String,
) -> Result<Arc<str>, DecodeError> {
    check_id(&s, limits, field)?;
    Ok(Arc::from(s))
}

/// An id must be neither empty nor longer than the limit.
fn check_id(
    s: &str,
    limits: &ShardingLimits,
    field: impl FnOnce() -> String,
) -> Result<(), DecodeError> {
    if s.is_empty() {
        return Err(DecodeError::Empty(field()));
    }
    if s.len() > limits.max_id_len {
        return Err(DecodeError::TooLong {
            field: field(),
            len: s.len(),
            max: limits.max_id_len,
        });
    }
    Ok(())
}

fn shard(s: String, limits: &ShardingLimits, msg: &'static str) -> Result<ShardId, DecodeError> {
    id(s, limits, || format!("{msg}.shard"))
}

fn region_shards_to_pb(homes: &[(UniqueAddress, Vec<ShardId>)]) -> Vec<pb::RegionShards> {
    homes
        .iter()
        .map(|(region, shards)| pb::RegionShards {
            region: Some(unique_address_to_pb(region)),
            shards: ids_to_pb(shards),
        })
        .collect()
}

/// Regions with their shards (`ShardHomes`, `SilentHomes`): no region twice, no shard in two
/// regions, within the shard limit. `what` names the list and its regions' field in errors.
fn region_shards_from_pb(
    list: Vec<pb::RegionShards>,
    limits: &ShardingLimits,
    (what, region_field): (&'static str, &'static str),
) -> Result<Vec<(UniqueAddress, Vec<ShardId>)>, DecodeError> {
    let total: usize = list.iter().map(|h| h.shards.len()).sum();
    check_shard_count(what, total, limits)?;
    let mut regions = HashSet::with_capacity(list.len());
    let mut shards = HashSet::with_capacity(total);
    let mut homes = Vec::with_capacity(list.len());
    for (i, h) in list.into_iter().enumerate() {
        let region = h.region.ok_or(DecodeError::Missing(region_field))?;
        let region = unique_address_from_pb(region, || format!("{what}[{i}].region"))?;
        if !regions.insert(region.clone()) {
            return Err(DecodeError::Duplicate(format!(
                "{what}[{i}] repeats region {region}"
            )));
        }
        let list = shard_list(
            h.shards,
            limits,
            |j| format!("{what}[{i}].shards[{j}]"),
            &mut shards,
        )?;
        homes.push((region, list));
    }
    Ok(homes)
}

/// Validates a list of shard ids that must be distinct, also from those already in `seen`
/// (so `ShardHomes` can check that no shard has two homes).
fn shard_list(
    ids: Vec<String>,
    limits: &ShardingLimits,
    field: impl Fn(usize) -> String,
    seen: &mut HashSet<ShardId>,
) -> Result<Vec<ShardId>, DecodeError> {
    let mut out = Vec::with_capacity(ids.len());
    for (i, s) in ids.into_iter().enumerate() {
        let s = id(s, limits, || field(i))?;
        if !seen.insert(s.clone()) {
            return Err(DecodeError::Duplicate(format!(
                "{} repeats shard `{s}`",
                field(i)
            )));
        }
        out.push(s);
    }
    Ok(out)
}

fn check_shard_count(
    field: &'static str,
    count: usize,
    limits: &ShardingLimits,
) -> Result<(), DecodeError> {
    if count > limits.max_shards_per_message {
        return Err(DecodeError::TooMany {
            field,
            count,
            max: limits.max_shards_per_message,
        });
    }
    Ok(())
}

fn address_list(
    list: Vec<pbm::UniqueAddress>,
    field: &'static str,
) -> Result<Vec<UniqueAddress>, DecodeError> {
    let mut seen = HashSet::with_capacity(list.len());
    let mut out = Vec::with_capacity(list.len());
    for (i, u) in list.into_iter().enumerate() {
        let u = unique_address_from_pb(u, || format!("{field}[{i}]"))?;
        if !seen.insert(u.clone()) {
            return Err(DecodeError::Duplicate(format!(
                "{field}[{i}] repeats region {u}"
            )));
        }
        out.push(u);
    }
    Ok(out)
}

fn protocol_from_pb(
    p: pb::ProtocolMessage,
    limits: &ShardingLimits,
) -> Result<Protocol, DecodeError> {
    let m = p.message.ok_or(DecodeError::MissingOrUnknownVariant(
        "ProtocolMessage.message",
    ))?;
    Ok(match m {
        PM::Register(m) => {
            check_shard_count("Register.hosted", m.hosted.len(), limits)?;
            if m.proxy && !m.hosted.is_empty() {
                return Err(DecodeError::Invalid(format!(
                    "Register from a proxy lists {} hosted shards; a proxy hosts none",
                    m.hosted.len()
                )));
            }
            let mut seen = HashSet::with_capacity(m.hosted.len());
            Protocol::Register {
                hosted: shard_list(
                    m.hosted,
                    limits,
                    |i| format!("Register.hosted[{i}]"),
                    &mut seen,
                )?,
                proxy: m.proxy,
            }
        }
        PM::GetShardHome(m) => Protocol::GetShardHome {
            shard: shard(m.shard, limits, "GetShardHome")?,
        },
        PM::BeginHandOffAck(m) => Protocol::BeginHandOffAck {
            shard: shard(m.shard, limits, "BeginHandOffAck")?,
            drained: m.drained,
        },
        PM::ShardStopped(m) => Protocol::ShardStopped {
            shard: shard(m.shard, limits, "ShardStopped")?,
            forwarding: m.forwarding,
        },
        PM::GracefulShutdownReq(pb::GracefulShutdownReq {}) => Protocol::GracefulShutdownReq,
        PM::RegionStopped(pb::RegionStopped {}) => Protocol::RegionStopped,
        PM::ShardStarted(m) => Protocol::ShardStarted {
            shard: shard(m.shard, limits, "ShardStarted")?,
        },
        PM::RegisterAck(pb::RegisterAck {}) => Protocol::RegisterAck,
        PM::CoordinatorStarted(m) => Protocol::CoordinatorStarted { epoch: m.epoch },
        PM::KindNotStarted(m) => Protocol::KindNotStarted { epoch: m.epoch },
        PM::ShardHome(m) => Protocol::ShardHome {
            shard: shard(m.shard, limits, "ShardHome")?,
            region: required_unique(m.region, "ShardHome.region")?,
        },
        PM::ShardHomes(m) => Protocol::ShardHomes {
            homes: region_shards_from_pb(
                m.homes,
                limits,
                ("ShardHomes.homes", "ShardHomes.homes.region"),
            )?,
        },
        PM::SilentHomes(m) => Protocol::SilentHomes {
            homes: region_shards_from_pb(
                m.homes,
                limits,
                ("SilentHomes.homes", "SilentHomes.homes.region"),
            )?,
        },
        PM::HostShard(m) => Protocol::HostShard {
            shard: shard(m.shard, limits, "HostShard")?,
            predecessor: m
                .predecessor
                .map(|u| unique_address_from_pb(u, || "HostShard.predecessor".into()))
                .transpose()?,
        },
        PM::BeginHandOff(m) => Protocol::BeginHandOff {
            shard: shard(m.shard, limits, "BeginHandOff")?,
        },
        PM::HandOff(m) => Protocol::HandOff {
            shard: shard(m.shard, limits, "HandOff")?,
            drained_from: address_list(m.drained_from, "HandOff.drained_from")?,
        },
        PM::RoutingHere(m) => Protocol::RoutingHere {
            shard: shard(m.shard, limits, "RoutingHere")?,
            nonce: m.nonce,
        },
        PM::NotHere(m) => Protocol::NotHere {
            shard: shard(m.shard, limits, "NotHere")?,
            nonce: m.nonce,
        },
        PM::ShardsRevoked(m) => {
            check_shard_count("ShardsRevoked.shards", m.shards.len(), limits)?;
            let mut seen = HashSet::with_capacity(m.shards.len());
            Protocol::ShardsRevoked {
                shards: shard_list(
                    m.shards,
                    limits,
                    |i| format!("ShardsRevoked.shards[{i}]"),
                    &mut seen,
                )?,
            }
        }
        PM::HandOffDrained(m) => Protocol::HandOffDrained {
            shard: shard(m.shard, limits, "HandOffDrained")?,
        },
        PM::HandOverDone(m) => Protocol::HandOverDone {
            shard: shard(m.shard, limits, "HandOverDone")?,
        },
    })
}

fn reply_from_pb(r: pb::Reply) -> Result<WireReply, DecodeError> {
    use pb::reply::Result as R;
    if r.ask_id == 0 {
        return Err(DecodeError::Invalid(
            "Reply.ask_id is 0, which marks a tell: no ask can be waiting for this reply".into(),
        ));
    }
    let result = match r
        .result
        .ok_or(DecodeError::MissingOrUnknownVariant("Reply.result"))?
    {
        R::Payload(p) => Ok(p),
        R::Error(e) => Err(ReplyError {
            kind: ReplyErrorKind::from_pb(e.kind)?,
            message: e.message,
        }),
    };
    Ok(WireReply {
        ask_id: r.ask_id,
        result,
    })
}

/// A stats request id, which must not be 0 (the proto3 default, so also what an unset field
/// decodes to).
fn request_id(v: u64, field: &'static str) -> Result<NonZeroU64, DecodeError> {
    NonZeroU64::new(v)
        .ok_or_else(|| DecodeError::Invalid(format!("{field} is 0, which no stats request uses")))
}

fn stats_from_pb(r: pb::StatsReply, limits: &ShardingLimits) -> Result<WireStats, DecodeError> {
    let request_id = request_id(r.request_id, "StatsReply.request_id")?;
    check_shard_count("StatsReply.shards", r.shards.len(), limits)?;
    let (ids, entities): (Vec<String>, Vec<u32>) =
        r.shards.into_iter().map(|s| (s.shard, s.entities)).unzip();
    let mut seen = HashSet::with_capacity(ids.len());
    let ids = shard_list(
        ids,
        limits,
        |i| format!("StatsReply.shards[{i}].shard"),
        &mut seen,
    )?;
    Ok(WireStats {
        request_id,
        shards: ids.into_iter().zip(entities).collect(),
        registered: r.registered,
    })
}

fn envelope_from_pb(e: pb::Envelope, limits: &ShardingLimits) -> Result<WireEnvelope, DecodeError> {
    Ok(WireEnvelope {
        entity_id: {
            check_id(&e.entity_id, limits, || "Envelope.entity_id".into())?;
            ByteString::from(e.entity_id)
        },
        shard: id(e.shard_id, limits, || "Envelope.shard_id".into())?,
        payload: e.payload,
        ask_id: NonZeroU64::new(e.ask_id),
    })
}

fn frame_from_pb(
    f: pb::ShardingFrame,
    limits: &ShardingLimits,
) -> Result<ShardingFrame, DecodeError> {
    use pb::sharding_frame::Body;
    let kind = id(f.kind, limits, || "ShardingFrame.kind".into())?;
    let body = match f
        .body
        .ok_or(DecodeError::MissingOrUnknownVariant("ShardingFrame.body"))?
    {
        Body::Envelope(e) => ShardingBody::Envelope(envelope_from_pb(e, limits)?),
        // Batches are decoded by hand before the generated code sees the frame.
        Body::Envelopes(_) => {
            return Err(DecodeError::Invalid(
                "an envelope batch reached the generic decoder".into(),
            ));
        }
        Body::Reply(r) => ShardingBody::Reply(reply_from_pb(r)?),
        Body::Protocol(p) => ShardingBody::Protocol(protocol_from_pb(p, limits)?),
        Body::StatsRequest(r) => ShardingBody::StatsRequest {
            request_id: request_id(r.request_id, "StatsRequest.request_id")?,
        },
        Body::StatsReply(r) => ShardingBody::StatsReply(stats_from_pb(r, limits)?),
    };
    Ok(ShardingFrame { kind, body })
}

/// Decodes and validates a `ShardingFrame` payload.
///
/// Never panics: malformed protobuf or UTF-8, an empty or over-long kind or id, too many
/// shards, a repeated shard or region, a missing or unknown `oneof` variant, an unknown
/// enumeration value, a missing address, a port over 65535, a reply to ask id 0 and a stats
/// request or reply with request id 0 are all reported as a [`DecodeError`] naming the field.
///
/// The payload of an envelope or reply is copied out of `bytes`; a receiver holding the
/// frame as [`Bytes`] avoids that copy with [`decode_sharding_bytes`].
pub fn decode_sharding(
    bytes: &[u8],
    limits: &ShardingLimits,
) -> Result<ShardingFrame, DecodeError> {
    decode_sharding_bytes(Bytes::copy_from_slice(bytes), limits)
}

/// [`decode_sharding`] from a shared buffer: envelope and reply payloads are slices of
/// `bytes` (a reference count, no copy), which matters for large messages since
/// [`FrameCodec`](crate::FrameCodec) hands out user payloads as [`Bytes`] anyway.
pub fn decode_sharding_bytes(
    bytes: Bytes,
    limits: &ShardingLimits,
) -> Result<ShardingFrame, DecodeError> {
    decode_sharding_cached(bytes, limits, &mut IdCache::default())
}

/// [`decode_sharding_bytes`] for a receiver that decodes many frames: the shard ids of
/// envelope batches come from `ids` (one allocation per distinct shard, not per envelope).
pub fn decode_sharding_cached(
    bytes: Bytes,
    limits: &ShardingLimits,
    ids: &mut IdCache,
) -> Result<ShardingFrame, DecodeError> {
    if let Some(batch) = EnvelopeBatch::decode(bytes.clone(), limits)? {
        return Ok(ShardingFrame {
            kind: Arc::from(batch.kind()),
            body: ShardingBody::Envelopes(batch.to_envelopes(ids)),
        });
    }
    frame_from_pb(pb::ShardingFrame::decode(bytes)?, limits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use shardik_core::membership::Address;

    fn node(i: u16) -> UniqueAddress {
        UniqueAddress::new(
            Address::new(format!("10.0.0.{i}"), 7355),
            0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(u64::from(i) + 1),
        )
    }

    fn s(id: &str) -> ShardId {
        Arc::from(id)
    }

    fn ask(n: u64) -> Option<NonZeroU64> {
        NonZeroU64::new(n)
    }

    /// Which variant, by an exhaustive match: a new `Protocol` variant fails to compile here
    /// until it is added to the table below (and, through the compiler, to the codec).
    fn variant_index(p: &Protocol) -> usize {
        match p {
            Protocol::Register { .. } => 0,
            Protocol::GetShardHome { .. } => 1,
            Protocol::BeginHandOffAck { .. } => 2,
            Protocol::ShardStopped { .. } => 3,
            Protocol::GracefulShutdownReq => 4,
            Protocol::RegionStopped => 5,
            Protocol::ShardStarted { .. } => 6,
            Protocol::RegisterAck => 7,
            Protocol::ShardHome { .. } => 8,
            Protocol::ShardHomes { .. } => 9,
            Protocol::HostShard { .. } => 10,
            Protocol::BeginHandOff { .. } => 11,
            Protocol::HandOff { .. } => 12,
            Protocol::HandOffDrained { .. } => 13,
            Protocol::HandOverDone { .. } => 14,
            Protocol::CoordinatorStarted { .. } => 15,
            Protocol::KindNotStarted { .. } => 16,
            Protocol::ShardsRevoked { .. } => 17,
            Protocol::RoutingHere { .. } => 18,
            Protocol::NotHere { .. } => 19,
            Protocol::SilentHomes { .. } => 20,
        }
    }
    const VARIANTS: usize = 21;

    fn all_protocol() -> Vec<Protocol> {
        vec![
            Protocol::Register {
                hosted: vec![],
                proxy: false,
            },
            Protocol::Register {
                hosted: vec![s("0"), s("17"), s("žluťoučký")],
                proxy: false,
            },
            Protocol::Register {
                hosted: vec![],
                proxy: true,
            },
            Protocol::GetShardHome { shard: s("42") },
            Protocol::BeginHandOffAck {
                shard: s("42"),
                drained: false,
            },
            Protocol::BeginHandOffAck {
                shard: s("42"),
                drained: true,
            },
            Protocol::ShardStopped {
                shard: s("7"),
                forwarding: false,
            },
            Protocol::ShardStopped {
                shard: s("8"),
                forwarding: true,
            },
            Protocol::GracefulShutdownReq,
            Protocol::RegionStopped,
            Protocol::ShardStarted { shard: s("9") },
            Protocol::RegisterAck,
            Protocol::CoordinatorStarted { epoch: 0 },
            Protocol::CoordinatorStarted { epoch: u64::MAX },
            Protocol::KindNotStarted { epoch: 0 },
            Protocol::KindNotStarted { epoch: 42 },
            Protocol::ShardHome {
                shard: s("3"),
                region: node(1),
            },
            Protocol::ShardHomes { homes: vec![] },
            Protocol::SilentHomes { homes: vec![] },
            Protocol::SilentHomes {
                homes: vec![(node(2), vec![s("1"), s("9")]), (node(3), vec![s("4")])],
            },
            Protocol::ShardHomes {
                homes: vec![
                    (node(1), vec![s("1"), s("2")]),
                    (node(2), vec![]),
                    (node(3), vec![s("3")]),
                ],
            },
            Protocol::HostShard {
                shard: s("5"),
                predecessor: None,
            },
            Protocol::HostShard {
                shard: s("5"),
                predecessor: Some(node(4)),
            },
            Protocol::BeginHandOff { shard: s("6") },
            Protocol::HandOff {
                shard: s("6"),
                drained_from: vec![],
            },
            Protocol::HandOff {
                shard: s("6"),
                drained_from: vec![node(1), node(2)],
            },
            Protocol::RoutingHere {
                shard: s("4"),
                nonce: 0,
            },
            Protocol::RoutingHere {
                shard: s("4"),
                nonce: 7,
            },
            Protocol::NotHere {
                shard: s("4"),
                nonce: 7,
            },
            Protocol::ShardsRevoked { shards: vec![] },
            Protocol::ShardsRevoked {
                shards: vec![s("3"), s("9")],
            },
            Protocol::HandOffDrained { shard: s("8") },
            Protocol::HandOverDone { shard: s("8") },
        ]
    }

    fn frame(body: ShardingBody) -> ShardingFrame {
        ShardingFrame {
            kind: Arc::from("counter"),
            body,
        }
    }

    fn envelopes() -> Vec<WireEnvelope> {
        vec![
            WireEnvelope {
                entity_id: ByteString::from("user-1"),
                shard: s("17"),
                payload: Bytes::from_static(b"\x08\x01hello"),
                ask_id: None,
            },
            WireEnvelope {
                entity_id: ByteString::from("user-1"),
                shard: s("17"),
                payload: Bytes::new(),
                ask_id: ask(1),
            },
            WireEnvelope {
                entity_id: ByteString::from("order/2024/0001"),
                shard: s("0"),
                payload: Bytes::from(vec![0xab; 300]),
                ask_id: ask(u64::MAX),
            },
            WireEnvelope {
                entity_id: ByteString::from("x".repeat(DEFAULT_MAX_ID_LEN)),
                shard: Arc::from("y".repeat(DEFAULT_MAX_ID_LEN)),
                payload: Bytes::from_static(b"at the limits"),
                ask_id: ask(128),
            },
        ]
    }

    fn replies() -> Vec<WireReply> {
        let mut out = vec![
            WireReply {
                ask_id: 1,
                result: Ok(Bytes::from_static(b"answer")),
            },
            // An empty answer is still an answer: the oneof member is sent even when empty.
            WireReply {
                ask_id: u64::MAX,
                result: Ok(Bytes::new()),
            },
        ];
        for (i, kind) in ReplyErrorKind::ALL.into_iter().enumerate() {
            out.push(WireReply {
                ask_id: 10 + i as u64,
                result: Err(ReplyError {
                    kind,
                    message: if i == 0 {
                        String::new()
                    } else {
                        format!("{kind} happened")
                    },
                }),
            });
        }
        out
    }

    fn stats_requests() -> Vec<ShardingBody> {
        [1, 128, u64::MAX]
            .into_iter()
            .map(|n| ShardingBody::StatsRequest {
                request_id: NonZeroU64::new(n).unwrap(),
            })
            .collect()
    }

    fn stats() -> Vec<WireStats> {
        vec![
            // A region hosting nothing (yet) answers with no shards.
            WireStats {
                request_id: NonZeroU64::MIN,
                shards: vec![],
                registered: false,
            },
            // Order is kept; zero entities (omitted by proto3) and the extremes survive.
            WireStats {
                request_id: NonZeroU64::new(42).unwrap(),
                shards: vec![
                    (s("17"), 3),
                    (s("0"), 0),
                    (s("žluťoučký"), u32::MAX),
                    (s("5"), 1),
                ],
                registered: true,
            },
            WireStats {
                request_id: NonZeroU64::MAX,
                shards: vec![(Arc::from("y".repeat(DEFAULT_MAX_ID_LEN)), 128)],
                registered: true,
            },
        ]
    }

    fn all_frames() -> Vec<ShardingFrame> {
        let mut out: Vec<ShardingFrame> = all_protocol()
            .into_iter()
            .map(|p| frame(ShardingBody::Protocol(p)))
            .collect();
        out.extend(
            envelopes()
                .into_iter()
                .map(|e| frame(ShardingBody::Envelope(e))),
        );
        out.push(frame(ShardingBody::Envelopes(envelopes())));
        out.push(frame(ShardingBody::Envelopes(Vec::new())));
        out.extend(replies().into_iter().map(|r| frame(ShardingBody::Reply(r))));
        out.extend(stats_requests().into_iter().map(frame));
        out.extend(
            stats()
                .into_iter()
                .map(|st| frame(ShardingBody::StatsReply(st))),
        );
        out
    }

    /// Which body, by an exhaustive match: a new `ShardingBody` variant fails to compile here
    /// until it is added to [`all_frames`] (and, through the compiler, to the codec).
    fn body_index(b: &ShardingBody) -> usize {
        match b {
            ShardingBody::Envelope(_) => 0,
            ShardingBody::Reply(_) => 1,
            ShardingBody::Protocol(_) => 2,
            ShardingBody::StatsRequest { .. } => 3,
            ShardingBody::StatsReply(_) => 4,
            ShardingBody::Envelopes(_) => 5,
        }
    }
    const BODIES: usize = 6;

    fn decode(b: &[u8]) -> Result<ShardingFrame, DecodeError> {
        decode_sharding(b, &ShardingLimits::default())
    }

    #[test]
    fn every_protocol_variant_is_in_the_table() {
        let mut hit = [false; VARIANTS];
        for p in all_protocol() {
            hit[variant_index(&p)] = true;
        }
        assert!(hit.iter().all(|h| *h), "{hit:?}");
    }

    #[test]
    fn every_body_variant_is_in_the_table() {
        let mut hit = [false; BODIES];
        for f in all_frames() {
            hit[body_index(&f.body)] = true;
        }
        assert!(hit.iter().all(|h| *h), "{hit:?}");
    }

    #[test]
    fn every_frame_round_trips_through_both_decoders() {
        for f in all_frames() {
            let b = encode_sharding(&f);
            assert_eq!(decode(&b).as_ref(), Ok(&f), "{f:?}");
            assert_eq!(
                decode_sharding_bytes(b, &ShardingLimits::default()).as_ref(),
                Ok(&f),
                "{f:?}"
            );
        }
    }

    #[test]
    fn reply_error_kinds_have_kebab_case_names_and_distinct_wire_numbers() {
        let names: Vec<&str> = ReplyErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "unknown-kind",
                "decode-failed",
                "entity-failed",
                "shard-unavailable",
                "buffer-full",
                "region-stopped"
            ]
        );
        let numbers: Vec<i32> = ReplyErrorKind::ALL
            .iter()
            .map(|k| k.to_pb() as i32)
            .collect();
        assert_eq!(numbers, [1, 2, 3, 4, 5, 6]);
        let e = ReplyError {
            kind: ReplyErrorKind::BufferFull,
            message: "region buffer of 100000 is full".into(),
        };
        assert_eq!(
            e.to_string(),
            "buffer-full: region buffer of 100000 is full"
        );
    }

    #[test]
    fn a_batch_decodes_as_prost_encodes_it_and_back() {
        let envs = envelopes();
        let prost = prost_batch("counter", &envs);
        let ours = encode_sharding(&frame(ShardingBody::Envelopes(envs.clone())));
        assert_eq!(
            &ours[..],
            &prost[..],
            "the hand-written batch is what prost writes"
        );
        let back = decode(&ours).unwrap();
        assert_eq!(back.body, ShardingBody::Envelopes(envs.clone()));
        for e in &envs {
            let mut item = BytesMut::new();
            encode_batch_item(&e.entity_id, &e.shard, &e.payload, e.ask_id, &mut item);
            assert_eq!(
                item.len(),
                batch_item_len(&e.entity_id, &e.shard, e.payload.len(), e.ask_id)
            );
        }
    }

    proptest! {
        /// The hand-written batch decoder reads what prost writes, envelope for envelope, and
        /// never panics on arbitrary bytes behind a batch's header.
        #[test]
        fn the_batch_decoder_agrees_with_prost(
            envs in proptest::collection::vec(
                ("[a-zé0-9]{1,12}", "[0-9]{1,4}", proptest::collection::vec(any::<u8>(), 0..40), any::<u64>()),
                0..20,
            ),
            junk in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let envs: Vec<WireEnvelope> = envs
                .into_iter()
                .map(|(e, sh, p, a)| WireEnvelope {
                    entity_id: ByteString::from(e.as_str()),
                    shard: s(&sh),
                    payload: Bytes::from(p),
                    ask_id: NonZeroU64::new(a),
                })
                .collect();
            let prost = prost_batch("k", &envs);
            let back = decode(&prost).unwrap();
            prop_assert_eq!(&back.body, &ShardingBody::Envelopes(envs.clone()));
            // Written in place, the same frame byte for byte.
            let mut out = BytesMut::new();
            let builder = BatchFrameBuilder::begin("k", &mut out);
            for e in &envs {
                encode_batch_item(&e.entity_id, &e.shard, &e.payload, e.ask_id, &mut out);
            }
            prop_assert_eq!(&builder.finish("k", out)[..], &prost[..]);
            // Read in place, the same envelopes.
            let batch = EnvelopeBatch::decode(Bytes::from(prost), &ShardingLimits::default())
                .unwrap()
                .expect("a batch frame");
            prop_assert_eq!(batch.kind(), "k");
            prop_assert_eq!(batch.len(), envs.len());
            for (seen, sent) in batch.iter().zip(&envs) {
                prop_assert_eq!(seen.entity_id, &*sent.entity_id);
                prop_assert_eq!(seen.shard, &*sent.shard);
                prop_assert_eq!(seen.payload, &sent.payload[..]);
                prop_assert_eq!(seen.payload_bytes(), sent.payload.clone());
                prop_assert_eq!(seen.ask_id, sent.ask_id);
            }
            let mut hostile = vec![0x0a, 0x01, b'k', 0x3a];
            hostile.push(junk.len() as u8);
            hostile.extend_from_slice(&junk);
            let _ = decode(&hostile);
        }
    }

    #[test]
    fn a_batch_written_in_place_is_the_batch_prost_writes() {
        // Kinds of several lengths (and none), bodies across the varint length boundaries.
        for kind in ["", "k", &"x".repeat(200)] {
            for n in [0usize, 1, 3, 127, 1000, 3000] {
                let envs: Vec<WireEnvelope> = (0..n)
                    .map(|i| WireEnvelope {
                        entity_id: ByteString::from(format!("e{i}").as_str()),
                        shard: s(&(i % 7).to_string()),
                        payload: Bytes::from(vec![i as u8; i % 50]),
                        ask_id: NonZeroU64::new(i as u64),
                    })
                    .collect();
                let mut out = BytesMut::new();
                let builder = BatchFrameBuilder::begin(kind, &mut out);
                for e in &envs {
                    encode_batch_item(&e.entity_id, &e.shard, &e.payload, e.ask_id, &mut out);
                }
                let ours = builder.finish(kind, out);
                assert_eq!(
                    &ours[..],
                    &prost_batch(kind, &envs)[..],
                    "kind of {} bytes, {n} envelopes",
                    kind.len()
                );
            }
        }
    }

    #[test]
    fn a_batch_over_the_limit_or_beside_another_body_is_refused() {
        let tiny = WireEnvelope {
            entity_id: ByteString::from("e"),
            shard: s("1"),
            payload: Bytes::new(),
            ask_id: None,
        };
        let limits = ShardingLimits {
            max_envelopes_per_batch: 3,
            ..ShardingLimits::default()
        };
        let three = encode_sharding(&frame(ShardingBody::Envelopes(vec![tiny.clone(); 3])));
        assert!(decode_sharding(&three, &limits).is_ok());
        let four = encode_sharding(&frame(ShardingBody::Envelopes(vec![tiny.clone(); 4])));
        let err = decode_sharding(&four, &limits).unwrap_err();
        assert!(err.to_string().contains("maximum of 3 envelopes"), "{err}");
        // A batch and a single envelope in one frame: two bodies.
        let mut both = BytesMut::from(&four[..]);
        both.extend_from_slice(&prost_envelope("", &tiny)[..]);
        assert!(decode(&both).is_err());
        // Envelopes inside a batch are validated like single ones.
        let empty_id = WireEnvelope {
            entity_id: ByteString::from(""),
            ..tiny
        };
        assert!(
            decode(&encode_sharding(&frame(ShardingBody::Envelopes(vec![
                empty_id
            ]))))
            .is_err()
        );
        // Every truncation of a valid batch is an error or a shorter valid frame, never a panic.
        for cut in 0..four.len() {
            let _ = decode(&four[..cut]);
        }
    }

    fn to_pb_envelope(e: &WireEnvelope) -> pb::Envelope {
        pb::Envelope {
            entity_id: e.entity_id.to_string(),
            shard_id: e.shard.to_string(),
            payload: e.payload.clone(),
            ask_id: e.ask_id.map_or(0, NonZeroU64::get),
        }
    }

    /// The envelope as prost would encode it: the reference the hand-written encoder must
    /// match byte for byte.
    fn prost_envelope(kind: &str, e: &WireEnvelope) -> Vec<u8> {
        pb_frame(kind, pb::sharding_frame::Body::Envelope(to_pb_envelope(e)))
    }

    /// A batch as prost would encode it.
    fn prost_batch(kind: &str, envs: &[WireEnvelope]) -> Vec<u8> {
        pb_frame(
            kind,
            pb::sharding_frame::Body::Envelopes(pb::EnvelopeBatch {
                envelopes: envs.iter().map(to_pb_envelope).collect(),
            }),
        )
    }

    fn check_envelope_encoder(kind: &str, e: &WireEnvelope) {
        let expected = prost_envelope(kind, e);
        let mut out = BytesMut::from(&b"header"[..]);
        encode_envelope(kind, &e.entity_id, &e.shard, &e.payload, e.ask_id, &mut out);
        assert_eq!(&out[..6], b"header", "existing content is kept");
        assert_eq!(&out[6..], &expected[..], "{kind:?} {e:?}");
        assert_eq!(
            envelope_encoded_len(kind, &e.entity_id, &e.shard, e.payload.len(), e.ask_id),
            expected.len()
        );
    }

    #[test]
    fn envelope_fast_path_matches_prost_byte_for_byte() {
        for e in envelopes() {
            check_envelope_encoder("counter", &e);
        }
        // Empty parts are omitted by both (and rejected by the decoder, but must still match).
        check_envelope_encoder(
            "",
            &WireEnvelope {
                entity_id: ByteString::from(""),
                shard: s(""),
                payload: Bytes::new(),
                ask_id: None,
            },
        );
    }

    #[test]
    fn varint_lengths_at_the_boundaries() {
        for (v, len) in [
            (0u64, 1usize),
            (127, 1),
            (128, 2),
            (16_383, 2),
            (16_384, 3),
            (u64::MAX >> 1, 9),
            (u64::MAX, 10),
        ] {
            assert_eq!(varint_len(v), len, "{v}");
            let mut buf = [0u8; 10];
            let n = write_varint(v, &mut buf);
            assert_eq!(n, len, "{v}");
            let b = &buf[..n];
            // Read back by the textbook rule: 7 bits per byte, high bit = more follows.
            let back = b.iter().enumerate().fold(0u64, |acc, (i, byte)| {
                acc | (u64::from(byte & 0x7f) << (7 * i))
            });
            assert_eq!(back, v);
            assert!(b[..len - 1].iter().all(|byte| byte & 0x80 != 0));
            assert_eq!(b[len - 1] & 0x80, 0);
        }
    }

    #[test]
    fn decoding_from_bytes_does_not_copy_payloads() {
        let payload = Bytes::from(vec![7u8; 4096]);
        for body in [
            ShardingBody::Envelope(WireEnvelope {
                entity_id: ByteString::from("e"),
                shard: s("1"),
                payload: payload.clone(),
                ask_id: None,
            }),
            ShardingBody::Reply(WireReply {
                ask_id: 3,
                result: Ok(payload.clone()),
            }),
            ShardingBody::Envelopes(vec![WireEnvelope {
                entity_id: ByteString::from("e"),
                shard: s("1"),
                payload: payload.clone(),
                ask_id: None,
            }]),
        ] {
            let wire = encode_sharding(&frame(body));
            let range = wire.as_ptr_range();
            let decoded = decode_sharding_bytes(wire.clone(), &ShardingLimits::default()).unwrap();
            let p = match decoded.body {
                ShardingBody::Envelope(e) => e.payload,
                ShardingBody::Reply(r) => r.result.unwrap(),
                ShardingBody::Envelopes(mut e) => e.remove(0).payload,
                ShardingBody::Protocol(_)
                | ShardingBody::StatsRequest { .. }
                | ShardingBody::StatsReply(_) => unreachable!(),
            };
            assert_eq!(p, payload);
            assert!(range.contains(&p.as_ptr()), "payload was copied");
        }
    }

    // ---- validation ------------------------------------------------------------------------

    fn pb_frame(kind: &str, body: pb::sharding_frame::Body) -> Vec<u8> {
        pb::ShardingFrame {
            kind: kind.into(),
            body: Some(body),
        }
        .encode_to_vec()
    }

    fn pb_protocol(m: PM) -> Vec<u8> {
        pb_frame(
            "counter",
            pb::sharding_frame::Body::Protocol(pb::ProtocolMessage { message: Some(m) }),
        )
    }

    fn pb_envelope(kind: &str, entity: &str, shard: &str) -> Vec<u8> {
        pb_frame(
            kind,
            pb::sharding_frame::Body::Envelope(pb::Envelope {
                entity_id: entity.into(),
                shard_id: shard.into(),
                payload: Bytes::new(),
                ask_id: 0,
            }),
        )
    }

    fn pb_stats(request_id: u64, shards: &[(&str, u32)]) -> Vec<u8> {
        pb_frame(
            "counter",
            pb::sharding_frame::Body::StatsReply(pb::StatsReply {
                request_id,
                shards: shards
                    .iter()
                    .map(|(shard, entities)| pb::ShardStats {
                        shard: (*shard).into(),
                        entities: *entities,
                    })
                    .collect(),
                registered: true,
            }),
        )
    }

    fn pb_node(i: u16) -> pbm::UniqueAddress {
        unique_address_to_pb(&node(i))
    }

    fn err(b: &[u8]) -> String {
        decode(b).unwrap_err().to_string()
    }

    #[test]
    fn empty_and_over_long_ids_are_rejected() {
        let max = "x".repeat(DEFAULT_MAX_ID_LEN);
        let over = "x".repeat(DEFAULT_MAX_ID_LEN + 1);
        assert!(decode(&pb_envelope(&max, &max, &max)).is_ok());

        assert_eq!(
            err(&pb_envelope("", "e", "1")),
            "ShardingFrame.kind is empty"
        );
        assert_eq!(
            err(&pb_envelope("k", "", "1")),
            "Envelope.entity_id is empty"
        );
        assert_eq!(
            err(&pb_envelope("k", "e", "")),
            "Envelope.shard_id is empty"
        );
        assert_eq!(
            err(&pb_envelope(&over, "e", "1")),
            "ShardingFrame.kind is 1025 bytes long, more than the maximum of 1024"
        );
        assert_eq!(
            err(&pb_envelope("k", &over, "1")),
            "Envelope.entity_id is 1025 bytes long, more than the maximum of 1024"
        );
        assert_eq!(
            err(&pb_envelope("k", "e", &over)),
            "Envelope.shard_id is 1025 bytes long, more than the maximum of 1024"
        );
        // The limit counts bytes, not characters: 2 × 2-byte characters against a limit of 3.
        let tight = ShardingLimits {
            max_id_len: 3,
            ..ShardingLimits::default()
        };
        assert!(matches!(
            decode_sharding(&pb_envelope("k", "éé", "1"), &tight),
            Err(DecodeError::TooLong { len: 4, max: 3, .. })
        ));

        assert_eq!(
            err(&pb_protocol(PM::GetShardHome(pb::GetShardHome {
                shard: String::new()
            }))),
            "GetShardHome.shard is empty"
        );
        assert_eq!(
            err(&pb_protocol(PM::Register(pb::Register {
                hosted: vec!["1".into(), String::new()],
                proxy: false,
            }))),
            "Register.hosted[1] is empty"
        );
        assert_eq!(
            err(&pb_protocol(PM::ShardHomes(pb::ShardHomes {
                homes: vec![pb::RegionShards {
                    region: Some(pb_node(1)),
                    shards: vec!["1".into(), over.clone()],
                }],
            }))),
            "ShardHomes.homes[0].shards[1] is 1025 bytes long, more than the maximum of 1024"
        );
        assert!(decode(&pb_stats(1, &[("1", 1), (&max, 2)])).is_ok());
        assert_eq!(
            err(&pb_stats(1, &[("1", 1), ("", 2)])),
            "StatsReply.shards[1].shard is empty"
        );
        assert_eq!(
            err(&pb_stats(1, &[(&over, 1)])),
            "StatsReply.shards[0].shard is 1025 bytes long, more than the maximum of 1024"
        );
    }

    /// `KindNotStarted` (variant 17) was added after the first release. A node of that
    /// release knows variants 1 to 16 only: protobuf skips the unknown field, so it sees a
    /// `ProtocolMessage` with no variant, which its decoder refuses as below; its inbound
    /// dispatcher then counts the frame in `shardik_sharding_dropped_total{reason="malformed"}`
    /// and drops it (the same path that counts any undecodable frame). Emulated here by
    /// renumbering the variant to one this version does not know either.
    #[test]
    fn an_older_decoder_drops_kind_not_started_as_an_unknown_variant() {
        let frame = ShardingFrame {
            kind: "counter".into(),
            body: ShardingBody::Protocol(Protocol::KindNotStarted { epoch: 5 }),
        };
        let bytes = encode_sharding(&frame).to_vec();
        assert_eq!(decode(&bytes), Ok(frame));
        // The key of field 17, length-delimited: (17 << 3) | 2 = 138, varint 0x8a 0x01.
        let key_17 = [0x8a, 0x01];
        let at: Vec<usize> = bytes
            .windows(2)
            .enumerate()
            .filter(|(_, w)| *w == key_17)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(at.len(), 1, "{bytes:?}");
        let mut unknown = bytes.clone();
        // Field 99: (99 << 3) | 2 = 794, varint 0x9a 0x06, the same length.
        unknown[at[0]..at[0] + 2].copy_from_slice(&[0x9a, 0x06]);
        assert_eq!(
            decode(&unknown),
            Err(DecodeError::MissingOrUnknownVariant(
                "ProtocolMessage.message"
            ))
        );
        // And an earlier `CoordinatorStarted` (no epoch) reads as epoch 0, which no
        // coordinator of this version uses.
        let old = pb_protocol(PM::CoordinatorStarted(pb::CoordinatorStarted::default()));
        assert_eq!(
            decode(&old).map(|f| f.body),
            Ok(ShardingBody::Protocol(Protocol::CoordinatorStarted {
                epoch: 0
            }))
        );
    }

    #[test]
    fn missing_and_unknown_variants_are_rejected() {
        let no_body = pb::ShardingFrame {
            kind: "k".into(),
            body: None,
        }
        .encode_to_vec();
        assert_eq!(
            decode(&no_body),
            Err(DecodeError::MissingOrUnknownVariant("ShardingFrame.body"))
        );
        assert_eq!(
            err(&no_body),
            "`ShardingFrame.body` is missing or holds a variant this version does not know"
        );

        // A body variant from a future version (field 9, length-delimited): skipped by
        // protobuf, so it arrives as no body at all.
        let mut future = no_body.clone();
        future.extend_from_slice(&[(9 << 3) | 2, 2, 0x08, 0x01]);
        assert_eq!(
            decode(&future),
            Err(DecodeError::MissingOrUnknownVariant("ShardingFrame.body"))
        );

        let no_message = pb_frame(
            "k",
            pb::sharding_frame::Body::Protocol(pb::ProtocolMessage { message: None }),
        );
        assert_eq!(
            decode(&no_message),
            Err(DecodeError::MissingOrUnknownVariant(
                "ProtocolMessage.message"
            ))
        );

        let no_result = pb_frame(
            "k",
            pb::sharding_frame::Body::Reply(pb::Reply {
                ask_id: 1,
                result: None,
            }),
        );
        assert_eq!(
            decode(&no_result),
            Err(DecodeError::MissingOrUnknownVariant("Reply.result"))
        );
    }

    fn pb_error_reply(kind: i32) -> Vec<u8> {
        pb_frame(
            "k",
            pb::sharding_frame::Body::Reply(pb::Reply {
                ask_id: 1,
                result: Some(pb::reply::Result::Error(pb::ReplyError {
                    kind,
                    message: "m".into(),
                })),
            }),
        )
    }

    #[test]
    fn unknown_and_unspecified_error_kinds_are_rejected() {
        assert!(decode(&pb_error_reply(6)).is_ok());
        assert_eq!(
            err(&pb_error_reply(7)),
            "ReplyError.kind has unknown value 7"
        );
        assert_eq!(
            err(&pb_error_reply(0)),
            "ReplyError.kind has unknown value 0"
        );
        assert_eq!(
            err(&pb_error_reply(-1)),
            "ReplyError.kind has unknown value -1"
        );
    }

    #[test]
    fn reply_to_ask_zero_is_rejected() {
        let b = pb_frame(
            "k",
            pb::sharding_frame::Body::Reply(pb::Reply {
                ask_id: 0,
                result: Some(pb::reply::Result::Payload(Bytes::new())),
            }),
        );
        assert!(matches!(decode(&b), Err(DecodeError::Invalid(_))));
        assert!(err(&b).starts_with("Reply.ask_id is 0"), "{}", err(&b));
    }

    #[test]
    fn stats_with_request_id_zero_are_rejected() {
        let request = |request_id| {
            pb_frame(
                "k",
                pb::sharding_frame::Body::StatsRequest(pb::StatsRequest { request_id }),
            )
        };
        assert!(decode(&request(1)).is_ok());
        assert!(matches!(decode(&request(0)), Err(DecodeError::Invalid(_))));
        assert_eq!(
            err(&request(0)),
            "StatsRequest.request_id is 0, which no stats request uses"
        );
        // Proto3 omits the 0 but still writes the (empty) oneof member, so a zero id arrives
        // as a StatsRequest, not as a missing body.
        assert_eq!(request(0), [0x0a, 0x01, b'k', (5 << 3) | 2, 0x00]);

        assert!(decode(&pb_stats(1, &[])).is_ok());
        assert!(matches!(
            decode(&pb_stats(0, &[("1", 1)])),
            Err(DecodeError::Invalid(_))
        ));
        assert_eq!(
            err(&pb_stats(0, &[])),
            "StatsReply.request_id is 0, which no stats request uses"
        );
    }

    #[test]
    fn missing_and_invalid_addresses_are_rejected() {
        assert_eq!(
            decode(&pb_protocol(PM::ShardHome(pb::ShardHome {
                shard: "1".into(),
                region: None,
            }))),
            Err(DecodeError::Missing("ShardHome.region"))
        );
        assert_eq!(
            decode(&pb_protocol(PM::ShardHomes(pb::ShardHomes {
                homes: vec![pb::RegionShards {
                    region: None,
                    shards: vec!["1".into()],
                }],
            }))),
            Err(DecodeError::Missing("ShardHomes.homes.region"))
        );
        let mut bad_port = pb_node(1);
        bad_port.port = 65_536;
        assert_eq!(
            err(&pb_protocol(PM::ShardHome(pb::ShardHome {
                shard: "1".into(),
                region: Some(bad_port.clone()),
            }))),
            "ShardHome.region has port 65536, which does not fit in 16 bits"
        );
        assert_eq!(
            err(&pb_protocol(PM::HostShard(pb::HostShard {
                shard: "1".into(),
                predecessor: Some(bad_port.clone()),
            }))),
            "HostShard.predecessor has port 65536, which does not fit in 16 bits"
        );
        assert_eq!(
            err(&pb_protocol(PM::HandOff(pb::HandOff {
                shard: "1".into(),
                drained_from: vec![pb_node(1), bad_port.clone()],
            }))),
            "HandOff.drained_from[1] has port 65536, which does not fit in 16 bits"
        );
        assert_eq!(
            err(&pb_protocol(PM::ShardHomes(pb::ShardHomes {
                homes: vec![pb::RegionShards {
                    region: Some(bad_port),
                    shards: vec![],
                }],
            }))),
            "ShardHomes.homes[0].region has port 65536, which does not fit in 16 bits"
        );
    }

    #[test]
    fn repeats_are_rejected() {
        assert_eq!(
            err(&pb_protocol(PM::Register(pb::Register {
                hosted: vec!["1".into(), "2".into(), "1".into()],
                proxy: false,
            }))),
            "Register.hosted[2] repeats shard `1`"
        );
        assert_eq!(
            err(&pb_protocol(PM::ShardHomes(pb::ShardHomes {
                homes: vec![
                    pb::RegionShards {
                        region: Some(pb_node(1)),
                        shards: vec!["1".into()],
                    },
                    pb::RegionShards {
                        region: Some(pb_node(2)),
                        shards: vec!["2".into(), "1".into()],
                    },
                ],
            }))),
            "ShardHomes.homes[1].shards[1] repeats shard `1`"
        );
        assert_eq!(
            err(&pb_protocol(PM::ShardHomes(pb::ShardHomes {
                homes: vec![
                    pb::RegionShards {
                        region: Some(pb_node(1)),
                        shards: vec!["1".into()],
                    },
                    pb::RegionShards {
                        region: Some(pb_node(1)),
                        shards: vec!["2".into()],
                    },
                ],
            }))),
            format!("ShardHomes.homes[1] repeats region {}", node(1))
        );
        assert_eq!(
            err(&pb_protocol(PM::HandOff(pb::HandOff {
                shard: "1".into(),
                drained_from: vec![pb_node(1), pb_node(2), pb_node(1)],
            }))),
            format!("HandOff.drained_from[2] repeats region {}", node(1))
        );
        // The same shard twice is rejected even with the same count.
        assert_eq!(
            err(&pb_stats(1, &[("1", 4), ("2", 0), ("1", 4)])),
            "StatsReply.shards[2].shard repeats shard `1`"
        );
    }

    #[test]
    fn a_proxy_hosting_shards_is_rejected() {
        let b = pb_protocol(PM::Register(pb::Register {
            hosted: vec!["1".into()],
            proxy: true,
        }));
        assert!(matches!(decode(&b), Err(DecodeError::Invalid(_))));
    }

    #[test]
    fn too_many_shards_are_rejected() {
        let limits = ShardingLimits {
            max_shards_per_message: 3,
            ..ShardingLimits::default()
        };
        let ids = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>();
        let register = |n| {
            pb_protocol(PM::Register(pb::Register {
                hosted: ids(n),
                proxy: false,
            }))
        };
        assert!(decode_sharding(&register(3), &limits).is_ok());
        assert_eq!(
            decode_sharding(&register(4), &limits)
                .unwrap_err()
                .to_string(),
            "Register.hosted lists 4 shards, more than the maximum of 3"
        );
        // ShardHomes counts all regions' shards together.
        let homes = |a: usize, b: usize| {
            let all = ids(a + b);
            pb_protocol(PM::ShardHomes(pb::ShardHomes {
                homes: vec![
                    pb::RegionShards {
                        region: Some(pb_node(1)),
                        shards: all[..a].to_vec(),
                    },
                    pb::RegionShards {
                        region: Some(pb_node(2)),
                        shards: all[a..].to_vec(),
                    },
                ],
            }))
        };
        assert!(decode_sharding(&homes(2, 1), &limits).is_ok());
        assert_eq!(
            decode_sharding(&homes(2, 2), &limits),
            Err(DecodeError::TooMany {
                field: "ShardHomes.homes",
                count: 4,
                max: 3
            })
        );
        let stats = |n: usize| {
            let ids = ids(n);
            let shards: Vec<(&str, u32)> = ids.iter().map(|i| (i.as_str(), 1)).collect();
            pb_stats(1, &shards)
        };
        assert!(decode_sharding(&stats(3), &limits).is_ok());
        assert_eq!(
            decode_sharding(&stats(4), &limits),
            Err(DecodeError::TooMany {
                field: "StatsReply.shards",
                count: 4,
                max: 3
            })
        );
    }

    #[test]
    fn malformed_protobuf_and_utf8_are_rejected() {
        // A length-delimited kind claiming 5 bytes with only 1 present.
        assert!(matches!(
            decode(&[0x0a, 0x05, b'k']),
            Err(DecodeError::Protobuf(_))
        ));
        // kind = 0xff: not UTF-8.
        assert!(matches!(
            decode(&[0x0a, 0x01, 0xff]),
            Err(DecodeError::Protobuf(_))
        ));
        // Nothing at all: no kind.
        assert_eq!(err(&[]), "ShardingFrame.kind is empty");
    }

    // ---- properties ------------------------------------------------------------------------

    fn arb_id() -> impl Strategy<Value = Arc<str>> {
        "[a-zA-Z0-9:/é-]{1,24}".prop_map(Arc::from)
    }

    fn arb_node() -> impl Strategy<Value = UniqueAddress> {
        ("[a-z0-9.]{0,16}", any::<u16>(), any::<u64>())
            .prop_map(|(h, p, u)| UniqueAddress::new(Address::new(h, p), u))
    }

    fn arb_shards(max: usize) -> impl Strategy<Value = Vec<ShardId>> {
        proptest::collection::btree_set(arb_id(), 0..max)
            .prop_map(|s| s.into_iter().collect::<Vec<_>>())
            .prop_shuffle()
    }

    fn arb_protocol() -> impl Strategy<Value = Protocol> {
        prop_oneof![
            (arb_shards(8), any::<bool>()).prop_map(|(hosted, proxy)| Protocol::Register {
                hosted: if proxy { vec![] } else { hosted },
                proxy,
            }),
            arb_id().prop_map(|shard| Protocol::GetShardHome { shard }),
            (arb_id(), any::<bool>())
                .prop_map(|(shard, drained)| Protocol::BeginHandOffAck { shard, drained }),
            (arb_id(), any::<bool>())
                .prop_map(|(shard, forwarding)| Protocol::ShardStopped { shard, forwarding }),
            Just(Protocol::GracefulShutdownReq),
            Just(Protocol::RegionStopped),
            arb_id().prop_map(|shard| Protocol::ShardStarted { shard }),
            Just(Protocol::RegisterAck),
            any::<u64>().prop_map(|epoch| Protocol::CoordinatorStarted { epoch }),
            any::<u64>().prop_map(|epoch| Protocol::KindNotStarted { epoch }),
            (arb_id(), arb_node())
                .prop_map(|(shard, region)| Protocol::ShardHome { shard, region }),
            (
                proptest::collection::btree_set(arb_node(), 0..5),
                proptest::collection::btree_map(arb_id(), any::<usize>(), 0..16),
            )
                .prop_map(|(regions, shards)| {
                    // Each shard goes to one region, so no shard has two homes.
                    let regions: Vec<UniqueAddress> = regions.into_iter().collect();
                    let mut homes: Vec<(UniqueAddress, Vec<ShardId>)> =
                        regions.into_iter().map(|r| (r, vec![])).collect();
                    if !homes.is_empty() {
                        let n = homes.len();
                        for (shard, pick) in shards {
                            homes[pick % n].1.push(shard);
                        }
                    }
                    Protocol::ShardHomes { homes }
                }),
            (arb_id(), proptest::option::of(arb_node()))
                .prop_map(|(shard, predecessor)| Protocol::HostShard { shard, predecessor }),
            arb_id().prop_map(|shard| Protocol::BeginHandOff { shard }),
            (arb_id(), proptest::collection::btree_set(arb_node(), 0..4)).prop_map(
                |(shard, drained)| Protocol::HandOff {
                    shard,
                    drained_from: drained.into_iter().collect(),
                }
            ),
            proptest::collection::btree_set(arb_id(), 0..8).prop_map(|shards| {
                Protocol::ShardsRevoked {
                    shards: shards.into_iter().collect(),
                }
            }),
            arb_id().prop_map(|shard| Protocol::HandOffDrained { shard }),
            arb_id().prop_map(|shard| Protocol::HandOverDone { shard }),
            (arb_id(), any::<u64>())
                .prop_map(|(shard, nonce)| Protocol::RoutingHere { shard, nonce }),
            (arb_id(), any::<u64>()).prop_map(|(shard, nonce)| Protocol::NotHere { shard, nonce }),
        ]
    }

    fn arb_envelope() -> impl Strategy<Value = WireEnvelope> {
        (
            arb_id(),
            arb_id(),
            proptest::collection::vec(any::<u8>(), 0..64),
            any::<u64>(),
        )
            .prop_map(|(entity_id, shard, payload, ask_id)| WireEnvelope {
                entity_id: ByteString::from(&*entity_id),
                shard,
                payload: Bytes::from(payload),
                ask_id: NonZeroU64::new(ask_id),
            })
    }

    fn arb_reply() -> impl Strategy<Value = WireReply> {
        let result = prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64).prop_map(|p| Ok(Bytes::from(p))),
            (0..ReplyErrorKind::ALL.len(), ".{0,32}").prop_map(|(k, message)| Err(ReplyError {
                kind: ReplyErrorKind::ALL[k],
                message,
            })),
        ];
        (1..=u64::MAX, result).prop_map(|(ask_id, result)| WireReply { ask_id, result })
    }

    fn arb_request_id() -> impl Strategy<Value = NonZeroU64> {
        (1..=u64::MAX).prop_map(|n| NonZeroU64::new(n).unwrap())
    }

    fn arb_stats() -> impl Strategy<Value = WireStats> {
        (
            arb_request_id(),
            proptest::collection::btree_map(arb_id(), any::<u32>(), 0..16)
                .prop_map(|m| m.into_iter().collect::<Vec<_>>())
                .prop_shuffle(),
            any::<bool>(),
        )
            .prop_map(|(request_id, shards, registered)| WireStats {
                request_id,
                shards,
                registered,
            })
    }

    fn arb_frame() -> impl Strategy<Value = ShardingFrame> {
        let body = prop_oneof![
            arb_envelope().prop_map(ShardingBody::Envelope),
            arb_reply().prop_map(ShardingBody::Reply),
            arb_protocol().prop_map(ShardingBody::Protocol),
            arb_request_id().prop_map(|request_id| ShardingBody::StatsRequest { request_id }),
            arb_stats().prop_map(ShardingBody::StatsReply),
        ];
        (arb_id(), body).prop_map(|(kind, body)| ShardingFrame { kind, body })
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&b);
            let _ = decode_sharding_bytes(Bytes::from(b), &ShardingLimits::default());
        }

        #[test]
        fn valid_frames_round_trip(f in arb_frame()) {
            let b = encode_sharding(&f);
            prop_assert_eq!(decode(&b), Ok(f.clone()));
            prop_assert_eq!(decode_sharding_bytes(b, &ShardingLimits::default()), Ok(f));
        }

        /// Corrupting any byte of a valid encoding yields a frame or an error, never a panic.
        #[test]
        fn corrupted_frames_never_panic(
            f in arb_frame(),
            at in any::<proptest::sample::Index>(),
            with in any::<u8>(),
            cut in any::<proptest::sample::Index>(),
        ) {
            let mut b = encode_sharding(&f).to_vec();
            let i = at.index(b.len());
            b[i] = with;
            let _ = decode(&b);
            b.truncate(cut.index(b.len() + 1));
            let _ = decode(&b);
        }

        #[test]
        fn envelope_fast_path_matches_prost(kind in ".{0,16}", e in arb_envelope()) {
            check_envelope_encoder(&kind, &e);
        }
    }
}
