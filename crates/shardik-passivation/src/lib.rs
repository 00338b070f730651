//! I/O-free passivation policies for sharded entities, after Akka/Pekko Cluster Sharding's
//! automatic passivation, plus a trace-driven simulator.
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
//! Measured for `u64` ids on x86-64 (`std` `HashMap`, whose buckets hold `(Id, u32)` plus one
//! control byte, at its usual 7/8 maximum load), excluding the id's own heap data:
//!
//! | policy | slab node | hash map entry | total (`u64` id) |
//! |---|---|---|---|
//! | idle / LRU / MRU | 32 B (prev, next, id, timestamp) | 16 B + 1 ctrl | ~49–65 B |
//! | SLRU / S4LRU | 24 B (prev, next, id, level) | 16 B + 1 ctrl | ~41–57 B |
//! | LFU / LFUDA | 32 B (prev, next, id, bucket, accesses) | 16 B + 1 ctrl | ~49–65 B (+ 24 B per distinct frequency bucket) |
//! | composite (LRU window + SLRU main) | as the area holding it | | ~41–65 B + sketch |
//!
//! The frequency sketch adds `4 rows × width_multiplier × next_pow2(limit) × 4 bits`, i.e.
//! 8 bytes × next_pow2(limit) with the defaults (about 1 MiB for a per-shard limit of 100 000,
//! 10.5 bytes per tracked entity). Adding an idle timeout to a limit-based policy adds a second
//! recency list (~49–65 B per entity). The ranges are the hash-map load factor (between 7/16 and
//! 7/8 full) and slab slots freed but not yet reused. For `String` ids add the string twice (24 B
//! header each plus the bytes): the id is stored in the map key and in the node.
//! `RecencyList::<u64>` sizes are asserted in this crate's tests (`memory_layout`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod arena;
mod frequency;
mod recency;
mod segmented;
mod settings;
pub mod sim;
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
pub use sim::run_from_args;
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
        ("recency", arena::node_size::<(u64, u64)>()),
        ("segmented", arena::node_size::<(u64, u8)>()),
        ("frequency", arena::node_size::<(u64, u32, u64)>()),
    ]
}
