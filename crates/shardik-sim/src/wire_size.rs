//! How many bytes a membership message would take on the wire, for the simulator's
//! bandwidth figures.
//!
//! This is a size model of our protobuf encoding (`shardik-wire`'s `membership.proto`: every
//! address, role and version written once in a table and referenced by index, varints, packed
//! fields), before compression. It is an estimate made
//! without running the encoder, so that simulations of 10 000 nodes stay fast (the real
//! encoder in `shardik-wire` would gzip every full state). Against the real encoder: raw
//! gossip sizes agree within about 5%; gzip makes a converged 1 000-node envelope about 2.3×
//! smaller than modelled; a status message whose clock has an entry per node is larger than
//! modelled (see docs/PERFORMANCE.md).

use shardik_core::membership::{Gossip, Message, UniqueAddress, VectorClock};

fn varint(v: u64) -> usize {
    (64 - v.max(1).leading_zeros() as usize).div_ceil(7)
}

/// Bytes of one unique address entry: host string, port, uid, and field tags.
fn unique_address(u: &UniqueAddress) -> usize {
    2 + u.address.host.len() + 1 + varint(u64::from(u.address.port)) + 1 + 8 + 2
}

fn vclock(v: &VectorClock) -> usize {
    v.entries()
        .map(|(_, c)| 2 + 3 + 1 + varint(c))
        .sum::<usize>()
        + 2
}

/// Bytes of a full gossip state.
pub fn gossip(g: &Gossip) -> usize {
    let addresses: usize = g
        .members
        .keys()
        .chain(g.tombstones.keys())
        .map(unique_address)
        .sum();
    let roles: usize = g.all_roles().iter().map(|r| r.len() + 2).sum();
    // Member: address index, up-number, status, role indexes, app-version index.
    let members: usize = g
        .members
        .values()
        .map(|m| 2 + 3 + varint(u64::from(m.up_number)) + 2 + 2 * m.roles.len() + 2)
        .sum();
    let seen = g.seen.len() * 3;
    let reachability: usize = g
        .reachability
        .observers()
        .values()
        .map(|rows| 6 + rows.subjects.len() * 7)
        .sum();
    let tombstones = g.tombstones.len() * 10;
    addresses + roles + members + seen + reachability + vclock(&g.version) + tombstones + 8
}

/// Bytes of a whole message (frame header included).
pub fn message(m: &Message) -> usize {
    const FRAME: usize = 6;
    FRAME
        + match m {
            Message::InitJoin { from, config } => {
                unique_address(from) + config.cluster_name.len() + 8
            }
            Message::InitJoinAck { from, .. } => unique_address(from) + 4,
            Message::InitJoinNack { from } => unique_address(from),
            Message::Join {
                node,
                roles,
                app_version,
                config,
            } => {
                unique_address(node)
                    + roles.iter().map(|r| r.len() + 2).sum::<usize>()
                    + app_version.len()
                    + 2
                    + config.as_ref().map_or(0, |c| {
                        // Name, then each map entry: key and value, with their tags and lengths.
                        4 + c.cluster_name.len()
                            + c.must_match
                                .iter()
                                .map(|(k, v)| k.len() + v.len() + 6)
                                .sum::<usize>()
                    })
            }
            Message::JoinRefused { from, to, reason } => {
                unique_address(from) + unique_address(to) + reason.len() + 3
            }
            Message::Welcome { from, gossip: g } => unique_address(from) + gossip(g),
            Message::Leave { address } | Message::Down { address } => address.host.len() + 6,
            Message::ExitingConfirmed { node } => unique_address(node),
            Message::GossipStatus { from, version, .. } => {
                unique_address(from) + vclock(version) + 10
            }
            Message::GossipEnvelope {
                from,
                to,
                gossip: g,
            } => unique_address(from) + unique_address(to) + gossip(g),
            Message::Heartbeat { from, seq } => unique_address(from) + 1 + varint(*seq) + 9,
            Message::HeartbeatRsp { from, seq } => unique_address(from) + 1 + varint(*seq) + 9,
            Message::Quarantined { from, to } | Message::NotKnown { from, to } => {
                unique_address(from) + unique_address(to)
            }
        }
}
