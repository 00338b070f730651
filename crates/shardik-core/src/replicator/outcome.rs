//! What the callers of a replicator hear back, and the other effects it asks of its driver.

use std::sync::Arc;

use crate::address::UniqueAddress;

use super::erased::TypeMismatch;
use super::messages::{ReplicatorMessage, Stored};

/// An operation's number, unique per replicator: the answer to a call carries it.
pub type OpId = u64;

/// Who subscribed to a key's changes, in the driver's numbering.
pub type SubscriberId = u64;

/// A read or a write reached fewer replicas than its consistency asked before its timeout.
/// A write is applied here all the same, and spreads by gossip: this error is not a rollback.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "reached {reached} of the {required} replicas asked for{}",
    if *.applied_locally { " (applied on this node, and it will spread)" } else { "" }
)]
pub struct ConsistencyNotReached {
    /// Replicas required, this one included.
    pub required: usize,
    /// Replicas that answered in time, this one included.
    pub reached: usize,
    /// Whether the change stays applied on this node (every write: yes; a read: no).
    pub applied_locally: bool,
}

/// Why an update failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    /// Not enough replicas acknowledged in time.
    #[error(transparent)]
    NotReplicated(#[from] ConsistencyNotReached),
    /// The key was deleted; it can never be used again.
    #[error("the key was deleted")]
    KeyDeleted,
    /// The key holds another type; nothing was written.
    #[error(transparent)]
    TypeMismatch(#[from] TypeMismatch),
}

/// Why a read failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GetError {
    /// Not enough replicas answered in time.
    #[error(transparent)]
    NotReplicated(#[from] ConsistencyNotReached),
    /// The key was deleted.
    #[error("the key was deleted")]
    KeyDeleted,
}

/// Why a deletion failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeleteError {
    /// Not enough replicas acknowledged in time; the deletion stays and spreads.
    #[error(transparent)]
    NotReplicated(#[from] ConsistencyNotReached),
    /// The key was already deleted.
    #[error("the key was already deleted")]
    AlreadyDeleted,
}

/// The answer to one call.
#[derive(Debug)]
pub enum Outcome {
    /// To an update.
    Update(Result<(), UpdateError>),
    /// To a read: the value, or `None` if no replica asked knows the key.
    Get(Result<Option<Stored>, GetError>),
    /// To a deletion.
    Delete(Result<(), DeleteError>),
}

/// Why a message from a peer was dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The sender is not a member this replicator knows.
    UnknownSender,
    /// An entry for a key of another type here.
    TypeMismatch {
        /// The key.
        key: Arc<str>,
        /// The types.
        mismatch: TypeMismatch,
    },
}

/// What a replicator asks of its driver.
#[derive(Debug)]
pub enum ReplicatorEffect {
    /// Send a message to a peer's replicator.
    Send {
        /// The peer.
        to: UniqueAddress,
        /// The message.
        message: ReplicatorMessage,
    },
    /// Answer a call.
    Reply {
        /// The call.
        op: OpId,
        /// The answer.
        outcome: Outcome,
    },
    /// Tell a subscriber a key changed (or was deleted: `Stored::Deleted`).
    Changed {
        /// The subscriber.
        subscriber: SubscriberId,
        /// The key.
        key: Arc<str>,
        /// Its state now.
        stored: Stored,
    },
    /// A message, or part of one, was dropped: count it and log it.
    Dropped {
        /// Its sender.
        from: UniqueAddress,
        /// Why.
        reason: DropReason,
    },
}
