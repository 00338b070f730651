//! The strategies' verdicts, from both sides of a partition: the reference's
//! `SplitBrainResolverSpec` and `SplitBrainResolverIntegrationSpec` tables.

use std::collections::BTreeSet;
use std::time::Duration;

use super::fixtures::*;
use crate::membership::address::UniqueAddress;
use crate::membership::member::Member;
use crate::membership::reachability::{Reachability, ReachabilityStatus};
use crate::membership::sbr::*;
use Decision::{DownAll as All, DownReachable as Reach, DownUnreachable as Unreach};

/// The spec's `StrategySetup`: up to three sides of a partition plus extra
/// "indirectly connected" unreachability records.
struct Setup {
    strategy: Strategy,
    sides: Vec<Vec<Member>>,
    indirect: Vec<(Member, Member)>,
}

impl Setup {
    fn new(strategy: Strategy, sides: Vec<Vec<Member>>) -> Self {
        Setup {
            strategy,
            sides,
            indirect: Vec::new(),
        }
    }

    fn indirect(mut self, pairs: Vec<(Member, Member)>) -> Self {
        self.indirect = pairs;
        self
    }

    /// The view of the first node of side `i`: it observes every node of the other
    /// sides as unreachable, the indirect records are present, and its side has seen
    /// the current gossip (as the spec's `strategy(side)`).
    fn view(&self, i: usize) -> SbrView {
        let side = &self.sides[i];
        let me = &side[0];
        let all: Vec<Member> = self.sides.iter().flatten().cloned().collect();
        let side_addrs = addrs(side);
        let mut records: Vec<(UniqueAddress, UniqueAddress, ReachabilityStatus)> = Vec::new();
        let pairs = self
            .indirect
            .iter()
            .map(|(o, s)| (o.addr.clone(), s.addr.clone()))
            .chain(
                all.iter()
                    .filter(|m| !side_addrs.contains(&m.addr))
                    .map(|o| (me.addr.clone(), o.addr.clone())),
            );
        for (o, s) in pairs {
            if !records.iter().any(|(ro, rs, _)| *ro == o && *rs == s) {
                records.push((o, s, ReachabilityStatus::Unreachable));
            }
        }
        SbrView {
            self_addr: me.addr.clone(),
            unreachable: records.iter().map(|(_, s, _)| s.clone()).collect(),
            members: all,
            records,
            seen_by: side_addrs,
            gone: BTreeSet::new(),
        }
    }

    fn decide(&self, i: usize) -> Decision {
        decide(&self.strategy, &self.view(i))
    }

    fn down(&self, i: usize) -> BTreeSet<UniqueAddress> {
        let v = self.view(i);
        nodes_to_down(decide(&self.strategy, &v), &self.strategy, &v)
    }

    /// Every side downs exactly `expected`: the sides agree.
    fn assert_downing(&self, expected: &[Member]) {
        for i in 0..self.sides.len() {
            if !self.sides[i].is_empty() {
                assert_eq!(self.down(i), addrs(expected), "seen from side {}", i + 1);
            }
        }
    }
}

fn keep_majority_role(r: &str) -> Strategy {
    Strategy::KeepMajority {
        role: Some(r.into()),
    }
}
fn static_quorum(q: usize, role: Option<&str>) -> Strategy {
    Strategy::StaticQuorum {
        quorum_size: q,
        role: role.map(String::from),
    }
}
fn keep_oldest(down_if_alone: bool) -> Strategy {
    Strategy::KeepOldest {
        down_if_alone,
        role: None,
    }
}

// ---- SplitBrainResolverIntegrationSpec rows: (strategy, side sizes) → survivor ---------

#[derive(Debug, Clone, Copy, PartialEq)]
enum Survivor {
    Side1,
    Side2,
    Nobody,
}

