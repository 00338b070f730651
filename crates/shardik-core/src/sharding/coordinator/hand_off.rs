//! Moving a shard (rebalance, or a region's graceful shutdown) with the hand-off protocol:
//! every region is told to stop sending to its home (`BeginHandOff`), then the home stops it
//! (`HandOff`), then the shard is homed anew; a hand-off that takes too long is given up.

use std::collections::BTreeSet;

use super::{Coordinator, CoordinatorEffect, CoordinatorEvent, HandOff, StateEvent};
use crate::Instant;
use crate::membership::UniqueAddress;
use crate::sharding::allocation::ShardAllocationStrategy;
use crate::sharding::protocol::Protocol;
use crate::sharding::shard_id::ShardId;
use crate::sharding::view::ShardingView;

impl<S: ShardAllocationStrategy<UniqueAddress>> Coordinator<S> {
    pub(super) fn start_hand_off(
        &mut self,
        now: Instant,
        shard: ShardId,
        rebalance: bool,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        if self.handoffs.contains_key(&shard) {
            return;
        }
        let Some(from) = self.state.home(&shard).cloned() else {
            return;
        };
        // Nothing moves while the cluster prepares for a full shutdown (see the module docs):
        // neither a rebalance round nor a region's graceful shutdown starts a hand-off then.
        debug_assert!(
            !self.preparing_noted,
            "hand-off of shard {shard} from {from} while preparing for a full shutdown"
        );
        let acks_pending: BTreeSet<UniqueAddress> = self
            .registered
            .iter()
            .filter(|r| view.may_be_alive(r))
            .cloned()
            .collect();
        for r in &acks_pending {
            self.send(
                r,
                Protocol::BeginHandOff {
                    shard: shard.clone(),
                },
                out,
            );
        }
        out.push(CoordinatorEffect::Event(CoordinatorEvent::HandOffStarted {
            shard: shard.clone(),
            from: from.clone(),
            rebalance,
        }));
        self.unacked_hosts.remove(&shard);
        self.handoffs.insert(
            shard.clone(),
            HandOff {
                from,
                acks_pending,
                drained: Vec::new(),
                stopping: false,
                deadline: now + self.settings.handoff_timeout,
                deferred: BTreeSet::new(),
            },
        );
        self.progress_hand_off(now, &shard, view, out);
    }

    pub(super) fn progress_hand_off(
        &mut self,
        _now: Instant,
        shard: &ShardId,
        _view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        let Some(h) = self.handoffs.get_mut(shard) else {
            return;
        };
        if h.stopping || !h.acks_pending.is_empty() {
            return;
        }
        h.stopping = true;
        let msg = Protocol::HandOff {
            shard: shard.clone(),
            drained_from: h.drained.clone(),
        };
        let to = h.from.clone();
        self.send(&to, msg, out);
    }

    pub(super) fn hand_off_done(
        &mut self,
        now: Instant,
        shard: &ShardId,
        ok: bool,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        let Some(h) = self.handoffs.remove(shard) else {
            return;
        };
        out.push(CoordinatorEffect::Event(CoordinatorEvent::HandOffDone {
            shard: shard.clone(),
            ok,
        }));
        if ok && self.preparing(view, out) {
            // Stopped where it was (a hand-off that began before the preparation, or its home
            // went away): it stays without a home.
            if self.state.home(shard).is_some() {
                self.apply(StateEvent::ShardHomeDeallocated(shard.clone()), out);
            }
            self.predecessors.remove(shard);
            self.retired.insert(shard.clone());
            for requester in &h.deferred {
                self.wait_for_home(shard.clone(), requester);
            }
        } else if ok {
            if self.state.home(shard).is_some() {
                self.apply(StateEvent::ShardHomeDeallocated(shard.clone()), out);
            }
            if !view.may_be_alive(&h.from) {
                self.predecessors.remove(shard);
            }
            for requester in &h.deferred {
                self.get_shard_home(now, requester, shard.clone(), view, out);
            }
            // Re-home at once, as the reference does, so the shard is running again before
            // its next message (and the predecessor learns where to forward).
            if self.state.home(shard).is_none() {
                let me = self.me.clone();
                self.get_shard_home(now, &me, shard.clone(), view, out);
            }
        } else {
            self.graceful.remove(&h.from);
            for requester in &h.deferred {
                self.get_shard_home(now, requester, shard.clone(), view, out);
            }
        }
    }

    pub(super) fn rebalance(
        &mut self,
        now: Instant,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        if !self.may_allocate() || self.state.regions().is_empty() || self.preparing(view, out) {
            return;
        }
        let snapshot = self.allocation_snapshot(view, false);
        let in_progress: BTreeSet<ShardId> = self.handoffs.keys().cloned().collect();
        let chosen = self.strategy.rebalance(&snapshot, &in_progress);
        for shard in chosen {
            if self.state.home(&shard).is_some() {
                self.start_hand_off(now, shard, true, view, out);
            }
        }
    }
}
