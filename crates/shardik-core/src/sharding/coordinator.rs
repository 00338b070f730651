//! The shard coordinator for one entity kind (digest §1.3–1.4): decides where each shard
//! lives, moves shards (rebalance, graceful shutdown) with the hand-off protocol, and
//! re-homes the shards of regions that are gone.
//!
//! One runs per kind, on the node [`ShardingView::coordinator_node`] names, while that node
//! [hosts it](ShardingView::self_hosts_coordinator), or on its
//! [stand-in](ShardingView::stand_in) while that node is silent and the kind runs under leases.
//!
//! ## State after a crash
//!
//! The coordinator keeps its table in memory only. A new coordinator starts empty and rebuilds
//! the table from the regions' registrations, each of which lists the shards the region runs.
//! Until every region that may run shards has registered ([`ShardingView::expected_regions`]:
//! members with the role that are WeaklyUp, Up, Leaving, Exiting, Down, or removed but within
//! the down-removal margin), it answers only for shards it already knows and allocates none, so
//! no shard can get a second home while an unheard region still runs it. A downed member holds
//! allocation back until its margin has passed; an unreachable one until it is reachable or
//! downed, except under the lease takeover, where a silent member's shards are held by their
//! leases instead (see [`takeover`] and `ShardingView::stand_in`). See `docs/ARCHITECTURE.md`
//! for why we rebuild rather than replicate.
//!
//! ## Members that never started the kind
//!
//! A member whose application never called `init` for this kind has no region to register,
//! and would hold every new allocation back for as long as it stays. Its node answers the
//! coordinator's [`Protocol::CoordinatorStarted`] with [`Protocol::KindNotStarted`], echoing
//! the announcement's `epoch`, and the coordinator counts it as heard with no shards: it has
//! none, because a node has no shards of a kind it has no region for, and a node never drops
//! a kind's region while it runs. Allocation then proceeds among the regions that registered,
//! and never offers that member a shard (it is not a registered region). The races, each
//! resolved toward "never a second home":
//!
//! * **The answer crosses a registration.** The node starts the kind after answering: its
//!   region registers as usual (empty, since a new region hosts nothing) and may then receive
//!   shards. A registration always wins: `KindNotStarted` from a member already registered
//!   with this incarnation is ignored, whichever arrives first, and a registration removes the
//!   member from the not-started set.
//! * **An incarnation that did not ask.** Only a coordinator incarnation's own epoch counts.
//!   Without it, an answer to an earlier incarnation on this node, delayed past the member's
//!   later registration with that earlier one, could reach a new incarnation before the
//!   member registers again, and the new one would count as empty a region that holds shards.
//!   Epochs are the node's uid plus a per-node start count, so a restarted node (a new uid)
//!   does not repeat them either.
//! * **A node that restarts** is a new incarnation (a new uid): a new member, asked anew. The
//!   old incarnation's answer said nothing about the new one, and the old one, once removed,
//!   no longer counts as expected.
//! * **Strangers and non-members.** Sharding traffic is accepted only from members (the
//!   transport's rule, `docs/SECURITY.md`); the coordinator further counts an answer only from
//!   a member it expects (with the kind's role, not Joining) and only with its epoch.
//! * **Nodes of the previous version** never answer: they hold allocation back as before.
//!
//! Whoever has neither registered nor answered for `unheard_warning_after` is reported in a
//! [`CoordinatorEvent::RegionsUnheard`], again with a doubling interval (see [`unheard`]) until
//! the state is complete, so that a wait is never silent.
//!
//! ## Preparing for a full cluster shutdown
//!
//! Once the view says the cluster prepares for a full shutdown
//! ([`ShardingView::is_preparing_for_shutdown`]), no shard moves: no rebalance round runs, a
//! region's `GracefulShutdownReq` starts no hand-off (the region is only no longer offered
//! shards), and the shards of a region that goes away (it stopped them where they were, or its
//! node is gone) get no new home, neither at once nor when someone asks: they are *retired*
//! until the cluster starts again. Otherwise each node that stops would hand its shards, and
//! restart its remembered entities, on a node that is about to stop too. Shards that never had
//! a home are still allocated, so the cluster keeps working while it prepares. A coordinator
//! that starts on another node during the preparation (its node left) does not know which
//! shards were retired and allocates them when asked, as the reference always does.
//!
//! ## Where its parts are
//!
//! This file holds the coordinator's state, what it is asked and when it runs; beside it in
//! `coordinator/`: registrations and readiness (`registration.rs`), giving shards homes
//! (`homes.rs`), hand-offs and rebalance rounds (`hand_off.rs`), the allocation table
//! (`state.rs`), the lease takeover ([`takeover`], with what it remembers in
//! `takeover_watch.rs`) and the warning about unheard members ([`unheard`]).

