//! Distributed data: replicated data types (CRDTs) that any replica may change on its own and
//! that converge when replicas exchange their states, in whatever order and however often.
//!
//! This module holds the data types and their laws; replication between nodes builds on it.
//! Every type implements [`ReplicatedData`]: `merge` is commutative, associative and
//! idempotent, so two replicas that have merged the same states hold the same value. Types
//! that keep state per replica (the counters) also implement [`RemovedReplicaPruning`]: the
//! state of a replica removed from the cluster can be folded into a surviving one, and from
//! then on stripped from every state merged in, so that it never comes back.

mod counter;
mod dots;
mod flag;
mod gset;
mod kernel;
mod lww_register;
mod maps;
mod ormap;
mod orset;
mod replicated;

pub use counter::{GCounter, PNCounter};
pub use flag::Flag;
pub use gset::GSet;
pub use kernel::DotDelta;
pub use lww_register::LwwRegister;
pub use maps::{LwwMap, OrMultiMap, PNCounterMap};
pub use ormap::OrMap;
pub use orset::OrSet;
pub use replicated::{DeltaReplicatedData, RemovedReplicaPruning, ReplicatedData};

#[cfg(test)]
mod tests;