/// Nine nodes `n1..n9`, n1 oldest and lowest address; side 1 is the first `s1` nodes,
/// side 2 the next `s2`. Each side decides from its own view; both must down the same
/// nodes, leaving exactly the expected survivor.
fn integration(strategy: Strategy, s1: usize, s2: usize, expected: Survivor) {
    let nodes: Vec<Member> = (1..=9)
        .map(|i| member(&format!("n{i}"), i as u32, &[]))
        .collect();
    let side1 = nodes[..s1].to_vec();
    let side2 = nodes[s1..s1 + s2].to_vec();
    let setup = Setup::new(strategy.clone(), vec![side1.clone(), side2.clone()]);
    let from1 = setup.down(0);
    let from2 = setup.down(1);
    let all: Vec<Member> = side1.iter().chain(&side2).cloned().collect();
    let expected_down = match expected {
        Survivor::Side1 => addrs(&side2),
        Survivor::Side2 => addrs(&side1),
        Survivor::Nobody => addrs(&all),
    };
    let ctx = format!("{strategy:?} ({s1},{s2})");
    if expected == Survivor::Nobody {
        // Each side at least downs itself (both may down everyone, e.g. down-all).
        assert!(from1.is_superset(&addrs(&side1)), "side 1 view, {ctx}");
        assert!(from2.is_superset(&addrs(&side2)), "side 2 view, {ctx}");
    } else {
        assert_eq!(from1, expected_down, "side 1 view, {ctx}");
        assert_eq!(from2, expected_down, "side 2 view, {ctx}");
    }
    // Complementary: every node is downed by its own side or by the other, except the
    // survivors, which nobody downs.
    let downed_by_any: BTreeSet<_> = from1.union(&from2).cloned().collect();
    let survivors: BTreeSet<_> = addrs(&all).difference(&downed_by_any).cloned().collect();
    match expected {
        Survivor::Side1 => assert_eq!(survivors, addrs(&side1), "{ctx}"),
        Survivor::Side2 => assert_eq!(survivors, addrs(&side2), "{ctx}"),
        Survivor::Nobody => assert!(survivors.is_empty(), "{ctx}"),
    }
}

#[test]
fn integration_static_quorum() {
    let sq = || static_quorum(5, None);
    integration(sq(), 1, 2, Survivor::Nobody);
    // 8 members: not too many for quorum 5 (limit 9), but neither side reaches 5.
    integration(sq(), 4, 4, Survivor::Nobody);
    integration(sq(), 5, 4, Survivor::Side1);
    integration(sq(), 1, 5, Survivor::Side2);
    integration(sq(), 4, 5, Survivor::Side2);
    // Too many members for the quorum: 2·3 − 1 = 5 < 6, everybody goes.
    integration(static_quorum(3, None), 3, 3, Survivor::Nobody);
}

#[test]
fn integration_keep_majority() {
    integration(keep_majority(), 2, 1, Survivor::Side1);
    integration(keep_majority(), 1, 2, Survivor::Side2);
    integration(keep_majority(), 4, 5, Survivor::Side2);
    // Tie: the side with the lowest address (n1) survives.
    integration(keep_majority(), 4, 4, Survivor::Side1);
}

#[test]
fn integration_keep_oldest() {
    integration(keep_oldest(true), 3, 3, Survivor::Side1);
    integration(keep_oldest(true), 1, 1, Survivor::Side1);
    // The oldest is alone against two: down-if-alone.
    integration(keep_oldest(true), 1, 2, Survivor::Side2);
    integration(keep_oldest(false), 1, 2, Survivor::Side1);
}

#[test]
fn integration_down_all() {
    integration(Strategy::DownAll, 1, 2, Survivor::Nobody);
}

/// Lease-majority (4,5): both sides claim survival; the larger side asks at once, gets the
/// lease, and downs side 1; side 1 asks after its delay, is refused, and downs itself.
#[test]
fn integration_lease_majority() {
    let lm = lease_majority(None);
    let nodes: Vec<Member> = (1..=9)
        .map(|i| member(&format!("n{i}"), i as u32, &[]))
        .collect();
    let (side1, side2) = (nodes[..4].to_vec(), nodes[4..].to_vec());
    let s = Setup::new(lm.clone(), vec![side1.clone(), side2.clone()]);
    let (v1, v2) = (s.view(0), s.view(1));
    assert_eq!((s.decide(0), s.decide(1)), (Unreach, Unreach));
    assert_eq!(lease_acquire_delay(&lm, &v1), Duration::from_secs(2));
    assert_eq!(lease_acquire_delay(&lm, &v2), Duration::ZERO);
    // Side 2 wins the lease and acts; side 1 is refused and acts on the reversed decision.
    assert_eq!(nodes_to_down(Unreach, &lm, &v2), addrs(&side1));
    assert_eq!(nodes_to_down(Unreach.reversed(), &lm, &v1), addrs(&side1));
}

