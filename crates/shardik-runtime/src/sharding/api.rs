//! The types a user writes against: entities, their context, entity kinds, codecs, errors.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::ShardAllocationStrategy;
use shardik_core::sharding::{EntityId, ShardId};
use shardik_passivation::{IdleCheck, ResolvedStrategy};

use super::remember_settings::{EntityRecovery, RememberChoice, RememberSettings};
use super::strategy::{AsyncShardAllocationStrategy, KindAllocation};

/// A sharded entity: a plain Rust value addressed by id, created on its first message and
/// living on exactly one node at a time.
///
/// Commands to one entity are handled one at a time, in arrival order; different entities run
/// concurrently. An idle entity is just its value in a map: it has no task and no mailbox.
///
/// # Replies
///
/// A command that wants an answer carries a [`ReplyTo`](super::ReplyTo) of the answer's type,
/// and the entity answers through it; [`EntityRef::ask`](super::EntityRef::ask) builds the
/// command around one (Akka Typed's `ask(replyTo => ...)`). This is the one reply model, and
/// it covers both cases: a command with "the" reply of the entity carries a `ReplyTo` of that
/// type, and each command may carry its own reply type. Nothing is invented for a command
/// that answers nothing (a tell carries no `ReplyTo`), an answer may be sent later (after a
/// write, or once another entity answered) or by someone else (the `ReplyTo` travels), and a
/// refusal is just a reply type such as `Result<T, MyError>`
/// ([`EntityRef::ask_result`](super::EntityRef::ask_result)).
///
/// # How handlers run
///
/// A kind's handlers run on the node's tokio runtime, in the kind's own task or, when the
/// runtime has several worker threads and the kind's handlers take a couple of microseconds or
/// more each, on the kind's lanes: one task per worker thread, so that one kind's CPU-bound
/// handlers use every core (`cluster.sharding.handler-lanes` sets another count for every
/// kind, [`EntityKind::with_handler_lanes`] for one). Which one runs a command changes nothing
/// you can observe: one command at a time per entity, in the order each sender sent them.
///
/// A handler that awaits (a store write, an ask to another entity) lets the others on its
/// task go on meanwhile; only its own entity waits. A handler that *blocks* (a synchronous
/// client, `std::thread::sleep`, a long computation in one piece) holds up every entity
/// served by the same task until it returns. Run such work through
/// [`EntityContext::blocking`], which moves it to tokio's blocking pool and lets the handler
/// await its result.
pub trait Entity: Sized + Send + 'static {
    /// What the entity is told or asked.
    type Command: Serialize + DeserializeOwned + Send + 'static;

    /// Handles one command. `ctx` names the entity and lets it ask to be passivated, send
    /// commands to itself, start timers and set a receive timeout.
    fn handle(
        &mut self,
        cmd: Self::Command,
        ctx: &mut EntityContext<Self>,
    ) -> impl Future<Output = ()> + Send;

    /// Handles one command, or fails as a whole: on `Err`, an asker waiting on this command
    /// gets [`ShardingError::EntityFailed`] with the failure's text (unless the entity
    /// answered it first), and this incarnation of the entity is dropped (what it did not make
    /// durable is gone; the next command starts a new one). The runtime calls this; the
    /// default calls [`handle`](Self::handle) and never fails. Durable entities (event
    /// sourced, durable state) fail this way when the store refuses or loses a write.
    fn try_handle(
        &mut self,
        cmd: Self::Command,
        ctx: &mut EntityContext<Self>,
    ) -> impl Future<Output = Result<(), EntityFailure>> + Send {
        async move {
            self.handle(cmd, ctx).await;
            Ok(())
        }
    }

    /// Whether [`handle_now`](Self::handle_now) handles every command: set by the
    /// implementation for [`SyncEntity`], so that the runtime can call a handler that never
    /// awaits without making a future (Rust has no specialization to find that out
    /// otherwise). Not meant to be set by hand.
    #[doc(hidden)]
    const HANDLES_NOW: bool = false;

    /// Handles `cmd` without a future, when [`HANDLES_NOW`](Self::HANDLES_NOW) says so
    /// (a [`SyncEntity`]); gives the command back otherwise. Not meant to be implemented by hand.
    #[doc(hidden)]
    fn handle_now(
        &mut self,
        cmd: Self::Command,
        _ctx: &mut EntityContext<Self>,
    ) -> Result<(), Self::Command> {
        Err(cmd)
    }
}

