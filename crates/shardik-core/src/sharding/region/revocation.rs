//! Shards the coordinator took away without a hand-off ([`Protocol::ShardsRevoked`]): this
//! node went silent, the store said the shards' leases had lapsed, and they were given other
//! homes (see `coordinator/takeover.rs`). Without this the region, heard again, would keep
//! them parked and try for their leases for as long as their next homes hold them.

use super::hosted::Hosted;
use super::routing_order::keep_own;
use super::{Region, RegionEffect};
use crate::Instant;
use crate::membership::UniqueAddress;
use crate::sharding::protocol::Protocol;
use crate::sharding::shard_id::ShardId;
use crate::sharding::view::ShardingView;

impl<M> Region<M> {
    /// The coordinator on `from` took `shards` from this region: stop hosting them and
    /// answer each with `ShardStopped`.
    ///
    /// Their entities stop at once (under a lapsed lease they stopped already), the lease is
    /// given up (if this region took it back meanwhile, the next home gets it as soon as it
    /// is released) and the shards leave the region. Of what waited for them, messages from
    /// other nodes are dropped, each reported: their senders may already have sent newer
    /// ones to the next home, which waits for no predecessor. This node's own go to the next
    /// home, once it is known, ahead of anything its senders send later.
    pub(super) fn shards_revoked(
        &mut self,
        from: &UniqueAddress,
        shards: Vec<ShardId>,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        let ours =
            self.registration.coordinator.as_ref() == Some(from) || view.may_run_coordinator(from);
        if !ours || self.proxy {
            return;
        }
        for shard in shards {
            // Marked only while still hosted: a resent revocation of a shard given up already
            // must not mark it again (a new nonce would drop what senders now route here), and
            // one naming shards this region never held must add nothing.
            if self.hosted.contains_key(&shard) {
                self.mark_order_broken(&shard);
            }
            self.stop_revoked(&shard, out);
            self.give_up_lease(&shard, out);
            self.early_drains.remove(&shard);
            self.early_handovers.remove(&shard);
            self.handover_pending.remove(&shard);
            self.homes.remove(&shard);
            self.forget_told(&shard);
            self.keep_only_own_messages(&shard, out);
            out.push(RegionEffect::Send {
                to: from.clone(),
                msg: Protocol::ShardStopped {
                    shard,
                    forwarding: false,
                },
            });
        }
        self.check_shutdown(out);
    }

    /// Before registering with a coordinator anew: gives up every shard whose lease lapsed here
    /// and has not been taken back (parked, waiting for it), as if it had been revoked.
    ///
    /// Such a shard may run elsewhere by now: a coordinator standing in for this silent node
    /// gave it another home, and that home's region registers claiming it too. Whichever claim
    /// a new coordinator heard first would stand, and one from here would take the shard back
    /// from the node that runs it, dropping what senders had routed there. Given up, it is
    /// asked for like any other shard, and may well come back here.
    pub(super) fn give_up_lapsed_shards(&mut self, now: Instant, out: &mut Vec<RegionEffect<M>>) {
        // A lease whose deadline passed unseen (this node was not run) is lost first.
        let hosted: Vec<ShardId> = self.hosted.keys().cloned().collect();
        for shard in &hosted {
            self.lease_still_held(now, shard, out);
        }
        self.give_up_awaiting(|lapsed, _| lapsed.is_some(), out);
    }

    /// The coordinator this region was registered with, a stand-in, is gone: gives up every
    /// shard it placed here whose lease this region has not yet held, as if it had been
    /// revoked (see [`forget_coordinator`](Self::forget_coordinator)).
    ///
    /// The next coordinator may know another home for such a shard (one that stood in for a
    /// silent oldest member placed it here, and the oldest, heard again, has it elsewhere),
    /// which runs it under its lease meanwhile and delivers what senders send it directly.
    /// What other nodes sent here, waiting for a lease that home holds, would be delivered
    /// after their later messages once this region got the lease (the durable sweep's seed
    /// 2412). Given up, it is asked for like any other shard, and may well come back here.
    ///
    /// Only under leases, and only shards placed here that never ran here: one the self-fence
    /// parked (it waits for the fence, with or without leases) is still this region's in the
    /// coordinator's table, and the region resumes it when the fence opens.
    pub(super) fn give_up_shards_never_held(&mut self, out: &mut Vec<RegionEffect<M>>) {
        if self.leases.is_none() {
            return;
        }
        self.give_up_awaiting(|_, ran_here| !ran_here, out);
    }

    /// Gives up the shards waiting for their lease that `which` picks (given the token of the
    /// tenure that lapsed here, if any, and whether the shard ran here before).
    fn give_up_awaiting(
        &mut self,
        which: impl Fn(Option<u64>, bool) -> bool,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        let picked: Vec<ShardId> = self
            .hosted
            .keys()
            .filter(|shard| {
                matches!(
                    self.hosted.get(shard),
                    Some(Hosted::AwaitingLease { lapsed, ran_here, .. }) if which(*lapsed, *ran_here)
                )
            })
            .cloned()
            .collect();
        for shard in picked {
            self.mark_order_broken(&shard);
            self.stop_revoked(&shard, out);
            self.give_up_lease(&shard, out);
            self.homes.remove(&shard);
            self.forget_told(&shard);
            self.keep_only_own_messages(&shard, out);
        }
    }

    /// Takes `shard` out of the hosted ones, stopping its entities if they may still run.
    fn stop_revoked(&mut self, shard: &ShardId, out: &mut Vec<RegionEffect<M>>) {
        let stop = match self.hosted.remove(shard) {
            Some(Hosted::Running | Hosted::Stopping { .. }) => true,
            Some(Hosted::AwaitingPredecessor { held, .. }) => {
                // In front of the buffer, where keep_only_own_messages sorts them: this
                // node's own follow the shard, other nodes' are dropped.
                self.buffered += held.len();
                let buffer = self.buffers.entry(shard.clone()).or_default();
                for b in held.into_iter().rev() {
                    buffer.push_front(b);
                }
                true
            }
            Some(Hosted::HandingOff {
                entities_stopped, ..
            }) => !entities_stopped,
            Some(Hosted::AwaitingLease { .. }) | None => false,
        };
        if stop {
            out.push(RegionEffect::ForceStopEntities(shard.clone()));
            out.push(RegionEffect::ShardStopped(shard.clone()));
        }
    }

    /// Drops what other nodes sent for `shard` and keeps this node's own, asking for the
    /// shard's next home for them.
    fn keep_only_own_messages(&mut self, shard: &ShardId, out: &mut Vec<RegionEffect<M>>) {
        let Some(buffer) = self.buffers.remove(shard) else {
            return;
        };
        self.buffered -= buffer.len();
        let own = keep_own(buffer, out);
        if !own.is_empty() {
            self.buffered += own.len();
            self.buffers.insert(shard.clone(), own);
            self.request_home(shard.clone(), out);
        }
    }
}
