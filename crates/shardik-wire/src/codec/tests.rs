//! Tests of the membership codec: gzip bombs and invalid gzip, gossip validation errors that
//! name the culprit, `Join` across versions, and missing fields and unspecified enumerations.

use super::*;

fn envelope_with(gossip_gz: Vec<u8>) -> Vec<u8> {
    let ua = pb::UniqueAddress {
        host: "h".into(),
        port: 1,
        uid: 1,
    };
    pb::MembershipMessage {
        message: Some(pb::membership_message::Message::GossipEnvelope(
            pb::GossipEnvelope {
                from: Some(ua.clone()),
                to: Some(ua),
                gossip_gz,
            },
        )),
    }
    .encode_to_vec()
}

#[test]
fn gzip_bomb_is_rejected_at_the_limit() {
    // 64 MiB of zeros compress to about 64 KiB.
    let bomb = gzip(&vec![0u8; 64 << 20]);
    assert!(bomb.len() < 1 << 20, "bomb is {} bytes", bomb.len());
    let limits = DecodeLimits {
        max_gossip_bytes: 1 << 20,
    };
    let err = decode_message(&envelope_with(bomb.clone()), &limits).unwrap_err();
    assert_eq!(err, DecodeError::GossipTooLarge { max: 1 << 20 });
    // The bounded reader itself never returns more than the limit.
    assert!(gunzip_bounded(&bomb, 1000).is_err());
}

#[test]
fn not_gzip_is_an_error() {
    let err = decode_message(
        &envelope_with(b"not gzip at all".to_vec()),
        &DecodeLimits::default(),
    )
    .unwrap_err();
    assert!(matches!(err, DecodeError::Gzip(_)), "{err}");
}

#[test]
fn valid_gzip_of_garbage_is_a_protobuf_error() {
    let gz = gzip(&[0xff; 32]);
    let err = decode_message(&envelope_with(gz), &DecodeLimits::default()).unwrap_err();
    assert!(matches!(err, DecodeError::Protobuf(_)), "{err}");
}

fn addr(i: u16) -> pb::UniqueAddress {
    pb::UniqueAddress {
        host: format!("n{i}"),
        port: u32::from(i),
        uid: u64::from(i),
    }
}

fn base() -> pb::Gossip {
    pb::Gossip {
        all_addresses: (0..5).map(addr).collect(),
        all_roles: vec!["a".into()],
        all_app_versions: vec!["1".into()],
        members: (0..5)
            .map(|i| pb::Member {
                address_index: i,
                up_number: i,
                status: 1,
                role_indexes: vec![0],
                app_version_index: 0,
            })
            .collect(),
        ..Default::default()
    }
}

fn decode(p: pb::Gossip) -> Result<Gossip, DecodeError> {
    decode_gossip(&p.encode_to_vec())
}

#[test]
fn validation_errors_name_the_culprit() {
    assert!(decode(base()).is_ok());

    let mut p = base();
    p.members[3].address_index = 17;
    assert_eq!(
        decode(p).unwrap_err().to_string(),
        "member 3 refers to address index 17 but the table has 5"
    );

    let mut p = base();
    p.members[2].status = 9;
    assert_eq!(
        decode(p).unwrap_err().to_string(),
        "member 2 status has unknown value 9"
    );

    let mut p = base();
    p.members[1].role_indexes = vec![0, 1];
    assert_eq!(
        decode(p).unwrap_err().to_string(),
        "member 1 role 1 refers to role index 1 but the table has 1"
    );

    let mut p = base();
    p.members[1].role_indexes = vec![0, 0];
    assert!(matches!(decode(p), Err(DecodeError::Duplicate(_))));

    let mut p = base();
    p.members[4].app_version_index = 3;
    assert!(matches!(
        decode(p),
        Err(DecodeError::IndexOutOfRange {
            table: "app-version",
            ..
        })
    ));

    let mut p = base();
    p.all_addresses[4].port = 70_000;
    assert_eq!(
        decode(p).unwrap_err().to_string(),
        "gossip address 4 has port 70000, which does not fit in 16 bits"
    );

    let mut p = base();
    p.members[4].address_index = 0;
    assert!(matches!(decode(p), Err(DecodeError::Duplicate(_))));

    let mut p = base();
    p.seen = vec![0, 5];
    assert!(matches!(
        decode(p),
        Err(DecodeError::IndexOutOfRange { .. })
    ));

    let mut p = base();
    p.seen = vec![1, 1];
    assert!(matches!(decode(p), Err(DecodeError::Duplicate(_))));

    let mut p = base();
    p.reachability = vec![pb::ObserverReachability {
        address_index: 0,
        version: 1,
        subjects: vec![pb::SubjectReachability {
            address_index: 1,
            status: 3,
        }],
    }];
    assert_eq!(
        decode(p).unwrap_err().to_string(),
        "reachability observer 0 subject 0 status has unknown value 3"
    );

    let mut p = base();
    p.version = vec![
        pb::VectorClockEntry {
            address_index: 1,
            counter: 1,
        },
        pb::VectorClockEntry {
            address_index: 1,
            counter: 2,
        },
    ];
    assert!(matches!(decode(p), Err(DecodeError::Duplicate(_))));

    let mut p = base();
    p.tombstones = vec![pb::Tombstone {
        address_index: 9,
        removed_at_millis: 1,
    }];
    assert!(matches!(
        decode(p),
        Err(DecodeError::IndexOutOfRange { .. })
    ));
}

