//! Every shard on the region of the oldest Up member: the strategy of singleton kinds (one
//! shard, one entity), which run where Akka's cluster singleton runs.

use std::collections::BTreeSet;

use super::strategy::{AllocationSnapshot, ShardAllocationStrategy};
use crate::membership::member::MemberStatus;
use crate::sharding::shard_id::ShardId;

/// Places every shard on the region of the oldest Up member (by up-number, as Akka's
/// singleton chooses), and moves shards that live anywhere else.
///
/// Regions on Leaving, Exiting or unknown members are never chosen: their shards leave with
/// the region's graceful hand-off, and the coordinator then asks this strategy for the new
/// home. Only regions the snapshot lists count, so with a role only members with the role do.
#[derive(Clone, Copy, Debug, Default)]
pub struct OldestUpStrategy;

impl OldestUpStrategy {
    fn oldest_up<R: Ord + Clone>(current: &AllocationSnapshot<R>) -> Option<&R> {
        current
            .regions()
            .filter_map(|e| {
                let m = e.member.as_ref()?;
                (m.status == MemberStatus::Up).then_some((m, &e.region))
            })
            .min_by(|(a, _), (b, _)| a.age_cmp(b))
            .map(|(_, region)| region)
    }
}

impl<R: Ord + Clone> ShardAllocationStrategy<R> for OldestUpStrategy {
    fn allocate_shard(
        &mut self,
        _requester: &R,
        _shard: &ShardId,
        current: &AllocationSnapshot<R>,
    ) -> Option<R> {
        Self::oldest_up(current).cloned()
    }

    fn rebalance(
        &mut self,
        current: &AllocationSnapshot<R>,
        in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId> {
        // A hand-off needs every region's acknowledgement (an unreachable member stalls it);
        // with unreachable members, wait, as the built-in strategies do.
        if current.unreachable_members {
            return BTreeSet::new();
        }
        let Some(oldest) = Self::oldest_up(current) else {
            return BTreeSet::new();
        };
        current
            .regions()
            // Leaving regions hand their shards off by themselves.
            .filter(|e| &e.region != oldest && !e.is_leaving())
            .flat_map(|e| e.shards.iter())
            .filter(|s| !in_progress.contains(*s))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests;
