//! [`KindNode`]: everything one node runs for one entity kind, as one I/O-free state machine.
//!
//! It composes the kind's [`ShardingView`], its [`Region`], the [`Coordinator`] while this node
//! hosts it, and the decisions that tie them together:
//!
//! * who hosts the coordinator (the view's oldest member with the kind's role, unless this
//!   node only proxies), and starting or dropping it as the view changes;
//! * routing of protocol messages: those for the coordinator go to it when it runs here and
//!   are ignored otherwise (regions register with several candidates, and only the host
//!   answers), the rest go to the region;
//! * the loopback between region and coordinator on the same node, drained before a call
//!   returns, so nothing addressed to this node ever leaves it;
//! * leaving: as soon as the view shows this node Leaving or Exiting (whoever asked for the
//!   leave: a signal, the management API, another node), the region hands its shards off;
//!   after `shutdown_timeout` it stops whatever is left. [`KindNode::is_stopped`] tells the
//!   node's driver when its exit may be confirmed;
//! * a deferred allocation strategy's questions and answers (see [`strategy`]).
//!
//! The runtime's kind task and the simulator's sharding node are thin drivers of this type:
//! they feed it [`KindInput`]s with the current time, carry out the [`KindEffect`]s it pushes,
//! and call [`KindNode::handle_timeout`] when [`KindNode::poll_timeout`] is due. The entities
//! themselves are the driver's business: the node says when to deliver to one and when to stop
//! a shard's entities, and hears back through [`KindInput::EntitiesStopped`]. What reaches the
//! entities without passing through the node (a finished handler, a store's answer to an
//! entity's write, the entities' own timers) comes after [`KindNode::catch_up`]: the node judges
//! the deadlines that passed first (see there).

pub mod strategy;
#[cfg(test)]
mod tests;
mod time;

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use crate::Instant;
use crate::membership::{Member, MemberStatus, UniqueAddress};

use super::allocation::AllocationSnapshot;
use super::coordinator::{
    Coordinator, CoordinatorEffect, CoordinatorEvent, CoordinatorSettings, LeasesRead,
};
use super::fence::{FenceChange, SelfFence};
use super::protocol::Protocol;
use super::region::{DropReason, Envelope, Region, RegionEffect, RegionSettings};
use super::shard_id::ShardId;
use super::view::ShardingView;
use crate::lease::{LeaseAnswer, LeaseEvent, LeaseKeeper, LeaseLoss, LeaseRequest, LeaseTiming};
use strategy::{AllocationChoice, DeferredState, KindStrategy, Question};

/// Settings of one kind on one node.
#[derive(Clone, Debug)]
pub struct KindNodeSettings {
    /// The region's settings.
    pub region: RegionSettings,
    /// The coordinator's settings (used while this node hosts it).
    pub coordinator: CoordinatorSettings,
    /// The role whose members host the kind's shards (`None`: every member).
    pub role: Option<String>,
    /// Whether this node only routes (it lacks the role): a proxy never hosts shards nor the
    /// coordinator.
    pub proxy: bool,
    /// How long a crashed member counts as possibly alive after its removal.
    pub down_removal_margin: Duration,
    /// How long the hand-off on leaving may take before the region stops anyway.
    pub shutdown_timeout: Duration,
    /// The coordinator's lease (`coordinator-singleton.use-lease`): when set, the coordinator
    /// starts only after this node takes the kind's coordinator lease, and stops when it is
    /// lost.
    pub coordinator_lease: Option<LeaseTiming>,
    /// Self-fencing: when set (the split-brain resolver's stable-after), a node that has not
    /// seen a majority for this long stops running shards and its coordinator on its own,
    /// whatever brief heals come and go (see [`super::fence`]).
    pub self_fence_after: Option<Duration>,
}

/// What a lease of one kind protects.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LeaseKey {
    /// A shard (`use-lease`): its entities run only under it.
    Shard(ShardId),
    /// The kind's coordinator (`coordinator-singleton.use-lease`).
    Coordinator,
}

