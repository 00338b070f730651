//! Shards under leases (`use-lease`), through the in-memory test network and its lease store.

use std::time::Duration;

use crate::Instant;
use crate::lease::LeaseTiming;
use crate::sharding::kind_node::LeaseKey;
use crate::sharding::region::{DropReason, HandOffMode};
use crate::sharding::shard_id::ShardId;
use crate::sharding::testkit::{Net, StoredLease, node};

fn timing() -> LeaseTiming {
    LeaseTiming {
        ttl: Duration::from_secs(10),
        renew_interval: Duration::from_secs(2),
        operation_timeout: Duration::from_secs(1),
        retry_interval: Duration::from_secs(3),
    }
}

fn leased_net(seed: u64) -> Net {
    let mut net = Net::new(seed, HandOffMode::Forward);
    net.lease_timing = Some(timing());
    net
}

/// Someone outside the test's nodes holds `key` until `until`.
fn held_by_stranger(net: &mut Net, key: LeaseKey, token: u64, until: Instant) {
    net.leases.insert(
        key,
        StoredLease {
            owner: Some(node(50)),
            token,
            expires: until,
        },
    );
}

#[test]
fn a_shard_runs_only_under_its_lease_and_its_writes_get_the_token() {
    let mut net = leased_net(1);
    let a = net.add(1, false);
    // The coordinator starts once it holds its lease; regions register on their next try.
    net.advance(Duration::from_secs(3));
    assert!(
        net.coordinator(&a).is_some(),
        "the coordinator took its lease"
    );
    net.tell(&a, "e1", 1);
    net.settle();
    let shard = net.shard_of("e1");
    assert_eq!(net.delivered.len(), 1);
    assert_eq!(net.lease_tokens.get(&(a.clone(), shard.clone())), Some(&1));
    let stored = &net.leases[&LeaseKey::Shard(shard.clone())];
    assert_eq!(stored.owner.as_ref(), Some(&a));
    // Renewed in the background for as long as it runs: still held a minute later.
    net.advance(Duration::from_secs(60));
    assert!(net.leases_lost.is_empty(), "{:?}", net.leases_lost);
    assert_eq!(net.region(&a).lease_token(net.now, &shard), Some(1));
    net.tell(&a, "e1", 2);
    net.settle();
    assert_eq!(net.delivered.len(), 2);
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
}

#[test]
fn a_lease_held_elsewhere_keeps_the_shard_waiting_until_it_expires() {
    let mut net = leased_net(2);
    let a = net.add(1, false);
    // The coordinator starts once it holds its lease; regions register on their next try.
    net.advance(Duration::from_secs(3));
    let shard = net.shard_of("e1");
    let until = net.now + Duration::from_secs(8);
    held_by_stranger(&mut net, LeaseKey::Shard(shard.clone()), 4, until);
    net.tell(&a, "e1", 1);
    net.advance(Duration::from_secs(7));
    assert!(
        net.delivered.is_empty(),
        "delivered under someone else's lease"
    );
    assert!(net.hosts().is_empty(), "not started: {:?}", net.hosts());
    net.advance(Duration::from_secs(5));
    assert_eq!(net.delivered.len(), 1, "delivered once the lease expired");
    assert_eq!(net.lease_tokens.get(&(a, shard)), Some(&5));
    assert!(net.dropped.is_empty());
}

#[test]
fn a_lost_lease_stops_the_entities_at_once_and_the_shard_waits_for_it_again() {
    let mut net = leased_net(3);
    let a = net.add(1, false);
    // The coordinator starts once it holds its lease; regions register on their next try.
    net.advance(Duration::from_secs(3));
    net.tell(&a, "e1", 1);
    net.settle();
    let shard = net.shard_of("e1");
    assert_eq!(net.delivered.len(), 1);
    // Taken behind the holder's back (as after a stall the store saw as expiry).
    let until = net.now + Duration::from_secs(8);
    held_by_stranger(&mut net, LeaseKey::Shard(shard.clone()), 2, until);
    net.advance(Duration::from_secs(3));
    assert_eq!(net.leases_lost, vec![(a.clone(), shard.clone())]);
    assert!(net.hosts().is_empty(), "stopped: {:?}", net.hosts());
    net.tell(&a, "e1", 2);
    net.advance(Duration::from_secs(4));
    assert_eq!(net.delivered.len(), 1, "waits while another holds it");
    net.advance(Duration::from_secs(8));
    assert_eq!(net.lease_tokens.get(&(a.clone(), shard)), Some(&3));
    // Another node held the shard in between (token 2): what waited here meanwhile may be older
    // than what it handled, so it is dropped and reported rather than delivered out of order.
    assert_eq!(net.delivered.len(), 1);
    assert_eq!(net.dropped.len(), 1, "{:?}", net.dropped);
    assert_eq!(net.dropped[0].1, DropReason::LeaseLapsed);
    net.tell(&a, "e1", 3);
    net.settle();
    assert_eq!(net.delivered.len(), 2, "runs again under the new tenure");
    assert_eq!(net.delivered[1].2.1, 3);
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
}

