//! Region and coordinator working together, through the in-memory test network. Shards under
//! leases (`tests/lease.rs`) and a cluster preparing for a full shutdown
//! (`tests/full_shutdown.rs`) have files of their own.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::membership::MemberStatus;
use crate::sharding::region::{DropReason, HandOffMode};
use crate::sharding::testkit::{Net, node};

fn entities(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("e{i}")).collect()
}

/// Three regions on nodes 1, 2 and 3 (node 1 the oldest, so the coordinator's), with `count`
/// entities each told message 1 through node 3 and the network settled.
fn three_regions_with_entities(
    seed: u64,
    count: usize,
) -> (Net, [crate::membership::UniqueAddress; 3], Vec<String>) {
    let mut net = Net::new(seed, HandOffMode::Forward);
    let nodes = [net.add(1, false), net.add(2, false), net.add(3, false)];
    net.advance(Duration::from_millis(10));
    let ids = entities(count);
    for e in &ids {
        net.tell(&nodes[2], e, 1);
    }
    net.settle();
    (net, nodes, ids)
}

/// Every message told was delivered exactly once and in order per sender and entity.
fn assert_all_delivered_in_order(net: &Net, expected_per_sender_entity: u64) {
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
    for ((from, e), seqs) in net.per_sender() {
        let want: Vec<u64> = (1..=expected_per_sender_entity).collect();
        assert_eq!(seqs, want, "messages from {from} to {e}");
    }
}

#[test]
fn first_message_allocates_and_delivers_at_the_home() {
    let mut net = Net::new(1, HandOffMode::Forward);
    let a = net.add(1, false);
    let b = net.add(2, false);
    net.advance(Duration::from_millis(10));
    assert_eq!(net.coordinator(&a).map(|c| c.is_complete()), Some(true));
    assert!(net.coordinator(&b).is_none(), "only the oldest hosts it");
    for e in entities(20) {
        net.tell(&b, &e, 1);
    }
    net.settle();
    assert_all_delivered_in_order(&net, 1);
    assert_eq!(net.delivered.len(), 20);
    // Every delivery happened where the shard is hosted, and shards went to both nodes.
    let used: BTreeSet<_> = net.hosts().values().flatten().cloned().collect();
    assert_eq!(used, [a, b].into());
}

#[test]
fn a_proxy_routes_but_never_hosts() {
    let mut net = Net::new(2, HandOffMode::Forward);
    let a = net.add(1, false);
    let p = net.add(2, true);
    net.advance(Duration::from_millis(10));
    for e in entities(10) {
        net.tell(&p, &e, 1);
    }
    net.settle();
    assert_all_delivered_in_order(&net, 1);
    assert!(net.hosts().values().all(|h| h.contains(&a)));
    assert_eq!(net.region(&p).hosted_shards().count(), 0);
}

/// Rebalance to a new node while every node keeps sending: forwarding mode loses nothing and
/// keeps each sender's order.
#[test]
fn rebalance_under_load_in_forward_mode_loses_nothing() {
    for seed in 0..20 {
        let mut net = Net::new(seed, HandOffMode::Forward);
        let (c, seq) = net.rebalance_to_a_third_node_under_load(Duration::from_millis(10));
        assert!(net.dropped.is_empty(), "seed {seed}: {:?}", net.dropped);
        assert!(
            net.violations.is_empty(),
            "seed {seed}: {:#?}",
            net.violations
        );
        let on_c = net.hosts().values().filter(|h| h.contains(&c)).count();
        assert!(on_c >= 2, "seed {seed}: the new node got shards ({on_c})");
        for ((from, e), seqs) in net.per_sender() {
            let first = if from == c { 4 } else { 1 };
            let want: Vec<u64> = (first..=seq).collect();
            assert_eq!(seqs, want, "seed {seed}: {from} → {e}");
        }
    }
}

