//! A silent member's leased shards move once the store says their leases have lapsed
//! (`coordinator/takeover.rs`, `region/revocation.rs`), through the in-memory test network and
//! its lease store: before the member is downed, never while it still holds a lease, never
//! with the store unreachable, and a member heard again gives the shards up.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::lease::LeaseTiming;
use crate::membership::{MemberStatus, UniqueAddress};
use crate::sharding::kind_node::LeaseKey;
use crate::sharding::protocol::Protocol;
use crate::sharding::region::{DropReason, HandOffMode};
use crate::sharding::shard_id::ShardId;
use crate::sharding::testkit::{Net, StoredLease, node};

fn timing() -> LeaseTiming {
    LeaseTiming {
        ttl: Duration::from_secs(6),
        renew_interval: Duration::from_secs(2),
        operation_timeout: Duration::from_millis(1500),
        retry_interval: Duration::from_secs(1),
    }
}

/// Three nodes under shard and coordinator leases, with the takeover on (`takeover`), and 40
/// entities told once each from the first (the coordinator's) node.
fn three_leased_nodes(seed: u64, takeover: bool) -> (Net, [UniqueAddress; 3]) {
    let mut net = Net::new(seed, HandOffMode::Forward);
    net.lease_timing = Some(timing());
    net.coordinator_settings.lease_takeover = takeover.then(timing);
    let a = net.add(1, false);
    let b = net.add(2, false);
    let c = net.add(3, false);
    net.advance(Duration::from_secs(3));
    for i in 0..40 {
        net.tell(&a, &format!("e{i}"), 1);
    }
    net.advance(Duration::from_secs(1));
    assert_eq!(net.delivered.len(), 40, "{:?}", net.dropped);
    (net, [a, b, c])
}

/// The shards hosted on `n` now.
fn shards_on(net: &Net, n: &UniqueAddress) -> BTreeSet<ShardId> {
    net.hosts()
        .into_iter()
        .filter(|(_, h)| h.contains(n))
        .map(|(s, _)| s)
        .collect()
}

/// Entities (of the 40) whose shard is one of `shards`.
fn entities_of(net: &Net, shards: &BTreeSet<ShardId>) -> Vec<String> {
    (0..40)
        .map(|i| format!("e{i}"))
        .filter(|e| shards.contains(&net.shard_of(e)))
        .collect()
}

#[test]
fn a_frozen_nodes_shards_move_once_their_leases_lapse_while_it_is_still_a_member() {
    let (mut net, [a, b, c]) = three_leased_nodes(1, true);
    let on_c = shards_on(&net, &c);
    assert!(!on_c.is_empty(), "the frozen node must host something");
    net.freeze(&c);
    // Well within the lease's time to live: nothing moves.
    net.advance(Duration::from_secs(3));
    for shard in &on_c {
        assert!(!net.hosts().contains_key(shard), "{shard} moved early");
    }
    // Past it: every one of them runs elsewhere, though the node was never downed.
    net.advance(Duration::from_secs(6));
    for shard in &on_c {
        let hosts = net.hosts().get(shard).cloned().unwrap_or_default();
        assert!(
            hosts.len() == 1 && (hosts.contains(&a) || hosts.contains(&b)),
            "{shard} on {hosts:?}"
        );
    }
    // And they answer: messages for their entities, from both survivors, are delivered.
    let before = net.delivered.len();
    let entities = entities_of(&net, &on_c);
    for e in &entities {
        net.tell(&a, e, 2);
        net.tell(&b, e, 3);
    }
    net.advance(Duration::from_secs(1));
    assert_eq!(net.delivered.len() - before, 2 * entities.len());
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
}

#[test]
fn without_the_takeover_a_frozen_nodes_shards_wait_for_its_removal() {
    let (mut net, [_, _, c]) = three_leased_nodes(2, false);
    let on_c = shards_on(&net, &c);
    net.freeze(&c);
    net.advance(Duration::from_secs(20));
    for shard in &on_c {
        assert!(!net.hosts().contains_key(shard), "{shard} moved");
    }
    // The resolver decides: only then do they move.
    net.set_status(&c, MemberStatus::Down);
    net.set_status(&c, MemberStatus::Removed);
    net.advance(Duration::from_secs(10));
    for shard in &on_c {
        assert!(net.hosts().contains_key(shard), "{shard} never moved");
    }
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
}

