//! Moving a silent member's shards once the store says their leases have lapsed (issue 43).
//!
//! A member that answers nothing (frozen, a hung machine, cut off) is downed by the resolver
//! only after `stable-after`, and its shards would wait for that. Under shard leases they need
//! not: a shard's entities run only while their region holds its lease, the holder counts on
//! it only until a deadline that comes before the store's expiry, and an expired lease is
//! never renewed (`crate::lease`). So when the store, by its own clock, says a silent
//! member's lease on a shard has lapsed, that member no longer serves the shard, and the
//! coordinator gives it another home at once. Membership still waits: the member is downed by
//! the resolver as before, and only the shards whose leases prove it is no longer serving
//! them move early.
//!
//! How, for each registered region on a silent member ([`ShardingView::is_silent`]) that has
//! shards, while the kind's shards and coordinator run under leases
//! ([`CoordinatorSettings::lease_takeover`](super::CoordinatorSettings::lease_takeover)):
//!
//! 1. the coordinator asks its driver to read the region's shard leases from the store
//!    ([`CoordinatorEffect::ReadLeases`]) at once, and again shortly after the earliest of
//!    them is due to run out, as long as the member stays silent;
//! 2. each shard whose lease the member held and the store says has expired, nobody holding
//!    it since ([`Lapse::Lapsed`]), loses its home
//!    in the table, the region is told ([`Protocol::ShardsRevoked`], resent until each shard
//!    is answered with `ShardStopped`, whenever the region can hear it), and the shard is
//!    allocated anew, the new home announced to every registered region so that none keeps
//!    forwarding to the silent one. The new home starts nothing until it acquires the lease,
//!    which the store grants only because it lapsed;
//! 3. a lease still held by the member moves nothing, nor does one the member never held (a
//!    shard given to it whose `HostShard` it never acted on may have messages on their way to
//!    it that no hand-off would drain; see `region/routing_order.rs`): a member cut
//!    off from its peers but not from the store keeps renewing, and its shards stay until the
//!    resolver decides. A read that fails or is not answered within the lease operation
//!    timeout moves nothing either, and is tried again after the lease retry interval: when
//!    the store cannot be reached, failover falls back to the resolver's decision.
//!
//! The read is only a trigger: what keeps one live copy is still the new home's acquisition,
//! judged by the store, exactly as after a removal.

use std::collections::BTreeSet;
use std::time::Duration;

pub use super::takeover_watch::LeasesRead;
use super::takeover_watch::{Reading, Watch};
use super::{Coordinator, CoordinatorEffect, CoordinatorEvent, StateEvent};
use crate::Instant;
use crate::lease::Lapse;
use crate::membership::UniqueAddress;
use crate::sharding::allocation::ShardAllocationStrategy;
use crate::sharding::protocol::Protocol;
use crate::sharding::shard_id::ShardId;
use crate::sharding::view::ShardingView;

/// The shortest wait between two reads of one silent region's leases.
const MIN_REREAD: Duration = Duration::from_millis(100);

/// How long after a lease's expected end it is read again: the store's clock and ours run at
/// about the same rate, and a read that comes a little late costs less than one that comes
/// too early and must be repeated.
const REREAD_SLACK: Duration = Duration::from_millis(50);

impl<S: ShardAllocationStrategy<UniqueAddress>> Coordinator<S> {
    /// Starts watching every registered region on a silent member that has shards, and stops
    /// watching those that are heard again, gone, or emptied; resends the revocations of
    /// regions that can hear them again.
    pub(super) fn watch_silent(
        &mut self,
        now: Instant,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        let preparing = view.is_preparing_for_shutdown();
        let Some(t) = &mut self.takeover else {
            return;
        };
        let silent: BTreeSet<UniqueAddress> = self
            .state
            .regions()
            .iter()
            .filter(|(r, shards)| {
                **r != self.me && !shards.is_empty() && view.is_silent(r) && !preparing
            })
            .map(|(r, _)| r.clone())
            .collect();
        t.watches.retain(|r, _| silent.contains(r));
        for region in silent {
            t.watches.entry(region).or_insert(Watch {
                next_read: now,
                reading: None,
            });
        }
        let heard: Vec<UniqueAddress> = t
            .revoked
            .keys()
            .filter(|r| !view.is_silent(r) && view.may_be_alive(r))
            .cloned()
            .collect();
        for region in heard {
            self.resend_revocation(&region, out);
        }
    }

