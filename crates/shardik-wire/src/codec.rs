//! Conversions between the membership [`Message`]s of `shardik-core` and their protobuf
//! encoding (`proto/membership.proto`), with full validation on the way in.
//!
//! The gossip state uses index tables, as the reference's encoding does: every unique address the state mentions is
//! written once in `all_addresses` and referred to by index from members, seen, reachability,
//! the vector clock and tombstones; roles and application versions likewise. The gossip inside
//! `Welcome` and `GossipEnvelope` is gzip-compressed; decompression stops at
//! [`DecodeLimits::max_gossip_bytes`], so a gzip bomb costs at most that much memory.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::sync::Arc;

use bytes::Bytes;
use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use prost::Message as _;

use shardik_core::membership::reachability::ObserverRows;
use shardik_core::membership::{
    Address, ConfigCheck, Gossip, JoinConfig, Member, MemberStatus, Message, Reachability,
    ReachabilityStatus, UniqueAddress, VectorClock,
};

use crate::pb::m as pb;

/// Bounds applied while decoding a membership message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeLimits {
    /// The most bytes a compressed gossip state may decompress to. Beyond that the message is
    /// rejected with [`DecodeError::GossipTooLarge`] without decompressing further.
    pub max_gossip_bytes: usize,
}

/// Default for [`DecodeLimits::max_gossip_bytes`]: 32 MiB, room for a 10 000-node state with
/// a full vector clock several times over.
pub const DEFAULT_MAX_GOSSIP_BYTES: usize = 32 * 1024 * 1024;

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_gossip_bytes: DEFAULT_MAX_GOSSIP_BYTES,
        }
    }
}

