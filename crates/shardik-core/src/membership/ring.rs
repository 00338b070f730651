//! Who heartbeats whom: the heartbeat ring and the sender-side state (digest §4.7).
//!
//! Every node sends heartbeats to a few ring neighbours rather than to everyone, so the
//! heartbeat load stays constant per node as the cluster grows. The ring order depends only
//! on the node identities, so every node computes the same neighbours for everyone: a node
//! can tell who is supposed to be watching whom without any coordination.

use std::collections::BTreeSet;

use super::address::UniqueAddress;
use super::phi::{FailureDetectorRegistry, PhiAccrualConfig};
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
mod tests {
    use super::*;
    use crate::membership::address::Address;
    use proptest::prelude::*;
    use std::time::Duration;

    /// `host` with uid `uid`; with small uids the ring hash is the uid, so the ring order is
    /// the uid order (as in the reference specs).
    fn n(host: &str, uid: u64) -> UniqueAddress {
        UniqueAddress::new(Address::new(host, 7355), uid)
    }

    fn set(nodes: &[&UniqueAddress]) -> BTreeSet<UniqueAddress> {
        nodes.iter().map(|n| (*n).clone()).collect()
    }

    struct Six {
        aa: UniqueAddress,
        bb: UniqueAddress,
        cc: UniqueAddress,
        dd: UniqueAddress,
        ee: UniqueAddress,
        ff: UniqueAddress,
    }

    fn six() -> Six {
        Six {
            aa: n("aa", 1),
            bb: n("bb", 2),
            cc: n("cc", 3),
            dd: n("dd", 4),
            ee: n("ee", 5),
            ff: n("ff", 6),
        }
    }

    impl Six {
        fn all(&self) -> BTreeSet<UniqueAddress> {
            set(&[&self.aa, &self.bb, &self.cc, &self.dd, &self.ee, &self.ff])
        }
    }

    /// HeartbeatNodeRingSpec "pick specified number of nodes as receivers".
    #[test]
    fn picks_monitored_by_receivers() {
        let s = six();
        let ring = HeartbeatRing::new(s.cc.clone(), s.all(), BTreeSet::new(), 3);
        assert_eq!(ring.my_receivers(), &ring.receivers(&s.cc));
        assert_eq!(ring.my_receivers(), &set(&[&s.dd, &s.ee, &s.ff]));
        for node in s.all() {
            let r = ring.receivers(&node);
            assert_eq!(r.len(), 3);
            assert!(!r.contains(&node));
        }
        assert_eq!(ring.receivers(&s.ff), set(&[&s.aa, &s.bb, &s.cc]), "wraps");
    }

    /// HeartbeatNodeRingSpec "pick specified number of nodes + unreachable as receivers".
    #[test]
    fn picks_unreachable_without_counting_them() {
        let s = six();
        let ring = HeartbeatRing::new(s.cc.clone(), s.all(), set(&[&s.aa, &s.dd, &s.ee]), 3);
        assert_eq!(ring.my_receivers(), &ring.receivers(&s.cc));
        // unreachable ee skipped
        assert_eq!(ring.receivers(&s.aa), set(&[&s.bb, &s.cc, &s.dd, &s.ff]));
        // unreachable aa skipped
        assert_eq!(ring.receivers(&s.bb), set(&[&s.cc, &s.dd, &s.ee, &s.ff]));
        assert_eq!(ring.receivers(&s.cc), set(&[&s.dd, &s.ee, &s.ff, &s.bb]));
        assert_eq!(
            ring.receivers(&s.dd),
            set(&[&s.ee, &s.ff, &s.aa, &s.bb, &s.cc])
        );
        assert_eq!(ring.receivers(&s.ee), set(&[&s.ff, &s.aa, &s.bb, &s.cc]));
        // unreachable dd and ee skipped
        assert_eq!(ring.receivers(&s.ff), set(&[&s.aa, &s.bb, &s.cc]));
    }

