//! Which regions the coordinator has heard: registrations (and the shards each region says it
//! runs), members whose node has not started the kind, announcements to the members still
//! unheard, and whether the state is complete enough to allocate (see the module docs).

use std::collections::BTreeSet;

use super::{Coordinator, CoordinatorEffect, CoordinatorEvent, StateEvent};
use crate::Instant;
use crate::membership::UniqueAddress;
use crate::sharding::allocation::ShardAllocationStrategy;
use crate::sharding::protocol::Protocol;
use crate::sharding::shard_id::ShardId;
use crate::sharding::view::ShardingView;

impl<S: ShardAllocationStrategy<UniqueAddress>> Coordinator<S> {
    pub(super) fn register(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        hosted: Vec<ShardId>,
        proxy: bool,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        if *from != self.me && !view.can_register(from) {
            out.push(CoordinatorEffect::Event(
                CoordinatorEvent::RegistrationRefused(from.clone()),
            ));
            return;
        }
        if proxy {
            if !self.state.proxies().contains(from) {
                self.apply(StateEvent::ProxyRegistered(from.clone()), out);
            }
        } else {
            if !self.state.has_region(from) {
                self.apply(StateEvent::RegionRegistered(from.clone()), out);
            }
            self.graceful.remove(from);
            let taken = self
                .takeover
                .as_ref()
                .and_then(|t| t.revoked_from(from))
                .cloned()
                .unwrap_or_default();
            // A shard taken from it that it has not heard of yet is not its to claim: it is
            // told again right after the acknowledgement.
            for shard in hosted.into_iter().filter(|s| !taken.contains(s)) {
                match self.state.home(&shard) {
                    None => {
                        // A region that runs it says so: whatever retired it, it has a home.
                        self.retired.remove(&shard);
                        self.apply(StateEvent::ShardHomeAllocated(shard, from.clone()), out);
                    }
                    Some(home) if home == from => {}
                    // Hearsay loses to the region itself: a home entered from another region's
                    // cache (`SilentHomes`) on a silent member that never registered here may
                    // be stale, while this region says it hosts the shard (its lease decides
                    // whether it runs it).
                    Some(home)
                        if self.takeover.is_some()
                            && !self.registered.contains(home)
                            && view.is_silent(home) =>
                    {
                        self.apply(StateEvent::ShardHomeDeallocated(shard.clone()), out);
                        self.apply(StateEvent::ShardHomeAllocated(shard, from.clone()), out);
                    }
                    // Under the takeover, a region that went silent may still hold a shard
                    // it was given (parked, its lease lapsed) whose revocation it never heard
                    // (the coordinator that took it went away): the first claim stands, and
                    // the lease decides who runs it, so this one is revoked.
                    Some(_) if self.takeover.is_some() => self.take_stale_claim(from, shard),
                    Some(home) => out.push(CoordinatorEffect::Event(
                        CoordinatorEvent::ConflictingClaim {
                            shard,
                            home: home.clone(),
                            claimant: from.clone(),
                        },
                    )),
                }
            }
        }
        self.registered.insert(from.clone());
        // It runs the kind now, whatever its node said before.
        self.not_started.remove(from);
        self.send(from, Protocol::RegisterAck, out);
        self.resend_revocation(from, out);
        let homes: Vec<(UniqueAddress, Vec<ShardId>)> = self
            .state
            .regions()
            .iter()
            .map(|(r, shards)| {
                let shards: Vec<ShardId> = shards
                    .iter()
                    .filter(|s| !self.handoffs.contains_key(*s))
                    .cloned()
                    .collect();
                (r.clone(), shards)
            })
            .filter(|(r, shards)| !shards.is_empty() && !view.is_terminating(r))
            .collect();
        if !homes.is_empty() {
            self.send(from, Protocol::ShardHomes { homes }, out);
        }
        self.update_readiness(now, view, out);
    }

