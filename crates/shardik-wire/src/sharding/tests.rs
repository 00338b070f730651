//! Tests of the sharding codec: every frame and body round-trips through both decoders, and the
//! hand-written envelope, batch and varint encoders write exactly what prost writes. Malformed
//! input is in [`malformed`], properties over arbitrary frames in [`properties`].

use std::num::NonZeroU64;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use proptest::prelude::*;
use prost::Message as _;
use shardik_core::membership::{Address, UniqueAddress};
use shardik_core::sharding::{Protocol, ShardId};

use super::envelope::{varint_len, write_varint};
use super::*;
use crate::codec::DecodeError;
use crate::pb::s as pb;

mod malformed;
mod properties;

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

fn pb_frame(kind: &str, body: pb::sharding_frame::Body) -> Vec<u8> {
    pb::ShardingFrame {
        kind: kind.into(),
        body: Some(body),
    }
    .encode_to_vec()
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
