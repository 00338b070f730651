//! The mapping between the sharding message types and the generated protobuf types, both ways,
//! and the public encode and decode functions built on it (with the hand-written fast paths
//! for envelopes, batches and replies).

use std::collections::HashSet;
use std::num::NonZeroU64;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use bytestring::ByteString;
use prost::Message as _;

use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{Protocol, ShardId};

use super::batch::{BatchFrameBuilder, EnvelopeBatch, IdCache, encode_batch_item};
use super::envelope::encode_envelope;
use super::message::{
    ReplyError, ReplyErrorKind, ShardingBody, ShardingFrame, ShardingLimits, WireEnvelope,
    WireReply, WireStats,
};
use super::reply;
use super::validate::{
    address_list, check_id, check_shard_count, id, request_id, shard, shard_list,
};
use crate::codec::{DecodeError, required_unique, unique_address_from_pb, unique_address_to_pb};
use crate::pb::s as pb;

use pb::protocol_message::Message as PM;

// The wire enumeration of a reply error's kind (the type itself is in `message.rs`).
impl ReplyErrorKind {
    pub(super) fn to_pb(self) -> pb::ErrorKind {
        match self {
            ReplyErrorKind::UnknownKind => pb::ErrorKind::UnknownKind,
            ReplyErrorKind::DecodeFailed => pb::ErrorKind::DecodeFailed,
            ReplyErrorKind::EntityFailed => pb::ErrorKind::EntityFailed,
            ReplyErrorKind::ShardUnavailable => pb::ErrorKind::ShardUnavailable,
            ReplyErrorKind::BufferFull => pb::ErrorKind::BufferFull,
            ReplyErrorKind::RegionStopped => pb::ErrorKind::RegionStopped,
        }
    }