#[test]
fn a_node_cut_off_from_its_peers_but_not_from_the_store_keeps_its_shards() {
    let (mut net, [a, _, c]) = three_leased_nodes(3, true);
    let on_c = shards_on(&net, &c);
    net.cut_off(&c);
    // It goes on renewing: the store says its leases are held, and nothing moves, however
    // long the resolver takes. Not even in the coordinator's table: a shard given another
    // home there would wait at the new home for a lease it cannot get, and its messages with
    // it.
    net.advance(Duration::from_secs(30));
    assert_eq!(shards_on(&net, &c), on_c);
    let table = net.coordinator(&a).expect("a runs the coordinator").state();
    for shard in &on_c {
        assert_eq!(table.home(shard), Some(&c), "{shard} taken from c");
    }
    for shard in &on_c {
        assert_eq!(net.hosts()[shard].len(), 1, "{shard}: {:?}", net.hosts());
    }
    assert!(net.leases_lost.is_empty(), "{:?}", net.leases_lost);
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
}

#[test]
fn with_the_store_unreachable_nothing_moves_early() {
    let (mut net, [_, _, c]) = three_leased_nodes(4, true);
    let on_c = shards_on(&net, &c);
    net.freeze(&c);
    net.lease_store_down = true;
    net.advance(Duration::from_secs(30));
    for shard in &on_c {
        assert!(!net.hosts().contains_key(shard), "{shard} moved");
    }
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
}

#[test]
fn a_node_heard_again_gives_up_the_shards_taken_from_it_and_its_messages_follow_them() {
    let (mut net, [a, b, c]) = three_leased_nodes(5, true);
    let on_c = shards_on(&net, &c);
    let entities = entities_of(&net, &on_c);
    // Told on the frozen node before it froze, waiting to be handled.
    net.freeze(&c);
    net.advance(Duration::from_secs(9));
    let moved: BTreeSet<ShardId> = on_c
        .iter()
        .filter(|s| net.hosts().contains_key(*s))
        .cloned()
        .collect();
    assert_eq!(moved, on_c, "all moved while it was frozen");
    net.thaw(&c);
    // Its own senders go on: their messages reach the shards' new homes.
    let before = net.delivered.len();
    for e in &entities {
        net.tell(&c, e, 4);
    }
    net.advance(Duration::from_secs(5));
    assert!(
        shards_on(&net, &c).is_disjoint(&on_c),
        "still hosts a shard taken from it: {:?}",
        shards_on(&net, &c)
    );
    for shard in &on_c {
        assert!(!net.region(&c).is_hosting(shard), "{shard} still hosted");
        let hosts = net.hosts()[shard].clone();
        assert!(
            hosts.contains(&a) || hosts.contains(&b),
            "{shard}: {hosts:?}"
        );
    }
    let delivered: Vec<_> = net.delivered[before..]
        .iter()
        .filter(|(_, _, (from, _))| *from == c)
        .collect();
    assert_eq!(
        delivered.len(),
        entities.len(),
        "dropped: {:?}",
        net.dropped
    );
    // Told again later, they stay where they are.
    let hosts_before = net.hosts();
    net.advance(Duration::from_secs(20));
    assert_eq!(net.hosts(), hosts_before);
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
}

/// Messages a third node sent to the frozen node before it learnt the shards' new homes are
/// still on their way when the node runs again: whatever order the node reads its connections
/// in (the revocation first, or those messages first), none of them is delivered after a later
/// message of the same sender, anywhere.
#[test]
fn messages_on_their_way_to_the_frozen_node_never_overtake_later_ones() {
    for seed in 0..40 {
        let (mut net, [a, b, c]) = three_leased_nodes(100 + seed, true);
        let on_c = shards_on(&net, &c);
        let entities = entities_of(&net, &on_c);
        net.freeze(&c);
        // Sent to c, their cached home: they wait on the way.
        for e in &entities {
            net.tell(&b, e, 10);
        }
        net.advance(Duration::from_secs(9));
        // Sent once b knows the new homes.
        for e in &entities {
            net.tell(&b, e, 11);
            net.tell(&a, e, 11);
        }
        net.advance(Duration::from_secs(1));
        net.thaw(&c);
        net.advance(Duration::from_secs(10));
        for e in &entities {
            net.tell(&b, e, 12);
        }
        net.advance(Duration::from_secs(5));
        for ((sender, entity), seqs) in net.per_sender() {
            assert!(
                seqs.windows(2).all(|w| w[0] < w[1]),
                "seed {seed}: {entity} got {seqs:?} from {sender}: {:?}",
                net.delivered
                    .iter()
                    .filter(|(_, e, _)| *e == entity)
                    .collect::<Vec<_>>()
            );
            if sender == b && entities.contains(&entity.to_string()) {
                assert!(
                    seqs.ends_with(&[11, 12]),
                    "seed {seed}: {entity} got {seqs:?}"
                );
            }
        }
        assert!(net.violations.is_empty(), "{:#?}", net.violations);
    }
}

