//! The replicator: distributed data ([`crate::ddata`]) replicated across the nodes of a
//! cluster, with a consistency chosen per call, as Akka's Distributed Data `Replicator`.
//!
//! Each node runs one [`Replicator`], an I/O-free core: the runtime and the simulator feed it
//! calls, peers' messages, the membership view and the time, and carry out the effects it
//! returns. A key ([`Key<T>`]) names one value of one [`DataType`]. An update changes the
//! local replica at once and is then written to as many replicas as its
//! [`WriteConsistency`] asks; a read asks as many as its [`ReadConsistency`] asks and merges
//! what they hold. Between calls, replicas converge three ways: deltas of local changes go to
//! a few peers each round, digests of buckets of keys are compared with one random peer each
//! gossip round (and differing buckets exchanged whole), and writes with a consistency above
//! local reach their replicas directly.

mod aggregate;
mod consistency;
mod data;
mod deltas;
mod envelope;
mod erased;
mod gossip;
mod messages;
mod outcome;
mod peers;
mod pruning;
mod pruning_round;
mod replica;
mod settings;
mod store;

pub use consistency::{ReadConsistency, WriteConsistency};
pub use data::{DataType, Element, Key, ReplicaId};
pub use envelope::DataEnvelope;
pub use erased::{AnyData, AnyDelta, DeltaOf, TypeMismatch};
pub use messages::{Payload, ReplicatorMessage, Stored};
pub use outcome::{
    ConsistencyNotReached, DeleteError, DropReason, GetError, OpId, Outcome, ReplicatorEffect,
    SubscriberId, UpdateError,
};
pub use peers::Peer;
pub use pruning::{PruningMarkers, PruningState};
pub use replica::Replicator;
pub use settings::{DeliberateFaults, ReplicatorSettings};

#[cfg(test)]
mod tests;
