use super::*;
use crate::membership::address::Address;
use crate::membership::member::NOT_YET_UP;
use MemberStatus::*;
use proptest::prelude::*;

fn n(i: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("n", i), u64::from(i))
}

fn m(i: u16, status: MemberStatus) -> Member {
    Member {
        addr: n(i),
        status,
        up_number: if matches!(status, Joining) {
            NOT_YET_UP
        } else {
            u32::from(i)
        },
        roles: Default::default(),
        app_version: "1".into(),
    }
}

fn g(members: &[(u16, MemberStatus)], seen: &[u16]) -> Gossip {
    let mut g = Gossip::with_members(members.iter().map(|&(i, s)| m(i, s)));
    for s in seen {
        g.see(&n(*s));
    }
    g
}

/// Convergence: Up-like members must have seen the version (or confirmed their exit);
/// unreachable members block it unless Down, Exiting or Joining.
#[test]
fn convergence_table() {
    let none = BTreeSet::new();
    let me = n(1);
    assert!(g(&[(1, Up), (2, Up)], &[1, 2]).convergence(&me, &none));
    assert!(
        !g(&[(1, Up), (2, Up)], &[1]).convergence(&me, &none),
        "Up member has not seen it"
    );
    assert!(
        !g(&[(1, Up), (2, Leaving)], &[1]).convergence(&me, &none),
        "Leaving must see it too"
    );
    assert!(
        g(&[(1, Up), (2, Joining), (3, WeaklyUp)], &[1]).convergence(&me, &none),
        "joiners never block"
    );
    assert!(
        g(&[(1, Up), (2, Down), (3, Exiting)], &[1]).convergence(&me, &none),
        "Down/Exiting need not see"
    );

    let mut unreachable_up = g(&[(1, Up), (2, Up), (3, Up)], &[1, 2, 3]);
    unreachable_up.reachability.unreachable(&n(1), &n(3));
    assert!(
        !unreachable_up.convergence(&me, &none),
        "an unreachable Up member blocks"
    );
    let mut downed = unreachable_up.clone();
    downed.mark_down(&n(3));
    assert!(
        downed.convergence(&me, &none),
        "once Down it no longer blocks"
    );

    let mut unreachable_joiner = g(&[(1, Up), (2, Joining)], &[1]);
    unreachable_joiner.reachability.unreachable(&n(1), &n(2));
    assert!(
        unreachable_joiner.convergence(&me, &none),
        "an unreachable Joining member does not block beside a reachable Up member"
    );
    let mut joiners_only = g(&[(1, Joining), (2, Joining)], &[1]);
    joiners_only.reachability.unreachable(&n(1), &n(2));
    assert!(
        !joiners_only.convergence(&me, &none),
        "among joiners alone an unreachable one blocks: they might move themselves Up"
    );
    let mut up_member_lost = g(&[(1, Joining), (2, Up), (3, Joining)], &[1]);
    up_member_lost.reachability.unreachable(&n(1), &n(2));
    up_member_lost.reachability.unreachable(&n(1), &n(3));
    assert!(
        !up_member_lost.convergence(&me, &none),
        "an unreachable Up member blocks, and no reachable one lets the joiner be"
    );
    let mut unreachable_weakly_up = g(&[(1, Up), (2, WeaklyUp)], &[1]);
    unreachable_weakly_up.reachability.unreachable(&n(1), &n(2));
    assert!(
        !unreachable_weakly_up.convergence(&me, &none),
        "an unreachable WeaklyUp member blocks until downed (it may host shards)"
    );

    let mut seen_by_down = g(&[(1, Up), (2, Up), (3, Down)], &[1, 2]);
    seen_by_down.reachability.unreachable(&n(3), &n(2));
    assert!(
        seen_by_down.convergence(&me, &none),
        "observations of Down members are ignored"
    );

    let mut self_unreachable = g(&[(1, Up), (2, Up)], &[1, 2]);
    self_unreachable.reachability.unreachable(&n(2), &n(1));
    assert!(
        self_unreachable.convergence(&me, &none),
        "self being unreachable does not block self"
    );

    let confirmed: BTreeSet<_> = [n(2)].into_iter().collect();
    let mut exiting = g(&[(1, Up), (2, Exiting)], &[1]);
    exiting.reachability.unreachable(&n(1), &n(2));
    assert!(exiting.convergence(&me, &confirmed));
}