/// An entity whose handler never awaits anything: a counter, a cart or a session kept in
/// memory. Implement this instead of [`Entity`] (which every `SyncEntity` then is) and each
/// command is handled by a plain call, without making, polling and dropping a future: the
/// local path's largest cost once the entity is found. Everything else is as for [`Entity`]:
/// one command at a time per entity, the same [`EntityContext`], answers through a
/// [`ReplyTo`](super::ReplyTo) in the command, a panic fails the incarnation as it does there.
///
/// ```
/// # use shardik_runtime::facade as shardik;
/// use serde::{Deserialize, Serialize};
/// use shardik::{EntityContext, ReplyTo, SyncEntity};
///
/// #[derive(Serialize, Deserialize)]
/// enum CounterCmd {
///     Add(u64),
///     Get(ReplyTo<u64>),
/// }
///
/// #[derive(Default)]
/// struct Counter(u64);
///
/// impl SyncEntity for Counter {
///     type Command = CounterCmd;
///     fn handle(&mut self, cmd: CounterCmd, _ctx: &mut EntityContext<Self>) {
///         match cmd {
///             CounterCmd::Add(n) => self.0 += n,
///             CounterCmd::Get(reply_to) => reply_to.send(self.0),
///         }
///     }
/// }
/// ```
pub trait SyncEntity: Sized + Send + 'static {
    /// What the entity is told or asked.
    type Command: Serialize + DeserializeOwned + Send + 'static;

    /// Handles one command, at once (see [`Entity::handle`] for `ctx`).
    fn handle(&mut self, cmd: Self::Command, ctx: &mut EntityContext<Self>);
}

impl<T: SyncEntity> Entity for T {
    type Command = T::Command;

    fn handle(
        &mut self,
        cmd: Self::Command,
        ctx: &mut EntityContext<Self>,
    ) -> impl Future<Output = ()> + Send {
        SyncEntity::handle(self, cmd, ctx);
        std::future::ready(())
    }

    const HANDLES_NOW: bool = true;

    fn handle_now(
        &mut self,
        cmd: Self::Command,
        ctx: &mut EntityContext<Self>,
    ) -> Result<(), Self::Command> {
        SyncEntity::handle(self, cmd, ctx);
        Ok(())
    }
}

/// Why an entity failed to handle a command (see [`Entity::try_handle`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct EntityFailure(pub String);

/// What a `try_handle` came to, for an entity whose `handle` is only its `try_handle` called
/// directly (the runtime calls `try_handle`): a failure there is a panic, which the host turns
/// into the same `EntityFailed` answer.
pub(crate) fn done_or_panic(handled: Result<(), EntityFailure>) {
    if let Err(failure) = handled {
        panic!("{failure}")
    }
}

/// What a handler knows about its entity, and what it may ask of the runtime: to be stopped,
/// to be sent a command later (timers, a receive timeout) or after what is queued (a message
/// to itself).
///
/// Requests are collected while the handler runs and carried out, in the order they were
/// made, once it returns. Timers and the receive timeout belong to the incarnation: when the
/// entity is passivated, handed off or stopped they are cancelled, so a timer never brings a
/// stopped entity back. An entity without timers costs nothing for them. What an entity sends
/// itself (messages to self, timers, the receive timeout) does not count as use for
/// passivation, as in Akka, where it reaches the actor without passing its shard: an entity
/// kept busy only by its own timers is still passivated when idle.
pub struct EntityContext<E: Entity> {
    pub(crate) entity_id: EntityId,
    pub(crate) shard_id: ShardId,
    pub(crate) node: UniqueAddress,
    pub(crate) passivate: bool,
    /// Requests for the runtime, applied when the handler returns (empty, unallocated, for
    /// most commands).
    pub(crate) requests: Vec<ContextRequest<E::Command>>,
    /// The shard's lease fence, when the shard runs under a lease (`use-lease`).
    pub(crate) fence: Option<shardik_persistence::Fence>,
}

