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
