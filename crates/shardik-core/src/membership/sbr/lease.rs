//! Lease-majority's lease protocol: a decision waits for the lease before it is acted on.
//!
//! The life of one decision:
//! 1. **Delayed** — the minority waits `acquire-lease-delay-for-minority` before asking, so
//!    that the majority, which asks at once, normally wins.
//! 2. **Asked** — the lease was requested ([`SbrAction::AcquireLease`]); the answer comes as
//!    [`LeaseGate::answer`]. No answer within `lease-operation-timeout` counts as a refusal.
//! 3. Granted: the decision is acted on, and the lease is kept until every node it downed is
//!    removed, plus `release-after` (just `release-after` when it downed nobody), so that the
//!    other side has asked, failed and downed itself before the lease is free again.
//!    Refused, failed or timed out: the reversed decision, which downs this side.
//!
//! Both outcomes are computed when the decision is taken, from that moment's view, as the
//! reference does by holding back every other input while it waits: what the lease arbitrates
//! is that decision, not whatever the view has become since.

use std::collections::BTreeSet;
use std::time::Duration;

use super::action::SbrAction;
use super::decision::Decision;
use crate::address::UniqueAddress;
use crate::time::Instant;

/// One decision's two outcomes: nodes in downing order (others first, self last).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Outcomes {
    /// The decision, acted on when the lease is granted.
    pub(super) decision: Decision,
    /// What it downs.
    pub(super) win: Vec<UniqueAddress>,
    /// What the reversed decision downs (always this node among them).
    pub(super) lose: Vec<UniqueAddress>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting to ask until this instant.
    Delayed { until: Instant },
    /// Asked as `attempt`; no answer by `deadline` counts as a refusal.
    Asked { attempt: u64, deadline: Instant },
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Pending {
    outcomes: Outcomes,
    phase: Phase,
}

/// When a held lease is given back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReleaseWhen {
    /// Once none of these nodes is a member any more (then `release-after` more).
    Removed(BTreeSet<UniqueAddress>),
    /// At this instant.
    At(Instant),
}

/// The lease-majority state of one node's resolver.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct LeaseGate {
    pending: Option<Pending>,
    /// Set while this node holds the lease (as far as it knows), with when to give it back.
    held: Option<ReleaseWhen>,
    next_attempt: u64,
}

impl LeaseGate {
    /// Whether a decision waits for the lease (the resolver then takes no other).
    pub(super) fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// When the held lease is to be given back, if it is held.
    pub(super) fn held(&self) -> Option<&ReleaseWhen> {
        self.held.as_ref()
    }

    /// A decision was taken: ask for the lease after `delay` (at once if this node holds it
    /// already: the holder's own check answers without a store call).
    pub(super) fn start(
        &mut self,
        now: Instant,
        delay: Duration,
        timeout: Duration,
        outcomes: Outcomes,
    ) -> Option<SbrAction> {
        let delay = if self.held.is_some() {
            Duration::ZERO
        } else {
            delay
        };
        self.pending = Some(Pending {
            outcomes,
            phase: Phase::Delayed { until: now + delay },
        });
        if delay.is_zero() {
            self.ask(now, timeout)
        } else {
            None
        }
    }

    /// Ends the pending decision (if any) as if the lease had been refused.
    pub(super) fn give_up(&mut self, now: Instant, release_after: Duration) -> Option<SbrAction> {
        let pending = self.pending.take()?;
        Some(self.conclude(now, pending.outcomes, false, release_after))
    }

    /// A decision that must not take the lease: the reversed one, at once.
    pub(super) fn without_lease(&mut self, outcomes: Outcomes) -> SbrAction {
        self.pending = None;
        self.held = None;
        SbrAction::Down {
            decision: outcomes.decision.reversed(),
            nodes: outcomes.lose,
        }
    }

