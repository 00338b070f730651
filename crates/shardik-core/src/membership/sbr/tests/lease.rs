//! Lease-majority's lease protocol in the resolver: each path a decision can take (the
//! majority gets the lease; the minority waits, fails and downs itself; indirectly connected
//! nodes; a lease already held; a lease that never answers) and when the lease is released.

use std::collections::BTreeSet;
use std::time::Duration;

use super::fixtures::*;
use crate::membership::address::UniqueAddress;
use crate::membership::member::Member;
use crate::membership::reachability::ReachabilityStatus;
use crate::membership::sbr::*;
use crate::time::Instant;

fn secs(s: f64) -> Instant {
    Instant::from_nanos((s * 1e9) as u64)
}

fn lease_majority() -> Strategy {
    Strategy::LeaseMajority {
        role: None,
        acquire_lease_delay_for_minority: Duration::from_secs(2),
        release_after: Duration::from_secs(40),
        lease_operation_timeout: Duration::from_secs(5),
        lease_ttl: Duration::from_secs(120),
        lease_renew_interval: Duration::from_secs(12),
    }
}

/// A resolver with stable-after 1 s and down-all-when-unstable after 1 s more.
fn resolver() -> SplitBrainResolver {
    SplitBrainResolver::new(
        SbrSettings {
            strategy: lease_majority(),
            stable_after: Duration::from_secs(1),
            down_all_when_unstable: Some(Duration::from_secs(1)),
        },
        secs(0.0),
    )
}

/// Five members A–E as seen from `me`, which observes `unreachable` as unreachable; `gone`
/// are no longer members (removed).
fn view(me: &Member, unreachable: &[Member], gone: &[Member]) -> SbrView {
    let members: Vec<Member> = [a(), b(), c(), d(), e()]
        .into_iter()
        .filter(|m| !gone.contains(m))
        .collect();
    SbrView {
        self_addr: me.addr.clone(),
        unreachable: addrs(unreachable),
        records: unreachable
            .iter()
            .map(|m| {
                (
                    me.addr.clone(),
                    m.addr.clone(),
                    ReachabilityStatus::Unreachable,
                )
            })
            .collect(),
        seen_by: members
            .iter()
            .filter(|m| !unreachable.contains(m))
            .map(|m| m.addr.clone())
            .collect(),
        members,
        gone: BTreeSet::new(),
    }
}

fn down(decision: Decision, nodes: &[Member]) -> Option<SbrAction> {
    Some(SbrAction::Down {
        decision,
        nodes: nodes.iter().map(|m| m.addr.clone()).collect(),
    })
}

fn acquire(attempt: u64) -> Option<SbrAction> {
    Some(SbrAction::AcquireLease { attempt })
}

/// Reports the partition at 0 s and ticks at `t` (after stable-after) as the leader.
fn decide_at(r: &mut SplitBrainResolver, t: f64, v: &SbrView) -> Option<SbrAction> {
    r.note_change(secs(0.0), SbrChange::Unreachable, v);
    r.tick(secs(t), true, v)
}

