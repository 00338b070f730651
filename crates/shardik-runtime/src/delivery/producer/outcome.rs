//! What a producer answers: where an accepted command stands, or why it was not accepted.

use shardik_core::delivery::StreamId;
use shardik_persistence::StoreError;

/// Where an accepted command stands in its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The stream to its entity.
    pub stream: StreamId,
    /// Its sequence number in the stream.
    pub seq: u64,
}

/// Why a producer could not start, or did not accept a command.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProducerError {
    /// The producer id is empty.
    #[error("a reliable producer needs a non-empty id")]
    EmptyId,
    /// The producer has stopped (it was stopped, or its durable queue failed).
    #[error("the reliable producer {0:?} has stopped")]
    Stopped(String),
    /// The durable queue's store failed: the command may or may not be stored (and then it
    /// is sent when the producer starts again).
    #[error("the durable queue of producer {producer:?} failed: {error}")]
    Queue {
        /// The producer.
        producer: String,
        /// What the store said.
        error: StoreError,
    },
    /// A command does not encode for the durable queue, or a stored one does not decode.
    #[error("producer {producer:?}: {why}")]
    Codec {
        /// The producer.
        producer: String,
        /// What failed.
        why: String,
    },
}
