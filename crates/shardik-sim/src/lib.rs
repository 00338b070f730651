//! Deterministic simulation of whole shardik clusters.
//!
//! A [`World`] runs many nodes' real protocol cores in one process over a virtual network with
//! latency, loss, partitions, pauses, crashes and restarts. One master seed fixes every random
//! choice, so the same seed replays the same timeline. A [`Checker`] asserts the invariants in
//! every run. [`scenario`] holds the named scenarios behind `shardik simulate`. [`sharding`]
//! runs the sharding cores on every node of such a world, with clients and a checker of its own.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod checker;
pub mod ddata;
mod node_id;
pub mod sbr_lease;
pub mod scenario;
pub mod sharding;
pub mod split_brain;
pub mod wire_size;
pub mod world;

pub use checker::Checker;
pub use scenario::{Outcome, Scenario};
pub use world::{NodeId, TimelineEntry, World, WorldConfig};
