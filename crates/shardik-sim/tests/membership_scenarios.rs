//! Whole-cluster membership scenarios in deterministic simulation: the situations the
//! reference's multi-node membership tests exercise (joining, leaving, crashes, partitions, pauses,
//! restarts at the same address) and the split-brain resolver's side-size table.
//! Every run is seeded; a failure message names the seed, and the same seed replays it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use shardik_core::membership::config::number_of_shards_check;
use shardik_core::membership::sbr::{SbrSettings, Strategy};
use shardik_core::membership::{Command, MemberStatus, ShutdownReason};
use shardik_core::membership::{JoinCompat, MembershipConfig};
use shardik_sim::scenario::{self, Scenario, form_cluster};
use shardik_sim::world::{NodeId, World, WorldConfig};

fn world(seed: u64) -> World {
    World::new(WorldConfig::new(seed))
}

fn world_with(seed: u64, f: impl FnOnce(&mut WorldConfig)) -> World {
    let mut cfg = WorldConfig::new(seed);
    f(&mut cfg);
    World::new(cfg)
}

fn assert_clean(w: &World, seed: u64) {
    assert!(
        w.checker().violations().is_empty(),
        "seed {seed}: {:?}",
        w.checker().violations()
    );
}

fn ids(r: std::ops::Range<usize>) -> Vec<NodeId> {
    r.collect()
}

#[test]
fn five_nodes_form_a_cluster_from_concurrent_seeds() {
    for seed in 1..=10 {
        let mut w = world(seed);
        let t = form_cluster(&mut w, 5).unwrap_or_else(|| panic!("seed {seed}: no formation"));
        assert!(t.as_millis() < 15_000, "seed {seed}: took {t}");
        w.run_for(Duration::from_secs(3));
        assert!(w.agreed(), "seed {seed}: nodes disagree");
        assert_eq!(
            w.core(3).leader().map(|l| l.address),
            Some(World::address_of(0)),
            "lowest address leads"
        );
        // Up-numbers are unique and start at 1.
        let mut ups: Vec<u32> = w.members_seen_by(0).iter().map(|m| m.up_number).collect();
        ups.sort();
        ups.dedup();
        assert_eq!(ups.len(), 5);
        assert_eq!(ups[0], 1);
        assert_clean(&w, seed);
    }
}