impl<E: Entity> std::fmt::Debug for EntityContext<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntityContext")
            .field("entity_id", &self.entity_id)
            .field("shard_id", &self.shard_id)
            .field("node", &self.node)
            .field("passivate", &self.passivate)
            .field("requests", &self.requests.len())
            .finish()
    }
}

pub(crate) use shardik_core::sharding::entities::{ContextRequest, TimerCommand};

impl<E: Entity> EntityContext<E> {
    /// A context for an entity that another wraps: the same entity, no requests yet.
    pub(crate) fn for_inner<I: Entity>(&self) -> EntityContext<I> {
        let mut inner = EntityContext::new(
            self.entity_id.clone(),
            self.shard_id.clone(),
            self.node.clone(),
        );
        inner.fence = self.fence.clone();
        inner
    }

    /// The fence of the lease the entity's shard runs under (`cluster.sharding.use-lease`):
    /// writes that carry it ([`shardik_persistence::AtomicWrite::fence`]) are refused by the
    /// store once a newer holder of the lease has written, so a copy of the entity that lost
    /// its lease without noticing yet cannot write. Durable entities attach it on their own;
    /// `None` without leases.
    pub fn fence(&self) -> Option<&shardik_persistence::Fence> {
        self.fence.as_ref()
    }

    pub(crate) fn new(entity_id: EntityId, shard_id: ShardId, node: UniqueAddress) -> Self {
        EntityContext {
            entity_id,
            shard_id,
            node,
            passivate: false,
            requests: Vec::new(),
            fence: None,
        }
    }

    /// A context outside any node, for unit tests that call a handler directly (such as an
    /// event-sourced entity's `handle_command`): entity `entity_id` in shard `"0"` of node
    /// `127.0.0.1:0` (uid 0). What the handler asks through it (timers, messages to self,
    /// passivation) is kept and goes nowhere.
    ///
    /// ```
    /// # use shardik_runtime::facade as shardik;
    /// # use shardik::{Entity, EntityContext};
    /// # struct Cart;
    /// # impl Entity for Cart {
    /// #     type Command = u32;
    /// #     async fn handle(&mut self, _: u32, _: &mut EntityContext<Self>) {}
    /// # }
    /// let ctx = EntityContext::<Cart>::detached("cart-1");
    /// assert_eq!(ctx.entity_id(), "cart-1");
    /// ```
    pub fn detached(entity_id: &str) -> Self {
        EntityContext::new(
            entity_id.into(),
            "0".into(),
            UniqueAddress::new(shardik_core::membership::Address::new("127.0.0.1", 0), 0),
        )
    }