    pub(super) fn from_pb(v: i32) -> Result<ReplyErrorKind, DecodeError> {
        let unknown = || DecodeError::UnknownEnum {
            field: "ReplyError.kind".into(),
            value: v,
        };
        Ok(match pb::ErrorKind::try_from(v).map_err(|_| unknown())? {
            // Never sent: a sender that leaves the kind unset has a bug we should not mask.
            pb::ErrorKind::Unspecified => return Err(unknown()),
            pb::ErrorKind::UnknownKind => ReplyErrorKind::UnknownKind,
            pb::ErrorKind::DecodeFailed => ReplyErrorKind::DecodeFailed,
            pb::ErrorKind::EntityFailed => ReplyErrorKind::EntityFailed,
            pb::ErrorKind::ShardUnavailable => ReplyErrorKind::ShardUnavailable,
            pb::ErrorKind::BufferFull => ReplyErrorKind::BufferFull,
            pb::ErrorKind::RegionStopped => ReplyErrorKind::RegionStopped,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding

fn ids_to_pb(ids: &[ShardId]) -> Vec<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

fn protocol_to_pb(p: &Protocol) -> pb::ProtocolMessage {
    let shard = |s: &ShardId| s.to_string();
    let message = match p {
        Protocol::Register { hosted, proxy } => PM::Register(pb::Register {
            hosted: ids_to_pb(hosted),
            proxy: *proxy,
        }),
        Protocol::GetShardHome { shard: s } => {
            PM::GetShardHome(pb::GetShardHome { shard: shard(s) })
        }
        Protocol::BeginHandOffAck { shard: s, drained } => {
            PM::BeginHandOffAck(pb::BeginHandOffAck {
                shard: shard(s),
                drained: *drained,
            })
        }
        Protocol::ShardStopped {
            shard: s,
            forwarding,
        } => PM::ShardStopped(pb::ShardStopped {
            shard: shard(s),
            forwarding: *forwarding,
        }),
        Protocol::GracefulShutdownReq => PM::GracefulShutdownReq(pb::GracefulShutdownReq {}),
        Protocol::RegionStopped => PM::RegionStopped(pb::RegionStopped {}),
        Protocol::ShardStarted { shard: s } => {
            PM::ShardStarted(pb::ShardStarted { shard: shard(s) })
        }
        Protocol::RegisterAck => PM::RegisterAck(pb::RegisterAck {}),
        Protocol::CoordinatorStarted { epoch } => {
            PM::CoordinatorStarted(pb::CoordinatorStarted { epoch: *epoch })
        }
        Protocol::KindNotStarted { epoch } => {
            PM::KindNotStarted(pb::KindNotStarted { epoch: *epoch })
        }
        Protocol::ShardHome { shard: s, region } => PM::ShardHome(pb::ShardHome {
            shard: shard(s),
            region: Some(unique_address_to_pb(region)),
        }),
        Protocol::ShardHomes { homes } => PM::ShardHomes(pb::ShardHomes {
            homes: region_shards_to_pb(homes),
        }),
        Protocol::SilentHomes { homes } => PM::SilentHomes(pb::SilentHomes {
            homes: region_shards_to_pb(homes),
        }),
        Protocol::HostShard {
            shard: s,
            predecessor,
        } => PM::HostShard(pb::HostShard {
            shard: shard(s),
            predecessor: predecessor.as_ref().map(unique_address_to_pb),
        }),
        Protocol::BeginHandOff { shard: s } => {
            PM::BeginHandOff(pb::BeginHandOff { shard: shard(s) })
        }
        Protocol::HandOff {
            shard: s,
            drained_from,
        } => PM::HandOff(pb::HandOff {
            shard: shard(s),
            drained_from: drained_from.iter().map(unique_address_to_pb).collect(),
        }),
        Protocol::RoutingHere { shard: s, nonce } => PM::RoutingHere(pb::RoutingHere {
            shard: shard(s),
            nonce: *nonce,
        }),
        Protocol::NotHere { shard: s, nonce } => PM::NotHere(pb::NotHere {
            shard: shard(s),
            nonce: *nonce,
        }),
        Protocol::ShardsRevoked { shards } => PM::ShardsRevoked(pb::ShardsRevoked {
            shards: ids_to_pb(shards),
        }),
        Protocol::HandOffDrained { shard: s } => {
            PM::HandOffDrained(pb::HandOffDrained { shard: shard(s) })
        }
        Protocol::HandOverDone { shard: s } => {
            PM::HandOverDone(pb::HandOverDone { shard: shard(s) })
        }
    };
    pb::ProtocolMessage {
        message: Some(message),
    }
}

#[cfg(test)]
pub(super) fn reply_to_pb(r: &WireReply) -> pb::Reply {
    use pb::reply::Result as R;
    pb::Reply {
        ask_id: r.ask_id,
        result: Some(match &r.result {
            // A refcount, not a copy: the generated type holds `Bytes` (tests/generated_code.rs).
            Ok(payload) => R::Payload(payload.clone()),
            Err(e) => R::Error(pb::ReplyError {
                kind: e.kind.to_pb() as i32,
                message: e.message.clone(),
            }),
        }),
    }
}

fn stats_to_pb(s: &WireStats) -> pb::StatsReply {
    pb::StatsReply {
        request_id: s.request_id.get(),
        shards: s
            .shards
            .iter()
            .map(|(shard, entities)| pb::ShardStats {
                shard: shard.to_string(),
                entities: *entities,
            })
            .collect(),
        registered: s.registered,
    }
}

/// Encodes a sharding frame as a `ShardingFrame` protobuf (the payload of a
/// [`Frame::User`](crate::Frame::User)).
///
/// Envelopes go through [`encode_envelope`]; the rest through the generated types.
pub fn encode_sharding(frame: &ShardingFrame) -> Bytes {
    use pb::sharding_frame::Body;
    let body = match &frame.body {
        ShardingBody::Envelope(e) => {
            let mut out = BytesMut::new();
            encode_envelope(
                &frame.kind,
                &e.entity_id,
                &e.shard,
                &e.payload,
                e.ask_id,
                &mut out,
            );
            return out.freeze();
        }
        ShardingBody::Envelopes(envelopes) => {
            let mut out = BytesMut::new();
            let builder = BatchFrameBuilder::begin(&frame.kind, &mut out);
            for e in envelopes {
                encode_batch_item(&e.entity_id, &e.shard, &e.payload, e.ask_id, &mut out);
            }
            return builder.finish(&frame.kind, out);
        }
        ShardingBody::Reply(r) => return reply::encode_reply(&frame.kind, r),
        ShardingBody::Protocol(p) => Body::Protocol(protocol_to_pb(p)),
        ShardingBody::StatsRequest { request_id } => Body::StatsRequest(pb::StatsRequest {
            request_id: request_id.get(),
        }),
        ShardingBody::StatsReply(s) => Body::StatsReply(stats_to_pb(s)),
    };
    let m = pb::ShardingFrame {
        kind: frame.kind.to_string(),
        body: Some(body),
    };
    Bytes::from(m.encode_to_vec())
}

fn region_shards_to_pb(homes: &[(UniqueAddress, Vec<ShardId>)]) -> Vec<pb::RegionShards> {
    homes
        .iter()
        .map(|(region, shards)| pb::RegionShards {
            region: Some(unique_address_to_pb(region)),
            shards: ids_to_pb(shards),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Decoding

/// Regions with their shards (`ShardHomes`, `SilentHomes`): no region twice, no shard in two
/// regions, within the shard limit. `what` names the list and its regions' field in errors.
fn region_shards_from_pb(
    list: Vec<pb::RegionShards>,
    limits: &ShardingLimits,
    (what, region_field): (&'static str, &'static str),
) -> Result<Vec<(UniqueAddress, Vec<ShardId>)>, DecodeError> {
    let total: usize = list.iter().map(|h| h.shards.len()).sum();
    check_shard_count(what, total, limits)?;
    let mut regions = HashSet::with_capacity(list.len());
    let mut shards = HashSet::with_capacity(total);
    let mut homes = Vec::with_capacity(list.len());
    for (i, h) in list.into_iter().enumerate() {
        let region = h.region.ok_or(DecodeError::Missing(region_field))?;
        let region = unique_address_from_pb(region, || format!("{what}[{i}].region"))?;
        if !regions.insert(region.clone()) {
            return Err(DecodeError::Duplicate(format!(
                "{what}[{i}] repeats region {region}"
            )));
        }
        let list = shard_list(
            h.shards,
            limits,
            |j| format!("{what}[{i}].shards[{j}]"),
            &mut shards,
        )?;
        homes.push((region, list));
    }
    Ok(homes)
}

fn protocol_from_pb(
    p: pb::ProtocolMessage,
    limits: &ShardingLimits,
) -> Result<Protocol, DecodeError> {
    let m = p.message.ok_or(DecodeError::MissingOrUnknownVariant(
        "ProtocolMessage.message",
    ))?;
    Ok(match m {
        PM::Register(m) => {
            check_shard_count("Register.hosted", m.hosted.len(), limits)?;
            if m.proxy && !m.hosted.is_empty() {
                return Err(DecodeError::Invalid(format!(
                    "Register from a proxy lists {} hosted shards; a proxy hosts none",
                    m.hosted.len()
                )));
            }
            let mut seen = HashSet::with_capacity(m.hosted.len());
            Protocol::Register {
                hosted: shard_list(
                    m.hosted,
                    limits,
                    |i| format!("Register.hosted[{i}]"),
                    &mut seen,
                )?,
                proxy: m.proxy,
            }
        }
        PM::GetShardHome(m) => Protocol::GetShardHome {
            shard: shard(m.shard, limits, "GetShardHome")?,
        },
        PM::BeginHandOffAck(m) => Protocol::BeginHandOffAck {
            shard: shard(m.shard, limits, "BeginHandOffAck")?,
            drained: m.drained,
        },
        PM::ShardStopped(m) => Protocol::ShardStopped {
            shard: shard(m.shard, limits, "ShardStopped")?,
            forwarding: m.forwarding,
        },
        PM::GracefulShutdownReq(pb::GracefulShutdownReq {}) => Protocol::GracefulShutdownReq,
        PM::RegionStopped(pb::RegionStopped {}) => Protocol::RegionStopped,
        PM::ShardStarted(m) => Protocol::ShardStarted {
            shard: shard(m.shard, limits, "ShardStarted")?,
        },
        PM::RegisterAck(pb::RegisterAck {}) => Protocol::RegisterAck,
        PM::CoordinatorStarted(m) => Protocol::CoordinatorStarted { epoch: m.epoch },
        PM::KindNotStarted(m) => Protocol::KindNotStarted { epoch: m.epoch },
        PM::ShardHome(m) => Protocol::ShardHome {
            shard: shard(m.shard, limits, "ShardHome")?,
            region: required_unique(m.region, "ShardHome.region")?,
        },
        PM::ShardHomes(m) => Protocol::ShardHomes {
            homes: region_shards_from_pb(
                m.homes,
                limits,
                ("ShardHomes.homes", "ShardHomes.homes.region"),
            )?,
        },
        PM::SilentHomes(m) => Protocol::SilentHomes {
            homes: region_shards_from_pb(
                m.homes,
                limits,
                ("SilentHomes.homes", "SilentHomes.homes.region"),
            )?,
        },
        PM::HostShard(m) => Protocol::HostShard {
            shard: shard(m.shard, limits, "HostShard")?,
            predecessor: m
                .predecessor
                .map(|u| unique_address_from_pb(u, || "HostShard.predecessor".into()))
                .transpose()?,
        },
        PM::BeginHandOff(m) => Protocol::BeginHandOff {
            shard: shard(m.shard, limits, "BeginHandOff")?,
        },
        PM::HandOff(m) => Protocol::HandOff {
            shard: shard(m.shard, limits, "HandOff")?,
            drained_from: address_list(m.drained_from, "HandOff.drained_from")?,
        },
        PM::RoutingHere(m) => Protocol::RoutingHere {
            shard: shard(m.shard, limits, "RoutingHere")?,
            nonce: m.nonce,
        },
        PM::NotHere(m) => Protocol::NotHere {
            shard: shard(m.shard, limits, "NotHere")?,
            nonce: m.nonce,
        },
        PM::ShardsRevoked(m) => {
            check_shard_count("ShardsRevoked.shards", m.shards.len(), limits)?;
            let mut seen = HashSet::with_capacity(m.shards.len());
            Protocol::ShardsRevoked {
                shards: shard_list(
                    m.shards,
                    limits,
                    |i| format!("ShardsRevoked.shards[{i}]"),
                    &mut seen,
                )?,
            }
        }
        PM::HandOffDrained(m) => Protocol::HandOffDrained {
            shard: shard(m.shard, limits, "HandOffDrained")?,
        },
        PM::HandOverDone(m) => Protocol::HandOverDone {
            shard: shard(m.shard, limits, "HandOverDone")?,
        },
    })
}

fn reply_from_pb(r: pb::Reply) -> Result<WireReply, DecodeError> {
    use pb::reply::Result as R;
    if r.ask_id == 0 {
        return Err(DecodeError::Invalid(
            "Reply.ask_id is 0, which marks a tell: no ask can be waiting for this reply".into(),
        ));
    }
    let result = match r
        .result
        .ok_or(DecodeError::MissingOrUnknownVariant("Reply.result"))?
    {
        R::Payload(p) => Ok(p),
        R::Error(e) => Err(ReplyError {
            kind: ReplyErrorKind::from_pb(e.kind)?,
            message: e.message,
        }),
    };
    Ok(WireReply {
        ask_id: r.ask_id,
        result,
    })
}

fn stats_from_pb(r: pb::StatsReply, limits: &ShardingLimits) -> Result<WireStats, DecodeError> {
    let request_id = request_id(r.request_id, "StatsReply.request_id")?;
    check_shard_count("StatsReply.shards", r.shards.len(), limits)?;
    let (ids, entities): (Vec<String>, Vec<u32>) =
        r.shards.into_iter().map(|s| (s.shard, s.entities)).unzip();
    let mut seen = HashSet::with_capacity(ids.len());
    let ids = shard_list(
        ids,
        limits,
        |i| format!("StatsReply.shards[{i}].shard"),
        &mut seen,
    )?;
    Ok(WireStats {
        request_id,
        shards: ids.into_iter().zip(entities).collect(),
        registered: r.registered,
    })
}

fn envelope_from_pb(e: pb::Envelope, limits: &ShardingLimits) -> Result<WireEnvelope, DecodeError> {
    Ok(WireEnvelope {
        entity_id: {
            check_id(&e.entity_id, limits, || "Envelope.entity_id".into())?;
            ByteString::from(e.entity_id)
        },
        shard: id(e.shard_id, limits, || "Envelope.shard_id".into())?,
        payload: e.payload,
        ask_id: NonZeroU64::new(e.ask_id),
    })
}

fn frame_from_pb(
    f: pb::ShardingFrame,
    limits: &ShardingLimits,
) -> Result<ShardingFrame, DecodeError> {
    use pb::sharding_frame::Body;
    let kind = id(f.kind, limits, || "ShardingFrame.kind".into())?;
    let body = match f
        .body
        .ok_or(DecodeError::MissingOrUnknownVariant("ShardingFrame.body"))?
    {
        Body::Envelope(e) => ShardingBody::Envelope(envelope_from_pb(e, limits)?),
        // Batches are decoded by hand before the generated code sees the frame.
        Body::Envelopes(_) => {
            return Err(DecodeError::Invalid(
                "an envelope batch reached the generic decoder".into(),
            ));
        }
        Body::Reply(r) => ShardingBody::Reply(reply_from_pb(r)?),
        Body::Protocol(p) => ShardingBody::Protocol(protocol_from_pb(p, limits)?),
        Body::StatsRequest(r) => ShardingBody::StatsRequest {
            request_id: request_id(r.request_id, "StatsRequest.request_id")?,
        },
        Body::StatsReply(r) => ShardingBody::StatsReply(stats_from_pb(r, limits)?),
    };
    Ok(ShardingFrame { kind, body })
}

/// Decodes and validates a `ShardingFrame` payload.
///
/// Never panics: malformed protobuf or UTF-8, an empty or over-long kind or id, too many
/// shards, a repeated shard or region, a missing or unknown `oneof` variant, an unknown
/// enumeration value, a missing address, a port over 65535, a reply to ask id 0 and a stats
/// request or reply with request id 0 are all reported as a [`DecodeError`] naming the field.
///
/// The payload of an envelope or reply is copied out of `bytes`; a receiver holding the
/// frame as [`Bytes`] avoids that copy with [`decode_sharding_bytes`].
pub fn decode_sharding(
    bytes: &[u8],
    limits: &ShardingLimits,
) -> Result<ShardingFrame, DecodeError> {
    decode_sharding_bytes(Bytes::copy_from_slice(bytes), limits)
}

/// [`decode_sharding`] from a shared buffer: envelope and reply payloads are slices of
/// `bytes` (a reference count, no copy), which matters for large messages since
/// [`FrameCodec`](crate::FrameCodec) hands out user payloads as [`Bytes`] anyway.
pub fn decode_sharding_bytes(
    bytes: Bytes,
    limits: &ShardingLimits,
) -> Result<ShardingFrame, DecodeError> {
    decode_sharding_cached(bytes, limits, &mut IdCache::default())
}

/// [`decode_sharding_bytes`] for a receiver that decodes many frames: the shard ids of
/// envelope batches come from `ids` (one allocation per distinct shard, not per envelope).
pub fn decode_sharding_cached(
    bytes: Bytes,
    limits: &ShardingLimits,
    ids: &mut IdCache,
) -> Result<ShardingFrame, DecodeError> {
    if let Some(batch) = EnvelopeBatch::decode(bytes.clone(), limits)? {
        return Ok(ShardingFrame {
            kind: Arc::from(batch.kind()),
            body: ShardingBody::Envelopes(batch.to_envelopes(ids)),
        });
    }
    frame_from_pb(pb::ShardingFrame::decode(bytes)?, limits)
}
