//! Simulated clients: a seeded traffic generator, and the ledger of every message sent,
//! delivered, dropped (reported by a region) or lost on the wire.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use shardik_core::Instant;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{DropReason, EntityId};

use crate::world::NodeId;

/// What the traffic generator sends.
#[derive(Clone, Debug)]
pub struct TrafficConfig {
    /// Time between bursts.
    pub interval: Duration,
    /// Messages per burst.
    pub per_tick: usize,
    /// Entities per kind: [`entity_name`]`(0..entities)`.
    pub entities: usize,
    /// Kinds to send to (each message picks one at random).
    pub kinds: Vec<usize>,
    /// Nodes whose clients send (`None`: any node that is Up and not leaving). A node of the
    /// list that is not Up, or is dead, paused or leaving, is skipped.
    pub senders: Option<Vec<NodeId>>,
}

impl TrafficConfig {
    /// `per_tick` messages every `interval` to `entities` entities of kind 0, from any node.
    pub fn new(interval: Duration, per_tick: usize, entities: usize) -> Self {
        TrafficConfig {
            interval,
            per_tick,
            entities,
            kinds: vec![0],
            senders: None,
        }
    }
}

/// The name of the `i`-th simulated entity.
pub fn entity_name(i: usize) -> String {
    format!("e-{i}")
}

/// One message a client sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SentRecord {
    /// When.
    pub at: Instant,
    /// Entity kind.
    pub kind: usize,
    /// The node it was routed through.
    pub via: NodeId,
    /// The sending incarnation.
    pub sender: UniqueAddress,
    /// The entity.
    pub entity: EntityId,
    /// Its number in the sender's stream to the entity.
    pub seq: u64,
}

/// Every client message and what became of it.
#[derive(Default)]
pub struct Ledger {
    seqs: BTreeMap<(usize, UniqueAddress, EntityId), u64>,
    sent: BTreeMap<u64, SentRecord>,
    delivered: BTreeMap<u64, Vec<(Instant, UniqueAddress)>>,
    dropped: BTreeMap<u64, Vec<(Instant, DropReason)>>,
    lost: BTreeSet<u64>,
    lost_with_node: BTreeSet<u64>,
    /// Durable entities only: commands acknowledged (committed, answered).
    acked: BTreeSet<u64>,
    /// Durable entities only: commands answered with a failure.
    failed: BTreeSet<u64>,
    /// Reliably delivered messages their entity answered without processing them (a
    /// duplicate, a gap, a stream it does not follow) or left unanswered (stale).
    answered: BTreeSet<u64>,
}

impl Ledger {
    /// Records a new message and returns its id and sequence number.
    pub(crate) fn send(
        &mut self,
        at: Instant,
        kind: usize,
        via: NodeId,
        sender: &UniqueAddress,
        entity: &EntityId,
    ) -> (u64, u64) {
        let seq = self
            .seqs
            .entry((kind, sender.clone(), entity.clone()))
            .or_insert(0);
        *seq += 1;
        let id = self.sent.len() as u64 + 1;
        self.sent.insert(
            id,
            SentRecord {
                at,
                kind,
                via,
                sender: sender.clone(),
                entity: entity.clone(),
                seq: *seq,
            },
        );
        (id, *seq)
    }

    pub(crate) fn delivered(&mut self, id: u64, at: Instant, node: &UniqueAddress) {
        self.delivered
            .entry(id)
            .or_default()
            .push((at, node.clone()));
    }

    pub(crate) fn dropped(&mut self, id: u64, at: Instant, reason: DropReason) {
        self.dropped.entry(id).or_default().push((at, reason));
    }

    pub(crate) fn lost(&mut self, id: u64) {
        self.lost.insert(id);
    }

    pub(crate) fn record_lost_with_node(&mut self, id: u64) {
        self.lost_with_node.insert(id);
    }

    pub(crate) fn acked(&mut self, id: u64) {
        self.acked.insert(id);
    }

    pub(crate) fn failed(&mut self, id: u64) {
        self.failed.insert(id);
    }

