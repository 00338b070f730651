//! Access patterns: trace files, synthetic streams, and their concatenation, turned into the
//! stream of ids a run replays.

use std::path::PathBuf;

use crate::replay::simulate_ids;
use crate::synthetic::synthetic_ids;
use crate::{Run, SimError, SimId, Stats, Synthetic, TraceCache, TraceFormat};

/// An access pattern.
#[derive(Debug, Clone, PartialEq)]
pub enum AccessPattern {
    /// A trace file.
    Trace {
        /// Format.
        format: TraceFormat,
        /// Path (gzip or plain).
        path: PathBuf,
    },
    /// Generated ids.
    Synthetic {
        /// Generator.
        generator: Synthetic,
        /// Number of accesses.
        events: u64,
        /// RNG seed.
        seed: u64,
    },
    /// Concatenation of patterns.
    Joined(Vec<AccessPattern>),
}

impl AccessPattern {
    /// The ids of this pattern, in order.
    pub fn ids(&self, cache: &mut TraceCache) -> Result<Box<dyn Iterator<Item = SimId>>, SimError> {
        match self {
            AccessPattern::Trace { format, path } => {
                let t = cache.get(*format, path)?;
                Ok(Box::new((0..t.len()).map(move |i| t[i])))
            }
            AccessPattern::Synthetic {
                generator,
                events,
                seed,
            } => synthetic_ids(generator, *events, *seed),
            AccessPattern::Joined(parts) => {
                let mut iters = Vec::with_capacity(parts.len());
                for p in parts {
                    iters.push(p.ids(cache)?);
                }
                Ok(Box::new(iters.into_iter().flatten()))
            }
        }
    }
}

/// Run one simulation, loading its pattern through `cache`.
pub fn simulate(run: &Run, cache: &mut TraceCache) -> Result<Stats, SimError> {
    let ids = run.pattern.ids(cache)?;
    simulate_ids(run, ids)
}
