//! Ending the region: a graceful shutdown (every shard handed off), stopping in place while
//! the cluster prepares for a full shutdown, and stopping at once when the node is downed.

use super::hand_off::stop_limit;
use super::hosted::Hosted;
use super::{DropReason, Region, RegionEffect};
use crate::Instant;
use crate::sharding::protocol::Protocol;
use crate::sharding::shard_id::ShardId;
use crate::sharding::view::ShardingView;

impl<M> Region<M> {
    /// Starts a graceful shutdown: all shards are handed off, then
    /// [`RegionEffect::ShutdownComplete`] is emitted (at once for an empty region).
    pub fn graceful_shutdown(&mut self, out: &mut Vec<RegionEffect<M>>) {
        if self.graceful || self.stopped {
            return;
        }
        self.graceful = true;
        if let Some(c) = &self.registration.coordinator {
            out.push(RegionEffect::Send {
                to: c.clone(),
                msg: Protocol::GracefulShutdownReq,
            });
        }
        self.check_shutdown(out);
    }

    /// The graceful shutdown of a region while the cluster prepares for a full shutdown (the
    /// reference's region just stops then): every shard stops where it is, without a hand-off,
    /// and once all have, the region stops ([`RegionEffect::ShutdownComplete`], and
    /// [`Protocol::RegionStopped`] to the coordinator, which gives its shards no new home).
    /// Entities get the kind's stop message and until the hand-off limit (less 5 s, at least
    /// 1 s) to stop, as in a hand-off; so durable entities finish the command they are on.
    /// Messages that would have to wait here are dropped ([`DropReason::RegionStopped`]); ones
    /// for shards at other nodes are still forwarded.
    pub fn stop_for_full_shutdown(&mut self, now: Instant, out: &mut Vec<RegionEffect<M>>) {
        if self.graceful || self.stopped {
            return;
        }
        self.graceful = true;
        self.stop_in_place(now, out);
    }

    /// A graceful shutdown with nobody to hand the shards to: every other member that could
    /// host the kind is leaving or gone (the last nodes of a cluster leaving one after the
    /// other). No member will run a coordinator to take the shards, so waiting for one would
    /// only last until the leave timeout; the shards stop where they are instead, as in a
    /// full shutdown. Nothing changes while a member may still take them.
    pub fn stop_in_place_if_alone(
        &mut self,
        now: Instant,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if self.graceful && !self.stopping_in_place && !self.stopped && view.nobody_else_may_host()
        {
            self.stop_in_place(now, out);
        }
    }

    /// Stops every shard where it is (see [`stop_for_full_shutdown`](Self::stop_for_full_shutdown)).
    fn stop_in_place(&mut self, now: Instant, out: &mut Vec<RegionEffect<M>>) {
        debug_assert!(self.graceful, "stopping in place is a graceful shutdown");
        self.stopping_in_place = true;
        for (_, buffer) in std::mem::take(&mut self.buffers) {
            for b in buffer {
                out.push(RegionEffect::Dropped {
                    env: b.env,
                    reason: DropReason::RegionStopped,
                });
            }
        }
        self.buffered = 0;
        self.handover_pending.clear();
        self.wanted.clear();
        let force_at = now + stop_limit(self.settings.handoff_timeout);
        let shards: Vec<ShardId> = self.hosted.keys().cloned().collect();
        for shard in shards {
            match self.hosted.get(&shard) {
                Some(Hosted::Running | Hosted::AwaitingPredecessor { .. }) => {
                    // What waited for a predecessor goes with the shard.
                    if let Some(Hosted::AwaitingPredecessor { held, .. }) =
                        self.hosted.replace(&shard, Hosted::Stopping { force_at })
                    {
                        for b in held {
                            out.push(RegionEffect::Dropped {
                                env: b.env,
                                reason: DropReason::RegionStopped,
                            });
                        }
                    }
                    out.push(RegionEffect::StopEntities(shard));
                }
                Some(Hosted::AwaitingLease { .. }) => {
                    // Nothing runs: nothing to stop, and the lease is not wanted any more.
                    self.hosted.remove(&shard);
                    self.give_up_lease(&shard, out);
                }
                // A hand-off that began before: it finishes (or is forced) as it would have.
                Some(Hosted::HandingOff { .. } | Hosted::Stopping { .. }) | None => {}
            }
        }
        self.check_shutdown(out);
    }

    /// Every entity of `shard` has stopped (or was forced to): it no longer runs here.
    pub(super) fn stopped_in_place(&mut self, shard: &ShardId, out: &mut Vec<RegionEffect<M>>) {
        if self.hosted.remove(shard).is_none() {
            return;
        }
        self.give_up_lease(shard, out);
        out.push(RegionEffect::ShardStopped(shard.clone()));
        self.check_shutdown(out);
    }

    pub(super) fn check_shutdown(&mut self, out: &mut Vec<RegionEffect<M>>) {
        // A pending hand-over always has buffered messages, so `buffers` covers it.
        if self.graceful && !self.stopped && self.hosted.is_empty() && self.buffers.is_empty() {
            self.stopped = true;
            if let Some(c) = self.registration.coordinator.take() {
                out.push(RegionEffect::Send {
                    to: c,
                    msg: Protocol::RegionStopped,
                });
            }
            out.push(RegionEffect::ShutdownComplete);
        }
    }

    /// Stops at once (this node was downed or removed, or is going away without hand-off):
    /// entities are dropped and buffered messages reported.
    pub fn stop(&mut self, out: &mut Vec<RegionEffect<M>>) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        for (shard, state) in self.hosted.take_all() {
            if matches!(state, Hosted::AwaitingLease { .. }) {
                continue; // nothing runs
            }
            out.push(RegionEffect::ForceStopEntities(shard.clone()));
            out.push(RegionEffect::ShardStopped(shard));
        }
        // The entities are gone: free their leases for the next homes.
        if let Some(keeper) = &mut self.leases {
            let mut calls = Vec::new();
            keeper.give_up_all(&mut calls);
            out.extend(calls.into_iter().map(RegionEffect::Lease));
        }
        self.lease_unavailable.clear();
        for (_, buffer) in std::mem::take(&mut self.buffers) {
            for b in buffer {
                out.push(RegionEffect::Dropped {
                    env: b.env,
                    reason: DropReason::RegionStopped,
                });
            }
        }
        self.buffered = 0;
        if let Some(c) = self.registration.coordinator.take() {
            out.push(RegionEffect::Send {
                to: c,
                msg: Protocol::RegionStopped,
            });
        }
        out.push(RegionEffect::ShutdownComplete);
    }
}
