//! Several envelopes of one entity kind in one frame (`EnvelopeBatch`, body 7 of
//! `ShardingFrame`): what a proxy or a forwarding region sends in a burst to one node. The kind
//! is written once, and the receiver takes the lot in one step instead of one per envelope.
//!
//! Encoding is by hand, as for single envelopes: each envelope is encoded as a batch item
//! ([`encode_batch_item`]) straight into the frame it leaves in ([`BatchFrameBuilder`]).
//! Decoding is by hand too ([`EnvelopeBatch`]), so that the number of envelopes is checked
//! against [`ShardingLimits::max_envelopes_per_batch`] while reading, before anything is
//! allocated for them: a small frame of many tiny envelopes must not cost many times its size
//! in memory.

use bytes::{Bytes, BytesMut};
use bytestring::ByteString;
use std::num::NonZeroU64;
use std::ops::Range;
use std::sync::Arc;

use super::envelope::{
    ENVELOPE_ASK_ID, ENVELOPE_ENTITY_ID, ENVELOPE_PAYLOAD, ENVELOPE_SHARD_ID, FRAME_KIND, WIRE_LEN,
    WIRE_VARINT, envelope_body_len, key, len_field_len, put_envelope_field, put_key_varint,
    put_len_field, varint_len,
};
use super::message::{ShardingLimits, WireEnvelope};
use super::validate::check_id;
use crate::codec::DecodeError;

/// `ShardingFrame.envelopes` (the batch body).
const FRAME_BATCH: u8 = 7;
/// `EnvelopeBatch.envelopes`.
const BATCH_ENVELOPE: u8 = 1;

/// The bytes [`encode_batch_item`] appends for these arguments.
pub fn batch_item_len(
    entity_id: &str,
    shard: &str,
    payload_len: usize,
    ask_id: Option<NonZeroU64>,
) -> usize {
    let body = envelope_body_len(entity_id, shard, payload_len, ask_id);
    1 + varint_len(body as u64) + body
}

/// Appends one envelope, encoded as an item of an `EnvelopeBatch`, to `out`.
pub fn encode_batch_item(
    entity_id: &str,
    shard: &str,
    payload: &[u8],
    ask_id: Option<NonZeroU64>,
    out: &mut BytesMut,
) {
    out.reserve(batch_item_len(entity_id, shard, payload.len(), ask_id));
    put_envelope_field(BATCH_ENVELOPE, entity_id, shard, payload, ask_id, out);
}

/// A batch frame written in place, so that its envelopes are copied once, from the sender's
/// hands into the frame: [`begin`](Self::begin) leaves room for the frame's header at the
/// start of an empty buffer, envelopes are appended with [`encode_batch_item`], and
/// [`finish`](Self::finish) writes the header at the end of the room (its length is known only
/// then) and hands back the frame without the unused front of the room.
#[derive(Debug)]
pub struct BatchFrameBuilder {
    room: usize,
}

impl BatchFrameBuilder {
    /// Starts a frame of kind `kind` in `out`, which must be empty.
    pub fn begin(kind: &str, out: &mut BytesMut) -> Self {
        assert!(out.is_empty(), "a batch frame starts in an empty buffer");
        // The kind field, the batch's key, and the longest varint of its length.
        let room = batch_header_len(kind, u64::MAX);
        out.resize(room, 0);
        BatchFrameBuilder { room }
    }

    /// The bytes of envelopes appended to `out` since [`begin`](Self::begin).
    pub fn body_len(&self, out: &BytesMut) -> usize {
        out.len() - self.room
    }

    /// The frame: `out` is what [`begin`](Self::begin) was given, with the envelopes
    /// appended. It decodes with [`decode_sharding`](super::decode_sharding) to a
    /// [`ShardingBody::Envelopes`](super::ShardingBody::Envelopes).
    pub fn finish(self, kind: &str, mut out: BytesMut) -> Bytes {
        let body = self.body_len(&out) as u64;
        let start = self.room - batch_header_len(kind, body);
        let mut header = &mut out[start..self.room];
        put_len_field(FRAME_KIND, kind.as_bytes(), &mut header);
        // A oneof member: written even when empty.
        put_key_varint(key(FRAME_BATCH, WIRE_LEN), body, &mut header);
        debug_assert!(header.is_empty(), "the header fills the end of its room");
        bytes::Buf::advance(&mut out, start);
        out.freeze()
    }
}

/// The bytes of a batch frame's header: its kind field and the batch's key and length.
fn batch_header_len(kind: &str, body_len: u64) -> usize {
    len_field_len(kind.len()) + 1 + varint_len(body_len)
}

/// Reads a varint at `*pos`, advancing it.
#[inline]
fn read_varint(b: &[u8], pos: &mut usize) -> Result<u64, DecodeError> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let Some(&byte) = b.get(*pos) else {
            return Err(malformed("truncated varint"));
        };
        *pos += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(malformed("varint longer than 10 bytes"))
}