    /// Runs `work`, which may block (a synchronous client, a file read, a long computation in
    /// one piece), on tokio's blocking pool, and resolves to what it returns. It starts at
    /// once; await the result in the handler. Meanwhile this entity's next commands wait, as
    /// for any handler that awaits, and the kind's other entities go on being served, where
    /// blocking in the handler itself would have held up every entity of its task.
    ///
    /// A panic in `work` is the handler's own (its incarnation fails, an asker is told).
    pub fn blocking<R, F>(&self, work: F) -> impl Future<Output = R> + Send + 'static
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let handle = tokio::task::spawn_blocking(work);
        async move {
            match handle.await {
                Ok(result) => result,
                Err(e) => match e.try_into_panic() {
                    Ok(panic) => std::panic::resume_unwind(panic),
                    // Only a runtime shutting down cancels blocking work.
                    Err(e) => panic!("the blocking work was cancelled: {e}"),
                },
            }
        }
    }

    /// The entity's id.
    pub fn entity_id(&self) -> &str {
        &self.entity_id
    }

    /// Its shard.
    pub fn shard_id(&self) -> &str {
        &self.shard_id
    }

    /// The node it runs on.
    pub fn node(&self) -> &UniqueAddress {
        &self.node
    }

    /// Asks to be stopped once this command is handled: commands already queued are handled
    /// first, then the kind's stop message (if any), then the entity is dropped. Commands that
    /// arrive later start a new incarnation. Timers and the receive timeout are cancelled.
    pub fn passivate(&mut self) {
        self.passivate = true;
    }

    /// Sends `cmd` to this entity (Akka's `context.self ! msg`): it is handled after the
    /// commands already waiting for the entity, like any tell. Sent while the entity is
    /// stopping (from its stop message, or after a passivation was queued), it is dropped, as
    /// a message to a stopped actor is.
    pub fn tell_self(&mut self, cmd: E::Command) {
        self.requests.push(ContextRequest::TellSelf(cmd));
    }

    /// Delivers `cmd` to this entity once, after `delay` (Akka's `startSingleTimer`). A timer
    /// already running under `key` is replaced: its command is not delivered.
    pub fn start_single_timer(&mut self, key: &str, cmd: E::Command, delay: Duration) {
        self.requests.push(ContextRequest::StartTimer {
            key: key.into(),
            command: TimerCommand::Once(cmd),
            delay,
        });
    }

    /// Delivers a copy of `cmd` to this entity every `delay`, counted from each delivery
    /// (Akka's `startTimerWithFixedDelay`), until cancelled or the entity stops. A timer
    /// already running under `key` is replaced. Delays under a millisecond count as one.
    pub fn start_timer_with_fixed_delay(&mut self, key: &str, cmd: E::Command, delay: Duration)
    where
        E::Command: Clone,
    {
        self.requests.push(ContextRequest::StartTimer {
            key: key.into(),
            command: TimerCommand::Repeat(Box::new(move || cmd.clone())),
            delay,
        });
    }

    /// Cancels the timer `key`: its command is not delivered (nothing happens if there is no
    /// such timer).
    pub fn cancel_timer(&mut self, key: &str) {
        self.requests.push(ContextRequest::CancelTimer(key.into()));
    }

    /// Cancels every timer of this entity (the receive timeout stays).
    pub fn cancel_all_timers(&mut self) {
        self.requests.push(ContextRequest::CancelAllTimers);
    }

    /// Delivers a copy of `cmd` whenever the entity has handled no command for `timeout`
    /// (Akka's `setReceiveTimeout`); every command handled, the timeout's own included, starts
    /// the silence anew. Replaces an earlier receive timeout. Timeouts under a millisecond
    /// count as one.
    pub fn set_receive_timeout(&mut self, timeout: Duration, cmd: E::Command)
    where
        E::Command: Clone,
    {
        self.requests.push(ContextRequest::ReceiveTimeout(Some((
            timeout,
            Box::new(move || cmd.clone()),
        ))));
    }

    /// Clears the receive timeout.
    pub fn cancel_receive_timeout(&mut self) {
        self.requests.push(ContextRequest::ReceiveTimeout(None));
    }
}

/// Turns commands and replies into bytes for the network. Local messages are never encoded.
pub trait Codec: Send + Sync + 'static {
    /// Encodes a value.
    fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, CodecError>;
    /// Decodes a value.
    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, CodecError>;
    /// Encodes a value at the end of `out`. Commands for other nodes are encoded this way,
    /// into a buffer the region reuses; the default calls [`encode`](Self::encode) and
    /// copies, and a codec that can write into a `Vec` should do so instead.
    fn encode_into<T: Serialize>(&self, value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
        out.extend_from_slice(&self.encode(value)?);
        Ok(())
    }
}