mod hand_off;
mod homes;
mod registration;
mod state;
pub mod takeover;
mod takeover_watch;
pub mod unheard;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

pub use state::{CoordinatorState, StateError, StateEvent};
pub use takeover_watch::LeasesRead;

use crate::Instant;
use crate::lease::LeaseTiming;
use crate::membership::UniqueAddress;

use super::allocation::ShardAllocationStrategy;
use super::protocol::Protocol;
use super::shard_id::ShardId;
use super::view::ShardingView;
use takeover_watch::Takeover;

/// Coordinator settings (a subset of `cluster.sharding`).
#[derive(Clone, Debug)]
pub struct CoordinatorSettings {
    /// How often to ask the strategy for shards to rebalance.
    pub rebalance_interval: Duration,
    /// Limit on one hand-off, from `BeginHandOff` to `ShardStopped`.
    pub handoff_timeout: Duration,
    /// `HostShard` is resent after this until acknowledged.
    pub shard_start_timeout: Duration,
    /// No shard is allocated until this many regions on Up members have registered (the
    /// cluster's or the role's `min-nr-of-members`).
    pub min_members: usize,
    /// Hand-off forwards the old home's buffered messages: the new home is told its
    /// predecessor.
    pub forward_handoff: bool,
    /// A member that has neither registered nor answered [`Protocol::KindNotStarted`] for this
    /// long while it holds allocation back is reported
    /// ([`CoordinatorEvent::RegionsUnheard`]).
    pub unheard_warning_after: Duration,
    /// When the kind's shards and its coordinator both run under leases, their timing: the
    /// shards of a silent member then move as soon as the store says their leases have
    /// lapsed, without waiting for the member to be downed (see [`takeover`]). `None`: they
    /// wait for the member's removal, as without leases.
    pub lease_takeover: Option<LeaseTiming>,
}

impl Default for CoordinatorSettings {
    fn default() -> Self {
        CoordinatorSettings {
            rebalance_interval: Duration::from_secs(10),
            handoff_timeout: Duration::from_secs(60),
            shard_start_timeout: Duration::from_secs(10),
            min_members: 1,
            forward_handoff: true,
            unheard_warning_after: Duration::from_secs(10),
            lease_takeover: None,
        }
    }
}