#[test]
fn same_seed_same_timeline_other_seed_other_timeline() {
    let run = |seed| {
        let (w, _) = scenario::run(Scenario::Crash, 5, seed, None);
        w.timeline().to_vec()
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
}

#[test]
fn leader_leaving_hands_leadership_on() {
    for seed in 1..=5 {
        let mut w = world(seed);
        form_cluster(&mut w, 5).expect("formed");
        w.leave(0);
        let rest = ids(1..5);
        let t = w.run_until_pred(Duration::from_secs(30), |w| w.all_up(&rest));
        assert!(t.is_some(), "seed {seed}: leader not removed");
        assert_eq!(w.shutdown_reason(0), Some(&ShutdownReason::Left));
        assert_eq!(
            w.core(2).leader().map(|l| l.address),
            Some(World::address_of(1))
        );
        let exited = w
            .timeline()
            .iter()
            .any(|e| e.node == Some(1) && e.what.starts_with("MemberExited node-00000"));
        assert!(exited, "seed {seed}: node 1 never saw the leader Exiting");
        assert_clean(&w, seed);
    }
}

/// Forms a cluster of five in `w`, crashes node 2, and returns how long until the other four
/// are all that is left (node 2 downed and removed).
fn crash_node_2_of_5(w: &mut World) -> Duration {
    form_cluster(w, 5).expect("formed");
    let crash_at = w.now();
    w.crash(2);
    let rest = [0, 1, 3, 4];
    let removed_at = w
        .run_until_pred(Duration::from_secs(90), |w| w.all_up(&rest))
        .expect("removed");
    removed_at - crash_at
}

/// A crash whose machine goes silent (no refused connections): the failure detector and the
/// resolver's stable-after decide, as in the reference.
#[test]
fn crashed_node_is_detected_downed_and_removed() {
    for seed in 1..=5 {
        let mut w = world_with(seed, |c| c.refuse_connections = false);
        let elapsed = crash_node_2_of_5(&mut w);
        // Detection (~5 s) + stable-after (20 s) + removal: well under a minute, never instant.
        assert!(
            elapsed > Duration::from_secs(20) && elapsed < Duration::from_secs(40),
            "seed {seed}: {elapsed:?}"
        );
        let saw = |what: &str| {
            w.timeline()
                .iter()
                .any(|e| e.node == Some(0) && e.what == what)
        };
        assert!(saw("UnreachableMember node-00002"), "seed {seed}");
        assert!(saw("MemberDowned node-00002"), "seed {seed}");
        assert!(saw("MemberRemoved node-00002 (was Down)"), "seed {seed}");
        assert_clean(&w, seed);
    }
}

/// A crashed process whose machine refuses connections to its port is gone, not silent: the
/// survivors mark it unreachable at once and, being the side the strategy keeps, down and
/// remove it without waiting for stable-after (issue 24).
#[test]
fn a_crashed_node_whose_port_refuses_is_downed_without_waiting_for_stable_after() {
    for seed in 1..=5 {
        let mut w = world(seed);
        let elapsed = crash_node_2_of_5(&mut w);
        assert!(elapsed < Duration::from_secs(5), "seed {seed}: {elapsed:?}");
        assert!(
            w.timeline()
                .iter()
                .any(|e| e.node == Some(0) && e.what == "MemberRemoved node-00002 (was Down)"),
            "seed {seed}"
        );
        assert_clean(&w, seed);
    }
}

/// A member welcomes a joiner (which welcomes a second joiner in turn) and crashes before its
/// gossip about them reached anyone: the other members drop the joiners' gossip as coming from
/// unknown nodes. They answer `NotKnown`, and the joiners join again through them instead of
/// staying Joining for good (the durable sharding sweep's seed 609; see
/// `node/not_known.rs`).
#[test]
fn joiners_whose_welcomer_crashes_before_gossiping_join_again_and_become_up() {
    for seed in 1..=5 {
        let mut w = world(seed);
        form_cluster(&mut w, 4).expect("formed");
        let (first, second) = (w.add_node(), w.add_node());
        // Nothing node 1 sends reaches the others: its gossip about the joiners never leaves.
        for other in [0, 2, 3] {
            w.block_oneway(1, other);
        }
        w.command(first, Command::Join(World::address_of(1)));
        assert!(
            w.run_until_pred(Duration::from_secs(5), |w| w.core(first).is_member())
                .is_some(),
            "seed {seed}: no welcome"
        );
        w.command(second, Command::Join(World::address_of(first)));
        assert!(
            w.run_until_pred(Duration::from_secs(5), |w| w.core(second).is_member())
                .is_some(),
            "seed {seed}: the joiner did not welcome the second one"
        );
        // Node 1 hears of the second joiner from the first, then dies with what it knows.
        w.run_for(Duration::from_secs(2));
        w.crash(1);
        w.heal();
        for id in [0, 2, 3] {
            let g = w.core(id).gossip();
            assert!(
                !g.has_member(w.core(first).self_node())
                    && !g.has_member(w.core(second).self_node()),
                "seed {seed}: node {id} heard of a joiner; the scenario tests nothing"
            );
        }
        let all = [0, 2, 3, first, second];
        let t = w.run_until_pred(Duration::from_secs(120), |w| w.all_up(&all) && w.agreed());
        assert!(
            t.is_some(),
            "seed {seed}: the joiners stayed out: {:?} / {:?}",
            w.core(first).self_status(),
            w.core(second).self_status()
        );
        let rejoins = w.core(first).stats().rejoins + w.core(second).stats().rejoins;
        assert!(rejoins >= 1, "seed {seed}: became Up without joining again");
        assert_clean(&w, seed);
    }
}

/// Partitions a formed cluster of `side1 + side2` nodes and returns which nodes survive
/// (still running members) after the resolver acted.
fn partition_outcome(strategy: Strategy, side1: usize, side2: usize, seed: u64) -> Vec<NodeId> {
    let mut w = world_with(seed, |c| {
        c.membership.downing = Some(SbrSettings::new(strategy, Duration::from_secs(20)))
    });
    let n = side1 + side2;
    form_cluster(&mut w, n).expect("formed");
    let a = ids(0..side1);
    let b = ids(side1..n);
    w.partition(&[&a, &b]);
    w.run_for(Duration::from_secs(60));
    assert_clean(&w, seed);
    let survivors: Vec<NodeId> = w.alive_nodes();
    // The survivors must agree on exactly themselves as members.
    if !survivors.is_empty() {
        assert!(
            w.all_up(&survivors),
            "seed {seed}: survivors {survivors:?} not a clean cluster"
        );
    }
    survivors
}

#[test]
fn keep_majority_partitions() {
    for seed in 1..=3 {
        assert_eq!(
            partition_outcome(Strategy::KeepMajority { role: None }, 3, 2, seed),
            ids(0..3),
            "3|2"
        );
        assert_eq!(
            partition_outcome(Strategy::KeepMajority { role: None }, 2, 3, seed),
            ids(2..5),
            "2|3"
        );
        // Tie: the side holding the lowest address survives.
        assert_eq!(
            partition_outcome(Strategy::KeepMajority { role: None }, 2, 2, seed),
            ids(0..2),
            "2|2"
        );
        assert_eq!(
            partition_outcome(Strategy::KeepMajority { role: None }, 4, 5, seed),
            ids(4..9),
            "4|5"
        );
    }
}

#[test]
fn other_strategies_on_a_4_5_partition() {
    let seed = 11;
    let sq = |q| Strategy::StaticQuorum {
        quorum_size: q,
        role: None,
    };
    assert_eq!(
        partition_outcome(sq(5), 4, 5, seed),
        ids(4..9),
        "static-quorum 5: 4|5 keeps side 2"
    );
    assert_eq!(
        partition_outcome(sq(3), 1, 2, seed),
        Vec::<NodeId>::new(),
        "static-quorum 3: 1|2 downs both"
    );
    let oldest = Strategy::KeepOldest {
        down_if_alone: true,
        role: None,
    };
    assert_eq!(
        partition_outcome(oldest.clone(), 4, 5, seed),
        ids(0..4),
        "keep-oldest keeps the oldest's side"
    );
    assert_eq!(
        partition_outcome(oldest, 1, 2, seed),
        ids(1..3),
        "keep-oldest down-if-alone"
    );
    assert_eq!(
        partition_outcome(Strategy::DownAll, 4, 5, seed),
        Vec::<NodeId>::new(),
        "down-all"
    );
}

#[test]
fn joiner_during_partition_becomes_weakly_up_then_up_after_heal() {
    let seed = 5;
    let mut w = world_with(seed, |c| c.membership.downing = None);
    form_cluster(&mut w, 5).expect("formed");
    let joiner = w.add_node();
    assert_eq!(joiner, 5);
    w.partition(&[&[0, 1, 2, 5], &[3, 4]]);
    w.run_for(Duration::from_secs(10));
    w.join(joiner, &[0]);
    let weakly = w.run_until_pred(Duration::from_secs(30), |w| {
        [0, 1, 2, 5].iter().all(|&i| {
            w.core(i)
                .gossip()
                .member(w.core(5).self_node())
                .is_some_and(|m| m.status == MemberStatus::WeaklyUp)
        })
    });
    assert!(weakly.is_some(), "joiner never became WeaklyUp on its side");
    w.heal();
    let all = ids(0..6);
    assert!(
        w.run_until_pred(Duration::from_secs(30), |w| w.all_up(&all))
            .is_some(),
        "joiner not Up after heal"
    );
    assert_clean(&w, seed);
}

#[test]
fn restarted_node_with_new_uid_replaces_the_old_incarnation() {
    for seed in 1..=5 {
        let mut w = world(seed);
        form_cluster(&mut w, 5).expect("formed");
        let old_uid = w.core(4).self_node().uid;
        w.crash(4);
        w.run_for(Duration::from_secs(1));
        w.restart(4);
        assert_ne!(w.core(4).self_node().uid, old_uid);
        w.join(4, &[0, 1, 2]);
        let all = ids(0..5);
        let t = w.run_until_pred(Duration::from_secs(90), |w| w.all_up(&all));
        assert!(
            t.is_some(),
            "seed {seed}: the new incarnation never became Up"
        );
        let members = w.members_seen_by(0);
        assert!(
            members.iter().all(|m| m.addr.uid != old_uid),
            "old incarnation still present"
        );
        assert_clean(&w, seed);
    }
}

/// Simulator seed 2059 of the durable sweep, reduced. Two nodes are still joining, each
/// through a member of its own and neither known to the other, when every member crashes;
/// their old incarnations get downed on both joiners (there by the new incarnations' joins,
/// here by an operator). Each joiner then leads a view of Down members only. It used to
/// remove them and make itself Up: two clusters of one that never merge. Now each stops
/// (`Orphaned`), and started again, everyone ends in one cluster.
#[test]
fn joiners_orphaned_by_a_crash_of_every_member_stop_rather_than_lead_clusters_of_their_own() {
    for seed in 1..=5 {
        let mut w = world(seed);
        form_cluster(&mut w, 3).expect("formed");
        let (a, b) = (w.add_node(), w.add_node());
        // Each joiner hears only of its own welcomer's view.
        w.partition(&[&[0, a], &[1, b], &[2]]);
        w.join(a, &[0]);
        w.join(b, &[1]);
        let joined = w.run_until_pred(Duration::from_secs(10), |w| {
            w.core(a).is_member() && w.core(b).is_member()
        });
        assert!(
            joined.is_some(),
            "seed {seed}: the joiners were not welcomed"
        );
        for j in [a, b] {
            assert_eq!(w.core(j).self_status(), Some(MemberStatus::Joining));
        }
        assert!(!w.core(a).gossip().has_member(w.core(b).self_node()));
        for m in 0..3 {
            w.crash(m);
        }
        w.heal();
        for j in [a, b] {
            for m in 0..3 {
                w.command(j, Command::Down(World::address_of(m)));
            }
        }
        w.run_for(Duration::from_secs(10));
        for j in [a, b] {
            assert_eq!(
                w.shutdown_reason(j),
                Some(&ShutdownReason::Orphaned),
                "seed {seed}: node {j} did not stop; it sees {:?}",
                w.members_seen_by(j)
                    .iter()
                    .map(|m| (m.addr.address.port, m.status))
                    .collect::<Vec<_>>()
            );
        }
        // Started again, all five join one cluster.
        for id in 0..5 {
            w.restart(id);
            w.join(id, &[0, 1, 2]);
        }
        let all = ids(0..5);
        let t = w.run_until_pred(Duration::from_secs(60), |w| w.all_up(&all) && w.agreed());
        assert!(
            t.is_some(),
            "seed {seed}: no single cluster after the restarts"
        );
        assert_clean(&w, seed);
    }
}

/// A joiner that stops while it is still Joining must not hold up another member's graceful
/// leave, nor have it end Downed: the leaver ends `Left`, within a few leader ticks, far
/// sooner than the split-brain resolver's `stable-after` (20 s). The joiner either crashed
/// (its port refuses) or went silent (paused: nothing refuses, it is only unreachable).
#[test]
fn a_joiner_that_stops_while_joining_does_not_hold_up_a_graceful_leave() {
    for seed in 1..=20 {
        for members in [1, 2] {
            for crash in [true, false] {
                let case = format!("seed {seed}, {members} members, crash {crash}");
                let mut w = world(seed);
                form_cluster(&mut w, members).expect("formed");
                let joiner = w.add_node();
                w.join(joiner, &[0]);
                let welcomed =
                    w.run_until_pred(Duration::from_secs(10), |w| w.core(joiner).is_member());
                assert!(welcomed.is_some(), "{case}: the joiner was not welcomed");
                if crash {
                    w.crash(joiner);
                } else {
                    w.pause(joiner, Duration::from_secs(60));
                }
                let leaver = members - 1;
                w.leave(leaver);
                let left = w.run_until_pred(Duration::from_secs(10), |w| {
                    w.shutdown_reason(leaver).is_some()
                });
                assert!(
                    left.is_some(),
                    "{case}: the leave hung; node {leaver} sees {:?}",
                    w.members_seen_by(leaver)
                        .iter()
                        .map(|m| (m.addr.address.to_string(), m.status))
                        .collect::<Vec<_>>()
                );
                assert_eq!(
                    w.shutdown_reason(leaver),
                    Some(&ShutdownReason::Left),
                    "{case}"
                );
                assert_clean(&w, seed);
            }
        }
    }
}

/// A Joining member that went silent does not hold the others back, and is not moved Up
/// while it is unreachable. A member of a two-node cluster pauses, so that nobody is moved
/// Up meanwhile (WeaklyUp is off); two nodes join, and one of them goes silent at once. When the paused member
/// is back, the leader moves the other joiner Up, not the silent one (which, moved Up, would
/// block every later convergence until it was downed).
#[test]
fn an_unreachable_joiner_is_not_moved_up_with_the_others() {
    for seed in 1..=10 {
        // Without WeaklyUp, so that the joiners stay Joining while node 1 is away.
        let mut w = world_with(seed, |c| c.membership.allow_weakly_up_members = None);
        form_cluster(&mut w, 2).expect("formed");
        // Shorter than the resolver's stable-after (20 s): node 1 comes back, not downed.
        w.pause(1, Duration::from_secs(12));
        let (silent, joiner) = (w.add_node(), w.add_node());
        w.join(silent, &[0]);
        w.join(joiner, &[0]);
        let welcomed = w.run_until_pred(Duration::from_secs(5), |w| {
            w.core(silent).is_member() && w.core(joiner).is_member()
        });
        assert!(
            welcomed.is_some(),
            "seed {seed}: the joiners were not welcomed"
        );
        w.pause(silent, Duration::from_secs(120));
        let silent_addr = w.core(silent).self_node().clone();
        // Each of 0, 1 and the joiner sees the three of them Up.
        let up = w.run_until_pred(Duration::from_secs(30), |w| {
            [0, 1, joiner].iter().all(|&i| {
                [0, 1, joiner].iter().all(|&j| {
                    let addr = World::address_of(j);
                    w.members_seen_by(i)
                        .iter()
                        .any(|m| m.addr.address == addr && m.status == MemberStatus::Up)
                })
            })
        });
        assert!(
            up.is_some(),
            "seed {seed}: the reachable members were held back by the silent joiner: {:?}",
            w.members_seen_by(0)
                .iter()
                .map(|m| (m.addr.address.to_string(), m.status))
                .collect::<Vec<_>>()
        );
        let silent_status = w
            .members_seen_by(0)
            .iter()
            .find(|m| m.addr == silent_addr)
            .map(|m| m.status);
        assert_ne!(
            silent_status,
            Some(MemberStatus::Up),
            "seed {seed}: the silent joiner was moved Up"
        );
        assert_clean(&w, seed);
    }
}

/// A joiner whose welcomer leaves gracefully is not orphaned: the cluster handed over, and
/// the joiner carries it on, as the reference's does.
#[test]
fn a_joiner_whose_only_member_leaves_gracefully_carries_the_cluster_on() {
    for seed in 1..=5 {
        let mut w = world(seed);
        form_cluster(&mut w, 1).expect("formed");
        let a = w.add_node();
        w.join(a, &[0]);
        let joined = w.run_until_pred(Duration::from_secs(10), |w| w.core(a).is_member());
        assert!(joined.is_some(), "seed {seed}: not welcomed");
        w.leave(0);
        let up = w.run_until_pred(Duration::from_secs(60), |w| {
            w.shutdown_reason(0).is_some() && w.all_up(&[a])
        });
        assert!(
            up.is_some(),
            "seed {seed}: the joiner did not carry on: {:?}",
            w.shutdown_reason(a)
        );
        assert_eq!(w.shutdown_reason(0), Some(&ShutdownReason::Left));
        assert_eq!(w.shutdown_reason(a), None);
        assert_clean(&w, seed);
    }
}

#[test]
fn node_paused_longer_than_stable_after_is_removed_and_stops_itself() {
    let seed = 3;
    let mut w = world(seed);
    form_cluster(&mut w, 5).expect("formed");
    w.pause(4, Duration::from_secs(40));
    let rest = [0, 1, 2, 3];
    assert!(
        w.run_until_pred(Duration::from_secs(40), |w| w.all_up(&rest))
            .is_some(),
        "paused node not removed"
    );
    // When it wakes it finds itself alone and must not come back as a member.
    w.run_for(Duration::from_secs(60));
    let tl: Vec<String> = w
        .timeline()
        .iter()
        .filter(|e| e.node == Some(4) || e.node.is_none())
        .map(|e| format!("{} {}", e.at, e.what))
        .collect();
    assert!(
        !w.is_alive(4),
        "the paused node kept running: {:?}\n{}",
        w.shutdown_reason(4),
        tl[tl.len().saturating_sub(40)..].join("\n")
    );
    assert!(w.all_up(&rest));
    assert_clean(&w, seed);
}

#[test]
fn short_pause_within_acceptable_heartbeat_pause_is_harmless() {
    let seed = 8;
    let mut w = world(seed);
    form_cluster(&mut w, 5).expect("formed");
    w.pause(2, Duration::from_millis(1500));
    w.run_for(Duration::from_secs(30));
    assert!(w.all_up(&ids(0..5)));
    let false_positive = w
        .timeline()
        .iter()
        .any(|e| e.what.starts_with("UnreachableMember"));
    assert!(!false_positive, "a 1.5 s pause must not trip the detector");
}

#[test]
fn min_nr_of_members_holds_joiners_back() {
    let mut w = world_with(2, |c| c.membership.min_nr_of_members = 3);
    let a = w.add_node();
    let b = w.add_node();
    w.join(a, &[a]);
    w.join(b, &[a]);
    w.run_for(Duration::from_secs(15));
    assert!(
        w.members_seen_by(a)
            .iter()
            .all(|m| m.status == MemberStatus::Joining),
        "{:?}",
        w.members_seen_by(a)
    );
    let c = w.add_node();
    w.join(c, &[a]);
    assert!(
        w.run_until_pred(Duration::from_secs(15), |w| w.all_up(&[a, b, c]))
            .is_some()
    );
}

#[test]
fn node_of_another_cluster_is_refused() {
    let mut w = world(4);
    form_cluster(&mut w, 3).expect("formed");
    let mut other = WorldConfig::new(0).membership;
    other.cluster_name = "other".into();
    let stranger = w.add_node_with(other);
    w.join(stranger, &[0, 1]);
    w.run_for(Duration::from_secs(10));
    assert!(
        matches!(w.shutdown_reason(stranger), Some(ShutdownReason::IncompatibleConfig(why)) if why.contains("`cluster.name` differs"))
    );
    assert!(w.all_up(&[0, 1, 2]));
}

/// Settings of a node that counts `shards` shards.
fn with_shards(shards: u32, enforce: bool) -> MembershipConfig {
    let mut cfg = WorldConfig::new(0).membership;
    cfg.join_compat = JoinCompat::new(vec![Arc::new(number_of_shards_check(shards))]);
    cfg.join_compat.enforce_on_join = enforce;
    cfg
}

/// Whether `node`'s current incarnation is in the state of any running node.
fn known_anywhere(w: &World, node: NodeId) -> bool {
    let me = w.core(node).self_node().clone();
    w.alive_nodes()
        .into_iter()
        .filter(|&n| n != node)
        .any(|n| w.core(n).gossip().members.contains_key(&me))
}

fn refused_for_shards(w: &World, node: NodeId) -> bool {
    matches!(
        w.shutdown_reason(node),
        Some(ShutdownReason::IncompatibleConfig(why))
            if why.contains("`cluster.sharding.number-of-shards` differs: the cluster has `1000`, the joiner has `500`")
    )
}

#[test]
fn another_number_of_shards_is_refused_on_every_join_path() {
    for seed in 1..=20 {
        let mut w = world(seed);
        form_cluster(&mut w, 3).expect("formed");
        // (a) through seed nodes: InitJoin, answered Incompatible.
        let by_seeds = w.add_node_with(with_shards(500, true));
        w.join(by_seeds, &[0, 1]);
        // (b) straight to a member (`POST /cluster/members`): its Join, answered JoinRefused.
        let direct = w.add_node_with(with_shards(500, true));
        w.command(direct, Command::Join(World::address_of(1)));
        // (c) a member restarted with another value, joining through the seeds again.
        w.restart_with(2, with_shards(500, true));
        w.join(2, &[0, 1]);
        let mut never_known = true;
        let done = w.run_until_pred(Duration::from_secs(30), |w| {
            never_known &= [by_seeds, direct, 2].iter().all(|&n| !known_anywhere(w, n));
            [by_seeds, direct, 2].iter().all(|&n| !w.is_alive(n))
        });
        assert!(done.is_some(), "seed {seed}: a refused node still runs");
        assert!(
            never_known,
            "seed {seed}: a refused incarnation got into a member's state"
        );
        for n in [by_seeds, direct, 2] {
            assert!(
                refused_for_shards(&w, n),
                "seed {seed}: node {n}: {:?}",
                w.shutdown_reason(n)
            );
        }
        // The old incarnation of the restarted member is downed and removed; the others stay.
        let rest = w.run_until_pred(Duration::from_secs(60), |w| {
            w.all_up(&[0, 1]) && w.members_seen_by(0).len() == 2 && w.agreed()
        });
        assert!(
            rest.is_some(),
            "seed {seed}: the two members did not settle: {:?}",
            w.members_seen_by(0)
        );
        assert_clean(&w, seed);
    }
}

#[test]
fn with_enforcement_off_another_number_of_shards_joins() {
    let mut w = world_with(7, |c| c.membership.join_compat.enforce_on_join = false);
    form_cluster(&mut w, 3).expect("formed");
    let by_seeds = w.add_node_with(with_shards(500, false));
    w.join(by_seeds, &[0, 1]);
    let direct = w.add_node_with(with_shards(500, false));
    w.command(direct, Command::Join(World::address_of(2)));
    let all = [0, 1, 2, by_seeds, direct];
    assert!(
        w.run_until_pred(Duration::from_secs(30), |w| w.all_up(&all) && w.agreed())
            .is_some(),
        "{:?}",
        w.members_seen_by(0)
    );
    let warned = w
        .timeline()
        .iter()
        .filter(|e| e.what.starts_with("let in"))
        .count();
    assert!(warned >= 2, "every let-in joiner is reported");
    assert_clean(&w, 7);
}

#[test]
fn random_faults_then_heal_always_recover() {
    for seed in 1..=25 {
        let (w, out) = scenario::run(Scenario::Churn, 5, seed, None);
        assert!(
            out.converged,
            "seed {seed}: did not recover: {out:?}\nlast events: {:#?}",
            &w.timeline()[w.timeline().len().saturating_sub(30)..]
        );
        assert!(
            out.violations.is_empty(),
            "seed {seed}: {:?}",
            out.violations
        );
    }
}

#[test]
fn heartbeat_jitter_within_the_acceptable_pause_gives_no_false_positive() {
    let mut cfg = WorldConfig::new(21);
    cfg.latency.1 = Duration::from_millis(1000);
    let (_, out) = scenario::run(Scenario::Jitter, 20, 21, Some(cfg));
    assert_eq!(out.unreachable_events, 0, "{out:?}");
    assert!(out.violations.is_empty());
}

#[test]
fn a_crash_is_seen_by_every_node_within_the_phi_detection_time() {
    for seed in 1..=3 {
        // A silent crash (a machine that lost its power): the detector alone judges it.
        let mut cfg = WorldConfig::new(seed);
        cfg.refuse_connections = false;
        let (_, out) = scenario::run(Scenario::Detect, 30, seed, Some(cfg));
        let ms = out
            .simulated_ms_to_convergence
            .expect("everyone saw the crash");
        // Phi with default settings flags a silent node ~4.5-5.3 s after its last heartbeat,
        // plus up to one reaper interval, plus gossip of the verdict to the non-monitoring nodes.
        assert!((4_000..=10_000).contains(&ms), "seed {seed}: {ms} ms");
    }
}

#[test]
fn one_node_joins_a_converged_cluster_of_100_quickly() {
    let (_, out) = scenario::run(Scenario::JoinOne, 100, 1, None);
    assert!(out.converged && out.violations.is_empty(), "{out:?}");
    let ms = out.simulated_ms_to_convergence.unwrap();
    assert!(ms < 8_000, "took {ms} simulated ms");
}

#[test]
fn per_role_min_nr_of_members_holds_joiners_back_until_enough_have_the_role() {
    let mut base = WorldConfig::new(6).membership;
    base.role_min_nr_of_members.insert("backend".into(), 2);
    let mut w = World::new(WorldConfig::new(6));
    let frontend = w.add_node_with(base.clone());
    let mut backend_cfg = base.clone();
    backend_cfg.roles.insert("backend".into());
    let b1 = w.add_node_with(backend_cfg.clone());
    w.join(frontend, &[frontend]);
    w.join(b1, &[frontend]);
    w.run_for(Duration::from_secs(15));
    assert!(
        w.members_seen_by(frontend)
            .iter()
            .all(|m| m.status == MemberStatus::Joining),
        "one backend is not enough: {:?}",
        w.members_seen_by(frontend)
    );
    let b2 = w.add_node_with(backend_cfg);
    w.join(b2, &[frontend]);
    assert!(
        w.run_until_pred(Duration::from_secs(15), |w| w.all_up(&[frontend, b1, b2]))
            .is_some()
    );
    assert_clean(&w, 6);
}

/// A partition that changes shape before reachability has recovered, resolved by
/// keep-majority with a short stable-after. Found by the sharding simulation (seed 497 of its
/// random-fault scenario), replayed here on membership alone.
///
/// 1. {0,1,2} | {3}: everyone records 3 unreachable (and 3 records 0, 1, 2).
/// 2. At once (no healed interval) {0,1} | {2,3}: 0 and 1 never see 3 again, so their
///    "3 unreachable" records stay in the gossip; 2 records 0 and 1 unreachable.
/// 3. Node 2 sees 0 and 1 both as observers and as subjects of unreachability: indirectly
///    connected, by the reference's rule. It downs 0, 1 and 3 and decides the rest ({2}) on
///    its own; meanwhile {0,1} sees a clean 2-against-1 and downs 2 and 3.
///
/// Both {0,1} and {2} survive as clusters: a split brain (sharding then runs two coordinators
/// and hosts shards twice). Ignored until the resolver is fixed: it fails today.
#[test]
fn reshaped_partition_before_reachability_recovers_keeps_one_cluster() {
    use shardik_core::Instant;
    use shardik_core::membership::sbr::{SbrSettings, Strategy};
    let mut w = world_with(497, |c| {
        c.membership.downing = Some(SbrSettings::new(
            Strategy::KeepMajority { role: None },
            Duration::from_secs(5),
        ))
    });
    let at = |ms: u64| Instant::from_nanos(ms * 1_000_000 + 278_356);
    for _ in 0..3 {
        w.add_node();
    }
    for id in 0..3 {
        w.join(id, &[0, 1, 2]);
    }
    w.run_until(at(5_357));
    let n3 = w.add_node();
    w.join(n3, &[0, 1, 2]);
    w.run_until(at(10_004));
    w.pause(1, Duration::from_millis(409));
    w.run_until(at(11_909));
    w.partition(&[&[0, 1, 2], &[3]]);
    w.run_until(at(18_265));
    w.heal();
    w.partition(&[&[0, 1], &[2, 3]]);
    w.run_until(at(42_434));
    w.heal();
    w.run_for(Duration::from_secs(30));
    let clusters: BTreeSet<Vec<String>> = w
        .alive_nodes()
        .into_iter()
        .filter(|&i| w.core(i).is_member())
        .map(|i| {
            w.members_seen_by(i)
                .iter()
                .map(|m| m.addr.address.host.to_string())
                .collect()
        })
        .collect();
    assert!(
        clusters.len() <= 1,
        "several clusters survive: {clusters:?}"
    );
    assert_clean(&w, 497);
}

/// Every node is given one seed by an alias (`seeds.svc`, as a DNS name of node 0) that is
/// not node 0's identity: node 0 learns the alias is itself and forms the cluster, the others
/// learn it is node 0 and join it. The alias never becomes a member.
#[test]
fn nodes_join_through_a_seed_alias_and_the_alias_is_never_a_member() {
    use shardik_core::membership::Address;
    let alias = Address::new("seeds.svc", 2552);
    for seed in 1..=10 {
        let mut w = world(seed);
        let nodes = ids(0..5);
        for _ in &nodes {
            w.add_node();
        }
        w.add_alias(alias.clone(), 0);
        // Node 0 last: the others wait for it, as pods started in any order would.
        for &id in nodes.iter().rev() {
            w.join_via(id, vec![alias.clone()]);
        }
        let formed = w.run_until_pred(Duration::from_secs(60), |w| w.all_up(&nodes) && w.agreed());
        assert!(
            formed.is_some(),
            "seed {seed}: no cluster through the alias"
        );
        for &id in &nodes {
            assert!(
                w.members_seen_by(id)
                    .iter()
                    .all(|m| m.addr.address != alias),
                "seed {seed}: the alias is a member"
            );
        }
        assert_clean(&w, seed);
    }
}

/// The alias moves from a node that crashed to a live one (a DNS record updated): a node
/// that joins later follows it and joins the cluster, under the live node's identity.
#[test]
fn a_joiner_follows_a_seed_alias_that_moved_to_another_node() {
    use shardik_core::membership::Address;
    let alias = Address::new("seeds.svc", 2552);
    for seed in 1..=5 {
        let mut w = world(seed);
        for _ in 0..5 {
            w.add_node();
        }
        w.add_alias(alias.clone(), 0);
        for id in 0..4 {
            w.join_via(id, vec![alias.clone()]);
        }
        let first = ids(0..4);
        assert!(
            w.run_until_pred(Duration::from_secs(60), |w| w.all_up(&first) && w.agreed())
                .is_some(),
            "seed {seed}: no cluster"
        );
        w.crash(0);
        let rest = ids(1..4);
        assert!(
            w.run_until_pred(Duration::from_secs(120), |w| w.all_up(&rest) && w.agreed())
                .is_some(),
            "seed {seed}: node 0 not removed"
        );
        w.add_alias(alias.clone(), 2);
        w.join_via(4, vec![alias.clone()]);
        let all = ids(1..5);
        assert!(
            w.run_until_pred(Duration::from_secs(60), |w| w.all_up(&all) && w.agreed())
                .is_some(),
            "seed {seed}: the joiner did not follow the alias"
        );
        assert_clean(&w, seed);
    }
}

mod any_seed {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        /// Whatever the seed and size, random faults followed by healing end with every node
        /// slot Up in one agreed, converged view, with no invariant violated on the way.
        #[test]
        fn random_faults_always_end_in_agreement(seed in any::<u64>(), nodes in 3usize..8) {
            let (_, out) = scenario::run(Scenario::Churn, nodes, seed, None);
            prop_assert!(out.converged, "seed {} nodes {}: {:?}", seed, nodes, out);
            prop_assert!(out.violations.is_empty(), "seed {}: {:?}", seed, out.violations);
        }

        /// The same with every seed named by an alias (`WorldConfig::seed_aliases`): joins
        /// and restarted nodes' joins go through the identification of aliases.
        #[test]
        fn random_faults_with_seed_aliases_always_end_in_agreement(seed in any::<u64>(), nodes in 3usize..8) {
            let mut cfg = WorldConfig::new(seed);
            cfg.seed_aliases = true;
            let (_, out) = scenario::run(Scenario::Churn, nodes, seed, Some(cfg));
            prop_assert!(out.converged, "seed {} nodes {}: {:?}", seed, nodes, out);
            prop_assert!(out.violations.is_empty(), "seed {}: {:?}", seed, out.violations);
        }
    }
}
