//! The replay loop: feeds ids through a cluster of shards in regions exactly as a sharded
//! cluster would, one policy instance per shard, and counts what happened.
//!
//! Pipeline (as the reference's simulator): id → shard `abs(hashCode(id) % shards)` (Java
//! `String.hashCode` of the id's string form) → region chosen by least shards (ties by region
//! id) when a shard is first seen → per-shard strategy instance, created with the per-region
//! limit; when a region gains a shard, every shard of that region (the new one included) gets
//! `shards_updated(region shard count)` → stats (accesses, activations, passivations).
//! [`simulate`] replays a run's own pattern, loading it through a [`TraceCache`].

use std::collections::{HashMap, HashSet};

use shardik_passivation::{
    ActiveEntities, CompositeStrategy, LimitStrategy, PassivationStrategy, Strategy,
};

use crate::error::SimError;
use crate::id::SimId;
use crate::optimal::Optimal;
use crate::pattern::AccessPattern;
use crate::policy::SimPolicy;
use crate::trace::TraceCache;

/// One simulation run.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// Label (e.g. `LRU 500`).
    pub name: String,
    /// Policy.
    pub policy: SimPolicy,
    /// Policy name as given.
    pub policy_name: String,
    /// Per-region active entity limit.
    pub per_region_limit: usize,
    /// Number of shards.
    pub shards: u32,
    /// Number of regions.
    pub regions: u32,
    /// Access pattern.
    pub pattern: AccessPattern,
}

/// Totals of one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Accesses replayed.
    pub accesses: u64,
    /// Accesses that found the entity passive (had to activate it).
    pub activations: u64,
    /// Entities passivated.
    pub passivations: u64,
}

impl Stats {
    /// Hit rate in percent: `100 * (1 - activations / accesses)`.
    pub fn active_percent(&self) -> f64 {
        if self.accesses == 0 {
            0.0
        } else {
            100.0 * (1.0 - self.activations as f64 / self.accesses as f64)
        }
    }
}

#[allow(clippy::large_enum_variant)]
enum ShardStrategy {
    Policy(Strategy<SimId>),
    Optimal(Optimal),
}

struct ShardState {
    strategy: ShardStrategy,
    active: HashSet<SimId>,
}

/// Java `abs(hash % n)` shard extractor.
pub fn shard_of(hash: i32, shards: u32) -> u32 {
    (hash % shards as i32).unsigned_abs()
}

fn create(policy: &SimPolicy, limit: usize) -> ShardStrategy {
    match policy {
        SimPolicy::Optimal => ShardStrategy::Optimal(Optimal::new(limit)),
        SimPolicy::Single(p) => {
            ShardStrategy::Policy(Strategy::Limit(LimitStrategy::new(p, limit, None)))
        }
        SimPolicy::SegmentedFloor(p) => {
            ShardStrategy::Policy(Strategy::Limit(LimitStrategy::with_area(
                ActiveEntities::segmented_with_floor_limits(p, limit),
                limit,
                None,
            )))
        }
        SimPolicy::Composite(c) => ShardStrategy::Policy(Strategy::Composite(Box::new(
            CompositeStrategy::new(c, limit, None),
        ))),
        SimPolicy::None => ShardStrategy::Policy(Strategy::Disabled),
    }
}

/// Run one simulation, loading its pattern through `cache`.
pub fn simulate(run: &Run, cache: &mut TraceCache) -> Result<Stats, SimError> {
    let ids = run.pattern.ids(cache)?;
    simulate_ids(run, ids)
}

/// Replay `ids` through a cluster of `run.shards` shards in `run.regions` regions.
///
/// Checks invariants as it goes: every passivated id must be active, and (for limit-based
/// policies) no shard ever holds more active entities than the per-region limit.
pub fn simulate_ids(run: &Run, ids: impl Iterator<Item = SimId>) -> Result<Stats, SimError> {
    if run.shards == 0 || run.regions == 0 {
        return Err(SimError::Usage(
            "shards and regions must be at least 1".into(),
        ));
    }
    // clairvoyant pre-pass: position of the next access of the same id, per access
    let (ids, next): (Box<dyn Iterator<Item = SimId>>, Vec<u64>) =
        if run.policy == SimPolicy::Optimal {
            let all: Vec<SimId> = ids.collect();
            let mut next = vec![u64::MAX; all.len()];
            let mut seen: HashMap<SimId, u64> = HashMap::new();
            for (i, id) in all.iter().enumerate().rev() {
                if let Some(n) = seen.insert(*id, i as u64) {
                    next[i] = n;
                }
            }
            (Box::new(all.into_iter()), next)
        } else {
            (Box::new(ids), Vec::new())
        };

    let shards = run.shards as usize;
    let mut shard_region: Vec<Option<usize>> = vec![None; shards];
    let mut region_shards: Vec<Vec<usize>> = vec![Vec::new(); run.regions as usize];
    let mut states: Vec<Option<ShardState>> = (0..shards).map(|_| None).collect();
    let mut stats = Stats::default();
    let mut out: Vec<SimId> = Vec::new();

    for (position, id) in ids.enumerate() {
        stats.accesses += 1;
        let shard = shard_of(id.hash, run.shards) as usize;
        let region = match shard_region[shard] {
            Some(r) => r,
            None => {
                // least shards, ties by region id
                let r = (0..region_shards.len())
                    .min_by_key(|&r| (region_shards[r].len(), r))
                    .expect("at least one region");
                shard_region[shard] = Some(r);
                r
            }
        };
        if states[shard].is_none() {
            states[shard] = Some(ShardState {
                strategy: create(&run.policy, run.per_region_limit),
                active: HashSet::new(),
            });
            region_shards[region].push(shard);
            let count = region_shards[region].len();
            for &s in &region_shards[region] {
                let state = states[s].as_mut().expect("created");
                out.clear();
                match &mut state.strategy {
                    ShardStrategy::Policy(p) => p.shards_updated(count, &mut out),
                    ShardStrategy::Optimal(o) => o.shards_updated(count, &mut out),
                }
                passivate(state, &out, &mut stats)?;
            }
        }
        let state = states[shard].as_mut().expect("created");
        out.clear();
        let newly_active = state.active.insert(id);
        match &mut state.strategy {
            ShardStrategy::Policy(p) => p.entity_touched(&id, position as u64, &mut out),
            ShardStrategy::Optimal(o) => {
                let n = next[position];
                o.touched(id, (n != u64::MAX).then_some(n), &mut out)
            }
        }
        if newly_active {
            stats.activations += 1;
            passivate(state, &out, &mut stats)?;
        }
        if !matches!(run.policy, SimPolicy::None) && state.active.len() > run.per_region_limit {
            return Err(SimError::Trace(format!(
                "invariant violated: shard {shard} holds {} active entities, limit {}",
                state.active.len(),
                run.per_region_limit
            )));
        }
    }
    Ok(stats)
}

fn passivate(state: &mut ShardState, out: &[SimId], stats: &mut Stats) -> Result<(), SimError> {
    for id in out {
        if !state.active.remove(id) {
            return Err(SimError::Trace(format!(
                "invariant violated: passivated id {} was not active",
                id.id
            )));
        }
        stats.passivations += 1;
    }
    Ok(())
}