fn lease_majority(role: Option<&str>) -> Strategy {
    Strategy::LeaseMajority {
        role: role.map(String::from),
        acquire_lease_delay_for_minority: Duration::from_secs(2),
        release_after: Duration::from_secs(40),
        lease_operation_timeout: Duration::from_secs(5),
        lease_ttl: Duration::from_secs(120),
        lease_renew_interval: Duration::from_secs(12),
    }
}

// ---- SplitBrainResolverSpec: StaticQuorum ------------------------------------------

#[test]
fn static_quorum_basics() {
    Setup::new(
        static_quorum(3, None),
        vec![vec![a(), c(), e()], vec![b(), d()]],
    )
    .assert_downing(&[b(), d()]);
    let s = Setup::new(static_quorum(3, None), vec![vec![a(), b()], vec![c(), d()]]);
    assert_eq!((s.decide(0), s.decide(1)), (Reach, Reach));
    Setup::new(
        static_quorum(2, Some("role3")),
        vec![vec![a(), b(), c()], vec![d(), e()]],
    )
    .assert_downing(&[d(), e()]);
    Setup::new(
        static_quorum(3, None),
        vec![vec![a(), b(), c()], vec![d(), e(), f()]],
    )
    .assert_downing(&[a(), b(), c(), d(), e(), f()]);
}

/// "handle joining": Joining members are not counted.
#[test]
fn static_quorum_joining_not_counted() {
    let sq = || static_quorum(3, None);
    let s = Setup::new(
        sq(),
        vec![vec![a(), b(), joining(c())], vec![d(), e(), joining(f())]],
    );
    assert_eq!((s.decide(0), s.decide(1)), (Reach, Reach));
    let s = Setup::new(
        sq(),
        vec![vec![a(), b(), c()], vec![d(), e(), joining(f())]],
    );
    assert_eq!((s.decide(0), s.decide(1)), (Unreach, Reach));
    let s = Setup::new(
        sq(),
        vec![vec![a(), b(), joining(c())], vec![d(), e(), f()]],
    );
    assert_eq!((s.decide(0), s.decide(1)), (Reach, Unreach));
    let s = Setup::new(sq(), vec![vec![a(), b(), c()], vec![d(), e(), f()]]);
    assert_eq!((s.decide(0), s.decide(1)), (All, All));
}

/// "handle leaving/exiting": Leaving is counted, Exiting is not.
#[test]
fn static_quorum_leaving_counted_exiting_not() {
    let s = Setup::new(
        static_quorum(3, None),
        vec![vec![a(), b(), leaving(c())], vec![d(), e()]],
    );
    assert_eq!((s.decide(0), s.decide(1)), (Unreach, Reach));
    let s = Setup::new(
        static_quorum(3, None),
        vec![vec![a(), b(), exiting(c())], vec![d(), e()]],
    );
    assert_eq!((s.decide(0), s.decide(1)), (Reach, Reach));
}

// ---- KeepMajority ------------------------------------------------------------------

#[test]
fn keep_majority_partitions() {
    let km = keep_majority;
    Setup::new(km(), vec![vec![a(), c(), e()], vec![b(), d()]]).assert_downing(&[b(), d()]);
    Setup::new(km(), vec![vec![a(), b()], vec![c(), d(), e()]]).assert_downing(&[a(), b()]);
    Setup::new(km(), vec![vec![b()], vec![a(), c()]]).assert_downing(&[b()]);
    // Equal halves: keep the one with the lowest address.
    Setup::new(km(), vec![vec![a(), b()], vec![c(), d()]]).assert_downing(&[c(), d()]);
    Setup::new(km(), vec![vec![a()], vec![b()]]).assert_downing(&[b()]);
    Setup::new(
        keep_majority_role("role3"),
        vec![vec![a(), b()], vec![c(), d(), e()]],
    )
    .assert_downing(&[c(), d(), e()]);
    // C is the lowest address with role2.
    Setup::new(
        keep_majority_role("role2"),
        vec![vec![a(), d(), e()], vec![b(), c()]],
    )
    .assert_downing(&[a(), d(), e()]);
    // Nobody with the role: down all.
    Setup::new(keep_majority_role("role3"), vec![vec![c()], vec![e()]]).assert_downing(&[c(), e()]);
    // Three too-small parts each down themselves.
    let s = Setup::new(km(), vec![vec![a(), b()], vec![c(), d()], vec![e()]]);
    assert_eq!(s.down(0), addrs(&[a(), b()]));
    assert_eq!(s.down(1), addrs(&[c(), d()]));
    assert_eq!(s.down(2), addrs(&[e()]));
}

