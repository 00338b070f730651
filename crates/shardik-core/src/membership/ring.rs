//! Who heartbeats whom: the heartbeat ring and the sender-side state.
//!
//! Every node sends heartbeats to a few ring neighbours rather than to everyone, so the
//! heartbeat load stays constant per node as the cluster grows. The ring order depends only
//! on the node identities, so every node computes the same neighbours for everyone: a node
//! can tell who is supposed to be watching whom without any coordination.

use std::collections::BTreeSet;

use super::phi::{FailureDetectorRegistry, PhiAccrualConfig};
use crate::address::UniqueAddress;
use crate::time::Instant;

/// Ring position: the uid-based hash first, so that neighbours on the ring are not
/// neighbours by address (often the same host or rack); the full address breaks ties.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct RingKey(i32, UniqueAddress);

impl RingKey {
    fn of(node: &UniqueAddress) -> Self {
        RingKey(node.ring_hash(), node.clone())
    }
}

/// The nodes of the data centre arranged in a ring, and who monitors whom.
///
/// Holds all same-DC members (any status, including Joining) and the subset currently
/// unreachable. The node itself is always part of the ring.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatRing {
    self_addr: UniqueAddress,
    unreachable: BTreeSet<UniqueAddress>,
    monitored_by_nr_of_members: usize,
    // The nodes in ring order. The only copy of the membership here: every node holds a ring
    // of the whole data centre, so a second set would double that memory in large clusters.
    ring: BTreeSet<RingKey>,
    // Recomputed on every change: asked for on every heartbeat tick.
    my_receivers: BTreeSet<UniqueAddress>,
}

impl HeartbeatRing {
    /// A ring of `nodes` (self is added if missing) where `unreachable` nodes are flagged,
    /// each node being monitored by `monitored_by_nr_of_members` others (default 9).
    pub fn new(
        self_addr: UniqueAddress,
        nodes: BTreeSet<UniqueAddress>,
        unreachable: BTreeSet<UniqueAddress>,
        monitored_by_nr_of_members: usize,
    ) -> Self {
        let mut ring: BTreeSet<RingKey> = nodes.iter().map(RingKey::of).collect();
        ring.insert(RingKey::of(&self_addr));
        let mut r = HeartbeatRing {
            self_addr,
            unreachable,
            monitored_by_nr_of_members,
            ring,
            my_receivers: BTreeSet::new(),
        };
        r.refresh();
        r
    }

    fn refresh(&mut self) {
        self.my_receivers = self.receivers(&self.self_addr);
    }

    /// This node.
    pub fn self_addr(&self) -> &UniqueAddress {
        &self.self_addr
    }

    /// All nodes of the ring, self included, in address order.
    pub fn nodes(&self) -> BTreeSet<UniqueAddress> {
        self.ring.iter().map(|RingKey(_, n)| n.clone()).collect()
    }

    /// Nodes flagged unreachable.
    pub fn unreachable(&self) -> &BTreeSet<UniqueAddress> {
        &self.unreachable
    }

    /// How many reachable nodes monitor each node.
    pub fn monitored_by_nr_of_members(&self) -> usize {
        self.monitored_by_nr_of_members
    }

    /// The nodes in ring order (by uid hash, then address).
    pub fn ring_order(&self) -> impl Iterator<Item = &UniqueAddress> {
        self.ring.iter().map(|k| &k.1)
    }

    /// Whether `node` is part of the ring.
    pub fn contains(&self, node: &UniqueAddress) -> bool {
        self.ring.contains(&RingKey::of(node))
    }