/// What a driver feeds a [`KindNode`].
#[derive(Debug)]
pub enum KindInput<M> {
    /// The node's membership as it now stands: every member it knows (any status) and the
    /// unreachable ones.
    Membership {
        /// Every member.
        members: Vec<Member>,
        /// Those some member cannot reach.
        unreachable: BTreeSet<UniqueAddress>,
    },
    /// A message for an entity: from a local sender (`from: None`) or from another node's
    /// region.
    Route {
        /// The node it came from.
        from: Option<UniqueAddress>,
        /// The message.
        env: Envelope<M>,
    },
    /// A protocol message from another node.
    Protocol {
        /// Its node.
        from: UniqueAddress,
        /// The message.
        msg: Protocol,
    },
    /// Every entity of `shard` has stopped (after [`KindEffect::StopEntities`]).
    EntitiesStopped(ShardId),
    /// A deferred strategy's answer to [`KindEffect::AllocationAsked`].
    AllocationAnswered {
        /// The region that asked.
        requester: UniqueAddress,
        /// The shard.
        shard: ShardId,
        /// Where it goes (`None`: not now; the region asks again later).
        answer: Option<UniqueAddress>,
    },
    /// A deferred strategy's answer to [`KindEffect::RebalanceAsked`], used at the next round.
    RebalanceAnswered(BTreeSet<ShardId>),
    /// Hand every shard off and stop the region (also done on its own when this node is seen
    /// Leaving or Exiting).
    Shutdown,
    /// Stop at once without hand-off (the node is going away): entities are dropped and
    /// buffered messages reported.
    Stop,
    /// Find (and so allocate) a home for `shard` although no message waits for it: a shard
    /// with remembered entities, which must start after a restart of the whole cluster
    /// before anyone writes to it. Asked again every retry interval until a home is known.
    WantHome(ShardId),
    /// The store's answer to [`KindEffect::Lease`] request `id` (acquisitions and renewals;
    /// releases are not answered).
    LeaseAnswered {
        /// The lease.
        key: LeaseKey,
        /// The request's id.
        id: u64,
        /// The answer.
        answer: LeaseAnswer,
    },
    /// The store's answer to [`KindEffect::ReadShardLeases`] request `id`.
    ShardLeasesRead {
        /// The request's id.
        id: u64,
        /// Each shard's lease as the store saw it, or what went wrong.
        answer: LeasesRead,
    },
}

/// Where [`KindNode::route`] sent a message: most go straight to their entity or to their
/// shard's known home, which the driver does at once; the rest are effects.
#[derive(Debug, PartialEq)]
pub enum Routed<M> {
    /// Deliver it to its entity here now (its shard runs here).
    Deliver(Envelope<M>),
    /// Send it to its shard's home, another node, now.
    Forward {
        /// The home.
        to: UniqueAddress,
        /// The message.
        env: Envelope<M>,
    },
    /// Routing did something else (buffered it, asked for a home, held it for a
    /// predecessor, dropped it): the effects pushed to `out` say what.
    Effects,
}

