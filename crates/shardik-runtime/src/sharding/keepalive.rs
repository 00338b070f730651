//! What the cluster singleton and the sharded daemon process share: a user entity wrapped so
//! that it can be started (and kept alive) by a message that is not the user's, a typed
//! reference that hides the wrapping, and the task that sends those keep-alive messages.
//!
//! Both are ordinary entity kinds; the only thing they add to sharding is that some entities
//! must run although nobody writes to them. A sharded entity starts on its first message, so
//! "keep it running" is "keep sending it a message": every node sends [`Managed::KeepAlive`]
//! to each such entity every `keep-alive-interval`. A keep-alive to a running entity costs one
//! routed message and does nothing; one to an entity whose node left or failed starts it at
//! its new home.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shardik_passivation::ResolvedStrategy;

use super::api::{
    Codec, Entity, EntityContext, EntityFailure, EntityKind, ShardingError, TellError,
    done_or_panic,
};
use super::entity_ref::{EntityRef, EntityRegion};
use super::handle::Sharding;
use super::init_error::InitError;
use super::reply_to::ReplyTo;

/// The settings a singleton and a daemon process share.
pub(crate) struct ManagedOptions<C> {
    pub(crate) role: Option<String>,
    pub(crate) keep_alive_interval: Duration,
    pub(crate) stop_message: Option<Arc<dyn Fn() -> C + Send + Sync>>,
}

impl<C> Default for ManagedOptions<C> {
    /// Any member; kept alive every 10 s (Akka's `keep-alive-interval`); no stop message.
    fn default() -> Self {
        ManagedOptions {
            role: None,
            keep_alive_interval: Duration::from_secs(10),
            stop_message: None,
        }
    }
}

impl<C> ManagedOptions<C> {
    pub(crate) fn set_role(&mut self, role: &str) {
        self.role = Some(role.to_string()).filter(|r| !r.is_empty());
    }

    pub(crate) fn set_stop_message(&mut self, make: impl Fn() -> C + Send + Sync + 'static) {
        self.stop_message = Some(Arc::new(make));
    }
}

/// Registers `kind` as a managed kind on `sharding` (never passivated, with the options' role
/// and stop message) and starts this node's keep-alive task over the ids `ids` names.
pub(crate) fn init_managed<E: Entity>(
    sharding: &Sharding,
    kind: EntityKind<ManagedEntity<E>>,
    options: ManagedOptions<E::Command>,
    ids: impl Fn() -> Box<dyn Iterator<Item = String> + Send> + Send + 'static,
) -> Result<EntityRegion<ManagedEntity<E>>, ManagedInitError> {
    if options.keep_alive_interval.is_zero() {
        return Err(ManagedInitError::ZeroKeepAliveInterval);
    }
    // Managed entities run until their node leaves: never passivated for being idle.
    let mut kind = kind.with_passivation(ResolvedStrategy::Disabled);
    if let Some(role) = &options.role {
        kind = kind.with_role(role);
    }
    if let Some(stop) = options.stop_message {
        kind = kind.with_stop_message(move || Managed::User(stop()));
    }
    let region = sharding.init(kind)?;
    spawn_keep_alive(region.clone(), ids, options.keep_alive_interval);
    Ok(region)
}

/// A command to a managed entity: the keep-alive that starts it, or the user's command.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum Managed<C> {
    /// Start (if not running) and do nothing else.
    KeepAlive,
    /// The user's command.
    User(C),
}

/// The user entity inside; `None` for an id that names none (a daemon index out of range),
/// which fails every user command (its asker gets `EntityFailed`) and stops at once.
pub(crate) struct ManagedEntity<E> {
    pub(crate) inner: Option<E>,
}

impl<E: Entity> Entity for ManagedEntity<E> {
    type Command = Managed<E::Command>;

    async fn handle(&mut self, cmd: Self::Command, ctx: &mut EntityContext<Self>) {
        done_or_panic(self.try_handle(cmd, ctx).await)
    }

    async fn try_handle(
        &mut self,
        cmd: Self::Command,
        ctx: &mut EntityContext<Self>,
    ) -> Result<(), EntityFailure> {
        let Some(inner) = self.inner.as_mut() else {
            // Passivation is off for managed kinds: without this, every bogus id a peer sends
            // would stay in memory.
            ctx.passivate();
            return match cmd {
                Managed::KeepAlive => Ok(()),
                Managed::User(_) => Err(EntityFailure(format!(
                    "{} names no entity of this kind",
                    ctx.entity_id()
                ))),
            };
        };
        match cmd {
            Managed::KeepAlive => Ok(()),
            Managed::User(c) => {
                // The user's entity gets a context of its own type; what it asks of it (stop,
                // messages to itself, timers) is carried over with its commands wrapped.
                let mut inner_ctx = ctx.for_inner::<E>();
                inner.try_handle(c, &mut inner_ctx).await?;
                ctx.absorb(inner_ctx, Managed::User);
                Ok(())
            }
        }
    }
}

