//! I/O-free protocol cores of shardik.
//!
//! Every core here is a plain struct fed with `(now, input)` that pushes effects (messages to
//! send, events to publish) into a caller-owned buffer. Nothing in this crate reads a clock,
//! opens a socket or draws from a global random generator: time and randomness come in as
//! arguments. That is what lets the same code run in production under tokio and, seeded and
//! replayable, inside the simulator (`shardik-sim`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod address;
pub mod lease;
pub mod membership;
pub mod node;
pub mod sharding;
pub mod time;

pub use time::Instant;
