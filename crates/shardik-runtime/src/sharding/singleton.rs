//! A cluster singleton built from sharding: one entity kind with one shard holding one entity,
//! placed by an allocation strategy on the oldest Up member with the singleton's role.
//!
//! # How it maps to Akka
//!
//! Akka's `ClusterSingleton` runs a `ClusterSingletonManager` on every node with the role and
//! its own hand-over protocol (`HandOverToMe`, `HandOverInProgress`, `HandOverDone`,
//! `TakeOverFromMe`) between the old and the new oldest member; a `ClusterSingletonProxy`
//! locates the singleton and buffers messages while there is none. Here, the same outcomes
//! come from the sharding we already have, with no protocol of its own:
//!
//! * **where it runs**: the kind's allocation strategy ([`OldestUpStrategy`]) places its one
//!   shard on the region of the oldest Up member with the role (age by up-number, as Akka's
//!   oldest), and its rebalance moves the shard whenever an older Up member hosts a region
//!   (for example when the singleton was placed before the oldest member's region had
//!   registered);
//! * **hand-over on leave**: a leaving member's regions hand their shards off (that is
//!   sharding's graceful shutdown), then the coordinator places the shard on the next oldest;
//!   after a crash, the shard is re-placed once the member is removed (plus the down-removal
//!   margin), which is Akka's `DelayedMemberRemoved` rule;
//! * **the lease** (Akka's `cluster.singleton.use-lease`): given a store
//!   ([`SingletonSettings::with_lease_store`]), the singleton's shard and its coordinator run
//!   under leases there (`cluster.sharding.use-lease = "auto"`), so the singleton runs only
//!   while its node holds the lease, stops when the node loses it, and after a crash starts at
//!   its new home as soon as the old lease has run out, without the down-removal margin;
//! * **the proxy**: every node gets a region of the kind (a proxy where the node lacks the
//!   role); messages sent while the singleton moves wait in the region's buffer and, in the
//!   default `forward` hand-off mode, reach the new incarnation in order;
//! * **eager start**: Akka's manager starts the singleton as soon as its node is the oldest.
//!   Here every node sends the singleton a keep-alive at once and every
//!   [`keep_alive_interval`](SingletonSettings::with_keep_alive_interval), so it runs before
//!   the first user message and restarts at its new home without one.
//!
//! # What differs
//!
//! * The singleton is an [`Entity`] (it handles commands and answers them), not an actor with
//!   a lifecycle of its own; its termination message is the kind's stop message
//!   ([`SingletonSettings::with_stop_message`]).
//! * Between the old incarnation's stop and the new one's start, the gap is the shard
//!   hand-off plus up to one keep-alive interval (or the first user message, whichever comes
//!   first); Akka's gap is its hand-over protocol's round trips.

use std::sync::Arc;
use std::time::Duration;

use shardik_core::sharding::ShardId;
use shardik_persistence::Store;

use super::api::{Entity, EntityKind};
use super::handle::Sharding;
use super::keepalive::{ManagedEntity, ManagedInitError, ManagedOptions, ManagedRef, init_managed};

/// A reference to a cluster singleton, usable from every node.
pub type SingletonRef<E> = ManagedRef<E>;

/// The id of the singleton's only shard and only entity.
const SINGLETON_ID: &str = "singleton";

/// How a cluster singleton runs.
pub struct SingletonSettings<C> {
    name: String,
    options: ManagedOptions<C>,
    lease_store: Option<Arc<dyn Store>>,
}

impl<C> std::fmt::Debug for SingletonSettings<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SingletonSettings")
            .field("name", &self.name)
            .field("role", &self.options.role)
            .field("keep_alive_interval", &self.options.keep_alive_interval)
            .finish_non_exhaustive()
    }
}

impl<C> SingletonSettings<C> {
    /// A singleton called `name` (every node must use the same name), on any member, kept
    /// alive every 10 s.
    pub fn new(name: &str) -> Self {
        SingletonSettings {
            name: name.to_string(),
            options: ManagedOptions::default(),
            lease_store: None,
        }
    }

