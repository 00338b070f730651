//! Leases on a running node are held by the I/O-free cores' [`LeaseKeeper`]
//! (`shardik_core::lease`): sharding's shard and coordinator leases (carried out by
//! `sharding/leases.rs`) and the split-brain resolver's lease-majority lease (carried out by
//! [`crate::sbr_lease`]). What stays here is what both executors share: the name a node holds
//! its leases under.
//!
//! [`LeaseKeeper`]: shardik_core::lease::LeaseKeeper

use shardik_core::membership::UniqueAddress;

/// The owner name of a node in the store's leases: its address and uid (`host:port#uid`), so
/// that a restarted node is a new owner and never mistakes its predecessor's tenure for its
/// own.
pub fn owner_for(node: &UniqueAddress) -> String {
    shardik_core::lease::owner_name(node)
}
