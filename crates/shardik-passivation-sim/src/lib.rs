//! The passivation simulator: replays access patterns (trace files or synthetic streams) through
//! the policies of [`shardik_passivation`] exactly as a sharded cluster would, and reports the hit
//! rate, so policies can be compared with each other, with a clairvoyant optimum and with the
//! reference's published tables.
//!
//! The policies crate stays what the runtime links: policies and nothing else, free of I/O. This
//! crate is everything that exists only to measure them. Its pure parts (the replay loop, the
//! clairvoyant optimum, the synthetic generators) take ids from an iterator; the I/O is confined
//! to two modules: `trace` (reading files, gzip) and `cli` (the command line and its JSON config
//! files, the entry point `shardik passivation-sim` calls).
//!
//! Each module below uses only those listed before it:
//!
//! | module | job |
//! |---|---|
//! | `error` | [`SimError`]: a bad command line, an unreadable file, a malformed trace |
//! | `id` | [`SimId`]: a numeric id and the Java hash of its string form (the reference's shard key) |
//! | `policy` | [`SimPolicy`]: the policies by name |
//! | `optimal` | clairvoyant Bélády replacement |
//! | `synthetic` | [`Synthetic`] YCSB generators, seeded |
//! | `trace` | [`read_trace`], [`TraceCache`]: trace files (LIRS, Corda, simple, ARC; gzip detected) |
//! | `pattern` | [`AccessPattern`] (traces, synthetic, joined) → ids |
//! | `replay` | [`simulate_ids`]: ids → shard → region → per-shard policy → [`Stats`]; [`simulate`]: a [`Run`]'s own pattern |
//! | `cli`, `report` | [`run_from_args`]: flags and config files → runs → table or JSON lines |

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod cli;
mod error;
mod id;
mod optimal;
mod pattern;
mod policy;
mod replay;
mod report;
mod synthetic;
mod trace;

pub use cli::{CliOptions, USAGE, parse_args, run_from_args};
pub use error::SimError;
pub use id::SimId;
pub use pattern::AccessPattern;
pub use policy::SimPolicy;
pub use replay::{Run, Stats, shard_of, simulate, simulate_ids};
pub use report::render;
pub use synthetic::{Synthetic, Zipfian, synthetic_ids};
pub use trace::{TraceCache, TraceFormat, read_trace};