/// What a [`KindNode`] asks its driver to do.
#[derive(Debug, PartialEq)]
pub enum KindEffect<M> {
    /// Send a protocol message to another node (never this one: those loop back inside).
    Send {
        /// Destination.
        to: UniqueAddress,
        /// The message.
        msg: Protocol,
    },
    /// Send an entity's message on to the region that hosts its shard.
    Forward {
        /// Destination.
        to: UniqueAddress,
        /// The message.
        env: Envelope<M>,
    },
    /// Deliver to the entity here (creating it if it is not running).
    Deliver(Envelope<M>),
    /// Stop every entity of the shard, then feed [`KindInput::EntitiesStopped`].
    StopEntities(ShardId),
    /// Drop the shard's remaining entities now; no [`KindInput::EntitiesStopped`] is expected.
    ForceStopEntities(ShardId),
    /// The shard now runs here.
    ShardStarted(ShardId),
    /// The shard no longer runs here.
    ShardStopped(ShardId),
    /// A message was not delivered, for the reason given (the driver counts and logs it, and
    /// fails the sender's ask).
    Dropped {
        /// The message.
        env: Envelope<M>,
        /// Why.
        reason: DropReason,
    },
    /// The coordinator started (`true`) or stopped running on this node.
    CoordinatorRunning(bool),
    /// The coordinator reported something worth logging or checking.
    Coordinator(CoordinatorEvent),
    /// A deferred strategy is asked where to put `shard`; answer with
    /// [`KindInput::AllocationAnswered`].
    AllocationAsked {
        /// The region that asked.
        requester: UniqueAddress,
        /// The shard.
        shard: ShardId,
        /// The coordinator's view when it asked.
        snapshot: AllocationSnapshot<UniqueAddress>,
    },
    /// A deferred strategy is asked which shards to move; answer with
    /// [`KindInput::RebalanceAnswered`].
    RebalanceAsked {
        /// The coordinator's view when it asked.
        snapshot: AllocationSnapshot<UniqueAddress>,
        /// Shards already moving.
        in_progress: BTreeSet<ShardId>,
    },
    /// The region has stopped: its graceful shutdown finished (every shard handed off), or it
    /// was stopped (downed, removed, timed out, or [`KindInput::Stop`]). Emitted once.
    RegionStopped,
    /// Read the leases of these shards from the store (each as the store sees it by its own
    /// clock) and answer with [`KindInput::ShardLeasesRead`] quoting `id`: the coordinator
    /// looks for the shards of a silent member that nobody serves any more. An answer later
    /// than the lease operation timeout counts as failed.
    ReadShardLeases {
        /// Quoted back in the answer.
        id: u64,
        /// The shards.
        shards: Vec<ShardId>,
    },
    /// A store call on a lease: carry it out and answer acquisitions and renewals with
    /// [`KindInput::LeaseAnswered`]; a call that takes longer than the lease operation timeout
    /// may be answered late or never (the node counts it as failed).
    Lease(LeaseRequest<LeaseKey>),
    /// The shard's lease is held with `token`: its entities' writes carry it as their fence
    /// from now on (emitted before anything is delivered under it).
    ShardLeased {
        /// The shard.
        shard: ShardId,
        /// The lease's fencing token.
        token: u64,
    },
    /// The shard's lease was lost; its entities were stopped at once (a
    /// [`KindEffect::ForceStopEntities`] came first).
    ShardLeaseLost {
        /// The shard.
        shard: ShardId,
        /// Why.
        reason: LeaseLoss,
    },
    /// The coordinator's lease was lost; the coordinator stopped.
    CoordinatorLeaseLost(LeaseLoss),
    /// The self-fence closed (`true`: no shard runs here, nor the coordinator, until it
    /// opens) or opened (`false`).
    Fenced(bool),
    /// The node this region registers with as the coordinator's answered that it has not
    /// started the kind: no coordinator can run there, so this kind allocates nothing until
    /// that node starts it or leaves (the driver warns, rate-limited).
    CoordinatorNodeLacksKind(UniqueAddress),
    /// A lease is no longer failing after [`KindEffect::LeaseUnavailable`]: a renewal
    /// succeeded, or the coordinator's lease is no longer wanted (for a shard's acquisition,
    /// [`KindEffect::ShardLeased`] says so, and for the coordinator's,
    /// [`KindEffect::CoordinatorRunning`]).
    LeaseRecovered(LeaseKey),
    /// A lease's store failed (unreachable, an error, no answer in time): acquiring failed
    /// and is tried again later (for a shard, what waited was dropped with
    /// [`DropReason::LeaseUnavailable`]), or renewing a held lease failed (it is kept until its
    /// deadline, renewals go on).
    LeaseUnavailable {
        /// The lease.
        key: LeaseKey,
        /// What went wrong.
        error: String,
    },
}

/// Everything one node runs for one entity kind.
pub struct KindNode<M> {
    me: UniqueAddress,
    settings: KindNodeSettings,
    view: ShardingView,
    region: Region<M>,
    coordinator: Option<Coordinator<KindStrategy>>,
    allocation: AllocationChoice,
    /// Protocol messages from this node to itself, drained before a call returns.
    loopback: VecDeque<Protocol>,
    /// When the hand-off on leaving gives up (set when it starts).
    shutdown_deadline: Option<Instant>,
    /// The coordinator's lease, when configured.
    coordinator_lease: Option<LeaseKeeper<()>>,
    /// The self-fence, when on.
    fence: Option<SelfFence>,
    /// Coordinators started on this node so far: with the node's uid, each one's epoch.
    coordinator_starts: u64,
    region_out: Vec<RegionEffect<M>>,
    coordinator_out: Vec<CoordinatorEffect>,
    /// The latest `now` any call brought: a call long after it means this node was not run
    /// meanwhile (see [`Region::woke_after`]).
    last_run: Instant,
}