/// Something worth logging or checking.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordinatorEvent {
    /// The table changed.
    State(StateEvent),
    /// A region reported a shard that another region already hosts (should never happen; the
    /// first claim is kept and the conflict reported).
    ConflictingClaim {
        /// The shard.
        shard: ShardId,
        /// The recorded home.
        home: UniqueAddress,
        /// The region that also claimed it.
        claimant: UniqueAddress,
    },
    /// A registration from a node that is not a member in a registrable status was ignored.
    RegistrationRefused(UniqueAddress),
    /// Every region that may run shards has registered (or said its node has not started the
    /// kind): allocation may begin.
    StateComplete,
    /// A member's node answered that it has not started the kind: it counts as heard, with no
    /// shards, and is never offered one until its region registers.
    KindNotStarted(UniqueAddress),
    /// Allocation is held back, waiting for these members (with how long each has been waited
    /// for) to register or answer. Reported after
    /// [`CoordinatorSettings::unheard_warning_after`] and again with a doubling interval.
    RegionsUnheard(Vec<(UniqueAddress, Duration)>),
    /// A hand-off started.
    HandOffStarted {
        /// The shard.
        shard: ShardId,
        /// Its home.
        from: UniqueAddress,
        /// Rebalance (true) or graceful shutdown of its region (false).
        rebalance: bool,
    },
    /// A hand-off ended; `ok` false when it timed out (the shard stays where it was).
    HandOffDone {
        /// The shard.
        shard: ShardId,
        /// Whether it completed.
        ok: bool,
    },
    /// This coordinator saw the cluster prepare for a full shutdown: from now on no shard is
    /// rebalanced or handed off, and shards whose region goes away get no new home.
    PreparingForShutdown,
    /// While the cluster prepares for a full shutdown, a region went away and its shards were
    /// not given a new home (they start again when the cluster does).
    ShardsRetired {
        /// The region that went away.
        region: UniqueAddress,
        /// How many shards it had.
        shards: usize,
    },
    /// The store said the leases of these shards of a silent region had lapsed: they were
    /// taken from it and given other homes before its member was downed (see [`takeover`]).
    ShardLeasesLapsed {
        /// The silent region.
        region: UniqueAddress,
        /// The shards that moved.
        shards: Vec<ShardId>,
    },
    /// Reading a silent region's shard leases from the store failed: nothing moved, and the
    /// read is tried again after the lease retry interval.
    LeaseReadFailed {
        /// The silent region.
        region: UniqueAddress,
        /// What went wrong.
        error: String,
    },
}

/// What the coordinator asks its runtime to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoordinatorEffect {
    /// Send a message to a region's node (may be this node).
    Send {
        /// Destination.
        to: UniqueAddress,
        /// The message.
        msg: Protocol,
    },
    /// Log or check.
    Event(CoordinatorEvent),
    /// Read the leases of these shards from the store, each as the store sees it now by its
    /// own clock, and answer with [`Coordinator::leases_read`] quoting `id`. An answer that
    /// does not come within the lease operation timeout counts as failed.
    ReadLeases {
        /// Quoted back in the answer.
        id: u64,
        /// The shards.
        shards: Vec<ShardId>,
    },
}

/// A hand-off under way.
#[derive(Debug)]
struct HandOff {
    /// The shard's home, which stops it.
    from: UniqueAddress,
    /// Regions that have not acknowledged `BeginHandOff` yet.
    acks_pending: BTreeSet<UniqueAddress>,
    /// Regions that acknowledged having drained what they sent to the home.
    drained: Vec<UniqueAddress>,
    /// `HandOff` was sent to the home.
    stopping: bool,
    /// When the hand-off is given up.
    deadline: Instant,
    /// Regions that asked for the shard's home meanwhile; answered when it is re-homed.
    deferred: BTreeSet<UniqueAddress>,
}

