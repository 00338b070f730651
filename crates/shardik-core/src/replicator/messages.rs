//! What replicators say to one another, and what a key holds.

use std::sync::Arc;

use super::envelope::DataEnvelope;
use super::erased::AnyDelta;

/// What a key holds: a value, or the mark that it was deleted (for good: a deleted key is
/// never used again, and the mark wins every merge).
#[derive(Clone, Debug)]
pub enum Stored {
    /// The key's value, with its pruning markers.
    Value(DataEnvelope),
    /// The key was deleted.
    Deleted,
}

/// What a write carries: the change alone, or the whole state.
#[derive(Clone, Debug)]
pub enum Payload {
    /// The change's delta.
    Delta(Box<dyn AnyDelta>),
    /// The key's whole state (or its deletion).
    Full(Stored),
}

/// A message between the replicators of two nodes.
#[derive(Clone, Debug)]
pub enum ReplicatorMessage {
    /// Merge this into the key, and acknowledge.
    Write {
        /// The key.
        key: Arc<str>,
        /// What to merge.
        payload: Payload,
        /// The writer's operation, echoed in the answer.
        op: u64,
    },
    /// The write was merged.
    WriteAck {
        /// The writer's operation.
        op: u64,
    },
    /// The write could not be merged: the key holds another type here.
    WriteNack {
        /// The writer's operation.
        op: u64,
    },
    /// Send the key's state.
    Read {
        /// The key.
        key: Arc<str>,
        /// The reader's operation, echoed in the answer.
        op: u64,
    },
    /// The key's state here; `None` if the key is unknown here.
    ReadResult {
        /// The reader's operation.
        op: u64,
        /// The state.
        stored: Option<Stored>,
    },
    /// Deltas of local changes, to merge; no answer.
    Deltas {
        /// Each key's changes since the last deltas sent to this node, merged.
        deltas: Vec<(Arc<str>, Box<dyn AnyDelta>)>,
    },
    /// The digests of the sender's non-empty buckets of keys (see `store`): the receiver
    /// answers, for the buckets that differ, with its own entries of them.
    Status {
        /// (bucket, digest) of each non-empty bucket, in bucket order.
        digests: Vec<(u16, u64)>,
    },
    /// Whole entries of some buckets, to merge.
    Gossip {
        /// Buckets whose every entry on the sender is here.
        buckets: Vec<u16>,
        /// The entries.
        entries: Vec<(Arc<str>, Stored)>,
        /// Whether the receiver should answer with its own entries of these buckets that
        /// differ from what it got.
        send_back: bool,
        /// Whether more buckets differed than fit: the receiver should send its status again
        /// at once instead of at its next gossip round.
        more: bool,
    },
}
