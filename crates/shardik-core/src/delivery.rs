//! Reliable delivery through sharding: the I/O-free decisions of the producer and consumer
//! sides, which the runtime and the simulator both drive.
//!
//! A producer numbers the messages it sends to each entity in *streams*: one stream per
//! (producer, entity), sequence numbers from 1, each stream named by a [`StreamId`] that only
//! grows. The consumer side, inside the entity, keeps per producer the highest sequence number
//! it processed of the newest stream it saw (a [`Mark`]) and judges each arriving message
//! against it ([`ConsumerMarks::judge`]): deliver it, confirm it again as a duplicate, ask for
//! what is missing, or drop it as stale. A durable entity writes its marks with its own write,
//! so a message is processed once even across crashes; an in-memory one keeps them in memory,
//! which makes delivery to it at least once.

mod consumer;
mod outbox;
mod producer;
mod stream;

pub use consumer::{ConsumerMarks, Mark, Receipt, Verdict};
pub use outbox::{Outbox, OutboxStep};
pub use producer::{OfferRefused, Producer, ProducerEffect, ProducerSettings};
pub use stream::{ConsumerReply, Sequenced, StreamId};