    /// Reads whose time has come, and reads not answered in time (counted as failed).
    pub(super) fn takeover_due(&mut self, now: Instant, out: &mut Vec<CoordinatorEffect>) {
        let Some(t) = &mut self.takeover else {
            return;
        };
        for (region, watch) in &mut t.watches {
            if let Some(reading) = &watch.reading {
                if reading.deadline <= now {
                    watch.reading = None;
                    watch.next_read = now + t.timing.retry_interval;
                    out.push(CoordinatorEffect::Event(
                        CoordinatorEvent::LeaseReadFailed {
                            region: region.clone(),
                            error: format!(
                                "the store did not answer within {:?}",
                                t.timing.operation_timeout
                            ),
                        },
                    ));
                }
                continue;
            }
            if watch.next_read > now {
                continue;
            }
            let shards: Vec<ShardId> = self
                .state
                .regions()
                .get(region)
                .map(|s| s.to_vec())
                .unwrap_or_default();
            if shards.is_empty() {
                watch.next_read = now + t.timing.renew_interval;
                continue;
            }
            t.next_id += 1;
            watch.reading = Some(Reading {
                id: t.next_id,
                deadline: now + t.timing.operation_timeout,
            });
            out.push(CoordinatorEffect::ReadLeases {
                id: t.next_id,
                shards,
            });
        }
    }

    /// The store answered read `id`: the shards whose leases lapsed move now.
    pub fn leases_read(
        &mut self,
        now: Instant,
        id: u64,
        answer: LeasesRead,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        let Some(t) = &mut self.takeover else {
            return;
        };
        let Some((region, watch)) = t
            .watches
            .iter_mut()
            .find(|(_, w)| w.reading.as_ref().is_some_and(|r| r.id == id))
        else {
            return; // answered too late, or the region is no longer watched
        };
        let region = region.clone();
        watch.reading = None;
        let leases = match answer {
            Ok(leases) => leases,
            Err(error) => {
                watch.next_read = now + t.timing.retry_interval;
                out.push(CoordinatorEffect::Event(
                    CoordinatorEvent::LeaseReadFailed { region, error },
                ));
                return;
            }
        };
        if !view.is_silent(&region) || view.is_preparing_for_shutdown() {
            return; // heard again meanwhile: its own lease keeper takes over
        }
        let mut lapsed = Vec::new();
        let mut soonest: Option<Duration> = None;
        for (shard, lease) in leases {
            if self.state.home(&shard) != Some(&region) {
                continue;
            }
            match Lapse::judge(lease.as_ref(), &region) {
                Lapse::Lapsed { .. } => lapsed.push(shard),
                Lapse::Held { time_left } => {
                    soonest = Some(soonest.map_or(time_left, |s| s.min(time_left)));
                }
                // Given to it but never taken there, or held by someone else: messages may be
                // on their way to it that nothing would drain, so it waits for the resolver.
                Lapse::NotTheSuspects => {}
            }
        }
        let t = self.takeover.as_mut().expect("checked above");
        if let Some(watch) = t.watches.get_mut(&region) {
            let wait = soonest.map_or(t.timing.renew_interval, |left| {
                (left + REREAD_SLACK).clamp(MIN_REREAD, t.timing.ttl)
            });
            watch.next_read = now + wait;
        }
        if !lapsed.is_empty() {
            self.revoke(now, &region, lapsed, view, out);
        }
        self.watch_silent(now, view, out);
    }

    /// Takes `shards` from `region`, whose leases lapsed, and gives them other homes.
    fn revoke(
        &mut self,
        now: Instant,
        region: &UniqueAddress,
        shards: Vec<ShardId>,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        let mut handed_off = Vec::new();
        let mut free = Vec::new();
        for shard in &shards {
            self.unacked_hosts.remove(shard);
            // It can forward nothing: its next home waits for no predecessor.
            self.predecessors.remove(shard);
            if self.handoffs.get(shard).is_some_and(|h| &h.from == region) {
                handed_off.push(shard.clone());
            } else {
                self.apply(StateEvent::ShardHomeDeallocated(shard.clone()), out);
                free.push(shard.clone());
            }
        }
        let t = self.takeover.as_mut().expect("only called under takeover");
        t.revoked
            .entry(region.clone())
            .or_default()
            .extend(shards.iter().cloned());
        t.announce.extend(shards.iter().cloned());
        out.push(CoordinatorEffect::Event(
            CoordinatorEvent::ShardLeasesLapsed {
                region: region.clone(),
                shards: shards.clone(),
            },
        ));
        // Told first, on the connection every later message to it takes.
        self.resend_revocation(region, out);
        for shard in handed_off {
            self.hand_off_done(now, &shard, true, view, out);
        }
        let me = self.me.clone();
        for shard in free {
            self.get_shard_home(now, &me, shard, view, out);
        }
    }