/// The reference's mode drops what the old home buffered, but reports every drop, and never
/// reorders.
#[test]
fn rebalance_in_drop_mode_reports_drops_and_keeps_order() {
    let mut total_dropped = 0;
    for seed in 0..20 {
        let mut net = Net::new(seed, HandOffMode::Drop);
        net.coordinator_settings.rebalance_interval = Duration::from_secs(1);
        let a = net.add(1, false);
        let b = net.add(2, false);
        net.advance(Duration::from_millis(10));
        let ids = entities(30);
        let mut told = 0;
        for e in &ids {
            net.tell(&a, e, 0);
            told += 1;
        }
        net.settle();
        let _c = net.add(3, false);
        for seq in 1..=40 {
            for e in &ids {
                net.tell(&a, e, seq);
                net.tell(&b, e, seq);
                told += 2;
            }
            for _ in 0..50 {
                net.step();
            }
            net.advance(Duration::from_millis(100));
        }
        net.advance(Duration::from_secs(5));
        assert!(
            net.violations.is_empty(),
            "seed {seed}: {:#?}",
            net.violations
        );
        assert!(net.dropped.iter().all(|(_, r)| *r == DropReason::HandOff));
        assert_eq!(net.delivered.len() + net.dropped.len(), told, "seed {seed}");
        for (_, seqs) in net.per_sender() {
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seed {seed}: order");
        }
        total_dropped += net.dropped.len();
    }
    assert!(total_dropped > 0, "the scenario exercises the drop path");
}

#[test]
fn graceful_shutdown_hands_off_every_shard() {
    let (mut net, [_, b, c], ids) = three_regions_with_entities(3, 40);
    assert!(net.hosts().values().any(|h| h.contains(&b)));
    net.graceful_shutdown(&b);
    for e in &ids {
        net.tell(&c, e, 2);
    }
    net.advance(Duration::from_secs(3));
    assert!(net.region(&b).is_stopped());
    assert!(net.hosts().values().all(|h| !h.contains(&b)));
    assert_all_delivered_in_order(&net, 2);
}

/// Two nodes leave at once, one of them the coordinator's: every shard ends up on the rest and
/// nothing is lost.
#[test]
fn two_nodes_leaving_at_once_including_the_coordinator() {
    for seed in 0..10 {
        let mut net = Net::new(seed, HandOffMode::Forward);
        let a = net.add(1, false);
        let b = net.add(2, false);
        let c = net.add(3, false);
        let d = net.add(4, false);
        net.advance(Duration::from_millis(10));
        let ids = entities(40);
        for e in &ids {
            net.tell(&d, e, 1);
        }
        net.settle();
        net.graceful_shutdown(&a);
        net.graceful_shutdown(&b);
        for e in &ids {
            net.tell(&c, e, 2);
        }
        net.advance(Duration::from_secs(3));
        assert!(net.region(&a).is_stopped() && net.region(&b).is_stopped());
        // Then they leave the cluster; the next oldest takes the coordinator over.
        net.set_status(&a, MemberStatus::Exiting);
        net.set_status(&b, MemberStatus::Exiting);
        net.set_status(&a, MemberStatus::Removed);
        net.set_status(&b, MemberStatus::Removed);
        net.advance(Duration::from_secs(3));
        assert!(net.coordinator(&c).is_some());
        for e in &ids {
            net.tell(&d, e, 3);
        }
        net.advance(Duration::from_secs(3));
        assert!(net.dropped.is_empty(), "seed {seed}: {:?}", net.dropped);
        let homes: BTreeSet<_> = net.hosts().values().flatten().cloned().collect();
        assert!(
            homes.is_subset(&[c.clone(), d.clone()].into()),
            "seed {seed}"
        );
        for ((_, e), seqs) in net.per_sender() {
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "seed {seed}: {e}");
        }
        let per_entity: usize = net.delivered.len();
        assert_eq!(per_entity, 3 * ids.len(), "seed {seed}");
        assert!(
            net.violations.is_empty(),
            "seed {seed}: {:#?}",
            net.violations
        );
    }
}

/// The coordinator's node crashes: the next oldest takes over after the margin, rebuilds the
/// table from the registrations, and keeps every surviving shard where it is.
#[test]
fn coordinator_crash_rebuilds_the_table_from_the_regions() {
    let mut net = Net::new(4, HandOffMode::Forward);
    let a = net.add(1, false);
    let b = net.add(2, false);
    let c = net.add(3, false);
    net.advance(Duration::from_millis(10));
    let ids = entities(60);
    for e in &ids {
        net.tell(&c, e, 1);
    }
    net.settle();
    let before = net.hosts();
    net.crash(&a);
    net.set_status(&a, MemberStatus::Down);
    net.advance(Duration::from_secs(1));
    assert!(
        net.coordinator(&b).is_none(),
        "waits while the old one may run"
    );
    net.set_status(&a, MemberStatus::Removed);
    net.advance(Duration::from_secs(1));
    assert!(net.coordinator(&b).is_none(), "waits for the margin");
    net.advance(Duration::from_secs(6));
    let coordinator = net.coordinator(&b).expect("took over");
    assert!(coordinator.is_complete());
    // Surviving shards stay put; the crashed node's shards are re-homed.
    for (shard, homes) in &before {
        if !homes.contains(&a) {
            assert_eq!(coordinator.state().home(shard), homes.iter().next());
        }
    }
    for e in &ids {
        net.tell(&c, e, 2);
    }
    net.advance(Duration::from_secs(3));
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
    let second: usize = net
        .delivered
        .iter()
        .filter(|(_, _, (_, s))| *s == 2)
        .count();
    assert_eq!(second, ids.len(), "every entity answered after fail-over");
    assert!(net.hosts().values().all(|h| !h.contains(&a)));
}

