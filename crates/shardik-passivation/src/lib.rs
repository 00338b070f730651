//! I/O-free passivation policies for sharded entities, after Akka/Pekko Cluster Sharding's
//! automatic passivation. The trace-driven simulator that measures them lives in the
//! `shardik-passivation-sim` crate, so this one stays free of I/O.
//!
//! One [`PassivationStrategy`] instance runs per shard. The shard calls
//! [`PassivationStrategy::entity_touched`] before delivering each message and passivates the ids it
//! returns; [`PassivationStrategy::shards_updated`] / [`PassivationStrategy::limit_updated`] split the
//! per-region limit evenly over the region's active shards (integer division; one shard until told
//! otherwise); idle timeouts are checked on [`PassivationStrategy::interval_passed`]. No clocks,
//! threads or global randomness: time comes in as milliseconds since an arbitrary epoch.
//!
//! # Policies
//!
//! | policy | structure | per access |
//! |---|---|---|
//! | idle timeout | [`RecencyList`] | O(1) |
//! | LRU / MRU | [`RecencyList`] | O(1) |
//! | SLRU / S4LRU | [`SegmentedRecencyList`] | O(1) (O(levels) on limit change) |
//! | LFU | [`FrequencyList`] | O(1) |
//! | LFUDA | [`FrequencyList`] with dynamic aging | O(1) amortised; a hit scans forward over buckets with lower priority |
//! | composite W-TinyLFU | window + main areas, [`FrequencySketch`], [`HillClimbing`] | O(1) |
//!
//! # Memory per tracked entity
//!
//! Every policy keeps a `HashMap<Id, u32>` (id → slab index) and a slab node per entity. For
//! `u64` ids on x86-64 the slab node is 24 bytes for recency lists (prev, next, id, timestamp) and
//! segmented lists (prev, next, id, level), and 32 bytes for frequency lists (prev, next, id,
//! bucket, access count); a map bucket is 16 bytes plus one control byte. Capacities grow by
//! doubling, and under constant churn the map's tombstones make it grow one size further, so the
//! steady state is larger than the sum of the parts. Measured with a counting global allocator
//! (`tests/memory.rs`: 100 000 entities, 200 000 touches over 150 000 ids, `u64` ids):
//!
//! | policy | bytes per tracked entity (measured) |
//! |---|---|
//! | idle timeout / LRU | 76.0 |
//! | MRU | 53.7 (its churn reuses the same slots) |
//! | SLRU / S4LRU | 76.0 |
//! | LFU / LFUDA | 86.5 (+ 32 bytes per distinct-priority bucket, few in practice) |
//! | composite W-TinyLFU (`default-strategy`, sketch included) | 65.2 |
//!
//! The frequency sketch of the composite strategy is `4 rows × width_multiplier ×
//! next_pow2(per-shard limit)` 4-bit counters: with the defaults 8 bytes × next_pow2(limit)
//! (1 MiB for a per-shard limit of 100 000, i.e. about 10.5 bytes per tracked entity, included
//! above). An idle timeout added to a limit-based policy keeps a second recency list (about the
//! LRU figure again). For `String` ids add the id twice (map key and slab node: 24-byte header
//! each plus the heap bytes). Slab node sizes are asserted in `tests/policies.rs` (`memory_layout`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod arena;
mod frequency;
mod recency;
mod segmented;
mod settings;
mod sketch;
mod strategy;

pub use frequency::FrequencyList;
pub use recency::RecencyList;
pub use segmented::{SegmentedRecencyList, segment_limits, segment_limits_floor};
pub use settings::{
    AdmissionConfig, DurationSetting, FrequencySketchConfig, HillClimbingConfig, IdleEntityConfig,
    LfuConfig, LimitSetting, LruConfig, PassivationSettings, PolicyConfig, ResolvedStrategy,
    SegmentedConfig, SettingsError, StrategyConfig, WindowConfig, parse_duration,
};
pub use sketch::{
    EntityHash, FastSketch, FrequencySketch, GeneralSketch, HillClimbing, ceiling_power_of_two,
    java_decimal_hash, java_string_hash, java_unsigned_hash,
};
pub use strategy::{
    ActiveEntities, AdmissionFilterSettings, CompositeSettings, CompositeStrategy,
    HillClimbingSettings, IdleCheck, IdleStrategy, LimitStrategy, PassivationStrategy,
    ReplacementPolicy, Strategy,
};

/// Node sizes used by the memory table in the crate docs.
#[doc(hidden)]
pub fn node_sizes() -> [(&'static str, usize); 3] {
    [
        ("recency", recency::node_bytes::<u64>()),
        ("segmented", segmented::node_bytes::<u64>()),
        ("frequency", frequency::node_bytes::<u64>()),
    ]
}
