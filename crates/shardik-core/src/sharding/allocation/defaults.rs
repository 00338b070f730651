//! The defaults of the `least-shard-allocation-strategy` settings block.
//!
//! Kept apart from the parent module so that the strategies (`least`, `threshold`) and
//! `AllocationSettings` read the same values without the
//! strategies importing the module that chooses between them.

/// Our default `rebalance-absolute-limit`: 20.
///
/// The reference ships 0, which selects the *old* threshold algorithm; its documentation
/// recommends the new algorithm and shows 20 as the example value. We make the new algorithm
/// the default with that value (a documented difference from Akka).
pub const DEFAULT_REBALANCE_ABSOLUTE_LIMIT: u32 = 20;
/// Default `rebalance-relative-limit` (reference.conf): at most 10 % of all shards per round.
pub const DEFAULT_REBALANCE_RELATIVE_LIMIT: f64 = 0.1;
/// Default `rebalance-threshold` of the old algorithm (reference.conf).
pub const DEFAULT_REBALANCE_THRESHOLD: u32 = 1;
/// Default `max-simultaneous-rebalance` of the old algorithm (reference.conf).
pub const DEFAULT_MAX_SIMULTANEOUS_REBALANCE: u32 = 3;