/// Simulator seed 262's fault, reduced: the holder is paused past its deadline, and another
/// node takes the shard and loses it in turn. The node's coordinator lease lapsed in the pause
/// too: its coordinator starts again, and its region, registering anew, gives up the shard
/// whose lease lapsed (`give_up_lapsed_shards`) rather than claim it. A message its own sender
/// sends on waking follows the shard to its next home (here again) and runs under a new
/// tenure, after everything the other node ran; nothing older runs late. (Messages other
/// nodes sent before the pause are dropped on waking: `routing_order.rs`.)
#[test]
fn a_paused_holder_gives_up_a_lapsed_shard_and_its_own_later_message_runs_under_a_new_tenure() {
    let mut net = leased_net(6);
    let a = net.add(1, false);
    net.advance(Duration::from_secs(3));
    net.tell(&a, "e1", 1);
    net.settle();
    let shard = net.shard_of("e1");
    // A pause: meanwhile another node held the lease (token 2) and its tenure ran out.
    net.now += Duration::from_secs(30);
    let lapsed_at = net.now;
    held_by_stranger(&mut net, LeaseKey::Shard(shard.clone()), 2, lapsed_at);
    net.tell(&a, "e1", 2);
    assert_eq!(net.leases_lost, vec![(a.clone(), shard.clone())]);
    net.advance(Duration::from_secs(5));
    // A tenure after the stranger's (token 2): its own, or one taken and given up on the way.
    let token = net.lease_tokens.get(&(a.clone(), shard)).copied();
    assert!(token.is_some_and(|t| t > 2), "{token:?}");
    let seqs: Vec<u64> = net.delivered.iter().map(|(_, _, (_, seq))| *seq).collect();
    assert_eq!(seqs, vec![1, 2], "dropped {:?}", net.dropped);
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
}

#[test]
fn with_the_lease_store_down_messages_are_refused_not_left_waiting() {
    let mut net = leased_net(4);
    let a = net.add(1, false);
    // The coordinator starts once it holds its lease; regions register on their next try.
    net.advance(Duration::from_secs(3));
    net.lease_store_down = true;
    net.tell(&a, "e1", 1);
    net.settle();
    assert!(net.delivered.is_empty());
    assert_eq!(net.dropped.len(), 1);
    assert_eq!(net.dropped[0].1, DropReason::LeaseUnavailable);
    // While the store stays down, what comes is refused at once.
    net.tell(&a, "e1", 2);
    assert_eq!(net.dropped.len(), 2);
    // The store comes back: the next attempt takes the lease.
    net.lease_store_down = false;
    net.advance(Duration::from_secs(4));
    net.tell(&a, "e1", 3);
    net.settle();
    assert_eq!(net.delivered.len(), 1);
    assert_eq!(net.delivered[0].2.1, 3);
}

#[test]
fn a_deadline_that_passed_while_timers_stood_still_is_caught_at_delivery() {
    let mut net = leased_net(5);
    let a = net.add(1, false);
    // The coordinator starts once it holds its lease; regions register on their next try.
    net.advance(Duration::from_secs(3));
    net.tell(&a, "e1", 1);
    net.settle();
    // A pause: time jumps past the deadline and no timer has run yet.
    net.now += Duration::from_secs(30);
    net.tell(&a, "e1", 2);
    let shard = net.shard_of("e1");
    assert_eq!(net.leases_lost, vec![(a.clone(), shard)]);
    assert_eq!(
        net.delivered.len(),
        1,
        "not delivered under an expired lease"
    );
    // Nobody held it in between: what waited is delivered under a new tenure. (The
    // coordinator's lease lapsed in the pause too: its region, registering anew, gives the
    // shard up and asks for it again, and its lease may be granted, given back and taken
    // again on the way, each retry a retry interval later.)
    net.advance(Duration::from_secs(10));
    assert_eq!(
        net.delivered.len(),
        2,
        "delivered under the new tenure; dropped {:?}",
        net.dropped
    );
    let token = net.lease_tokens.get(&(a, net.shard_of("e1"))).copied();
    assert!(token.is_some_and(|t| t >= 2), "{token:?}");
    assert!(net.dropped.is_empty(), "{:?}", net.dropped);
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
}

