//! Declaring a kind of entity: the [`EntityKind`] builder (its name, factory, role, codec,
//! passivation, allocation strategy, remembering and leases), the [`ShardExtractor`] that
//! places its ids in shards, and the [`EntityTypeKey`] that names it with its entity type.

use std::sync::Arc;
use std::time::Duration;

use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::ShardAllocationStrategy;
use shardik_core::sharding::ShardId;
use shardik_passivation::{IdleCheck, ResolvedStrategy};

use super::codec::{Codec, Postcard};
use super::entity::Entity;
use crate::sharding::remember_settings::{EntityRecovery, RememberChoice, RememberSettings};
use crate::sharding::strategy::{AsyncShardAllocationStrategy, KindAllocation};

/// Chooses the shard of an entity id (a custom message extractor). The default is the fixed
/// hash of [`shardik_core::sharding::shard_id_for`].
pub type ShardExtractor = Arc<dyn Fn(&str) -> ShardId + Send + Sync>;

/// One kind of entity: its name, how to create one, where it may run.
pub struct EntityKind<E: Entity, C: Codec = Postcard> {
    pub(crate) name: Arc<str>,
    pub(crate) factory: Arc<dyn Fn(&str) -> E + Send + Sync>,
    pub(crate) role: Option<String>,
    pub(crate) stop_message: Option<Arc<dyn Fn() -> E::Command + Send + Sync>>,
    pub(crate) extractor: Option<ShardExtractor>,
    pub(crate) idle_timeout: Option<Option<Duration>>,
    pub(crate) passivation: Option<shardik_passivation::ResolvedStrategy>,
    pub(crate) allocation: KindAllocation,
    pub(crate) codec: Arc<C>,
    pub(crate) remember: RememberChoice,
    /// The kind's own store: where its shard and coordinator leases live when
    /// `cluster.sharding.use-lease` or `coordinator-singleton.use-lease` is on, and its
    /// remembered entities when `remember-entities` is on and the kind does not say otherwise.
    pub(crate) own_store: Option<Arc<dyn shardik_persistence::Store>>,
    /// Lanes that run the kind's handlers on each node (`None`: `cluster.sharding.handler-lanes`).
    pub(crate) handler_lanes: Option<usize>,
}

impl<E: Entity> EntityKind<E, Postcard> {
    /// The kind of `key` whose entities `factory` creates from their id.
    pub fn for_key(
        key: EntityTypeKey<E>,
        factory: impl Fn(&str) -> E + Send + Sync + 'static,
    ) -> Self {
        Self::new(key.name(), factory)
    }

    /// A kind called `name` whose entities `factory` creates from their id.
    pub fn new(name: &str, factory: impl Fn(&str) -> E + Send + Sync + 'static) -> Self {
        EntityKind {
            name: name.into(),
            factory: Arc::new(factory),
            role: None,
            stop_message: None,
            extractor: None,
            idle_timeout: None,
            passivation: None,
            allocation: KindAllocation::Configured,
            codec: Arc::new(Postcard),
            remember: RememberChoice::Configured,
            own_store: None,
            handler_lanes: None,
        }
    }
}

impl<E: Entity, C: Codec> EntityKind<E, C> {
    /// Entities run only on nodes with `role`; other nodes get a proxy that routes to them.
    pub fn with_role(mut self, role: &str) -> Self {
        self.role = Some(role.to_string()).filter(|r| !r.is_empty());
        self
    }

    /// The command an entity receives before it is stopped (passivation, hand-off): its last
    /// chance to flush state. Without one, the entity is simply dropped.
    pub fn with_stop_message(
        mut self,
        make: impl Fn() -> E::Command + Send + Sync + 'static,
    ) -> Self {
        self.stop_message = Some(Arc::new(make));
        self
    }

    /// Chooses shards with `extractor` instead of the default hash. Every node must use the
    /// same function.
    pub fn with_shard_extractor(
        mut self,
        extractor: impl Fn(&str) -> ShardId + Send + Sync + 'static,
    ) -> Self {
        self.extractor = Some(Arc::new(extractor));
        self
    }

