//! A node's region for one entity kind (digest §1.5): routes every message to its shard's
//! home, buffers while a home is unknown, hosts the shards the coordinator gives it, and hands
//! them off when asked.
//!
//! The region is generic over the message it routes (`M`): the runtime routes typed commands
//! for local senders and encoded bytes for remote ones through the same decisions. Entities
//! themselves are the runtime's business; the region tells it when to deliver
//! ([`RegionEffect::Deliver`]) and when to stop a shard's entities
//! ([`RegionEffect::StopEntities`]), and hears back through [`Region::entities_stopped`].
//!
//! ## Hand-off modes
//!
//! While a shard moves, messages for it collect in the old home (those that were already on
//! their way or arrived before the hand-off began). The reference drops them when the shard
//! stops ([`HandOffMode::Drop`]): delivering them later could put them behind newer messages
//! that other senders route directly to the new home. [`HandOffMode::Forward`] (our default)
//! delivers them without reordering:
//!
//! 1. every region that was routing to the old home sends it a [`Protocol::HandOffDrained`]
//!    marker when it forgets the home; the old home waits for all of them (so nothing more is
//!    in flight to it) before it reports the shard stopped;
//! 2. the coordinator names the old home as the shard's *predecessor* when it hosts the shard
//!    elsewhere, and tells the predecessor the new home;
//! 3. the old home forwards what it buffered, then [`Protocol::HandOverDone`];
//! 4. the new home delivers the predecessor's stream at once but holds everyone else's
//!    messages until that marker, then delivers them in arrival order.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::time::Duration;

use crate::Instant;
use crate::membership::{MemberStatus, UniqueAddress};

use super::protocol::Protocol;
use super::shard_id::{EntityId, ShardId};
use super::view::ShardingView;

/// What happens to messages the old home buffered when a shard is handed off.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub enum HandOffMode {
    /// Forward them to the new home, keeping per-sender order (our default: nothing is lost).
    #[default]
    Forward,
    /// Drop them, counted and reported, as the reference does.
    Drop,
}

/// Region settings (a subset of `cluster.sharding`).
#[derive(Clone, Debug)]
pub struct RegionSettings {
    /// Total messages buffered over all shards while their homes are unknown.
    pub buffer_size: usize,
    /// How often to retry registration and shard-home requests.
    pub retry_interval: Duration,
    /// Limit on one hand-off; entities still running after it (less 5 s, at least 1 s) are
    /// stopped forcibly, and a new home stops waiting for its predecessor after it.
    pub handoff_timeout: Duration,
    /// What to do with messages buffered at the old home during a hand-off.
    pub handoff_mode: HandOffMode,
}

impl Default for RegionSettings {
    fn default() -> Self {
        RegionSettings {
            buffer_size: 100_000,
            retry_interval: Duration::from_secs(2),
            handoff_timeout: Duration::from_secs(60),
            handoff_mode: HandOffMode::Forward,
        }
    }
}

/// A message addressed to an entity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Envelope<M> {
    /// The entity.
    pub entity: EntityId,
    /// Its shard.
    pub shard: ShardId,
    /// The payload (opaque to the region).
    pub msg: M,
}

/// Why a message was not delivered. Every drop is reported as an effect; the runtime counts
/// and logs it (and fails the sender's ask, if any).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DropReason {
    /// The region's buffer (`buffer-size`, total over shards) was full.
    BufferFull,
    /// Buffered at the old home during a hand-off in [`HandOffMode::Drop`].
    HandOff,
    /// The region has stopped (the node is leaving or was downed).
    RegionStopped,
    /// A proxy was asked to host a shard (misconfiguration; reported, not hosted).
    ProxyCannotHost,
}

impl DropReason {
    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::BufferFull => "buffer-full",
            DropReason::HandOff => "hand-off",
            DropReason::RegionStopped => "region-stopped",
            DropReason::ProxyCannotHost => "proxy-cannot-host",
        }
    }
}