/// A shard that came to a node by rebalance waits there for its predecessor's hand-over
/// marker, holding what other senders and its own sent meanwhile; the marker is lost, and the
/// node freezes past its lease while it waits. The shard is taken over; when the node runs
/// again, its wait times out: nothing it held is delivered there (the lease lapsed and another
/// node runs the shard), what other nodes sent is dropped, and no sender's messages arrive out
/// of order anywhere. (Simulator seed 1176 with store cuts: the timer released the held
/// messages without asking the lease.)
#[test]
fn what_waited_for_a_lost_hand_over_marker_is_not_delivered_after_a_freeze() {
    let mut held_somewhere = 0;
    for seed in 0..20 {
        let mut net = Net::new(300 + seed, HandOffMode::Forward);
        net.lease_timing = Some(timing());
        net.coordinator_settings.lease_takeover = Some(timing());
        net.coordinator_settings.rebalance_interval = Duration::from_secs(1);
        // The wait for a marker ends while c is frozen.
        net.region_settings.handoff_timeout = Duration::from_secs(10);
        net.lose = Some(|msg| matches!(msg, Protocol::HandOverDone { .. }));
        let a = net.add(1, false);
        let b = net.add(2, false);
        net.advance(Duration::from_secs(3));
        let all: Vec<String> = (0..40).map(|i| format!("e{i}")).collect();
        // Traffic from a while shards rebalance to c: old homes forward what they buffered,
        // so c waits for their markers.
        let c = net.add(3, false);
        for seq in 1..=60 {
            for e in &all {
                net.tell(&a, e, seq);
            }
            for _ in 0..50 {
                net.step();
            }
            net.tick(Duration::from_millis(100));
        }
        net.advance(Duration::from_secs(1));
        for e in &all {
            net.tell(&b, e, 2);
            net.tell(&c, e, 2);
        }
        net.advance(Duration::from_secs(1));
        let waiting: Vec<&String> = all
            .iter()
            .filter(|e| {
                !net.delivered
                    .iter()
                    .any(|(_, d, m)| **d == ***e && *m == (b.clone(), 2))
            })
            .collect();
        if waiting.is_empty() {
            continue;
        }
        held_somewhere += 1;
        let delivered_before = net.delivered.len();
        // Nor does the coordinator's revocation reach c (in the simulator, the coordinator's
        // node crashed): c learns of the takeover only from its own lease.
        net.lose = Some(|msg| {
            matches!(
                msg,
                Protocol::HandOverDone { .. } | Protocol::ShardsRevoked { .. }
            )
        });
        net.freeze(&c);
        net.advance(Duration::from_secs(12));
        for e in &waiting {
            net.tell(&b, e, 3);
        }
        net.advance(Duration::from_secs(2));
        net.thaw(&c);
        net.advance(Duration::from_secs(40));
        let on_c_late: Vec<_> = net.delivered[delivered_before..]
            .iter()
            .filter(|(at, _, _)| *at == c)
            .collect();
        assert!(
            on_c_late.is_empty(),
            "seed {seed}: delivered on c after its freeze: {on_c_late:?}"
        );
        for ((sender, entity), seqs) in net.per_sender() {
            assert!(
                seqs.windows(2).all(|w| w[0] < w[1]),
                "seed {seed}: {entity} got {seqs:?} from {sender}"
            );
        }
        for e in &waiting {
            assert!(
                net.delivered
                    .iter()
                    .any(|(_, d, m)| **d == ***e && *m == (b.clone(), 3)),
                "seed {seed}: {e}: b's later message was not delivered"
            );
        }
        assert!(
            net.dropped.iter().any(|((from, seq), reason)| *from == b
                && *seq == 2
                && *reason == DropReason::LeaseLapsed),
            "seed {seed}: b's held messages were not dropped: {:?}",
            net.dropped
        );
        assert!(
            net.violations.is_empty(),
            "seed {seed}: {:#?}",
            net.violations
        );
    }
    assert!(
        held_somewhere >= 10,
        "{held_somewhere} seeds held messages for a marker"
    );
}