/// The previous version's `Join` had no configuration: it decodes as "none sent", which
/// the member judges itself (`membership/node/joining.rs`).
#[test]
fn a_join_of_the_previous_version_decodes_with_no_configuration() {
    let old = pb::MembershipMessage {
        message: Some(pb::membership_message::Message::Join(pb::Join {
            node: Some(addr(4)),
            roles: vec!["r".into()],
            app_version: "1.0.0".into(),
            config: None,
        })),
    }
    .encode_to_vec();
    match decode_message(&old, &DecodeLimits::default()) {
        Ok(Message::Join {
            config: None,
            app_version,
            ..
        }) => assert_eq!(app_version, "1.0.0"),
        other => panic!("{other:?}"),
    }
}

/// A node of the previous version reads a `Join` that carries a configuration: the new
/// field is one it skips.
#[test]
fn the_previous_version_reads_a_join_with_configuration() {
    #[derive(Clone, PartialEq, prost::Message)]
    struct JoinOfPreviousVersion {
        #[prost(message, optional, tag = "1")]
        node: Option<pb::UniqueAddress>,
        #[prost(string, repeated, tag = "2")]
        roles: Vec<String>,
        #[prost(string, tag = "3")]
        app_version: String,
    }
    let join = Message::Join {
        node: UniqueAddress::new(Address::new("10.0.0.4", 2552), 9),
        roles: ["r".to_string()].into_iter().collect(),
        app_version: "2.0.0".into(),
        config: Some(Box::new(JoinConfig {
            cluster_name: "prod".into(),
            must_match: [("k".to_string(), "v".to_string())].into(),
        })),
    };
    let Some(pb::membership_message::Message::Join(inner)) = to_pb(&join).message else {
        panic!("not a join");
    };
    let old = JoinOfPreviousVersion::decode(inner.encode_to_vec().as_slice())
        .expect("the previous version decodes it");
    assert_eq!(old.app_version, "2.0.0");
    assert_eq!(old.roles, vec!["r".to_string()]);
    assert_eq!(old.node.map(|n| n.port), Some(2552));
}

#[test]
fn missing_fields_and_unspecified_enums_are_rejected() {
    let empty = pb::MembershipMessage { message: None }.encode_to_vec();
    assert_eq!(
        decode_message(&empty, &DecodeLimits::default()),
        Err(DecodeError::Missing("MembershipMessage.message"))
    );
    let hb = pb::MembershipMessage {
        message: Some(pb::membership_message::Message::Heartbeat(pb::Heartbeat {
            from: None,
            sequence_nr: 1,
        })),
    }
    .encode_to_vec();
    assert_eq!(
        decode_message(&hb, &DecodeLimits::default()),
        Err(DecodeError::Missing("Heartbeat.from"))
    );
    // The incarnation a `NotKnown` is about decides whether its receiver acts on it.
    let not_known = pb::MembershipMessage {
        message: Some(pb::membership_message::Message::NotKnown(pb::NotKnown {
            from: Some(addr(1)),
            to: None,
        })),
    }
    .encode_to_vec();
    assert_eq!(
        decode_message(&not_known, &DecodeLimits::default()),
        Err(DecodeError::Missing("NotKnown.to"))
    );
    let ack = pb::MembershipMessage {
        message: Some(pb::membership_message::Message::InitJoinAck(
            pb::InitJoinAck {
                from: Some(addr(1)),
                check: 0,
                incompatibility: String::new(),
            },
        )),
    }
    .encode_to_vec();
    assert!(matches!(
        decode_message(&ack, &DecodeLimits::default()),
        Err(DecodeError::UnknownEnum { .. })
    ));
}
