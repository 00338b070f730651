//! Access patterns: trace files, synthetic streams, and their concatenation, turned into the
//! stream of ids a run replays.

use std::path::PathBuf;

use crate::error::SimError;
use crate::id::SimId;
use crate::synthetic::{Synthetic, synthetic_ids};
use crate::trace::{TraceCache, TraceFormat};

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
