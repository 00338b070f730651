//! The handshake check table.

mod common;

use common::node;
use shardik_core::membership::Address;
use shardik_wire::*;

#[test]
fn handshake_checks() {
    let ours = LocalIdentity {
        cluster_name: "prod".into(),
        address: node(1),
    };
    let good = Handshake::new(
        &LocalIdentity {
            cluster_name: "prod".into(),
            address: node(2),
        },
        Some(ours.address.address.clone()),
    );
    let other_addr = Address::new("10.9.9.9", 7355);
    let cases: Vec<(&str, Handshake, Result<(), RefusalReason>)> = vec![
        ("accepted", good.clone(), Ok(())),
        (
            "no `to` is fine",
            Handshake {
                to: None,
                ..good.clone()
            },
            Ok(()),
        ),
        (
            "other cluster",
            Handshake {
                cluster_name: "staging".into(),
                ..good.clone()
            },
            Err(RefusalReason::ClusterName {
                ours: "prod".into(),
                theirs: "staging".into(),
            }),
        ),
        (
            "newer protocol",
            Handshake {
                protocol_version: PROTOCOL_VERSION + 1,
                ..good.clone()
            },
            Err(RefusalReason::ProtocolVersion {
                theirs: PROTOCOL_VERSION + 1,
            }),
        ),
        (
            "protocol 0",
            Handshake {
                protocol_version: 0,
                ..good.clone()
            },
            Err(RefusalReason::ProtocolVersion { theirs: 0 }),
        ),
        (
            "wrong recipient",
            Handshake {
                to: Some(other_addr.clone()),
                ..good.clone()
            },
            Err(RefusalReason::WrongRecipient {
                ours: ours.address.address.clone(),
                expected: other_addr,
            }),
        ),
        (
            "same host, other port",
            Handshake {
                to: Some(Address::new(ours.address.address.host.to_string(), 1)),
                ..good.clone()
            },
            Err(RefusalReason::WrongRecipient {
                ours: ours.address.address.clone(),
                expected: Address::new(ours.address.address.host.to_string(), 1),
            }),
        ),
    ];
    for (name, h, expected) in cases {
        assert_eq!(check_handshake(&ours, &h), expected, "{name}");
        // The handshake itself survives the wire.
        assert_eq!(Handshake::decode(&h.encode()).unwrap(), h, "{name}");
    }
}

#[test]
fn refusal_reasons_name_both_sides() {
    let r = RefusalReason::ClusterName {
        ours: "prod".into(),
        theirs: "staging".into(),
    };
    let text = r.to_string();
    assert!(text.contains("prod") && text.contains("staging"), "{text}");
    let refused = HandshakeRefused::from(r);
    let reply = HandshakeReply::Refused(refused.clone());
    assert_eq!(HandshakeReply::decode(&reply.encode()).unwrap(), reply);
    assert_eq!(
        RefusalReason::ProtocolVersion { theirs: 7 }.to_string(),
        "incompatible protocol version 7: this node speaks 1..=1"
    );
}
