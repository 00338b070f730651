//! Randomized convergence tests, after the reference's
//! `LeastShardAllocationStrategyRandomizedSpec`: random region counts and shard distributions;
//! iterating rebalance + re-allocation must reach `max − min ≤ 1` within a bounded number of
//! rounds, and no round may move more shards than the limits allow.

use std::collections::BTreeSet;

use proptest::prelude::*;

use crate::sharding::allocation::test_support::{after_rebalance, up};
use crate::sharding::allocation::*;

fn snapshot(counts: &[usize]) -> AllocationSnapshot<u16> {
    let mut s = AllocationSnapshot::new();
    for (i, &count) in counts.iter().enumerate() {
        let region = i as u16 + 1;
        s.insert(RegionEntry {
            region,
            member: Some(up(region)),
            shards: (1..=count)
                .map(|n| format!("R{region}-{n:03}").into())
                .collect(),
        });
    }
    s
}

fn spread(s: &AllocationSnapshot<u16>) -> usize {
    let sizes: Vec<usize> = s.regions().map(|e| e.shards.len()).collect();
    sizes.iter().max().unwrap_or(&0) - sizes.iter().min().unwrap_or(&0)
}

fn all_shards(s: &AllocationSnapshot<u16>) -> BTreeSet<ShardId> {
    s.regions().flat_map(|e| e.shards.iter().cloned()).collect()
}

/// Iterates rounds until balanced; fails if that takes more than `max_rounds` rounds (the
/// reference's `expectedMaxSteps`, counted the same way: the rounds called, the last included).
fn converges(
    strategy: LeastShardAllocationStrategy,
    counts: &[usize],
    max_rounds: usize,
) -> Result<(), TestCaseError> {
    let mut strategy = strategy;
    let mut current = snapshot(counts);
    let total = current.shard_count();
    let mut history = vec![counts.to_vec()];
    for _round in 1..=max_rounds {
        let moved = strategy.rebalance(&current, &BTreeSet::new());
        prop_assert!(
            moved.len() <= strategy.limit(total),
            "over the limit: {moved:?}"
        );
        prop_assert!(moved.is_subset(&all_shards(&current)));
        if !moved.is_empty() {
            // One round at a time: nothing more while these are moving.
            prop_assert!(strategy.rebalance(&current, &moved).is_empty());
        }
        current = after_rebalance(&mut strategy, &current, &moved, &1);
        prop_assert_eq!(current.shard_count(), total);
        prop_assert_eq!(all_shards(&current).len(), total);
        history.push(current.regions().map(|e| e.shards.len()).collect());
        if spread(&current) <= 1 {
            return Ok(());
        }
    }
    Err(TestCaseError::fail(format!(
        "not balanced within {max_rounds} rounds: {history:?}"
    )))
}

fn counts(max_regions: usize, max_shards_per_region: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(0..max_shards_per_region, 1..=max_regions)
}

fn unlimited() -> LeastShardAllocationStrategy {
    LeastShardAllocationStrategy::new(100_000, 1.0)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn max_5_regions_5_shards(c in counts(5, 5)) {
        converges(unlimited(), &c, 2)?;
    }

    #[test]
    fn max_5_regions_100_shards(c in counts(5, 100)) {
        converges(unlimited(), &c, 2)?;
    }

    #[test]
    fn max_20_regions_5_shards(c in counts(20, 5)) {
        converges(unlimited(), &c, 2)?;
    }

    #[test]
    fn max_20_regions_20_shards(c in counts(20, 20)) {
        converges(unlimited(), &c, 2)?;
    }

    #[test]
    fn max_20_regions_200_shards(c in counts(20, 200)) {
        converges(unlimited(), &c, 5)?;
    }

    #[test]
    fn max_20_regions_20_shards_with_limits(
        c in counts(20, 20),
        absolute in 6u32..=12,
        relative in 0.05f64..1.0,
    ) {
        converges(LeastShardAllocationStrategy::new(absolute, relative), &c, 20)?;
    }

    /// Our default limits (20 / 0.1) on a larger cluster: every round moves at least one shard
    /// and at most the limit, so the bound is the total excess over the limit, plus slack for
    /// the phase-2 rounds.
    #[test]
    fn default_limits_converge(c in counts(30, 200)) {
        let s = LeastShardAllocationStrategy::default();
        let total: usize = c.iter().sum();
        let optimal = total.div_ceil(c.len());
        let excess: usize = c.iter().map(|&n| n.saturating_sub(optimal)).sum();
        let bound = excess.div_ceil(s.limit(total).max(1)) + 5;
        converges(s, &c, bound)?;
    }

    /// The old algorithm never proposes in-progress or unknown shards, nor more than the cap.
    #[test]
    fn threshold_respects_cap_and_in_progress(
        c in counts(10, 50),
        threshold in 1u32..5,
        max in 1u32..6,
        busy in prop::collection::btree_set(1usize..50, 0..6),
    ) {
        let current = snapshot(&c);
        let in_progress: BTreeSet<ShardId> = busy.iter().map(|n| format!("R1-{n:03}").into()).collect();
        let mut s = ThresholdShardAllocationStrategy::new(threshold, max);
        let moved = s.rebalance(&current, &in_progress);
        prop_assert!(moved.is_disjoint(&in_progress));
        prop_assert!(moved.is_subset(&all_shards(&current)));
        prop_assert!(moved.len() + in_progress.len() <= max as usize || moved.is_empty());
        prop_assert!(moved.len() <= threshold as usize);
    }
}

/// The reference's 100-region scenarios, fewer cases because each is larger.
mod large {
    use super::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn max_100_regions_100_shards(c in counts(100, 100)) {
            converges(unlimited(), &c, 5)?;
        }

        #[test]
        fn max_100_regions_1000_shards(c in counts(100, 1000)) {
            converges(unlimited(), &c, 5)?;
        }
    }
}
