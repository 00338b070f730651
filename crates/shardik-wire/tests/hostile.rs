//! Hostile input: nothing panics, nothing allocates past the configured maxima.

mod common;

use bytes::{BufMut, BytesMut};
use common::*;
use proptest::prelude::*;
use shardik_core::membership::Address;
use shardik_wire::*;

fn frame_bytes(frame: &Frame) -> BytesMut {
    let mut b = BytesMut::new();
    FrameCodec::default().encode(frame, &mut b).unwrap();
    b
}

fn sample_frames() -> Vec<Frame> {
    let me = LocalIdentity {
        cluster_name: "prod".into(),
        address: node(1),
    };
    let mut frames: Vec<Frame> = all_messages().iter().map(Frame::membership).collect();
    frames.push(Frame::Handshake(Handshake::new(
        &me,
        Some(Address::new("10.0.0.2", 7355)),
    )));
    frames.push(Frame::Handshake(Handshake::new(&me, None)));
    frames.push(Frame::HandshakeAck(HandshakeReply::Accepted(
        HandshakeAck { from: node(2) },
    )));
    frames.push(Frame::HandshakeAck(HandshakeReply::Refused(
        HandshakeRefused {
            reason: "no".into(),
        },
    )));
    frames.push(Frame::User(bytes::Bytes::from_static(b"\x00\x01opaque")));
    frames.push(Frame::User(bytes::Bytes::new()));
    frames.push(Frame::Close("bye".into()));
    frames.push(Frame::Close(String::new()));
    frames
}

/// Decodes everything decodable from `buf`, including the membership payloads.
fn drain(codec: &FrameCodec, buf: &mut BytesMut) {
    while let Ok(Some(f)) = codec.decode(buf) {
        if let Frame::Membership(p) = f {
            let _ = decode_message(&p, &DecodeLimits::default());
        }
    }
}

#[test]
fn every_frame_kind_round_trips() {
    let codec = FrameCodec::default();
    for f in sample_frames() {
        let mut b = frame_bytes(&f);
        assert_eq!(codec.decode(&mut b).unwrap(), Some(f));
        assert!(b.is_empty());
    }
}

#[test]
fn frame_layout_is_length_kind_payload() {
    let b = frame_bytes(&Frame::Close("bye".into()));
    assert_eq!(&b[..], b"\x00\x00\x00\x04\x05bye");
    let b = frame_bytes(&Frame::User(bytes::Bytes::from_static(b"xy")));
    assert_eq!(&b[..], b"\x00\x00\x00\x03\x04xy");
}

#[test]
fn truncated_frames_wait_for_more() {
    let codec = FrameCodec::default();
    for f in sample_frames() {
        let whole = frame_bytes(&f);
        let mut buf = BytesMut::new();
        for (i, byte) in whole.iter().enumerate() {
            assert_eq!(codec.decode(&mut buf).unwrap(), None, "after {i} bytes");
            buf.put_u8(*byte);
        }
        assert_eq!(codec.decode(&mut buf).unwrap(), Some(f));
        assert!(buf.is_empty());
    }
}

#[test]
fn oversized_length_is_rejected_without_allocating() {
    let codec = FrameCodec::new(1024);
    for len in [1025u32, 1 << 20, u32::MAX] {
        let mut buf = BytesMut::with_capacity(8);
        buf.put_u32(len);
        let cap = buf.capacity();
        assert_eq!(
            codec.decode(&mut buf),
            Err(FrameError::TooLarge {
                len: u64::from(len),
                max: 1024
            })
        );
        assert!(
            buf.capacity() <= cap.max(64),
            "capacity grew to {}",
            buf.capacity()
        );
    }
    // At the maximum: waits, and reserves no more than the frame.
    let mut buf = BytesMut::with_capacity(8);
    buf.put_u32(1024);
    buf.put_u8(4);
    assert_eq!(codec.decode(&mut buf), Ok(None));
    assert!(
        buf.capacity() <= 2 * (1024 + 4),
        "capacity {}",
        buf.capacity()
    );
}

#[test]
fn encoding_an_oversized_frame_fails_and_writes_nothing() {
    let codec = FrameCodec::new(16);
    let mut buf = BytesMut::new();
    let r = codec.encode(&Frame::User(vec![0u8; 16].into()), &mut buf);
    assert_eq!(r, Err(FrameError::TooLarge { len: 17, max: 16 }));
    assert!(buf.is_empty());
    codec
        .encode(&Frame::User(vec![0u8; 15].into()), &mut buf)
        .unwrap();
    assert!(codec.decode(&mut buf).unwrap().is_some());
}