impl<M> std::fmt::Debug for KindNode<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KindNode")
            .field("me", &self.me)
            .field("proxy", &self.settings.proxy)
            .field("coordinator", &self.coordinator.is_some())
            .field("stopped", &self.region.is_stopped())
            .finish_non_exhaustive()
    }
}

impl<M> KindNode<M> {
    /// The kind on node `me`, created at `now`; its coordinator decides with `allocation`.
    pub fn new(
        me: UniqueAddress,
        settings: KindNodeSettings,
        allocation: AllocationChoice,
        now: Instant,
    ) -> Self {
        let coordinator_lease = settings.coordinator_lease.map(LeaseKeeper::new);
        let fence = settings.self_fence_after.map(|d| SelfFence::new(d, d));
        // Under the lease takeover a member may stand in for a silent coordinator node.
        let view = ShardingView::new(
            me.clone(),
            settings.role.clone(),
            settings.down_removal_margin,
        )
        .with_stand_in(settings.coordinator.lease_takeover.is_some());
        let region = Region::new(me.clone(), settings.proxy, settings.region.clone(), now);
        KindNode {
            me,
            settings,
            view,
            region,
            coordinator: None,
            allocation,
            loopback: VecDeque::new(),
            shutdown_deadline: None,
            coordinator_lease,
            fence,
            coordinator_starts: 0,
            region_out: Vec::new(),
            coordinator_out: Vec::new(),
            last_run: now,
        }
    }

    /// This node.
    pub fn me(&self) -> &UniqueAddress {
        &self.me
    }

    /// The region.
    pub fn region(&self) -> &Region<M> {
        &self.region
    }

    /// The view of the membership this kind decides by.
    pub fn view(&self) -> &ShardingView {
        &self.view
    }

    /// The coordinator, while it runs here.
    pub fn coordinator(&self) -> Option<&Coordinator<KindStrategy>> {
        self.coordinator.as_ref()
    }

    /// Whether the region has stopped (after a shutdown, a stop, or this node's removal).
    pub fn is_stopped(&self) -> bool {
        self.region.is_stopped()
    }

    /// Whether the region is handing its shards off to stop.
    pub fn is_shutting_down(&self) -> bool {
        self.region.is_shutting_down()
    }

    /// Whether a message for `shard` would be delivered here at once with nothing else to do
    /// (the shard runs here): a driver may then deliver it without calling
    /// [`handle`](Self::handle), which is the hot path for local traffic.
    pub fn delivers_at_once(&self, shard: &ShardId) -> bool {
        self.region.delivers_at_once(shard)
    }

    /// Whether `shard`'s entities may run here at `now` (hosted, taking deliveries, its lease
    /// held if shards use leases): what a driver asks before it starts an entity that no
    /// message started (a remembered one, a restart).
    pub fn runs_entities(&self, now: Instant, shard: &ShardId) -> bool {
        self.region.runs_entities(now, shard)
    }

    /// Where a message for `shard` from a local sender would be forwarded at once with
    /// nothing else to do (its home is another node): a driver may then send it there without
    /// calling [`handle`](Self::handle), which is the hot path of a proxy.
    pub fn forwards_at_once(&self, shard: &ShardId) -> Option<&UniqueAddress> {
        self.region.forwards_at_once(shard)
    }

    /// Routes one message (`from`: the node it came from, `None` for a local sender): the one
    /// routing decision every driver takes. Its common answers come back as [`Routed`] with
    /// no effect built (the hot path: a shard that runs here, or, from a local sender, a
    /// home known elsewhere with nothing waiting here); anything else is
    /// [`KindInput::Route`]'s handling, with its effects pushed to `out`.
    pub fn route(
        &mut self,
        now: Instant,
        from: Option<UniqueAddress>,
        env: Envelope<M>,
        out: &mut Vec<KindEffect<M>>,
    ) -> Routed<M> {
        if self.region.delivers_at_once(&env.shard) {
            return Routed::Deliver(env);
        }
        if from.is_none()
            && let Some(home) = self.region.forwards_at_once(&env.shard)
        {
            return Routed::Forward {
                to: home.clone(),
                env,
            };
        }
        self.handle(now, KindInput::Route { from, env }, out);
        Routed::Effects
    }

