//! Encoded sizes of the messages sent most often, held to bounds that follow from the schemas
//! (`proto/membership.proto`, `proto/sharding.proto`) and the frame layout (`frame.rs`), not
//! to today's numbers: a change that makes them grow (an address written in full where an
//! index into the address table belongs, a field written per member that belongs to the
//! state, compression that stops paying, a batch that no longer shares its frame header)
//! crosses a bound here. Run with `--nocapture` to see the sizes, to compare with the
//! simulator's size model (`shardik-sim/src/wire_size.rs`) and docs/PERFORMANCE.md.
//!
//! Protobuf arithmetic used below: a field costs its key (one byte for field numbers up to
//! 15, all of ours), then for a length-delimited field a varint of its length (one byte up to
//! 127, two up to 16 383) and the bytes; a varint of `v` takes one byte per 7 bits of `v`.

mod common;

use std::num::NonZeroU64;
use std::sync::Arc;

use bytes::BytesMut;
use common::*;
use shardik_core::membership::Message;
use shardik_wire::*;

/// The longest host `common::node` makes (`10.0.3.250`).
const HOST_MAX: usize = 10;

/// A `UniqueAddress` of `common::node`, as an embedded field (an entry of the address table or
/// a message's `from`/`to`): key and one-byte length; host (key, length, text); port 7355
/// (key and a two-byte varint); uid (key and fixed64).
const ADDRESS_MAX: usize = 2 + (2 + HOST_MAX) + (1 + 2) + (1 + 8);

/// A member of a converged state (`common::converged_gossip`): key and length; address index
/// and up-number (key and at most a two-byte varint each, for fewer than 16 384 members);
/// status Up (key and one byte); its one role index, packed (key, length, one byte). The
/// app-version index is 0, which proto3 does not write.
const MEMBER_MAX: usize = 2 + 3 + 3 + 2 + 3;

/// A member's entry in the packed `seen` list: a varint index of at most two bytes.
const SEEN_MAX: usize = 2;

/// A vector clock entry of a converged state: key and length, address index (key and at most
/// two bytes), counter 3 (key and one byte).
const CLOCK_ENTRY_MAX: usize = 2 + 3 + 2;

/// Everything of a converged state that does not grow with its members: the role table
/// (`shard`), the app-version table (`1.0.0`), the key and length of the packed `seen` list.
const GOSSIP_FIXED_MAX: usize = (2 + 5) + (2 + 5) + (1 + 3);

/// The `MembershipMessage` wrapper around one message: the oneof key and a length of at most
/// three bytes (bodies under 2 MiB).
const MESSAGE_WRAPPER_MAX: usize = 1 + 3;

/// What gzip adds around its deflate stream (10-byte header, 8-byte trailer), and the most
/// deflate adds when it falls back to stored blocks (5 bytes per block of up to 64 KiB; our
/// states here stay under two blocks).
const GZIP_OVERHEAD_MAX: usize = 10 + 8 + 2 * 5;

/// A frame's header: the length prefix and the kind byte.
const FRAME_HEADER: usize = LENGTH_PREFIX + 1;

#[test]
fn converged_gossip_stays_within_what_its_schema_allows() {
    for n in [5u16, 100, 1000] {
        let members = usize::from(n);
        let g = converged_gossip(n);
        let raw = encode_gossip(&g).len();
        let gz = encode_gossip_compressed(&g).len();
        let envelope = encode_message(&Message::GossipEnvelope {
            from: node(0),
            to: node(1),
            gossip: Arc::new(g.clone()),
        })
        .len();
        let status = encode_message(&Message::GossipStatus {
            from: node(0),
            version: g.version.clone(),
            seen_digest: g.seen_digest(),
        })
        .len();
        println!(
            "{n:>5}-node converged gossip: raw {raw} B ({:.1} B/node), gzip {gz} B ({:.1} B/node), \
             GossipEnvelope {envelope} B, GossipStatus {status} B",
            raw as f64 / f64::from(n),
            gz as f64 / f64::from(n)
        );

        // Each address once in the table, everything else an index into it.
        let per_member = ADDRESS_MAX + MEMBER_MAX + SEEN_MAX + CLOCK_ENTRY_MAX;
        assert!(
            raw <= members * per_member + GOSSIP_FIXED_MAX,
            "{n} members: raw gossip {raw} B exceeds {per_member} B per member + \
             {GOSSIP_FIXED_MAX} B"
        );
        // Nothing is left out either: every member's host (at least `10.0.0.1`) and uid.
        assert!(
            raw >= members * (8 + 8),
            "{n} members: raw gossip {raw} B cannot hold every address"
        );

        // Compression never costs more than gzip's own framing, and pays once the state has
        // members enough to repeat itself (every member repeats its neighbour's tags, port,
        // host prefix, status and role).
        assert!(
            gz <= raw + GZIP_OVERHEAD_MAX,
            "{n} members: gzip {gz} B vs raw {raw} B"
        );
        if n >= 100 {
            assert!(
                gz < raw,
                "{n} members: gzip {gz} B does not shrink the raw {raw} B"
            );
        }

        // The envelope is the compressed state, two addresses and the framing fields.
        assert!(
            envelope > gz && envelope <= gz + 2 * ADDRESS_MAX + (1 + 3) + MESSAGE_WRAPPER_MAX,
            "{n} members: GossipEnvelope {envelope} B around {gz} B of gzip"
        );

        // The status carries the clock with its own address table, the sender and the digest
        // (key and fixed64); it is smaller than the state it summarises, which has the same
        // table and clock plus the members.
        let status_max =
            ADDRESS_MAX + members * (ADDRESS_MAX + CLOCK_ENTRY_MAX) + (1 + 8) + MESSAGE_WRAPPER_MAX;
        assert!(
            status <= status_max,
            "{n} members: GossipStatus {status} B exceeds {status_max} B"
        );
        assert!(
            status < raw,
            "{n} members: GossipStatus {status} B is not smaller than the state ({raw} B)"
        );
    }
}

