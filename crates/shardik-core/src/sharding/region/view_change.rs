//! Following the membership view: a coordinator that moved or went away, homes on nodes that
//! are gone, markers that will never come from them, and this node downed or removed.

use std::time::Duration;

use super::hosted::Hosted;
use super::{Region, RegionEffect};
use crate::Instant;
use crate::membership::MemberStatus;
use crate::sharding::view::ShardingView;

impl<M> Region<M> {
    /// Applies a new membership view: re-registers when the coordinator moved, forgets homes
    /// on nodes that are gone or on their way out after a failure, stops waiting for markers
    /// from nodes that are gone, and stops the region when this node is downed or removed.
    ///
    /// A home on a Down (or removed and lingering) member is forgotten at once rather than when
    /// the member is gone: a message sent there would never be answered, while one buffered
    /// here waits for the shard's next home (the coordinator answers for the shard again once
    /// the member is gone) and is delivered there.
    pub fn view_changed(
        &mut self,
        now: Instant,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if self.stopped {
            return;
        }
        if matches!(
            view.self_status(),
            Some(MemberStatus::Down | MemberStatus::Removed)
        ) || (view.self_status().is_none() && self.registration.coordinator.is_some())
        {
            self.stop(out);
            return;
        }
        let expected = view.coordinator_node().cloned();
        // Registered with a silent coordinator node that has a stand-in: registering with the
        // stand-in does not wait for its announcement, which this region ignored if it came
        // before this region saw the oldest go quiet (then only the stand-in's next
        // announcement to unregistered members, a rebalance interval later, would bring it).
        let coordinator_gone = self.registration.coordinator.as_ref().is_some_and(|c| {
            !view.may_be_alive(c)
                || !view.may_run_coordinator(c)
                || view.stand_in().is_some_and(|stand_in| stand_in != c)
        });
        if coordinator_gone || expected != self.registration.expected {
            self.registration.expected = expected;
            if coordinator_gone || self.registration.coordinator.is_none() {
                self.forget_coordinator(out);
                self.registration.backoff =
                    (self.settings.retry_interval / 8).max(Duration::from_millis(100));
                self.registration.next_attempt = Some(now);
            }
        }
        // A stand-in that became the coordinator node (the silent one was removed) is the
        // coordinator from now on: nobody else will claim what it placed here.
        if self.registration.coordinator.as_ref() == view.coordinator_node() {
            self.registration.with_stand_in = false;
        }
        self.homes
            .retain(|_, home| view.may_be_alive(home) && !view.is_terminating(home));
        let homes = &self.homes;
        self.told
            .retain(|shard, told| homes.get(shard) == Some(told));
        let mut finished = Vec::new();
        let mut released = Vec::new();
        for (shard, state) in self.hosted.iter_mut() {
            match state {
                Hosted::HandingOff {
                    awaiting_drains, ..
                } => {
                    awaiting_drains.retain(|n| view.may_be_alive(n));
                    finished.push(shard.clone());
                }
                Hosted::AwaitingPredecessor { predecessor, .. }
                    if !view.may_be_alive(predecessor) =>
                {
                    released.push(shard.clone());
                }
                _ => {}
            }
        }
        for shard in released {
            self.release_held(now, &shard, out);
        }
        for shard in finished {
            self.maybe_finish_hand_off(&shard, out);
        }
        self.stop_in_place_if_alone(now, view, out);
        if self.stopped {
            return;
        }
        self.maybe_register(now, view, out);
    }
}
