//! A [`KindNode`]'s clock: when it next has work, running what is due, and judging the time
//! first whenever it is called after a while (a pause, a timer that fires late).

use crate::Instant;
use crate::lease::LeaseKeeper;
use crate::sharding::fence::SelfFence;

use super::{KindEffect, KindNode, push_coordinator_calls};

impl<M> KindNode<M> {
    /// Notices a call that comes long after the previous one (a pause, a frozen process) and
    /// tells the region before anything else is done.
    pub(super) fn notice_gap(&mut self, now: Instant, out: &mut Vec<KindEffect<M>>) {
        let gap = now.saturating_duration_since(self.last_run);
        self.last_run = self.last_run.max(now);
        if gap.is_zero() {
            return;
        }
        // A coordinator whose lease ran out meanwhile stops before anything else: another
        // node may be standing in for it (`ShardingView::stand_in`).
        if self.coordinator.is_some()
            && let Some(event) = self
                .coordinator_lease
                .as_mut()
                .and_then(|keeper| keeper.expire_if_due(now, &()))
        {
            self.coordinator_lease_event(now, event, out);
        }
        let mut rout = std::mem::take(&mut self.region_out);
        self.region.woke_after(gap, &mut rout);
        self.region_effects(&mut rout, out);
        self.region_out = rout;
    }

    /// The next instant [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.region.poll_timeout(),
            self.coordinator.as_ref().and_then(|c| c.poll_timeout()),
            self.view.next_expiry(),
            self.shutdown_deadline.filter(|_| !self.region.is_stopped()),
            self.coordinator_lease
                .as_ref()
                .and_then(LeaseKeeper::poll_timeout),
            self.fence.as_ref().and_then(SelfFence::next_deadline),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Judges the time before anything else happens at `now`: runs what is due, as
    /// [`handle_timeout`](Self::handle_timeout) does, or, if nothing is, only notices how
    /// long this node was not run.
    ///
    /// A driver calls it before it hands its entities anything that does not pass through
    /// this node: a finished handler, a store's answer to an entity's write, the entities' own
    /// timers. Those may be the first thing a node runs after a pause (a frozen process, a
    /// timer that fires late), and a shard whose lease lapsed meanwhile must have its entities
    /// stopped before any of them acts again: a finished passivation or failure would
    /// otherwise start a new incarnation for the commands queued behind it, under no lease,
    /// possibly while the shard already runs on another node (the reliable sweep's seeds 3298
    /// and 4451). A self-fence whose deadline passed closes first in the same way.
    pub fn catch_up(&mut self, now: Instant, out: &mut Vec<KindEffect<M>>) {
        if self.poll_timeout().is_some_and(|t| t <= now) {
            self.handle_timeout(now, out);
        } else {
            self.notice_gap(now, out);
            self.drain_loopback(now, out);
        }
    }

    /// Until when the coordinator's lease may be counted on here (for checkers), while this
    /// node holds it: past it, the coordinator stops before it does anything else.
    pub fn coordinator_lease_deadline(&self) -> Option<Instant> {
        self.coordinator_lease.as_ref()?.deadline(&())
    }

    /// Runs what is due at `now`: lingering members expiring, the hand-off limit on leaving,
    /// then the coordinator's and the region's timers.
    pub fn handle_timeout(&mut self, now: Instant, out: &mut Vec<KindEffect<M>>) {
        self.notice_gap(now, out);
        if self.view.expire(now) {
            self.view_changed(now, out);
        }
        if let Some(change) = self.fence.as_mut().map(|f| f.tick(now)) {
            self.fence_changed(now, change, out);
        }
        if self
            .shutdown_deadline
            .is_some_and(|t| t <= now && !self.region.is_stopped())
        {
            // The hand-off did not finish in time: stop what is left (its buffered messages
            // are reported dropped, its entities stop at once).
            let mut rout = std::mem::take(&mut self.region_out);
            self.region.stop(&mut rout);
            self.region_effects(&mut rout, out);
            self.region_out = rout;
        }
        if let Some(keeper) = &mut self.coordinator_lease
            && keeper.poll_timeout().is_some_and(|t| t <= now)
        {
            let mut calls = Vec::new();
            let events = keeper.handle_timeout(now, &mut calls);
            push_coordinator_calls(calls, out);
            for event in events {
                self.coordinator_lease_event(now, event, out);
            }
        }
        if let Some(c) = &mut self.coordinator
            && c.poll_timeout().is_some_and(|t| t <= now)
        {
            let mut cout = std::mem::take(&mut self.coordinator_out);
            c.handle_timeout(now, &self.view, &mut cout);
            self.coordinator_effects(&mut cout, out);
            self.coordinator_out = cout;
        }
        if self.region.poll_timeout().is_some_and(|t| t <= now) {
            let mut rout = std::mem::take(&mut self.region_out);
            self.region.handle_timeout(now, &self.view, &mut rout);
            self.region_effects(&mut rout, out);
            self.region_out = rout;
        }
        self.drain_loopback(now, out);
    }
}
