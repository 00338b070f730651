//! What a reliable kind's entities are sent: a reliably delivered command with its place in
//! its producer's stream and where to answer, or a plain command from an ordinary tell or
//! ask.

use std::sync::Arc;

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

/// Reliably delivered commands: a run of consecutive commands of one stream (one, or several
/// sent together so that they cost one message and one answer), with the producer, the
/// stream and the first one's sequence number, and where the entity's verdict goes.
#[derive(Serialize, Deserialize)]
pub struct SequencedCommand<C> {
    /// The producer's id.
    pub(crate) producer: Arc<str>,
    /// Its stream to this entity.
    pub(crate) stream: StreamId,
    /// The first command's sequence number in the stream; the others follow it by one.
    pub(crate) seq: u64,
    /// Whether the entity may start following the stream at the first command.
    pub(crate) first: bool,
    /// The commands, in sequence order.
    pub(crate) commands: Vec<C>,
    /// Where the entity answers, once, for the run (confirmed, a gap, or "send the first
    /// again").
    pub(crate) reply_to: ReplyTo<ConsumerReply>,
}

impl<C> std::fmt::Debug for SequencedCommand<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequencedCommand")
            .field("producer", &self.producer)
            .field("stream", &self.stream)
            .field("seq", &self.seq)
            .field("first", &self.first)
            .field("commands", &self.commands.len())
            .finish_non_exhaustive()
    }
}
