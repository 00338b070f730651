//! The holder of lease-majority's lease: a [`LeaseKeeper`] between the split-brain resolver
//! and the driver, so that the lease's timing (until when a grant counts, renewals, what a
//! late answer means) is the one every lease of the node follows.
//!
//! The resolver keeps its logic: it asks for the lease ([`SbrAction::AcquireLease`]) and
//! hears whether it was granted. The holder answers it:
//! - **at once, granted**, while the keeper holds the lease at `now` (no store call: the
//!   holder's own deadline says it still counts);
//! - otherwise after **one acquisition** ([`Effect::SbrLease`] with a [`LeaseRequest`]; the
//!   store's [`LeaseAnswer`] comes back as [`Input::SbrLeaseAnswered`]). A grant answers
//!   granted; another holder, a failure, or no answer within `lease-operation-timeout`
//!   answers not granted, and the keeper stops wanting the lease: there is no retry of its
//!   own, the resolver asks again when it decides again.
//!
//! While held, the keeper's renewals go out from its timers (the node's `poll_timeout` and
//! `handle_timeout` include them); a lost lease (a renewal refused, or none in time) is
//! simply no longer held, reported as [`Effect::SbrLeaseLost`]. [`SbrAction::ReleaseLease`]
//! gives it up. A node that stops does **not** release it: its timers stop, so do the
//! renewals, and the lease expires in the store after its time-to-live. Releasing it early
//! could hand it to a side this node's cluster has just downed, which would then survive too.
//!
//! One acquisition at a time: a new attempt while one is out is answered by that one (which
//! the driver carries out in order with the rest), so a release of a grant nobody waits for
//! can never be overtaken by a later acquisition of the same tenure.
//!
//! [`SbrAction::AcquireLease`]: crate::membership::sbr::SbrAction::AcquireLease
//! [`SbrAction::ReleaseLease`]: crate::membership::sbr::SbrAction::ReleaseLease
//! [`Input::SbrLeaseAnswered`]: super::Input::SbrLeaseAnswered

use super::io::Effect;
use crate::lease::{LeaseAnswer, LeaseCall, LeaseEvent, LeaseKeeper, LeaseRequest, LeaseTiming};
use crate::membership::sbr::Strategy;
use crate::time::Instant;

/// The acquisition that is out, and the resolver's attempt it answers.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Asking {
    id: u64,
    attempt: u64,
}

/// The resolver's answer a store answer or a timeout came to.
pub(super) type ResolverAnswer = Option<(u64, bool)>;

/// lease-majority's lease on this node.
#[derive(Debug)]
pub(super) struct SbrLeaseHolder {
    keeper: LeaseKeeper<()>,
    asking: Option<Asking>,
}

impl SbrLeaseHolder {
    /// The holder `strategy` needs: one for lease-majority, none for the others.
    pub(super) fn for_strategy(strategy: &Strategy) -> Option<Self> {
        match strategy {
            Strategy::LeaseMajority {
                lease_operation_timeout,
                lease_ttl,
                lease_renew_interval,
                ..
            } => Some(SbrLeaseHolder {
                keeper: LeaseKeeper::new(LeaseTiming {
                    ttl: *lease_ttl,
                    renew_interval: *lease_renew_interval,
                    operation_timeout: *lease_operation_timeout,
                    // Never used: the holder gives a lease that was not granted up at once.
                    retry_interval: *lease_operation_timeout,
                }),
                asking: None,
            }),
            _ => None,
        }
    }

    /// The token of the lease if it is held and counts at `now`.
    pub(super) fn held(&self, now: Instant) -> Option<u64> {
        self.keeper.held(now, &())
    }

    /// The resolver asks for the lease as `attempt`: `Some(true)` at once while it is held;
    /// otherwise `None`, and the answer comes from [`answered`](Self::answered) or
    /// [`handle_timeout`](Self::handle_timeout).
    pub(super) fn acquire(
        &mut self,
        now: Instant,
        attempt: u64,
        out: &mut Vec<Effect>,
    ) -> Option<bool> {
        // A deadline passed while no timer ran (a pause): lost before it is counted on.
        if let Some(event) = self.keeper.expire_if_due(now, &()) {
            report(event, out);
        }
        if self.held(now).is_some() {
            return Some(true);
        }
        if let Some(asking) = &mut self.asking {
            // Already out for an earlier attempt the resolver gave up on: that call answers
            // this one.
            asking.attempt = attempt;
            return None;
        }
        let mut requests = Vec::new();
        // Whatever is left of an earlier tenure that is not held (nothing, normally) goes.
        self.keeper.give_up(&(), &mut requests);
        self.keeper.want(now, (), &mut requests);
        for request in requests {
            if request.call == LeaseCall::Acquire {
                self.asking = Some(Asking {
                    id: request.id,
                    attempt,
                });
            }
            out.push(Effect::SbrLease(request));
        }
        None
    }

    /// The store answered request `id`. Returns the resolver's answer when `id` was the
    /// acquisition out.
    pub(super) fn answered(
        &mut self,
        now: Instant,
        id: u64,
        answer: LeaseAnswer,
        out: &mut Vec<Effect>,
    ) -> ResolverAnswer {
        let mut requests = Vec::new();
        let event = self.keeper.answer(now, &(), id, answer, &mut requests);
        push(requests, out);
        if let Some(event) = event {
            report(event, out);
        }
        match self.asking {
            Some(asking) if asking.id == id => Some((asking.attempt, self.settle(now, out))),
            _ => None,
        }
    }

    /// Runs the keeper's timers: renewals, deadlines, an acquisition not answered in time.
    pub(super) fn handle_timeout(&mut self, now: Instant, out: &mut Vec<Effect>) -> ResolverAnswer {
        let mut requests = Vec::new();
        let events = self.keeper.handle_timeout(now, &mut requests);
        push(requests, out);
        let mut timed_out = false;
        for event in events {
            // An acquisition that took too long is the only thing that makes it unavailable
            // here: no acquisition is ever retried.
            timed_out |= matches!(event, LeaseEvent::Unavailable { .. });
            report(event, out);
        }
        match self.asking {
            Some(asking) if timed_out => Some((asking.attempt, self.settle(now, out))),
            _ => None,
        }
    }

    /// The acquisition out has its outcome: whether the lease is held now. Not held, the
    /// keeper stops wanting it (a grant arriving later is given back).
    fn settle(&mut self, now: Instant, out: &mut Vec<Effect>) -> bool {
        self.asking = None;
        let granted = self.held(now).is_some();
        if !granted {
            let mut requests = Vec::new();
            self.keeper.give_up(&(), &mut requests);
            push(requests, out);
        }
        granted
    }

    /// The resolver gives the lease back: released if held; an acquisition out is abandoned.
    pub(super) fn release(&mut self, out: &mut Vec<Effect>) {
        self.asking = None;
        let mut requests = Vec::new();
        self.keeper.give_up(&(), &mut requests);
        push(requests, out);
    }

    /// When [`handle_timeout`](Self::handle_timeout) has work next.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.keeper.poll_timeout()
    }
}

fn push(requests: Vec<LeaseRequest<()>>, out: &mut Vec<Effect>) {
    out.extend(requests.into_iter().map(Effect::SbrLease));
}

/// Tells the driver what it must hear of: a lost lease. (A failing or recovered renewal it
/// sees from the store's answers itself; an unavailable store, from the acquisition's.)
fn report(event: LeaseEvent<()>, out: &mut Vec<Effect>) {
    if let LeaseEvent::Lost { reason, .. } = event {
        out.push(Effect::SbrLeaseLost(reason));
    }
}
