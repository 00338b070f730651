//! Hosting a shard at its new home: starting it (after its lease, if any), and holding other
//! senders' messages behind what its predecessor forwards until the predecessor's hand-over
//! marker (or the hand-off limit, or the predecessor's departure).

use std::collections::VecDeque;

use super::hosted::Hosted;
use super::{Region, RegionEffect};
use crate::Instant;
use crate::membership::UniqueAddress;
use crate::sharding::protocol::Protocol;
use crate::sharding::shard_id::ShardId;
use crate::sharding::view::ShardingView;

impl<M> Region<M> {
    /// The coordinator gives `shard` to this region (`HostShard`), naming its predecessor, if
    /// any: hosted and acknowledged, unless this region is shutting down or a proxy.
    pub(super) fn host_shard(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        shard: ShardId,
        predecessor: Option<UniqueAddress>,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if self.stopping_in_place {
            // Not acknowledged: the coordinator resends until this region has stopped,
            // and then does not give the shard a new home (the cluster prepares for a
            // full shutdown). Asking it to hand off instead would start a hand-off.
            return;
        }
        if self.graceful {
            // Shutting down: refuse by not acknowledging; remind the coordinator.
            out.push(RegionEffect::Send {
                to: from.clone(),
                msg: Protocol::GracefulShutdownReq,
            });
            return;
        }
        if self.proxy {
            return;
        }
        self.host(now, shard.clone(), predecessor, view, out);
        out.push(RegionEffect::Send {
            to: from.clone(),
            msg: Protocol::ShardStarted { shard },
        });
    }

    fn host(
        &mut self,
        now: Instant,
        shard: ShardId,
        predecessor: Option<UniqueAddress>,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if let Some(Hosted::AwaitingLease {
            predecessor: known, ..
        }) = self.hosted.get_mut(&shard)
        {
            // Hosted on a `ShardHome` naming us that overtook this `HostShard`: the predecessor
            // it names is the one whose forwarded messages go first once the lease is held.
            if known.is_none() {
                *known = predecessor.filter(|p| *p != self.me);
            }
            return;
        }
        if self.hosted.contains_key(&shard) {
            return;
        }
        self.homes.remove(&shard);
        self.forget_told(&shard);
        self.early_drains.remove(&shard);
        if self.needs_lease(now, &shard) {
            self.await_lease(now, shard, predecessor, out);
            return;
        }
        self.activate(now, shard, predecessor, view, out);
    }

    /// Starts hosting `shard` (its lease, if any, is held): waits for the predecessor if there
    /// is one that may still be alive and has not sent its hand-over marker yet, and delivers
    /// what was buffered.
    pub(super) fn activate(
        &mut self,
        now: Instant,
        shard: ShardId,
        predecessor: Option<UniqueAddress>,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        let marker_seen = self.early_handovers.remove(&shard);
        let predecessor = predecessor.filter(|p| *p != self.me);
        let waiting_for = predecessor
            .clone()
            .filter(|p| view.may_be_alive(p) && marker_seen.as_ref() != Some(p));
        let state = match waiting_for {
            Some(predecessor) => Hosted::AwaitingPredecessor {
                predecessor,
                held: VecDeque::new(),
                until: now + self.settings.handoff_timeout,
            },
            None => Hosted::Running,
        };
        self.hosted.insert(shard.clone(), state);
        out.push(RegionEffect::ShardStarted(shard.clone()));
        self.handover_pending.remove(&shard);
        self.flush_local_after(&shard, predecessor.as_ref(), out);
    }

    /// The predecessor's hand-over marker (`HandOverDone`): everything it forwarded has
    /// arrived, so what was held for it is delivered.
    pub(super) fn hand_over_done(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        shard: ShardId,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        match self.hosted.get(&shard) {
            Some(Hosted::AwaitingPredecessor { predecessor, .. }) if predecessor == from => {
                self.release_held(now, &shard, out)
            }
            Some(_) => {}
            // Overtook the HostShard that names its sender (different connections).
            None => {
                self.early_handovers.insert(shard, from.clone());
            }
        }
    }

    /// Delivers what waited for the predecessor (its marker came, it is gone, or the wait
    /// timed out) and runs the shard.
    ///
    /// Under shard leases only while the lease still holds: the marker or the timer may be
    /// the first thing this region runs after a pause that outlasted the lease, when another
    /// node may hold the shard. A lapsed lease parks the shard instead, and what was held
    /// waits in the buffer for the lease.
    pub(super) fn release_held(
        &mut self,
        now: Instant,
        shard: &ShardId,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if !self.lease_still_held(now, shard, out) {
            return;
        }
        if let Some(Hosted::AwaitingPredecessor { held, .. }) =
            self.hosted.replace(shard, Hosted::Running)
        {
            out.extend(held.into_iter().map(|b| RegionEffect::Deliver(b.env)));
        }
    }
}
