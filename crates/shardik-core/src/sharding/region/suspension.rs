//! Self-fencing: a node that has not seen a majority stops its shards' entities and keeps
//! the shards waiting, as for a lease, until the fence opens.

use super::hosted::Hosted;
use super::{Region, RegionEffect};
use crate::Instant;
use crate::membership::UniqueAddress;
use crate::sharding::shard_id::ShardId;
use crate::sharding::view::ShardingView;

impl<M> Region<M> {
    /// Self-fencing: stops every shard's entities at once and keeps the shards hosted but
    /// waiting, as for a lease, so that messages for them wait here and the hand-off protocol
    /// still answers for them; nothing runs until [`resume`](Self::resume).
    pub fn suspend(&mut self, out: &mut Vec<RegionEffect<M>>) {
        if self.suspended || self.stopped {
            return;
        }
        self.suspended = true;
        let running: Vec<ShardId> = self
            .hosted
            .keys()
            .filter(|s| {
                matches!(
                    self.hosted.get(s),
                    Some(Hosted::Running | Hosted::AwaitingPredecessor { .. })
                )
            })
            .cloned()
            .collect();
        for shard in running {
            out.push(RegionEffect::ForceStopEntities(shard.clone()));
            out.push(RegionEffect::ShardStopped(shard.clone()));
            self.park(&shard, None);
        }
    }

    /// The self-fence opened: the shards waiting for it start again (those under a lease
    /// once it is held).
    pub fn resume(&mut self, now: Instant, view: &ShardingView, out: &mut Vec<RegionEffect<M>>) {
        if !self.suspended {
            return;
        }
        self.suspended = false;
        let waiting: Vec<(ShardId, Option<UniqueAddress>)> = self
            .hosted
            .iter_mut()
            .filter_map(|(s, st)| match st {
                Hosted::AwaitingLease { predecessor, .. } => Some((s.clone(), predecessor.clone())),
                _ => None,
            })
            .collect();
        for (shard, predecessor) in waiting {
            if self.needs_lease(now, &shard) {
                if let Some(keeper) = &mut self.leases {
                    let mut calls = Vec::new();
                    keeper.want(now, shard, &mut calls);
                    out.extend(calls.into_iter().map(RegionEffect::Lease));
                }
                continue;
            }
            if let Some(token) = self.lease_token(now, &shard) {
                out.push(RegionEffect::ShardLeased {
                    shard: shard.clone(),
                    token,
                });
            }
            self.activate(now, shard, predecessor, view, out);
        }
    }
}