/// The leader is the first reachable Up-like member by address; else the fallback order.
#[test]
fn leader_table() {
    let me = n(5);
    assert_eq!(g(&[(1, Up), (2, Up), (5, Up)], &[]).leader(&me), Some(n(1)));
    assert_eq!(
        g(&[(1, Joining), (2, Up), (5, Up)], &[]).leader(&me),
        Some(n(2)),
        "joiners do not lead"
    );
    assert_eq!(
        g(&[(1, Leaving), (2, Up)], &[]).leader(&me),
        Some(n(1)),
        "leaving members still lead"
    );
    assert_eq!(g(&[(1, Down), (2, Up)], &[]).leader(&me), Some(n(2)));
    assert_eq!(g(&[(1, Exiting), (2, Up)], &[]).leader(&me), Some(n(2)));
    let mut unreachable = g(&[(1, Up), (2, Up), (5, Up)], &[]);
    unreachable.reachability.unreachable(&n(2), &n(1));
    assert_eq!(
        unreachable.leader(&me),
        Some(n(2)),
        "unreachable members do not lead"
    );
    assert_eq!(
        unreachable.leader(&n(1)),
        Some(n(1)),
        "but self always counts for self"
    );
    assert_eq!(
        g(&[(1, Exiting), (2, Joining), (3, WeaklyUp)], &[]).leader(&me),
        Some(n(3)),
        "fallback: WeaklyUp, Joining, Exiting, Down"
    );
    assert_eq!(g(&[(1, Down), (2, Exiting)], &[]).leader(&me), Some(n(2)));
    assert_eq!(Gossip::default().leader(&me), None);
}

#[test]
fn merge_keeps_higher_priority_and_drops_removed() {
    let mut a = g(&[(1, Up), (2, Up), (3, Up)], &[1]);
    a.version.increment(&n(1));
    let mut b = g(&[(1, Up), (2, Leaving), (3, Down)], &[2]);
    b.version.increment(&n(2));
    b.remove(&n(3), 7);
    let merged = a.merge(&b);
    assert_eq!(merged.members.len(), 2, "tombstoned member stays removed");
    assert_eq!(merged.members[&n(2)].status, Leaving);
    assert!(merged.seen.is_empty());
    assert_eq!(merged.version.get(&n(1)), 1);
    assert_eq!(merged.version.get(&n(2)), 1);
    assert!(merged.check_invariants().is_ok());

    // A one-sided member survives whatever its status: without a tombstone, its absence on
    // the other side means that side never knew it, not that it removed it.
    let b = g(&[(1, Up)], &[]);
    for status in [Joining, Exiting, Down] {
        let a = g(&[(1, Up), (4, status)], &[]);
        assert_eq!(a.merge(&b).member(&n(4)).map(|m| m.status), Some(status));
    }
}

/// Simulator seed 4761 (leased sweep), reduced: node 4 joined again through node 1 only, so
/// node 2 never knew it; node 1 downed it; a third node still held it WeaklyUp. Merging
/// node 1's state with node 2's used to drop the one-sided Down member (taken for removed)
/// without a tombstone and prune its clock entry, so the stale WeaklyUp came back.
#[test]
fn a_down_member_the_other_side_never_knew_stays_down_through_merges() {
    let mut stale = g(&[(1, Up), (2, Up), (4, WeaklyUp)], &[]);
    stale.version.increment(&n(4));
    stale.version.increment(&n(1));
    let mut downed = stale.clone();
    downed.mark_down(&n(4));
    downed.version.increment(&n(1));
    let mut never_knew = g(&[(1, Up), (2, Up)], &[]);
    never_knew.version.increment(&n(2));

    let merged = downed.merge(&never_knew);
    assert_eq!(merged.member(&n(4)).map(|m| m.status), Some(Down));
    assert_eq!(merged.version.get(&n(4)), 1, "its clock entry is kept");
    // The stale state, met in any order and through any other merge, cannot revive it.
    let stale_merged = stale.merge(&never_knew);
    assert_eq!(merged.compare(&stale_merged), Ordering::After);
    for other in [&stale, &stale_merged] {
        assert_eq!(
            merged.merge(other).member(&n(4)).map(|m| m.status),
            Some(Down)
        );
        assert_eq!(
            other.merge(&merged).member(&n(4)).map(|m| m.status),
            Some(Down)
        );
    }
    // Once the leader removed it, the tombstone wins over the stale state too.
    let mut removed = merged.clone();
    removed.remove(&n(4), 9);
    removed.version.increment(&n(1));
    assert!(!removed.merge(&stale_merged).has_member(&n(4)));
}