/// Messages for the shards of a member that crashed and was downed are held, not sent to it,
/// and reach the shards' new homes once the member is gone: none is lost on the way.
#[test]
fn messages_for_a_downed_members_shards_wait_for_their_new_home() {
    let (mut net, [_, b, c], ids) = three_regions_with_entities(14, 60);
    let on_b: Vec<&String> = ids
        .iter()
        .filter(|e| {
            let shard = net.shard_of(e);
            net.hosts().get(&shard).is_some_and(|h| h.contains(&b))
        })
        .collect();
    assert!(
        !on_b.is_empty(),
        "some entities live on the node that crashes"
    );
    net.crash(&b);
    net.set_status(&b, MemberStatus::Down);
    for e in &on_b {
        net.tell(&c, e, 2);
    }
    net.advance(Duration::from_secs(1));
    assert!(
        net.region(&c).buffered() >= on_b.len(),
        "held while the downed member may still run them"
    );
    net.set_status(&b, MemberStatus::Removed);
    net.advance(Duration::from_secs(10));
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
    let second = net
        .delivered
        .iter()
        .filter(|(_, _, (_, s))| *s == 2)
        .count();
    assert_eq!(second, on_b.len(), "every message reached the new home");
    assert!(net.dropped.is_empty(), "{:?}", net.dropped);
}

/// Allocation waits until the minimum number of regions has registered.
#[test]
fn min_nr_of_members_holds_allocation_back() {
    let mut net = Net::new(5, HandOffMode::Forward);
    net.coordinator_settings.min_members = 3;
    let a = net.add(1, false);
    let b = net.add(2, false);
    net.advance(Duration::from_millis(10));
    for e in entities(30) {
        net.tell(&b, &e, 1);
    }
    net.advance(Duration::from_secs(3));
    assert!(net.delivered.is_empty(), "nothing allocated with 2 of 3");
    let c = net.add(3, false);
    net.advance(Duration::from_secs(5));
    assert_eq!(net.delivered.len(), 30);
    let used: BTreeSet<_> = net.hosts().values().flatten().cloned().collect();
    assert_eq!(used, [a, b, c].into(), "spread over all three");
}

/// The buffer is bounded: overflow is reported as dropped, never silently lost.
#[test]
fn buffer_overflow_is_reported() {
    let mut net = Net::new(6, HandOffMode::Forward);
    net.region_settings.buffer_size = 5;
    let _a = net.add(1, false);
    let b = net.add(2, false);
    // No time has passed: b is not registered yet, so everything buffers.
    for seq in 1..=8 {
        net.tell(&b, "x", seq);
    }
    assert_eq!(net.dropped.len(), 3);
    assert!(
        net.dropped
            .iter()
            .all(|(_, r)| *r == DropReason::BufferFull)
    );
    net.advance(Duration::from_secs(3));
    assert_eq!(net.delivered.len(), 5);
}

/// A region on a downed node stops: its entities are gone and it no longer routes.
#[test]
fn a_downed_node_stops_its_region() {
    let mut net = Net::new(7, HandOffMode::Forward);
    let _a = net.add(1, false);
    let b = net.add(2, false);
    net.advance(Duration::from_millis(10));
    for e in entities(20) {
        net.tell(&b, &e, 1);
    }
    net.settle();
    net.set_status(&b, MemberStatus::Down);
    assert!(net.region(&b).is_stopped());
    assert!(net.hosts().values().all(|h| !h.contains(&b)));
    let _ = node(9);
}

mod full_shutdown;
mod lease;
