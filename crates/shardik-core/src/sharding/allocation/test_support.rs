//! Fixtures shared by the strategy tests: the reference specs' regions A, B, C on three Up
//! members and shards named "001", "002", … handed out in order.

use std::collections::BTreeSet;

use super::*;
use crate::membership::address::{Address, UniqueAddress};
use crate::membership::member::{Member, MemberStatus, NOT_YET_UP};

pub fn member(port: u16, status: MemberStatus, version: &str) -> Member {
    Member {
        addr: UniqueAddress::new(Address::new("127.0.0.1", port), 1),
        status,
        up_number: if status == MemberStatus::Joining {
            NOT_YET_UP
        } else {
            u32::from(port)
        },
        roles: BTreeSet::new(),
        app_version: version.into(),
    }
}

pub fn up(port: u16) -> Member {
    member(port, MemberStatus::Up, "1.0.0")
}

pub fn shard(n: usize) -> ShardId {
    format!("{n:03}").into()
}

pub fn shards(range: std::ops::Range<usize>) -> Vec<ShardId> {
    range.map(shard).collect()
}

/// Regions "A", "B", "C" with `a`, `b`, `c` shards numbered consecutively from "001".
pub fn abc(a: usize, b: usize, c: usize) -> AllocationSnapshot<&'static str> {
    AllocationSnapshot::new()
        .with_region("A", Some(up(1)), shards(1..1 + a))
        .with_region("B", Some(up(2)), shards(1 + a..1 + a + b))
        .with_region("C", Some(up(3)), shards(1 + a + b..1 + a + b + c))
}

pub fn set(ids: &[&str]) -> BTreeSet<ShardId> {
    ids.iter().map(|s| ShardId::from(*s)).collect()
}

/// The specs' `afterRebalance`: remove the chosen shards, then allocate them one by one
/// in sorted order, each time appending to the chosen region.
pub fn after_rebalance<R: Ord + Clone>(
    strategy: &mut dyn ShardAllocationStrategy<R>,
    snapshot: &AllocationSnapshot<R>,
    moved: &BTreeSet<ShardId>,
    requester: &R,
) -> AllocationSnapshot<R> {
    let mut next = snapshot.clone();
    for entry in next.regions.values_mut() {
        entry.shards.retain(|s| !moved.contains(s));
    }
    for s in moved {
        let to = strategy
            .allocate_shard(requester, s, &next)
            .expect("a region to allocate to");
        next.regions
            .get_mut(&to)
            .expect("strategy returned a known region")
            .shards
            .push(s.clone());
    }
    next
}

pub fn counts<R: Ord + Clone>(snapshot: &AllocationSnapshot<R>) -> Vec<usize> {
    snapshot.regions().map(|e| e.shards.len()).collect()
}
