//! The "holistic" least-shard strategy with per-round limits (digest §2.3).

use std::collections::BTreeSet;

use super::defaults::{DEFAULT_REBALANCE_ABSOLUTE_LIMIT, DEFAULT_REBALANCE_RELATIVE_LIMIT};
use super::strategy::{AllocationSnapshot, RegionEntry, ShardAllocationStrategy};
use crate::sharding::shard_id::ShardId;

/// Allocates to the region with the fewest shards and rebalances towards the optimal count
/// `ceil(shards / regions)` for all regions at once, moving at most
/// `max(1, min(floor(relative_limit × shards), absolute_limit))` shards per round.
///
/// One round at a time: nothing is proposed while any shard is still rebalancing, so the next
/// round sees where the previous one's shards actually landed. Each round has two phases:
///
/// 1. every region above the optimal count gives up its excess, oldest shards first; regions
///    are visited **most loaded first**, so that when the limit is smaller than the total excess
///    the moved shards come from the most overloaded regions. (This is Akka's 2026 fix,
///    akka/akka-core#32928; Pekko and older Akka visit the least loaded first.)
/// 2. if phase 1 found nothing, the rounding up of the optimum may still leave some region two
///    or more below it: move one shard (the oldest) from each region at the optimum, least
///    loaded first, as many as there are missing shards below `optimal − 1`.
///
/// Rebalanced shards are then re-allocated by
/// [`allocate_shard`](ShardAllocationStrategy::allocate_shard), which puts them on the emptiest
/// regions. This typically balances a cluster to `max − min ≤ 1` in one or two rounds when the
/// limits allow.
#[derive(Clone, Debug, PartialEq)]
pub struct LeastShardAllocationStrategy {
    absolute_limit: u32,
    relative_limit: f64,
}

impl Default for LeastShardAllocationStrategy {
    /// Absolute limit 20, relative limit 0.1: see [`DEFAULT_REBALANCE_ABSOLUTE_LIMIT`].
    fn default() -> Self {
        Self::new(
            DEFAULT_REBALANCE_ABSOLUTE_LIMIT,
            DEFAULT_REBALANCE_RELATIVE_LIMIT,
        )
    }
}

impl LeastShardAllocationStrategy {
    /// A strategy moving at most `absolute_limit` shards, and at most `relative_limit` (a
    /// fraction, < 1.0) of all shards, per round — but always at least one.
    ///
    /// Out-of-range values are not rejected: `absolute_limit = 0`, a negative or NaN
    /// `relative_limit` all make the limit the floor of one shard per round.
    pub fn new(absolute_limit: u32, relative_limit: f64) -> Self {
        LeastShardAllocationStrategy {
            absolute_limit,
            relative_limit,
        }
    }

    /// Most shards one rebalance round may move when `number_of_shards` are allocated.
    pub fn limit(&self, number_of_shards: usize) -> usize {
        // `as` saturates: NaN and negatives become 0, huge values usize::MAX.
        let relative = (self.relative_limit * number_of_shards as f64) as usize;
        relative.min(self.absolute_limit as usize).max(1)
    }

    fn phase1<R: Ord>(
        &self,
        limit: usize,
        optimal: usize,
        sorted: &[&RegionEntry<R>],
    ) -> BTreeSet<ShardId> {
        sorted
            .iter()
            .rev()
            .filter(|e| e.shards.len() > optimal)
            .flat_map(|e| e.shards[..e.shards.len() - optimal].iter())
            .take(limit)
            .cloned()
            .collect()
    }

    fn phase2<R: Ord>(
        &self,
        limit: usize,
        optimal: usize,
        sorted: &[&RegionEntry<R>],
    ) -> BTreeSet<ShardId> {
        let below: usize = sorted
            .iter()
            .map(|e| (optimal - 1).saturating_sub(e.shards.len()))
            .sum();
        sorted
            .iter()
            .filter(|e| e.shards.len() >= optimal)
            .filter_map(|e| e.shards.first())
            .take(below.min(limit))
            .cloned()
            .collect()
    }
}

impl<R: Ord + Clone> ShardAllocationStrategy<R> for LeastShardAllocationStrategy {
    fn allocate_shard(
        &mut self,
        _requester: &R,
        _shard: &ShardId,
        current: &AllocationSnapshot<R>,
    ) -> Option<R> {
        current.most_suitable().map(|e| e.region.clone())
    }

    fn rebalance(
        &mut self,
        current: &AllocationSnapshot<R>,
        in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId> {
        if !in_progress.is_empty() {
            return BTreeSet::new();
        }
        let sorted = current.sorted_candidates();
        if !current.is_good_time_to_rebalance(&sorted) {
            return BTreeSet::new();
        }
        let shards: usize = sorted.iter().map(|e| e.shards.len()).sum();
        let regions = sorted.len();
        if shards == 0 || regions == 0 {
            return BTreeSet::new();
        }
        let optimal = shards.div_ceil(regions);
        let limit = self.limit(shards);
        let first = self.phase1(limit, optimal, &sorted);
        if !first.is_empty() {
            return first;
        }
        self.phase2(limit, optimal, &sorted)
    }
}

#[cfg(test)]
mod tests;