    /// The nodes `sender` sends heartbeats to.
    ///
    /// If the ring has at most `monitored_by + 1` nodes, everyone else. Otherwise walk
    /// clockwise from `sender` (wrapping) until `monitored_by` reachable nodes are taken.
    /// Unreachable nodes met on the way are taken too without being counted, as long as
    /// fewer than `monitored_by` nodes have been taken in total; after that they are
    /// skipped. Taking them keeps a crashed node watched (so the leader can still learn it
    /// is unreachable and remove it once downed) even when all its usual watchers crashed
    /// at the same time (issue #16624); the cap keeps a mass crash from making every node
    /// heartbeat every dead one.
    pub fn receivers(&self, sender: &UniqueAddress) -> BTreeSet<UniqueAddress> {
        if self.monitored_by_nr_of_members >= self.ring.len().saturating_sub(1) {
            return self
                .ring
                .iter()
                .map(|RingKey(_, n)| n)
                .filter(|n| *n != sender)
                .cloned()
                .collect();
        }
        let key = RingKey::of(sender);
        let after = self
            .ring
            .range((std::ops::Bound::Excluded(&key), std::ops::Bound::Unbounded));
        let before = self.ring.range(..&key);
        let mut remaining = self.monitored_by_nr_of_members;
        let mut taken = BTreeSet::new();
        for RingKey(_, node) in after.chain(before) {
            if remaining == 0 {
                break;
            }
            if self.unreachable.contains(node) {
                if taken.len() < self.monitored_by_nr_of_members {
                    taken.insert(node.clone());
                }
            } else {
                taken.insert(node.clone());
                remaining -= 1;
            }
        }
        taken
    }

    /// The nodes this node sends heartbeats to.
    pub fn my_receivers(&self) -> &BTreeSet<UniqueAddress> {
        &self.my_receivers
    }

    /// Adds `node` (no-op if present).
    pub fn add(&mut self, node: &UniqueAddress) {
        if self.ring.insert(RingKey::of(node)) {
            self.refresh();
        }
    }

    /// Removes `node` and its unreachable flag. Self cannot be removed.
    pub fn remove(&mut self, node: &UniqueAddress) {
        if *node == self.self_addr {
            return;
        }
        let was_node = self.ring.remove(&RingKey::of(node));
        let was_unreachable = self.unreachable.remove(node);
        if was_node || was_unreachable {
            self.refresh();
        }
    }

    /// Flags `node` unreachable (`true`) or reachable (`false`).
    pub fn set_unreachable(&mut self, node: &UniqueAddress, unreachable: bool) {
        let changed = if unreachable {
            self.unreachable.insert(node.clone())
        } else {
            self.unreachable.remove(node)
        };
        if changed {
            self.refresh();
        }
    }
}

/// The heartbeat sender's state: whom to heartbeat, and the failure detector fed by the
/// responses.
///
/// Mutations that can change the receiver set take `now`, because a receiver that drops out
/// of the ring is treated by whether the failure detector considers it available at that
/// moment.
#[derive(Clone, Debug, PartialEq)]
pub struct HeartbeatSenderState {
    ring: HeartbeatRing,
    old_receivers_now_unreachable: BTreeSet<UniqueAddress>,
    fd: FailureDetectorRegistry,
}

impl HeartbeatSenderState {
    /// A state where only self is known.
    pub fn new(
        self_addr: UniqueAddress,
        monitored_by_nr_of_members: usize,
        fd_config: PhiAccrualConfig,
    ) -> Self {
        HeartbeatSenderState {
            ring: HeartbeatRing::new(
                self_addr,
                BTreeSet::new(),
                BTreeSet::new(),
                monitored_by_nr_of_members,
            ),
            old_receivers_now_unreachable: BTreeSet::new(),
            fd: FailureDetectorRegistry::new(fd_config),
        }
    }

    /// Sets the ring to `nodes` (self added) with `unreachable` flagged, e.g. from the first
    /// cluster state. Like the reference, this replaces the ring without the receiver
    /// bookkeeping of [`add_member`](Self::add_member) (it is meant for the initial state).
    pub fn init(&mut self, nodes: BTreeSet<UniqueAddress>, unreachable: BTreeSet<UniqueAddress>) {
        self.ring = HeartbeatRing::new(
            self.ring.self_addr.clone(),
            nodes,
            unreachable,
            self.ring.monitored_by_nr_of_members,
        );
    }

    /// The ring.
    pub fn ring(&self) -> &HeartbeatRing {
        &self.ring
    }