    /// Time passed: ask once the delay is over; count a request unanswered by its deadline
    /// as refused. Returns the action due, if any.
    pub(super) fn tick(
        &mut self,
        now: Instant,
        timeout: Duration,
        release_after: Duration,
    ) -> Option<SbrAction> {
        match self.pending.as_ref()?.phase {
            Phase::Delayed { until } if now >= until => self.ask(now, timeout),
            Phase::Asked { deadline, .. } if now >= deadline => {
                let pending = self.pending.take()?;
                Some(self.conclude(now, pending.outcomes, false, release_after))
            }
            _ => None,
        }
    }

    fn ask(&mut self, now: Instant, timeout: Duration) -> Option<SbrAction> {
        let pending = self.pending.as_mut()?;
        self.next_attempt += 1;
        let attempt = self.next_attempt;
        pending.phase = Phase::Asked {
            attempt,
            deadline: now + timeout,
        };
        Some(SbrAction::AcquireLease { attempt })
    }

    /// The answer to request `attempt`. A late answer (the request timed out, or nothing is
    /// pending) that grants the lease is handed back at once: nothing was decided under it.
    pub(super) fn answer(
        &mut self,
        now: Instant,
        attempt: u64,
        granted: bool,
        release_after: Duration,
    ) -> Option<SbrAction> {
        let current = match self.pending {
            Some(Pending {
                phase:
                    Phase::Asked {
                        attempt: a,
                        deadline,
                    },
                ..
            }) if a == attempt => Some(deadline),
            _ => None,
        };
        if let Some(deadline) = current {
            let pending = self.pending.take()?;
            // Handled after its deadline (this node was frozen meanwhile, say): too late to
            // count on, like an answer that never came.
            let in_time = now < deadline;
            return Some(self.conclude(now, pending.outcomes, granted && in_time, release_after));
        }
        // Waiting for a newer request of the same owner: that one answers for the lease.
        (granted && self.held.is_none() && self.pending.is_none())
            .then_some(SbrAction::ReleaseLease)
    }

    /// Ends the pending decision with the lease `granted` or not: what to down.
    fn conclude(
        &mut self,
        now: Instant,
        outcomes: Outcomes,
        granted: bool,
        release_after: Duration,
    ) -> SbrAction {
        if granted {
            let downed: BTreeSet<UniqueAddress> = outcomes.win.iter().cloned().collect();
            self.held = Some(match self.held.take() {
                Some(ReleaseWhen::Removed(mut earlier)) => {
                    earlier.extend(downed);
                    ReleaseWhen::Removed(earlier)
                }
                _ if downed.is_empty() => ReleaseWhen::At(now + release_after),
                _ => ReleaseWhen::Removed(downed),
            });
            SbrAction::Down {
                decision: outcomes.decision,
                nodes: outcomes.win,
            }
        } else {
            // Not ours (or not any more): nothing to give back.
            self.held = None;
            SbrAction::Down {
                decision: outcomes.decision.reversed(),
                nodes: outcomes.lose,
            }
        }
    }

    /// Gives the lease back when its time has come: `is_member` tells which nodes are still
    /// members. Returns [`SbrAction::ReleaseLease`] when it is time.
    pub(super) fn release_due(
        &mut self,
        now: Instant,
        release_after: Duration,
        is_member: impl Fn(&UniqueAddress) -> bool,
    ) -> Option<SbrAction> {
        if self.pending.is_some() {
            return None;
        }
        if let Some(ReleaseWhen::Removed(nodes)) = &self.held
            && !nodes.iter().any(is_member)
        {
            self.held = Some(ReleaseWhen::At(now + release_after));
        }
        match self.held {
            Some(ReleaseWhen::At(at)) if now >= at => {
                self.held = None;
                Some(SbrAction::ReleaseLease)
            }
            _ => None,
        }
    }

    /// The earliest instant something is due (the delay's end, a request's deadline, a
    /// release time); `None` when nothing is timed.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        match (&self.pending, &self.held) {
            (
                Some(Pending {
                    phase: Phase::Delayed { until },
                    ..
                }),
                _,
            ) => Some(*until),
            (
                Some(Pending {
                    phase: Phase::Asked { deadline, .. },
                    ..
                }),
                _,
            ) => Some(*deadline),
            (None, Some(ReleaseWhen::At(at))) => Some(*at),
            _ => None,
        }
    }
}
