//! Regions and the coordinator while the cluster prepares for a full shutdown: no shard moves.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::membership::MemberStatus;
use crate::sharding::region::{DropReason, HandOffMode};
use crate::sharding::testkit::{Net, node};

/// A three-node cluster with 30 entities started, whose members then prepare.
fn prepared_cluster(mode: HandOffMode) -> Net {
    let mut net = Net::new(7, mode);
    net.coordinator_settings.rebalance_interval = Duration::from_secs(1);
    for i in 1..=3 {
        net.add(i, false);
    }
    net.advance(Duration::from_millis(10));
    for i in 0..30 {
        net.tell(&node(3), &format!("e{i}"), 1);
    }
    net.settle();
    for i in 1..=3 {
        net.set_status(&node(i), MemberStatus::PreparingForShutdown);
    }
    net.advance(Duration::from_millis(10));
    net
}

#[test]
fn a_new_member_gets_no_shard_by_rebalance_while_the_cluster_prepares() {
    let mut net = prepared_cluster(HandOffMode::Forward);
    let before = net.hosts();
    assert_eq!(
        before.values().flatten().collect::<BTreeSet<_>>().len(),
        3,
        "every node hosts shards: {before:?}"
    );
    // A member that is Up (as one moved up concurrently would be) is a rebalance target.
    let d = net.add(4, false);
    net.advance(Duration::from_secs(30));
    assert_eq!(net.hosts(), before, "nothing moved");
    assert_eq!(net.region(&d).hosted_shards().count(), 0);
    // The cluster still works: known shards answer.
    for i in 0..30 {
        net.tell(&d, &format!("e{i}"), 2);
    }
    net.settle();
    assert_eq!(net.delivered.len(), 60);
    assert!(net.violations.is_empty(), "{:#?}", net.violations);
}

#[test]
fn a_region_that_stops_while_preparing_stops_its_shards_where_they_are() {
    for mode in [HandOffMode::Forward, HandOffMode::Drop] {
        let mut net = prepared_cluster(mode);
        let before = net.hosts();
        let b = node(2);
        let on_b: BTreeSet<_> = before
            .iter()
            .filter(|(_, h)| h.contains(&b))
            .map(|(s, _)| s.clone())
            .collect();
        assert!(!on_b.is_empty());
        // Node 2 leaves (the operator stops it): its region stops in place.
        net.set_status(&b, MemberStatus::Leaving);
        net.advance(Duration::from_secs(1));
        assert!(
            net.region(&b).is_stopped(),
            "{mode:?}: stopped without a hand-off"
        );
        net.set_status(&b, MemberStatus::Removed);
        net.advance(Duration::from_secs(30));
        let after = net.hosts();
        for (shard, homes) in &before {
            if on_b.contains(shard) {
                assert_eq!(after.get(shard), None, "{mode:?}: {shard} got a new home");
            } else {
                assert_eq!(after.get(shard), Some(homes), "{mode:?}: {shard} moved");
            }
        }
        let coordinator = net.coordinator(&node(1)).expect("runs on node 1");
        assert_eq!(coordinator.retired(), &on_b);
        assert_eq!(coordinator.handoffs_in_progress().count(), 0);
        // Asking for a retired shard does not give it a home either; a message for it
        // waits at the asking region (bounded), and is reported when that region stops.
        let dropped_before = net.dropped.len();
        for i in 0..30 {
            net.tell(&node(1), &format!("e{i}"), 2);
        }
        net.advance(Duration::from_secs(10));
        assert_eq!(net.hosts(), after, "{mode:?}: no shard started");
        net.set_status(&node(1), MemberStatus::Leaving);
        net.set_status(&node(3), MemberStatus::Leaving);
        net.advance(Duration::from_secs(1));
        assert!(net.region(&node(1)).is_stopped() && net.region(&node(3)).is_stopped());
        assert!(net.hosts().is_empty(), "{mode:?}: {:?}", net.hosts());
        let waited = net.dropped[dropped_before..]
            .iter()
            .filter(|(_, reason)| *reason == DropReason::RegionStopped)
            .count();
        assert!(waited > 0, "{mode:?}: the waiting messages are reported");
        assert!(net.violations.is_empty(), "{mode:?}: {:#?}", net.violations);
    }
}
