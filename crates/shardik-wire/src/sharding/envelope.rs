//! The envelope fast path: hand-written protobuf, checked against prost by the tests. Also the
//! field numbers, wire types and varint helpers that the batch and reply fast paths share.

use std::num::NonZeroU64;

use bytes::{BufMut, BytesMut};

/// Field numbers from `proto/sharding.proto`; the tests pin that these writes decode with
/// the generated types.
pub(super) const FRAME_KIND: u8 = 1;
const FRAME_ENVELOPE: u8 = 2;
pub(super) const ENVELOPE_ENTITY_ID: u8 = 1;
pub(super) const ENVELOPE_SHARD_ID: u8 = 2;
pub(super) const ENVELOPE_PAYLOAD: u8 = 3;
pub(super) const ENVELOPE_ASK_ID: u8 = 4;

pub(super) const WIRE_VARINT: u8 = 0;
pub(super) const WIRE_LEN: u8 = 2;

/// A field key. All field numbers written by hand are below 16, so every key is one byte.
pub(super) const fn key(field: u8, wire_type: u8) -> u8 {
    (field << 3) | wire_type
}

pub(super) fn varint_len(v: u64) -> usize {
    // 7 payload bits per byte; 0 still takes one byte.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Writes `v` as a varint into the front of `buf`; returns how many bytes it took.
pub(super) fn write_varint(mut v: u64, buf: &mut [u8]) -> usize {
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
pub(super) fn put_key_varint(key: u8, v: u64, out: &mut impl BufMut) {
    let mut buf = [0u8; 11];
    buf[0] = key;
    let n = write_varint(v, &mut buf[1..]);
    out.put_slice(&buf[..=n]);
}

/// Encoded size of a proto3 length-delimited field holding `len` bytes: nothing when empty,
/// since proto3 omits default values (and prost does, which keeps the two encoders equal).
pub(super) fn len_field_len(len: usize) -> usize {
    if len == 0 {
        0
    } else {
        1 + varint_len(len as u64) + len
    }
}

pub(super) fn put_len_field(field: u8, value: &[u8], out: &mut impl BufMut) {
    if !value.is_empty() {
        put_key_varint(key(field, WIRE_LEN), value.len() as u64, out);
        out.put_slice(value);
    }
}

pub(super) fn envelope_body_len(
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
/// The result decodes with [`decode_sharding`](super::decode_sharding) to a
/// [`ShardingBody::Envelope`](super::ShardingBody::Envelope) and is identical to what
/// [`encode_sharding`](super::encode_sharding) produces for the same envelope. `out` is grown
/// once, by exactly [`envelope_encoded_len`] bytes; what it already holds is kept.
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
pub(super) fn put_envelope_field(
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
