//! The membership network: partitions and one-way blocks, messages sent with latency and loss,
//! delivered in order of arrival (held while their receiver is paused), handshake replies for
//! messages sent to an alias, and connections refused by the machine of a node that is gone.

use std::time::Duration;

use rand::Rng;
use shardik_core::membership::{Address, Input, Message};

use super::World;
use super::in_flight::{Delivery, Identification};
use crate::node_id::NodeId;
use crate::wire_size;

impl World {
    /// Splits the network into the given groups; nodes in no group form one more group.
    pub fn partition(&mut self, groups: &[&[NodeId]]) {
        for n in &mut self.nodes {
            n.group = u32::MAX;
        }
        for (g, members) in groups.iter().enumerate() {
            for id in *members {
                self.nodes[*id].group = g as u32;
            }
        }
        self.note(None, format!("partition {groups:?}"));
    }

    /// Blocks messages from `from` to `to` only.
    pub fn block_oneway(&mut self, from: NodeId, to: NodeId) {
        self.oneway_blocked.insert((from, to));
        self.note(None, format!("block node-{from:05} -> node-{to:05}"));
    }

    /// Heals every partition and one-way block.
    pub fn heal(&mut self) {
        for n in &mut self.nodes {
            n.group = 0;
        }
        self.oneway_blocked.clear();
        self.note(None, "heal".to_string());
    }

    /// Whether a message from `from` reaches `to`: one partition group, no one-way block.
    pub(super) fn linked(&self, from: NodeId, to: NodeId) -> bool {
        self.nodes[from].group == self.nodes[to].group && !self.oneway_blocked.contains(&(from, to))
    }

    /// A message leaves node `from` for `to`: counted by kind and size, lost at the configured
    /// rate, or queued to arrive after a latency drawn from the world's range (twice that for
    /// the first message of a connection to an alias, which waits for the handshake reply).
    pub(super) fn send(&mut self, from: NodeId, to: Address, msg: Message) {
        let bytes = wire_size::message(&msg) as u64;
        match msg {
            Message::Heartbeat { .. } | Message::HeartbeatRsp { .. } => {
                self.stats.heartbeat_bytes += bytes
            }
            Message::GossipStatus { .. } | Message::GossipEnvelope { .. } => {
                self.stats.gossip_bytes += bytes;
                self.stats.gossip_messages += 1;
            }
            Message::Welcome { .. } => self.stats.gossip_bytes += bytes,
            _ => {}
        }
        let (lo, hi) = self.cfg.latency;
        let latency = if hi > lo {
            lo + Duration::from_nanos(self.rng.random_range(0..(hi - lo).as_nanos() as u64))
        } else {
            lo
        };
        if self.cfg.loss > 0.0 && self.rng.random::<f64>() < self.cfg.loss {
            self.stats.lost += 1;
            return;
        }
        let mut at = self.now + latency;
        if let Some(&target) = self.aliases.get(&to) {
            // A new connection's handshake: its reply tells the sender who answered, and the
            // message follows it (so any answer comes after the identification).
            let node = self.nodes[target].core.self_node().clone();
            let key = (from, self.nodes[from].incarnation, to.clone(), node.clone());
            if self.nodes[target].alive
                && self.linked(from, target)
                && self.linked(target, from)
                && !self.identified.contains(&key)
            {
                self.identified.insert(key);
                self.seq += 1;
                self.identifications.insert(
                    (self.now + latency, self.seq),
                    Identification {
                        to: from,
                        incarnation: self.nodes[from].incarnation,
                        dialled: to.clone(),
                        node,
                    },
                );
                at += latency;
            }
        }
        self.seq += 1;
        self.queue.insert(
            (at, self.seq),
            Delivery {
                from,
                sender: self.nodes[from].core.self_node().clone(),
                to,
                msg,
                arrived_at: None,
            },
        );
    }

    /// Tells the sender of `d` that the connection to its destination was refused (nothing
    /// listens there: the process crashed or stopped), as the runtime's lanes report it
    /// (`Input::PeerRefused`). Lost if the sending incarnation is gone or paused (a paused
    /// process dials nothing).
    fn refuse(&mut self, d: &Delivery) {
        let from = d.from;
        let n = &self.nodes[from];
        if !n.alive
            || n.core.self_node() != &d.sender
            || n.paused_until.is_some_and(|p| p > self.now)
        {
            return;
        }
        let now = self.now;
        let mut out = std::mem::take(&mut self.effects);
        self.nodes[from].core.handle(
            now,
            Input::PeerRefused {
                address: d.to.clone(),
            },
            &mut out,
        );
        self.apply_effects(from, &mut out);
        self.effects = out;
        self.reschedule(from);
        if self.cfg.check_states {
            self.checker
                .check_node(now, from, self.nodes[from].core.membership());
        }
    }

    /// Hands a handshake reply to the node that dialled (lost if that incarnation is gone;
    /// held while it is paused).
    pub(super) fn identify(&mut self, i: Identification) {
        let n = &self.nodes[i.to];
        if !n.alive || n.incarnation != i.incarnation {
            return;
        }
        if let Some(p) = n.paused_until.filter(|p| *p > self.now) {
            self.seq += 1;
            self.identifications.insert((p, self.seq), i);
            return;
        }
        self.note(
            Some(i.to),
            format!("{} answered at {}", i.node.address.host, i.dialled),
        );
        let now = self.now;
        let mut out = std::mem::take(&mut self.effects);
        self.nodes[i.to].core.handle(
            now,
            Input::PeerIdentified {
                dialled: i.dialled,
                node: i.node,
            },
            &mut out,
        );
        self.apply_effects(i.to, &mut out);
        self.effects = out;
        self.reschedule(i.to);
        if self.cfg.check_states {
            self.checker
                .check_node(now, i.to, self.nodes[i.to].core.membership());
        }
    }

    /// A message arrives: lost to an unknown address, a partition or a dead receiver (whose
    /// machine may refuse the connection), held while its receiver is paused, handed to the
    /// receiver's core otherwise.
    pub(super) fn deliver(&mut self, d: Delivery) {
        let Some(&to) = self
            .by_address
            .get(&d.to)
            .or_else(|| self.aliases.get(&d.to))
        else {
            self.stats.lost += 1;
            return;
        };
        if self.cfg.refuse_connections
            && !self.nodes[to].alive
            && self.linked(d.from, to)
            && self.linked(to, d.from)
        {
            // The process is gone but its machine answers: the connection is refused.
            self.stats.lost += 1;
            self.refuse(&d);
            return;
        }
        if !self.nodes[to].alive || !self.linked(d.from, to) {
            self.stats.lost += 1;
            return;
        }
        if let Some(p) = self.nodes[to].paused_until {
            if p > self.now {
                // Arrived while frozen: processed when the pause ends, stamped with its arrival.
                let mut d = d;
                d.arrived_at.get_or_insert(self.now);
                self.seq += 1;
                self.queue.insert((p, self.seq), d);
                return;
            }
            self.nodes[to].paused_until = None;
        }
        self.stats.delivered += 1;
        let received_at = d.arrived_at.unwrap_or(self.now);
        let now = self.now;
        let mut out = std::mem::take(&mut self.effects);
        self.nodes[to].core.handle(
            now,
            Input::Message {
                msg: d.msg,
                from: d.sender,
                received_at,
            },
            &mut out,
        );
        self.apply_effects(to, &mut out);
        self.effects = out;
        self.reschedule(to);
        if self.cfg.check_states {
            self.checker
                .check_node(now, to, self.nodes[to].core.membership());
        }
    }
}