/// The coordinator of one entity kind.
pub struct Coordinator<S> {
    me: UniqueAddress,
    /// Names this incarnation in [`Protocol::CoordinatorStarted`].
    epoch: u64,
    settings: CoordinatorSettings,
    strategy: S,
    state: CoordinatorState,
    /// Regions and proxies registered with this incarnation.
    registered: BTreeSet<UniqueAddress>,
    /// Members whose node answered this incarnation that it has not started the kind (never
    /// one that is registered).
    not_started: BTreeSet<UniqueAddress>,
    /// Members this incarnation has announced itself to (each is told once when it becomes
    /// expected, and again every rebalance interval while it is silent).
    announced: BTreeSet<UniqueAddress>,
    unheard: unheard::Unheard,
    complete: bool,
    min_members_reached: bool,
    handoffs: BTreeMap<ShardId, HandOff>,
    unacked_hosts: BTreeMap<ShardId, (UniqueAddress, Instant)>,
    graceful: BTreeSet<UniqueAddress>,
    /// The old home of shards handed off in forwarding mode, until they are hosted again.
    predecessors: BTreeMap<ShardId, UniqueAddress>,
    /// Regions that asked for a shard's home when none could be given (its home was going
    /// away, or allocation had to wait), answered the moment it gets one: a region may hold
    /// other regions' messages for it, and every retry interval it waits lets those senders,
    /// once they know the new home, overtake them.
    unanswered: BTreeMap<ShardId, BTreeSet<UniqueAddress>>,
    next_rebalance: Instant,
    /// Reported [`CoordinatorEvent::PreparingForShutdown`] already.
    preparing_noted: bool,
    /// Shards that lost their home while the cluster prepared for a full shutdown: never given
    /// another by this coordinator (see the module docs). At most one entry per shard.
    retired: BTreeSet<ShardId>,
    /// Silent regions watched, and shards taken from them (see [`takeover`]), when the
    /// kind's shards and coordinator run under leases.
    takeover: Option<Takeover>,
}

impl<S: ShardAllocationStrategy<UniqueAddress>> Coordinator<S> {
    /// A coordinator starting with an empty table on node `me`.
    pub fn new(
        me: UniqueAddress,
        settings: CoordinatorSettings,
        strategy: S,
        now: Instant,
    ) -> Self {
        let takeover = settings.lease_takeover.map(Takeover::new);
        Coordinator {
            epoch: me.uid.max(1),
            me,
            not_started: BTreeSet::new(),
            announced: BTreeSet::new(),
            unheard: unheard::Unheard::new(settings.unheard_warning_after),
            next_rebalance: now + settings.rebalance_interval,
            settings,
            strategy,
            state: CoordinatorState::default(),
            registered: BTreeSet::new(),
            complete: false,
            min_members_reached: false,
            handoffs: BTreeMap::new(),
            unacked_hosts: BTreeMap::new(),
            graceful: BTreeSet::new(),
            predecessors: BTreeMap::new(),
            unanswered: BTreeMap::new(),
            preparing_noted: false,
            retired: BTreeSet::new(),
            takeover,
        }
    }

    /// Shards that lost their home while the cluster prepared for a full shutdown and that
    /// this coordinator will not give another.
    pub fn retired(&self) -> &BTreeSet<ShardId> {
        &self.retired
    }

    /// Whether the cluster prepares for a full shutdown; reports it the first time.
    fn preparing(&mut self, view: &ShardingView, out: &mut Vec<CoordinatorEffect>) -> bool {
        let preparing = view.is_preparing_for_shutdown();
        if preparing && !self.preparing_noted {
            self.preparing_noted = true;
            out.push(CoordinatorEffect::Event(
                CoordinatorEvent::PreparingForShutdown,
            ));
        }
        preparing
    }

    /// The same coordinator naming itself `epoch` in its announcements (0 is taken as 1: it
    /// means "no epoch" on the wire). A node gives each coordinator it starts a new one.
    pub fn with_epoch(mut self, epoch: u64) -> Self {
        self.epoch = epoch.max(1);
        self
    }

    /// The epoch this incarnation announces itself with.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Members whose node answered that it has not started the kind.
    pub fn not_started(&self) -> &BTreeSet<UniqueAddress> {
        &self.not_started
    }

    /// The allocation strategy (a driver hands a deferred strategy its answers through it).
    pub fn strategy_mut(&mut self) -> &mut S {
        &mut self.strategy
    }

    /// The allocation table.
    pub fn state(&self) -> &CoordinatorState {
        &self.state
    }

    /// Whether every region that may run shards has registered.
    pub fn is_complete(&self) -> bool {
        self.complete
    }

    /// Shards being handed off.
    pub fn handoffs_in_progress(&self) -> impl Iterator<Item = &ShardId> {
        self.handoffs.keys()
    }

