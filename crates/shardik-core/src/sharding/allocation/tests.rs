//! Unit tests of what every strategy shares: which regions suit a new shard, app versions, and
//! the settings that select the algorithm.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use super::test_support::*;
use super::*;
use crate::membership::member::MemberStatus;

/// Spec "prefer least shards, latest version, non downed, leaving or exiting nodes"
/// (LeastShardAllocationStrategySpec and DeprecatedLeastShardAllocationStrategySpec).
#[test]
fn suitability_order() {
    let snapshot = AllocationSnapshot::new()
        .with_region(
            "fewest",
            Some(member(3, MemberStatus::Up, "1.0.1")),
            shards(0..0),
        )
        .with_region(
            "leaving",
            Some(member(2, MemberStatus::Leaving, "1.0.0")),
            shards(0..0),
        )
        .with_region(
            "most",
            Some(member(5, MemberStatus::Up, "1.0.1")),
            ["ShardId2", "ShardId3"],
        )
        .with_region(
            "oldapp",
            Some(member(1, MemberStatus::Up, "1.0.0")),
            shards(0..0),
        )
        .with_region(
            "oneshard",
            Some(member(4, MemberStatus::Up, "1.0.1")),
            ["ShardId1"],
        );
    let order: Vec<&str> = snapshot
        .sorted_candidates()
        .iter()
        .map(|e| e.region)
        .collect();
    assert_eq!(order, ["fewest", "oneshard", "most", "oldapp", "leaving"]);
}

/// Leaving, Exiting and Down members all count as leaving; regions of unknown members are
/// skipped; with only leaving regions left the reference still allocates to one of them.
#[test]
fn allocation_avoids_leaving_and_unknown_regions() {
    for status in [
        MemberStatus::Leaving,
        MemberStatus::Exiting,
        MemberStatus::Down,
    ] {
        let snapshot = AllocationSnapshot::new()
            .with_region("A", Some(member(1, status, "1.0.0")), shards(0..0))
            .with_region("B", None, shards(0..0))
            .with_region("C", Some(up(3)), shards(1..6));
        let mut s = LeastShardAllocationStrategy::default();
        assert_eq!(
            s.allocate_shard(&"A", &shard(9), &snapshot),
            Some("C"),
            "{status}"
        );
        let mut t = ThresholdShardAllocationStrategy::default();
        assert_eq!(
            t.allocate_shard(&"A", &shard(9), &snapshot),
            Some("C"),
            "{status}"
        );
    }
    let only_leaving = AllocationSnapshot::new()
        .with_region(
            "A",
            Some(member(1, MemberStatus::Leaving, "1.0.0")),
            shards(0..0),
        )
        .with_region("B", None, shards(0..0));
    let mut s = LeastShardAllocationStrategy::default();
    assert_eq!(s.allocate_shard(&"B", &shard(1), &only_leaving), Some("A"));
    let nobody = AllocationSnapshot::<&str>::new().with_region("B", None, shards(0..0));
    assert_eq!(s.allocate_shard(&"B", &shard(1), &nobody), None);
    assert_eq!(
        s.allocate_shard(&"B", &shard(1), &AllocationSnapshot::new()),
        None
    );
}

/// A rolling update: new shards go to the newest version even if it holds more shards.
#[test]
fn allocation_prefers_newest_app_version() {
    let snapshot = AllocationSnapshot::new()
        .with_region(
            "A",
            Some(member(1, MemberStatus::Up, "1.9.0")),
            shards(0..0),
        )
        .with_region(
            "B",
            Some(member(2, MemberStatus::Up, "1.10.0")),
            shards(1..4),
        );
    let mut s = LeastShardAllocationStrategy::default();
    assert_eq!(s.allocate_shard(&"A", &shard(9), &snapshot), Some("B"));
}

/// Equal candidates: the smaller region id wins (deterministic tie-break).
#[test]
fn allocation_ties_go_to_smallest_region_id() {
    let mut s = LeastShardAllocationStrategy::default();
    assert_eq!(s.allocate_shard(&"C", &shard(7), &abc(2, 2, 2)), Some("A"));
    assert_eq!(s.allocate_shard(&"C", &shard(7), &abc(3, 2, 2)), Some("B"));
}

#[test]
fn app_version_order() {
    use Ordering::*;
    let cases = [
        ("1.0.0", "1.0.0", Equal),
        ("1.0", "1.0.0", Equal),
        ("1.9.0", "1.10.0", Less),
        ("2", "1.99.99", Greater),
        ("1.0.0-M1", "1.0.0", Less),
        ("1.0.0-M1", "1.0.0-M2", Less),
        ("0.0.0", "", Equal),
        ("1.0.a", "1.0.1", Greater),
    ];
    for (a, b, expected) in cases {
        assert_eq!(compare_app_versions(a, b), expected, "{a} vs {b}");
        assert_eq!(compare_app_versions(b, a), expected.reverse(), "{b} vs {a}");
    }
}

/// Our default is the new algorithm with absolute limit 20; absolute limit 0 selects the old
/// one, as the reference's rule does. Observed through behaviour: on [3, 0, 0] the new
/// algorithm moves two shards at once, the old one (threshold 1) only one.
#[test]
fn settings_select_the_algorithm() {
    let d = AllocationSettings::default();
    assert_eq!(
        (d.rebalance_absolute_limit, d.rebalance_relative_limit),
        (20, 0.1)
    );
    assert_eq!(
        (d.rebalance_threshold, d.max_simultaneous_rebalance),
        (1, 3)
    );
    let generous = AllocationSettings {
        rebalance_relative_limit: 1.0,
        ..d
    };
    let mut new = generous.strategy::<&str>();
    assert_eq!(
        new.rebalance(&abc(3, 0, 0), &BTreeSet::new()),
        set(&["001", "002"])
    );
    let old_settings = AllocationSettings {
        rebalance_absolute_limit: 0,
        ..generous
    };
    let mut old = old_settings.strategy::<&str>();
    assert_eq!(
        old.rebalance(&abc(3, 0, 0), &BTreeSet::new()),
        set(&["001"])
    );
}

mod randomized;