    /// Feeds one input; effects are pushed to `out`.
    pub fn handle(&mut self, now: Instant, input: KindInput<M>, out: &mut Vec<KindEffect<M>>) {
        self.notice_gap(now, out);
        match input {
            KindInput::Membership {
                members,
                unreachable,
            } => {
                let majority = SelfFence::sees_majority(&self.me, &members, &unreachable);
                if self.view.update(now, members, unreachable) {
                    self.view_changed(now, out);
                }
                if let Some(change) = self.fence.as_mut().map(|f| f.update(now, majority)) {
                    self.fence_changed(now, change, out);
                }
            }
            KindInput::Route { from, env } => {
                let mut rout = std::mem::take(&mut self.region_out);
                self.region.route(now, from.as_ref(), env, &mut rout);
                self.region_effects(&mut rout, out);
                self.region_out = rout;
            }
            KindInput::Protocol { from, msg } => self.protocol(now, &from, msg, out),
            KindInput::EntitiesStopped(shard) => {
                let mut rout = std::mem::take(&mut self.region_out);
                self.region.entities_stopped(&shard, &mut rout);
                self.region_effects(&mut rout, out);
                self.region_out = rout;
            }
            KindInput::AllocationAnswered {
                requester,
                shard,
                answer,
            } => {
                let Some(d) = self
                    .coordinator
                    .as_mut()
                    .and_then(|c| c.strategy_mut().deferred_mut())
                else {
                    // The coordinator moved away meanwhile: its successor asks afresh.
                    return;
                };
                d.answered(shard.clone(), answer);
                // Ask again for the requester, which now finds the answer waiting.
                self.protocol(now, &requester, Protocol::GetShardHome { shard }, out);
            }
            KindInput::RebalanceAnswered(shards) => {
                if let Some(d) = self
                    .coordinator
                    .as_mut()
                    .and_then(|c| c.strategy_mut().deferred_mut())
                {
                    d.rebalance_answered(shards);
                }
            }
            KindInput::Shutdown => self.begin_shutdown(now, out),
            KindInput::WantHome(shard) => {
                let mut rout = std::mem::take(&mut self.region_out);
                self.region.want_home(shard, &mut rout);
                self.region_effects(&mut rout, out);
                self.region_out = rout;
            }
            KindInput::Stop => {
                let mut rout = std::mem::take(&mut self.region_out);
                self.region.stop(&mut rout);
                self.region_effects(&mut rout, out);
                self.region_out = rout;
                self.stop_coordinator(out);
            }
            KindInput::LeaseAnswered {
                key: LeaseKey::Shard(shard),
                id,
                answer,
            } => {
                let mut rout = std::mem::take(&mut self.region_out);
                self.region
                    .lease_answered(now, &shard, id, answer, &self.view, &mut rout);
                self.region_effects(&mut rout, out);
                self.region_out = rout;
            }
            KindInput::ShardLeasesRead { id, answer } => {
                if let Some(c) = &mut self.coordinator {
                    let mut cout = std::mem::take(&mut self.coordinator_out);
                    c.leases_read(now, id, answer, &self.view, &mut cout);
                    self.coordinator_effects(&mut cout, out);
                    self.coordinator_out = cout;
                }
            }
            KindInput::LeaseAnswered {
                key: LeaseKey::Coordinator,
                id,
                answer,
            } => {
                if let Some(keeper) = &mut self.coordinator_lease {
                    let mut calls = Vec::new();
                    let event = keeper.answer(now, &(), id, answer, &mut calls);
                    push_coordinator_calls(calls, out);
                    if let Some(event) = event {
                        self.coordinator_lease_event(now, event, out);
                    }
                }
            }
        }
        self.drain_loopback(now, out);
    }

    /// Whether this node should run the coordinator now: the view names it and it is Up or
    /// Leaving. One that runs it keeps it through Exiting, because its own region's hand-off
    /// needs it and no other node starts one until this one is removed; an Exiting node does
    /// not start one.
    fn should_host_coordinator(&self) -> bool {
        if self.settings.proxy || !self.view.may_run_coordinator(&self.me) {
            return false;
        }
        if self.is_fenced() {
            return false;
        }
        match self.view.self_status() {
            Some(s) if s.counts_as_up() => true,
            Some(MemberStatus::Leaving) => true,
            Some(MemberStatus::Exiting) => self.coordinator.is_some(),
            _ => false,
        }
    }

