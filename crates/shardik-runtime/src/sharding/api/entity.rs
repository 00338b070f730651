//! What a user implements for a sharded entity, and what its handler is handed: the
//! [`Entity`] trait (and [`SyncEntity`], for handlers that never await), the
//! [`EntityFailure`] a handler may end with, and the [`EntityContext`] through which a handler
//! asks the runtime for timers, messages to itself and passivation. The trait and its context
//! name each other (a handler takes `&mut EntityContext<Self>`, a context is of an `Entity`),
//! so they are one file.

use std::future::Future;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::entities::{ContextRequest, TimerCommand};
use shardik_core::sharding::{EntityId, ShardId};

/// A sharded entity: a plain Rust value addressed by id, created on its first message and
/// living on exactly one node at a time.
///
/// Commands to one entity are handled one at a time, in arrival order; different entities run
/// concurrently. An idle entity is just its value in a map: it has no task and no mailbox.
///
/// # Replies
///
/// A command that wants an answer carries a [`ReplyTo`](crate::sharding::ReplyTo) of the answer's type,
/// and the entity answers through it; [`EntityRef::ask`](crate::sharding::EntityRef::ask) builds the
/// command around one (Akka Typed's `ask(replyTo => ...)`). This is the one reply model, and
/// it covers both cases: a command with "the" reply of the entity carries a `ReplyTo` of that
/// type, and each command may carry its own reply type. Nothing is invented for a command
/// that answers nothing (a tell carries no `ReplyTo`), an answer may be sent later (after a
/// write, or once another entity answered) or by someone else (the `ReplyTo` travels), and a
/// refusal is just a reply type such as `Result<T, MyError>`
/// ([`EntityRef::ask_result`](crate::sharding::EntityRef::ask_result)).
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
///
/// [`EntityKind::with_handler_lanes`]: crate::sharding::EntityKind::with_handler_lanes
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
    ///
    /// [`ShardingError::EntityFailed`]: crate::sharding::ShardingError::EntityFailed
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
/// [`ReplyTo`](crate::sharding::ReplyTo) in the command, a panic fails the incarnation as it does there.
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

    /// Takes over what the context of a wrapped entity (`for_inner`) collected while its
    /// handler ran: a passivation, and its requests (messages to itself, timers, the receive
    /// timeout) with their commands wrapped by `wrap`.
    pub(crate) fn absorb<I: Entity>(
        &mut self,
        inner: EntityContext<I>,
        wrap: fn(I::Command) -> E::Command,
    ) {
        if inner.passivate {
            self.passivate = true;
        }
        self.requests
            .extend(inner.requests.into_iter().map(|r| r.map(wrap)));
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
