//! One measurement of the coordinator at one size: `R` regions, `S` shards, one strategy.
//!
//! The layout is a cluster that just grew by one node: the shards spread evenly over the first
//! `R − 1` regions, the last region empty. On it, in order:
//!
//! 1. **rebuild**: every region registers with the shards it hosts, as after the coordinator
//!    moved to another node; the heap bytes the coordinator holds afterwards are its state;
//! 2. **rebalance**: rounds of the coordinator's timer (snapshot, strategy, `BeginHandOff` to
//!    every region), each timed, then the hand-offs it started are completed by the regions'
//!    answers (the coordinator re-allocating each shard), timed per shard moved;
//! 3. **allocate**: new shards are asked for one at a time (`GetShardHome` → `HostShard`);
//!    each call is timed, and beside it the strategy's decision alone on the same snapshot;
//! 4. **re-home**: the fullest region other than the coordinator's stops, and the coordinator
//!    gives each of its shards a new home at once (timed as one call).
//!
//! Afterwards every shard must have a home and the table must pass its own invariant check.

use std::collections::BTreeSet;
use std::hint::black_box;
use std::time::Instant as WallInstant;

use serde::Serialize;
use shardik_core::sharding::{AllocationSettings, AllocationSnapshot, Protocol, RegionEntry};

use super::cluster::{Cluster, Strategy, shard};
use super::heap;

/// Which allocation strategy the coordinator runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrategyChoice {
    /// The default: least-shard with per-round limits (`rebalance-absolute-limit = 20`,
    /// `rebalance-relative-limit = 0.1`).
    LeastShard,
    /// The reference's older threshold strategy (`rebalance-absolute-limit = 0`, threshold 1,
    /// at most 3 at once).
    Threshold,
}

impl StrategyChoice {
    /// The name printed.
    pub fn name(self) -> &'static str {
        match self {
            StrategyChoice::LeastShard => "least-shard",
            StrategyChoice::Threshold => "threshold",
        }
    }

    /// The configuration that selects it.
    pub fn settings(self) -> AllocationSettings {
        match self {
            StrategyChoice::LeastShard => AllocationSettings::default(),
            StrategyChoice::Threshold => AllocationSettings {
                rebalance_absolute_limit: 0,
                ..AllocationSettings::default()
            },
        }
    }
}

/// The size of one measurement and how many samples to take.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    /// Regions (at least 2: one of them starts empty).
    pub regions: usize,
    /// Shards placed before measuring.
    pub shards: usize,
    /// New shards allocated one by one, each timed.
    pub allocations: usize,
    /// Most rebalance rounds timed (fewer when the cluster is balanced sooner).
    pub rounds: usize,
}

/// The results of one measurement (times in microseconds unless the name says otherwise).
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub benchmark: &'static str,
    pub strategy: &'static str,
    pub regions: usize,
    pub shards: usize,
    /// Every region registering with its shards.
    pub rebuild_ms: f64,
    /// Heap bytes the coordinator holds after the rebuild.
    pub state_bytes: u64,
    pub bytes_per_shard: f64,
    pub allocations: usize,
    pub allocate_us_median: f64,
    pub allocate_us_mean: f64,
    /// The strategy's `allocate_shard` alone, on a snapshot built beforehand.
    pub strategy_allocate_us: f64,
    /// The strategy's `rebalance` alone, on the starting layout.
    pub strategy_rebalance_us: f64,
    /// Shards the first round chose.
    pub first_round_shards: usize,
    pub rounds: usize,
    pub shards_moved: usize,
    pub round_us_mean: f64,
    pub round_us_max: f64,
    /// Completing one hand-off (acks from every region, `HandOff`, `ShardStopped`, the new
    /// `HostShard`), per shard moved.
    pub handoff_us_per_shard: f64,
    /// Most minus fewest shards per region after the rounds.
    pub spread_after_rebalance: usize,
    pub lost_region_shards: usize,
    pub rehome_ms: f64,
    pub rehome_us_per_shard: f64,
    /// Every shard had a home at the end and the table passed its invariant check.
    pub consistent: bool,
    pub heap_source: &'static str,
}