#[test]
fn the_majority_asks_at_once_acts_on_the_grant_and_releases_after_removal() {
    let mut r = resolver();
    let v = view(&a(), &[d(), e()], &[]);
    assert_eq!(
        decide_at(&mut r, 1.0, &v),
        acquire(1),
        "no delay for the majority"
    );
    assert!(r.waiting_for_lease());
    // Waiting: nothing else is decided, not even down-all-when-unstable (overdue at 2 s).
    assert_eq!(r.next_deadline(), Some(secs(6.0)), "the request's deadline");
    for t in [2.0, 3.0, 5.5] {
        assert_eq!(r.tick(secs(t), true, &v), None, "at {t} s");
    }
    assert_eq!(
        r.lease_answer(secs(5.5), 1, true),
        down(Decision::DownUnreachable, &[d(), e()])
    );
    assert!(!r.waiting_for_lease());
    assert_eq!(
        r.stable_deadline(),
        secs(6.5),
        "acting restarts stable-after"
    );
    assert_eq!(r.instability(), None);
    assert_eq!(
        r.lease_held(),
        Some(&ReleaseWhen::Removed(addrs(&[d(), e()])))
    );
    // Downed but still members: the lease is kept.
    let downed_view = view(&a(), &[], &[]);
    assert_eq!(r.tick(secs(10.0), true, &downed_view), None);
    // D is removed, E not yet.
    assert_eq!(r.tick(secs(11.0), true, &view(&a(), &[], &[d()])), None);
    assert_eq!(
        r.lease_held(),
        Some(&ReleaseWhen::Removed(addrs(&[d(), e()])))
    );
    // Both removed at 12 s: released 40 s later.
    let removed = view(&a(), &[], &[d(), e()]);
    assert_eq!(r.tick(secs(12.0), true, &removed), None);
    assert_eq!(r.lease_held(), Some(&ReleaseWhen::At(secs(52.0))));
    assert_eq!(r.tick(secs(51.9), true, &removed), None);
    assert_eq!(
        r.tick(secs(52.0), true, &removed),
        Some(SbrAction::ReleaseLease)
    );
    assert_eq!(r.lease_held(), None);
    assert_eq!(r.tick(secs(60.0), true, &removed), None, "released once");
}

#[test]
fn the_minority_waits_then_is_refused_and_downs_itself() {
    let mut r = resolver();
    // A sees C, D and E unreachable: A and B are the minority.
    let v = view(&a(), &[c(), d(), e()], &[]);
    assert_eq!(decide_at(&mut r, 1.0, &v), None, "the minority waits");
    assert!(r.waiting_for_lease());
    assert_eq!(r.next_deadline(), Some(secs(3.0)));
    assert_eq!(r.tick(secs(2.9), true, &v), None);
    assert_eq!(r.tick(secs(3.0), true, &v), acquire(1));
    // The majority holds the lease: this side downs itself, self last.
    assert_eq!(
        r.lease_answer(secs(3.1), 1, false),
        down(Decision::DownReachable, &[b(), a()])
    );
    assert_eq!(r.lease_held(), None);
    assert!(!r.waiting_for_lease());
}

#[test]
fn a_minority_that_gets_the_lease_survives() {
    // The majority crashed: nobody holds the lease when the minority asks.
    let mut r = resolver();
    let v = view(&a(), &[c(), d(), e()], &[]);
    assert_eq!(decide_at(&mut r, 1.0, &v), None);
    assert_eq!(r.tick(secs(3.0), true, &v), acquire(1));
    assert_eq!(
        r.lease_answer(secs(3.1), 1, true),
        down(Decision::DownUnreachable, &[c(), d(), e()])
    );
}

#[test]
fn the_lowest_address_breaks_a_tie() {
    // Four members: A's side (A, B) holds the lowest address and asks at once; C's side waits.
    let four = |me: &Member, other: &[Member]| SbrView {
        members: vec![a(), b(), c(), d()],
        seen_by: addrs(&[a(), b(), c(), d()])
            .into_iter()
            .filter(|x| !other.iter().any(|o| &o.addr == x))
            .collect(),
        ..view(me, other, &[])
    };
    let mut r = resolver();
    assert_eq!(decide_at(&mut r, 1.0, &four(&a(), &[c(), d()])), acquire(1));
    let mut r = resolver();
    assert_eq!(decide_at(&mut r, 1.0, &four(&c(), &[a(), b()])), None);
    assert_eq!(
        r.tick(secs(3.0), true, &four(&c(), &[a(), b()])),
        acquire(1)
    );
}

#[test]
fn indirectly_connected_nodes_ask_at_once_and_reverse_without_the_lease() {
    // A sees D and E unreachable, and D and E see each other unreachable (a cycle): both are
    // indirectly connected. Even a minority would ask at once.
    let mut v = view(&a(), &[d(), e()], &[]);
    v.records.extend([
        (d().addr, e().addr, ReachabilityStatus::Unreachable),
        (e().addr, d().addr, ReachabilityStatus::Unreachable),
    ]);
    assert_eq!(
        decide(&lease_majority(), &v),
        Decision::DownIndirectlyConnected
    );
    let mut r = resolver();
    assert_eq!(decide_at(&mut r, 1.0, &v), acquire(1));
    assert_eq!(
        r.lease_answer(secs(1.5), 1, false),
        down(
            Decision::ReverseDownIndirectlyConnected,
            &[b(), c(), d(), e(), a()]
        ),
        "the indirectly connected and everything reachable, self last"
    );
    let mut r = resolver();
    decide_at(&mut r, 1.0, &v);
    assert_eq!(
        r.lease_answer(secs(1.5), 1, true),
        down(Decision::DownIndirectlyConnected, &[d(), e()])
    );
}

