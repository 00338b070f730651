//! Validation of decoded sharding traffic: ids neither empty nor over
//! [`ShardingLimits::max_id_len`], shard and address lists within
//! [`ShardingLimits::max_shards_per_message`] and free of repeats, stats request ids not 0, each
//! failure a [`DecodeError`] naming the field.

use std::collections::HashSet;
use std::num::NonZeroU64;
use std::sync::Arc;

use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::ShardId;

use super::message::ShardingLimits;
use crate::codec::{DecodeError, unique_address_from_pb};
use crate::pb::m as pbm;

/// Validates one identifier (kind, entity id or shard id) and shares it. `field` runs only
/// on error, so the happy path formats nothing.
pub(super) fn id(
    s: String,
    limits: &ShardingLimits,
    field: impl FnOnce() -> String,
) -> Result<Arc<str>, DecodeError> {
    check_id(&s, limits, field)?;
    Ok(Arc::from(s))
}

/// An id must be neither empty nor longer than the limit.
pub(super) fn check_id(
    s: &str,
    limits: &ShardingLimits,
    field: impl FnOnce() -> String,
) -> Result<(), DecodeError> {
    if s.is_empty() {
        return Err(DecodeError::Empty(field()));
    }
    if s.len() > limits.max_id_len {
        return Err(DecodeError::TooLong {
            field: field(),
            len: s.len(),
            max: limits.max_id_len,
        });
    }
    Ok(())
}

pub(super) fn shard(
    s: String,
    limits: &ShardingLimits,
    msg: &'static str,
) -> Result<ShardId, DecodeError> {
    id(s, limits, || format!("{msg}.shard"))
}

/// Validates a list of shard ids that must be distinct, also from those already in `seen`
/// (so `ShardHomes` can check that no shard has two homes).
pub(super) fn shard_list(
    ids: Vec<String>,
    limits: &ShardingLimits,
    field: impl Fn(usize) -> String,
    seen: &mut HashSet<ShardId>,
) -> Result<Vec<ShardId>, DecodeError> {
    let mut out = Vec::with_capacity(ids.len());
    for (i, s) in ids.into_iter().enumerate() {
        let s = id(s, limits, || field(i))?;
        if !seen.insert(s.clone()) {
            return Err(DecodeError::Duplicate(format!(
                "{} repeats shard `{s}`",
                field(i)
            )));
        }
        out.push(s);
    }
    Ok(out)
}

pub(super) fn check_shard_count(
    field: &'static str,
    count: usize,
    limits: &ShardingLimits,
) -> Result<(), DecodeError> {
    if count > limits.max_shards_per_message {
        return Err(DecodeError::TooMany {
            field,
            count,
            max: limits.max_shards_per_message,
        });
    }
    Ok(())
}

pub(super) fn address_list(
    list: Vec<pbm::UniqueAddress>,
    field: &'static str,
) -> Result<Vec<UniqueAddress>, DecodeError> {
    let mut seen = HashSet::with_capacity(list.len());
    let mut out = Vec::with_capacity(list.len());
    for (i, u) in list.into_iter().enumerate() {
        let u = unique_address_from_pb(u, || format!("{field}[{i}]"))?;
        if !seen.insert(u.clone()) {
            return Err(DecodeError::Duplicate(format!(
                "{field}[{i}] repeats region {u}"
            )));
        }
        out.push(u);
    }
    Ok(out)
}

/// A stats request id, which must not be 0 (the proto3 default, so also what an unset field
/// decodes to).
pub(super) fn request_id(v: u64, field: &'static str) -> Result<NonZeroU64, DecodeError> {
    NonZeroU64::new(v)
        .ok_or_else(|| DecodeError::Invalid(format!("{field} is 0, which no stats request uses")))
}
