//! The old home's side of a hand-off: forgetting a home that moves, stopping the shard's
//! entities, waiting for every drain marker, then reporting the shard stopped and forwarding
//! (or dropping) what was buffered for it.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use super::hosted::Hosted;
use super::{DropReason, HandOffMode, Region, RegionEffect};
use crate::Instant;
use crate::membership::UniqueAddress;
use crate::sharding::protocol::Protocol;
use crate::sharding::shard_id::ShardId;
use crate::sharding::view::ShardingView;

impl<M> Region<M> {
    /// The coordinator is about to move `shard` (`BeginHandOff`): forget its home, tell the
    /// old home nothing more comes from here (forward mode), and acknowledge.
    pub(super) fn begin_hand_off(
        &mut self,
        from: &UniqueAddress,
        shard: ShardId,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        let old = self.homes.remove(&shard);
        self.forget_told(&shard);
        let drained = match old {
            Some(home) if home != self.me => {
                out.push(RegionEffect::Send {
                    to: home,
                    msg: Protocol::HandOffDrained {
                        shard: shard.clone(),
                    },
                });
                self.settings.handoff_mode == HandOffMode::Forward
            }
            _ => false,
        };
        out.push(RegionEffect::Send {
            to: from.clone(),
            msg: Protocol::BeginHandOffAck { shard, drained },
        });
    }

    pub(super) fn hand_off(
        &mut self,
        now: Instant,
        coordinator: &UniqueAddress,
        shard: ShardId,
        drained_from: Vec<UniqueAddress>,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        let Some(state) = self.hosted.get(&shard) else {
            // Not hosted here (a `HostShard` refused while leaving, or never received), yet the
            // coordinator counts this region as the home, and regions that did too may have
            // sent messages here, which wait in the buffer. They are this shard's old-home
            // messages: forwarded to the next home ahead of anything newer, or dropped, as the
            // mode says, exactly as if the shard had been stopped here.
            let waiting = self.buffers.get(&shard).is_some_and(|b| !b.is_empty());
            let forwarding = waiting && self.settings.handoff_mode == HandOffMode::Forward;
            if waiting && !forwarding {
                let dropped = self.buffers.remove(&shard).unwrap_or_default();
                self.buffered -= dropped.len();
                for b in dropped {
                    out.push(RegionEffect::Dropped {
                        env: b.env,
                        reason: DropReason::HandOff,
                    });
                }
            }
            out.push(RegionEffect::Send {
                to: coordinator.clone(),
                msg: Protocol::ShardStopped {
                    shard: shard.clone(),
                    forwarding,
                },
            });
            if forwarding {
                self.handover_pending.insert(shard.clone());
                out.push(RegionEffect::Send {
                    to: coordinator.clone(),
                    msg: Protocol::GetShardHome { shard },
                });
            }
            self.check_shutdown(out);
            return;
        };
        if matches!(state, Hosted::HandingOff { .. } | Hosted::Stopping { .. }) {
            return; // a second HandOff while one runs, or the shard stops in place anyway
        }
        let handing_off = Hosted::HandingOff {
            coordinator: coordinator.clone(),
            entities_stopped: false,
            awaiting_drains: BTreeSet::new(),
            force_at: now + stop_limit(self.settings.handoff_timeout),
        };
        let held = match self.hosted.replace(&shard, handing_off) {
            Some(Hosted::AwaitingPredecessor { held, .. }) => held,
            Some(Hosted::AwaitingLease { .. }) => {
                // Nothing ran here: the lease is no longer wanted.
                self.give_up_lease(&shard, out);
                VecDeque::new()
            }
            _ => VecDeque::new(),
        };
        let early = self.early_drains.remove(&shard).unwrap_or_default();
        if let Some(Hosted::HandingOff {
            awaiting_drains, ..
        }) = self.hosted.get_mut(&shard)
        {
            *awaiting_drains = drained_from
                .into_iter()
                .filter(|n| *n != self.me && !early.contains(n) && view.may_be_alive(n))
                .collect();
        }
        // What waited for a predecessor, and what was buffered, now waits for the next home.
        match self.settings.handoff_mode {
            HandOffMode::Forward => {
                if !held.is_empty() {
                    self.buffered += held.len();
                    let buffer = self.buffers.entry(shard.clone()).or_default();
                    // Held messages arrived before anything buffered after them.
                    for b in held.into_iter().rev() {
                        buffer.push_front(b);
                    }
                }
            }
            HandOffMode::Drop => {
                let buffered = self.buffers.remove(&shard).unwrap_or_default();
                self.buffered -= buffered.len();
                for env in held.into_iter().chain(buffered).map(|b| b.env) {
                    out.push(RegionEffect::Dropped {
                        env,
                        reason: DropReason::HandOff,
                    });
                }
            }
        }
        out.push(RegionEffect::StopEntities(shard));
    }