    /// "pick all except own as receivers when less than total number of nodes", "pick none
    /// when alone".
    #[test]
    fn small_rings_use_everyone_else() {
        let s = six();
        let expected = set(&[&s.aa, &s.bb, &s.dd, &s.ee, &s.ff]);
        for k in [5, 6, 7] {
            let ring = HeartbeatRing::new(s.cc.clone(), s.all(), BTreeSet::new(), k);
            assert_eq!(ring.my_receivers(), &expected, "monitored_by {k}");
        }
        let alone = HeartbeatRing::new(s.cc.clone(), BTreeSet::new(), BTreeSet::new(), 3);
        assert!(alone.my_receivers().is_empty());
        assert_eq!(alone.nodes(), set(&[&s.cc]), "self always in the ring");
    }

    /// Issue #16624 (LeaderDowningAllOtherNodesSpec shape): when a run of consecutive nodes
    /// crashes, the nearest live node before them still heartbeats up to `monitored_by` of
    /// them, so they keep being watched; beyond that cap further dead nodes are skipped.
    #[test]
    fn crashed_run_is_still_watched_up_to_the_cap() {
        let nodes: Vec<_> = (1..=8).map(|i| n(&format!("n{i}"), i)).collect();
        let all: BTreeSet<_> = nodes.iter().cloned().collect();
        let crashed: BTreeSet<_> = nodes[1..6].iter().cloned().collect(); // n2..n6
        let ring = HeartbeatRing::new(nodes[0].clone(), all, crashed, 2);
        // n1 takes n2, n3 (unreachable, uncounted, cap 2 reached), skips n4..n6, then the
        // reachable n7, n8.
        assert_eq!(
            ring.my_receivers(),
            &set(&[&nodes[1], &nodes[2], &nodes[6], &nodes[7]])
        );
        // Without unreachable flags n1 would only watch n2, n3.
        let plain = HeartbeatRing::new(
            nodes[0].clone(),
            nodes.iter().cloned().collect(),
            BTreeSet::new(),
            2,
        );
        assert_eq!(plain.my_receivers(), &set(&[&nodes[1], &nodes[2]]));
    }

    #[test]
    fn ring_order_is_by_uid_hash_not_address() {
        let a = n("a", 30);
        let b = n("b", 10);
        let c = n("c", 20);
        let ring = HeartbeatRing::new(a.clone(), set(&[&b, &c]), BTreeSet::new(), 1);
        let order: Vec<_> = ring.ring_order().cloned().collect();
        assert_eq!(order, vec![b.clone(), c.clone(), a.clone()]);
        assert_eq!(ring.my_receivers(), &set(&[&b]));
    }

    // ---- ClusterHeartbeatSenderStateSpec ----------------------------------------------

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    fn empty_state(me: &UniqueAddress) -> HeartbeatSenderState {
        HeartbeatSenderState::new(me.clone(), 3, PhiAccrualConfig::default())
    }

    /// The reference spec flips a stub detector to "unavailable". With a real phi detector
    /// the same happens by letting time pass: a node last heard at 0 is unavailable a minute
    /// later, while one heard at `LATER` is fresh. `LATER + 1 s` is when we look.
    const LATER: u64 = 60_000;
    const LOOK: u64 = LATER + 1_000;

    #[test]
    fn sender_state_initial_sets() {
        let s = six();
        let mut st = empty_state(&s.aa);
        assert!(st.active_receivers().is_empty());
        st.init(BTreeSet::new(), BTreeSet::new());
        assert!(st.active_receivers().is_empty());
        st.init(set(&[&s.aa, &s.bb, &s.cc]), BTreeSet::new());
        assert_eq!(
            st.active_receivers(),
            set(&[&s.bb, &s.cc]),
            "init with self"
        );
        let mut st = empty_state(&s.aa);
        st.init(set(&[&s.bb, &s.cc]), BTreeSet::new());
        assert_eq!(
            st.active_receivers(),
            set(&[&s.bb, &s.cc]),
            "init without self"
        );
        assert!(st.contains(&s.aa));
    }