/// Why a cluster singleton or a sharded daemon process could not be started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManagedInitError {
    /// Registering the underlying entity kind failed.
    #[error(transparent)]
    Init(#[from] InitError),
    /// The keep-alive interval must be positive.
    #[error("the keep-alive interval must be positive")]
    ZeroKeepAliveInterval,
    /// A sharded daemon process needs at least one worker.
    #[error("a sharded daemon process needs at least one worker")]
    NoWorkers,
}

/// A typed reference to a cluster singleton or to one worker of a sharded daemon process,
/// usable from every node (through the node's region or proxy of the underlying kind).
pub struct ManagedRef<E: Entity> {
    pub(crate) inner: EntityRef<ManagedEntity<E>>,
}

impl<E: Entity> Clone for ManagedRef<E> {
    fn clone(&self) -> Self {
        ManagedRef {
            inner: self.inner.clone(),
        }
    }
}

impl<E: Entity> std::fmt::Debug for ManagedRef<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedRef")
            .field("entity", &self.inner.entity_id())
            .finish_non_exhaustive()
    }
}

impl<E: Entity> ManagedRef<E> {
    /// The underlying entity's id.
    pub fn id(&self) -> &str {
        self.inner.entity_id()
    }

    /// Sends `cmd` without waiting for an answer, waiting while the region's queue is full.
    /// While the entity moves, the message waits in the region's buffer.
    pub async fn tell(&self, cmd: E::Command) -> Result<(), TellError> {
        self.inner.tell(Managed::User(cmd)).await
    }

    /// Sends `cmd` without waiting, failing at once with [`TellError::BufferFull`] when the
    /// region's queue is full.
    pub fn try_tell(&self, cmd: E::Command) -> Result<(), TellError> {
        self.inner.try_tell(Managed::User(cmd))
    }

    /// Sends the command `make` builds around a [`ReplyTo`] and waits at most `timeout` for
    /// the answer, as [`EntityRef::ask`] does.
    pub async fn ask<R, C>(
        &self,
        make: impl FnOnce(ReplyTo<R, C>) -> E::Command,
        timeout: Duration,
    ) -> Result<R, ShardingError>
    where
        R: serde::Serialize + serde::de::DeserializeOwned + Send + 'static,
        C: Codec + Default,
    {
        self.inner
            .ask(|reply_to| Managed::User(make(reply_to)), timeout)
            .await
    }
}

/// Sends a keep-alive to every entity of `ids` at once and then every `interval`, from this
/// node, until the region stops. A full queue skips one round rather than waiting: the next
/// round repeats it, and a keep-alive must never hold up user traffic.
fn spawn_keep_alive<E: Entity>(
    region: EntityRegion<ManagedEntity<E>>,
    ids: impl Fn() -> Box<dyn Iterator<Item = String> + Send> + Send + 'static,
    interval: Duration,
) {
    crate::task::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            for id in ids() {
                if let Err(TellError::RegionStopped) = region.try_tell(&id, Managed::KeepAlive) {
                    return;
                }
            }
        }
    });
}

#[cfg(test)]
mod wrapper_tests {
    use super::*;
    use shardik_core::sharding::entities::{ContextRequest, TimerCommand};

    /// Asks for a message to itself, a timer, and its own stop.
    struct Busy;

    impl Entity for Busy {
        type Command = u32;

        async fn handle(&mut self, cmd: u32, ctx: &mut EntityContext<Self>) {
            ctx.tell_self(cmd + 1);
            ctx.start_single_timer("t", cmd + 2, std::time::Duration::from_secs(1));
            ctx.passivate();
        }
    }

    #[tokio::test]
    async fn what_the_wrapped_entity_asks_of_its_context_reaches_the_wrapper_s() {
        let mut managed = ManagedEntity { inner: Some(Busy) };
        let mut ctx = EntityContext::<ManagedEntity<Busy>>::new(
            "0".into(),
            "0".into(),
            shardik_core::membership::UniqueAddress::new(
                shardik_core::membership::Address::new("127.0.0.1", 1),
                1,
            ),
        );
        managed.handle(Managed::User(7), &mut ctx).await;
        assert!(ctx.passivate, "the stop request is carried over");
        assert_eq!(ctx.requests.len(), 2);
        assert!(matches!(
            ctx.requests[0],
            ContextRequest::TellSelf(Managed::User(8))
        ));
        assert!(matches!(
            &ctx.requests[1],
            ContextRequest::StartTimer { key, command: TimerCommand::Once(Managed::User(9)), .. } if &**key == "t"
        ));
    }
}
