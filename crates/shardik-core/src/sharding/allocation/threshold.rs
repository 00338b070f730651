//! The older threshold strategy (digest §2.2; the reference's deprecated
//! `ShardCoordinator.LeastShardAllocationStrategy`).

use std::collections::BTreeSet;

use super::defaults::{DEFAULT_MAX_SIMULTANEOUS_REBALANCE, DEFAULT_REBALANCE_THRESHOLD};
use super::strategy::{AllocationSnapshot, RegionEntry, ShardAllocationStrategy};
use crate::sharding::shard_id::ShardId;

/// Allocates to the region with the fewest shards; rebalances only between the most and the
/// least loaded region, and only when they differ by more than `rebalance_threshold`.
///
/// Per call: if `max_simultaneous_rebalance` shards are already in progress, nothing. Otherwise
/// take `least` = the most suitable region's shard count (in-progress shards included) and
/// `most` = the region with the most shards not already in progress (first such in suitability
/// order). With `difference = |most| − |least| > threshold` it moves
/// `min(difference − threshold, threshold, max_simultaneous − in_progress)` of `most`'s shards,
/// the smallest shard ids first. Unlike [`LeastShardAllocationStrategy`](super::least::LeastShardAllocationStrategy) it proposes more
/// shards while earlier ones are still moving, which can overshoot; it is kept because the
/// reference still uses it whenever `rebalance-absolute-limit` is 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThresholdShardAllocationStrategy {
    rebalance_threshold: u32,
    max_simultaneous_rebalance: u32,
}

impl Default for ThresholdShardAllocationStrategy {
    /// Threshold 1, at most 3 simultaneous (reference.conf).
    fn default() -> Self {
        Self::new(
            DEFAULT_REBALANCE_THRESHOLD,
            DEFAULT_MAX_SIMULTANEOUS_REBALANCE,
        )
    }
}

impl ThresholdShardAllocationStrategy {
    /// A strategy with the given threshold and cap on shards rebalancing at once. A threshold
    /// or cap of 0 disables rebalancing (every computed count is then 0).
    pub fn new(rebalance_threshold: u32, max_simultaneous_rebalance: u32) -> Self {
        ThresholdShardAllocationStrategy {
            rebalance_threshold,
            max_simultaneous_rebalance,
        }
    }
}

impl<R: Ord + Clone> ShardAllocationStrategy<R> for ThresholdShardAllocationStrategy {
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
        let max_simultaneous = self.max_simultaneous_rebalance as usize;
        if in_progress.len() >= max_simultaneous {
            return BTreeSet::new();
        }
        let sorted = current.sorted_candidates();
        if !current.is_good_time_to_rebalance(&sorted) {
            return BTreeSet::new();
        }
        let Some(least) = sorted.first() else {
            return BTreeSet::new();
        };
        // The first region (in suitability order) with the most shards not yet moving; a strict
        // `>` keeps the earliest on ties, as the reference's `maxBy` does.
        let mut most: Vec<&ShardId> = Vec::new();
        for entry in &sorted {
            let candidates = movable(entry, in_progress);
            if candidates.len() > most.len() {
                most = candidates;
            }
        }
        let threshold = self.rebalance_threshold as usize;
        let difference = most.len().saturating_sub(least.shards.len());
        if difference <= threshold {
            return BTreeSet::new();
        }
        let n = (difference - threshold)
            .min(threshold)
            .min(max_simultaneous - in_progress.len());
        most.sort();
        most.into_iter().take(n).cloned().collect()
    }
}

fn movable<'a, R>(entry: &'a RegionEntry<R>, in_progress: &BTreeSet<ShardId>) -> Vec<&'a ShardId> {
    entry
        .shards
        .iter()
        .filter(|s| !in_progress.contains(*s))
        .collect()
}

#[cfg(test)]
mod tests;
