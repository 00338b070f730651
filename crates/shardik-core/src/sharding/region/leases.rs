//! Shard leases (`use-lease`, digest §1.6): a shard starts only after taking its lease and its
//! entities stop at once when the lease is lost.

use super::hosted::Hosted;
use super::{DropReason, Region, RegionEffect};
use crate::Instant;
use crate::lease::{LeaseAnswer, LeaseEvent};
use crate::membership::UniqueAddress;
use crate::sharding::shard_id::ShardId;
use crate::sharding::view::ShardingView;

impl<M> Region<M> {
    /// Whether hosting `shard` must wait: for its lease, or for the self-fence to open.
    pub(super) fn needs_lease(&self, now: Instant, shard: &ShardId) -> bool {
        self.suspended
            || self
                .leases
                .as_ref()
                .is_some_and(|k| k.held(now, shard).is_none())
    }

    /// Puts a running `shard` back to waiting (its entities were stopped): what waited for a
    /// predecessor goes back in front of the buffer. `lapsed` is the token of the tenure that
    /// was lost, if that is why.
    pub(super) fn park(&mut self, shard: &ShardId, lapsed: Option<u64>) {
        let previous = self.hosted.replace(
            shard,
            Hosted::AwaitingLease {
                predecessor: None,
                lapsed,
                ran_here: true,
            },
        );
        if let Some(Hosted::AwaitingPredecessor { held, .. }) = previous
            && !held.is_empty()
        {
            self.buffered += held.len();
            let buffer = self.buffers.entry(shard.clone()).or_default();
            for b in held.into_iter().rev() {
                buffer.push_front(b);
            }
        }
    }

    /// Hosts `shard` waiting for its lease (asked for now, unless it is being asked for).
    pub(super) fn await_lease(
        &mut self,
        now: Instant,
        shard: ShardId,
        predecessor: Option<UniqueAddress>,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        self.hosted.insert(
            shard.clone(),
            Hosted::AwaitingLease {
                predecessor,
                lapsed: None,
                ran_here: false,
            },
        );
        if let Some(keeper) = &mut self.leases {
            let mut calls = Vec::new();
            keeper.want(now, shard, &mut calls);
            out.extend(calls.into_iter().map(RegionEffect::Lease));
        }
    }

    pub(super) fn give_up_lease(&mut self, shard: &ShardId, out: &mut Vec<RegionEffect<M>>) {
        self.lease_unavailable.remove(shard);
        if let Some(keeper) = &mut self.leases {
            let mut calls = Vec::new();
            keeper.give_up(shard, &mut calls);
            out.extend(calls.into_iter().map(RegionEffect::Lease));
        }
    }

    /// Before delivering to `shard` at `now`: `false` when its lease just turned out to be past
    /// its deadline (a pause, a slow timer), which stops the shard's entities first.
    pub(super) fn lease_still_held(
        &mut self,
        now: Instant,
        shard: &ShardId,
        out: &mut Vec<RegionEffect<M>>,
    ) -> bool {
        let Some(keeper) = &mut self.leases else {
            return true;
        };
        match keeper.expire_if_due(now, shard) {
            Some(event) => {
                self.lease_lost(now, event, out);
                false
            }
            None => true,
        }
    }

    /// The store answered lease request `id` about `shard`.
    pub fn lease_answered(
        &mut self,
        now: Instant,
        shard: &ShardId,
        id: u64,
        answer: LeaseAnswer,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        let Some(keeper) = &mut self.leases else {
            return;
        };
        let mut calls = Vec::new();
        let event = keeper.answer(now, shard, id, answer, &mut calls);
        out.extend(calls.into_iter().map(RegionEffect::Lease));
        if let Some(event) = event {
            self.on_lease_event(now, event, view, out);
        }
    }

