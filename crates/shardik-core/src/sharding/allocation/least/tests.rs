//! Unit tests of the least-shard strategy: the reference spec's allocation and rebalance cases
//! and its per-round limits.

use super::super::test_support::*;
use super::super::{AllocationSnapshot, ShardAllocationStrategy};
use super::*;
use crate::membership::member::MemberStatus;

fn unlimited() -> LeastShardAllocationStrategy {
    LeastShardAllocationStrategy::new(1000, 1.0)
}

fn none() -> BTreeSet<ShardId> {
    BTreeSet::new()
}

/// Runs one round on `snapshot`, asserts the chosen shards and the per-region counts after
/// re-allocation, and returns the new allocation.
fn round(
    s: &mut LeastShardAllocationStrategy,
    snapshot: &AllocationSnapshot<&'static str>,
    expected: &[&str],
    expected_counts: &[usize],
) -> AllocationSnapshot<&'static str> {
    let moved = s.rebalance(snapshot, &none());
    assert_eq!(moved, set(expected));
    let next = after_rebalance(s, snapshot, &moved, &"A");
    assert_eq!(counts(&next), expected_counts);
    next
}

// The vectors below are LeastShardAllocationStrategySpec's (Pekko / Akka), regions A, B, C.

#[test]
fn allocate_to_region_with_least_shards() {
    assert_eq!(
        unlimited().allocate_shard(&"A", &shard(3), &abc(1, 1, 0)),
        Some("C")
    );
}

#[test]
fn rebalance_1_2_0() {
    round(&mut unlimited(), &abc(1, 2, 0), &["002"], &[1, 1, 1]);
}

#[test]
fn rebalance_2_0_0() {
    round(&mut unlimited(), &abc(2, 0, 0), &["001"], &[1, 1, 0]);
}

#[test]
fn no_rebalance_1_1_0() {
    assert_eq!(unlimited().rebalance(&abc(1, 1, 0), &none()), none());
}

#[test]
fn rebalance_3_0_0() {
    round(&mut unlimited(), &abc(3, 0, 0), &["001", "002"], &[1, 1, 1]);
}

#[test]
fn rebalance_4_4_0() {
    round(&mut unlimited(), &abc(4, 4, 0), &["001", "005"], &[3, 3, 2]);
}

/// Handled by phase 2: optimal is 4, nobody is above it, C is two below.
#[test]
fn rebalance_4_4_2_phase_2() {
    round(&mut unlimited(), &abc(4, 4, 2), &["001"], &[3, 4, 3]);
}

#[test]
fn rebalance_5_5_0_in_two_rounds() {
    let mut s = unlimited();
    let next = round(&mut s, &abc(5, 5, 0), &["001", "006"], &[4, 4, 2]);
    round(&mut s, &next, &["002"], &[3, 4, 3]);
}

#[test]
fn rebalance_50_0_50_in_two_rounds() {
    let mut s = unlimited();
    let start = AllocationSnapshot::new()
        .with_region("A", Some(up(1)), shards(1..51))
        .with_region("B", Some(up(2)), shards(0..0))
        .with_region("C", Some(up(3)), shards(51..101));
    let mut first: Vec<ShardId> = shards(1..17);
    first.extend(shards(51..67));
    let first: Vec<&str> = first.iter().map(|s| &**s).collect();
    let next = round(&mut s, &start, &first, &[34, 32, 34]);
    round(&mut s, &next, &["017"], &[33, 33, 34]);
}

#[test]
fn respects_absolute_limit() {
    let mut s = LeastShardAllocationStrategy::new(3, 1.0);
    round(&mut s, &abc(1, 9, 0), &["002", "003", "004"], &[2, 6, 2]);
}

#[test]
fn respects_relative_limit() {
    let mut s = LeastShardAllocationStrategy::new(5, 0.3);
    round(&mut s, &abc(1, 9, 0), &["002", "003", "004"], &[2, 6, 2]);
}

#[test]
fn not_while_a_rebalance_is_in_progress() {
    assert_eq!(
        unlimited().rebalance(&abc(10, 0, 0), &set(&["002", "003"])),
        none()
    );
}

/// Akka's phase-1 fix (akka/akka-core#32928): with a limit below the total excess, the most
/// overloaded region gives first. [0, 6, 9], optimal 5, limit 3: Pekko would move B's one
/// excess shard ("001") and two of C's; we move three of C's.
#[test]
fn phase_1_takes_from_most_overloaded_first() {
    let mut s = LeastShardAllocationStrategy::new(3, 1.0);
    round(&mut s, &abc(0, 6, 9), &["007", "008", "009"], &[3, 6, 6]);
}

#[test]
fn limit_formula() {
    let s = LeastShardAllocationStrategy::new(20, 0.1);
    assert_eq!(
        [0, 5, 10, 99, 150, 200, 1000].map(|n| s.limit(n)),
        [1, 1, 1, 9, 15, 20, 20]
    );
    assert_eq!(LeastShardAllocationStrategy::new(0, 0.5).limit(100), 1);
    assert_eq!(
        LeastShardAllocationStrategy::new(10, f64::NAN).limit(100),
        1
    );
    assert_eq!(LeastShardAllocationStrategy::new(10, -1.0).limit(100), 1);
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
    let mut s = unlimited();
    assert_eq!(s.rebalance(&snapshot, &none()), none());
    assert_eq!(s.rebalance(&snapshot, &set(&["001", "002"])), none());
}

#[test]
fn not_with_unreachable_members() {
    let snapshot = abc(5, 5, 0).with_unreachable_members(true);
    assert_eq!(unlimited().rebalance(&snapshot, &none()), none());
    assert_eq!(
        unlimited().rebalance(&abc(5, 5, 0), &none()),
        set(&["001", "006"])
    );
}

#[test]
fn not_with_joining_members() {
    let snapshot = abc(5, 5, 0).with_joining_members(true);
    assert_eq!(unlimited().rebalance(&snapshot, &none()), none());
}

#[test]
fn nothing_to_do_without_shards_or_regions() {
    assert_eq!(unlimited().rebalance(&abc(0, 0, 0), &none()), none());
    assert_eq!(
        unlimited().rebalance(&AllocationSnapshot::<&str>::new(), &none()),
        none()
    );
}

/// A region whose member is unknown is neither counted nor robbed: with it ignored, [4, 0]
/// over A and C moves two of A's shards.
#[test]
fn regions_with_unknown_members_are_ignored() {
    let snapshot = AllocationSnapshot::new()
        .with_region("A", Some(up(1)), shards(1..5))
        .with_region("B", None, shards(5..15))
        .with_region("C", Some(up(3)), shards(0..0));
    assert_eq!(
        unlimited().rebalance(&snapshot, &none()),
        set(&["001", "002"])
    );
}