/// The default codec: postcard, a compact, stable serde format.
#[derive(Copy, Clone, Debug, Default)]
pub struct Postcard;

impl Codec for Postcard {
    fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, CodecError> {
        postcard::to_allocvec(value).map_err(|e| CodecError(e.to_string()))
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, CodecError> {
        postcard::from_bytes(bytes).map_err(|e| CodecError(e.to_string()))
    }

    fn encode_into<T: Serialize>(&self, value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
        let written = postcard::to_extend(value, std::mem::take(out));
        *out = written.map_err(|e| CodecError(e.to_string()))?;
        Ok(())
    }
}

/// CBOR (RFC 8949) through serde: a self-describing codec for commands and replies whose types
/// change while a cluster runs two versions of a program (a rolling update). Fields travel by
/// name, so a reader ignores fields it does not know and fills missing ones marked
/// `#[serde(default)]`; enum variants travel by name. Larger and slower to decode than
/// [`Postcard`] (docs/PERFORMANCE.md, "Codecs"), which stays the default for types that never
/// change while messages are in flight. Which changes are safe: docs/EVOLUTION.md.
///
/// ```
/// # use shardik_runtime::facade as shardik;
/// use shardik::{Cbor, Codec};
///
/// #[derive(serde::Serialize)]
/// struct SetV1 { name: String }
/// #[derive(serde::Deserialize, Debug, PartialEq)]
/// struct SetV2 { name: String, #[serde(default)] note: Option<String> }
///
/// let bytes = Cbor.encode(&SetV1 { name: "a".into() }).unwrap();
/// let read: SetV2 = Cbor.decode(&bytes).unwrap();
/// assert_eq!(read, SetV2 { name: "a".into(), note: None });
/// ```
#[derive(Copy, Clone, Debug, Default)]
pub struct Cbor;

impl Codec for Cbor {
    fn encode<T: Serialize>(&self, value: &T) -> Result<Vec<u8>, CodecError> {
        crate::cbor::encode(value).map_err(CodecError)
    }

    fn decode<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, CodecError> {
        crate::cbor::decode(bytes).map_err(CodecError)
    }

    fn encode_into<T: Serialize>(&self, value: &T, out: &mut Vec<u8>) -> Result<(), CodecError> {
        crate::cbor::encode_into(value, out).map_err(CodecError)
    }
}

/// A value could not be encoded or decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("codec error: {0}")]
pub struct CodecError(pub String);

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

    /// The kind's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Why a message could not be sent or answered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardingError {
    /// No answer within the ask's timeout. The command may or may not have been handled.
    #[error("no reply within {0:?}; the command may or may not have been handled")]
    Timeout(Duration),
    /// The region's queue is full (from `try_tell`); slow down, or use `tell`, which waits.
    #[error("the region's queue is full; retry later, or use tell(..).await, which waits for room")]
    BufferFull,
    /// The message was dropped on the way, for the reason given (see metrics
    /// `shardik_sharding_dropped_total`).
    #[error("message dropped: {0}")]
    Dropped(&'static str),
    /// The shard could not be reached (its node left or failed mid-request); retry.
    #[error("shard unavailable: {0}")]
    ShardUnavailable(String),
    /// The region is stopped (the node is shutting down).
    #[error("the region is stopped")]
    RegionStopped,
    /// The entity's shard runs under a lease (`cluster.sharding.use-lease`) that its node
    /// could not take because the lease's store failed or did not answer; the command was not
    /// handled rather than run unfenced. Retry once the store is back.
    #[error(
        "the shard's lease could not be acquired (its store failed or did not answer); the \
         command was not handled"
    )]
    LeaseUnavailable,
    /// The command or reply could not be encoded or decoded.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The entity's handler panicked; the entity was dropped and will be re-created by the next
    /// command.
    #[error("the entity failed: {0}")]
    EntityFailed(String),
    /// The remote node does not know this entity kind (it was not initialised there).
    #[error(
        "entity kind {0:?} is not running on the target node (its application never called \
         sharding().init for it there)"
    )]
    UnknownKind(String),
    /// The entity kind was never initialised on this node, so this node cannot route to it:
    /// call `sharding().init` with an `EntityKind` of that name first (on a node without the
    /// kind's role, `init` starts a proxy that only routes).
    #[error(
        "entity kind {0:?} was never initialised on this node: call \
         sharding().init(EntityKind::new({0:?}, ...)) for it first (on a node without the \
         kind's role, init starts a proxy that only routes to the nodes that host it)"
    )]
    NotInitialized(String),
    /// A timeout of zero was given.
    #[error("the ask timeout must be positive")]
    InvalidTimeout,
    /// An entity reference was looked up with a key whose entity type differs from the type
    /// the kind was registered with.
    #[error("entity kind {0:?} is registered with another entity type")]
    WrongEntityType(String),
}

