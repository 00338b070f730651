//! Unit tests of the oldest-Up strategy.

use super::*;
use crate::membership::{Address, Member, UniqueAddress};

fn member(port: u16, status: MemberStatus, up: u32) -> (UniqueAddress, Member) {
    let addr = UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port));
    let mut m = Member::joining(addr.clone(), Default::default(), "");
    m.status = status;
    m.up_number = up;
    (addr, m)
}

#[test]
fn allocates_to_the_oldest_up_member_not_the_lowest_address() {
    let (a, ma) = member(1, MemberStatus::Up, 3);
    let (b, mb) = member(2, MemberStatus::Up, 1);
    let (c, mc) = member(3, MemberStatus::Leaving, 0);
    let snap = AllocationSnapshot::new()
        .with_region(a.clone(), Some(ma), Vec::<ShardId>::new())
        .with_region(b.clone(), Some(mb), Vec::<ShardId>::new())
        .with_region(c, Some(mc), Vec::<ShardId>::new());
    let chosen = OldestUpStrategy.allocate_shard(&a, &ShardId::from("s"), &snap);
    assert_eq!(
        chosen,
        Some(b),
        "up#1 beats up#3; the Leaving up#0 is skipped"
    );
}

#[test]
fn rebalances_to_an_older_member_but_not_from_a_leaving_one() {
    let (a, ma) = member(1, MemberStatus::Up, 3);
    let (b, mb) = member(2, MemberStatus::Up, 1);
    let snap = AllocationSnapshot::new()
        .with_region(a.clone(), Some(ma.clone()), ["s"])
        .with_region(b.clone(), Some(mb.clone()), Vec::<ShardId>::new());
    let moved = OldestUpStrategy.rebalance(&snap, &BTreeSet::new());
    assert_eq!(moved, BTreeSet::from([ShardId::from("s")]));
    // Already moving: not again.
    let moving = BTreeSet::from([ShardId::from("s")]);
    assert!(OldestUpStrategy.rebalance(&snap, &moving).is_empty());
    // At home on the oldest: stays.
    let home = AllocationSnapshot::new()
        .with_region(a.clone(), Some(ma.clone()), Vec::<ShardId>::new())
        .with_region(b.clone(), Some(mb.clone()), ["s"]);
    assert!(
        OldestUpStrategy
            .rebalance(&home, &BTreeSet::new())
            .is_empty()
    );
    // On a leaving member: its own hand-off moves it.
    let leaving = AllocationSnapshot::new()
        .with_region(
            a.clone(),
            Some(ma.with_status(MemberStatus::Leaving)),
            ["s"],
        )
        .with_region(b.clone(), Some(mb.clone()), Vec::<ShardId>::new());
    assert!(
        OldestUpStrategy
            .rebalance(&leaving, &BTreeSet::new())
            .is_empty()
    );
    // With an unreachable member: wait.
    let stalled = snap.with_unreachable_members(true);
    assert!(
        OldestUpStrategy
            .rebalance(&stalled, &BTreeSet::new())
            .is_empty()
    );
}

#[test]
fn nothing_to_choose_without_an_up_member() {
    let (a, ma) = member(1, MemberStatus::Leaving, 1);
    let (b, mb) = member(2, MemberStatus::WeaklyUp, u32::MAX);
    let snap = AllocationSnapshot::new()
        .with_region(a.clone(), Some(ma), Vec::<ShardId>::new())
        .with_region(b, Some(mb), Vec::<ShardId>::new());
    assert_eq!(
        OldestUpStrategy.allocate_shard(&a, &ShardId::from("s"), &snap),
        None
    );
}
