//! Self-fencing: a node that has not seen a majority of the cluster for the resolver's
//! decision time stops hosting shards and its coordinator on its own, without waiting to be
//! told it is down.
//!
//! Why: the majority side re-homes a downed node's shards once the down-removal margin has
//! passed after its removal, trusting that the node stopped by then. The node's own resolver
//! would down it, but a brief heal restarts the resolver's stable-after clock (the node sees
//! everyone again for a moment, and nobody tells it that it is already Down), so its own
//! decision can come after the margin (the sharding simulation's seed 670). The fence's clock
//! is not restarted by such a heal: the time without a majority runs from the first loss
//! until a majority has been seen without interruption for `stable_after`.
//!
//! Timing: the fence closes `fence_after` (the resolver's stable-after) after this node lost
//! the majority; the majority side decides no earlier than its stable-after after it lost
//! this node, removes it later still, and re-homes its shards a margin (stable-after again)
//! after that. So the fence closes a margin ahead of the re-homing, as long as the two sides'
//! failure detectors notice the cut within a margin of each other.
//!
//! Opening takes a majority seen for twice the decision time, and at the deadline a majority
//! seen for less than half of it does not count: a failure detector reports a heal that is
//! already over for as long as it takes to notice the cut again, so a short heal must neither
//! open the fence nor keep it from closing.
//!
//! A majority is counted as the keep-majority resolver counts: members that are Up or
//! Leaving (or ready for a full shutdown); on a tie the half with the lowest address wins.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::Instant;
use crate::membership::{Member, MemberStatus, UniqueAddress};

/// The fence of one node.
#[derive(Clone, Debug)]
pub struct SelfFence {
    fence_after: Duration,
    stable_after: Duration,
    /// When the current period without a healthy majority began (`None`: healthy).
    lost_at: Option<Instant>,
    /// Since when a majority has been seen without interruption (`None`: not seen now).
    majority_since: Option<Instant>,
    /// The last instant the fence was evaluated at: a deadline it has passed without closing
    /// (a tick that came late, after a pause, found the majority settled) is not due again.
    evaluated_at: Option<Instant>,
    fenced: bool,
}

/// What an update changed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FenceChange {
    /// Nothing.
    None,
    /// The fence closed: stop hosting.
    Closed,
    /// The fence opened: host again.
    Opened,
}

impl SelfFence {
    /// A fence that closes after `fence_after` without a majority, and opens again once a
    /// majority has been seen for `stable_after`.
    pub fn new(fence_after: Duration, stable_after: Duration) -> Self {
        SelfFence {
            fence_after,
            stable_after,
            lost_at: None,
            majority_since: None,
            evaluated_at: None,
            fenced: false,
        }
    }

    /// Whether the fence is closed (the node must not host).
    pub fn is_closed(&self) -> bool {
        self.fenced
    }

    /// Whether `me` sees a majority among `members`, with `unreachable` as seen from here.
    /// Before this node is a counted member (joining) it has nothing to fence.
    pub fn sees_majority(
        me: &UniqueAddress,
        members: &[Member],
        unreachable: &BTreeSet<UniqueAddress>,
    ) -> bool {
        use MemberStatus::*;
        let mut counted: Vec<&Member> = members
            .iter()
            .filter(|m| {
                matches!(
                    m.status,
                    Up | Leaving | PreparingForShutdown | ReadyForShutdown
                )
            })
            .collect();
        if !counted.iter().any(|m| m.addr == *me) {
            return true;
        }
        counted.sort_by(|a, b| a.addr.cmp(&b.addr));
        let reachable = counted
            .iter()
            .filter(|m| m.addr == *me || !unreachable.contains(&m.addr))
            .count();
        let others = counted.len() - reachable;
        match reachable.cmp(&others) {
            std::cmp::Ordering::Greater => true,
            std::cmp::Ordering::Less => false,
            std::cmp::Ordering::Equal => !unreachable.contains(&counted[0].addr),
        }
    }

    /// This node now sees a majority (`majority`) or not, at `now`.
    pub fn update(&mut self, now: Instant, majority: bool) -> FenceChange {
        if majority {
            self.majority_since.get_or_insert(now);
        } else {
            self.majority_since = None;
            self.lost_at.get_or_insert(now);
        }
        self.evaluate(now)
    }

    /// The clock moved to `now` (see [`next_deadline`](Self::next_deadline)).
    pub fn tick(&mut self, now: Instant) -> FenceChange {
        self.evaluate(now)
    }

    fn evaluate(&mut self, now: Instant) -> FenceChange {
        self.evaluated_at = Some(now);
        let seen_for = |since: Instant| now.saturating_duration_since(since);
        if self.fenced {
            // Open only once a majority has held for twice the decision time: a heal that
            // this node's failure detector merely has not noticed yet ends (the cut is back,
            // heartbeats stop) well within that.
            if self
                .majority_since
                .is_some_and(|since| seen_for(since) >= self.stable_after * 2)
            {
                self.lost_at = None;
                self.fenced = false;
                return FenceChange::Opened;
            }
            return FenceChange::None;
        }
        // A majority seen for the decision time ends the period without one.
        if self
            .majority_since
            .is_some_and(|since| seen_for(since) >= self.stable_after)
        {
            self.lost_at = None;
        }
        // At the deadline, a majority seen for less than half the decision time does not
        // count: it may be a heal the failure detector has not yet seen end.
        let due = self.lost_at.is_some_and(|at| now >= at + self.fence_after);
        let settled = self
            .majority_since
            .is_some_and(|since| seen_for(since) >= self.stable_after / 2);
        if due && !settled {
            self.fenced = true;
            return FenceChange::Closed;
        }
        FenceChange::None
    }

    /// When [`tick`](Self::tick) may change something.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.fenced {
            return self
                .majority_since
                .map(|since| since + self.stable_after * 2);
        }
        let at = self.lost_at?;
        let close = at + self.fence_after;
        match self.majority_since {
            None => Some(close),
            // The deadline comes before the majority settles: it closes then, unless it was
            // evaluated at or after the deadline already and found the majority settled by
            // then (the tick came late): due again, it would be due forever.
            Some(since)
                if close < since + self.stable_after / 2
                    && self.evaluated_at.is_none_or(|at| at < close) =>
            {
                Some(close)
            }
            // Otherwise the majority, if it holds, ends the period.
            Some(since) => Some(since + self.stable_after),
        }
    }
}

#[cfg(test)]
mod tests;