/// Joining/WeaklyUp are not counted but are downed with their side.
#[test]
fn keep_majority_joining_not_counted_but_downed() {
    Setup::new(
        keep_majority(),
        vec![vec![b(), d()], vec![joining(a()), c()]],
    )
    .assert_downing(&[a(), c()]);
    Setup::new(
        keep_majority(),
        vec![vec![a(), joining(b())], vec![c(), d(), e()]],
    )
    .assert_downing(&[a(), b()]);
    Setup::new(
        keep_majority(),
        vec![vec![b(), d()], vec![weakly_up(a()), c()]],
    )
    .assert_downing(&[a(), c()]);
}

/// "detect edge case of membership change": F, G moved Up on side 1 during the partition
/// are still Joining as seen by side 2, which therefore cannot be sure and downs all.
#[test]
fn keep_majority_membership_change_edge_cases() {
    let s1 = Setup::new(
        keep_majority(),
        vec![vec![a(), b(), f(), g()], vec![c(), d(), e()]],
    );
    assert_eq!(s1.decide(0), Unreach);
    assert_eq!(s1.down(0), addrs(&[c(), d(), e()]));
    let s2 = Setup::new(
        keep_majority(),
        vec![
            vec![a(), b(), joining(f()), joining(g())],
            vec![c(), d(), e()],
        ],
    );
    assert_eq!(s2.decide(1), All);
    assert_eq!(s2.down(1), addrs(&[a(), b(), c(), d(), e(), f(), g()]));

    // Equal size when counting the joining F.
    let s = Setup::new(
        keep_majority(),
        vec![vec![a(), b(), joining(f())], vec![c(), d(), e()]],
    );
    assert_eq!(s.decide(1), All);

    // Safe variant: {A, B} | {C, D, E, F'}.
    let s = Setup::new(
        keep_majority(),
        vec![vec![a(), b()], vec![c(), d(), e(), joining(f())]],
    );
    assert_eq!(s.decide(0), Reach);
    assert_eq!(s.down(0), addrs(&[a(), b()]));
    let s = Setup::new(
        keep_majority(),
        vec![vec![a(), b()], vec![c(), d(), e(), f()]],
    );
    assert_eq!(s.decide(1), Unreach);
    assert_eq!(s.down(1), addrs(&[a(), b()]));

    // Leaving/exiting: {A', B, Ej} | {C, D}.
    let s = Setup::new(
        keep_majority(),
        vec![vec![leaving(a()), b(), joining(e())], vec![c(), d()]],
    );
    assert_eq!(s.decide(0), All);
    assert_eq!(s.down(0), addrs(&[a(), b(), c(), d(), e()]));
    let s = Setup::new(
        keep_majority(),
        vec![vec![exiting(a()), b()], vec![c(), d()]],
    );
    assert_eq!(s.decide(1), Unreach);
    assert_eq!(s.down(1), addrs(&[b()]), "A is already Exiting");
}

