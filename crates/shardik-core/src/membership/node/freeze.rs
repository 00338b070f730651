//! After a freeze, a member does not welcome joiners until the members it heartbeats have
//! answered it again.
//!
//! Why: while a member is frozen (a long pause, a stopped process), the others may down and
//! remove it. It cannot know that when it wakes: its own view still says it is Up. If a
//! restarted node asked it to join in that moment, it would welcome it into a view the cluster
//! has left behind, and the two would go on as a second cluster (the simulator found this:
//! a member frozen 23 s welcomed two restarted nodes less than a second after waking). A member
//! that removed it answers its heartbeats with `Quarantined`, which stops it; one that did not
//! answers them as usual. So after a freeze this node refuses to welcome (`can_welcome`) until
//! every member it heartbeats, other than those already Down, has answered a heartbeat sent
//! after the freeze. A receiver that never answers is dead, and waits for the resolver to down
//! it like any other; meanwhile joiners go to another seed.
//!
//! A freeze is a leader tick overdue by more than the failure detector's acceptable pause: any
//! longer and the others may have started to count this node as unreachable.

use std::collections::BTreeSet;

use super::Membership;
use super::feature_state::FreezeCheck;
use crate::address::UniqueAddress;
use crate::membership::member::MemberStatus;
use crate::time::Instant;

impl Membership {
    /// Notes a freeze if the leader tick is overdue by more than the acceptable pause at `now`
    /// (called before any input is handled, so that a `Join` waiting in the inbox when the node
    /// wakes already meets the check).
    pub(super) fn notice_freeze(&mut self, now: Instant) {
        let Some(due) = self.timers.leader else {
            return;
        };
        if now.saturating_duration_since(due)
            <= self.cfg.failure_detector.phi.acceptable_heartbeat_pause
        {
            return;
        }
        let first_seq = self.heartbeat_seq + 1;
        self.freeze_check.get_or_insert_with(|| FreezeCheck {
            first_seq,
            answered: BTreeSet::new(),
        });
    }

    /// A heartbeat answer: counts towards the check, which ends once it is met.
    pub(super) fn note_answer_after_freeze(&mut self, from: &UniqueAddress, seq: u64) {
        let Some(check) = &mut self.freeze_check else {
            return;
        };
        if seq >= check.first_seq {
            check.answered.insert(from.clone());
        }
        if self.answered_since_freeze() {
            self.freeze_check = None;
        }
    }

    /// Whether this member's view is vouched for: no freeze pending, or every member it
    /// heartbeats (other than those Down or gone) answered a heartbeat sent after the freeze.
    pub(super) fn answered_since_freeze(&self) -> bool {
        let Some(check) = &self.freeze_check else {
            return true;
        };
        self.heartbeat.active_receivers().iter().all(|r| {
            check.answered.contains(r)
                || self
                    .gossip
                    .member(r)
                    .is_none_or(|m| m.status == MemberStatus::Down)
        })
    }
}