/// Why a tell did not go out: the only two ways it can fail, so a caller matches exactly
/// those (an ask can fail in more ways: [`ShardingError`], which a `TellError` converts into).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TellError {
    /// The region's queue is full (only from `try_tell`; `tell` waits for room instead).
    #[error("the region's queue is full; retry later, or use tell(..).await, which waits for room")]
    BufferFull,
    /// The region is stopped (the node is shutting down).
    #[error("the region is stopped")]
    RegionStopped,
}

impl ShardingError {
    /// The asker's error for a reply frame's error, from an ask to kind `kind`.
    pub(crate) fn from_reply_error(kind: &str, e: shardik_wire::ReplyError) -> Self {
        use shardik_wire::ReplyErrorKind;
        match e.kind {
            ReplyErrorKind::UnknownKind => ShardingError::UnknownKind(kind.to_string()),
            ReplyErrorKind::BufferFull => ShardingError::BufferFull,
            ReplyErrorKind::RegionStopped => ShardingError::RegionStopped,
            ReplyErrorKind::EntityFailed => ShardingError::EntityFailed(e.message),
            ReplyErrorKind::DecodeFailed => ShardingError::Codec(CodecError(e.message)),
            ReplyErrorKind::ShardUnavailable => ShardingError::ShardUnavailable(e.message),
        }
    }
}

impl From<TellError> for ShardingError {
    fn from(e: TellError) -> Self {
        match e {
            TellError::BufferFull => ShardingError::BufferFull,
            TellError::RegionStopped => ShardingError::RegionStopped,
        }
    }
}

/// Why an [`EntityRef::ask_result`](super::EntityRef::ask_result) gave no success value:
/// the entity handled the command and refused it with its own error type, or the command was
/// not answered at all.
///
/// An entity whose commands can be refused answers `Result<T, E>` with an error type of its
/// own (anything serde can carry: an enum a caller can match, not a string); `ask_result`
/// puts the two kinds of failure side by side, so that a caller handles "refused" in the same
/// `match` as "timed out".
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AskError<E> {
    /// The entity handled the command and refused it: nothing changed; retrying the same
    /// command gets the same answer until the entity's state changes.
    Refused(E),
    /// The command was not answered: see [`ShardingError`] for each cause and what to do.
    Sharding(ShardingError),
}

impl<E> From<ShardingError> for AskError<E> {
    fn from(e: ShardingError) -> Self {
        AskError::Sharding(e)
    }
}

impl<E: std::fmt::Display> std::fmt::Display for AskError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AskError::Refused(e) => write!(f, "refused by the entity: {e}"),
            AskError::Sharding(e) => e.fmt(f),
        }
    }
}

impl<E> std::error::Error for AskError<E>
where
    E: std::error::Error + 'static,
{
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AskError::Refused(e) => Some(e),
            AskError::Sharding(e) => Some(e),
        }
    }
}

/// The typed name of an entity kind (Akka's `EntityTypeKey`): with it, an entity reference
/// can be looked up from anywhere that has the node's [`Sharding`](super::Sharding), not only
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