#[test]
fn a_lease_already_held_is_asked_for_at_once_even_by_the_minority() {
    let mut r = resolver();
    let v = view(&a(), &[e()], &[]);
    assert_eq!(decide_at(&mut r, 1.0, &v), acquire(1));
    assert_eq!(
        r.lease_answer(secs(1.1), 1, true),
        down(Decision::DownUnreachable, &[e()])
    );
    // Before E is removed, the cluster splits again and A's side is now the minority: it
    // holds the lease, so it asks at once (its handle answers without a store call).
    let v2 = view(&a(), &[c(), d(), e()], &[]);
    r.note_change(secs(2.0), SbrChange::Unreachable, &v2);
    assert_eq!(
        r.tick(secs(3.0), true, &v2),
        acquire(2),
        "no minority delay"
    );
    assert_eq!(
        r.lease_answer(secs(3.1), 2, true),
        down(Decision::DownUnreachable, &[c(), d(), e()])
    );
    // Released only once every node downed under it is gone.
    assert_eq!(
        r.lease_held(),
        Some(&ReleaseWhen::Removed(addrs(&[c(), d(), e()])))
    );
    // A held lease that its handle has lost since is refused like any other.
    r.note_change(secs(4.0), SbrChange::Unreachable, &v2);
    assert_eq!(r.tick(secs(5.0), true, &v2), acquire(3));
    assert_eq!(
        r.lease_answer(secs(5.1), 3, false),
        down(Decision::DownReachable, &[b(), a()])
    );
    assert_eq!(r.lease_held(), None);
}

#[test]
fn a_lease_that_never_answers_counts_as_refused() {
    let mut r = resolver();
    let v = view(&a(), &[d(), e()], &[]);
    assert_eq!(decide_at(&mut r, 1.0, &v), acquire(1));
    assert_eq!(r.tick(secs(5.9), true, &v), None);
    assert_eq!(
        r.tick(secs(6.0), true, &v),
        down(Decision::DownReachable, &[b(), c(), a()]),
        "lease-operation-timeout (5 s) passed"
    );
    assert!(!r.waiting_for_lease());
    // The grant arrives after all: nothing was decided under it, so it is given back.
    assert_eq!(
        r.lease_answer(secs(7.0), 1, true),
        Some(SbrAction::ReleaseLease)
    );
    assert_eq!(r.lease_answer(secs(7.0), 1, false), None);
    assert_eq!(r.lease_held(), None);
}

#[test]
fn answers_to_other_requests_are_ignored_while_waiting() {
    let mut r = resolver();
    let v = view(&a(), &[d(), e()], &[]);
    assert_eq!(decide_at(&mut r, 1.0, &v), acquire(1));
    assert_eq!(r.lease_answer(secs(1.5), 7, true), None);
    assert_eq!(r.lease_answer(secs(1.5), 0, false), None);
    assert!(r.waiting_for_lease());
    assert_eq!(
        r.lease_answer(secs(1.6), 1, true),
        down(Decision::DownUnreachable, &[d(), e()])
    );
}

#[test]
fn nothing_is_asked_when_every_unreachable_node_is_down_already() {
    let mut r = resolver();
    let mut v = view(&a(), &[e()], &[]);
    v.members[4] = downed(e());
    assert_eq!(decide_at(&mut r, 1.0, &v), None);
    assert!(!r.waiting_for_lease());
}

