//! A small network of replicators for tests: messages queue and are delivered in order, links
//! can be cut both ways, time moves in steps.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use crate::Instant;
use crate::address::{Address, UniqueAddress};
use crate::membership::MemberStatus;
use crate::replicator::{
    DropReason, OpId, Outcome, Peer, Replicator, ReplicatorEffect, ReplicatorMessage,
    ReplicatorSettings, Stored, SubscriberId,
};

pub(super) struct Net {
    pub(super) nodes: Vec<Replicator>,
    pub(super) now: Instant,
    queue: VecDeque<(usize, usize, ReplicatorMessage)>,
    cut: BTreeSet<(usize, usize)>,
    members: usize,
    pub(super) replies: BTreeMap<(usize, OpId), Outcome>,
    pub(super) changes: Vec<(usize, SubscriberId, String, Stored)>,
    pub(super) drops: Vec<(usize, DropReason)>,
    /// Messages delivered, by kind, for tests that count them.
    pub(super) delivered: BTreeMap<&'static str, usize>,
    /// The most entry bytes (keys and encoded states) one gossip message carried.
    pub(super) largest_gossip: usize,
}

pub(super) fn address(i: usize) -> UniqueAddress {
    UniqueAddress::new(Address::new(format!("n{i}"), 2552), i as u64 + 1)
}

impl Net {
    pub(super) fn new(size: usize, settings: ReplicatorSettings) -> Net {
        let now = Instant::from_millis(1_000);
        let nodes = (0..size)
            .map(|i| {
                Replicator::new(
                    address(i),
                    settings.clone(),
                    7 + i as u64,
                    now,
                    now.as_millis(),
                )
            })
            .collect();
        let mut net = Net {
            nodes,
            now,
            queue: VecDeque::new(),
            cut: BTreeSet::new(),
            members: size,
            replies: BTreeMap::new(),
            changes: Vec::new(),
            drops: Vec::new(),
            delivered: BTreeMap::new(),
            largest_gossip: 0,
        };
        net.set_members(size);
        net
    }

    /// Every node sees the first `members` nodes as Up (and reachable unless cut off).
    pub(super) fn set_members(&mut self, members: usize) {
        self.members = members;
        self.update_reachability();
    }

    /// Cuts the links between `side` and every other node (messages on them are lost), and
    /// each side's failure detectors mark the other side unreachable.
    pub(super) fn isolate(&mut self, side: &[usize]) {
        for &a in side {
            for b in 0..self.nodes.len() {
                if !side.contains(&b) {
                    self.cut.insert((a, b));
                    self.cut.insert((b, a));
                }
            }
        }
        self.update_reachability();
    }

    pub(super) fn heal(&mut self) {
        self.cut.clear();
        self.update_reachability();
    }

    fn update_reachability(&mut self) {
        let members = self.members;
        for (i, node) in self.nodes.iter_mut().enumerate() {
            node.set_peers((0..members).map(|j| Peer {
                node: address(j),
                status: MemberStatus::Up,
                reachable: !self.cut.contains(&(i, j)),
            }));
        }
    }

    /// Carries out a node's effects.
    pub(super) fn route(&mut self, from: usize, effects: Vec<ReplicatorEffect>) {
        for effect in effects {
            match effect {
                ReplicatorEffect::Send { to, message } => {
                    let to = self
                        .nodes
                        .iter()
                        .position(|n| n.node() == &to)
                        .expect("a node of the network");
                    if !self.cut.contains(&(from, to)) {
                        self.queue.push_back((from, to, message));
                    }
                }
                ReplicatorEffect::Reply { op, outcome } => {
                    self.replies.insert((from, op), outcome);
                }
                ReplicatorEffect::Changed {
                    subscriber,
                    key,
                    stored,
                } => self
                    .changes
                    .push((from, subscriber, key.to_string(), stored)),
                ReplicatorEffect::Dropped { reason, .. } => self.drops.push((from, reason)),
            }
        }
    }

    /// Delivers every queued message, and those their handling sends.
    pub(super) fn deliver(&mut self) {
        while let Some((from, to, message)) = self.queue.pop_front() {
            *self.delivered.entry(kind(&message)).or_default() += 1;
            if let ReplicatorMessage::Gossip { entries, .. } = &message {
                let bytes = entries
                    .iter()
                    .map(|(key, stored)| match stored {
                        Stored::Value(envelope) => key.len() + envelope.encode().len(),
                        Stored::Deleted => key.len() + 1,
                    })
                    .sum();
                self.largest_gossip = self.largest_gossip.max(bytes);
            }
            let mut out = Vec::new();
            let sender = address(from);
            self.nodes[to].handle_message(self.now, &sender, message, &mut out);
            self.route(to, out);
        }
    }

    /// Moves time forward by `span` in steps of 50 ms, running each node's due work and
    /// delivering what it sends.
    pub(super) fn advance(&mut self, span: Duration) {
        let end = self.now + span;
        while self.now < end {
            self.now += Duration::from_millis(50);
            for i in 0..self.nodes.len() {
                if self.nodes[i].poll_timeout() <= self.now {
                    let mut out = Vec::new();
                    self.nodes[i].handle_timeout(self.now, &mut out);
                    self.route(i, out);
                }
            }
            self.deliver();
        }
    }

    /// Runs `call` on node `i` with the current time, routes its effects, and delivers.
    pub(super) fn call(
        &mut self,
        i: usize,
        call: impl FnOnce(&mut Replicator, Instant, &mut Vec<ReplicatorEffect>) -> OpId,
    ) -> OpId {
        let mut out = Vec::new();
        let op = call(&mut self.nodes[i], self.now, &mut out);
        self.route(i, out);
        self.deliver();
        op
    }

    pub(super) fn take_reply(&mut self, i: usize, op: OpId) -> Option<Outcome> {
        self.replies.remove(&(i, op))
    }
}

fn kind(message: &ReplicatorMessage) -> &'static str {
    match message {
        ReplicatorMessage::Write { .. } => "write",
        ReplicatorMessage::WriteAck { .. } => "write-ack",
        ReplicatorMessage::WriteNack { .. } => "write-nack",
        ReplicatorMessage::Read { .. } => "read",
        ReplicatorMessage::ReadResult { .. } => "read-result",
        ReplicatorMessage::Deltas { .. } => "deltas",
        ReplicatorMessage::Status { .. } => "status",
        ReplicatorMessage::Gossip { .. } => "gossip",
    }
}