    /// Regions registered with this coordinator (not proxies).
    pub fn alive_regions(&self) -> impl Iterator<Item = &UniqueAddress> {
        self.registered.iter().filter(|r| self.state.has_region(r))
    }

    fn send(&self, to: &UniqueAddress, msg: Protocol, out: &mut Vec<CoordinatorEffect>) {
        out.push(CoordinatorEffect::Send {
            to: to.clone(),
            msg,
        });
    }

    fn apply(&mut self, event: StateEvent, out: &mut Vec<CoordinatorEffect>) -> bool {
        // "Retired" means without a home until the cluster starts again (see the module docs):
        // a shard leaves the retired set before it is given one.
        debug_assert!(
            !matches!(&event, StateEvent::ShardHomeAllocated(s, _) if self.retired.contains(s)),
            "{event:?} while the shard is retired"
        );
        let result = self.state.apply(&event);
        // Every change is checked against the table before it is asked for: a refusal would
        // mean the coordinator lost track of its own table (a shard it thinks has no home
        // given a second one, say).
        debug_assert!(result.is_ok(), "the table refused {event:?}: {result:?}");
        match result {
            Ok(()) => {
                out.push(CoordinatorEffect::Event(CoordinatorEvent::State(event)));
                true
            }
            Err(_) => false,
        }
    }

    /// Handles a message from the region on node `from`.
    pub fn handle(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        msg: Protocol,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        match msg {
            Protocol::Register { hosted, proxy } => {
                self.register(now, from, hosted, proxy, view, out)
            }
            Protocol::GetShardHome { shard } => self.get_shard_home(now, from, shard, view, out),
            Protocol::ShardStarted { shard } => {
                if self
                    .unacked_hosts
                    .get(&shard)
                    .is_some_and(|(r, _)| r == from)
                {
                    self.unacked_hosts.remove(&shard);
                }
            }
            Protocol::BeginHandOffAck { shard, drained } => {
                if let Some(h) = self.handoffs.get_mut(&shard)
                    && h.acks_pending.remove(from)
                    && drained
                {
                    h.drained.push(from.clone());
                }
                self.progress_hand_off(now, &shard, view, out);
            }
            Protocol::ShardStopped { shard, .. } if self.revocation_answered(from, &shard) => {}
            Protocol::ShardStopped { shard, forwarding } => {
                if forwarding && self.settings.forward_handoff {
                    self.predecessors.insert(shard.clone(), from.clone());
                }
                if self.handoffs.get(&shard).is_some_and(|h| &h.from == from) {
                    self.hand_off_done(now, &shard, true, view, out);
                } else if self.state.home(&shard) == Some(from) {
                    // A hand-off that finished after the coordinator that asked for it went
                    // away: the shard no longer runs there.
                    self.apply(StateEvent::ShardHomeDeallocated(shard), out);
                }
            }
            Protocol::GracefulShutdownReq if self.preparing(view, out) => {
                // No hand-off while the cluster prepares for a full shutdown; the region is
                // only no longer offered shards. (A region of this version stops its shards in
                // place and does not ask; an older one does.)
                if self.state.has_region(from) {
                    self.graceful.insert(from.clone());
                }
            }
            Protocol::GracefulShutdownReq => {
                if self.state.has_region(from) && self.graceful.insert(from.clone()) {
                    let shards = self.state.regions()[from].clone();
                    for shard in shards {
                        self.start_hand_off(now, shard, false, view, out);
                    }
                }
            }
            Protocol::RegionStopped => self.region_terminated(now, from, view, out),
            Protocol::SilentHomes { homes } => self.silent_homes(now, from, homes, view, out),
            Protocol::KindNotStarted { epoch } => {
                self.kind_not_started(now, from, epoch, view, out)
            }
            // Region-bound messages never reach the coordinator.
            Protocol::RegisterAck
            | Protocol::CoordinatorStarted { .. }
            | Protocol::ShardHome { .. }
            | Protocol::ShardHomes { .. }
            | Protocol::HostShard { .. }
            | Protocol::BeginHandOff { .. }
            | Protocol::HandOff { .. }
            | Protocol::ShardsRevoked { .. }
            | Protocol::HandOffDrained { .. }
            | Protocol::HandOverDone { .. }
            | Protocol::RoutingHere { .. }
            | Protocol::NotHere { .. } => {}
        }
    }