fn malformed(what: &str) -> DecodeError {
    DecodeError::Invalid(format!("malformed protobuf: {what}"))
}

/// One field of a message: its number, and where its length-delimited value lies (`None` for
/// the other wire types, whose value is skipped).
#[inline]
fn next_field(
    b: &[u8],
    pos: &mut usize,
) -> Result<(u64, Option<std::ops::Range<usize>>), DecodeError> {
    let k = read_varint(b, pos)?;
    let (field, wire_type) = (k >> 3, k & 7);
    match wire_type {
        0 => {
            read_varint(b, pos)?;
            Ok((field, None))
        }
        1 | 5 => {
            let n = if wire_type == 1 { 8 } else { 4 };
            if b.len() - *pos < n {
                return Err(malformed("truncated fixed-width field"));
            }
            *pos += n;
            Ok((field, None))
        }
        2 => {
            let len = read_varint(b, pos)?;
            let len = usize::try_from(len).map_err(|_| malformed("length out of range"))?;
            if b.len() - *pos < len {
                return Err(malformed("length past the end"));
            }
            let range = *pos..*pos + len;
            *pos += len;
            Ok((field, Some(range)))
        }
        _ => Err(malformed("unsupported wire type")),
    }
}

/// A batch frame, checked but not copied: its kind and its envelopes' ids and payloads stay in
/// the frame's bytes, read in place by [`iter`](Self::iter). The receiver of a batch can so
/// find its entities and decode its commands without allocating or sharing anything per
/// envelope (every shared slice of the frame is a reference count that the decoding thread
/// raises and the handling thread drops again).
#[derive(Debug, Clone)]
pub struct EnvelopeBatch {
    frame: Bytes,
    kind: Range<usize>,
    items: Vec<BatchItem>,
}

/// Where one envelope's fields lie in the frame.
#[derive(Debug, Clone)]
struct BatchItem {
    entity: Range<usize>,
    shard: Range<usize>,
    payload: Range<usize>,
    ask_id: Option<NonZeroU64>,
}

/// One envelope of an [`EnvelopeBatch`], borrowed from the frame.
#[derive(Debug, Clone, Copy)]
pub struct BatchEnvelope<'a> {
    /// The entity.
    pub entity_id: &'a str,
    /// Its shard, as computed by the sender.
    pub shard: &'a str,
    /// The message, as the kind's codec wrote it.
    pub payload: &'a [u8],
    /// The sender's correlation id if this is an ask.
    pub ask_id: Option<NonZeroU64>,
    frame: &'a Bytes,
    payload_at: &'a Range<usize>,
}

impl BatchEnvelope<'_> {
    /// The payload as a shared slice of the frame, for a receiver that keeps it.
    pub fn payload_bytes(&self) -> Bytes {
        self.frame.slice(self.payload_at.clone())
    }
}

impl EnvelopeBatch {
    /// If `frame` is a `ShardingFrame` with a batch body, the batch; `None` for every other
    /// body (decoded by the generated code). A frame with a batch and another body, an empty
    /// or overlong kind or id, text that is not UTF-8, or more envelopes than the limit, is an
    /// error: nothing of such a frame is delivered.
    pub fn decode(frame: Bytes, limits: &ShardingLimits) -> Result<Option<Self>, DecodeError> {
        let mut pos = 0;
        let (mut kind, mut batch, mut other_body) = (None, None, false);
        while pos < frame.len() {
            let field = match next_field(&frame, &mut pos) {
                Ok(field) => field,
                // Not a batch as far as we read: the generated decoder reports what is wrong.
                Err(_) if batch.is_none() => return Ok(None),
                Err(e) => return Err(e),
            };
            match field {
                (1, Some(r)) => kind = Some(r),
                (f, range) if f == u64::from(FRAME_BATCH) => {
                    batch = Some(range.ok_or_else(|| {
                        malformed("ShardingFrame.envelopes is not length-delimited")
                    })?);
                }
                (2..=6, _) => other_body = true,
                _ => {}
            }
        }
        let Some(batch) = batch else {
            return Ok(None);
        };
        if other_body {
            return Err(DecodeError::Duplicate(
                "ShardingFrame holds a batch and another body".into(),
            ));
        }
        let kind = kind.unwrap_or(0..0);
        check_text(&frame[kind.clone()], limits, "ShardingFrame.kind")?;
        let mut items = Vec::new();
        let mut pos = batch.start;
        while pos < batch.end {
            let (field, range) = next_field(&frame[..batch.end], &mut pos)?;
            let Some(range) = range.filter(|_| field == u64::from(BATCH_ENVELOPE)) else {
                return Err(malformed(
                    "EnvelopeBatch holds a field other than envelopes",
                ));
            };
            if items.len() >= limits.max_envelopes_per_batch {
                return Err(DecodeError::Invalid(format!(
                    "EnvelopeBatch holds more than the maximum of {} envelopes",
                    limits.max_envelopes_per_batch
                )));
            }
            items.push(decode_item(&frame, range, limits)?);
        }
        Ok(Some(EnvelopeBatch { frame, kind, items }))
    }

