//! The network sharding traffic travels on: per ordered pair of nodes a FIFO stream (like one
//! TCP connection), with the world's latency, never lost at random.
//!
//! Whether a message is lost is decided when it arrives, by the world: the link was cut by a
//! partition, or either end is no longer the incarnation it was sent between. A message that
//! reaches a paused node waits in that node's inbox and is handled after the pause, in order.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use shardik_core::Instant;
use shardik_core::membership::UniqueAddress;

use super::messages::Wire;
use crate::world::NodeId;

/// One message in flight.
#[derive(Clone, Debug)]
pub struct Packet {
    /// Sending slot.
    pub from_id: NodeId,
    /// Sending incarnation.
    pub from: UniqueAddress,
    /// Receiving slot.
    pub to_id: NodeId,
    /// Receiving incarnation.
    pub to: UniqueAddress,
    /// Entity kind.
    pub kind: usize,
    /// The message.
    pub wire: Wire,
}

/// Totals over the run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Messages handed to their receiver.
    pub delivered: u64,
    /// Protocol messages lost (partition, dead or replaced end).
    pub lost_protocol: u64,
    /// Client messages lost on the way (partition, dead or replaced end).
    pub lost_user: u64,
}

/// Messages in flight and inboxes of paused nodes.
#[derive(Default)]
pub struct Net {
    queue: BTreeMap<(Instant, u64), Packet>,
    seq: u64,
    /// Arrival time of the last message per ordered pair of slots: later ones never overtake.
    last_arrival: BTreeMap<(NodeId, NodeId), Instant>,
    /// Messages that reached a paused node, in arrival order.
    held: BTreeMap<NodeId, VecDeque<Packet>>,
    stats: NetStats,
}

impl Net {
    /// Puts `p` on the wire at `now` with a latency drawn from `latency`.
    pub fn send(
        &mut self,
        now: Instant,
        latency: (Duration, Duration),
        rng: &mut ChaCha8Rng,
        p: Packet,
    ) {
        let (lo, hi) = latency;
        let delay = if hi > lo {
            lo + Duration::from_nanos(rng.random_range(0..(hi - lo).as_nanos() as u64))
        } else {
            lo
        };
        let last = self
            .last_arrival
            .entry((p.from_id, p.to_id))
            .or_insert(Instant::ZERO);
        let at = (now + delay).max(*last);
        *last = at;
        self.seq += 1;
        self.queue.insert((at, self.seq), p);
    }

    /// When the next message arrives.
    pub fn next_at(&self) -> Option<Instant> {
        self.queue.first_key_value().map(|((t, _), _)| *t)
    }

    /// The next message arriving at or before `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<Packet> {
        let entry = self.queue.first_entry()?;
        if entry.key().0 > now {
            return None;
        }
        Some(entry.remove())
    }

    /// Keeps `p` for its paused receiver.
    pub fn hold(&mut self, p: Packet) {
        self.held.entry(p.to_id).or_default().push_back(p);
    }

    /// Whether messages wait for node `id`.
    pub fn has_held(&self, id: NodeId) -> bool {
        self.held.get(&id).is_some_and(|q| !q.is_empty())
    }

    /// Takes everything that waited for node `id`, oldest first.
    pub fn take_held(&mut self, id: NodeId) -> VecDeque<Packet> {
        self.held.remove(&id).unwrap_or_default()
    }

    /// Counts `p` as lost.
    pub fn lost(&mut self, p: &Packet) {
        match p.wire {
            Wire::Proto(_) | Wire::Reply(_) => self.stats.lost_protocol += 1,
            Wire::User(_) => self.stats.lost_user += 1,
        }
    }

    /// Counts one message as handed over.
    pub fn delivered(&mut self) {
        self.stats.delivered += 1;
    }

    /// Totals so far.
    pub fn stats(&self) -> &NetStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use shardik_core::membership::Address;
    use shardik_core::sharding::Protocol;

    fn packet(from: NodeId, to: NodeId, n: u32) -> Packet {
        let ua = |i: NodeId| UniqueAddress::new(Address::new("n", i as u16), i as u64);
        Packet {
            from_id: from,
            from: ua(from),
            to_id: to,
            to: ua(to),
            kind: n as usize,
            wire: Wire::Proto(Protocol::RegisterAck),
        }
    }

    #[test]
    fn messages_between_two_nodes_never_overtake_each_other() {
        let mut net = Net::default();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let latency = (Duration::from_millis(1), Duration::from_millis(30));
        for n in 0..200u32 {
            let now = Instant::from_nanos(u64::from(n) * 100_000);
            net.send(now, latency, &mut rng, packet(1, 2, n));
            net.send(now, latency, &mut rng, packet(2, 1, n));
        }
        let mut seen: BTreeMap<NodeId, Vec<usize>> = BTreeMap::new();
        while let Some(p) = net.pop_due(Instant::from_millis(1_000)) {
            seen.entry(p.from_id).or_default().push(p.kind);
        }
        for order in seen.values() {
            assert_eq!(order.len(), 200);
            assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}");
        }
    }
}