/// What the region asks its runtime to do.
#[derive(Clone, Debug, PartialEq)]
pub enum RegionEffect<M> {
    /// Send a protocol message (to the coordinator's node or another region; `to` may be this
    /// node, when the coordinator runs here).
    Send {
        /// Destination node.
        to: UniqueAddress,
        /// The message.
        msg: Protocol,
    },
    /// Send a user message on to the region that hosts its shard.
    Forward {
        /// Destination node.
        to: UniqueAddress,
        /// The message.
        env: Envelope<M>,
    },
    /// Deliver to the entity here (creating it if it is not running).
    Deliver(Envelope<M>),
    /// The shard now runs here (informational: entities start on their first message).
    ShardStarted(ShardId),
    /// Stop every entity of the shard (with the kind's stop message) and then call
    /// [`Region::entities_stopped`].
    StopEntities(ShardId),
    /// The hand-off limit passed: drop the shard's remaining entities now, without waiting.
    /// The region already treats them as stopped.
    ForceStopEntities(ShardId),
    /// The shard no longer runs here (informational).
    ShardStopped(ShardId),
    /// A message was not delivered, for the reason given.
    Dropped {
        /// The message.
        env: Envelope<M>,
        /// Why.
        reason: DropReason,
    },
    /// The region finished its graceful shutdown (all shards handed off, buffers empty).
    ShutdownComplete,
}

/// A message waiting for its shard's home, with the node it came from (`None`: local).
#[derive(Debug)]
struct Buffered<M> {
    from: Option<UniqueAddress>,
    env: Envelope<M>,
}

/// A hosted shard's state.
#[derive(Debug)]
enum Hosted<M> {
    Running,
    /// Hosting, but messages from anyone but the predecessor wait for its hand-over marker.
    AwaitingPredecessor {
        predecessor: UniqueAddress,
        held: VecDeque<Envelope<M>>,
        until: Instant,
    },
    HandingOff {
        coordinator: UniqueAddress,
        entities_stopped: bool,
        awaiting_drains: BTreeSet<UniqueAddress>,
        force_at: Instant,
    },
}

/// Registration with the coordinator.
#[derive(Debug)]
struct Registration {
    coordinator: Option<UniqueAddress>,
    /// The coordinator node the view named when we last registered.
    expected: Option<UniqueAddress>,
    backoff: Duration,
    next_attempt: Option<Instant>,
}

/// One node's region (or proxy) for one entity kind.
#[derive(Debug)]
pub struct Region<M> {
    me: UniqueAddress,
    proxy: bool,
    settings: RegionSettings,
    registration: Registration,
    next_retry: Instant,
    /// Known homes of shards hosted elsewhere, looked up for every message a proxy or region
    /// forwards. Only probed and pruned, never iterated in an order that matters, so a
    /// randomly seeded fast hash is safe here.
    homes: HashMap<ShardId, UniqueAddress, foldhash::fast::RandomState>,
    hosted: HostedShards<M>,
    buffers: BTreeMap<ShardId, VecDeque<Buffered<M>>>,
    buffered: usize,
    /// Hand-over markers that arrived before the `HostShard` naming their sender.
    early_handovers: BTreeMap<ShardId, UniqueAddress>,
    /// Shards handed off from here in forwarding mode whose buffered messages still go to the
    /// new home, followed by a [`Protocol::HandOverDone`].
    handover_pending: BTreeSet<ShardId>,
    /// Shards whose home is wanted without a message waiting (remembered entities): asked for
    /// every retry until a home is known.
    wanted: BTreeSet<ShardId>,
    /// Drain markers that arrived before the hand-off they belong to.
    early_drains: BTreeMap<ShardId, BTreeSet<UniqueAddress>>,
    graceful: bool,
    stopped: bool,
}

impl<M> Region<M> {
    /// A region for `me`; a `proxy` only routes and never hosts.
    pub fn new(me: UniqueAddress, proxy: bool, settings: RegionSettings, now: Instant) -> Self {
        let backoff = (settings.retry_interval / 8).max(Duration::from_millis(100));
        Region {
            me,
            proxy,
            next_retry: now + settings.retry_interval,
            settings,
            registration: Registration {
                coordinator: None,
                expected: None,
                backoff,
                next_attempt: Some(now),
            },
            homes: HashMap::default(),
            hosted: HostedShards::default(),
            buffers: BTreeMap::new(),
            buffered: 0,
            handover_pending: BTreeSet::new(),
            wanted: BTreeSet::new(),
            early_drains: BTreeMap::new(),
            early_handovers: BTreeMap::new(),
            graceful: false,
            stopped: false,
        }
    }

