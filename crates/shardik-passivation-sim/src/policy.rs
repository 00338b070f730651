//! The policies the simulator knows by name, and the names they are printed with.

use shardik_passivation::{
    AdmissionFilterSettings, CompositeSettings, HillClimbingSettings, ReplacementPolicy,
};

use crate::error::SimError;

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