    /// A member's node says it has not started the kind. Counted only from a member this
    /// incarnation expects and has not heard register, with this incarnation's epoch (see the
    /// module docs for why each condition).
    pub(super) fn kind_not_started(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        epoch: u64,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        if epoch != self.epoch
            || self.registered.contains(from)
            || !view.expected_regions().contains(from)
        {
            return;
        }
        if self.not_started.insert(from.clone()) {
            out.push(CoordinatorEffect::Event(CoordinatorEvent::KindNotStarted(
                from.clone(),
            )));
        }
        self.update_readiness(now, view, out);
    }

    /// Expected members neither registered nor known not to run the kind: the ones this
    /// coordinator announces itself to.
    fn unregistered(&self, view: &ShardingView) -> BTreeSet<UniqueAddress> {
        view.expected_regions()
            .into_iter()
            .filter(|r| !self.registered.contains(r) && !self.not_started.contains(r))
            .collect()
    }

    /// The [unregistered](Self::unregistered) members allocation waits for.
    ///
    /// Under the lease takeover a silent member is not waited for: whatever shards it runs,
    /// it runs under their leases, so a shard given another home starts there only once the
    /// store says the silent member's tenure is over; and should it register later, its
    /// claims on shards homed elsewhere are revoked (`take_stale_claim`). Without this, a
    /// coordinator standing in for a silent oldest node could allocate nothing until that
    /// node was downed.
    fn missing(&self, view: &ShardingView) -> BTreeSet<UniqueAddress> {
        let mut missing = self.unregistered(view);
        if self.takeover.is_some() {
            missing.retain(|r| !view.is_silent(r));
        }
        missing
    }

    /// Re-evaluates whether allocation may begin; announces this coordinator to members that
    /// became expected since it last did.
    pub(super) fn update_readiness(
        &mut self,
        now: Instant,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        let could_allocate = self.may_allocate();
        if !self.complete {
            let missing = self.missing(view);
            if missing.is_empty() {
                self.complete = true;
                out.push(CoordinatorEffect::Event(CoordinatorEvent::StateComplete));
            } else {
                for region in &missing {
                    if !self.announced.contains(region) {
                        self.announced.insert(region.clone());
                        let epoch = self.epoch;
                        self.send(region, Protocol::CoordinatorStarted { epoch }, out);
                    }
                }
            }
            self.unheard.track(now, &missing);
        }
        if !self.min_members_reached {
            let up_regions = self.alive_regions().filter(|r| view.can_host(r)).count();
            self.min_members_reached = up_regions >= self.settings.min_members.max(1);
        }
        if !could_allocate && self.may_allocate() {
            self.allocate_waiting(now, view, out);
        }
    }

    /// Allocates the shards regions asked for while allocation had to wait, now that it may
    /// begin, instead of at each region's next retry.
    fn allocate_waiting(
        &mut self,
        now: Instant,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        let waiting: Vec<(ShardId, UniqueAddress)> = self
            .unanswered
            .iter()
            .filter(|(shard, _)| {
                self.state.home(shard).is_none() && !self.handoffs.contains_key(*shard)
            })
            .filter_map(|(shard, asked)| Some((shard.clone(), asked.first()?.clone())))
            .collect();
        for (shard, requester) in waiting {
            self.get_shard_home(now, &requester, shard, view, out);
        }
    }

    /// Tells every expected region that has neither registered yet nor said its node has not
    /// started the kind that this coordinator runs (see [`Protocol::CoordinatorStarted`]).
    /// Silent ones too: allocation may not wait for them (under the takeover), but each must
    /// learn of this coordinator when it runs again, or it would go on taking an earlier one
    /// on the same node for its own.
    pub fn announce(&mut self, view: &ShardingView, out: &mut Vec<CoordinatorEffect>) {
        let epoch = self.epoch;
        for region in self.unregistered(view) {
            self.send(&region, Protocol::CoordinatorStarted { epoch }, out);
            self.announced.insert(region);
        }
    }

    /// Whether new shards may be allocated now.
    pub fn may_allocate(&self) -> bool {
        self.complete && self.min_members_reached
    }
}