/// Indirectly connected nodes are downed; fully connected ones are kept.
#[test]
fn keep_majority_indirectly_connected() {
    let km = keep_majority;
    Setup::new(km(), vec![vec![a(), b()]])
        .indirect(vec![(a(), b()), (b(), a())])
        .assert_downing(&[a(), b()]);
    Setup::new(km(), vec![vec![a(), b(), c()]])
        .indirect(vec![(a(), b()), (b(), a())])
        .assert_downing(&[a(), b()]);
    Setup::new(km(), vec![vec![a(), b(), c()]])
        .indirect(vec![(a(), b()), (b(), c()), (c(), a())])
        .assert_downing(&[a(), b(), c()]);
    Setup::new(km(), vec![vec![a(), b(), c(), d(), e()]])
        .indirect(vec![(a(), b()), (b(), c()), (c(), a())])
        .assert_downing(&[a(), b(), c()]);
    Setup::new(km(), vec![vec![a(), b(), c(), d(), e(), f(), g()]])
        .indirect(vec![(b(), c()), (c(), b()), (e(), f()), (f(), e())])
        .assert_downing(&[b(), c(), e(), f()]);
    // Detected via seen: the subject has seen the current gossip.
    Setup::new(km(), vec![vec![a(), b(), c()]])
        .indirect(vec![(a(), b()), (a(), c())])
        .assert_downing(&[a(), b(), c()]);
    Setup::new(km(), vec![vec![a(), b(), c(), d(), e()]])
        .indirect(vec![(b(), c()), (c(), b()), (a(), d())])
        .assert_downing(&[a(), b(), c(), d()]);
    assert_eq!(
        indirectly_connected(
            &Setup::new(km(), vec![vec![a(), b(), c()]])
                .indirect(vec![(a(), b()), (b(), a())])
                .view(0)
        ),
        addrs(&[a(), b()])
    );
}

/// Indirectly connected combined with a crash or a clean partition: the second pass
/// decides the clean part with keep-majority.
#[test]
fn keep_majority_indirectly_connected_with_partition() {
    let km = keep_majority;
    // {(A, B), D, E} | {C}: crashed C is downed too.
    let s = Setup::new(km(), vec![vec![a(), b(), d(), e()], vec![c()]])
        .indirect(vec![(a(), b()), (b(), a())]);
    assert_eq!(s.down(0), addrs(&[a(), b(), c()]));

    // {A, (B, C)} | {D, E}
    let s = Setup::new(km(), vec![vec![a(), b(), c()], vec![d(), e()]])
        .indirect(vec![(b(), c()), (c(), b())]);
    assert_eq!(s.down(0), addrs(&[b(), c(), d(), e()]));
    let s_clean_first = Setup::new(km(), vec![vec![a(), b(), c()], vec![d(), e()]]);
    assert_eq!(s_clean_first.down(1), addrs(&[d(), e()]));
    assert_eq!(s.down(1), addrs(&[b(), c(), d(), e()]));

    // Minority side has them: {A, (B, C)} | {D, E, F, G}
    let s = Setup::new(km(), vec![vec![a(), b(), c()], vec![d(), e(), f(), g()]])
        .indirect(vec![(b(), c()), (c(), b())]);
    assert_eq!(s.down(0), addrs(&[a(), b(), c()]));
    assert_eq!(s.down(1), addrs(&[a(), b(), c()]));

    // Majority side has them: {A, B, C} | {(D, E), F, G}
    let s = Setup::new(km(), vec![vec![a(), b(), c()], vec![d(), e(), f(), g()]])
        .indirect(vec![(d(), e()), (e(), d())]);
    assert_eq!(s.down(0), addrs(&[a(), b(), c(), d(), e()]));
    assert_eq!(s.down(1), addrs(&[a(), b(), c(), d(), e()]));

    // Spanning the partition: {A, (B), C} | {D, (E, F), G}
    let s = Setup::new(km(), vec![vec![a(), b(), c()], vec![d(), e(), f(), g()]]).indirect(vec![
        (b(), e()),
        (e(), f()),
        (f(), b()),
    ]);
    assert_eq!(s.down(0), addrs(&[a(), b(), c(), e(), f()]));
    assert_eq!(s.down(1), addrs(&[a(), b(), c(), e(), f()]));
}

/// "double DownIndirectlyConnected": the second pass is still indirectly connected, so
/// every downable node is downed (the reference throws and falls back to DownAll).
#[test]
fn double_indirect_decision_downs_all() {
    let s = Setup::new(
        keep_majority(),
        vec![vec![a(), b(), c()], vec![d(), e(), f(), g()]],
    )
    .indirect(vec![(d(), e()), (g(), f())]);
    let everyone = addrs(&[a(), b(), c(), d(), e(), f(), g()]);
    assert_eq!(s.decide(0), Decision::DownIndirectlyConnected);
    assert_eq!(s.down(0), everyone);
    assert_eq!(s.down(1), everyone);
}

// ---- KeepOldest --------------------------------------------------------------------