    fn view_changed(&mut self, now: Instant, out: &mut Vec<KindEffect<M>>) {
        let hosts = self.should_host_coordinator();
        if hosts && self.coordinator.is_none() {
            self.start_coordinator(now, out);
        } else if !hosts {
            self.stop_coordinator(out);
        }
        self.coordinator_view_changed(now, out);
        let mut rout = std::mem::take(&mut self.region_out);
        self.region.view_changed(now, &self.view, &mut rout);
        self.region_effects(&mut rout, out);
        self.region_out = rout;
        if matches!(
            self.view.self_status(),
            Some(MemberStatus::Leaving | MemberStatus::Exiting)
        ) {
            // Every way of leaving hands the shards off first: the node's driver confirms
            // Exiting only once this region has stopped.
            self.begin_shutdown(now, out);
        }
    }

    /// Starts the coordinator here, once its lease (if configured) is held.
    fn start_coordinator(&mut self, now: Instant, out: &mut Vec<KindEffect<M>>) {
        if let Some(keeper) = &mut self.coordinator_lease
            && keeper.held(now, &()).is_none()
        {
            let mut calls = Vec::new();
            keeper.want(now, (), &mut calls);
            push_coordinator_calls(calls, out);
            return;
        }
        let strategy = match &mut self.allocation {
            AllocationChoice::Immediate(make) => KindStrategy::Immediate(make()),
            AllocationChoice::Deferred => KindStrategy::Deferred(DeferredState::default()),
        };
        // A new epoch for each incarnation: an answer to an earlier one's announcement must
        // not count with this one (see the coordinator's module docs).
        self.coordinator_starts += 1;
        let mut coordinator = Coordinator::new(
            self.me.clone(),
            self.settings.coordinator.clone(),
            strategy,
            now,
        )
        .with_epoch(self.me.uid.wrapping_add(self.coordinator_starts));
        let mut cout = std::mem::take(&mut self.coordinator_out);
        coordinator.announce(&self.view, &mut cout);
        self.coordinator = Some(coordinator);
        out.push(KindEffect::CoordinatorRunning(true));
        self.coordinator_effects(&mut cout, out);
        self.coordinator_out = cout;
    }

    /// Stops the coordinator here (if it runs) and gives its lease up.
    fn stop_coordinator(&mut self, out: &mut Vec<KindEffect<M>>) {
        if self.coordinator.take().is_some() {
            out.push(KindEffect::CoordinatorRunning(false));
        }
        if let Some(keeper) = &mut self.coordinator_lease
            && keeper.wants(&())
        {
            let mut calls = Vec::new();
            keeper.give_up(&(), &mut calls);
            push_coordinator_calls(calls, out);
            // No longer wanted: whatever its store said, it is not failing this node.
            out.push(KindEffect::LeaseRecovered(LeaseKey::Coordinator));
        }
    }

    fn coordinator_view_changed(&mut self, now: Instant, out: &mut Vec<KindEffect<M>>) {
        if let Some(c) = &mut self.coordinator {
            let mut cout = std::mem::take(&mut self.coordinator_out);
            c.view_changed(now, &self.view, &mut cout);
            self.coordinator_effects(&mut cout, out);
            self.coordinator_out = cout;
        }
    }

    fn coordinator_lease_event(
        &mut self,
        now: Instant,
        event: LeaseEvent<()>,
        out: &mut Vec<KindEffect<M>>,
    ) {
        match event {
            LeaseEvent::Acquired { .. } => {
                if self.should_host_coordinator() && self.coordinator.is_none() {
                    self.start_coordinator(now, out);
                    self.coordinator_view_changed(now, out);
                } else if !self.should_host_coordinator() {
                    self.stop_coordinator(out);
                }
            }
            LeaseEvent::Lost { reason, .. } => {
                if self.coordinator.take().is_some() {
                    out.push(KindEffect::CoordinatorRunning(false));
                }
                out.push(KindEffect::CoordinatorLeaseLost(reason));
                if self.should_host_coordinator()
                    && let Some(keeper) = &mut self.coordinator_lease
                {
                    let mut calls = Vec::new();
                    keeper.acquire_again(now, (), &mut calls);
                    push_coordinator_calls(calls, out);
                }
            }
            LeaseEvent::Unavailable { error, .. } | LeaseEvent::RenewalFailing { error, .. } => out
                .push(KindEffect::LeaseUnavailable {
                    key: LeaseKey::Coordinator,
                    error,
                }),
            LeaseEvent::RenewalRecovered { .. } => {
                out.push(KindEffect::LeaseRecovered(LeaseKey::Coordinator))
            }
        }
    }

