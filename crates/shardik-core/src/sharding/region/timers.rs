//! Timers: when the region next has work, and doing what is due (registration attempts, the
//! retry tick, predecessor waits and hand-off limits, lease renewals and deadlines).

use std::collections::BTreeSet;

use super::hosted::Hosted;
use super::{Region, RegionEffect};
use crate::Instant;
use crate::lease::LeaseKeeper;
use crate::sharding::protocol::Protocol;
use crate::sharding::shard_id::ShardId;
use crate::sharding::view::ShardingView;

impl<M> Region<M> {
    /// The next instant [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.stopped {
            return None;
        }
        let mut next = Some(self.next_retry);
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        if let Some(t) = self.registration.next_attempt
            && self.registration.coordinator.is_none()
        {
            consider(t);
        }
        // Only shards waiting for a predecessor or handing off have deadlines; usually there
        // are none, and this runs on every turn of the runtime's loop.
        if self.hosted.any_in_transition() {
            for state in self.hosted.values() {
                match state {
                    Hosted::AwaitingPredecessor { until, .. } => consider(*until),
                    Hosted::HandingOff { force_at, .. } | Hosted::Stopping { force_at } => {
                        consider(*force_at)
                    }
                    Hosted::Running | Hosted::AwaitingLease { .. } => {}
                }
            }
        }
        if let Some(t) = self.leases.as_ref().and_then(LeaseKeeper::poll_timeout) {
            consider(t);
        }
        next
    }

    /// Runs what is due: registration attempts, the retry tick, hand-off limits.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if self.stopped {
            return;
        }
        let mut expired_wait = Vec::new();
        let mut forced = Vec::new();
        let mut stopped_in_place = Vec::new();
        for (shard, state) in self.hosted.iter_mut() {
            match state {
                Hosted::AwaitingPredecessor { until, .. } if *until <= now => {
                    expired_wait.push(shard.clone())
                }
                Hosted::HandingOff {
                    force_at,
                    entities_stopped,
                    awaiting_drains,
                    ..
                } if *force_at <= now => {
                    if !*entities_stopped {
                        out.push(RegionEffect::ForceStopEntities(shard.clone()));
                        *entities_stopped = true;
                    }
                    awaiting_drains.clear();
                    forced.push(shard.clone());
                }
                Hosted::Stopping { force_at } if *force_at <= now => {
                    out.push(RegionEffect::ForceStopEntities(shard.clone()));
                    stopped_in_place.push(shard.clone());
                }
                _ => {}
            }
        }
        for shard in stopped_in_place {
            self.stopped_in_place(&shard, out);
        }
        for shard in expired_wait {
            self.release_held(now, &shard, out);
        }
        for shard in forced {
            self.maybe_finish_hand_off(&shard, out);
        }
        if let Some(keeper) = &mut self.leases {
            let mut calls = Vec::new();
            let events = keeper.handle_timeout(now, &mut calls);
            out.extend(calls.into_iter().map(RegionEffect::Lease));
            for event in events {
                self.on_lease_event(now, event, view, out);
            }
        }
        if self.next_retry <= now {
            self.next_retry = now + self.settings.retry_interval;
            match &self.registration.coordinator {
                None => self.registration.next_attempt = Some(now),
                Some(c) => {
                    let c = c.clone();
                    let waiting: BTreeSet<ShardId> = self
                        .buffers
                        .keys()
                        .filter(|s| !self.hosted.contains_key(s))
                        .chain(self.handover_pending.iter())
                        .chain(self.wanted.iter())
                        .cloned()
                        .collect();
                    for shard in waiting {
                        out.push(RegionEffect::Send {
                            to: c.clone(),
                            msg: Protocol::GetShardHome { shard },
                        });
                    }
                    if self.graceful && !self.stopping_in_place {
                        out.push(RegionEffect::Send {
                            to: c,
                            msg: Protocol::GracefulShutdownReq,
                        });
                    }
                }
            }
        }
        self.maybe_register(now, view, out);
    }
}