#[test]
fn keep_oldest_basics() {
    // E is the oldest.
    Setup::new(keep_oldest(true), vec![vec![a(), e()], vec![b(), c(), d()]]).assert_downing(&[
        b(),
        c(),
        d(),
    ]);
    // With role2 (C, D): D is the oldest.
    Setup::new(
        Strategy::KeepOldest {
            down_if_alone: true,
            role: Some("role2".into()),
        },
        vec![vec![a(), e()], vec![b(), c(), d()]],
    )
    .assert_downing(&[a(), e()]);
    Setup::new(keep_oldest(true), vec![vec![e()], vec![a(), b(), c(), d()]]).assert_downing(&[e()]);
    Setup::new(keep_oldest(true), vec![vec![b()], vec![a()]]).assert_downing(&[a()]);
    Setup::new(
        keep_oldest(false),
        vec![vec![e()], vec![a(), b(), c(), d()]],
    )
    .assert_downing(&[a(), b(), c(), d()]);
}

#[test]
fn keep_oldest_leaving_exiting_edge_cases() {
    let ko = || keep_oldest(true);
    // Scenario 1: E Exiting on side 2 (not counted as oldest, D is).
    let s = Setup::new(ko(), vec![vec![a(), b(), d()], vec![c(), exiting(e())]]);
    assert_eq!(s.decide(0), Unreach);
    assert_eq!(s.down(0), addrs(&[c()]));
    let s = Setup::new(ko(), vec![vec![a(), b(), d()], vec![c(), leaving(e())]]);
    assert_eq!(s.decide(1), All);
    assert_eq!(s.down(1), addrs(&[a(), b(), c(), d(), e()]));
    // Scenario 2.
    let s = Setup::new(ko(), vec![vec![a(), leaving(e())], vec![b(), c(), d()]]);
    assert_eq!((s.decide(0), s.decide(1)), (All, Reach));
    // Scenario 3.
    Setup::new(
        ko(),
        vec![vec![a(), e()], vec![leaving(b()), leaving(c()), d()]],
    )
    .assert_downing(&[b(), c(), d()]);
    // Unless alone, scenarios 1, 4, 3.
    let s = Setup::new(ko(), vec![vec![leaving(d()), e()], vec![a(), b(), c()]]);
    assert_eq!((s.decide(0), s.decide(1)), (All, Reach));
    let s = Setup::new(ko(), vec![vec![e()], vec![a(), b(), leaving(c())]]);
    assert_eq!((s.decide(0), s.decide(1)), (Reach, Unreach));
    let s = Setup::new(
        ko(),
        vec![
            vec![e()],
            vec![a(), leaving(b()), leaving(c()), leaving(d())],
        ],
    );
    assert_eq!((s.decide(0), s.decide(1)), (Reach, All));
    // Oldest leaving/exiting and alone.
    let s = Setup::new(ko(), vec![vec![d(), exiting(e())], vec![a(), b(), c()]]);
    assert_eq!(s.decide(0), Reach);
    let s = Setup::new(ko(), vec![vec![d(), leaving(e())], vec![a(), b(), c()]]);
    assert_eq!(s.decide(1), Reach);
    // One single oldest.
    let s = Setup::new(ko(), vec![vec![a()], vec![exiting(b())]]);
    assert_eq!(s.decide(0), Unreach);
    let s = Setup::new(ko(), vec![vec![a()], vec![leaving(b())]]);
    assert_eq!(s.decide(1), All);
}

#[test]
fn keep_oldest_joining_edge_cases() {
    let s = Setup::new(
        keep_oldest(true),
        vec![vec![joining(a()), e()], vec![b(), c(), d()]],
    );
    // E alone when not counting joining A; but A may be Up over there.
    assert_eq!((s.decide(0), s.decide(1)), (Reach, All));
    let s = Setup::new(
        keep_oldest(false),
        vec![vec![joining(a()), e()], vec![b(), c(), d()]],
    );
    assert_eq!((s.decide(0), s.decide(1)), (Unreach, Reach));
}

