//! Unit tests of the threshold strategy: the reference spec's cases for both thresholds.

use super::super::test_support::*;
use super::super::{AllocationSnapshot, ShardAllocationStrategy};
use super::*;
use crate::membership::member::MemberStatus;

// The vectors below are DeprecatedLeastShardAllocationStrategySpec's, regions A, B, C; in
// those the C shards are numbered after A's and B's, as our `abc` fixture does.

fn strategy(threshold: u32, max: u32) -> ThresholdShardAllocationStrategy {
    ThresholdShardAllocationStrategy::new(threshold, max)
}

fn check(
    s: &mut ThresholdShardAllocationStrategy,
    snapshot: &AllocationSnapshot<&'static str>,
    steps: &[(&[&str], &[&str])],
) {
    for (in_progress, expected) in steps {
        assert_eq!(
            s.rebalance(snapshot, &set(in_progress)),
            set(expected),
            "in progress {in_progress:?}"
        );
    }
}

#[test]
fn allocate_to_region_with_least_shards() {
    assert_eq!(
        strategy(3, 10).allocate_shard(&"A", &shard(3), &abc(1, 1, 0)),
        Some("C")
    );
}

#[test]
fn t1_2_0_0() {
    check(
        &mut strategy(1, 10),
        &abc(2, 0, 0),
        &[(&[], &["001"]), (&["001"], &[])],
    );
}

#[test]
fn t1_not_when_difference_equals_threshold_1_1_0() {
    check(&mut strategy(1, 10), &abc(1, 1, 0), &[(&[], &[])]);
}

#[test]
fn t1_1_2_0() {
    check(
        &mut strategy(1, 10),
        &abc(1, 2, 0),
        &[(&[], &["002"]), (&["002"], &[])],
    );
}

#[test]
fn t1_3_0_0() {
    check(
        &mut strategy(1, 10),
        &abc(3, 0, 0),
        &[(&[], &["001"]), (&["001"], &["002"])],
    );
}

#[test]
fn t1_4_4_0() {
    check(
        &mut strategy(1, 10),
        &abc(4, 4, 0),
        &[(&[], &["001"]), (&["001"], &["005"])],
    );
}

/// "not optimal, 005 stopped and started again, but ok" (the spec's own comment).
#[test]
fn t1_4_4_2() {
    check(
        &mut strategy(1, 10),
        &abc(4, 4, 2),
        &[(&[], &["001"]), (&["001"], &["005"])],
    );
}

#[test]
fn t2_1_2_0_then_1_3_0() {
    let mut s = strategy(2, 10);
    check(&mut s, &abc(1, 2, 0), &[(&[], &[])]);
    check(&mut s, &abc(1, 3, 0), &[(&[], &["002"]), (&["002"], &[])]);
}

#[test]
fn t2_not_when_difference_equals_threshold_2_2_0() {
    check(&mut strategy(2, 10), &abc(2, 2, 0), &[(&[], &[])]);
}

#[test]
fn t2_3_3_0() {
    check(
        &mut strategy(2, 10),
        &abc(3, 3, 0),
        &[
            (&[], &["001"]),
            (&["001"], &["004"]),
            (&["001", "004"], &[]),
        ],
    );
}

#[test]
fn t2_4_4_0() {
    check(
        &mut strategy(2, 10),
        &abc(4, 4, 0),
        &[
            (&[], &["001", "002"]),
            (&["001", "002"], &["005", "006"]),
            (&["001", "002", "005", "006"], &[]),
        ],
    );
}

#[test]
fn t2_5_5_0() {
    check(
        &mut strategy(2, 10),
        &abc(5, 5, 0),
        &[
            (&[], &["001", "002"]),
            (&["001", "002"], &["006", "007"]),
            (&["001", "002", "006", "007"], &["003"]),
        ],
    );
}

#[test]
fn t2_50_0_50() {
    let snapshot = AllocationSnapshot::new()
        .with_region("A", Some(up(1)), shards(1..51))
        .with_region("B", Some(up(2)), shards(0..0))
        .with_region("C", Some(up(3)), shards(51..101));
    check(
        &mut strategy(2, 100),
        &snapshot,
        &[
            (&[], &["001", "002"]),
            (&["001", "002"], &["051", "052"]),
            (&["001", "002", "051", "052"], &["003", "004"]),
        ],
    );
}

#[test]
fn limits_simultaneous_rebalance_1_10_0() {
    check(
        &mut strategy(3, 2),
        &abc(1, 10, 0),
        &[(&[], &["002", "003"]), (&["002", "003"], &[])],
    );
}

#[test]
fn does_not_pick_shards_in_progress_10_0_0() {
    check(
        &mut strategy(3, 4),
        &abc(10, 0, 0),
        &[(&["002", "003"], &["001", "004"])],
    );
}

/// Shards are picked by id order, not allocation order.
#[test]
fn picks_smallest_ids_first() {
    let snapshot = AllocationSnapshot::new()
        .with_region("A", Some(up(1)), ["z", "b", "y", "a"])
        .with_region("B", Some(up(2)), shards(0..0));
    check(&mut strategy(2, 10), &snapshot, &[(&[], &["a", "b"])]);
}

#[test]
fn not_during_rolling_update() {
    let snapshot = AllocationSnapshot::new()
        .with_region(
            "A",
            Some(member(1, MemberStatus::Up, "1.0.0")),
            shards(1..6),
        )
        .with_region(
            "B",
            Some(member(2, MemberStatus::Up, "1.0.1")),
            shards(6..11),
        )
        .with_region(
            "C",
            Some(member(3, MemberStatus::Up, "1.0.0")),
            shards(0..0),
        );
    check(
        &mut strategy(2, 100),
        &snapshot,
        &[
            (&[], &[]),
            (&["001", "002"], &[]),
            (&["001", "002", "051", "052"], &[]),
        ],
    );
}

#[test]
fn not_with_unreachable_members() {
    let snapshot = abc(5, 5, 0).with_unreachable_members(true);
    check(
        &mut strategy(2, 100),
        &snapshot,
        &[
            (&[], &[]),
            (&["001", "002"], &[]),
            (&["001", "002", "051", "052"], &[]),
        ],
    );
}

#[test]
fn not_with_joining_members() {
    let snapshot = abc(5, 5, 0).with_joining_members(true);
    check(
        &mut strategy(2, 100),
        &snapshot,
        &[
            (&[], &[]),
            (&["001", "002"], &[]),
            (&["001", "002", "051", "052"], &[]),
        ],
    );
}

#[test]
fn zero_threshold_or_cap_disables_rebalance() {
    check(&mut strategy(0, 10), &abc(10, 0, 0), &[(&[], &[])]);
    check(&mut strategy(3, 0), &abc(10, 0, 0), &[(&[], &[])]);
}
