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
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(10);

    fn t(s: u64) -> Instant {
        Instant::from_nanos(s * 1_000_000_000)
    }

    #[test]
    fn closes_after_the_decision_time_and_a_brief_heal_does_not_restart_the_clock() {
        let mut f = SelfFence::new(S, S);
        assert_eq!(f.update(t(0), true), FenceChange::None);
        assert_eq!(f.update(t(12), false), FenceChange::None);
        assert_eq!(f.next_deadline(), Some(t(22)));
        // A heal of one second in the middle.
        assert_eq!(f.update(t(20), true), FenceChange::None);
        assert_eq!(f.update(t(21), false), FenceChange::None);
        assert_eq!(f.tick(t(22)), FenceChange::Closed);
        assert!(f.is_closed());
        // Open only after a majority held for twice the decision time.
        assert_eq!(f.update(t(30), true), FenceChange::None);
        assert_eq!(f.next_deadline(), Some(t(50)));
        assert_eq!(f.tick(t(49)), FenceChange::None);
        assert_eq!(f.tick(t(50)), FenceChange::Opened);
        assert!(!f.is_closed());
    }

    #[test]
    fn a_deadline_passed_unseen_with_the_majority_settled_is_not_due_again() {
        // The sharding simulation's store-cut seed 4853: a node paused over its deadline
        // found a settled majority when it ran again, did not close, and was woken at the
        // past deadline over and over without its clock moving.
        let mut f = SelfFence::new(S, S);
        f.update(t(0), false);
        assert_eq!(f.update(t(8), true), FenceChange::None);
        assert_eq!(f.next_deadline(), Some(t(10)));
        // Paused from before 10 until 14: by then the majority has held for 6 s.
        assert_eq!(f.tick(t(14)), FenceChange::None);
        assert!(!f.is_closed());
        assert_eq!(f.next_deadline(), Some(t(18)));
        assert_eq!(f.tick(t(18)), FenceChange::None);
        assert_eq!(f.next_deadline(), None);
        // Losing the majority again starts a new period.
        f.update(t(19), false);
        assert_eq!(f.next_deadline(), Some(t(29)));
    }

    #[test]
    fn a_majority_that_came_back_just_before_the_deadline_does_not_count() {
        // The failure detector reports a heal that is already over (the sim's seed 670).
        let mut f = SelfFence::new(S, S);
        f.update(t(0), false);
        assert_eq!(f.update(t(8), true), FenceChange::None);
        assert_eq!(f.tick(t(10)), FenceChange::Closed);
        // Then the majority goes again: still closed, and the clock to open starts over.
        f.update(t(12), false);
        assert_eq!(f.next_deadline(), None);
        f.update(t(13), true);
        assert_eq!(f.tick(t(32)), FenceChange::None);
        assert_eq!(f.tick(t(33)), FenceChange::Opened);
    }

    #[test]
    fn a_loss_shorter_than_the_decision_time_never_closes_it() {
        let mut f = SelfFence::new(S, S);
        f.update(t(0), false);
        f.update(t(3), true);
        // The majority is back, settled, when the deadline passes: no fence; healthy at 13.
        assert_eq!(f.tick(t(10)), FenceChange::None);
        assert_eq!(f.tick(t(13)), FenceChange::None);
        assert_eq!(f.next_deadline(), None);
        // Lost again at 16: a fresh period.
        f.update(t(16), false);
        assert_eq!(f.tick(t(25)), FenceChange::None);
        assert_eq!(f.tick(t(26)), FenceChange::Closed);
    }

    #[test]
    fn a_majority_is_counted_as_keep_majority_counts() {
        use crate::membership::Address;
        let n = |i: u16| UniqueAddress::new(Address::new(format!("n{i}"), 1), u64::from(i));
        let up =
            |i| Member::joining(n(i), BTreeSet::new(), String::new()).with_status(MemberStatus::Up);
        let members = vec![up(1), up(2), up(3), up(4)];
        let cut = |ids: &[u16]| ids.iter().map(|&i| n(i)).collect::<BTreeSet<_>>();
        assert!(SelfFence::sees_majority(&n(1), &members, &cut(&[4])));
        assert!(!SelfFence::sees_majority(&n(4), &members, &cut(&[1, 2, 3])));
        // 2|2: the half with the lowest address.
        assert!(SelfFence::sees_majority(&n(1), &members, &cut(&[3, 4])));
        assert!(!SelfFence::sees_majority(&n(3), &members, &cut(&[1, 2])));
        // A joining node is not counted and fences nothing.
        let mut joining = members.clone();
        joining.push(Member::joining(n(5), BTreeSet::new(), String::new()));
        assert!(SelfFence::sees_majority(
            &n(5),
            &joining,
            &cut(&[1, 2, 3, 4])
        ));
    }
}