    /// Whether the self-fence is closed: no shard runs here, nor the coordinator.
    pub fn is_fenced(&self) -> bool {
        self.fence.as_ref().is_some_and(SelfFence::is_closed)
    }

    /// The self-fence closed or opened: the region's shards stop (and wait, still hosted) or
    /// start again, and the coordinator stops or starts again (a new one, which the regions
    /// register with again).
    fn fence_changed(&mut self, now: Instant, change: FenceChange, out: &mut Vec<KindEffect<M>>) {
        if change == FenceChange::None {
            return;
        }
        let mut rout = std::mem::take(&mut self.region_out);
        if change == FenceChange::Closed {
            out.push(KindEffect::Fenced(true));
            self.region.suspend(&mut rout);
        } else {
            out.push(KindEffect::Fenced(false));
            self.region.resume(now, &self.view, &mut rout);
        }
        self.region_effects(&mut rout, out);
        self.region_out = rout;
        self.view_changed(now, out);
    }

    fn begin_shutdown(&mut self, now: Instant, out: &mut Vec<KindEffect<M>>) {
        if self.shutdown_deadline.is_some() || self.region.is_stopped() {
            return;
        }
        self.shutdown_deadline = Some(now + self.settings.shutdown_timeout);
        let mut rout = std::mem::take(&mut self.region_out);
        if self.view.is_preparing_for_shutdown() {
            // Every node is about to stop: handing shards to the ones that stop later would
            // only start their entities again, once per node that stops before them.
            self.region.stop_for_full_shutdown(now, &mut rout);
        } else {
            self.region.graceful_shutdown(&mut rout);
            // Nobody else may take the shards: they stop here rather than wait for a
            // coordinator to hand them off to nobody.
            self.region
                .stop_in_place_if_alone(now, &self.view, &mut rout);
        }
        self.region_effects(&mut rout, out);
        self.region_out = rout;
    }

    fn protocol(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        msg: Protocol,
        out: &mut Vec<KindEffect<M>>,
    ) {
        if let Protocol::KindNotStarted { epoch } = msg {
            self.kind_not_started(now, from, epoch, out);
            return;
        }
        if msg.is_for_coordinator() {
            // Registrations go to every candidate; only the host of the coordinator answers.
            if let Some(keeper) = &mut self.coordinator_lease
                && self.coordinator.is_some()
                && let Some(event) = keeper.expire_if_due(now, &())
            {
                self.coordinator_lease_event(now, event, out);
            }
            if let Some(c) = &mut self.coordinator {
                let mut cout = std::mem::take(&mut self.coordinator_out);
                c.handle(now, from, msg, &self.view, &mut cout);
                self.coordinator_effects(&mut cout, out);
                self.coordinator_out = cout;
            }
        } else {
            let mut rout = std::mem::take(&mut self.region_out);
            self.region.handle(now, from, msg, &self.view, &mut rout);
            self.region_effects(&mut rout, out);
            self.region_out = rout;
        }
    }

    /// `from`'s node has not started this kind. An answer to this node's coordinator (its
    /// epoch) goes to the coordinator, which decides whether it counts; an answer to this
    /// region's registration (epoch 0) from the node it takes for the coordinator's is worth
    /// a warning, since no coordinator can run there.
    fn kind_not_started(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        epoch: u64,
        out: &mut Vec<KindEffect<M>>,
    ) {
        if epoch != 0 {
            if let Some(c) = &mut self.coordinator {
                let mut cout = std::mem::take(&mut self.coordinator_out);
                c.handle(
                    now,
                    from,
                    Protocol::KindNotStarted { epoch },
                    &self.view,
                    &mut cout,
                );
                self.coordinator_effects(&mut cout, out);
                self.coordinator_out = cout;
            }
        } else if self.view.may_run_coordinator(from) && !self.region.is_stopped() {
            out.push(KindEffect::CoordinatorNodeLacksKind(from.clone()));
        }
    }

