//! I/O-free building blocks of cluster sharding (digest §1–2).
//!
//! * [`shard_id`]: shard identifiers and the fixed entity-id → shard hash.
//! * [`allocation`]: the shard allocation strategies the coordinator consults to place new
//!   shards and to pick shards to rebalance.
//!
//! Like the rest of this crate, nothing here reads a clock or a global random generator, and
//! every collection that decides an outcome iterates in a defined order.

pub mod allocation;
pub mod shard_id;

pub use allocation::{
    AllocationSettings, AllocationSnapshot, LeastShardAllocationStrategy, RegionEntry,
    ShardAllocationStrategy, ThresholdShardAllocationStrategy,
};
pub use shard_id::{ShardId, ShardIdError, shard_id_for, shard_number_for};
