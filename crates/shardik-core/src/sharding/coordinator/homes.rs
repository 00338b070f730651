//! Giving shards homes: answering a region that asks where a shard lives, allocating a new
//! home through the strategy among the regions that may take one, and re-homing the shards of
//! a region that went away (or retiring them while the cluster prepares for a full shutdown).

use super::{Coordinator, CoordinatorEffect, CoordinatorEvent, StateEvent};
use crate::Instant;
use crate::membership::UniqueAddress;
use crate::sharding::allocation::{AllocationSnapshot, RegionEntry, ShardAllocationStrategy};
use crate::sharding::protocol::Protocol;
use crate::sharding::shard_id::ShardId;
use crate::sharding::view::ShardingView;

impl<S: ShardAllocationStrategy<UniqueAddress>> Coordinator<S> {
    /// `requester` asks where `shard` lives: told at once when it has a home that is not going
    /// away; otherwise given one when allocation may begin (the new home, its predecessor and
    /// everyone who asked meanwhile are told); else noted, and answered once it has a home.
    pub(super) fn get_shard_home(
        &mut self,
        now: Instant,
        requester: &UniqueAddress,
        shard: ShardId,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        if let Some(h) = self.handoffs.get_mut(&shard) {
            h.deferred.insert(requester.clone());
            return;
        }
        if self.retired.contains(&shard) {
            // Its home went away while the cluster prepared for a full shutdown: it waits for
            // the cluster to start again (bounded: one entry per shard and region).
            self.wait_for_home(shard, requester);
            return;
        }
        if let Some(home) = self.state.home(&shard) {
            if !view.is_terminating(home) {
                let msg = Protocol::ShardHome {
                    shard,
                    region: home.clone(),
                };
                self.send(requester, msg, out);
            } else {
                self.wait_for_home(shard, requester);
            }
            return;
        }
        if !self.may_allocate() {
            self.wait_for_home(shard, requester);
            return; // the region asks again
        }
        let Some(home) = self.allocate(requester, &shard, view) else {
            self.wait_for_home(shard, requester);
            return;
        };
        if !self.apply(
            StateEvent::ShardHomeAllocated(shard.clone(), home.clone()),
            out,
        ) {
            return;
        }
        let predecessor = self.predecessors.remove(&shard);
        self.send(
            &home,
            Protocol::HostShard {
                shard: shard.clone(),
                predecessor: predecessor.clone(),
            },
            out,
        );
        self.unacked_hosts.insert(
            shard.clone(),
            (home.clone(), now + self.settings.shard_start_timeout),
        );
        let waiting = self.unanswered.remove(&shard).unwrap_or_default();
        let mut told = waiting.clone();
        told.insert(requester.clone());
        told.extend(predecessor.iter().cloned());
        self.announce_new_home(&shard, &home, &told, out);
        let answer = Protocol::ShardHome {
            shard,
            region: home.clone(),
        };
        if let Some(p) = predecessor.filter(|p| *p != home && p != requester) {
            self.send(&p, answer.clone(), out);
        }
        for region in waiting {
            if region != home && region != *requester {
                self.send(&region, answer.clone(), out);
            }
        }
        if *requester != home {
            self.send(requester, answer, out);
        }
    }

    /// Notes that `requester` asked for `shard`'s home and got no answer (bounded: one entry
    /// per shard and region).
    pub(super) fn wait_for_home(&mut self, shard: ShardId, requester: &UniqueAddress) {
        self.unanswered
            .entry(shard)
            .or_default()
            .insert(requester.clone());
    }

    /// Regions that may receive new shards: registered here, on an Up member with the role,
    /// not shutting down.
    pub(super) fn allocation_snapshot(
        &self,
        view: &ShardingView,
        candidates_only: bool,
    ) -> AllocationSnapshot<UniqueAddress> {
        let mut snapshot = AllocationSnapshot::new()
            .with_unreachable_members(view.any_unreachable())
            .with_joining_members(view.any_joining());
        for (region, shards) in self.state.regions() {
            let usable = self.registered.contains(region)
                && view.can_host(region)
                && !self.graceful.contains(region);
            if candidates_only && !usable {
                continue;
            }
            snapshot.insert(RegionEntry {
                region: region.clone(),
                member: view.member(region).cloned(),
                shards: shards.clone(),
            });
        }
        snapshot
    }

    fn allocate(
        &mut self,
        requester: &UniqueAddress,
        shard: &ShardId,
        view: &ShardingView,
    ) -> Option<UniqueAddress> {
        let snapshot = self.allocation_snapshot(view, true);
        if snapshot.is_empty() {
            return None;
        }
        let chosen = self.strategy.allocate_shard(requester, shard, &snapshot)?;
        // A custom strategy must pick one of the offered regions.
        snapshot.region(&chosen).map(|_| chosen)
    }

    pub(super) fn region_terminated(
        &mut self,
        now: Instant,
        region: &UniqueAddress,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        self.registered.remove(region);
        self.forget_taken(region);
        self.not_started.remove(region);
        self.announced.remove(region);
        self.graceful.remove(region);
        self.predecessors.retain(|_, p| p != region);
        // Hand-offs waiting on it: its ack counts as given; if it was the home, the shard is
        // stopped (its node is gone).
        let affected: Vec<ShardId> = self.handoffs.keys().cloned().collect();
        for shard in affected {
            let from_gone = self.handoffs.get_mut(&shard).is_some_and(|h| {
                h.acks_pending.remove(region);
                h.from == *region
            });
            if from_gone {
                self.hand_off_done(now, &shard, true, view, out);
            } else {
                self.progress_hand_off(now, &shard, view, out);
            }
        }
        if self.state.proxies().contains(region) {
            self.apply(StateEvent::ProxyTerminated(region.clone()), out);
        }
        let orphaned = self
            .state
            .regions()
            .get(region)
            .cloned()
            .unwrap_or_default();
        if self.state.has_region(region) {
            self.apply(StateEvent::RegionTerminated(region.clone()), out);
        }
        if self.preparing(view, out) {
            if !orphaned.is_empty() {
                out.push(CoordinatorEffect::Event(CoordinatorEvent::ShardsRetired {
                    region: region.clone(),
                    shards: orphaned.len(),
                }));
            }
            for shard in orphaned {
                self.unacked_hosts.remove(&shard);
                self.retired.insert(shard);
            }
            self.update_readiness(now, view, out);
            return;
        }
        for shard in orphaned {
            self.unacked_hosts.remove(&shard);
            let me = self.me.clone();
            self.get_shard_home(now, &me, shard, view, out);
        }
        self.update_readiness(now, view, out);
    }
}