#[test]
fn keep_oldest_indirectly_connected() {
    Setup::new(keep_oldest(true), vec![vec![a(), b(), c()]])
        .indirect(vec![(a(), b()), (b(), a())])
        .assert_downing(&[a(), b()]);
    let s = Setup::new(
        keep_oldest(true),
        vec![vec![a(), b(), c()], vec![d(), e(), f(), g()]],
    )
    .indirect(vec![(d(), e()), (e(), d())]);
    assert_eq!(s.down(0), addrs(&[a(), b(), c(), d(), e()]));
    assert_eq!(s.down(1), addrs(&[a(), b(), c(), d(), e()]));
}

#[test]
fn down_all_strategy() {
    Setup::new(Strategy::DownAll, vec![vec![a(), b(), c()], vec![d(), e()]]).assert_downing(&[
        a(),
        b(),
        c(),
        d(),
        e(),
    ]);
    Setup::new(Strategy::DownAll, vec![vec![a(), b(), c()]])
        .indirect(vec![(a(), b()), (b(), a())])
        .assert_downing(&[a(), b(), c()]);
}

/// Lease-majority: every side decides to down the others, the minority waits before
/// acquiring, and the reversed decisions down this side instead.
#[test]
fn lease_majority_decisions() {
    let lm = lease_majority;
    let s = Setup::new(lm(None), vec![vec![a(), c(), e()], vec![b(), d()]]);
    assert_eq!((s.decide(0), s.decide(1)), (Unreach, Unreach));
    assert_eq!(lease_acquire_delay(&s.strategy, &s.view(0)), Duration::ZERO);
    assert_eq!(
        lease_acquire_delay(&s.strategy, &s.view(1)),
        Duration::from_secs(2)
    );
    let v = s.view(0);
    assert_eq!(
        nodes_to_down(s.decide(0).reversed(), &s.strategy, &v),
        addrs(&[a(), c(), e()])
    );
    // C is the lowest with role2 and sits on side 2.
    let s = Setup::new(lm(Some("role2")), vec![vec![a(), d(), e()], vec![b(), c()]]);
    assert_eq!(
        lease_acquire_delay(&s.strategy, &s.view(0)),
        Duration::from_secs(2)
    );
    assert_eq!(lease_acquire_delay(&s.strategy, &s.view(1)), Duration::ZERO);
    // Indirectly connected, reversed: indirectly connected plus all reachable.
    let s = Setup::new(lm(None), vec![vec![a(), b(), c()], vec![d(), e()]])
        .indirect(vec![(b(), c()), (c(), b())]);
    let v = s.view(0);
    assert_eq!(s.decide(0), Decision::DownIndirectlyConnected);
    assert_eq!(
        nodes_to_down(Decision::ReverseDownIndirectlyConnected, &s.strategy, &v),
        addrs(&[a(), b(), c()])
    );
    assert_eq!(
        nodes_to_down(Decision::DownIndirectlyConnected, &s.strategy, &v),
        addrs(&[b(), c(), d(), e()])
    );
    // Already downed node during the partition.
    let s = Setup::new(
        lm(None),
        vec![vec![a(), b(), c(), d()], vec![leaving(e()), downed(f())]],
    )
    .indirect(vec![(leaving(e()), downed(f()))]);
    assert_eq!(s.down(0), addrs(&[e()]));
    // As the reference: E's second pass is again "acquire the lease and down the
    // unreachable", so E, if it got the lease, would down A–D as well as itself. Both sides
    // are indirectly connected and ask at once; the lease lets only one of them act, and
    // the other downs what the reversed decision says.
    assert_eq!(s.down(1), addrs(&[a(), b(), c(), d(), e()]));
}

#[test]
fn down_self_quarantined() {
    let s = Setup::new(keep_majority(), vec![vec![a(), b()], vec![c()]]);
    let v = s.view(0);
    assert_eq!(
        nodes_to_down(Decision::DownSelfQuarantinedByRemote, &s.strategy, &v),
        addrs(&[a()])
    );
}

#[test]
fn view_from_reachability_table() {
    let members = vec![a(), b(), c(), downed(d())];
    let mut r = Reachability::new();
    r.unreachable(&a().addr, &b().addr);
    r.unreachable(&d().addr, &c().addr); // D is Down: its observation does not count
    r.unreachable(&b().addr, &a().addr); // self is never unreachable
    let v = SbrView::from_state(a().addr, members, &r, BTreeSet::new());
    assert_eq!(v.unreachable, addrs(&[b(), d()]));
    assert_eq!(v.records.len(), 3);
}
