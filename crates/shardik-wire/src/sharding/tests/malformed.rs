//! Malformed input: every rule the sharding decoder enforces (ids, variants, enumerations,
//! ask and request ids, addresses, repeats, limits, protobuf and UTF-8), with the error it
//! reports.

use super::*;
use crate::codec::unique_address_to_pb;
use crate::pb::m as pbm;

use pb::protocol_message::Message as PM;

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