    /// The entity kind the envelopes are for.
    pub fn kind(&self) -> &str {
        text_at(&self.frame, &self.kind)
    }

    /// How many envelopes the batch holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the batch holds no envelope.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The envelopes, in the order they were sent.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = BatchEnvelope<'_>> {
        self.items.iter().map(|item| BatchEnvelope {
            entity_id: text_at(&self.frame, &item.entity),
            shard: text_at(&self.frame, &item.shard),
            payload: &self.frame[item.payload.clone()],
            ask_id: item.ask_id,
            frame: &self.frame,
            payload_at: &item.payload,
        })
    }

    /// The envelopes as owned values (shard ids from `ids`).
    pub fn to_envelopes(&self, ids: &mut IdCache) -> Vec<WireEnvelope> {
        self.items
            .iter()
            .map(|item| WireEnvelope {
                entity_id: ByteString::try_from(self.frame.slice(item.entity.clone()))
                    .expect("checked as UTF-8 when the batch was decoded"),
                shard: ids.get(text_at(&self.frame, &item.shard)),
                payload: self.frame.slice(item.payload.clone()),
                ask_id: item.ask_id,
            })
            .collect()
    }
}

/// The text at `range` of `frame`, which [`EnvelopeBatch::decode`] checked to be UTF-8 (the
/// frame's bytes cannot change since: they are shared, never written).
fn text_at<'a>(frame: &'a Bytes, range: &Range<usize>) -> &'a str {
    std::str::from_utf8(&frame[range.clone()]).expect("checked as UTF-8 when the batch was decoded")
}

/// Checks an id or kind: UTF-8, neither empty nor longer than the limit.
fn check_text(
    bytes: &[u8],
    limits: &ShardingLimits,
    field: &'static str,
) -> Result<(), DecodeError> {
    let text = std::str::from_utf8(bytes).map_err(|_| malformed(field))?;
    check_id(text, limits, || field.into())
}

/// Shard ids met before, so that decoding one costs a lookup instead of an allocation: a node
/// has few shards and sees the same ones over and over. Bounded: past [`IdCache::CAPACITY`]
/// ids it only looks up, so a peer naming ever new shards cannot make it grow.
///
/// Hashed with a randomly seeded foldhash: fast, and a peer cannot choose colliding ids.
#[derive(Debug, Default)]
pub struct IdCache {
    ids: std::collections::HashSet<Arc<str>, foldhash::fast::RandomState>,
}

impl IdCache {
    /// The most ids kept.
    pub const CAPACITY: usize = 4096;

    /// `id` as a shared string: the cached one, or a new one (kept while there is room).
    pub fn get(&mut self, id: &str) -> Arc<str> {
        if let Some(known) = self.ids.get(id) {
            return Arc::clone(known);
        }
        let id: Arc<str> = Arc::from(id);
        if self.ids.len() < Self::CAPACITY {
            self.ids.insert(Arc::clone(&id));
        }
        id
    }
}

/// Where the fields of the `Envelope` at `frame[range]` lie, checked. As with the generated
/// code, unknown fields are skipped and a repeated field's last value counts.
fn decode_item(
    frame: &Bytes,
    range: Range<usize>,
    limits: &ShardingLimits,
) -> Result<BatchItem, DecodeError> {
    let body = &frame[..range.end];
    let mut pos = range.start;
    let (mut entity, mut shard, mut payload, mut ask_id) = (None, None, None, 0u64);
    while pos < range.end {
        let key_start = pos;
        let k = read_varint(body, &mut pos)?;
        if k & 7 == u64::from(WIRE_VARINT) && k >> 3 == u64::from(ENVELOPE_ASK_ID) {
            ask_id = read_varint(body, &mut pos)?;
            continue;
        }
        pos = key_start;
        match next_field(body, &mut pos)? {
            (f, Some(r)) if f == u64::from(ENVELOPE_ENTITY_ID) => entity = Some(r),
            (f, Some(r)) if f == u64::from(ENVELOPE_SHARD_ID) => shard = Some(r),
            (f, Some(r)) if f == u64::from(ENVELOPE_PAYLOAD) => payload = Some(r),
            (f, None)
                if [ENVELOPE_ENTITY_ID, ENVELOPE_SHARD_ID, ENVELOPE_PAYLOAD]
                    .iter()
                    .any(|&known| u64::from(known) == f) =>
            {
                return Err(malformed("an Envelope field has the wrong wire type"));
            }
            _ => {}
        }
    }
    let (entity, shard) = (entity.unwrap_or(0..0), shard.unwrap_or(0..0));
    check_text(&body[entity.clone()], limits, "Envelope.entity_id")?;
    check_text(&body[shard.clone()], limits, "Envelope.shard_id")?;
    Ok(BatchItem {
        entity,
        shard,
        payload: payload.unwrap_or(0..0),
        ask_id: NonZeroU64::new(ask_id),
    })
}
