//! Reliable delivery through sharding (Akka's `ShardingProducerController` and
//! `ShardingConsumerController`): a [`ReliableProducer`] numbers the commands handed to it per
//! entity and sends each until its entity confirms it; the entities of a
//! [reliable kind](crate::sharding::EntityKind::reliable) process each once, in order, and
//! confirm it once what it did is durable. Durable entities record what they processed in
//! their own writes, which makes delivery to them exactly once; other entities keep it in
//! memory, which makes it at least once ([`Guarantee`]).
//!
//! The decisions on both sides are the core's (`shardik_core::delivery`), which the simulator
//! drives too; these files carry them out: the consumer inside the entity (`consumer`), the
//! producer's task (`producer`), and what travels between them (`message`).

mod consumer;
mod message;
mod producer;

pub use consumer::{ConsumerSettings, Guarantee, Reliable, ReliableConsumer};
pub use message::{Delivery, SequencedCommand};
pub use producer::{Accepted, ProducerError, ProducerOptions, ReliableProducer};
pub use shardik_core::delivery::{ProducerSettings, StreamId};