/// The oldest node, which runs the coordinator, freezes: once the store says its coordinator
/// lease has run out, the next oldest stands in (`ShardingView::stand_in`), and the frozen
/// node's shards are given homes anew when asked for, all while it is still a member. When it
/// runs again it gives up what was taken, the coordinator goes back to it, and no sender's
/// messages arrive out of order anywhere.
#[test]
fn a_frozen_oldest_nodes_coordinator_and_shards_move_once_their_leases_lapse() {
    for seed in 0..10 {
        let (mut net, [a, b, c]) = three_leased_nodes(400 + seed, true);
        assert!(
            net.coordinator(&a).is_some(),
            "the oldest runs the coordinator"
        );
        let on_a = shards_on(&net, &a);
        assert!(
            !on_a.is_empty(),
            "seed {seed}: the frozen node must host something"
        );
        let entities = entities_of(&net, &on_a);
        // b and c learn where a's shards are: they will route there, and tell the stand-in.
        for e in &entities {
            net.tell(&b, e, 1);
            net.tell(&c, e, 1);
        }
        net.advance(Duration::from_secs(1));
        net.freeze(&a);
        // Well within the lease's time to live: nothing moves, no second coordinator.
        net.advance(Duration::from_secs(3));
        assert!(net.coordinator(&b).is_none(), "seed {seed}: stood in early");
        // Past it: b runs the coordinator, and a's entities answer from b and c.
        net.advance(Duration::from_secs(6));
        assert!(
            net.coordinator(&b).is_some(),
            "seed {seed}: nobody stood in"
        );
        let before = net.delivered.len();
        for e in &entities {
            net.tell(&b, e, 2);
            net.tell(&c, e, 2);
        }
        net.advance(Duration::from_secs(3));
        let answered = net.delivered[before..]
            .iter()
            .filter(|(at, _, _)| *at == b || *at == c)
            .count();
        assert_eq!(
            answered,
            2 * entities.len(),
            "seed {seed}: dropped {:?}",
            net.dropped
        );
        // Heard again: it gives the shards up, and the coordinator comes back to it.
        net.thaw(&a);
        net.advance(Duration::from_secs(15));
        assert!(net.coordinator(&b).is_none(), "seed {seed}: b kept it");
        assert!(
            net.coordinator(&a).is_some(),
            "seed {seed}: a did not take it back"
        );
        for e in &entities {
            net.tell(&a, e, 3);
            net.tell(&b, e, 3);
        }
        net.advance(Duration::from_secs(5));
        for ((sender, entity), seqs) in net.per_sender() {
            assert!(
                seqs.windows(2).all(|w| w[0] < w[1]),
                "seed {seed}: {entity} got {seqs:?} from {sender}"
            );
            if sender == b && entities.contains(&entity.to_string()) {
                assert!(
                    seqs.ends_with(&[2, 3]),
                    "seed {seed}: {entity} got {seqs:?}; dropped {:?}; hosts {:?}; shard {}",
                    net.dropped,
                    net.hosts(),
                    net.shard_of(&entity)
                );
            }
        }
        assert!(
            net.violations.is_empty(),
            "seed {seed}: {:#?}",
            net.violations
        );
    }
}

/// A region that missed the stand-in's announcement (lost here; in a cluster, one that came
/// before this region saw the oldest go quiet, and was ignored) registers with the stand-in
/// anyway, at once, rather than at the stand-in's next announcement a rebalance interval (10
/// s) later: the frozen node's entities answer through it within seconds.
#[test]
fn a_region_that_missed_the_stand_ins_announcement_registers_with_it_at_once() {
    let (mut net, [a, b, c]) = three_leased_nodes(410, true);
    let entities = entities_of(&net, &shards_on(&net, &a));
    for e in &entities {
        net.tell(&c, e, 1);
    }
    net.advance(Duration::from_secs(1));
    net.lose = Some(|p| matches!(p, Protocol::CoordinatorStarted { .. }));
    net.freeze(&a);
    net.advance(Duration::from_secs(9));
    assert!(net.coordinator(&b).is_some(), "nobody stood in");
    let before = net.delivered.len();
    for e in &entities {
        net.tell(&c, e, 2);
    }
    net.advance(Duration::from_secs(3));
    let answered = net.delivered[before..]
        .iter()
        .filter(|(at, _, _)| *at == b || *at == c)
        .count();
    assert_eq!(answered, entities.len(), "dropped {:?}", net.dropped);
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
}

