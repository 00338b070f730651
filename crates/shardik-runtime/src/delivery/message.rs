//! What a reliable kind's entities are sent: a reliably delivered command with its place in
//! its producer's stream and where to answer, or a plain command from an ordinary tell or
//! ask.

use serde::{Deserialize, Serialize};
use shardik_core::delivery::{ConsumerReply, StreamId};

use crate::sharding::ReplyTo;

/// The command of a reliable kind (an [`EntityKind::reliable`] kind): what its entities
/// receive.
///
/// [`EntityKind::reliable`]: crate::sharding::EntityKind::reliable
#[derive(Serialize, Deserialize)]
pub enum Delivery<C> {
    /// A command sent by a [`ReliableProducer`](super::ReliableProducer), processed once per
    /// sequence number and confirmed to the producer.
    Sequenced(SequencedCommand<C>),
    /// A command sent as any other (a tell or an ask): handled as it comes, untracked.
    Plain(C),
}

impl<C> From<C> for Delivery<C> {
    fn from(cmd: C) -> Self {
        Delivery::Plain(cmd)
    }
}

/// A reliably delivered command: the producer, the stream and sequence number, and where the
/// entity's verdict goes.
#[derive(Serialize, Deserialize)]
pub struct SequencedCommand<C> {
    /// The producer's id.
    pub(crate) producer: String,
    /// Its stream to this entity.
    pub(crate) stream: StreamId,
    /// The command's sequence number in the stream.
    pub(crate) seq: u64,
    /// Whether the entity may start following the stream here.
    pub(crate) first: bool,
    /// The command.
    pub(crate) command: C,
    /// Where the entity answers (confirmed, a gap, or "send the first again").
    pub(crate) reply_to: ReplyTo<ConsumerReply>,
}

impl<C> std::fmt::Debug for SequencedCommand<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequencedCommand")
            .field("producer", &self.producer)
            .field("stream", &self.stream)
            .field("seq", &self.seq)
            .field("first", &self.first)
            .finish_non_exhaustive()
    }
}