    /// Runs the singleton only on members with `role`; nodes without it reach it by proxy.
    pub fn with_role(mut self, role: &str) -> Self {
        self.options.set_role(role);
        self
    }

    /// How often every node makes sure the singleton runs (Akka has no such setting: its
    /// manager starts the singleton itself). This bounds how long the singleton may be down
    /// after a move when nobody writes to it.
    pub fn with_keep_alive_interval(mut self, interval: Duration) -> Self {
        self.options.keep_alive_interval = interval;
        self
    }

    /// The command the singleton receives before it stops (hand-off to another member):
    /// Akka's `terminationMessage`.
    pub fn with_stop_message(mut self, make: impl Fn() -> C + Send + Sync + 'static) -> Self {
        self.options.set_stop_message(make);
        self
    }

    /// Runs the singleton under a lease kept in `store` (Akka's `cluster.singleton.use-lease`;
    /// every node must give a store that all of them share, such as the same SQLite file or
    /// PostgreSQL database). Its one shard and its coordinator then take their leases there as
    /// a durable kind's do (`cluster.sharding.use-lease` and
    /// `coordinator-singleton.use-lease`, "auto" by default): the singleton runs only while
    /// its node holds the lease, and after a crash it starts elsewhere once the lease has run
    /// out (`coordination.lease.heartbeat-timeout`), with no down-removal margin to wait.
    pub fn with_lease_store(mut self, store: Arc<dyn Store>) -> Self {
        self.lease_store = Some(store);
        self
    }

    /// The name of the entity kind the singleton is registered as.
    pub fn kind_name(&self) -> String {
        format!("cluster-singleton-{}", self.name)
    }
}

/// Starts cluster singletons.
#[derive(Debug)]
pub struct ClusterSingleton;

impl ClusterSingleton {
    /// Registers the singleton on this node (every node that wants to reach it must call
    /// this, with the same settings) and returns a reference to it. On nodes with the role,
    /// `factory` creates the singleton when it comes to live here.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use shardik_runtime::facade as shardik;
    /// use serde::{Deserialize, Serialize};
    /// use shardik::{ClusterSingleton, Entity, EntityContext, Node, ReplyTo, SingletonSettings};
    ///
    /// /// One sequence of ticket numbers for the whole cluster.
    /// struct TicketDesk(u64);
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Take(ReplyTo<u64>);
    ///
    /// impl Entity for TicketDesk {
    ///     type Command = Take;
    ///     async fn handle(&mut self, Take(reply_to): Take, _ctx: &mut EntityContext<Self>) {
    ///         self.0 += 1;
    ///         reply_to.send(self.0);
    ///     }
    /// }
    ///
    /// # async fn run(node: Node) -> Result<(), Box<dyn std::error::Error>> {
    /// // On every node, with the same name: the instance runs on the oldest node.
    /// let desk = ClusterSingleton::init(
    ///     node.sharding(),
    ///     SingletonSettings::new("ticket-desk"),
    ///     || TicketDesk(0),
    /// )?;
    /// let ticket = desk.ask(Take, Duration::from_secs(5)).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn init<E: Entity>(
        sharding: &Sharding,
        settings: SingletonSettings<E::Command>,
        factory: impl Fn() -> E + Send + Sync + 'static,
    ) -> Result<SingletonRef<E>, ManagedInitError> {
        let mut kind = EntityKind::new(&settings.kind_name(), move |_| ManagedEntity {
            inner: Some(factory()),
        })
        .with_shard_extractor(|_| ShardId::from(SINGLETON_ID))
        .with_allocation_strategy(|| OldestUpStrategy);
        if let Some(store) = settings.lease_store {
            kind = kind.with_lease_store(store);
        }
        let region = init_managed(sharding, kind, settings.options, || {
            Box::new(std::iter::once(SINGLETON_ID.to_string()))
        })?;
        Ok(ManagedRef {
            inner: region.entity_ref(SINGLETON_ID),
        })
    }
}

/// The singleton kinds' allocation strategy: every shard on the oldest Up member. In the core
/// (`shardik_core::sharding::OldestUpStrategy`), where the simulator can run it too.
pub use shardik_core::sharding::OldestUpStrategy;
