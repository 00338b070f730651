//! I/O-free protocol cores of shardik.
//!
//! Every core here is a plain struct fed with `(now, input)` that pushes effects (messages to
//! send, events to publish) into a caller-owned buffer. Nothing in this crate reads a clock,
//! opens a socket or draws from a global random generator: time and randomness come in as
//! arguments. That is what lets the same code run in production under tokio and, seeded and
//! replayable, inside the simulator (`shardik-sim`).
//!
//! ## Where the tests are
//!
//! One rule for every module: the unit tests of `foo.rs` (or `foo/mod.rs`) live in
//! `foo/tests.rs`, declared in the module as `#[cfg(test)] mod tests;`. Where `foo.rs` has
//! no folder yet, `foo/` holds just `tests.rs`. A module whose tests want several files keeps
//! them as `foo/tests/NAME.rs`, declared by `foo/tests.rs`. No
//! module has its tests inline, and no test file sits beside the module it tests. Test support
//! used by the tests of several modules is a `#[cfg(test)]` module of its own
//! (`sharding/testkit.rs`, `sharding/allocation/test_support.rs`).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod address;
pub mod ddata;
pub mod delivery;
pub mod lease;
pub mod membership;
pub mod node;
pub mod replicator;
pub mod sharding;
pub mod time;

pub use time::Instant;