    #[test]
    fn sender_state_add_remove_unreachable() {
        let s = six();
        let mut st = empty_state(&s.aa);
        st.add_member(&s.bb, t(0));
        st.add_member(&s.cc, t(0));
        assert_eq!(st.active_receivers(), set(&[&s.bb, &s.cc]));
        st.unreachable_member(&s.bb, t(0));
        assert_eq!(
            st.active_receivers(),
            set(&[&s.bb, &s.cc]),
            "also when unreachable"
        );
        st.remove_member(&s.bb, t(0));
        assert_eq!(st.active_receivers(), set(&[&s.cc]), "not removed members");

        // "use specified number of members": sorted by uid hash.
        let mut st = empty_state(&s.aa);
        for m in [&s.cc, &s.dd, &s.bb, &s.ee] {
            st.add_member(m, t(0));
        }
        assert_eq!(st.active_receivers(), set(&[&s.bb, &s.cc, &s.dd]));
        // "+ unreachable"
        st.unreachable_member(&s.cc, t(0));
        assert_eq!(st.active_receivers(), set(&[&s.bb, &s.cc, &s.dd, &s.ee]));
        st.reachable_member(&s.cc, t(0));
        assert_eq!(st.active_receivers(), set(&[&s.bb, &s.cc, &s.dd]));
    }

    /// "update failure detector in active set".
    #[test]
    fn sender_state_feeds_fd_only_for_active_receivers() {
        let s = six();
        let mut st = empty_state(&s.aa);
        for m in [&s.bb, &s.cc, &s.dd] {
            st.add_member(m, t(0));
        }
        for m in [&s.bb, &s.cc, &s.dd, &s.ee] {
            st.heartbeat_rsp(m, t(0));
        }
        assert!(st.fd().is_monitoring(&s.bb));
        assert!(st.fd().is_monitoring(&s.cc));
        assert!(st.fd().is_monitoring(&s.dd));
        assert!(!st.fd().is_monitoring(&s.ee));
    }

    /// "continue to use unreachable".
    #[test]
    fn sender_state_keeps_unavailable_old_receiver() {
        let s = six();
        let mut st = empty_state(&s.aa);
        for m in [&s.cc, &s.dd, &s.ee] {
            st.add_member(m, t(0));
        }
        st.heartbeat_rsp(&s.ee, t(0));
        st.heartbeat_rsp(&s.cc, t(LATER));
        st.heartbeat_rsp(&s.dd, t(LATER));
        assert!(!st.fd().is_available(&s.ee, t(LOOK)));
        st.add_member(&s.bb, t(LOOK));
        assert_eq!(st.ring().my_receivers(), &set(&[&s.bb, &s.cc, &s.dd]));
        assert_eq!(
            st.active_receivers(),
            set(&[&s.bb, &s.cc, &s.dd, &s.ee]),
            "ee still heartbeated"
        );
        assert_eq!(st.old_receivers_now_unreachable(), &set(&[&s.ee]));
    }

    /// A receiver that drops out while available is simply forgotten by the detector.
    #[test]
    fn sender_state_forgets_available_old_receiver() {
        let s = six();
        let mut st = empty_state(&s.aa);
        for m in [&s.cc, &s.dd, &s.ee] {
            st.add_member(m, t(0));
            st.heartbeat_rsp(m, t(LATER));
        }
        st.add_member(&s.bb, t(LOOK));
        assert_eq!(st.active_receivers(), set(&[&s.bb, &s.cc, &s.dd]));
        assert!(!st.fd().is_monitoring(&s.ee));
    }