    /// Applies a new membership view: regions whose nodes are gone are terminated, and
    /// readiness is re-evaluated.
    pub fn view_changed(
        &mut self,
        now: Instant,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        self.preparing(view, out);
        let gone: Vec<UniqueAddress> = self
            .state
            .regions()
            .keys()
            .chain(self.state.proxies().iter())
            .chain(self.registered.iter())
            .chain(self.not_started.iter())
            .filter(|r| !view.may_be_alive(r))
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for r in gone {
            self.region_terminated(now, &r, view, out);
        }
        // Hand-offs waiting for acks from regions that are now terminating: count them.
        let shards: Vec<ShardId> = self.handoffs.keys().cloned().collect();
        for shard in shards {
            if let Some(h) = self.handoffs.get_mut(&shard) {
                h.acks_pending.retain(|r| !view.is_terminating(r));
            }
            self.progress_hand_off(now, &shard, view, out);
        }
        self.update_readiness(now, view, out);
        self.watch_silent(now, view, out);
    }

    /// The next instant [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut next = self.next_rebalance;
        for h in self.handoffs.values() {
            next = next.min(h.deadline);
        }
        for (_, at) in self.unacked_hosts.values() {
            next = next.min(*at);
        }
        if let Some(at) = self.unheard.poll_timeout() {
            next = next.min(at);
        }
        if let Some(at) = self.takeover.as_ref().and_then(|t| t.poll_timeout()) {
            next = next.min(at);
        }
        Some(next)
    }

    /// Runs what is due: hand-off limits, `HostShard` resends, the rebalance round.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        view: &ShardingView,
        out: &mut Vec<CoordinatorEffect>,
    ) {
        let expired: Vec<ShardId> = self
            .handoffs
            .iter()
            .filter(|(_, h)| h.deadline <= now)
            .map(|(s, _)| s.clone())
            .collect();
        for shard in expired {
            self.hand_off_done(now, &shard, false, view, out);
        }
        let resend: Vec<(ShardId, UniqueAddress)> = self
            .unacked_hosts
            .iter()
            .filter(|(_, (_, at))| *at <= now)
            .map(|(s, (r, _))| (s.clone(), r.clone()))
            .collect();
        for (shard, region) in resend {
            if self.state.home(&shard) == Some(&region) {
                self.send(
                    &region,
                    Protocol::HostShard {
                        shard: shard.clone(),
                        predecessor: None,
                    },
                    out,
                );
                self.unacked_hosts
                    .insert(shard, (region, now + self.settings.shard_start_timeout));
            } else {
                self.unacked_hosts.remove(&shard);
            }
        }
        self.takeover_due(now, out);
        if let Some(waited) = self.unheard.due(now) {
            out.push(CoordinatorEffect::Event(CoordinatorEvent::RegionsUnheard(
                waited,
            )));
        }
        if self.next_rebalance <= now {
            self.next_rebalance = now + self.settings.rebalance_interval;
            if !self.complete || self.takeover.is_some() {
                // Regions that were registered with an earlier coordinator on this node may
                // not have heard that this one started; under the takeover the state may be
                // complete without a silent one, which hears it once it runs again.
                self.announce(view, out);
            }
            // Revocations a region may have missed go again while it can hear them.
            self.watch_silent(now, view, out);
            self.rebalance(now, view, out);
        }
    }
}

#[cfg(test)]
mod tests;