/// Runs the four phases (see the module docs) at `size` with `choice`.
pub fn measure(choice: StrategyChoice, size: Size) -> Row {
    assert!(size.regions >= 2, "at least two regions (one starts empty)");
    let mut cluster = Cluster::new(size.regions, choice.settings());
    let hosts = size.regions - 1;

    // 1. rebuild, and the state's heap bytes.
    let before = heap::in_use();
    let mut placements: Vec<Vec<_>> = vec![Vec::new(); size.regions];
    for n in 0..size.shards {
        placements[n % hosts].push(shard(n));
    }
    let started = WallInstant::now();
    let mut placements = placements.into_iter();
    cluster.register_all(|_| placements.next().unwrap_or_default());
    let rebuild_ms = ms(started);
    cluster.discard_effects();
    let state_bytes = heap::in_use().saturating_sub(before);
    assert!(
        cluster.coordinator.may_allocate(),
        "every region registered"
    );

    // 2. rebalance rounds, while the last region is still the emptiest.
    let (strategy_rebalance_us, first_round_shards) = strategy_rebalance(&cluster, choice);
    let mut rounds = Vec::new();
    let (mut moved, mut handoff_us) = (0, 0.0);
    for _ in 0..size.rounds {
        cluster.advance_to_next_round();
        let started = WallInstant::now();
        cluster.tick();
        let round = us(started);
        let started = WallInstant::now();
        let counts = cluster.answer_all();
        if counts.handoffs_started == 0 {
            break;
        }
        handoff_us += us(started);
        moved += counts.handoffs_done;
        rounds.push(round);
    }

    let spread_after_rebalance = cluster.spread();

    // 3. allocation, through the coordinator and by the strategy alone.
    let strategy_allocate_us = strategy_allocate(&cluster, choice, size.allocations);
    let mut samples = Vec::with_capacity(size.allocations);
    for k in 0..size.allocations {
        let requester = cluster.regions[k % size.regions].clone();
        let msg = Protocol::GetShardHome {
            shard: format!("new-{k}").into(),
        };
        let started = WallInstant::now();
        cluster.deliver(&requester, msg);
        samples.push(us(started));
        cluster.answer_all();
    }

    // 4. a region stops; its shards are re-homed at once.
    let (lost, lost_shards) = cluster.fullest_region_but_the_coordinators();
    let lost_node = cluster.regions[lost].clone();
    let started = WallInstant::now();
    cluster.deliver(&lost_node, Protocol::RegionStopped);
    let rehome_ms = ms(started);
    cluster.answer_all();

    let expected = size.shards + size.allocations;
    let consistent = cluster.allocated() == expected
        && cluster.coordinator.state().check().is_ok()
        && !cluster.coordinator.state().has_region(&lost_node);
    Row {
        benchmark: "coordinator",
        strategy: choice.name(),
        regions: size.regions,
        shards: size.shards,
        rebuild_ms,
        state_bytes,
        bytes_per_shard: state_bytes as f64 / size.shards.max(1) as f64,
        allocations: size.allocations,
        allocate_us_median: median(&mut samples),
        allocate_us_mean: mean(&samples),
        strategy_allocate_us,
        strategy_rebalance_us,
        first_round_shards,
        rounds: rounds.len(),
        shards_moved: moved,
        round_us_mean: mean(&rounds),
        round_us_max: rounds.iter().copied().fold(0.0, f64::max),
        handoff_us_per_shard: handoff_us / moved.max(1) as f64,
        spread_after_rebalance,
        lost_region_shards: lost_shards,
        rehome_ms,
        rehome_us_per_shard: rehome_ms * 1000.0 / lost_shards.max(1) as f64,
        consistent,
        heap_source: heap::source(),
    }
}

/// The snapshot the coordinator hands its strategy: every registered region with its member
/// and shards.
fn snapshot(cluster: &Cluster) -> AllocationSnapshot<shardik_core::membership::UniqueAddress> {
    let mut snapshot = AllocationSnapshot::new();
    for (region, shards) in cluster.coordinator.state().regions() {
        snapshot.insert(RegionEntry {
            region: region.clone(),
            member: cluster.view.member(region).cloned(),
            shards: shards.clone(),
        });
    }
    snapshot
}

/// Mean time of the strategy's `allocate_shard` alone over `n` calls.
fn strategy_allocate(cluster: &Cluster, choice: StrategyChoice, n: usize) -> f64 {
    let snapshot = snapshot(cluster);
    let mut strategy: Strategy = choice.settings().strategy();
    let requester = cluster.regions[0].clone();
    let new = shard(usize::MAX);
    let started = WallInstant::now();
    for _ in 0..n.max(1) {
        black_box(strategy.allocate_shard(&requester, black_box(&new), &snapshot));
    }
    us(started) / n.max(1) as f64
}

/// Time of the strategy's `rebalance` alone on the current layout, and how many shards it
/// chose.
fn strategy_rebalance(cluster: &Cluster, choice: StrategyChoice) -> (f64, usize) {
    let snapshot = snapshot(cluster);
    let mut strategy: Strategy = choice.settings().strategy();
    let started = WallInstant::now();
    let chosen = strategy.rebalance(&snapshot, &BTreeSet::new());
    (us(started), chosen.len())
}

fn us(started: WallInstant) -> f64 {
    started.elapsed().as_nanos() as f64 / 1e3
}

fn ms(started: WallInstant) -> f64 {
    started.elapsed().as_nanos() as f64 / 1e6
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(choice: StrategyChoice) -> Row {
        measure(
            choice,
            Size {
                regions: 4,
                shards: 120,
                allocations: 6,
                rounds: 50,
            },
        )
    }

    #[test]
    fn the_least_shard_coordinator_balances_the_new_region_and_re_homes_a_lost_one() {
        let row = small(StrategyChoice::LeastShard);
        assert!(row.consistent, "{row:?}");
        // 126 shards after the allocations: at most min(20, 10 % of 126) = 12 per round.
        assert_eq!(row.first_round_shards, 12, "{row:?}");
        assert!(row.rounds >= 2 && row.rounds < 50, "{row:?}");
        assert!(row.shards_moved >= 24, "{row:?}");
        assert!(row.spread_after_rebalance <= 1, "{row:?}");
        // Balanced, the fullest region holds ceil(126 / 4) = 32 shards.
        assert_eq!(row.lost_region_shards, 32, "{row:?}");
        assert!(row.state_bytes > 120 * 16, "{row:?}");
    }

    #[test]
    fn the_threshold_coordinator_moves_one_shard_per_round_until_balanced() {
        let row = small(StrategyChoice::Threshold);
        assert!(row.consistent, "{row:?}");
        assert_eq!(row.first_round_shards, 1, "{row:?}");
        assert_eq!(row.shards_moved, row.rounds, "{row:?}");
        assert!(row.rounds >= 24 && row.rounds < 50, "{row:?}");
        assert!(row.spread_after_rebalance <= 1, "{row:?}");
    }
}