#[test]
fn other_strategies_never_ask_and_give_back_a_stray_grant() {
    let mut r = SplitBrainResolver::new(
        SbrSettings::new(keep_majority(), Duration::from_secs(1)),
        secs(0.0),
    );
    let v = view(&a(), &[d(), e()], &[]);
    assert_eq!(
        decide_at(&mut r, 1.0, &v),
        down(Decision::DownUnreachable, &[d(), e()])
    );
    assert_eq!(
        r.lease_answer(secs(2.0), 1, true),
        Some(SbrAction::ReleaseLease)
    );
}

/// Two sides of one partition with one lease between them: whoever asks first wins, the
/// other downs itself, and the two verdicts are complementary.
#[test]
fn two_sides_one_lease_one_survivor() {
    let mut majority = resolver();
    let mut minority = resolver();
    let from_a = view(&a(), &[d(), e()], &[]);
    let from_d = view(&d(), &[a(), b(), c()], &[]);
    let mut holder: Option<&str> = None;
    let mut grant = |who: &'static str| -> bool {
        match holder {
            None => {
                holder = Some(who);
                true
            }
            Some(h) => h == who,
        }
    };
    assert_eq!(decide_at(&mut majority, 1.0, &from_a), acquire(1));
    assert_eq!(decide_at(&mut minority, 1.0, &from_d), None);
    let a_acts = majority.lease_answer(secs(1.1), 1, grant("a"));
    assert_eq!(minority.tick(secs(3.0), true, &from_d), acquire(1));
    let d_acts = minority.lease_answer(secs(3.1), 1, grant("d"));
    let downed = |action: Option<SbrAction>| -> Vec<UniqueAddress> {
        match action {
            Some(SbrAction::Down { mut nodes, .. }) => {
                nodes.sort();
                nodes
            }
            other => panic!("expected a decision, got {other:?}"),
        }
    };
    assert_eq!(downed(a_acts), downed(d_acts), "both down D and E");
}

#[test]
fn a_node_frozen_past_half_release_after_does_not_trust_the_lease() {
    // Frozen 21 s (release-after 40 s): the other side may have downed this node, removed
    // it and given the lease back meanwhile. Its side downs itself instead of asking.
    let mut r = resolver();
    r.note_stall(Duration::from_secs(20));
    assert!(!r.stalled(), "20 s is not more than half of release-after");
    r.note_stall(Duration::from_secs(21));
    assert!(r.stalled());
    let v = view(&a(), &[d(), e()], &[]);
    assert_eq!(
        decide_at(&mut r, 1.0, &v),
        down(Decision::DownReachable, &[b(), c(), a()]),
        "even the majority: it cannot tell what happened while it was frozen"
    );
    // Once every member is in sight again, the lease is trusted again.
    let mut r = resolver();
    r.note_stall(Duration::from_secs(30));
    assert_eq!(r.tick(secs(0.5), true, &view(&a(), &[], &[])), None);
    assert!(!r.stalled());
    assert_eq!(decide_at(&mut r, 1.0, &v), acquire(1));
}

#[test]
fn a_freeze_while_waiting_for_the_lease_ends_the_wait_as_refused() {
    // Frozen while delayed: the wait ends at the next tick, without asking.
    let mut r = resolver();
    let minority = view(&a(), &[c(), d(), e()], &[]);
    assert_eq!(decide_at(&mut r, 1.0, &minority), None);
    r.note_stall(Duration::from_secs(25));
    assert_eq!(
        r.tick(secs(26.0), true, &minority),
        down(Decision::DownReachable, &[b(), a()])
    );
    // Frozen after asking: a grant handled after the request's deadline is too late to
    // count on, even before the tick that would notice the freeze.
    let mut r = resolver();
    let v = view(&a(), &[d(), e()], &[]);
    assert_eq!(decide_at(&mut r, 1.0, &v), acquire(1));
    assert_eq!(
        r.lease_answer(secs(30.0), 1, true),
        down(Decision::DownReachable, &[b(), c(), a()])
    );
}

#[test]
fn other_strategies_ignore_freezes() {
    let mut r = SplitBrainResolver::new(
        SbrSettings::new(keep_majority(), Duration::from_secs(1)),
        secs(0.0),
    );
    r.note_stall(Duration::from_secs(600));
    assert!(!r.stalled());
}
