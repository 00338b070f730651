//! Reliable delivery in the simulation: how it is set up ([`ReliableSpec`]), and the few
//! conventions the producer model, the consumer side of the durable entities and the checker
//! share (what a producer is called, how an offer travels in a queued message).
//!
//! The decisions themselves are the core's ([`Producer`](shardik_core::delivery::Producer),
//! [`ConsumerMarks`](shardik_core::delivery::ConsumerMarks)), driven here as the runtime
//! drives them: the simulator only decides when things happen and what is lost.

use std::time::Duration;

use bytes::Bytes;
use shardik_core::delivery::{ProducerSettings, StreamId};

use crate::world::NodeId;

/// Reliable delivery to the simulated durable entities (of kind 0): which node slots run a
/// producer, how producers and consumers are paced, and what the traffic offers.
#[derive(Clone, Debug)]
pub struct ReliableSpec {
    /// Node slots whose application runs a producer (one producer id per slot, kept across
    /// the slot's incarnations, with its durable queue in the simulated store).
    pub producers: Vec<NodeId>,
    /// How the producers pace and bound themselves (timers scaled down like the rest of the
    /// simulated settings).
    pub producer: ProducerSettings,
    /// How many messages past the last one processed an entity lets a producer send.
    pub consumer_window: u64,
    /// How long an entity keeps the mark of a producer it no longer hears from. Far beyond
    /// anything a simulated message can be delayed by (see
    /// [`ConsumerMarks::expire`](shardik_core::delivery::ConsumerMarks::expire)).
    pub mark_retention: Duration,
    /// Producers address entities [`entity_name`](super::traffic::entity_name)`(0..entities)`.
    pub entities: usize,
    /// At each traffic burst, the chance that a producer's application offers one message.
    pub offer_chance: f64,
    /// Offers an application may have waiting for its producer (the runtime's request
    /// channel); it offers nothing more meanwhile.
    pub max_waiting: usize,
    /// A deliberate fault, only for the checker's own test: the consumer answers `Confirmed`
    /// as soon as it sends its write, before the store committed it. Never set elsewhere.
    pub mutation_confirm_before_write: bool,
}

impl ReliableSpec {
    /// Producers on `producers`, paced for a simulated run: a window of 4 messages per entity
    /// (so flow control holds producers back), 40 unconfirmed at most, resends after 1 s
    /// growing to 4 s, streams forgotten after 10 s of quiet (so new streams open within a
    /// run), marks kept for an hour.
    pub fn new(producers: Vec<NodeId>) -> Self {
        ReliableSpec {
            producers,
            producer: ProducerSettings {
                window: 4,
                max_unconfirmed: 40,
                resend_min: Duration::from_secs(1),
                resend_max: Duration::from_secs(4),
                idle_after: Duration::from_secs(10),
            },
            consumer_window: 4,
            mark_retention: Duration::from_secs(3600),
            entities: 40,
            offer_chance: 0.5,
            max_waiting: 16,
            mutation_confirm_before_write: false,
        }
    }

    /// Whether slot `id` runs a producer.
    pub fn runs_producer(&self, id: NodeId) -> bool {
        self.producers.contains(&id)
    }
}

/// Offer ids start here, far above the ledger's message ids, so that an event names either a
/// plain client message or an offer, never both.
pub const OFFER_BASE: u64 = 1 << 40;

/// The producer id of node slot `slot`.
pub fn producer_id(slot: NodeId) -> String {
    format!("producer-{slot}")
}

/// What a reliable message's events carry as their sender: the producer (the slot, above
/// every plain sender's incarnation uid in practice, and fixed across incarnations).
pub fn producer_code(slot: NodeId) -> u64 {
    u64::MAX - slot as u64
}

/// The events' sender sequence number of the message `seq` of `stream`: grows with the stream
/// and then the sequence number, so a producer's messages to one entity persist in increasing
/// order exactly when they are processed in the order they were accepted (a producer's streams
/// to one entity only grow, see [`StreamId`]).
pub fn stream_order(stream: StreamId, seq: u64) -> u64 {
    debug_assert!(stream.epoch < 1 << 16 && stream.number < 1 << 24 && seq < 1 << 24);
    (stream.epoch << 48) | (stream.number << 24) | seq
}

/// An offer as the durable queue stores it: its id.
pub fn encode_offer(offer: u64) -> Bytes {
    Bytes::copy_from_slice(&offer.to_le_bytes())
}

/// An offer from its stored form.
pub fn decode_offer(payload: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(payload.try_into().ok()?))
}

/// Whether offer `offer` is a command that persists no event (its entity writes only its mark,
/// as a reliably delivered command that changes nothing still records that it was processed).
pub fn persists_nothing(offer: u64) -> bool {
    offer.is_multiple_of(7)
}
