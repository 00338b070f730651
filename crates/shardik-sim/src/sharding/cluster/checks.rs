//! Checks that need the whole world rather than one node's events: copies of a shard fenced
//! off by their lapsed leases, shards taken from a node that still held their leases, and
//! coordinators that nobody has disowned.

use std::collections::BTreeSet;

use shardik_core::Instant;
use shardik_core::membership::{MemberStatus, UniqueAddress};
use shardik_core::sharding::ShardId;

use super::ShardingWorld;
use crate::world::NodeId;

impl ShardingWorld {
    /// With leases, a copy of `shard` on a node whose lease on it has passed its deadline can
    /// no longer act (a paused node checks its lease before delivering anything, and its
    /// writes carry an older fence): such copies stop counting as live before a new holder
    /// starts the shard. Copies whose node still holds the lease keep counting.
    pub(super) fn fence_stale_copies(&mut self, kind: usize, shard: &ShardId) {
        if self.cfg.leases().is_none() {
            return;
        }
        let now = self.now();
        let Some(hosts) = self.checker.hosts_of(kind, shard) else {
            return;
        };
        let stale: Vec<UniqueAddress> = hosts
            .iter()
            .filter(|node| {
                self.by_node
                    .get(*node)
                    .and_then(|&id| self.slots[id].layer.as_ref())
                    .filter(|l| l.me() == *node)
                    .and_then(|l| l.region(kind).lease_deadline(shard))
                    .is_some_and(|deadline| deadline <= now)
            })
            .cloned()
            .collect();
        for node in stale {
            self.checker.fenced(kind, &node, shard);
        }
    }

    /// A coordinator took `shards` from `region`'s node because the store said their leases
    /// had lapsed: that node's own lease keeper must not count on any of them any more.
    pub(super) fn check_taken(
        &mut self,
        kind: usize,
        coordinator: &UniqueAddress,
        region: &UniqueAddress,
        shards: &[ShardId],
    ) {
        let now = self.now();
        self.shards_taken_over += shards.len();
        let Some(layer) = self
            .by_node
            .get(region)
            .and_then(|&id| self.slots[id].layer.as_ref())
            .filter(|l| l.me() == region)
        else {
            return; // that incarnation is gone: it serves nothing
        };
        let held: Vec<(ShardId, Instant)> = shards
            .iter()
            .filter_map(|s| {
                let deadline = layer.region(kind).lease_deadline(s)?;
                (deadline > now).then(|| (s.clone(), deadline))
            })
            .collect();
        for (shard, deadline) in held {
            self.checker
                .taken_while_held(now, kind, coordinator, region, &shard, deadline);
        }
    }

    /// Checks (d) of the [checker](super::checker): coordinators nobody has disowned.
    pub(super) fn check_coordinators(&mut self) {
        let now = self.now();
        for kind in 0..self.cfg.kinds.len() {
            // A paused node runs nothing, its coordinator included: the one standing in for it
            // (under leases) is the only one at work, and the paused one stops its own before
            // doing anything once it runs again, its lease having lapsed meanwhile. So a
            // coordinator whose lease is past its deadline does not count either: its pause may
            // be over while its node has not run yet (the world's events at the instant the
            // pause ends come before the node's own, the reliable sweep's seed 834).
            let running: Vec<(NodeId, UniqueAddress)> = self
                .slots
                .iter()
                .enumerate()
                .filter(|(id, _)| self.world.paused_until(*id).is_none())
                .filter_map(|(id, s)| {
                    let l = s.layer.as_ref()?;
                    let lapsed = l
                        .coordinator_lease_deadline(kind)
                        .is_some_and(|deadline| deadline <= now);
                    l.coordinator(kind)
                        .filter(|_| !lapsed)
                        .map(|_| (id, l.me().clone()))
                })
                .collect();
            if running.len() < 2 {
                self.checker.coordinators(now, kind, BTreeSet::new());
                continue;
            }
            let legitimate = running
                .into_iter()
                .filter(|(_, node)| self.undisputed(node))
                .map(|(_, node)| node)
                .collect();
            self.checker.coordinators(now, kind, legitimate);
        }
    }

    /// Whether no node has removed `node` and no live node sees it Down.
    fn undisputed(&self, node: &UniqueAddress) -> bool {
        if self.world.stats().removed_members.contains(node) {
            return false;
        }
        self.world.alive_nodes().into_iter().all(|i| {
            self.world
                .core(i)
                .gossip()
                .member(node)
                .is_none_or(|m| m.status != MemberStatus::Down)
        })
    }
}
