//! Encode-then-decode returns the original, for every message variant and random gossips.

mod common;

use std::sync::Arc;

use common::*;
use proptest::prelude::*;
use shardik_core::membership::{Gossip, Message};
use shardik_wire::*;

#[test]
fn every_message_variant_round_trips() {
    let limits = DecodeLimits::default();
    for m in all_messages() {
        let bytes = encode_message(&m);
        let back = decode_message(&bytes, &limits).unwrap_or_else(|e| panic!("{}: {e}", m.kind()));
        assert_eq!(back, m, "{}", m.kind());
    }
}

#[test]
fn every_message_variant_round_trips_through_frames() {
    let codec = FrameCodec::default();
    let mut buf = bytes::BytesMut::new();
    let msgs = all_messages();
    for m in &msgs {
        codec.encode(&Frame::membership(m), &mut buf).unwrap();
    }
    for m in &msgs {
        match codec.decode(&mut buf).unwrap() {
            Some(Frame::Membership(p)) => {
                assert_eq!(&decode_message(&p, &DecodeLimits::default()).unwrap(), m)
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(codec.decode(&mut buf).unwrap(), None);
    assert!(buf.is_empty());
}

#[test]
fn rich_gossip_round_trips_raw_and_compressed() {
    let g = rich_gossip();
    assert_eq!(decode_gossip(&encode_gossip(&g)).unwrap(), g);
    assert_eq!(
        decode_gossip_compressed(&encode_gossip_compressed(&g), &DecodeLimits::default()).unwrap(),
        g
    );
    // Every status, roles and both app versions are present.
    assert_eq!(g.members.len(), 9);
    assert!(encode_gossip(&Gossip::default()).is_empty());
}

#[test]
fn encoding_is_deterministic() {
    let g = rich_gossip();
    assert_eq!(encode_gossip(&g), encode_gossip(&g.clone()));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_gossips_round_trip(g in arb_gossip()) {
        prop_assert_eq!(decode_gossip(&encode_gossip(&g)).unwrap(), g.clone());
        let m = Message::GossipEnvelope {
            from: node(1),
            to: node(2),
            gossip: Arc::new(g),
        };
        prop_assert_eq!(decode_message(&encode_message(&m), &DecodeLimits::default()).unwrap(), m);
    }
}