/// What reaches the entities without passing through the node (a finished handler, a store's
/// answer to a write, an entity's own timer) comes after the node judged the time
/// (`KindNode::catch_up`): after a pause, a shard whose lease lapsed meanwhile has its
/// entities stopped before any of them acts again. Without it, a passivation that finished
/// during the pause started a new incarnation for the commands queued behind it, under no
/// lease and while another node ran the shard (the reliable sweep's seeds 3298 and 4451).
#[test]
fn catching_up_after_a_pause_stops_a_lapsed_shard_before_its_entities_act() {
    let mut net = leased_net(7);
    let a = net.add(1, false);
    // The coordinator starts once it holds its lease; regions register on their next try.
    net.advance(Duration::from_secs(3));
    net.tell(&a, "e1", 1);
    net.settle();
    let shard = net.shard_of("e1");
    assert!(net.region(&a).runs_entities(net.now, &shard));
    // Nothing is due yet: catching up changes nothing.
    assert_eq!(net.catch_up(&a), 0);
    assert!(net.region(&a).lease_token(net.now, &shard).is_some());
    // A pause: time jumps past the deadline and no timer has run yet.
    net.now += Duration::from_secs(30);
    net.catch_up(&a);
    assert_eq!(net.leases_lost, vec![(a.clone(), shard.clone())]);
    assert!(!net.region(&a).runs_entities(net.now, &shard));
    assert_eq!(net.region(&a).lease_deadline(&shard), None);
    assert_eq!(net.delivered.len(), 1);
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
}

/// Rebalancing to a new node under load: each shard waits for the old home to give its lease
/// back, nothing runs twice, and forwarding still loses and reorders nothing.
#[test]
fn rebalance_under_leases_moves_each_lease_with_its_shard() {
    for seed in 0..10 {
        let mut net = leased_net(100 + seed);
        // The coordinator starts once it holds its lease; regions register on their next try.
        let (c, seq) = net.rebalance_to_a_third_node_under_load(Duration::from_secs(3));
        assert!(net.dropped.is_empty(), "seed {seed}: {:?}", net.dropped);
        assert!(
            net.violations.is_empty(),
            "seed {seed}: {:#?}",
            net.violations
        );
        let on_c: Vec<ShardId> = net
            .hosts()
            .into_iter()
            .filter(|(_, h)| h.contains(&c))
            .map(|(s, _)| s)
            .collect();
        assert!(on_c.len() >= 2, "seed {seed}: the new node got shards");
        for shard in &on_c {
            let stored = &net.leases[&LeaseKey::Shard(shard.clone())];
            assert_eq!(stored.owner.as_ref(), Some(&c), "seed {seed}: {shard}");
            assert!(stored.token >= 2, "seed {seed}: {shard} changed hands");
        }
        for ((from, e), seqs) in net.per_sender() {
            let first = if from == c { 4 } else { 1 };
            let want: Vec<u64> = (first..=seq).collect();
            assert_eq!(seqs, want, "seed {seed}: {from} → {e}");
        }
    }
}

#[test]
fn the_coordinator_starts_only_under_its_lease() {
    let mut net = leased_net(6);
    let until = Instant::from_millis(5_000);
    held_by_stranger(&mut net, LeaseKey::Coordinator, 7, until);
    let a = net.add(1, false);
    net.advance(Duration::from_secs(4));
    assert!(
        net.coordinator(&a).is_none(),
        "someone else holds its lease"
    );
    net.advance(Duration::from_secs(5));
    assert!(net.coordinator(&a).is_some());
    assert_eq!(net.leases[&LeaseKey::Coordinator].token, 8);
}