    fn drain_loopback(&mut self, now: Instant, out: &mut Vec<KindEffect<M>>) {
        while let Some(msg) = self.loopback.pop_front() {
            let me = self.me.clone();
            self.protocol(now, &me, msg, out);
        }
    }

    fn send(&mut self, to: UniqueAddress, msg: Protocol, out: &mut Vec<KindEffect<M>>) {
        if to == self.me {
            self.loopback.push_back(msg);
        } else {
            out.push(KindEffect::Send { to, msg });
        }
    }

    fn coordinator_effects(
        &mut self,
        effects: &mut Vec<CoordinatorEffect>,
        out: &mut Vec<KindEffect<M>>,
    ) {
        for e in effects.drain(..) {
            match e {
                CoordinatorEffect::Send { to, msg } => self.send(to, msg, out),
                CoordinatorEffect::Event(event) => out.push(KindEffect::Coordinator(event)),
                CoordinatorEffect::ReadLeases { id, shards } => {
                    out.push(KindEffect::ReadShardLeases { id, shards })
                }
            }
        }
        let raised = self
            .coordinator
            .as_mut()
            .and_then(|c| c.strategy_mut().deferred_mut())
            .map(|d| std::mem::take(&mut d.raised))
            .unwrap_or_default();
        for q in raised {
            out.push(match q {
                Question::Allocate {
                    requester,
                    shard,
                    snapshot,
                } => KindEffect::AllocationAsked {
                    requester,
                    shard,
                    snapshot,
                },
                Question::Rebalance {
                    snapshot,
                    in_progress,
                } => KindEffect::RebalanceAsked {
                    snapshot,
                    in_progress,
                },
            });
        }
    }

    fn region_effects(&mut self, effects: &mut Vec<RegionEffect<M>>, out: &mut Vec<KindEffect<M>>) {
        for e in effects.drain(..) {
            match e {
                RegionEffect::Send { to, msg } => self.send(to, msg, out),
                RegionEffect::Forward { to, env } => out.push(KindEffect::Forward { to, env }),
                RegionEffect::Deliver(env) => out.push(KindEffect::Deliver(env)),
                RegionEffect::ShardStarted(s) => out.push(KindEffect::ShardStarted(s)),
                RegionEffect::StopEntities(s) => out.push(KindEffect::StopEntities(s)),
                RegionEffect::ForceStopEntities(s) => out.push(KindEffect::ForceStopEntities(s)),
                RegionEffect::ShardStopped(s) => out.push(KindEffect::ShardStopped(s)),
                RegionEffect::Dropped { env, reason } => {
                    out.push(KindEffect::Dropped { env, reason })
                }
                RegionEffect::ShutdownComplete => out.push(KindEffect::RegionStopped),
                RegionEffect::Lease(request) => out.push(KindEffect::Lease(LeaseRequest {
                    key: LeaseKey::Shard(request.key),
                    id: request.id,
                    call: request.call,
                })),
                RegionEffect::ShardLeased { shard, token } => {
                    out.push(KindEffect::ShardLeased { shard, token })
                }
                RegionEffect::ShardLeaseLost { shard, reason } => {
                    out.push(KindEffect::ShardLeaseLost { shard, reason })
                }
                RegionEffect::LeaseRecovered(shard) => {
                    out.push(KindEffect::LeaseRecovered(LeaseKey::Shard(shard)))
                }
                RegionEffect::LeaseUnavailable { shard, error } => {
                    out.push(KindEffect::LeaseUnavailable {
                        key: LeaseKey::Shard(shard),
                        error,
                    })
                }
            }
        }
    }
}

/// Passes the coordinator lease's store calls on to the driver.
fn push_coordinator_calls<M>(calls: Vec<LeaseRequest<()>>, out: &mut Vec<KindEffect<M>>) {
    out.extend(calls.into_iter().map(|r| {
        KindEffect::Lease(LeaseRequest {
            key: LeaseKey::Coordinator,
            id: r.id,
            call: r.call,
        })
    }));
}