    pub(super) fn on_lease_event(
        &mut self,
        now: Instant,
        event: LeaseEvent<ShardId>,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        match event {
            LeaseEvent::Acquired { key: shard, token } => {
                self.lease_unavailable.remove(&shard);
                self.drop_what_waited_through_another_tenure(&shard, token, out);
                match self.hosted.get(&shard) {
                    // Held, but fenced: it starts when the fence opens.
                    Some(Hosted::AwaitingLease { .. }) if self.suspended => {}
                    Some(Hosted::AwaitingLease { predecessor, .. }) if !self.stopped => {
                        let predecessor = predecessor.clone();
                        out.push(RegionEffect::ShardLeased {
                            shard: shard.clone(),
                            token,
                        });
                        self.activate(now, shard, predecessor, view, out);
                    }
                    // Not wanted any more (the keeper gives back what nobody waits for, but a
                    // shard that left meanwhile had its wish cancelled already).
                    _ => self.give_up_lease(&shard, out),
                }
            }
            LeaseEvent::Lost { .. } => self.lease_lost(now, event, out),
            LeaseEvent::RenewalFailing { key: shard, error } => {
                out.push(RegionEffect::LeaseUnavailable { shard, error })
            }
            LeaseEvent::RenewalRecovered { key: shard } => {
                out.push(RegionEffect::LeaseRecovered(shard))
            }
            LeaseEvent::Unavailable { key: shard, error } => {
                if !matches!(self.hosted.get(&shard), Some(Hosted::AwaitingLease { .. })) {
                    return;
                }
                self.lease_unavailable.insert(shard.clone());
                // Reported before the refusals, so that whoever is refused finds it reported.
                out.push(RegionEffect::LeaseUnavailable {
                    shard: shard.clone(),
                    error,
                });
                // Refuse what waits rather than keep it waiting for a store that is down.
                if let Some(buffer) = self.buffers.remove(&shard) {
                    self.buffered -= buffer.len();
                    for b in buffer {
                        out.push(RegionEffect::Dropped {
                            env: b.env,
                            reason: DropReason::LeaseUnavailable,
                        });
                    }
                }
            }
        }
    }

    /// `shard`'s lease is held again with `token`, after this region lost it: if another node
    /// held it in between (the store raised the token more than once), what was buffered here
    /// meanwhile may be older than what that node handled for the same senders. Delivering it
    /// now would break per-sender order, so it is dropped, each drop reported.
    fn drop_what_waited_through_another_tenure(
        &mut self,
        shard: &ShardId,
        token: u64,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        let Some(Hosted::AwaitingLease { lapsed, .. }) = self.hosted.get_mut(shard) else {
            return;
        };
        let Some(lost) = lapsed.take() else {
            return;
        };
        if token <= lost.saturating_add(1) {
            return; // ours again, or taken back by us with nobody in between
        }
        self.mark_order_broken(shard);
        if let Some(buffer) = self.buffers.remove(shard) {
            self.buffered -= buffer.len();
            for b in buffer {
                out.push(RegionEffect::Dropped {
                    env: b.env,
                    reason: DropReason::LeaseLapsed,
                });
            }
        }
    }

    /// `shard`'s lease is lost: its entities stop now, without waiting for them, and the shard
    /// waits for its lease again (unless it was being handed off).
    fn lease_lost(
        &mut self,
        now: Instant,
        event: LeaseEvent<ShardId>,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        let LeaseEvent::Lost {
            key: shard,
            token,
            reason,
        } = event
        else {
            return;
        };
        match self.hosted.get_mut(&shard) {
            Some(Hosted::HandingOff {
                entities_stopped, ..
            }) => {
                if !*entities_stopped {
                    *entities_stopped = true;
                    out.push(RegionEffect::ForceStopEntities(shard.clone()));
                }
                out.push(RegionEffect::ShardLeaseLost {
                    shard: shard.clone(),
                    reason,
                });
                self.maybe_finish_hand_off(&shard, out);
            }
            Some(Hosted::Running | Hosted::AwaitingPredecessor { .. }) => {
                out.push(RegionEffect::ForceStopEntities(shard.clone()));
                out.push(RegionEffect::ShardStopped(shard.clone()));
                out.push(RegionEffect::ShardLeaseLost {
                    shard: shard.clone(),
                    reason,
                });
                self.park(&shard, Some(token));
                if let Some(keeper) = &mut self.leases {
                    let mut calls = Vec::new();
                    keeper.acquire_again(now, shard, &mut calls);
                    out.extend(calls.into_iter().map(RegionEffect::Lease));
                }
            }
            Some(Hosted::Stopping { .. }) => {
                out.push(RegionEffect::ForceStopEntities(shard.clone()));
                out.push(RegionEffect::ShardLeaseLost {
                    shard: shard.clone(),
                    reason,
                });
                self.stopped_in_place(&shard, out);
            }
            Some(Hosted::AwaitingLease { .. }) | None => {
                out.push(RegionEffect::ShardLeaseLost {
                    shard: shard.clone(),
                    reason,
                });
                if let Some(Hosted::AwaitingLease { lapsed, .. }) = self.hosted.get_mut(&shard) {
                    *lapsed = Some(token);
                }
                // Lost while waiting (fenced): taken again for when the fence opens.
                if self.hosted.contains_key(&shard)
                    && let Some(keeper) = &mut self.leases
                {
                    let mut calls = Vec::new();
                    keeper.acquire_again(now, shard, &mut calls);
                    out.extend(calls.into_iter().map(RegionEffect::Lease));
                }
            }
        }
    }
}