/// Why bytes could not be decoded into a message. Every variant names what was wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The bytes are not a valid protobuf encoding of the expected message.
    #[error("malformed protobuf: {0}")]
    Protobuf(#[from] prost::DecodeError),
    /// A field that must be present is absent.
    #[error("missing field `{0}`")]
    Missing(&'static str),
    /// An index refers past the end of its table.
    #[error("{context} refers to {table} index {index} but the table has {len}")]
    IndexOutOfRange {
        /// Which item holds the index, for example `member 3`.
        context: String,
        /// Which table, for example `address`.
        table: &'static str,
        /// The offending index.
        index: u32,
        /// The table's length.
        len: usize,
    },
    /// An enumeration holds a number this version does not know.
    #[error("{field} has unknown value {value}")]
    UnknownEnum {
        /// The field, for example `member 2 status`.
        field: String,
        /// The number found.
        value: i32,
    },
    /// A port number does not fit in 16 bits.
    #[error("{context} has port {port}, which does not fit in 16 bits")]
    PortOutOfRange {
        /// Which address, for example `gossip address 4`.
        context: String,
        /// The number found.
        port: u32,
    },
    /// The same key appears twice in what must be a set or map.
    #[error("{0}")]
    Duplicate(String),
    /// A compressed gossip state decompresses to more than the configured maximum.
    #[error("gossip decompresses to more than the maximum of {max} bytes")]
    GossipTooLarge {
        /// The configured maximum ([`DecodeLimits::max_gossip_bytes`]).
        max: usize,
    },
    /// A compressed gossip state is not valid gzip.
    #[error("compressed gossip is not valid gzip: {0}")]
    Gzip(String),
    /// A text field is not valid UTF-8 (only where the field is not protobuf).
    #[error("{0} is not valid UTF-8")]
    InvalidUtf8(&'static str),
    /// A `oneof` holds no variant. Protobuf skips fields it does not know, so a variant added
    /// by a newer version looks the same as none at all; the message says both.
    #[error("`{0}` is missing or holds a variant this version does not know")]
    MissingOrUnknownVariant(&'static str),
    /// A string that must not be empty (an entity kind, entity id or shard id) is empty.
    #[error("{0} is empty")]
    Empty(String),
    /// An identifier is longer than the configured maximum
    /// ([`ShardingLimits::max_id_len`](crate::ShardingLimits::max_id_len)).
    #[error("{field} is {len} bytes long, more than the maximum of {max}")]
    TooLong {
        /// Which field, for example `Register.hosted[3]`.
        field: String,
        /// Its length in bytes.
        len: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A message lists more shards than the configured maximum
    /// ([`ShardingLimits::max_shards_per_message`](crate::ShardingLimits::max_shards_per_message)).
    #[error("{field} lists {count} shards, more than the maximum of {max}")]
    TooMany {
        /// Which list, for example `ShardHomes.homes`.
        field: &'static str,
        /// How many it holds.
        count: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A field holds a value the protocol reserves or forbids; the text says which and why.
    #[error("{0}")]
    Invalid(String),
}

// ---------------------------------------------------------------------------------------------
// Addresses

pub(crate) fn unique_address_to_pb(u: &UniqueAddress) -> pb::UniqueAddress {
    pb::UniqueAddress {
        host: u.address.host.to_string(),
        port: u32::from(u.address.port),
        uid: u.uid,
    }
}

pub(crate) fn address_to_pb(a: &Address) -> pb::Address {
    pb::Address {
        host: a.host.to_string(),
        port: u32::from(a.port),
    }
}

fn port(p: u32, context: impl FnOnce() -> String) -> Result<u16, DecodeError> {
    u16::try_from(p).map_err(|_| DecodeError::PortOutOfRange {
        context: context(),
        port: p,
    })
}

pub(crate) fn unique_address_from_pb(
    u: pb::UniqueAddress,
    context: impl FnOnce() -> String,
) -> Result<UniqueAddress, DecodeError> {
    let port = port(u.port, context)?;
    Ok(UniqueAddress::new(Address::new(u.host, port), u.uid))
}

pub(crate) fn address_from_pb(
    a: pb::Address,
    context: impl FnOnce() -> String,
) -> Result<Address, DecodeError> {
    let port = port(a.port, context)?;
    Ok(Address::new(a.host, port))
}

pub(crate) fn required_unique(
    u: Option<pb::UniqueAddress>,
    field: &'static str,
) -> Result<UniqueAddress, DecodeError> {
    let u = u.ok_or(DecodeError::Missing(field))?;
    unique_address_from_pb(u, || field.to_string())
}

fn required_address(a: Option<pb::Address>, field: &'static str) -> Result<Address, DecodeError> {
    let a = a.ok_or(DecodeError::Missing(field))?;
    address_from_pb(a, || field.to_string())
}

// ---------------------------------------------------------------------------------------------
// Enumerations (same numbers as the reference)

fn status_to_pb(s: MemberStatus) -> pb::MemberStatus {
    match s {
        MemberStatus::Joining => pb::MemberStatus::Joining,
        MemberStatus::WeaklyUp => pb::MemberStatus::WeaklyUp,
        MemberStatus::Up => pb::MemberStatus::Up,
        MemberStatus::PreparingForShutdown => pb::MemberStatus::PreparingForShutdown,
        MemberStatus::ReadyForShutdown => pb::MemberStatus::ReadyForShutdown,
        MemberStatus::Leaving => pb::MemberStatus::Leaving,
        MemberStatus::Exiting => pb::MemberStatus::Exiting,
        MemberStatus::Down => pb::MemberStatus::Down,
        MemberStatus::Removed => pb::MemberStatus::Removed,
    }
}

fn status_from_pb(v: i32, field: impl FnOnce() -> String) -> Result<MemberStatus, DecodeError> {
    let s = pb::MemberStatus::try_from(v).map_err(|_| DecodeError::UnknownEnum {
        field: field(),
        value: v,
    })?;
    Ok(match s {
        pb::MemberStatus::Joining => MemberStatus::Joining,
        pb::MemberStatus::WeaklyUp => MemberStatus::WeaklyUp,
        pb::MemberStatus::Up => MemberStatus::Up,
        pb::MemberStatus::PreparingForShutdown => MemberStatus::PreparingForShutdown,
        pb::MemberStatus::ReadyForShutdown => MemberStatus::ReadyForShutdown,
        pb::MemberStatus::Leaving => MemberStatus::Leaving,
        pb::MemberStatus::Exiting => MemberStatus::Exiting,
        pb::MemberStatus::Down => MemberStatus::Down,
        pb::MemberStatus::Removed => MemberStatus::Removed,
    })
}

fn reach_to_pb(s: ReachabilityStatus) -> pb::ReachabilityStatus {
    match s {
        ReachabilityStatus::Reachable => pb::ReachabilityStatus::Reachable,
        ReachabilityStatus::Unreachable => pb::ReachabilityStatus::Unreachable,
        ReachabilityStatus::Terminated => pb::ReachabilityStatus::Terminated,
    }
}

fn reach_from_pb(
    v: i32,
    field: impl FnOnce() -> String,
) -> Result<ReachabilityStatus, DecodeError> {
    let s = pb::ReachabilityStatus::try_from(v).map_err(|_| DecodeError::UnknownEnum {
        field: field(),
        value: v,
    })?;
    Ok(match s {
        pb::ReachabilityStatus::Reachable => ReachabilityStatus::Reachable,
        pb::ReachabilityStatus::Unreachable => ReachabilityStatus::Unreachable,
        pb::ReachabilityStatus::Terminated => ReachabilityStatus::Terminated,
    })
}

// ---------------------------------------------------------------------------------------------
// Index tables

/// Builds a table of distinct values and the index of each.
struct Table<K: Ord> {
    index: BTreeMap<K, u32>,
}

impl<K: Ord + Clone> Table<K> {
    fn new(keys: impl IntoIterator<Item = K>) -> Self {
        let set: BTreeSet<K> = keys.into_iter().collect();
        Table {
            index: set
                .into_iter()
                .enumerate()
                // A table longer than u32::MAX entries cannot be in a frame anyway.
                .map(|(i, k)| (k, i as u32))
                .collect(),
        }
    }

    fn of(&self, k: &K) -> u32 {
        // Every key looked up was put into the table when it was built.
        self.index.get(k).copied().unwrap_or(u32::MAX)
    }

    fn keys(&self) -> impl Iterator<Item = &K> {
        self.index.keys()
    }
}

fn lookup<'a, T>(
    table: &'a [T],
    table_name: &'static str,
    index: u32,
    context: impl FnOnce() -> String,
) -> Result<&'a T, DecodeError> {
    table
        .get(index as usize)
        .ok_or_else(|| DecodeError::IndexOutOfRange {
            context: context(),
            table: table_name,
            index,
            len: table.len(),
        })
}

fn address_table(
    all: Vec<pb::UniqueAddress>,
    what: &'static str,
) -> Result<Vec<UniqueAddress>, DecodeError> {
    all.into_iter()
        .enumerate()
        .map(|(i, u)| unique_address_from_pb(u, || format!("{what} address {i}")))
        .collect()
}

fn vclock_to_pb(v: &VectorClock, table: &Table<UniqueAddress>) -> Vec<pb::VectorClockEntry> {
    v.entries()
        .map(|(n, c)| pb::VectorClockEntry {
            address_index: table.of(n),
            counter: c,
        })
        .collect()
}

fn vclock_from_pb(
    entries: Vec<pb::VectorClockEntry>,
    addresses: &[UniqueAddress],
) -> Result<VectorClock, DecodeError> {
    let mut out = BTreeMap::new();
    for (i, e) in entries.into_iter().enumerate() {
        let n = lookup(addresses, "address", e.address_index, || {
            format!("vector clock entry {i}")
        })?;
        if out.insert(n.clone(), e.counter).is_some() {
            return Err(DecodeError::Duplicate(format!(
                "vector clock entry {i} repeats node {n}"
            )));
        }
    }
    Ok(VectorClock::from_entries(out))
}

// ---------------------------------------------------------------------------------------------
// Gossip

fn gossip_to_pb(g: &Gossip) -> pb::Gossip {
    let observers = g.reachability.observers();
    let addresses = Table::new(
        g.members
            .keys()
            .chain(g.seen.iter())
            .chain(observers.keys())
            .chain(observers.values().flat_map(|r| r.subjects.keys()))
            .chain(g.version.entries().map(|(n, _)| n))
            .chain(g.tombstones.keys())
            .cloned(),
    );
    let roles = Table::new(g.members.values().flat_map(|m| m.roles.iter().cloned()));
    let versions = Table::new(g.members.values().map(|m| m.app_version.to_string()));
    pb::Gossip {
        all_addresses: addresses.keys().map(unique_address_to_pb).collect(),
        all_roles: roles.keys().cloned().collect(),
        all_app_versions: versions.keys().cloned().collect(),
        members: g
            .members
            .values()
            .map(|m| pb::Member {
                address_index: addresses.of(&m.addr),
                up_number: m.up_number,
                status: status_to_pb(m.status) as i32,
                role_indexes: m.roles.iter().map(|r| roles.of(r)).collect(),
                app_version_index: versions.of(&m.app_version.to_string()),
            })
            .collect(),
        seen: g.seen.iter().map(|n| addresses.of(n)).collect(),
        reachability: observers
            .iter()
            .map(|(o, rows)| pb::ObserverReachability {
                address_index: addresses.of(o),
                version: rows.version,
                subjects: rows
                    .subjects
                    .iter()
                    .map(|(s, st)| pb::SubjectReachability {
                        address_index: addresses.of(s),
                        status: reach_to_pb(*st) as i32,
                    })
                    .collect(),
            })
            .collect(),
        version: vclock_to_pb(&g.version, &addresses),
        tombstones: g
            .tombstones
            .iter()
            .map(|(n, t)| pb::Tombstone {
                address_index: addresses.of(n),
                removed_at_millis: *t,
            })
            .collect(),
    }
}

fn gossip_from_pb(p: pb::Gossip) -> Result<Gossip, DecodeError> {
    let addresses = address_table(p.all_addresses, "gossip")?;
    let roles = p.all_roles;
    let app_versions = p.all_app_versions;

    let mut members = BTreeMap::new();
    for (i, m) in p.members.into_iter().enumerate() {
        let addr = lookup(&addresses, "address", m.address_index, || {
            format!("member {i}")
        })?;
        let status = status_from_pb(m.status, || format!("member {i} status"))?;
        let mut member_roles = BTreeSet::new();
        for (j, r) in m.role_indexes.iter().enumerate() {
            let role = lookup(&roles, "role", *r, || format!("member {i} role {j}"))?;
            if !member_roles.insert(role.clone()) {
                return Err(DecodeError::Duplicate(format!(
                    "member {i} lists role `{role}` twice"
                )));
            }
        }
        let app_version = lookup(&app_versions, "app-version", m.app_version_index, || {
            format!("member {i}")
        })?;
        let member = Member {
            addr: addr.clone(),
            status,
            up_number: m.up_number,
            roles: member_roles,
            app_version: app_version.as_str().into(),
        };
        if members.insert(addr.clone(), member).is_some() {
            return Err(DecodeError::Duplicate(format!(
                "member {i} repeats address {addr}"
            )));
        }
    }

    let mut seen = BTreeSet::new();
    for (i, s) in p.seen.iter().enumerate() {
        let n = lookup(&addresses, "address", *s, || format!("seen entry {i}"))?;
        if !seen.insert(n.clone()) {
            return Err(DecodeError::Duplicate(format!(
                "seen entry {i} repeats {n}"
            )));
        }
    }

    let mut observers = BTreeMap::new();
    for (i, o) in p.reachability.into_iter().enumerate() {
        let observer = lookup(&addresses, "address", o.address_index, || {
            format!("reachability observer {i}")
        })?;
        let mut subjects = BTreeMap::new();
        for (j, s) in o.subjects.into_iter().enumerate() {
            let subject = lookup(&addresses, "address", s.address_index, || {
                format!("reachability observer {i} subject {j}")
            })?;
            let status = reach_from_pb(s.status, || {
                format!("reachability observer {i} subject {j} status")
            })?;
            if subjects.insert(subject.clone(), status).is_some() {
                return Err(DecodeError::Duplicate(format!(
                    "reachability observer {i} lists subject {subject} twice"
                )));
            }
        }
        let rows = ObserverRows {
            version: o.version,
            subjects,
        };
        if observers.insert(observer.clone(), rows).is_some() {
            return Err(DecodeError::Duplicate(format!(
                "reachability observer {i} repeats observer {observer}"
            )));
        }
    }

    let version = vclock_from_pb(p.version, &addresses)?;

    let mut tombstones = BTreeMap::new();
    for (i, t) in p.tombstones.into_iter().enumerate() {
        let n = lookup(&addresses, "address", t.address_index, || {
            format!("tombstone {i}")
        })?;
        if tombstones.insert(n.clone(), t.removed_at_millis).is_some() {
            return Err(DecodeError::Duplicate(format!("tombstone {i} repeats {n}")));
        }
    }

    // `with_members` keys the members by their address, which is how they were checked.
    let mut g = Gossip::with_members(members.into_values());
    g.seen = seen;
    g.reachability = Reachability::from_observers(observers);
    g.version = version;
    g.tombstones = tombstones;
    Ok(g)
}

/// The uncompressed protobuf encoding of a gossip state (the `Gossip` message).
pub fn encode_gossip(g: &Gossip) -> Bytes {
    Bytes::from(gossip_to_pb(g).encode_to_vec())
}

/// Decodes and validates an uncompressed `Gossip` message.
pub fn decode_gossip(bytes: &[u8]) -> Result<Gossip, DecodeError> {
    gossip_from_pb(pb::Gossip::decode(bytes)?)
}

/// gzip of the gossip's protobuf encoding, as carried in `Welcome` and `GossipEnvelope`.
pub fn encode_gossip_compressed(g: &Gossip) -> Bytes {
    Bytes::from(gzip(&gossip_to_pb(g).encode_to_vec()))
}

/// Decompresses (at most `limits.max_gossip_bytes`), decodes and validates a gossip state.
pub fn decode_gossip_compressed(gz: &[u8], limits: &DecodeLimits) -> Result<Gossip, DecodeError> {
    let raw = gunzip_bounded(gz, limits.max_gossip_bytes)?;
    decode_gossip(&raw)
}

fn gzip(raw: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(
        Vec::with_capacity(raw.len() / 4 + 64),
        Compression::default(),
    );
    // Writing into a Vec cannot fail.
    let _ = enc.write_all(raw);
    enc.finish().unwrap_or_default()
}

/// Decompresses `gz`, failing once the output would exceed `max` bytes.
fn gunzip_bounded(gz: &[u8], max: usize) -> Result<Vec<u8>, DecodeError> {
    let mut out = Vec::with_capacity(gz.len().saturating_mul(4).min(max));
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(1);
    GzDecoder::new(gz)
        .take(limit)
        .read_to_end(&mut out)
        .map_err(|e| DecodeError::Gzip(e.to_string()))?;
    if out.len() > max {
        return Err(DecodeError::GossipTooLarge { max });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Messages

fn join_config_to_pb(c: &JoinConfig) -> pb::JoinConfig {
    pb::JoinConfig {
        cluster_name: c.cluster_name.clone(),
        must_match: c.must_match.clone(),
    }
}

fn join_config_from_pb(c: pb::JoinConfig) -> JoinConfig {
    JoinConfig {
        cluster_name: c.cluster_name,
        must_match: c.must_match,
    }
}

fn status_message(from: &UniqueAddress, version: &VectorClock, digest: u64) -> pb::GossipStatus {
    let table = Table::new(version.entries().map(|(n, _)| n.clone()));
    pb::GossipStatus {
        from: Some(unique_address_to_pb(from)),
        all_addresses: table.keys().map(unique_address_to_pb).collect(),
        version: vclock_to_pb(version, &table),
        seen_digest: digest,
    }
}

fn to_pb(m: &Message) -> pb::MembershipMessage {
    use pb::membership_message::Message as P;
    let ua = |u: &UniqueAddress| Some(unique_address_to_pb(u));
    let inner = match m {
        Message::InitJoin { from, config } => P::InitJoin(pb::InitJoin {
            from: ua(from),
            config: Some(join_config_to_pb(config)),
        }),
        Message::InitJoinAck { from, check } => {
            let (kind, why) = match check {
                ConfigCheck::Compatible => (pb::ConfigCheckKind::Compatible, String::new()),
                ConfigCheck::Incompatible(why) => (pb::ConfigCheckKind::Incompatible, why.clone()),
            };
            P::InitJoinAck(pb::InitJoinAck {
                from: ua(from),
                check: kind as i32,
                incompatibility: why,
            })
        }
        Message::InitJoinNack { from } => P::InitJoinNack(pb::InitJoinNack { from: ua(from) }),
        Message::Join {
            node,
            roles,
            app_version,
            config,
        } => P::Join(pb::Join {
            node: ua(node),
            roles: roles.iter().cloned().collect(),
            app_version: app_version.to_string(),
            config: config.as_deref().map(join_config_to_pb),
        }),
        Message::JoinRefused { from, to, reason } => P::JoinRefused(pb::JoinRefused {
            from: ua(from),
            to: ua(to),
            reason: reason.clone(),
        }),
        Message::Welcome { from, gossip } => P::Welcome(pb::Welcome {
            from: ua(from),
            gossip_gz: encode_gossip_compressed(gossip).into(),
        }),
        Message::Leave { address } => P::Leave(pb::Leave {
            address: Some(address_to_pb(address)),
        }),
        Message::Down { address } => P::Down(pb::Down {
            address: Some(address_to_pb(address)),
        }),
        Message::ExitingConfirmed { node } => {
            P::ExitingConfirmed(pb::ExitingConfirmed { node: ua(node) })
        }
        Message::GossipStatus {
            from,
            version,
            seen_digest,
        } => P::GossipStatus(status_message(from, version, *seen_digest)),
        Message::GossipEnvelope { from, to, gossip } => P::GossipEnvelope(pb::GossipEnvelope {
            from: ua(from),
            to: ua(to),
            gossip_gz: encode_gossip_compressed(gossip).into(),
        }),
        Message::Heartbeat { from, seq } => P::Heartbeat(pb::Heartbeat {
            from: ua(from),
            sequence_nr: *seq,
        }),
        Message::HeartbeatRsp { from, seq } => P::HeartbeatRsp(pb::HeartbeatRsp {
            from: ua(from),
            sequence_nr: *seq,
        }),
        Message::Quarantined { from, to } => P::Quarantined(pb::Quarantined {
            from: ua(from),
            to: ua(to),
        }),
        Message::NotKnown { from, to } => P::NotKnown(pb::NotKnown {
            from: ua(from),
            to: ua(to),
        }),
    };
    pb::MembershipMessage {
        message: Some(inner),
    }
}

fn from_pb(p: pb::MembershipMessage, limits: &DecodeLimits) -> Result<Message, DecodeError> {
    use pb::membership_message::Message as P;
    let inner = p
        .message
        .ok_or(DecodeError::Missing("MembershipMessage.message"))?;
    Ok(match inner {
        P::InitJoin(m) => {
            let from = required_unique(m.from, "InitJoin.from")?;
            let c = m.config.ok_or(DecodeError::Missing("InitJoin.config"))?;
            Message::InitJoin {
                from,
                config: join_config_from_pb(c),
            }
        }
        P::InitJoinAck(m) => {
            let from = required_unique(m.from, "InitJoinAck.from")?;
            let check = match pb::ConfigCheckKind::try_from(m.check) {
                Ok(pb::ConfigCheckKind::Compatible) => ConfigCheck::Compatible,
                Ok(pb::ConfigCheckKind::Incompatible) => {
                    ConfigCheck::Incompatible(m.incompatibility)
                }
                Ok(pb::ConfigCheckKind::ConfigCheckUnspecified) | Err(_) => {
                    return Err(DecodeError::UnknownEnum {
                        field: "InitJoinAck.check".into(),
                        value: m.check,
                    });
                }
            };
            Message::InitJoinAck { from, check }
        }
        P::InitJoinNack(m) => Message::InitJoinNack {
            from: required_unique(m.from, "InitJoinNack.from")?,
        },
        P::Join(m) => {
            let node = required_unique(m.node, "Join.node")?;
            let mut roles = BTreeSet::new();
            for r in m.roles {
                if roles.contains(&r) {
                    return Err(DecodeError::Duplicate(format!(
                        "Join lists role `{r}` twice"
                    )));
                }
                roles.insert(r);
            }
            Message::Join {
                node,
                roles,
                app_version: m.app_version.as_str().into(),
                // Absent from a node of an earlier version: the member judges that itself.
                config: m.config.map(|c| Box::new(join_config_from_pb(c))),
            }
        }
        P::Welcome(m) => Message::Welcome {
            from: required_unique(m.from, "Welcome.from")?,
            gossip: Arc::new(decode_gossip_compressed(&m.gossip_gz, limits)?),
        },
        P::Leave(m) => Message::Leave {
            address: required_address(m.address, "Leave.address")?,
        },
        P::Down(m) => Message::Down {
            address: required_address(m.address, "Down.address")?,
        },
        P::ExitingConfirmed(m) => Message::ExitingConfirmed {
            node: required_unique(m.node, "ExitingConfirmed.node")?,
        },
        P::GossipStatus(m) => {
            let from = required_unique(m.from, "GossipStatus.from")?;
            let table = address_table(m.all_addresses, "gossip status")?;
            Message::GossipStatus {
                from,
                version: vclock_from_pb(m.version, &table)?,
                seen_digest: m.seen_digest,
            }
        }
        P::GossipEnvelope(m) => Message::GossipEnvelope {
            from: required_unique(m.from, "GossipEnvelope.from")?,
            to: required_unique(m.to, "GossipEnvelope.to")?,
            gossip: Arc::new(decode_gossip_compressed(&m.gossip_gz, limits)?),
        },
        P::Heartbeat(m) => Message::Heartbeat {
            from: required_unique(m.from, "Heartbeat.from")?,
            seq: m.sequence_nr,
        },
        P::HeartbeatRsp(m) => Message::HeartbeatRsp {
            from: required_unique(m.from, "HeartbeatRsp.from")?,
            seq: m.sequence_nr,
        },
        P::Quarantined(m) => Message::Quarantined {
            from: required_unique(m.from, "Quarantined.from")?,
            to: required_unique(m.to, "Quarantined.to")?,
        },
        P::JoinRefused(m) => Message::JoinRefused {
            from: required_unique(m.from, "JoinRefused.from")?,
            to: required_unique(m.to, "JoinRefused.to")?,
            reason: m.reason,
        },
        P::NotKnown(m) => Message::NotKnown {
            from: required_unique(m.from, "NotKnown.from")?,
            to: required_unique(m.to, "NotKnown.to")?,
        },
    })
}

/// Encodes a membership message as a `MembershipMessage` protobuf (the payload of a
/// [`Frame::Membership`](crate::Frame::Membership)). Gossip states are gzip-compressed inside.
pub fn encode_message(m: &Message) -> Bytes {
    Bytes::from(to_pb(m).encode_to_vec())
}

/// Decodes and validates a `MembershipMessage` payload.
///
/// Never panics: malformed protobuf, missing fields, indexes out of range, unknown enum values,
/// ports over 65535, duplicate set entries, invalid gzip and gossip states decompressing past
/// `limits.max_gossip_bytes` are all reported as a [`DecodeError`].
pub fn decode_message(bytes: &[u8], limits: &DecodeLimits) -> Result<Message, DecodeError> {
    from_pb(pb::MembershipMessage::decode(bytes)?, limits)
}

#[cfg(test)]
mod tests;