    /// Tells `region` again which of its shards were taken away, if any are unanswered.
    pub(super) fn resend_revocation(
        &mut self,
        region: &UniqueAddress,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        let Some(shards) = self
            .takeover
            .as_ref()
            .and_then(|t| t.revoked.get(region))
            .filter(|s| !s.is_empty())
        else {
            return;
        };
        let msg = Protocol::ShardsRevoked {
            shards: shards.iter().cloned().collect(),
        };
        self.send(region, msg, out);
    }

    /// A region's homes cached on silent members, sent just before its registration: shards
    /// this coordinator has no home for are taken to live where the region last saw them, on
    /// a member whose region cannot register while it is silent (this coordinator may stand
    /// in for it, or have restarted). From then on that region is watched like any silent
    /// one, and each shard moves once the store says the member's own lease on it has lapsed;
    /// the region is never offered a new shard (it has not registered), and its own
    /// registration, should it come, finds its claims in the table.
    pub(super) fn silent_homes(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        homes: Vec<(UniqueAddress, Vec<ShardId>)>,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        if self.takeover.is_none() || (*from != self.me && !view.can_register(from)) {
            return;
        }
        let expected = view.expected_regions();
        for (region, shards) in homes {
            if region == self.me
                || self.registered.contains(&region)
                || !view.is_silent(&region)
                || !expected.contains(&region)
            {
                continue;
            }
            if !self.state.has_region(&region) {
                self.apply(StateEvent::RegionRegistered(region.clone()), out);
            }
            for shard in shards {
                if self.state.home(&shard).is_none()
                    && !self.handoffs.contains_key(&shard)
                    && !self.retired.contains(&shard)
                {
                    self.apply(StateEvent::ShardHomeAllocated(shard, region.clone()), out);
                }
            }
        }
        self.watch_silent(now, view, out);
    }

    /// `region` registered claiming `shard`, which another region holds in the table: it is
    /// told to give it up (right after its registration is acknowledged).
    pub(super) fn take_stale_claim(&mut self, region: &UniqueAddress, shard: ShardId) {
        if let Some(t) = &mut self.takeover {
            t.revoked.entry(region.clone()).or_default().insert(shard);
        }
    }

    /// `region` answered a revocation of `shard`: true when it was one (nothing else to do).
    pub(super) fn revocation_answered(&mut self, region: &UniqueAddress, shard: &ShardId) -> bool {
        let Some(t) = &mut self.takeover else {
            return false;
        };
        let Some(shards) = t.revoked.get_mut(region) else {
            return false;
        };
        let answered = shards.remove(shard);
        if shards.is_empty() {
            t.revoked.remove(region);
        }
        answered
    }

    /// `region` is gone: nothing more to tell it or watch.
    pub(super) fn forget_taken(&mut self, region: &UniqueAddress) {
        if let Some(t) = &mut self.takeover {
            t.revoked.remove(region);
            t.watches.remove(region);
        }
    }

    /// Announces the new home of a shard taken from a silent region to every registered
    /// region and proxy that is not told otherwise: they may still route to the silent one,
    /// which they forget only once it is Down.
    pub(super) fn announce_new_home(
        &mut self,
        shard: &ShardId,
        home: &UniqueAddress,
        told: &BTreeSet<UniqueAddress>,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        if !self
            .takeover
            .as_mut()
            .is_some_and(|t| t.announce.remove(shard))
        {
            return;
        }
        let revoked_from: BTreeSet<UniqueAddress> = self
            .takeover
            .as_ref()
            .map(|t| {
                t.revoked
                    .iter()
                    .filter(|(_, s)| s.contains(shard))
                    .map(|(r, _)| r.clone())
                    .collect()
            })
            .unwrap_or_default();
        let others: Vec<UniqueAddress> = self
            .registered
            .iter()
            .filter(|r| *r != home && !told.contains(*r) && !revoked_from.contains(*r))
            .cloned()
            .collect();
        for region in others {
            let msg = Protocol::ShardHome {
                shard: shard.clone(),
                region: home.clone(),
            };
            self.send(&region, msg, out);
        }
    }
}
