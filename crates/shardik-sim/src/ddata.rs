//! Replicated data, simulated whole: every node of a membership [`World`](crate::world::World)
//! runs the real replicator core ([`Replicator`](shardik_core::replicator::Replicator)) fed
//! from its own membership view, over a network with the world's latency and partitions;
//! clients add, count and read at random consistencies, and a [`DataChecker`] watches every
//! answer and the replicas' states.
//!
//! * [`world`]: [`DataWorld`], the world with replicators, its network and clients;
//! * [`checker`]: the invariants;
//! * [`scenario`]: the random scenario behind `shardik simulate --scenario distributed-data`.

pub mod checker;
pub mod scenario;
pub mod world;

pub use checker::{DataChecker, DataStats};
pub use scenario::{DataOutcome, run_distributed_data};
pub use world::DataWorld;
