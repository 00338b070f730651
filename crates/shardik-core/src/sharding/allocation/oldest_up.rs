//! Every shard on the region of the oldest Up member: the strategy of singleton kinds (one
//! shard, one entity), which run where Akka's cluster singleton runs.

use std::collections::BTreeSet;

use super::{AllocationSnapshot, ShardAllocationStrategy, ShardId};
use crate::membership::member::MemberStatus;

/// Places every shard on the region of the oldest Up member (by up-number, as Akka's
/// singleton chooses), and moves shards that live anywhere else.
///
/// Regions on Leaving, Exiting or unknown members are never chosen: their shards leave with
/// the region's graceful hand-off, and the coordinator then asks this strategy for the new
/// home. Only regions the snapshot lists count, so with a role only members with the role do.
#[derive(Clone, Copy, Debug, Default)]
pub struct OldestUpStrategy;

impl OldestUpStrategy {
    fn oldest_up<R: Ord + Clone>(current: &AllocationSnapshot<R>) -> Option<&R> {
        current
            .regions()
            .filter_map(|e| {
                let m = e.member.as_ref()?;
                (m.status == MemberStatus::Up).then_some((m, &e.region))
            })
            .min_by(|(a, _), (b, _)| a.age_cmp(b))
            .map(|(_, region)| region)
    }
}

impl<R: Ord + Clone> ShardAllocationStrategy<R> for OldestUpStrategy {
    fn allocate_shard(
        &mut self,
        _requester: &R,
        _shard: &ShardId,
        current: &AllocationSnapshot<R>,
    ) -> Option<R> {
        Self::oldest_up(current).cloned()
    }

    fn rebalance(
        &mut self,
        current: &AllocationSnapshot<R>,
        in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId> {
        // A hand-off needs every region's acknowledgement (an unreachable member stalls it);
        // with unreachable members, wait, as the built-in strategies do.
        if current.unreachable_members {
            return BTreeSet::new();
        }
        let Some(oldest) = Self::oldest_up(current) else {
            return BTreeSet::new();
        };
        current
            .regions()
            // Leaving regions hand their shards off by themselves.
            .filter(|e| &e.region != oldest && !e.is_leaving())
            .flat_map(|e| e.shards.iter())
            .filter(|s| !in_progress.contains(*s))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
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
}