    pub(crate) fn answered(&mut self, id: u64) {
        self.answered.insert(id);
    }

    /// Whether message `id` was answered with a failure (by a durable entity, or by an entity's
    /// queue that was dropped).
    pub fn is_failed(&self, id: u64) -> bool {
        self.failed.contains(&id)
    }

    /// Whether a durable entity acknowledged message `id`.
    pub fn is_acked(&self, id: u64) -> bool {
        self.acked.contains(&id)
    }

    /// How many commands durable entities acknowledged.
    pub fn acked_count(&self) -> usize {
        self.acked.len()
    }

    /// How many commands durable entities answered with a failure.
    pub fn failed_count(&self) -> usize {
        self.failed.len()
    }

    /// Durable entities only: messages delivered to their entity that were neither
    /// acknowledged, nor answered with a failure or a verdict, nor lost with their node. After quiescence
    /// this must be empty: a command nobody answered vanished.
    pub fn unanswered_commands(&self) -> Vec<u64> {
        self.delivered
            .keys()
            .filter(|id| {
                !self.acked.contains(id)
                    && !self.failed.contains(id)
                    && !self.answered.contains(id)
                    && !self.lost_with_node.contains(id)
            })
            .copied()
            .collect()
    }

    /// Every message sent, by id.
    pub fn sent(&self) -> &BTreeMap<u64, SentRecord> {
        &self.sent
    }

    /// How many messages were sent.
    pub fn sent_count(&self) -> usize {
        self.sent.len()
    }

    /// How many distinct messages were delivered.
    pub fn delivered_count(&self) -> usize {
        self.delivered.len()
    }

    /// How many distinct messages a region reported dropped.
    pub fn dropped_count(&self) -> usize {
        self.dropped.len()
    }

    /// Whether message `id` was delivered.
    pub fn is_delivered(&self, id: u64) -> bool {
        self.delivered.contains_key(&id)
    }

    /// Whether a region reported message `id` dropped.
    pub fn is_dropped(&self, id: u64) -> bool {
        self.dropped.contains_key(&id)
    }

    /// Where and when message `id` was delivered (more than once would be a bug).
    pub fn deliveries(&self, id: u64) -> &[(Instant, UniqueAddress)] {
        self.delivered.get(&id).map_or(&[], Vec::as_slice)
    }

    /// Drops reported, counted by reason.
    pub fn drops_by_reason(&self) -> BTreeMap<DropReason, usize> {
        let mut out = BTreeMap::new();
        for reasons in self.dropped.values() {
            for (_, r) in reasons {
                *out.entry(*r).or_default() += 1;
            }
        }
        out
    }

    /// Messages delivered more than once, or both delivered and reported dropped.
    pub fn duplicates(&self) -> Vec<u64> {
        self.sent
            .keys()
            .filter(|id| {
                let d = self.delivered.get(id).map_or(0, Vec::len);
                let x = self.dropped.get(id).map_or(0, Vec::len);
                d + x > 1
            })
            .copied()
            .collect()
    }

    /// Messages seen to be lost on the wire (a cut link or a dead receiver).
    pub fn lost_on_wire(&self) -> &BTreeSet<u64> {
        &self.lost
    }

    /// Messages a node died holding (buffered in its region).
    pub fn lost_with_node(&self) -> &BTreeSet<u64> {
        &self.lost_with_node
    }

    /// Messages with no known fate: not delivered, not reported dropped, not lost on the wire
    /// nor with a dead node. After quiescence this must be empty; anything here vanished.
    pub fn vanished(&self) -> Vec<u64> {
        self.unaccounted()
            .into_iter()
            .filter(|id| !self.lost.contains(id) && !self.lost_with_node.contains(id))
            .collect()
    }

    /// Messages neither delivered nor reported dropped: lost on the wire, in a dead node's
    /// buffers, or (a bug) silently.
    pub fn unaccounted(&self) -> Vec<u64> {
        self.sent
            .keys()
            .filter(|id| !self.delivered.contains_key(id) && !self.dropped.contains_key(id))
            .copied()
            .collect()
    }
}
