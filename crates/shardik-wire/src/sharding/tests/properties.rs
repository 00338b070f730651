//! Properties over arbitrary frames: valid frames round-trip, arbitrary and corrupted bytes
//! never panic, and the envelope fast path matches prost for any envelope.

use proptest::prelude::*;

use super::*;

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
        (arb_id(), arb_node()).prop_map(|(shard, region)| Protocol::ShardHome { shard, region }),
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
        (arb_id(), any::<u64>()).prop_map(|(shard, nonce)| Protocol::RoutingHere { shard, nonce }),
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
