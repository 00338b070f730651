//! Builders shared by the integration tests.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;
use shardik_core::membership::reachability::ObserverRows;
use shardik_core::membership::{
    Address, ConfigCheck, Gossip, JoinConfig, Member, MemberStatus, Message, Reachability,
    ReachabilityStatus, UniqueAddress, VectorClock,
};

pub fn node(i: u16) -> UniqueAddress {
    UniqueAddress::new(
        Address::new(format!("10.0.{}.{}", i / 250, i % 250 + 1), 7355),
        0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(u64::from(i) + 1),
    )
}

pub fn member(i: u16, status: MemberStatus, roles: &[&str], version: &str) -> Member {
    Member {
        addr: node(i),
        status,
        up_number: if status == MemberStatus::Joining {
            shardik_core::membership::NOT_YET_UP
        } else {
            u32::from(i) + 1
        },
        roles: roles.iter().map(|r| r.to_string()).collect(),
        app_version: version.into(),
    }
}

/// A gossip with a member of every status, roles, reachability rows (including an empty
/// row), a vector clock (including a non-member entry) and tombstones.
pub fn rich_gossip() -> Gossip {
    let mut members = Vec::new();
    for (i, s) in MemberStatus::ALL.iter().enumerate() {
        let roles: &[&str] = match i % 3 {
            0 => &[],
            1 => &["backend"],
            _ => &["backend", "dc-eu", "frontend"],
        };
        members.push(member(
            i as u16,
            *s,
            roles,
            if i < 4 { "1.0.0" } else { "1.1.0" },
        ));
    }
    let mut g = Gossip::with_members(members);
    g.seen = [node(0), node(2), node(5)].into_iter().collect();
    let mut rows = BTreeMap::new();
    rows.insert(
        node(1),
        ObserverRows {
            version: 3,
            subjects: [
                (node(3), ReachabilityStatus::Unreachable),
                (node(7), ReachabilityStatus::Terminated),
            ]
            .into_iter()
            .collect(),
        },
    );
    rows.insert(
        node(2),
        ObserverRows {
            version: 2,
            subjects: BTreeMap::new(),
        },
    );
    g.reachability = Reachability::from_observers(rows);
    g.version = VectorClock::from_entries([(node(0), 7), (node(2), 1), (node(40), u64::MAX)]);
    g.tombstones = [(node(30), 1_700_000_000_000), (node(31), 0)]
        .into_iter()
        .collect();
    g
}

/// One message of every variant.
pub fn all_messages() -> Vec<Message> {
    let g = Arc::new(rich_gossip());
    let mut must_match = BTreeMap::new();
    must_match.insert("sharding.number-of-shards".to_string(), "1000".to_string());
    must_match.insert("ünïcode".to_string(), String::new());
    vec![
        Message::InitJoin {
            from: node(1),
            config: JoinConfig {
                cluster_name: "prod".into(),
                must_match: must_match.clone(),
            },
        },
        Message::InitJoin {
            from: node(1),
            config: JoinConfig::default(),
        },
        Message::InitJoinAck {
            from: node(2),
            check: ConfigCheck::Compatible,
        },
        Message::InitJoinAck {
            from: node(2),
            check: ConfigCheck::Incompatible("`x` differs".into()),
        },
        Message::InitJoinAck {
            from: node(2),
            check: ConfigCheck::Incompatible(String::new()),
        },
        Message::InitJoinNack { from: node(3) },
        Message::Join {
            node: node(4),
            roles: ["a".to_string(), "b".to_string()].into_iter().collect(),
            app_version: "2.0.0".into(),
            config: Some(Box::new(JoinConfig {
                cluster_name: "prod".into(),
                must_match: must_match.clone(),
            })),
        },
        Message::Join {
            node: node(4),
            roles: BTreeSet::new(),
            app_version: "".into(),
            config: None,
        },
        Message::Join {
            node: node(4),
            roles: BTreeSet::new(),
            app_version: "".into(),
            config: Some(Box::default()),
        },
        Message::JoinRefused {
            from: node(2),
            to: node(4),
            reason: "`cluster.sharding.number-of-shards` differs: the cluster has `1000`, \
                     the joiner has `500`"
                .into(),
        },
        Message::Welcome {
            from: node(0),
            gossip: g.clone(),
        },
        Message::Welcome {
            from: node(0),
            gossip: Arc::new(Gossip::default()),
        },
        Message::Leave {
            address: Address::new("::1", 0),
        },
        Message::Down {
            address: Address::new("host.example", 65535),
        },
        Message::ExitingConfirmed { node: node(5) },
        Message::GossipStatus {
            from: node(1),
            version: g.version.clone(),
            seen_digest: g.seen_digest(),
        },
        Message::GossipStatus {
            from: node(1),
            version: VectorClock::new(),
            seen_digest: 0,
        },
        Message::GossipEnvelope {
            from: node(1),
            to: node(2),
            gossip: g,
        },
        Message::Heartbeat {
            from: node(6),
            seq: 0,
        },
        Message::Heartbeat {
            from: node(6),
            seq: u64::MAX,
        },
        Message::HeartbeatRsp {
            from: node(7),
            seq: 42,
        },
        Message::Quarantined {
            from: node(8),
            to: UniqueAddress::new(Address::new("", 1), 0),
        },
        Message::NotKnown {
            from: node(9),
            to: UniqueAddress::new(Address::new("joiner.example", 2552), u64::MAX),
        },
    ]
}

