//! Shard allocation strategies: where a new shard goes, and which shards to move (digest §2).
//!
//! The coordinator owns the allocation state; a strategy is a pure decision function over a
//! snapshot of it ([`AllocationSnapshot`]): every region with the shards it hosts (in allocation
//! order, oldest first) plus the membership facts the reference's "cluster aware" mixin reads
//! from the cluster state. Two strategies are provided:
//!
//! * [`LeastShardAllocationStrategy`]: the "holistic" algorithm with absolute and relative limits
//!   per rebalance round (Akka 2.6.10+, digest §2.3). **Our default** (see [`AllocationSettings`]).
//! * [`ThresholdShardAllocationStrategy`]: the older threshold algorithm (digest §2.2), kept for
//!   configurations that set `rebalance-absolute-limit = 0`, as in the reference.
//!
//! Both allocate a new shard to the most suitable region (see [`RegionEntry::suitability_cmp`]).
//! Ties are broken by the region id, ascending, so that every decision is a function of the
//! snapshot alone (the reference breaks ties by hash-map iteration order).

pub use super::shard_id::ShardId;

mod defaults;
mod least;
mod oldest_up;
mod strategy;
mod threshold;

pub use defaults::{
    DEFAULT_MAX_SIMULTANEOUS_REBALANCE, DEFAULT_REBALANCE_ABSOLUTE_LIMIT,
    DEFAULT_REBALANCE_RELATIVE_LIMIT, DEFAULT_REBALANCE_THRESHOLD,
};
pub use least::LeastShardAllocationStrategy;
pub use oldest_up::OldestUpStrategy;
pub use strategy::{
    AllocationSnapshot, RegionEntry, ShardAllocationStrategy, compare_app_versions,
};
pub use threshold::ThresholdShardAllocationStrategy;

/// The `least-shard-allocation-strategy` settings block, and the rule choosing the algorithm.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AllocationSettings {
    /// Most shards moved per round by the new algorithm. `> 0` selects the new algorithm (the
    /// reference's rule); `0` selects the old threshold algorithm.
    pub rebalance_absolute_limit: u32,
    /// Fraction (< 1.0) of all shards moved per round by the new algorithm; the smaller of the
    /// two limits applies, but never fewer than one shard.
    pub rebalance_relative_limit: f64,
    /// Old algorithm: rebalance only when most − least exceeds this.
    pub rebalance_threshold: u32,
    /// Old algorithm: at most this many shards rebalancing at once.
    pub max_simultaneous_rebalance: u32,
}

impl Default for AllocationSettings {
    /// `20 / 0.1 / 1 / 3`: the new algorithm (see [`DEFAULT_REBALANCE_ABSOLUTE_LIMIT`]).
    fn default() -> Self {
        AllocationSettings {
            rebalance_absolute_limit: DEFAULT_REBALANCE_ABSOLUTE_LIMIT,
            rebalance_relative_limit: DEFAULT_REBALANCE_RELATIVE_LIMIT,
            rebalance_threshold: DEFAULT_REBALANCE_THRESHOLD,
            max_simultaneous_rebalance: DEFAULT_MAX_SIMULTANEOUS_REBALANCE,
        }
    }
}

impl AllocationSettings {
    /// The strategy these settings select: [`LeastShardAllocationStrategy`] when
    /// `rebalance_absolute_limit > 0`, else [`ThresholdShardAllocationStrategy`] (the
    /// reference's `defaultShardAllocationStrategy` rule).
    pub fn strategy<R: Ord + Clone + 'static>(&self) -> Box<dyn ShardAllocationStrategy<R> + Send> {
        if self.rebalance_absolute_limit > 0 {
            Box::new(LeastShardAllocationStrategy::new(
                self.rebalance_absolute_limit,
                self.rebalance_relative_limit,
            ))
        } else {
            Box::new(ThresholdShardAllocationStrategy::new(
                self.rebalance_threshold,
                self.max_simultaneous_rebalance,
            ))
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support;

#[cfg(test)]
mod tests;