#[test]
fn a_heartbeat_is_an_address_and_a_number() {
    for seq in [1u64, 1234, u64::MAX] {
        let hb = encode_message(&Message::Heartbeat { from: node(3), seq }).len();
        println!("heartbeat (seq {seq}): {hb} B (+{FRAME_HEADER} B frame header)");
        // The wrapper (one-byte length: the body is small), the sender, the sequence number
        // (key and varint).
        let max = 2 + ADDRESS_MAX + 1 + varint_len(seq);
        assert!(hb <= max, "heartbeat of seq {seq}: {hb} B exceeds {max} B");
    }
}

/// Bytes of `v` as a protobuf varint.
fn varint_len(v: u64) -> usize {
    (64 - v.max(1).leading_zeros() as usize).div_ceil(7)
}

/// A frame's bytes on the stream, header included.
fn framed(payload: bytes::Bytes) -> usize {
    let mut out = BytesMut::new();
    FrameCodec::default()
        .encode(&Frame::User(payload), &mut out)
        .expect("within the maximum frame size");
    out.len()
}

const KIND: &str = "shopping-cart";

/// Envelope `i` of a burst: its entity, its shard, a 32-byte payload; every other one an ask.
fn part(i: usize) -> (String, String, Vec<u8>, Option<NonZeroU64>) {
    (
        format!("cart-{i}"),
        (i % 100).to_string(),
        vec![i as u8; 32],
        NonZeroU64::new((i % 2 * (1_000_000 + i)) as u64),
    )
}

#[test]
fn an_envelope_is_its_ids_and_payload_plus_fixed_framing() {
    for i in [0usize, 1, 99_999] {
        let (entity, shard, payload, ask) = part(i);
        let mut out = BytesMut::new();
        encode_envelope(KIND, &entity, &shard, &payload, ask, &mut out);
        let body = out.len();
        assert_eq!(
            body,
            envelope_encoded_len(KIND, &entity, &shard, payload.len(), ask),
            "the announced length is the written length"
        );
        let frame = framed(out.freeze());
        let carried = KIND.len() + entity.len() + shard.len() + payload.len();
        // Frame header; the kind (key, length); the oneof key and one-byte body length; the
        // entity, shard and payload (key and one-byte length each); the ask id if any (key and
        // varint).
        let overhead_max =
            FRAME_HEADER + 2 + 2 + 3 * 2 + ask.map_or(0, |a| 1 + varint_len(a.get()));
        println!(
            "envelope {i} ({}): {frame} B framed, {carried} B of kind, ids and payload",
            if ask.is_some() { "ask" } else { "tell" }
        );
        assert!(
            frame <= carried + overhead_max,
            "envelope {i}: {frame} B framed, more than {carried} B + {overhead_max} B"
        );
    }
}

#[test]
fn a_batch_costs_less_than_its_envelopes_framed_one_by_one() {
    for n in [1usize, 2, 10, 100] {
        let parts: Vec<_> = (0..n).map(part).collect();
        let one_by_one: usize = parts
            .iter()
            .map(|(entity, shard, payload, ask)| {
                let mut out = BytesMut::new();
                encode_envelope(KIND, entity, shard, payload, *ask, &mut out);
                framed(out.freeze())
            })
            .sum();
        let mut out = BytesMut::new();
        let builder = BatchFrameBuilder::begin(KIND, &mut out);
        for (entity, shard, payload, ask) in &parts {
            encode_batch_item(entity, shard, payload, *ask, &mut out);
        }
        let batch = framed(builder.finish(KIND, out));
        println!("{n:>3} envelopes: {batch} B batched, {one_by_one} B framed one by one");

        // An item of a batch is an envelope without the frame header and the kind field: the
        // batch writes those once, plus the batch's own key and length (at most five bytes for
        // a frame under 8 MiB). So every envelope after the first saves the header and kind,
        // and a batch of one costs at most the batch's key and length more than the envelope.
        let header_and_kind = FRAME_HEADER + 2 + KIND.len();
        let batch_key_and_len = 1 + 5;
        assert!(
            batch + (n - 1) * header_and_kind <= one_by_one + batch_key_and_len,
            "{n} envelopes: {batch} B batched vs {one_by_one} B one by one"
        );
        if n >= 2 {
            assert!(batch < one_by_one, "{n} envelopes: batching saves nothing");
        }
    }
}