fn status() -> impl Strategy<Value = MemberStatus> {
    prop::sample::select(MemberStatus::ALL.to_vec())
}

fn reach() -> impl Strategy<Value = ReachabilityStatus> {
    prop::sample::select(vec![
        ReachabilityStatus::Reachable,
        ReachabilityStatus::Unreachable,
        ReachabilityStatus::Terminated,
    ])
}

fn unique() -> impl Strategy<Value = UniqueAddress> {
    ("[a-z0-9.:-]{0,12}", any::<u16>(), any::<u64>())
        .prop_map(|(h, p, u)| UniqueAddress::new(Address::new(h, p), u))
}

/// Random gossip states over a pool of addresses (members, seen, reachability, clock and
/// tombstones drawn from the same pool, plus strangers).
pub fn arb_gossip() -> impl Strategy<Value = Gossip> {
    prop::collection::vec(unique(), 1..24).prop_flat_map(|pool| {
        let n = pool.len();
        let idx = move || 0..n;
        (
            prop::collection::vec(
                (
                    idx(),
                    status(),
                    any::<u32>(),
                    prop::collection::btree_set("[a-z]{0,6}", 0..4),
                    "[0-9.]{0,6}",
                ),
                0..n + 1,
            ),
            prop::collection::btree_set(idx(), 0..n + 1),
            prop::collection::vec(
                (
                    idx(),
                    any::<u64>(),
                    prop::collection::vec((idx(), reach()), 0..5),
                ),
                0..4,
            ),
            prop::collection::vec((idx(), any::<u64>()), 0..n + 1),
            prop::collection::vec((idx(), any::<u64>()), 0..4),
        )
            .prop_map(move |(ms, seen, reach, clock, tomb)| {
                let members: BTreeMap<_, _> = ms
                    .into_iter()
                    .map(|(i, status, up_number, roles, v)| Member {
                        addr: pool[i].clone(),
                        status,
                        up_number,
                        roles,
                        app_version: v.as_str().into(),
                    })
                    .map(|m| (m.addr.clone(), m))
                    .collect();
                let observers = reach
                    .into_iter()
                    .map(|(o, version, subjects)| {
                        (
                            pool[o].clone(),
                            ObserverRows {
                                version,
                                subjects: subjects
                                    .into_iter()
                                    .map(|(s, st)| (pool[s].clone(), st))
                                    .collect(),
                            },
                        )
                    })
                    .collect();
                let mut g = Gossip::with_members(members.into_values());
                g.seen = seen.into_iter().map(|i| pool[i].clone()).collect();
                g.reachability = Reachability::from_observers(observers);
                g.version =
                    VectorClock::from_entries(clock.into_iter().map(|(i, c)| (pool[i].clone(), c)));
                g.tombstones = tomb
                    .into_iter()
                    .map(|(i, t)| (pool[i].clone(), t))
                    .collect();
                g
            })
    })
}

/// A realistic state of `n` Up members, all seen, a clock entry per node, no unreachability.
pub fn converged_gossip(n: u16) -> Gossip {
    let mut g =
        Gossip::with_members((0..n).map(|i| member(i, MemberStatus::Up, &["shard"], "1.0.0")));
    g.seen = g.members.keys().cloned().collect();
    g.version = VectorClock::from_entries(g.members.keys().map(|k| (k.clone(), 3)));
    g
}