    /// This region's node.
    pub fn node(&self) -> &UniqueAddress {
        &self.me
    }

    /// Whether this is a proxy-only region.
    pub fn is_proxy(&self) -> bool {
        self.proxy
    }

    /// The coordinator this region is registered with.
    pub fn coordinator(&self) -> Option<&UniqueAddress> {
        self.registration.coordinator.as_ref()
    }

    /// Shards running here (including ones being handed off or waiting for a predecessor).
    pub fn hosted_shards(&self) -> impl Iterator<Item = &ShardId> {
        self.hosted.keys()
    }

    /// Whether `shard` runs here and takes deliveries (not being handed off).
    pub fn is_hosting(&self, shard: &ShardId) -> bool {
        matches!(
            self.hosted.get(shard),
            Some(Hosted::Running | Hosted::AwaitingPredecessor { .. })
        )
    }

    /// Messages waiting for a shard home.
    pub fn buffered(&self) -> usize {
        self.buffered
    }

    /// The known home of `shard`.
    pub fn home_of(&self, shard: &ShardId) -> Option<&UniqueAddress> {
        if self.hosted.contains_key(shard) {
            return Some(&self.me);
        }
        self.homes.get(shard)
    }

    /// Whether the region has stopped (it no longer routes).
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Whether [`route`](Self::route) would deliver a message for `shard` here at once (the
    /// shard runs here and the region has not stopped), with nothing else to do. A runtime may
    /// deliver such a message itself and skip `route`.
    pub fn delivers_at_once(&self, shard: &ShardId) -> bool {
        !self.stopped && self.hosted.is_running(shard)
    }

    /// Routes one message. `from` is the node it came from (`None`: a local sender).
    pub fn route(
        &mut self,
        now: Instant,
        from: Option<&UniqueAddress>,
        env: Envelope<M>,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if self.stopped {
            out.push(RegionEffect::Dropped {
                env,
                reason: DropReason::RegionStopped,
            });
            return;
        }
        // The common case first, answered from a hash set: the shard runs here.
        if self.delivers_at_once(&env.shard) {
            out.push(RegionEffect::Deliver(env));
            return;
        }
        match self.hosted.get_mut(&env.shard) {
            Some(Hosted::Running) => out.push(RegionEffect::Deliver(env)),
            Some(Hosted::AwaitingPredecessor {
                predecessor, held, ..
            }) => {
                if from == Some(&*predecessor) {
                    out.push(RegionEffect::Deliver(env));
                } else {
                    held.push_back(env);
                }
            }
            Some(Hosted::HandingOff { .. }) => match self.settings.handoff_mode {
                HandOffMode::Forward => self.buffer(now, None, env, out),
                HandOffMode::Drop => out.push(RegionEffect::Dropped {
                    env,
                    reason: DropReason::HandOff,
                }),
            },
            // A message another region sent here believing this is the shard's home: the
            // coordinator has (or had) just chosen us, and our cached home is older than the
            // sender's. Bouncing it back along our stale entry could put it behind the sender's
            // later messages; hold it and ask instead (HostShard or ShardHome settles it, in
            // arrival order).
            None => match self.homes.get(&env.shard) {
                Some(home)
                    if from.is_none()
                        && *home != self.me
                        && !self.buffers.contains_key(&env.shard) =>
                {
                    out.push(RegionEffect::Forward {
                        to: home.clone(),
                        env,
                    })
                }
                _ => self.buffer(now, from.cloned(), env, out),
            },
        }
    }

    fn buffer(
        &mut self,
        _now: Instant,
        from: Option<UniqueAddress>,
        env: Envelope<M>,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if self.buffered >= self.settings.buffer_size {
            out.push(RegionEffect::Dropped {
                env,
                reason: DropReason::BufferFull,
            });
            return;
        }
        let shard = env.shard.clone();
        let buffer = self.buffers.entry(shard.clone()).or_default();
        let first = buffer.is_empty();
        buffer.push_back(Buffered { from, env });
        self.buffered += 1;
        let handing_off = matches!(self.hosted.get(&shard), Some(Hosted::HandingOff { .. }));
        if first && !handing_off {
            self.request_home(shard, out);
        }
    }

    /// Asks for the home of `shard` although no message waits for it, and keeps asking every
    /// retry interval until one is known (a proxy never hosts, so it does not ask).
    pub fn want_home(&mut self, shard: ShardId, out: &mut Vec<RegionEffect<M>>) {
        if self.proxy || self.stopped || self.homes.contains_key(&shard) {
            return;
        }
        if self.wanted.insert(shard.clone()) {
            self.request_home(shard, out);
        }
    }

    fn request_home(&self, shard: ShardId, out: &mut Vec<RegionEffect<M>>) {
        if let Some(c) = &self.registration.coordinator {
            out.push(RegionEffect::Send {
                to: c.clone(),
                msg: Protocol::GetShardHome { shard },
            });
        }
    }

    /// Handles a protocol message from `from` (a coordinator or another region).
    pub fn handle(
        &mut self,
        now: Instant,
        from: &UniqueAddress,
        msg: Protocol,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if self.stopped {
            return;
        }
        match msg {
            Protocol::RegisterAck => self.registered(from.clone(), out),
            Protocol::ShardHome { shard, region } => self.shard_home(now, shard, region, out),
            Protocol::ShardHomes { homes } => {
                for (region, shards) in homes {
                    for shard in shards {
                        self.shard_home(now, shard, region.clone(), out);
                    }
                }
            }
            Protocol::HostShard { shard, predecessor } => {
                if self.graceful {
                    // Shutting down: refuse by not acknowledging; remind the coordinator.
                    out.push(RegionEffect::Send {
                        to: from.clone(),
                        msg: Protocol::GracefulShutdownReq,
                    });
                    return;
                }
                if self.proxy {
                    return;
                }
                self.host(now, shard.clone(), predecessor, view, out);
                out.push(RegionEffect::Send {
                    to: from.clone(),
                    msg: Protocol::ShardStarted { shard },
                });
            }
            Protocol::BeginHandOff { shard } => {
                let old = self.homes.remove(&shard);
                let drained = match old {
                    Some(home) if home != self.me => {
                        out.push(RegionEffect::Send {
                            to: home,
                            msg: Protocol::HandOffDrained {
                                shard: shard.clone(),
                            },
                        });
                        self.settings.handoff_mode == HandOffMode::Forward
                    }
                    _ => false,
                };
                out.push(RegionEffect::Send {
                    to: from.clone(),
                    msg: Protocol::BeginHandOffAck { shard, drained },
                });
            }
            Protocol::HandOff {
                shard,
                drained_from,
            } => self.hand_off(now, from, shard, drained_from, view, out),
            Protocol::HandOffDrained { shard } => {
                if let Some(Hosted::HandingOff {
                    awaiting_drains, ..
                }) = self.hosted.get_mut(&shard)
                {
                    awaiting_drains.remove(from);
                    self.maybe_finish_hand_off(&shard, out);
                } else {
                    self.early_drains
                        .entry(shard)
                        .or_default()
                        .insert(from.clone());
                }
            }
            Protocol::HandOverDone { shard } => {
                match self.hosted.get(&shard) {
                    Some(Hosted::AwaitingPredecessor { predecessor, .. })
                        if predecessor == from =>
                    {
                        self.release_held(&shard, out)
                    }
                    Some(_) => {}
                    // Overtook the HostShard that names its sender (different connections).
                    None => {
                        self.early_handovers.insert(shard, from.clone());
                    }
                }
            }
            // Messages for the coordinator never reach a region's handler.
            Protocol::Register { .. }
            | Protocol::GetShardHome { .. }
            | Protocol::BeginHandOffAck { .. }
            | Protocol::ShardStopped { .. }
            | Protocol::GracefulShutdownReq
            | Protocol::RegionStopped
            | Protocol::ShardStarted { .. } => {}
        }
    }

    fn registered(&mut self, coordinator: UniqueAddress, out: &mut Vec<RegionEffect<M>>) {
        self.registration.coordinator = Some(coordinator.clone());
        self.registration.next_attempt = None;
        self.registration.backoff =
            (self.settings.retry_interval / 8).max(Duration::from_millis(100));
        // Wanted homes (remembered entities) are asked for now too, as buffered ones are:
        // after a restart of the whole cluster they are all there is to ask for, and leaving
        // them to the retry tick delayed every remembered entity by up to `retry_interval`.
        let waiting: Vec<ShardId> = self
            .buffers
            .keys()
            .filter(|s| !matches!(self.hosted.get(s), Some(Hosted::HandingOff { .. })))
            .chain(self.handover_pending.iter())
            .chain(self.wanted.iter())
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for shard in waiting {
            self.request_home(shard, out);
        }
        if self.graceful {
            out.push(RegionEffect::Send {
                to: coordinator,
                msg: Protocol::GracefulShutdownReq,
            });
        }
    }

    fn shard_home(
        &mut self,
        now: Instant,
        shard: ShardId,
        region: UniqueAddress,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        self.wanted.remove(&shard);
        if region == self.me {
            if !self.proxy && !self.hosted.contains_key(&shard) {
                // The coordinator says it lives here: host it (its HostShard may follow).
                self.hosted.insert(shard.clone(), Hosted::Running);
                out.push(RegionEffect::ShardStarted(shard.clone()));
            }
            self.handover_pending.remove(&shard);
            self.flush_local(&shard, out);
            return;
        }
        if self.hosted.contains_key(&shard) {
            // We run it and the coordinator names another home: a stale answer (it moved here
            // after the answer was sent). Keep hosting; the coordinator's table is authoritative
            // and will hand it off explicitly if it must move.
            return;
        }
        self.homes.insert(shard.clone(), region.clone());
        if let Some(buffer) = self.buffers.remove(&shard) {
            self.buffered -= buffer.len();
            for b in buffer {
                out.push(RegionEffect::Forward {
                    to: region.clone(),
                    env: b.env,
                });
            }
        }
        if self.handover_pending.remove(&shard) {
            out.push(RegionEffect::Send {
                to: region,
                msg: Protocol::HandOverDone { shard },
            });
        }
        let _ = now;
        self.check_shutdown(out);
    }

    fn host(
        &mut self,
        now: Instant,
        shard: ShardId,
        predecessor: Option<UniqueAddress>,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if self.hosted.contains_key(&shard) {
            return;
        }
        self.homes.remove(&shard);
        self.early_drains.remove(&shard);
        let marker_seen = self.early_handovers.remove(&shard);
        let predecessor = predecessor.filter(|p| *p != self.me);
        let waiting_for = predecessor
            .clone()
            .filter(|p| view.may_be_alive(p) && marker_seen.as_ref() != Some(p));
        let state = match waiting_for {
            Some(predecessor) => Hosted::AwaitingPredecessor {
                predecessor,
                held: VecDeque::new(),
                until: now + self.settings.handoff_timeout,
            },
            None => Hosted::Running,
        };
        self.hosted.insert(shard.clone(), state);
        out.push(RegionEffect::ShardStarted(shard.clone()));
        self.handover_pending.remove(&shard);
        self.flush_local_after(&shard, predecessor.as_ref(), out);
    }

    /// Delivers (or holds) what was buffered for a shard that now runs here.
    fn flush_local(&mut self, shard: &ShardId, out: &mut Vec<RegionEffect<M>>) {
        self.flush_local_after(shard, None, out);
    }

    /// Like [`flush_local`](Self::flush_local), but the predecessor's messages (its forwarded
    /// batch, which may have overtaken the `HostShard`) go first: everything else that was
    /// buffered is newer than anything the predecessor forwards for the same sender.
    fn flush_local_after(
        &mut self,
        shard: &ShardId,
        predecessor: Option<&UniqueAddress>,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        let Some(buffer) = self.buffers.remove(shard) else {
            return;
        };
        self.buffered -= buffer.len();
        let (first, rest): (Vec<Buffered<M>>, Vec<Buffered<M>>) = buffer
            .into_iter()
            .partition(|b| predecessor.is_some() && b.from.as_ref() == predecessor);
        out.extend(first.into_iter().map(|b| RegionEffect::Deliver(b.env)));
        match self.hosted.get_mut(shard) {
            Some(Hosted::AwaitingPredecessor { held, .. }) => {
                held.extend(rest.into_iter().map(|b| b.env))
            }
            _ => out.extend(rest.into_iter().map(|b| RegionEffect::Deliver(b.env))),
        }
    }

    fn release_held(&mut self, shard: &ShardId, out: &mut Vec<RegionEffect<M>>) {
        if let Some(Hosted::AwaitingPredecessor { held, .. }) =
            self.hosted.replace(shard, Hosted::Running)
        {
            out.extend(held.into_iter().map(RegionEffect::Deliver));
        }
    }

    fn hand_off(
        &mut self,
        now: Instant,
        coordinator: &UniqueAddress,
        shard: ShardId,
        drained_from: Vec<UniqueAddress>,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        let Some(state) = self.hosted.get(&shard) else {
            out.push(RegionEffect::Send {
                to: coordinator.clone(),
                msg: Protocol::ShardStopped {
                    shard,
                    forwarding: false,
                },
            });
            return;
        };
        if matches!(state, Hosted::HandingOff { .. }) {
            return; // a second HandOff while one runs
        }
        let handing_off = Hosted::HandingOff {
            coordinator: coordinator.clone(),
            entities_stopped: false,
            awaiting_drains: BTreeSet::new(),
            force_at: now + stop_limit(self.settings.handoff_timeout),
        };
        let held = match self.hosted.replace(&shard, handing_off) {
            Some(Hosted::AwaitingPredecessor { held, .. }) => held,
            _ => VecDeque::new(),
        };
        let early = self.early_drains.remove(&shard).unwrap_or_default();
        if let Some(Hosted::HandingOff {
            awaiting_drains, ..
        }) = self.hosted.get_mut(&shard)
        {
            *awaiting_drains = drained_from
                .into_iter()
                .filter(|n| *n != self.me && !early.contains(n) && view.may_be_alive(n))
                .collect();
        }
        // What waited for a predecessor, and what was buffered, now waits for the next home.
        match self.settings.handoff_mode {
            HandOffMode::Forward => {
                if !held.is_empty() {
                    self.buffered += held.len();
                    let buffer = self.buffers.entry(shard.clone()).or_default();
                    // Held messages arrived before anything buffered after them.
                    for env in held.into_iter().rev() {
                        buffer.push_front(Buffered { from: None, env });
                    }
                }
            }
            HandOffMode::Drop => {
                let buffered = self.buffers.remove(&shard).unwrap_or_default();
                self.buffered -= buffered.len();
                for env in held.into_iter().chain(buffered.into_iter().map(|b| b.env)) {
                    out.push(RegionEffect::Dropped {
                        env,
                        reason: DropReason::HandOff,
                    });
                }
            }
        }
        out.push(RegionEffect::StopEntities(shard));
    }

    /// The runtime finished stopping `shard`'s entities (after [`RegionEffect::StopEntities`]).
    pub fn entities_stopped(&mut self, shard: &ShardId, out: &mut Vec<RegionEffect<M>>) {
        if let Some(Hosted::HandingOff {
            entities_stopped, ..
        }) = self.hosted.get_mut(shard)
        {
            *entities_stopped = true;
            self.maybe_finish_hand_off(shard, out);
        }
    }

    fn maybe_finish_hand_off(&mut self, shard: &ShardId, out: &mut Vec<RegionEffect<M>>) {
        let coordinator = match self.hosted.get(shard) {
            Some(Hosted::HandingOff {
                coordinator,
                entities_stopped: true,
                awaiting_drains,
                ..
            }) if awaiting_drains.is_empty() => coordinator.clone(),
            _ => return,
        };
        self.hosted.remove(shard);
        out.push(RegionEffect::ShardStopped(shard.clone()));
        // Every drain marker is in, so nothing more arrives from other regions: if nothing is
        // buffered now, the next home has nothing to wait for (later local messages travel in
        // order behind anything we forward, on the same connection).
        let forwarding = self.settings.handoff_mode == HandOffMode::Forward
            && self.buffers.get(shard).is_some_and(|b| !b.is_empty());
        out.push(RegionEffect::Send {
            to: coordinator.clone(),
            msg: Protocol::ShardStopped {
                shard: shard.clone(),
                forwarding,
            },
        });
        if forwarding {
            // The coordinator tells us the next home (we are its predecessor); ask too, in case
            // this coordinator is not the one that will allocate it.
            self.handover_pending.insert(shard.clone());
            out.push(RegionEffect::Send {
                to: coordinator,
                msg: Protocol::GetShardHome {
                    shard: shard.clone(),
                },
            });
        }
        self.check_shutdown(out);
    }

    /// Applies a new membership view: re-registers when the coordinator moved, forgets homes
    /// on nodes that are gone, stops waiting for markers from them, and stops the region when
    /// this node is downed or removed.
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
        let coordinator_gone = self
            .registration
            .coordinator
            .as_ref()
            .is_some_and(|c| !view.may_be_alive(c) || Some(c) != expected.as_ref());
        if coordinator_gone || expected != self.registration.expected {
            self.registration.expected = expected;
            if coordinator_gone || self.registration.coordinator.is_none() {
                self.registration.coordinator = None;
                self.registration.backoff =
                    (self.settings.retry_interval / 8).max(Duration::from_millis(100));
                self.registration.next_attempt = Some(now);
            }
        }
        self.homes.retain(|_, home| view.may_be_alive(home));
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
            self.release_held(&shard, out);
        }
        for shard in finished {
            self.maybe_finish_hand_off(&shard, out);
        }
        self.maybe_register(now, view, out);
    }

    fn maybe_register(
        &mut self,
        now: Instant,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if self.registration.coordinator.is_some() {
            return;
        }
        let Some(at) = self.registration.next_attempt else {
            return;
        };
        if at > now {
            return;
        }
        let hosted: Vec<ShardId> = if self.proxy {
            Vec::new()
        } else {
            self.hosted.keys().cloned().collect()
        };
        for to in view.registration_targets() {
            out.push(RegionEffect::Send {
                to,
                msg: Protocol::Register {
                    hosted: hosted.clone(),
                    proxy: self.proxy,
                },
            });
        }
        // Exponential backoff up to the retry interval, then only the retry tick registers.
        if self.registration.backoff < self.settings.retry_interval {
            self.registration.next_attempt = Some(now + self.registration.backoff);
            self.registration.backoff *= 2;
        } else {
            self.registration.next_attempt = None;
        }
    }

    /// Starts a graceful shutdown: all shards are handed off, then
    /// [`RegionEffect::ShutdownComplete`] is emitted (at once for an empty region).
    pub fn graceful_shutdown(&mut self, out: &mut Vec<RegionEffect<M>>) {
        if self.graceful || self.stopped {
            return;
        }
        self.graceful = true;
        if let Some(c) = &self.registration.coordinator {
            out.push(RegionEffect::Send {
                to: c.clone(),
                msg: Protocol::GracefulShutdownReq,
            });
        }
        self.check_shutdown(out);
    }

    /// Whether a graceful shutdown was asked for.
    pub fn is_shutting_down(&self) -> bool {
        self.graceful
    }

    fn check_shutdown(&mut self, out: &mut Vec<RegionEffect<M>>) {
        // A pending hand-over always has buffered messages, so `buffers` covers it.
        if self.graceful && !self.stopped && self.hosted.is_empty() && self.buffers.is_empty() {
            self.stopped = true;
            if let Some(c) = self.registration.coordinator.take() {
                out.push(RegionEffect::Send {
                    to: c,
                    msg: Protocol::RegionStopped,
                });
            }
            out.push(RegionEffect::ShutdownComplete);
        }
    }

    /// Stops at once (this node was downed or removed, or is going away without hand-off):
    /// entities are dropped and buffered messages reported.
    pub fn stop(&mut self, out: &mut Vec<RegionEffect<M>>) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        for (shard, _) in self.hosted.take_all() {
            out.push(RegionEffect::ForceStopEntities(shard.clone()));
            out.push(RegionEffect::ShardStopped(shard));
        }
        for (_, buffer) in std::mem::take(&mut self.buffers) {
            for b in buffer {
                out.push(RegionEffect::Dropped {
                    env: b.env,
                    reason: DropReason::RegionStopped,
                });
            }
        }
        self.buffered = 0;
        if let Some(c) = self.registration.coordinator.take() {
            out.push(RegionEffect::Send {
                to: c,
                msg: Protocol::RegionStopped,
            });
        }
        out.push(RegionEffect::ShutdownComplete);
    }

    /// The next instant [`handle_timeout`](Self::handle_timeout) has work.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.stopped {
            return None;
        }
        let mut next = Some(self.next_retry);
        let mut consider = |t: Instant| next = Some(next.map_or(t, |n: Instant| n.min(t)));
        if let Some(t) = self.registration.next_attempt {
            if self.registration.coordinator.is_none() {
                consider(t);
            }
        }
        // Only shards waiting for a predecessor or handing off have deadlines; usually there
        // are none, and this runs on every turn of the runtime's loop.
        if self.hosted.any_in_transition() {
            for state in self.hosted.values() {
                match state {
                    Hosted::AwaitingPredecessor { until, .. } => consider(*until),
                    Hosted::HandingOff { force_at, .. } => consider(*force_at),
                    Hosted::Running => {}
                }
            }
        }
        next
    }

    /// Runs what is due: registration attempts, the retry tick, hand-off limits.
    pub fn handle_timeout(
        &mut self,
        now: Instant,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        if self.stopped {
            return;
        }
        let mut expired_wait = Vec::new();
        let mut forced = Vec::new();
        for (shard, state) in self.hosted.iter_mut() {
            match state {
                Hosted::AwaitingPredecessor { until, .. } if *until <= now => {
                    expired_wait.push(shard.clone())
                }
                Hosted::HandingOff {
                    force_at,
                    entities_stopped,
                    awaiting_drains,
                    ..
                } if *force_at <= now => {
                    if !*entities_stopped {
                        out.push(RegionEffect::ForceStopEntities(shard.clone()));
                        *entities_stopped = true;
                    }
                    awaiting_drains.clear();
                    forced.push(shard.clone());
                }
                _ => {}
            }
        }
        for shard in expired_wait {
            self.release_held(&shard, out);
        }
        for shard in forced {
            self.maybe_finish_hand_off(&shard, out);
        }
        if self.next_retry <= now {
            self.next_retry = now + self.settings.retry_interval;
            match &self.registration.coordinator {
                None => self.registration.next_attempt = Some(now),
                Some(c) => {
                    let c = c.clone();
                    let waiting: BTreeSet<ShardId> = self
                        .buffers
                        .keys()
                        .filter(|s| !matches!(self.hosted.get(s), Some(Hosted::HandingOff { .. })))
                        .chain(self.handover_pending.iter())
                        .chain(self.wanted.iter())
                        .cloned()
                        .collect();
                    for shard in waiting {
                        out.push(RegionEffect::Send {
                            to: c.clone(),
                            msg: Protocol::GetShardHome { shard },
                        });
                    }
                    if self.graceful {
                        out.push(RegionEffect::Send {
                            to: c,
                            msg: Protocol::GracefulShutdownReq,
                        });
                    }
                }
            }
        }
        self.maybe_register(now, view, out);
    }
}

/// How long a shard's entities get to stop during a hand-off before they are forced: the
/// reference's `max(1 s, handoff-timeout − 5 s)`, leaving the coordinator's overall limit room.
fn stop_limit(handoff_timeout: Duration) -> Duration {
    handoff_timeout
        .saturating_sub(Duration::from_secs(5))
        .max(Duration::from_secs(1))
}

mod hosted;
#[cfg(test)]
mod tests;

use hosted::HostedShards;
