//! What travels in reliable delivery: the header that names a message (its producer, its
//! stream and its place in it), and what the entity answers.

use serde::{Deserialize, Serialize};

/// One stream of one producer to one entity. Streams are ordered: a producer's epoch grows
/// with every start of the producer, and `number` with every stream it opens within an epoch,
/// so a stream opened later always compares greater. That is what lets a consumer tell a new
/// stream (which starts again at sequence number 1) from late copies of an old one, instead of
/// taking the new stream's messages for duplicates of the old one's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct StreamId {
    /// The producer's incarnation: stored and incremented at each start with a durable queue,
    /// derived from the wall clock at start without one.
    pub epoch: u64,
    /// The stream's number within the epoch.
    pub number: u64,
}

/// The delivery header of one message, as the consumer judges it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sequenced<'a> {
    /// The producer's id, unique in the cluster.
    pub producer: &'a str,
    /// The stream the message belongs to.
    pub stream: StreamId,
    /// Its sequence number in the stream, from 1.
    pub seq: u64,
    /// Whether the producer marks it as the first it sends on this stream since it (re)started
    /// sending: the consumer may start following the stream there.
    pub first: bool,
}

/// What an entity answers about a stream, after judging one of its messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConsumerReply {
    /// Processed up to `confirmed`; send up to `up_to`.
    Confirmed {
        /// The highest sequence number processed.
        confirmed: u64,
        /// The highest sequence number the entity is ready for.
        up_to: u64,
    },
    /// Processed up to `expected - 1`; what came after was dropped: send again from there.
    Gap {
        /// The next sequence number the entity can process.
        expected: u64,
    },
    /// The entity does not follow this stream: send its oldest unconfirmed message marked
    /// first.
    NeedFirst,
}