    /// Former receivers that left the receiver set while the failure detector considered
    /// them unavailable; they keep getting heartbeats until they answer.
    pub fn old_receivers_now_unreachable(&self) -> &BTreeSet<UniqueAddress> {
        &self.old_receivers_now_unreachable
    }

    /// The failure detector registry fed by heartbeat responses.
    pub fn fd(&self) -> &FailureDetectorRegistry {
        &self.fd
    }

    /// Mutable access to the failure detector (e.g. to reset it).
    pub fn fd_mut(&mut self) -> &mut FailureDetectorRegistry {
        &mut self.fd
    }

    /// Nodes to send heartbeats to: my receivers plus old receivers now unreachable.
    pub fn active_receivers(&self) -> BTreeSet<UniqueAddress> {
        self.ring
            .my_receivers()
            .union(&self.old_receivers_now_unreachable)
            .cloned()
            .collect()
    }

    /// Whether `node` is in the ring.
    pub fn contains(&self, node: &UniqueAddress) -> bool {
        self.ring.contains(node)
    }

    /// A member joined the data centre.
    pub fn add_member(&mut self, node: &UniqueAddress, now: Instant) {
        self.membership_change(now, |r| r.add(node));
    }

    /// A member left the data centre: it is no longer heartbeated or monitored at all.
    pub fn remove_member(&mut self, node: &UniqueAddress, now: Instant) {
        self.membership_change(now, |r| r.remove(node));
        self.fd.remove(node);
        self.old_receivers_now_unreachable.remove(node);
    }

    /// A member became unreachable (as the cluster sees it).
    pub fn unreachable_member(&mut self, node: &UniqueAddress, now: Instant) {
        self.membership_change(now, |r| r.set_unreachable(node, true));
    }

    /// A member became reachable again.
    pub fn reachable_member(&mut self, node: &UniqueAddress, now: Instant) {
        self.membership_change(now, |r| r.set_unreachable(node, false));
    }

    /// Applies a ring change. Receivers that drop out are forgotten by the failure detector
    /// if it considers them available; otherwise they are kept as old receivers so that they
    /// can still be seen to come back (stopping heartbeats to an unavailable node would make
    /// it unavailable forever).
    fn membership_change(&mut self, now: Instant, change: impl FnOnce(&mut HeartbeatRing)) {
        let old_receivers = self.ring.my_receivers.clone();
        change(&mut self.ring);
        for removed in old_receivers.difference(&self.ring.my_receivers) {
            if self.fd.is_available(removed, now) {
                self.fd.remove(removed);
            } else {
                self.old_receivers_now_unreachable.insert(removed.clone());
            }
        }
    }

    /// A heartbeat response from `from` arrived at `now`.
    ///
    /// Only active receivers are tracked. An old receiver now unreachable that answers is
    /// reachable again and leaves that set; if it is no longer one of my receivers, its
    /// detector is dropped too, as nobody needs this node to watch it any more.
    pub fn heartbeat_rsp(&mut self, from: &UniqueAddress, now: Instant) {
        if !self.ring.my_receivers.contains(from)
            && !self.old_receivers_now_unreachable.contains(from)
        {
            return;
        }
        self.fd.heartbeat(from, now);
        if self.old_receivers_now_unreachable.remove(from) && !self.ring.my_receivers.contains(from)
        {
            self.fd.remove(from);
        }
    }

    /// The `expected-response-after` timer for the first heartbeat sent to `from` fired.
    ///
    /// If `from` is still an active receiver that never answered, inject a synthetic
    /// heartbeat so that its failure detector starts: otherwise a node that is dead from the
    /// start would never be reported unreachable. Returns whether one was injected.
    pub fn expected_first_heartbeat(&mut self, from: &UniqueAddress, now: Instant) -> bool {
        let active = self.ring.my_receivers.contains(from)
            || self.old_receivers_now_unreachable.contains(from);
        if active && !self.fd.is_monitoring(from) {
            self.fd.heartbeat(from, now);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests;
