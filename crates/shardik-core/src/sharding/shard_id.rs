//! Shard identifiers and the fixed entity-id → shard mapping.

use std::num::NonZeroU32;
use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64;

/// The identifier of a shard: the unit of placement and rebalancing.
///
/// A string, as in the reference (`ShardRegion.ShardId = String`), so custom extractors can
/// name shards however they like; [`shard_id_for`] produces the decimal form used by default.
/// Shared (`Arc<str>`): a shard id is copied into every routing table, buffer and message that
/// names it, and cloning must not allocate on the message path.
pub type ShardId = Arc<str>;

/// The identifier of an entity within its kind, shared for the same reason as [`ShardId`].
pub type EntityId = Arc<str>;

/// Why [`shard_id_for`] refused its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ShardIdError {
    /// `number_of_shards` was 0; there must be at least one shard.
    #[error("number of shards must be at least 1")]
    ZeroShards,
}

/// The shard number of `entity_id` among `number_of_shards` shards.
///
/// Definition (a wire- and storage-level contract, **fixed forever**):
/// `xxh3_64(utf8_bytes(entity_id)) mod number_of_shards`, where `xxh3_64` is XXH3 64-bit with
/// seed 0 and no secret. Never the standard library's hasher: that one is randomly keyed per
/// process, and every node (and every restart, and remembered-entity stores) must agree on
/// where an entity lives. Changing this function re-homes every entity of every deployment, so
/// the table test below pins exact values.
pub fn shard_number_for(entity_id: &str, number_of_shards: NonZeroU32) -> u32 {
    let n = u64::from(number_of_shards.get());
    // The remainder is < n ≤ u32::MAX, so the narrowing cannot lose bits.
    (xxh3_64(entity_id.as_bytes()) % n) as u32
}

/// The shard of `entity_id`: [`shard_number_for`] rendered in decimal (`"0"`, `"17"`, …).
///
/// `number_of_shards` is the configured `number-of-shards` (reference default 1000); it must be
/// at least 1, otherwise [`ShardIdError::ZeroShards`] is returned rather than panicking on a
/// division by zero. Like the hash, the decimal rendering (no padding, no sign) is part of the
/// fixed contract.
pub fn shard_id_for(entity_id: &str, number_of_shards: u32) -> Result<ShardId, ShardIdError> {
    let n = NonZeroU32::new(number_of_shards).ok_or(ShardIdError::ZeroShards)?;
    Ok(shard_number_for(entity_id, n).to_string().into())
}

#[cfg(test)]
mod tests;