    /// "remove unreachable when coming back".
    #[test]
    fn sender_state_drops_old_receiver_when_it_answers() {
        let s = six();
        let mut st = empty_state(&s.aa);
        for m in [&s.cc, &s.dd, &s.ee] {
            st.add_member(m, t(0));
        }
        st.heartbeat_rsp(&s.cc, t(LATER));
        st.heartbeat_rsp(&s.dd, t(0));
        st.heartbeat_rsp(&s.ee, t(0));
        st.add_member(&s.bb, t(LOOK));
        assert_eq!(st.active_receivers(), set(&[&s.bb, &s.cc, &s.dd, &s.ee]));
        // dd was a receiver all along (unavailable, but still in my receivers).
        assert_eq!(st.old_receivers_now_unreachable(), &set(&[&s.ee]));
        for m in [&s.bb, &s.cc, &s.dd, &s.ee] {
            st.heartbeat_rsp(m, t(LOOK));
        }
        assert_eq!(st.active_receivers(), set(&[&s.bb, &s.cc, &s.dd]));
        assert!(!st.fd().is_monitoring(&s.ee));
        assert!(st.fd().is_monitoring(&s.dd));
        assert!(st.old_receivers_now_unreachable().is_empty());
    }

    /// "remove unreachable when member removed".
    #[test]
    fn sender_state_drops_old_receiver_when_removed() {
        let s = six();
        let mut st = empty_state(&s.aa);
        for m in [&s.cc, &s.dd, &s.ee] {
            st.add_member(m, t(0));
        }
        st.heartbeat_rsp(&s.cc, t(0));
        st.heartbeat_rsp(&s.dd, t(LATER));
        st.heartbeat_rsp(&s.ee, t(0));
        st.add_member(&s.bb, t(LOOK));
        st.heartbeat_rsp(&s.bb, t(LOOK));
        assert_eq!(st.active_receivers(), set(&[&s.bb, &s.cc, &s.dd, &s.ee]));
        st.remove_member(&s.cc, t(LOOK));
        st.remove_member(&s.ee, t(LOOK));
        assert_eq!(st.active_receivers(), set(&[&s.bb, &s.dd]));
        assert!(!st.fd().is_monitoring(&s.cc));
        assert!(!st.fd().is_monitoring(&s.ee));
    }

    /// InitialHeartbeatSpec: a receiver that never answers still gets a detector, which then
    /// reports it unavailable; non-receivers and already-monitored nodes are left alone.
    #[test]
    fn expected_first_heartbeat_starts_detection() {
        let s = six();
        let mut st = empty_state(&s.aa);
        st.add_member(&s.bb, t(0));
        assert!(
            !st.expected_first_heartbeat(&s.ff, t(1_000)),
            "not a receiver"
        );
        assert!(st.expected_first_heartbeat(&s.bb, t(1_000)));
        assert!(st.fd().is_monitoring(&s.bb));
        assert!(
            !st.expected_first_heartbeat(&s.bb, t(2_000)),
            "already monitoring"
        );
        assert_eq!(
            st.fd().get(&s.bb).and_then(|d| d.last_heartbeat()),
            Some(t(1_000))
        );
        assert!(
            !st.fd()
                .is_available(&s.bb, t(1_000) + Duration::from_secs(10))
        );
    }

    // ---- properties -------------------------------------------------------------------

    fn arb_ring() -> impl Strategy<Value = (Vec<UniqueAddress>, Vec<bool>, usize)> {
        (2usize..40, 1usize..10).prop_flat_map(|(size, k)| {
            (
                prop::collection::btree_set(any::<u64>(), size),
                prop::collection::vec(any::<bool>(), size),
                Just(k),
            )
                .prop_map(|(uids, flags, k)| {
                    let nodes = uids
                        .into_iter()
                        .enumerate()
                        .map(|(i, uid)| n(&format!("h{i}"), uid))
                        .collect();
                    (nodes, flags, k)
                })
        })
    }

