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
//!
//! ## Layout
//!
//! This file holds the types (settings, effects, the region), [`Region::new`] and the small
//! queries; the messages it carries are in `envelope.rs`, a hosted shard's state in
//! `hosted.rs` and a broken order's mark in `order_mark.rs`. Each concern is one
//! `impl Region` block in a sibling file:
//!
//! * `handler.rs`: which concern each protocol message goes to ([`Region::handle`]);
//! * `registration.rs`: registering with the coordinator, with backoff, and again when it
//!   restarts;
//! * `view_change.rs`: following the membership view ([`Region::view_changed`]);
//! * `route.rs`: routing and buffering ([`Region::route`], the fast-path queries
//!   [`Region::delivers_at_once`], [`Region::forwards_at_once`], [`Region::runs_entities`]),
//!   asking for homes and delivering what waited once one is known;
//! * `hosting.rs`: the new home's side: hosting a shard and holding messages behind its
//!   predecessor's;
//! * `hand_off.rs`: the old home's side: stopping a shard's entities, waiting for the drain
//!   markers, forwarding or dropping what it buffered;
//! * `shutdown.rs`: graceful shutdown, stopping in place for a full cluster shutdown, and
//!   stopping at once;
//! * `suspension.rs`: self-fencing ([`Region::suspend`], [`Region::resume`]);
//! * `leases.rs`: shard leases (`use-lease`);
//! * `revocation.rs`: shards the coordinator took away from a silent node whose leases had
//!   lapsed;
//! * `routing_order.rs`: per-sender order after a shard's lease changed hands behind this
//!   region's back (which nodes' messages it takes then);
//! * `timers.rs`: [`Region::poll_timeout`] and [`Region::handle_timeout`];
//! * `hosted.rs` and `shard_map.rs`: the hosted shards and their states, with the index of
//!   running ones, and the hashed map of shard homes.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use crate::Instant;
use crate::lease::{LeaseKeeper, LeaseLoss, LeaseRequest, LeaseTiming};
use crate::membership::UniqueAddress;

use super::protocol::Protocol;
use super::shard_id::ShardId;

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
    /// It waited here while the shard's lease had lapsed, and another node held the shard in
    /// between: delivering it now could run it after newer messages from the same sender that
    /// the other node already handled.
    LeaseLapsed,
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
            DropReason::LeaseLapsed => "lease-lapsed",
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

/// Registration with the coordinator.
#[derive(Debug)]
struct Registration {
    coordinator: Option<UniqueAddress>,
    /// The coordinator node the view named when we last registered.
    expected: Option<UniqueAddress>,
    /// Whether `coordinator` was [standing in](ShardingView::stand_in) for a silent coordinator
    /// node when it acknowledged, and has not become the coordinator node since: what it
    /// placed here may have another home once the silent node is heard again.
    with_stand_in: bool,
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
    /// Under leases, the home this region last told it routes a shard's messages to
    /// ([`Protocol::RoutingHere`]; see `routing_order.rs`).
    told: ShardMap<UniqueAddress>,
    /// Shards taken from this region, or whose lease another node held in between, each with
    /// its mark: others' messages for them are dropped until they route here again.
    order_broken: BTreeMap<ShardId, Mark>,
    /// Marks made so far: the next one's nonce.
    marks_made: u64,
    /// The last mark's nonce each shard's home quoted in a [`Protocol::NotHere`].
    nonces: BTreeMap<ShardId, (UniqueAddress, u64)>,
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
                with_stand_in: false,
                backoff,
                next_attempt: Some(now),
            },
            homes: ShardMap::default(),
            told: ShardMap::default(),
            order_broken: BTreeMap::new(),
            marks_made: 0,
            nonces: BTreeMap::new(),
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

    /// Whether a graceful shutdown was asked for.
    pub fn is_shutting_down(&self) -> bool {
        self.graceful
    }

    /// Whether the region is self-fenced (see [`suspend`](Self::suspend)).
    pub fn is_suspended(&self) -> bool {
        self.suspended
    }
}

mod envelope;
mod hand_off;
mod handler;
mod hosted;
mod hosting;
mod leases;
mod order_mark;
mod registration;
mod revocation;
mod route;
mod routing_order;
mod shard_map;
mod shutdown;
mod suspension;
mod timers;
mod view_change;

#[cfg(test)]
mod tests;

use envelope::Buffered;
pub use envelope::Envelope;
use hosted::{Hosted, HostedShards};
use order_mark::Mark;
use shard_map::ShardMap;
