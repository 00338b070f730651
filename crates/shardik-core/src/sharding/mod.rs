//! I/O-free building blocks of cluster sharding (digest §1–2).
//!
//! * [`shard_id`]: shard identifiers and the fixed entity-id → shard hash.
//! * [`allocation`]: the shard allocation strategies the coordinator consults to place new
//!   shards and to pick shards to rebalance.
//! * [`view`]: what sharding reads from the membership view (who may host the coordinator,
//!   which regions count as alive), with the down-removal margin applied.
//! * [`protocol`]: the messages between regions and the coordinator.
//! * [`coordinator`]: the coordinator state machine (one per entity kind, on the oldest node).
//! * [`region`]: a node's region for one entity kind: routing, buffering, hosting shards,
//!   hand-off.
//! * [`entities`]: the entities of one kind on one node: one command at a time each, stop
//!   behind the queue, passivation, remembered starts, restart back-off, entity timers.
//! * [`kind_node`]: everything one node runs for one entity kind (view, region, coordinator
//!   while hosted here, the loopback between them, leaving), the one composition that the
//!   runtime and the simulator both drive.
//!
//! Like the rest of this crate, nothing here reads a clock or a global random generator, and
//! every collection that decides an outcome iterates in a defined order.

pub mod allocation;
pub mod coordinator;
pub mod entities;
pub mod fence;
mod id_map;
pub mod kind_node;
pub mod protocol;
mod recovery;
pub mod region;
pub mod shard_id;
pub mod view;

#[cfg(test)]
mod testkit;
#[cfg(test)]
mod tests;

/// The lease holder's side lives in [`crate::lease`], shared with the split-brain resolver.
pub use crate::lease::{
    LeaseAnswer, LeaseCall, LeaseEvent, LeaseKeeper, LeaseLoss, LeaseRequest, LeaseTiming,
};
pub use allocation::{
    AllocationSettings, AllocationSnapshot, LeastShardAllocationStrategy, OldestUpStrategy,
    RegionEntry, ShardAllocationStrategy, ThresholdShardAllocationStrategy,
};
pub use coordinator::{Coordinator, CoordinatorEffect, CoordinatorEvent, CoordinatorSettings};
pub use kind_node::strategy::{AllocationChoice, BoxedStrategy, KindStrategy, StrategyFactory};
pub use kind_node::{KindEffect, KindInput, KindNode, KindNodeSettings, LeaseKey, Routed};
pub use protocol::Protocol;
pub use recovery::EntityRecovery;
pub use region::{DropReason, Envelope, HandOffMode, Region, RegionEffect, RegionSettings};
pub use shard_id::{EntityId, ShardId, ShardIdError, shard_id_for, shard_number_for};
pub use view::ShardingView;