    proptest! {
        /// Without unreachable nodes every node is monitored by exactly min(k, n − 1)
        /// others. With some unreachable, every reachable sender picks exactly
        /// min(k, r − 1) reachable receivers and every reachable node is monitored by at
        /// least min(k, r − 1) reachable others (r = reachable nodes). The result does not
        /// depend on which node computes it.
        #[test]
        fn every_node_is_monitored_by_enough_reachable_others((nodes, flags, k) in arb_ring()) {
            let all: BTreeSet<_> = nodes.iter().cloned().collect();
            let size = all.len();
            let plain = HeartbeatRing::new(nodes[0].clone(), all.clone(), BTreeSet::new(), k);
            for target in &all {
                let watchers = all.iter().filter(|s| plain.receivers(s).contains(target)).count();
                prop_assert_eq!(watchers, k.min(size - 1));
            }

            let unreachable: BTreeSet<_> = nodes
                .iter()
                .zip(&flags)
                .filter(|(_, f)| **f)
                .map(|(n, _)| n.clone())
                .collect();
            let reachable: BTreeSet<_> = all.difference(&unreachable).cloned().collect();
            let r = reachable.len();
            let ring = HeartbeatRing::new(nodes[0].clone(), all.clone(), unreachable.clone(), k);
            let other = HeartbeatRing::new(nodes[size - 1].clone(), all.clone(), unreachable, k);
            for sender in &all {
                let rec = ring.receivers(sender);
                prop_assert_eq!(&rec, &other.receivers(sender));
                prop_assert!(!rec.contains(sender));
                if reachable.contains(sender) {
                    let reachable_rec = rec.intersection(&reachable).count();
                    prop_assert_eq!(reachable_rec, k.min(r - 1));
                }
            }
            for target in &reachable {
                let watchers = reachable
                    .iter()
                    .filter(|s| ring.receivers(s).contains(target))
                    .count();
                prop_assert!(watchers >= k.min(r - 1));
            }
        }

        /// ClusterHeartbeatSenderStateSpec "behave correctly for random operations", with
        /// time standing in for the stub detector: the detector only ever monitors active
        /// receivers, old receivers stay in the ring, heartbeat responses never change the
        /// ring, and removed nodes are fully forgotten.
        #[test]
        fn sender_state_random_operations(
            ops in prop::collection::vec((0u8..6, 0usize..12, 0u64..3_000), 1..300),
            me in 0usize..12,
        ) {
            let nodes: Vec<_> = (0..12u64).map(|i| n(&format!("n{i}"), i * 7 + 1)).collect();
            let me = nodes[me].clone();
            let mut st = empty_state(&me);
            let mut now = Instant::ZERO;
            for (op, idx, dt) in ops {
                now += Duration::from_millis(dt);
                let node = &nodes[idx];
                if *node == me {
                    continue;
                }
                match op {
                    0 => {
                        if !st.contains(node) {
                            let old = st.old_receivers_now_unreachable().clone();
                            st.add_member(node, now);
                            prop_assert!(old.is_subset(&st.active_receivers()));
                            prop_assert!(!st.fd().is_monitoring(node));
                        }
                    }
                    1 => {
                        if st.contains(node) {
                            st.remove_member(node, now);
                            prop_assert!(!st.fd().is_monitoring(node));
                            prop_assert!(!st.active_receivers().contains(node));
                        }
                    }
                    2 => st.unreachable_member(node, now),
                    3 => st.reachable_member(node, now),
                    4 => {
                        let before = st.ring().my_receivers().clone();
                        let was_old = st.old_receivers_now_unreachable().contains(node);
                        let was_active = st.active_receivers().contains(node);
                        st.heartbeat_rsp(node, now);
                        prop_assert_eq!(st.ring().my_receivers(), &before);
                        prop_assert!(!st.old_receivers_now_unreachable().contains(node));
                        if was_active {
                            prop_assert!(st.fd().is_available(node, now));
                        }
                        if was_old && !before.contains(node) {
                            prop_assert!(!st.fd().is_monitoring(node));
                        }
                        if before.contains(node) {
                            prop_assert!(st.fd().is_monitoring(node));
                        }
                    }
                    _ => {
                        st.expected_first_heartbeat(node, now);
                    }
                }
                let active = st.active_receivers();
                for (m, _) in st.fd().iter() {
                    prop_assert!(active.contains(m), "fd monitors non-receiver {:?}", m);
                }
                prop_assert!(st.old_receivers_now_unreachable().is_subset(&st.ring().nodes()));
            }
        }
    }
}