/// A gossip over 5 nodes where each node is a member with some status or tombstoned, and
/// each observer's reachability rows are a function of its version (only the observer ever
/// writes its rows, so two states with equal observer versions agree on them).
fn arb_gossip() -> impl Strategy<Value = Gossip> {
    let statuses = prop::sample::select(vec![Joining, WeaklyUp, Up, Leaving, Exiting, Down]);
    let node = prop_oneof![
        4 => (statuses, 1u32..4).prop_map(Some),
        1 => Just(None),
    ];
    (
        proptest::collection::vec(node, 5),
        proptest::collection::vec(0u64..4, 5),
        proptest::collection::vec(0u64..3, 5),
    )
        .prop_map(|(nodes, clock, reach_versions)| {
            let mut g = Gossip::default();
            for (i, st) in nodes.iter().enumerate() {
                let addr = n(i as u16);
                match st {
                    Some((status, up)) => {
                        let mut mm = m(i as u16, *status);
                        mm.up_number = *up;
                        Arc::make_mut(&mut g.members).insert(addr, mm);
                    }
                    None => {
                        g.tombstones.insert(addr, 1);
                    }
                }
            }
            // An observer's rows at version v are fixed by v; removing a node from the
            // table drops its rows without a version bump, as `Reachability::remove` does.
            let mut observers = BTreeMap::new();
            for (i, v) in reach_versions.iter().enumerate() {
                let obs = n(i as u16);
                if !g.has_member(&obs) || *v == 0 {
                    continue;
                }
                let subjects = (1..=*v)
                    .map(|step| n(((i as u64 + step) % 5) as u16))
                    .filter(|s| g.has_member(s) && *s != obs)
                    .map(|s| (s, ReachabilityStatus::Unreachable))
                    .collect();
                observers.insert(
                    obs,
                    crate::membership::reachability::ObserverRows {
                        version: *v,
                        subjects,
                    },
                );
            }
            g.reachability = Reachability::from_observers(observers);
            g.version = VectorClock::from_entries(
                clock
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (n(i as u16), *c))
                    .filter(|(a, _)| !g.tombstones.contains_key(a)),
            );
            g
        })
}

fn normalized(mut g: Gossip) -> Gossip {
    g.seen.clear();
    g
}

proptest! {
    /// Gossip merge is a CRDT join: commutative, associative, idempotent.
    #[test]
    fn merge_is_a_crdt(a in arb_gossip(), b in arb_gossip(), c in arb_gossip()) {
        prop_assert_eq!(a.merge(&b), b.merge(&a));
        prop_assert_eq!(a.merge(&b).merge(&c), a.merge(&b.merge(&c)));
        prop_assert_eq!(a.merge(&a), normalized(a.clone()));
        prop_assert!(a.merge(&b).check_invariants().is_ok());
    }

    /// A member's status in the merge is never lower (in merge priority) than on either side.
    #[test]
    fn merge_never_moves_a_status_backwards(a in arb_gossip(), b in arb_gossip()) {
        let merged = a.merge(&b);
        for (addr, mm) in merged.members.iter() {
            for side in [&a, &b] {
                if let Some(before) = side.member(addr) {
                    prop_assert!(mm.status.merge_rank() >= before.status.merge_rank());
                }
            }
        }
    }
}