    /// Passivates entities idle for `timeout` (`None`: never idle-passivated). This replaces
    /// the idle part of the strategy in force (the configured `cluster.sharding.passivation`
    /// one, or [`with_passivation`](Self::with_passivation)'s) and keeps its limit, if any.
    pub fn with_idle_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.idle_timeout = Some(timeout);
        self
    }

    /// Passivates automatically with `strategy` instead of the configured
    /// `cluster.sharding.passivation` one: a limit-based strategy from `shardik-passivation`
    /// (LRU, SLRU, LFU, the composite W-TinyLFU `default-strategy`, …; resolve one with
    /// `PassivationSettings::validate`), an idle timeout, or none. A limit is per region and
    /// is split evenly over this node's active shards of the kind, as in the reference.
    pub fn with_passivation(mut self, strategy: shardik_passivation::ResolvedStrategy) -> Self {
        self.passivation = Some(strategy);
        self
    }

    /// Places and rebalances this kind's shards with a strategy of your own instead of the
    /// configured least-shard strategy. `make` builds it each time this node starts the kind's
    /// coordinator (a new coordinator starts from a fresh strategy); every node should register
    /// the same strategy, since any of them may run the coordinator.
    pub fn with_allocation_strategy<S>(
        mut self,
        make: impl Fn() -> S + Send + Sync + 'static,
    ) -> Self
    where
        S: ShardAllocationStrategy<UniqueAddress> + Send + 'static,
    {
        self.allocation = KindAllocation::Immediate(Arc::new(move || {
            Box::new(make()) as shardik_core::sharding::BoxedStrategy
        }));
        self
    }

    /// As [`with_allocation_strategy`](Self::with_allocation_strategy), for a strategy that
    /// waits before it decides (it consults another service, say). A shard's first message
    /// waits for the strategy's answer; nothing is allocated meanwhile.
    pub fn with_async_allocation_strategy<S: AsyncShardAllocationStrategy>(
        mut self,
        strategy: S,
    ) -> Self {
        self.allocation = KindAllocation::Deferred(Arc::new(strategy));
        self
    }

    /// The strategy this kind runs with, given the node's configured one.
    pub(crate) fn effective_passivation(&self, configured: &ResolvedStrategy) -> ResolvedStrategy {
        let strategy = self.passivation.as_ref().unwrap_or(configured).clone();
        let Some(timeout) = self.idle_timeout else {
            return strategy;
        };
        let check = timeout.map(IdleCheck::new);
        match strategy {
            ResolvedStrategy::Disabled | ResolvedStrategy::Idle(_) => {
                check.map_or(ResolvedStrategy::Disabled, ResolvedStrategy::Idle)
            }
            ResolvedStrategy::Limit {
                per_region_limit,
                policy,
                ..
            } => ResolvedStrategy::Limit {
                per_region_limit,
                policy,
                idle: check,
            },
            ResolvedStrategy::Composite {
                per_region_limit,
                settings,
                ..
            } => ResolvedStrategy::Composite {
                per_region_limit,
                settings,
                idle: check,
            },
        }
    }

    /// Remembers the running entities in `store` (Akka's `remember-entities`): an entity is
    /// recorded before its first command is handled and forgotten when it passivates, and when
    /// a shard starts on a node (after a rebalance, a crash or a restart of the whole cluster)
    /// its remembered entities are started again without a message, as `recovery` says. An
    /// entity whose handler fails (or panics) stays remembered, and its shard starts it again
    /// after `cluster.sharding.entity-restart-backoff` unless a message does so first.
    /// Automatic passivation (idle timeout or limit) is off for such a kind, as in the
    /// reference; an entity still stops when it asks to (`ctx.passivate()`).
    ///
    /// Without this call a kind follows `cluster.sharding.remember-entities` (off by default):
    /// when it is on, the kind's entities are remembered in its own store (a durable kind's,
    /// or the one given to [`with_lease_store`](Self::with_lease_store)) and started as
    /// `entity-recovery-strategy` says; a kind with no store of its own is then refused at
    /// registration.
    ///
    /// ```no_run
    /// # use std::sync::Arc;
    /// # use shardik_runtime::facade as shardik;
    /// # use shardik::{Entity, EntityContext};
    /// # struct Device;
    /// # impl Entity for Device {
    /// #     type Command = ();
    /// #     async fn handle(&mut self, _: (), _: &mut EntityContext<Self>) {}
    /// # }
    /// use shardik::{EntityKind, EntityRecovery, Node};
    ///
    /// # async fn run(node: Node) -> Result<(), Box<dyn std::error::Error>> {
    /// // Remembered in the node's store; all started again at once where their shard moves.
    /// let store = Arc::clone(node.persistence().await?.store());
    /// node.sharding().init(
    ///     EntityKind::new("device", |_id| Device)
    ///         .with_remember_entities(store, EntityRecovery::All),
    /// )?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn with_remember_entities(
        mut self,
        store: Arc<dyn shardik_persistence::Store>,
        recovery: EntityRecovery,
    ) -> Self {
        self.remember = RememberChoice::On(RememberSettings { store, recovery });
        self
    }

    /// Never remembers the kind's entities, whatever `cluster.sharding.remember-entities`
    /// says.
    pub fn without_remember_entities(mut self) -> Self {
        self.remember = RememberChoice::Off;
        self
    }

    /// Keeps the kind's leases in `store` (`cluster.sharding.use-lease = "store"`, and
    /// `coordinator-singleton.use-lease`): each shard runs only while its node holds the
    /// shard's lease there, and the writes of its entities carry the lease's fencing token, so
    /// use the store the entities write to. Durable kinds (event-sourced, durable state) use
    /// their own store without being told; with leases configured, a kind that hosts shards
    /// and has no lease store is refused at registration.
    ///
    /// The store is also where the kind's entities are remembered when
    /// `cluster.sharding.remember-entities` is on and the kind does not say otherwise.
    pub fn with_lease_store(mut self, store: Arc<dyn shardik_persistence::Store>) -> Self {
        self.own_store = Some(store);
        self
    }

    /// Runs this kind's handlers on `lanes` tasks on each node instead of the configured
    /// `cluster.sharding.handler-lanes`: 0 for one per worker thread of the node's runtime, 1
    /// to keep every handler in the kind's own task (one core's worth for the kind, and no
    /// hand-over at all). Lanes are used only while the kind's handlers take long enough to be
    /// worth the hand-over; see [`Entity`]'s "How handlers run". At most 1024.
    pub fn with_handler_lanes(mut self, lanes: usize) -> Self {
        self.handler_lanes = Some(lanes.min(shardik_config::MAX_HANDLER_LANES));
        self
    }

    /// Uses `codec` for commands and replies that cross the network.
    pub fn with_codec<C2: Codec>(self, codec: C2) -> EntityKind<E, C2> {
        EntityKind {
            name: self.name,
            factory: self.factory,
            role: self.role,
            stop_message: self.stop_message,
            extractor: self.extractor,
            idle_timeout: self.idle_timeout,
            passivation: self.passivation,
            allocation: self.allocation,
            codec: Arc::new(codec),
            remember: self.remember,
            own_store: self.own_store,
            handler_lanes: self.handler_lanes,
        }
    }

    /// The same kind for an entity type that wraps this one: `wrap` wraps each entity the
    /// factory makes, `wrap_command` the stop message. Every option carries over.
    pub(crate) fn map_entity<F: Entity>(
        self,
        wrap: impl Fn(E) -> F + Send + Sync + 'static,
        wrap_command: fn(E::Command) -> F::Command,
    ) -> EntityKind<F, C> {
        let factory = self.factory;
        let stop_message = self.stop_message.map(|make| {
            Arc::new(move || wrap_command(make())) as Arc<dyn Fn() -> F::Command + Send + Sync>
        });
        EntityKind {
            name: self.name,
            factory: Arc::new(move |id| wrap(factory(id))),
            role: self.role,
            stop_message,
            extractor: self.extractor,
            idle_timeout: self.idle_timeout,
            passivation: self.passivation,
            allocation: self.allocation,
            codec: self.codec,
            remember: self.remember,
            own_store: self.own_store,
            handler_lanes: self.handler_lanes,
        }
    }

    /// The kind's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The typed name of an entity kind (Akka's `EntityTypeKey`): with it, an entity reference
/// can be looked up from anywhere that has the node's [`Sharding`](crate::sharding::Sharding), not only
/// through the region returned when the kind was registered.
///
/// ```
/// # use shardik_runtime::facade as shardik;
/// # use shardik::{Entity, EntityContext, EntityTypeKey};
/// # struct Cart;
/// # impl Entity for Cart {
/// #     type Command = u32;
/// #     async fn handle(&mut self, _: u32, _: &mut EntityContext<Self>) {}
/// # }
/// const CART: EntityTypeKey<Cart> = EntityTypeKey::new("cart");
/// assert_eq!(CART.name(), "cart");
/// ```
pub struct EntityTypeKey<E> {
    name: &'static str,
    entity: std::marker::PhantomData<fn() -> E>,
}

impl<E> EntityTypeKey<E> {
    /// The key of the kind called `name`.
    pub const fn new(name: &'static str) -> Self {
        EntityTypeKey {
            name,
            entity: std::marker::PhantomData,
        }
    }

    /// The kind's name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<E> Clone for EntityTypeKey<E> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<E> Copy for EntityTypeKey<E> {}

impl<E> std::fmt::Debug for EntityTypeKey<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("EntityTypeKey").field(&self.name).finish()
    }
}