/// The oldest node cut off from its peers but not from the store keeps renewing its
/// coordinator lease: nobody stands in (the next oldest tries, and the store refuses), and its
/// shards stay where they are, however long the resolver takes.
#[test]
fn an_oldest_node_cut_off_from_its_peers_but_not_from_the_store_keeps_its_coordinator() {
    let (mut net, [a, b, _]) = three_leased_nodes(6, true);
    let on_a = shards_on(&net, &a);
    net.cut_off(&a);
    net.advance(Duration::from_secs(30));
    assert!(
        net.coordinator(&b).is_none(),
        "b stood in for a live coordinator"
    );
    assert!(net.coordinator(&a).is_some(), "a lost its coordinator");
    assert_eq!(shards_on(&net, &a), on_a);
    assert!(net.leases_lost.is_empty(), "{:?}", net.leases_lost);
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
}

/// Without the takeover (leases, but not on both shards and coordinator) nobody stands in.
#[test]
fn without_the_takeover_nobody_stands_in_for_a_frozen_oldest_node() {
    let (mut net, [a, b, c]) = three_leased_nodes(7, false);
    net.freeze(&a);
    net.advance(Duration::from_secs(30));
    assert!(net.coordinator(&b).is_none() && net.coordinator(&c).is_none());
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
}

/// The oldest node leaves gracefully (a rolling update) while a shard it placed on another
/// node still waits there for its lease: the next coordinator finds it where it is, and what
/// waits for it is delivered once the lease is granted. Only a coordinator that stood in for a
/// silent node makes a region give up such shards when it goes (the rolling-update test's
/// flake: they were given up and their messages dropped, and the new-version node that had
/// just joined was given them).
#[test]
fn a_graceful_coordinator_hand_over_keeps_a_shard_waiting_for_its_lease_and_its_messages() {
    for seed in 0..10 {
        let mut net = Net::new(600 + seed, HandOffMode::Forward);
        net.lease_timing = Some(timing());
        net.coordinator_settings.lease_takeover = Some(timing());
        let a = net.add(1, false);
        let b = net.add(2, false);
        let c = net.add(3, false);
        net.advance(Duration::from_secs(3));
        let entity = format!("e{seed}");
        let shard = net.shard_of(&entity);
        // Someone else holds its lease for a while: wherever it is placed, it waits.
        net.leases.insert(
            LeaseKey::Shard(shard.clone()),
            StoredLease {
                owner: Some(node(50)),
                token: 1,
                expires: net.now + Duration::from_secs(5),
            },
        );
        net.tell(&b, &entity, 1);
        net.tell(&c, &entity, 1);
        net.advance(Duration::from_millis(500));
        let home = net.region(&b).home_of(&shard).cloned();
        assert!(home.is_some(), "seed {seed}: placed");
        assert!(
            net.delivered.is_empty(),
            "seed {seed}: ran without its lease"
        );
        // The oldest leaves: its own shards (if any) are handed off, it is removed, and b's
        // coordinator rebuilds the table from the registrations.
        net.graceful_shutdown(&a);
        net.set_status(&a, MemberStatus::Leaving);
        net.set_status(&a, MemberStatus::Exiting);
        net.advance(Duration::from_secs(2));
        net.set_status(&a, MemberStatus::Removed);
        net.advance(Duration::from_secs(1));
        assert!(net.coordinator(&b).is_some(), "seed {seed}: b took over");
        // The lease is free by now: both messages are delivered, where the shard was placed
        // (or, if that was the leaving node, where it was handed off to).
        net.advance(Duration::from_secs(5));
        assert!(net.dropped.is_empty(), "seed {seed}: {:?}", net.dropped);
        assert_eq!(net.delivered.len(), 2, "seed {seed}");
        if home != Some(a.clone()) {
            let hosts = net.hosts().get(&shard).cloned().unwrap_or_default();
            assert_eq!(
                hosts,
                home.into_iter().collect(),
                "seed {seed}: the shard stayed where it was placed"
            );
        }
        assert!(
            net.violations.is_empty(),
            "seed {seed}: {:#?}",
            net.violations
        );
    }
}