#[test]
fn zero_length_and_unknown_kinds_are_rejected() {
    let codec = FrameCodec::default();
    let mut buf = BytesMut::from(&b"\x00\x00\x00\x00"[..]);
    assert_eq!(codec.decode(&mut buf), Err(FrameError::Empty));
    for kind in [0u8, 6, 0x7f, 0xff] {
        // Rejected as soon as the kind byte arrives, before the rest of the frame.
        let mut buf = BytesMut::from(&[0, 0, 0, 100, kind][..]);
        assert_eq!(codec.decode(&mut buf), Err(FrameError::UnknownKind(kind)));
    }
}

#[test]
fn invalid_handshake_and_close_payloads_are_errors() {
    let codec = FrameCodec::default();
    let mut buf = BytesMut::from(&b"\x00\x00\x00\x03\x05\xff\xfe"[..]);
    assert!(matches!(
        codec.decode(&mut buf),
        Err(FrameError::Payload {
            kind: FrameKind::Close,
            ..
        })
    ));
    // A handshake without `from`.
    let mut buf = BytesMut::from(&b"\x00\x00\x00\x03\x01\x08\x01"[..]);
    let err = codec.decode(&mut buf).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid Handshake frame: missing field `Handshake.from`"
    );
    // An empty handshake-ack.
    let mut buf = BytesMut::from(&b"\x00\x00\x00\x01\x02"[..]);
    assert!(codec.decode(&mut buf).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn frame_decoder_never_panics_on_arbitrary_bytes(
        data in prop::collection::vec(any::<u8>(), 0..256),
        max in 1usize..512,
    ) {
        let codec = FrameCodec::new(max);
        let mut buf = BytesMut::from(&data[..]);
        let before = buf.capacity();
        drain(&codec, &mut buf);
        prop_assert!(buf.capacity() <= before.max(2 * (max + 8)));
    }

    #[test]
    fn decode_message_never_panics_on_arbitrary_bytes(
        data in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let _ = decode_message(&data, &DecodeLimits::default());
        let _ = decode_gossip(&data);
        let _ = Handshake::decode(&data);
        let _ = HandshakeReply::decode(&data);
    }

    #[test]
    fn mutated_frames_never_panic(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let frames = sample_frames();
        let mut bytes = frame_bytes(which.get(&frames)).to_vec();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        bytes.truncate(cut.index(bytes.len() + 1));
        drain(&FrameCodec::default(), &mut BytesMut::from(&bytes[..]));
        let _ = decode_message(&bytes, &DecodeLimits::default());
    }

    #[test]
    fn mutated_gossip_encodings_never_panic(
        g in arb_gossip(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let mut raw = encode_gossip(&g).to_vec();
        if !raw.is_empty() {
            for (at, b) in edits {
                let i = at.index(raw.len());
                raw[i] = b;
            }
        }
        let _ = decode_gossip(&raw);
        let mut gz = encode_gossip_compressed(&g).to_vec();
        let i = gz.len() / 2;
        gz[i] ^= 0x5a;
        let _ = decode_gossip_compressed(&gz, &DecodeLimits::default());
    }

    #[test]
    fn mutated_messages_never_panic(
        which in any::<prop::sample::Index>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
    ) {
        let msgs = all_messages();
        let mut bytes = encode_message(which.get(&msgs)).to_vec();
        for (at, b) in edits {
            let i = at.index(bytes.len());
            bytes[i] = b;
        }
        let _ = decode_message(&bytes, &DecodeLimits::default());
    }
}

#[test]
fn gzip_bomb_in_a_welcome_is_rejected() {
    // A real gossip padded to 4 MiB by a huge role name: valid, but over a 1 MiB limit.
    let mut g = rich_gossip();
    let mut m = g.members.values().next().unwrap().clone();
    m.roles.insert("x".repeat(4 << 20));
    g.update_member(m);
    let msg = shardik_core::membership::Message::Welcome {
        from: node(0),
        gossip: std::sync::Arc::new(g),
    };
    let bytes = encode_message(&msg);
    assert!(bytes.len() < 64 << 10, "compressed to {}", bytes.len());
    let limits = DecodeLimits {
        max_gossip_bytes: 1 << 20,
    };
    assert_eq!(
        decode_message(&bytes, &limits),
        Err(DecodeError::GossipTooLarge { max: 1 << 20 })
    );
    assert_eq!(
        decode_message(&bytes, &DecodeLimits::default()).unwrap(),
        msg
    );
}
