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

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use crate::Instant;
use crate::membership::{MemberStatus, UniqueAddress};

use super::lease::{LeaseAnswer, LeaseEvent, LeaseKeeper, LeaseLoss, LeaseRequest, LeaseTiming};
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
    /// `use-lease`: when set, a shard's entities run only while this region holds the shard's
    /// lease (taken before the shard starts, renewed in the background, and the entities
    /// stopped at once when it is lost), with this timing.
    pub lease: Option<LeaseTiming>,
}

impl Default for RegionSettings {
    fn default() -> Self {
        RegionSettings {
            buffer_size: 100_000,
            retry_interval: Duration::from_secs(2),
            handoff_timeout: Duration::from_secs(60),
            handoff_mode: HandOffMode::Forward,
            lease: None,
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
    /// The shard runs under a lease (`use-lease`) that could not be acquired because the
    /// lease's store failed or did not answer: its entities do not run unfenced.
    LeaseUnavailable,
}

impl DropReason {
    /// Metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::BufferFull => "buffer-full",
            DropReason::HandOff => "hand-off",
            DropReason::RegionStopped => "region-stopped",
            DropReason::ProxyCannotHost => "proxy-cannot-host",
            DropReason::LeaseUnavailable => "lease-unavailable",
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
    /// A store call on a shard's lease (`use-lease`); answer acquisitions and renewals with
    /// [`Region::lease_answered`].
    Lease(LeaseRequest<ShardId>),
    /// The shard's lease is held with `token`, before anything is delivered under it: the
    /// entities' writes carry it as their fence until the shard stops or the lease is lost.
    ShardLeased {
        /// The shard.
        shard: ShardId,
        /// The lease's fencing token.
        token: u64,
    },
    /// The shard's lease was lost: its entities were stopped at once
    /// ([`RegionEffect::ForceStopEntities`] came first) and the region tries to take the
    /// lease again.
    ShardLeaseLost {
        /// The shard.
        shard: ShardId,
        /// Why.
        reason: LeaseLoss,
    },
    /// The shard's lease store answered again after [`RegionEffect::LeaseUnavailable`] (a
    /// renewal succeeded; an acquisition reports [`RegionEffect::ShardLeased`] instead).
    LeaseRecovered(ShardId),
    /// The shard's lease store failed: acquiring the lease failed (not because another node
    /// holds it), in which case what waited for the shard was dropped with
    /// [`DropReason::LeaseUnavailable`], and so is what comes until the lease is acquired; or
    /// renewing the held lease failed (it is kept until its deadline, renewals go on).
    LeaseUnavailable {
        /// The shard.
        shard: ShardId,
        /// What the store said.
        error: String,
    },
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
    /// Hosted here, but waiting for the shard's lease (`use-lease`): messages wait in the
    /// region's buffer; `predecessor` is the one the coordinator named, waited for once the
    /// lease is held.
    AwaitingLease {
        predecessor: Option<UniqueAddress>,
    },
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
    /// Stopping where it is, without a hand-off: the cluster prepares for a full shutdown and
    /// this region is shutting down (see [`Region::stop_for_full_shutdown`]). Its entities
    /// were told to stop; at `force_at` the rest are forced.
    Stopping {
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
    homes: ShardMap<UniqueAddress>,
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
    /// Shard leases (`use-lease`), when configured.
    leases: Option<LeaseKeeper<ShardId>>,
    /// Shards whose last lease acquisition failed because of the store: messages for them are
    /// refused instead of waiting.
    lease_unavailable: BTreeSet<ShardId>,
    /// Self-fenced: this node has not seen a majority for the resolver's decision time, so
    /// no shard runs here (they stay hosted, waiting as for their lease) until it has again.
    suspended: bool,
    graceful: bool,
    /// The graceful shutdown stops shards where they are instead of handing them off (the
    /// cluster prepares for a full shutdown).
    stopping_in_place: bool,
    stopped: bool,
}

impl<M> Region<M> {
    /// A region for `me`; a `proxy` only routes and never hosts.
    pub fn new(me: UniqueAddress, proxy: bool, settings: RegionSettings, now: Instant) -> Self {
        let backoff = (settings.retry_interval / 8).max(Duration::from_millis(100));
        let leases = settings.lease.map(LeaseKeeper::new);
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
            homes: ShardMap::default(),
            hosted: HostedShards::default(),
            buffers: BTreeMap::new(),
            buffered: 0,
            handover_pending: BTreeSet::new(),
            wanted: BTreeSet::new(),
            early_drains: BTreeMap::new(),
            early_handovers: BTreeMap::new(),
            leases,
            lease_unavailable: BTreeSet::new(),
            suspended: false,
            graceful: false,
            stopping_in_place: false,
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
    ///
    /// Never with shard leases: each delivery first checks the lease's deadline.
    pub fn delivers_at_once(&self, shard: &ShardId) -> bool {
        !self.stopped && self.leases.is_none() && self.hosted.is_running(shard)
    }

    /// Whether `shard`'s entities may run here at `now`: the shard is hosted and takes
    /// deliveries (running, or waiting for its predecessor's last messages) and, with shard
    /// leases, its lease is held. Entities that start without a message (remembered ones, a
    /// restart after a failure) start only then; unlike
    /// [`delivers_at_once`](Self::delivers_at_once) this holds under leases too.
    pub fn runs_entities(&self, now: Instant, shard: &ShardId) -> bool {
        !self.stopped
            && self.is_hosting(shard)
            && (self.leases.is_none() || self.lease_token(now, shard).is_some())
    }

    /// Where [`route`](Self::route) would forward a message for `shard` from a local sender
    /// at once with nothing else to do: the shard's home is known and is another node, the
    /// shard is not hosted here and nothing waits for it in a buffer. A runtime may send such
    /// a message there itself and skip `route` (the hot path of a proxy). Messages from other
    /// nodes are not covered: `route` holds those rather than bounce them back.
    ///
    /// Never with shard leases, as [`delivers_at_once`](Self::delivers_at_once).
    pub fn forwards_at_once(&self, shard: &ShardId) -> Option<&UniqueAddress> {
        if self.stopped
            || self.leases.is_some()
            || self.hosted.contains_key(shard)
            || self.buffers.contains_key(shard)
        {
            return None;
        }
        self.homes.get(shard).filter(|home| **home != self.me)
    }

    /// Whether shards run under leases (`use-lease`).
    pub fn uses_leases(&self) -> bool {
        self.leases.is_some()
    }

    /// Until when this region may count on `shard`'s lease (`None`: not held, or no leases).
    /// Past it, nothing of the shard runs here, whether or not the region has noticed yet.
    pub fn lease_deadline(&self, shard: &ShardId) -> Option<Instant> {
        self.leases.as_ref()?.deadline(shard)
    }

    /// The lease token `shard` runs under here, if it runs under a held lease at `now`.
    pub fn lease_token(&self, now: Instant, shard: &ShardId) -> Option<u64> {
        self.leases.as_ref()?.held(now, shard)
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
        if !self.lease_still_held(now, &env.shard, out) {
            // Lost just now: the shard waits for its lease again, and so does this message.
            return self.route(now, from, env, out);
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
            Some(Hosted::AwaitingLease { .. }) => {
                if self.lease_unavailable.contains(&env.shard) {
                    out.push(RegionEffect::Dropped {
                        env,
                        reason: DropReason::LeaseUnavailable,
                    });
                } else {
                    self.buffer(now, from.cloned(), env, out);
                }
            }
            Some(Hosted::HandingOff { .. }) => match self.settings.handoff_mode {
                HandOffMode::Forward => self.buffer(now, None, env, out),
                HandOffMode::Drop => out.push(RegionEffect::Dropped {
                    env,
                    reason: DropReason::HandOff,
                }),
            },
            // Stopping for good: nothing will run it here, and nothing is handed on.
            Some(Hosted::Stopping { .. }) => out.push(RegionEffect::Dropped {
                env,
                reason: DropReason::RegionStopped,
            }),
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
        if self.stopping_in_place {
            // No home will be asked for or waited for: the region stops once its own shards
            // have, and a buffer would only hold that up.
            out.push(RegionEffect::Dropped {
                env,
                reason: DropReason::RegionStopped,
            });
            return;
        }
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
        // A shard hosted here (handing off, or waiting for its lease) has no home to ask for.
        if first && !self.hosted.contains_key(&shard) {
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
            Protocol::CoordinatorStarted { .. } => {
                // A coordinator that (re)started on the node we are registered with, or
                // should be: it has none of the earlier registrations.
                let ours = self.registration.coordinator.as_ref() == Some(from)
                    || view.coordinator_node() == Some(from);
                if ours {
                    self.registration.coordinator = None;
                    self.registration.expected = Some(from.clone());
                    self.registration.backoff =
                        (self.settings.retry_interval / 8).max(Duration::from_millis(100));
                    self.registration.next_attempt = Some(now);
                    self.maybe_register(now, view, out);
                }
            }
            Protocol::ShardHome { shard, region } => self.shard_home(now, shard, region, view, out),
            Protocol::ShardHomes { homes } => {
                for (region, shards) in homes {
                    for shard in shards {
                        self.shard_home(now, shard, region.clone(), view, out);
                    }
                }
            }
            Protocol::HostShard { shard, predecessor } => {
                if self.stopping_in_place {
                    // Not acknowledged: the coordinator resends until this region has stopped,
                    // and then does not give the shard a new home (the cluster prepares for a
                    // full shutdown). Asking it to hand off instead would start a hand-off.
                    return;
                }
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
            Protocol::BeginHandOff { shard } if view.is_preparing_for_shutdown() => {
                // Not acknowledged, as the reference does: no shard moves while the cluster
                // prepares for a full shutdown. A hand-off asked for before this node saw the
                // preparation times out at the coordinator, and the shard stays where it is.
                let _ = shard;
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
            // Answered by a node, not a region: `KindNode` handles it.
            Protocol::KindNotStarted { .. } => {}
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
            .filter(|s| !self.hosted.contains_key(s))
            .chain(self.handover_pending.iter())
            .chain(self.wanted.iter())
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        for shard in waiting {
            self.request_home(shard, out);
        }
        if self.graceful && !self.stopping_in_place {
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
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        self.wanted.remove(&shard);
        if region == self.me {
            if !self.proxy && !self.hosted.contains_key(&shard) {
                // The coordinator says it lives here: host it (its HostShard may follow).
                if self.needs_lease(now, &shard) {
                    self.await_lease(now, shard, None, out);
                    return;
                }
                self.hosted.insert(shard.clone(), Hosted::Running);
                out.push(RegionEffect::ShardStarted(shard.clone()));
            }
            self.handover_pending.remove(&shard);
            self.flush_local(&shard, out);
            let _ = view;
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
        if let Some(Hosted::AwaitingLease { predecessor: known }) = self.hosted.get_mut(&shard) {
            // Hosted on a `ShardHome` naming us that overtook this `HostShard`: the predecessor
            // it names is the one whose forwarded messages go first once the lease is held.
            if known.is_none() {
                *known = predecessor.filter(|p| *p != self.me);
            }
            return;
        }
        if self.hosted.contains_key(&shard) {
            return;
        }
        self.homes.remove(&shard);
        self.early_drains.remove(&shard);
        if self.needs_lease(now, &shard) {
            self.await_lease(now, shard, predecessor, out);
            return;
        }
        self.activate(now, shard, predecessor, view, out);
    }

    /// Starts hosting `shard` (its lease, if any, is held): waits for the predecessor if there
    /// is one that may still be alive and has not sent its hand-over marker yet, and delivers
    /// what was buffered.
    fn activate(
        &mut self,
        now: Instant,
        shard: ShardId,
        predecessor: Option<UniqueAddress>,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
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
        if matches!(self.hosted.get(shard), Some(Hosted::AwaitingLease { .. })) {
            return; // delivered once the lease is held
        }
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
            // Not hosted here (a `HostShard` refused while leaving, or never received), yet the
            // coordinator counts this region as the home, and regions that did too may have
            // sent messages here, which wait in the buffer. They are this shard's old-home
            // messages: forwarded to the next home ahead of anything newer, or dropped, as the
            // mode says, exactly as if the shard had been stopped here.
            let waiting = self.buffers.get(&shard).is_some_and(|b| !b.is_empty());
            let forwarding = waiting && self.settings.handoff_mode == HandOffMode::Forward;
            if waiting && !forwarding {
                let dropped = self.buffers.remove(&shard).unwrap_or_default();
                self.buffered -= dropped.len();
                for b in dropped {
                    out.push(RegionEffect::Dropped {
                        env: b.env,
                        reason: DropReason::HandOff,
                    });
                }
            }
            out.push(RegionEffect::Send {
                to: coordinator.clone(),
                msg: Protocol::ShardStopped {
                    shard: shard.clone(),
                    forwarding,
                },
            });
            if forwarding {
                self.handover_pending.insert(shard.clone());
                out.push(RegionEffect::Send {
                    to: coordinator.clone(),
                    msg: Protocol::GetShardHome { shard },
                });
            }
            self.check_shutdown(out);
            return;
        };
        if matches!(state, Hosted::HandingOff { .. } | Hosted::Stopping { .. }) {
            return; // a second HandOff while one runs, or the shard stops in place anyway
        }
        let handing_off = Hosted::HandingOff {
            coordinator: coordinator.clone(),
            entities_stopped: false,
            awaiting_drains: BTreeSet::new(),
            force_at: now + stop_limit(self.settings.handoff_timeout),
        };
        let held = match self.hosted.replace(&shard, handing_off) {
            Some(Hosted::AwaitingPredecessor { held, .. }) => held,
            Some(Hosted::AwaitingLease { .. }) => {
                // Nothing ran here: the lease is no longer wanted.
                self.give_up_lease(&shard, out);
                VecDeque::new()
            }
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
        if let Some(Hosted::Stopping { .. }) = self.hosted.get(shard) {
            return self.stopped_in_place(shard, out);
        }
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
        // Every entity has stopped: the next home may take the lease at once.
        self.give_up_lease(shard, out);
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

    /// The graceful shutdown of a region while the cluster prepares for a full shutdown (the
    /// reference's region just stops then): every shard stops where it is, without a hand-off,
    /// and once all have, the region stops ([`RegionEffect::ShutdownComplete`], and
    /// [`Protocol::RegionStopped`] to the coordinator, which gives its shards no new home).
    /// Entities get the kind's stop message and until the hand-off limit (less 5 s, at least
    /// 1 s) to stop, as in a hand-off; so durable entities finish the command they are on.
    /// Messages that would have to wait here are dropped ([`DropReason::RegionStopped`]); ones
    /// for shards at other nodes are still forwarded.
    pub fn stop_for_full_shutdown(&mut self, now: Instant, out: &mut Vec<RegionEffect<M>>) {
        if self.graceful || self.stopped {
            return;
        }
        self.graceful = true;
        self.stopping_in_place = true;
        for (_, buffer) in std::mem::take(&mut self.buffers) {
            for b in buffer {
                out.push(RegionEffect::Dropped {
                    env: b.env,
                    reason: DropReason::RegionStopped,
                });
            }
        }
        self.buffered = 0;
        self.handover_pending.clear();
        self.wanted.clear();
        let force_at = now + stop_limit(self.settings.handoff_timeout);
        let shards: Vec<ShardId> = self.hosted.keys().cloned().collect();
        for shard in shards {
            match self.hosted.get(&shard) {
                Some(Hosted::Running | Hosted::AwaitingPredecessor { .. }) => {
                    // What waited for a predecessor goes with the shard.
                    if let Some(Hosted::AwaitingPredecessor { held, .. }) =
                        self.hosted.replace(&shard, Hosted::Stopping { force_at })
                    {
                        for env in held {
                            out.push(RegionEffect::Dropped {
                                env,
                                reason: DropReason::RegionStopped,
                            });
                        }
                    }
                    out.push(RegionEffect::StopEntities(shard));
                }
                Some(Hosted::AwaitingLease { .. }) => {
                    // Nothing runs: nothing to stop, and the lease is not wanted any more.
                    self.hosted.remove(&shard);
                    self.give_up_lease(&shard, out);
                }
                // A hand-off that began before: it finishes (or is forced) as it would have.
                Some(Hosted::HandingOff { .. } | Hosted::Stopping { .. }) | None => {}
            }
        }
        self.check_shutdown(out);
    }

    /// Every entity of `shard` has stopped (or was forced to): it no longer runs here.
    fn stopped_in_place(&mut self, shard: &ShardId, out: &mut Vec<RegionEffect<M>>) {
        if self.hosted.remove(shard).is_none() {
            return;
        }
        self.give_up_lease(shard, out);
        out.push(RegionEffect::ShardStopped(shard.clone()));
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
        for (shard, state) in self.hosted.take_all() {
            if matches!(state, Hosted::AwaitingLease { .. }) {
                continue; // nothing runs
            }
            out.push(RegionEffect::ForceStopEntities(shard.clone()));
            out.push(RegionEffect::ShardStopped(shard));
        }
        // The entities are gone: free their leases for the next homes.
        if let Some(keeper) = &mut self.leases {
            let mut calls = Vec::new();
            keeper.give_up_all(&mut calls);
            out.extend(calls.into_iter().map(RegionEffect::Lease));
        }
        self.lease_unavailable.clear();
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
                    Hosted::HandingOff { force_at, .. } | Hosted::Stopping { force_at } => {
                        consider(*force_at)
                    }
                    Hosted::Running | Hosted::AwaitingLease { .. } => {}
                }
            }
        }
        if let Some(t) = self.leases.as_ref().and_then(LeaseKeeper::poll_timeout) {
            consider(t);
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
        let mut stopped_in_place = Vec::new();
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
                Hosted::Stopping { force_at } if *force_at <= now => {
                    out.push(RegionEffect::ForceStopEntities(shard.clone()));
                    stopped_in_place.push(shard.clone());
                }
                _ => {}
            }
        }
        for shard in stopped_in_place {
            self.stopped_in_place(&shard, out);
        }
        for shard in expired_wait {
            self.release_held(&shard, out);
        }
        for shard in forced {
            self.maybe_finish_hand_off(&shard, out);
        }
        if let Some(keeper) = &mut self.leases {
            let mut calls = Vec::new();
            let events = keeper.handle_timeout(now, &mut calls);
            out.extend(calls.into_iter().map(RegionEffect::Lease));
            for event in events {
                self.on_lease_event(now, event, view, out);
            }
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
                        .filter(|s| !self.hosted.contains_key(s))
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
                    if self.graceful && !self.stopping_in_place {
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

/// Shard leases (`use-lease`, digest §1.6: a shard starts only after taking its lease and its
/// entities stop at once when the lease is lost).
impl<M> Region<M> {
    /// Whether hosting `shard` must wait: for its lease, or for the self-fence to open.
    fn needs_lease(&self, now: Instant, shard: &ShardId) -> bool {
        self.suspended
            || self
                .leases
                .as_ref()
                .is_some_and(|k| k.held(now, shard).is_none())
    }

    /// Whether the region is self-fenced (see [`suspend`](Self::suspend)).
    pub fn is_suspended(&self) -> bool {
        self.suspended
    }

    /// Self-fencing: stops every shard's entities at once and keeps the shards hosted but
    /// waiting, as for a lease, so that messages for them wait here and the hand-off protocol
    /// still answers for them; nothing runs until [`resume`](Self::resume).
    pub fn suspend(&mut self, out: &mut Vec<RegionEffect<M>>) {
        if self.suspended || self.stopped {
            return;
        }
        self.suspended = true;
        let running: Vec<ShardId> = self
            .hosted
            .keys()
            .filter(|s| {
                matches!(
                    self.hosted.get(s),
                    Some(Hosted::Running | Hosted::AwaitingPredecessor { .. })
                )
            })
            .cloned()
            .collect();
        for shard in running {
            out.push(RegionEffect::ForceStopEntities(shard.clone()));
            out.push(RegionEffect::ShardStopped(shard.clone()));
            self.park(&shard);
        }
    }

    /// The self-fence opened: the shards waiting for it start again (those under a lease
    /// once it is held).
    pub fn resume(&mut self, now: Instant, view: &ShardingView, out: &mut Vec<RegionEffect<M>>) {
        if !self.suspended {
            return;
        }
        self.suspended = false;
        let waiting: Vec<(ShardId, Option<UniqueAddress>)> = self
            .hosted
            .iter_mut()
            .filter_map(|(s, st)| match st {
                Hosted::AwaitingLease { predecessor } => Some((s.clone(), predecessor.clone())),
                _ => None,
            })
            .collect();
        for (shard, predecessor) in waiting {
            if self.needs_lease(now, &shard) {
                if let Some(keeper) = &mut self.leases {
                    let mut calls = Vec::new();
                    keeper.want(now, shard, &mut calls);
                    out.extend(calls.into_iter().map(RegionEffect::Lease));
                }
                continue;
            }
            if let Some(token) = self.lease_token(now, &shard) {
                out.push(RegionEffect::ShardLeased {
                    shard: shard.clone(),
                    token,
                });
            }
            self.activate(now, shard, predecessor, view, out);
        }
    }

    /// Puts a running `shard` back to waiting (its entities were stopped): what waited for a
    /// predecessor goes back in front of the buffer.
    fn park(&mut self, shard: &ShardId) {
        let previous = self
            .hosted
            .replace(shard, Hosted::AwaitingLease { predecessor: None });
        if let Some(Hosted::AwaitingPredecessor { held, .. }) = previous {
            if !held.is_empty() {
                self.buffered += held.len();
                let buffer = self.buffers.entry(shard.clone()).or_default();
                for env in held.into_iter().rev() {
                    buffer.push_front(Buffered { from: None, env });
                }
            }
        }
    }

    /// Hosts `shard` waiting for its lease (asked for now, unless it is being asked for).
    fn await_lease(
        &mut self,
        now: Instant,
        shard: ShardId,
        predecessor: Option<UniqueAddress>,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        self.hosted
            .insert(shard.clone(), Hosted::AwaitingLease { predecessor });
        if let Some(keeper) = &mut self.leases {
            let mut calls = Vec::new();
            keeper.want(now, shard, &mut calls);
            out.extend(calls.into_iter().map(RegionEffect::Lease));
        }
    }

    fn give_up_lease(&mut self, shard: &ShardId, out: &mut Vec<RegionEffect<M>>) {
        self.lease_unavailable.remove(shard);
        if let Some(keeper) = &mut self.leases {
            let mut calls = Vec::new();
            keeper.give_up(shard, &mut calls);
            out.extend(calls.into_iter().map(RegionEffect::Lease));
        }
    }

    /// Before delivering to `shard` at `now`: `false` when its lease just turned out to be past
    /// its deadline (a pause, a slow timer), which stops the shard's entities first.
    fn lease_still_held(
        &mut self,
        now: Instant,
        shard: &ShardId,
        out: &mut Vec<RegionEffect<M>>,
    ) -> bool {
        let Some(keeper) = &mut self.leases else {
            return true;
        };
        match keeper.expire_if_due(now, shard) {
            Some(event) => {
                self.lease_lost(now, event, out);
                false
            }
            None => true,
        }
    }

    /// The store answered lease request `id` about `shard`.
    pub fn lease_answered(
        &mut self,
        now: Instant,
        shard: &ShardId,
        id: u64,
        answer: LeaseAnswer,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        let Some(keeper) = &mut self.leases else {
            return;
        };
        let mut calls = Vec::new();
        let event = keeper.answer(now, shard, id, answer, &mut calls);
        out.extend(calls.into_iter().map(RegionEffect::Lease));
        if let Some(event) = event {
            self.on_lease_event(now, event, view, out);
        }
    }

    fn on_lease_event(
        &mut self,
        now: Instant,
        event: LeaseEvent<ShardId>,
        view: &ShardingView,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        match event {
            LeaseEvent::Acquired { key: shard, token } => {
                self.lease_unavailable.remove(&shard);
                match self.hosted.get(&shard) {
                    // Held, but fenced: it starts when the fence opens.
                    Some(Hosted::AwaitingLease { .. }) if self.suspended => {}
                    Some(Hosted::AwaitingLease { predecessor }) if !self.stopped => {
                        let predecessor = predecessor.clone();
                        out.push(RegionEffect::ShardLeased {
                            shard: shard.clone(),
                            token,
                        });
                        self.activate(now, shard, predecessor, view, out);
                    }
                    // Not wanted any more (the keeper gives back what nobody waits for, but a
                    // shard that left meanwhile had its wish cancelled already).
                    _ => self.give_up_lease(&shard, out),
                }
            }
            LeaseEvent::Lost { .. } => self.lease_lost(now, event, out),
            LeaseEvent::RenewalFailing { key: shard, error } => {
                out.push(RegionEffect::LeaseUnavailable { shard, error })
            }
            LeaseEvent::RenewalRecovered { key: shard } => {
                out.push(RegionEffect::LeaseRecovered(shard))
            }
            LeaseEvent::Unavailable { key: shard, error } => {
                if !matches!(self.hosted.get(&shard), Some(Hosted::AwaitingLease { .. })) {
                    return;
                }
                self.lease_unavailable.insert(shard.clone());
                // Reported before the refusals, so that whoever is refused finds it reported.
                out.push(RegionEffect::LeaseUnavailable {
                    shard: shard.clone(),
                    error,
                });
                // Refuse what waits rather than keep it waiting for a store that is down.
                if let Some(buffer) = self.buffers.remove(&shard) {
                    self.buffered -= buffer.len();
                    for b in buffer {
                        out.push(RegionEffect::Dropped {
                            env: b.env,
                            reason: DropReason::LeaseUnavailable,
                        });
                    }
                }
            }
        }
    }

    /// `shard`'s lease is lost: its entities stop now, without waiting for them, and the shard
    /// waits for its lease again (unless it was being handed off).
    fn lease_lost(
        &mut self,
        now: Instant,
        event: LeaseEvent<ShardId>,
        out: &mut Vec<RegionEffect<M>>,
    ) {
        let LeaseEvent::Lost { key: shard, reason } = event else {
            return;
        };
        match self.hosted.get_mut(&shard) {
            Some(Hosted::HandingOff {
                entities_stopped, ..
            }) => {
                if !*entities_stopped {
                    *entities_stopped = true;
                    out.push(RegionEffect::ForceStopEntities(shard.clone()));
                }
                out.push(RegionEffect::ShardLeaseLost {
                    shard: shard.clone(),
                    reason,
                });
                self.maybe_finish_hand_off(&shard, out);
            }
            Some(Hosted::Running | Hosted::AwaitingPredecessor { .. }) => {
                out.push(RegionEffect::ForceStopEntities(shard.clone()));
                out.push(RegionEffect::ShardStopped(shard.clone()));
                out.push(RegionEffect::ShardLeaseLost {
                    shard: shard.clone(),
                    reason,
                });
                self.park(&shard);
                if let Some(keeper) = &mut self.leases {
                    let mut calls = Vec::new();
                    keeper.acquire_again(now, shard, &mut calls);
                    out.extend(calls.into_iter().map(RegionEffect::Lease));
                }
            }
            Some(Hosted::Stopping { .. }) => {
                out.push(RegionEffect::ForceStopEntities(shard.clone()));
                out.push(RegionEffect::ShardLeaseLost {
                    shard: shard.clone(),
                    reason,
                });
                self.stopped_in_place(&shard, out);
            }
            Some(Hosted::AwaitingLease { .. }) | None => {
                out.push(RegionEffect::ShardLeaseLost {
                    shard: shard.clone(),
                    reason,
                });
                // Lost while waiting (fenced): taken again for when the fence opens.
                if self.hosted.contains_key(&shard) {
                    if let Some(keeper) = &mut self.leases {
                        let mut calls = Vec::new();
                        keeper.acquire_again(now, shard, &mut calls);
                        out.extend(calls.into_iter().map(RegionEffect::Lease));
                    }
                }
            }
        }
    }
}

/// How long a shard's entities get to stop during a hand-off before they are forced: the
/// reference's `max(1 s, handoff-timeout − 5 s)`, leaving the coordinator's overall limit room.
fn stop_limit(handoff_timeout: Duration) -> Duration {
    handoff_timeout
        .saturating_sub(Duration::from_secs(5))
        .max(Duration::from_secs(1))
}

#[cfg(test)]
mod full_shutdown_tests;
mod hosted;
#[cfg(test)]
mod lease_tests;
mod shard_map;
#[cfg(test)]
mod tests;

use hosted::HostedShards;
use shard_map::ShardMap;
