//! Passivation simulator: replays an access pattern exactly as a sharded cluster would.
//!
//! Pipeline (as the reference's simulator): id → shard `abs(hashCode(id) % shards)` (Java
//! `String.hashCode` of the id's string form) → region chosen by least shards (ties by region
//! id) when a shard is first seen → per-shard strategy instance, created with the per-region
//! limit; when a region gains a shard, every shard of that region (the new one included) gets
//! `shards_updated(region shard count)` → stats (accesses, activations, passivations).

mod cli;
pub mod pattern;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};

pub use cli::{CliOptions, parse_args, render, run_from_args};
pub use pattern::{AccessPattern, Synthetic, TraceCache, TraceFormat};

use crate::sketch::EntityHash;
use crate::strategy::{
    ActiveEntities, AdmissionFilterSettings, CompositeSettings, CompositeStrategy,
    HillClimbingSettings, LimitStrategy, PassivationStrategy, ReplacementPolicy, Strategy,
};

/// Simulator entity id: the numeric id plus the Java hash code of its string form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimId {
    /// Numeric id (or interned index for non-numeric trace ids).
    pub id: u64,
    /// Java `String.hashCode` of the id as written in the trace.
    pub hash: i32,
}

impl Hash for SimId {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.id);
    }
}

impl EntityHash for SimId {
    fn entity_hash(&self) -> i32 {
        self.hash
    }
}

/// Simulator errors.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Bad command line or configuration.
    #[error("usage error: {0}")]
    Usage(String),
    /// File could not be read.
    #[error("i/o error: {0}")]
    Io(String),
    /// Malformed trace content.
    #[error("trace error: {0}")]
    Trace(String),
}

/// Policies the simulator knows by name.
#[derive(Debug, Clone, PartialEq)]
pub enum SimPolicy {
    /// Clairvoyant Bélády (needs the whole pattern up front).
    Optimal,
    /// A single replacement policy.
    Single(ReplacementPolicy),
    /// Segmented LRU with every level limit floored (the reference's published SLRU/S4LRU tables).
    SegmentedFloor(Vec<f64>),
    /// A composite strategy.
    Composite(CompositeSettings),
    /// No passivation.
    None,
}

impl SimPolicy {
    /// Parse a policy name: `optimal`/`opt`, `lru`, `slru`, `s4lru`, `mru`, `lfu`, `lfuda`,
    /// `slru-floor`, `s4lru-floor`, `lru-fs-slru`, `lru-fs-slru-hc`, `default` (= `lru-fs-slru-hc`), `lru-fs-lfu-hc`, `none`.
    pub fn parse(name: &str) -> Result<(String, SimPolicy), SimError> {
        let slru = || ReplacementPolicy::SegmentedLeastRecentlyUsed(vec![0.2, 0.8]);
        let composite = |hc: bool, main: ReplacementPolicy| CompositeSettings {
            optimizer: hc.then(HillClimbingSettings::default),
            main,
            ..CompositeSettings::default_strategy()
        };
        let p = match name.trim().to_ascii_lowercase().as_str() {
            "optimal" | "opt" => ("OPT", SimPolicy::Optimal),
            "lru" => (
                "LRU",
                SimPolicy::Single(ReplacementPolicy::LeastRecentlyUsed),
            ),
            "slru" => ("SLRU", SimPolicy::Single(slru())),
            "s4lru" => (
                "S4LRU",
                SimPolicy::Single(ReplacementPolicy::SegmentedLeastRecentlyUsed(vec![0.25; 4])),
            ),
            "slru-floor" => ("SLRU", SimPolicy::SegmentedFloor(vec![0.2, 0.8])),
            "s4lru-floor" => ("S4LRU", SimPolicy::SegmentedFloor(vec![0.25; 4])),
            "mru" => (
                "MRU",
                SimPolicy::Single(ReplacementPolicy::MostRecentlyUsed),
            ),
            "lfu" => (
                "LFU",
                SimPolicy::Single(ReplacementPolicy::LeastFrequentlyUsed {
                    dynamic_aging: false,
                }),
            ),
            "lfuda" => (
                "LFUDA",
                SimPolicy::Single(ReplacementPolicy::LeastFrequentlyUsed {
                    dynamic_aging: true,
                }),
            ),
            "lru-fs-slru" => (
                "LRU/FS/SLRU",
                SimPolicy::Composite(composite(false, slru())),
            ),
            "lru-fs-slru-hc" => (
                "LRU/FS/SLRU/HC",
                SimPolicy::Composite(composite(true, slru())),
            ),
            "default" => ("DEFAULT", SimPolicy::Composite(composite(true, slru()))),
            "lru-fs-lfu-hc" => (
                "LRU/FS/LFU/HC",
                SimPolicy::Composite(composite(
                    true,
                    ReplacementPolicy::LeastFrequentlyUsed {
                        dynamic_aging: false,
                    },
                )),
            ),
            "lru-slru" => (
                "LRU/SLRU",
                SimPolicy::Composite(CompositeSettings {
                    filter: AdmissionFilterSettings::Always,
                    optimizer: None,
                    ..composite(false, slru())
                }),
            ),
            "none" => ("NONE", SimPolicy::None),
            other => {
                return Err(SimError::Usage(format!(
                    "unknown policy `{other}` (expected optimal, lru, slru, s4lru, slru-floor, s4lru-floor, mru, lfu, lfuda, lru-fs-slru, lru-fs-slru-hc, lru-fs-lfu-hc, lru-slru, default, none)"
                )));
            }
        };
        Ok((p.0.to_string(), p.1))
    }
}

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

/// Clairvoyant strategy for one shard: passivate the entity whose next access is furthest away.
struct Optimal {
    per_region_limit: usize,
    per_shard_limit: usize,
    /// next access position -> id
    by_next: BTreeMap<u64, SimId>,
    /// id -> its key in `by_next`
    key_of: HashMap<SimId, u64>,
    never: u64,
}

impl Optimal {
    fn new(per_region_limit: usize) -> Self {
        Optimal {
            per_region_limit,
            per_shard_limit: per_region_limit,
            by_next: BTreeMap::new(),
            key_of: HashMap::new(),
            never: u64::MAX,
        }
    }

    fn touched(&mut self, id: SimId, next: Option<u64>, out: &mut Vec<SimId>) {
        if let Some(old) = self.key_of.remove(&id) {
            self.by_next.remove(&old);
        }
        let key = match next {
            Some(n) => n,
            None => {
                self.never -= 1;
                self.never
            }
        };
        self.by_next.insert(key, id);
        self.key_of.insert(id, key);
        self.passivate_excess(out);
    }

    fn shards_updated(&mut self, active_shards: usize, out: &mut Vec<SimId>) {
        self.per_shard_limit = self.per_region_limit / active_shards.max(1);
        self.passivate_excess(out);
    }

    fn passivate_excess(&mut self, out: &mut Vec<SimId>) {
        while self.by_next.len() > self.per_shard_limit {
            let (_, id) = self.by_next.pop_last().expect("non-empty");
            self.key_of.remove(&id);
            out.push(id);
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

/// Run one simulation, loading its pattern through `cache`.
pub fn simulate(run: &Run, cache: &mut TraceCache) -> Result<Stats, SimError> {
    let ids = run.pattern.ids(cache)?;
    simulate_ids(run, ids)
}