    /// A region that was routing to this old home forgot it (`HandOffDrained`): nothing more is
    /// in flight from it. Kept for later when the hand-off has not begun here yet.
    pub(super) fn hand_off_drained(
        &mut self,
        from: &UniqueAddress,
        shard: ShardId,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if let Some(Hosted::HandingOff {
            awaiting_drains, ..
        }) = self.hosted.get_mut(&shard)
        {
            awaiting_drains.remove(from);
            self.maybe_finish_hand_off(&shard, out);
        } else {
            self.early_drains
                .entry(shard)
                .or_default()
                .insert(from.clone());
        }
    }

    /// The runtime finished stopping `shard`'s entities (after [`RegionEffect::StopEntities`]).
    pub fn entities_stopped(&mut self, shard: &ShardId, out: &mut Vec<RegionEffect<M>>) {
        if let Some(Hosted::Stopping { .. }) = self.hosted.get(shard) {
            return self.stopped_in_place(shard, out);
        }
        if let Some(Hosted::HandingOff {
            entities_stopped, ..
        }) = self.hosted.get_mut(shard)
        {
            *entities_stopped = true;
            self.maybe_finish_hand_off(shard, out);
        }
    }

    pub(super) fn maybe_finish_hand_off(
        &mut self,
        shard: &ShardId,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        let coordinator = match self.hosted.get(shard) {
            Some(Hosted::HandingOff {
                coordinator,
                entities_stopped: true,
                awaiting_drains,
                ..
            }) if awaiting_drains.is_empty() => coordinator.clone(),
            _ => return,
        };
        self.hosted.remove(shard);
        // Every entity has stopped: the next home may take the lease at once.
        self.give_up_lease(shard, out);
        out.push(RegionEffect::ShardStopped(shard.clone()));
        // Every drain marker is in, so nothing more arrives from other regions: if nothing is
        // buffered now, the next home has nothing to wait for (later local messages travel in
        // order behind anything we forward, on the same connection).
        let forwarding = self.settings.handoff_mode == HandOffMode::Forward
            && self.buffers.get(shard).is_some_and(|b| !b.is_empty());
        out.push(RegionEffect::Send {
            to: coordinator.clone(),
            msg: Protocol::ShardStopped {
                shard: shard.clone(),
                forwarding,
            },
        });
        if forwarding {
            // The coordinator tells us the next home (we are its predecessor); ask too, in case
            // this coordinator is not the one that will allocate it.
            self.handover_pending.insert(shard.clone());
            out.push(RegionEffect::Send {
                to: coordinator,
                msg: Protocol::GetShardHome {
                    shard: shard.clone(),
                },
            });
        }
        self.check_shutdown(out);
    }
}

/// How long a shard's entities get to stop during a hand-off before they are forced: the
/// reference's `max(1 s, handoff-timeout − 5 s)`, leaving the coordinator's overall limit room.
pub(super) fn stop_limit(handoff_timeout: Duration) -> Duration {
    handoff_timeout
        .saturating_sub(Duration::from_secs(5))
        .max(Duration::from_secs(1))
}
