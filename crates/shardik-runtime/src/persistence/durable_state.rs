//! Durable-state entities (Akka's `DurableStateBehavior`): the whole state is stored by
//! revision, written before the reply. Each write must be exactly one revision past the stored
//! one, so a second live copy of the entity cannot overwrite the first copy's state unseen.

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use shardik_persistence::{DeliveryMark, MarkChange, StoredState, persistence_id};

use super::after_write::AfterWrite;
use super::codec::StorageCodec;
use super::store::{Persistence, delivery_marks, write_marks};
use crate::delivery::{Guarantee, ReliableConsumer};
use crate::sharding::{
    Codec, Entity, EntityContext, EntityFailure, EntityKind, EntityTypeKey, Postcard, ReplyTo,
    done_or_panic,
};

/// An entity whose whole state is stored after each change (Akka's `DurableStateBehavior`).
/// The entity value is the state; the command handler reads it and decides. Replies go
/// through the [`ReplyTo`] a command carries, once the new state is stored
/// ([`StateEffect::then_reply`]).
///
/// ```
/// use serde::{Deserialize, Serialize};
/// # use shardik_runtime::facade as shardik;
/// use shardik::ReplyTo;
/// use shardik::persistence::{DurableStateContext, DurableStateEntity, StateEffect};
///
/// #[derive(Default, Serialize, Deserialize)]
/// struct Profile {
///     name: String,
/// }
///
/// #[derive(Serialize, Deserialize)]
/// enum Cmd {
///     Rename(String, ReplyTo<()>),
///     Name(ReplyTo<String>),
/// }
///
/// impl DurableStateEntity for Profile {
///     type Command = Cmd;
///     fn handle_command(&self, cmd: Cmd, _ctx: &mut DurableStateContext<Self>) -> StateEffect<Self> {
///         match cmd {
///             Cmd::Rename(name, reply_to) => {
///                 StateEffect::persist(Profile { name }).then_reply(reply_to, |_| ())
///             }
///             Cmd::Name(reply_to) => StateEffect::reply(reply_to, self.name.clone()),
///         }
///     }
/// }
/// ```
pub trait DurableStateEntity: Serialize + DeserializeOwned + Send + 'static {
    /// What the entity is told or asked (answers go through a [`ReplyTo`] inside).
    type Command: Serialize + DeserializeOwned + Send + 'static;

    /// Decides what `cmd` does: a new state to store and what to do once it is stored, or
    /// nothing to store.
    fn handle_command(
        &self,
        cmd: Self::Command,
        ctx: &mut DurableStateContext<Self>,
    ) -> StateEffect<Self>;
}

/// The context a durable-state command handler gets.
pub type DurableStateContext<B> = EntityContext<DurableState<B>>;

/// What a durable-state command handler decided: a new state to store and what to do once it
/// is stored (replies made from it, side effects), or nothing to store. To stop the entity
/// after the effect, call `ctx.passivate()` in the handler. A write the store refuses or
/// loses fails the command: nothing after it runs, and an asker waiting on the command gets
/// [`ShardingError::EntityFailed`](crate::sharding::ShardingError::EntityFailed).
#[must_use = "an effect does nothing unless returned from the command handler"]
pub struct StateEffect<B: DurableStateEntity> {
    new_state: Option<B>,
    then: AfterWrite<B>,
}

impl<B: DurableStateEntity> StateEffect<B> {
    /// Stores `state` as the entity's new state (then what
    /// [`then_reply`](Self::then_reply) and [`then_run`](Self::then_run) add).
    pub fn persist(state: B) -> Self {
        StateEffect {
            new_state: Some(state),
            then: AfterWrite::new(),
        }
    }

    /// Stores nothing and answers nothing.
    pub fn none() -> Self {
        StateEffect {
            new_state: None,
            then: AfterWrite::new(),
        }
    }

    /// Stores nothing and answers `answer` at once.
    pub fn reply<R, C>(reply_to: ReplyTo<R, C>, answer: R) -> Self
    where
        R: Serialize + Send + 'static,
        C: Codec + Default + 'static,
    {
        StateEffect::none().then_reply(reply_to, move |_| answer)
    }

    /// Once the state is stored, answers what `answer` makes of it.
    pub fn then_reply<R, C>(
        mut self,
        reply_to: ReplyTo<R, C>,
        answer: impl FnOnce(&B) -> R + Send + 'static,
    ) -> Self
    where
        R: Serialize + Send + 'static,
        C: Codec + Default + 'static,
    {
        self.then.reply(reply_to, answer);
        self
    }

    /// Once the state is stored, runs `f` on it: a side effect.
    pub fn then_run(mut self, f: impl FnOnce(&B) + Send + 'static) -> Self {
        self.then.run(f);
        self
    }
}

struct Shared {
    kind: Arc<str>,
    persistence: Persistence,
    codec: StorageCodec,
}

/// A durable-state entity as a sharded entity: the state and its stored revision (0 before the
/// first write), loaded before the first command of an incarnation.
pub struct DurableState<B: DurableStateEntity> {
    state: B,
    revision: u64,
    loaded: bool,
    shared: Arc<Shared>,
}

impl<B: DurableStateEntity> EntityKind<DurableState<B>, Postcard> {
    /// The durable-state kind of `key`: `initial` makes an entity's state before its first
    /// write; states go to `persistence`'s store under `"{kind}|{entity id}"`, as postcard.
    pub fn durable_state(
        key: EntityTypeKey<DurableState<B>>,
        persistence: &Persistence,
        initial: impl Fn(&str) -> B + Send + Sync + 'static,
    ) -> Self {
        let shared = Arc::new(Shared {
            kind: key.name().into(),
            persistence: persistence.clone(),
            codec: StorageCodec::Postcard,
        });
        let store = Arc::clone(persistence.store());
        EntityKind::for_key(key, move |id| DurableState {
            state: initial(id),
            revision: 0,
            loaded: false,
            shared: Arc::clone(&shared),
        })
        // With `use-lease`, the shards' leases live in the store the state is in, where the
        // fences of the entities' writes are checked.
        .with_lease_store(store)
    }
}

impl<B: DurableStateEntity> DurableState<B> {
    /// The state.
    pub fn state(&self) -> &B {
        &self.state
    }

    /// The stored revision (0: never written).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    async fn load(&mut self, entity_id: &str) -> Result<(), EntityFailure> {
        let shared = Arc::clone(&self.shared);
        let pid = persistence_id(&shared.kind, entity_id);
        let stored = shared
            .persistence
            .store()
            .load_state(&pid)
            .await
            .map_err(|e| EntityFailure(format!("loading the state failed: {e}")))?;
        if let Some(stored) = stored {
            self.state = shared.codec.decode(&stored.payload).map_err(|e| {
                EntityFailure(format!(
                    "{pid}: state at revision {} does not decode: {e}",
                    stored.revision
                ))
            })?;
            self.revision = stored.revision;
        }
        self.loaded = true;
        Ok(())
    }

    async fn store(
        &mut self,
        entity_id: &str,
        state: B,
        fence: Option<shardik_persistence::Fence>,
        marks: Vec<MarkChange>,
    ) -> Result<(), EntityFailure> {
        let shared = Arc::clone(&self.shared);
        let pid = persistence_id(&shared.kind, entity_id);
        let payload = shared
            .codec
            .encode(&state)
            .map_err(|e| EntityFailure(format!("{pid}: state does not encode: {e}")))?;
        let revision = self.revision + 1;
        let written = shared
            .persistence
            .store()
            .write_state(
                &pid,
                StoredState {
                    revision,
                    payload: Bytes::from(payload),
                },
                fence,
                marks,
            )
            .await
            .map_err(|e| EntityFailure(format!("state write failed: {e}")))?;
        written.map_err(|refused| EntityFailure(format!("state write refused: {refused}")))?;
        self.state = state;
        self.revision = revision;
        Ok(())
    }
}

impl<B: DurableStateEntity> Entity for DurableState<B> {
    type Command = B::Command;

    async fn handle(&mut self, cmd: B::Command, ctx: &mut EntityContext<Self>) {
        done_or_panic(self.try_handle(cmd, ctx).await)
    }

    async fn try_handle(
        &mut self,
        cmd: B::Command,
        ctx: &mut EntityContext<Self>,
    ) -> Result<(), EntityFailure> {
        if !self.loaded {
            self.load(ctx.entity_id()).await?;
        }
        let StateEffect { new_state, then } = self.state.handle_command(cmd, ctx);
        if let Some(state) = new_state {
            let fence = ctx.fence().cloned();
            // On a failed write, `then` is dropped unanswered: the asker hears of the failure.
            self.store(ctx.entity_id(), state, fence, Vec::new())
                .await?;
        }
        then.on(&self.state);
        Ok(())
    }
}

impl<B: DurableStateEntity> ReliableConsumer for DurableState<B> {
    const GUARANTEE: Guarantee = Guarantee::ExactlyOnce;

    async fn recover_marks(&mut self, entity_id: &str) -> Result<Vec<DeliveryMark>, EntityFailure> {
        if !self.loaded {
            self.load(entity_id).await?;
        }
        let pid = persistence_id(&self.shared.kind, entity_id);
        delivery_marks(self.shared.persistence.store(), &pid).await
    }

    async fn handle_delivered(
        &mut self,
        cmd: B::Command,
        marks: Vec<MarkChange>,
        ctx: &mut EntityContext<Self>,
    ) -> Result<(), EntityFailure> {
        if !self.loaded {
            self.load(ctx.entity_id()).await?;
        }
        let StateEffect { new_state, then } = self.state.handle_command(cmd, ctx);
        let fence = ctx.fence().cloned();
        // The command's mark is written with the new state (alone, if the state is the same),
        // so the command counts as processed exactly when what it did is durable.
        match new_state {
            Some(state) => self.store(ctx.entity_id(), state, fence, marks).await?,
            None => {
                let pid = persistence_id(&self.shared.kind, ctx.entity_id());
                write_marks(&self.shared.persistence, pid, marks, fence).await?;
            }
        }
        then.on(&self.state);
        Ok(())
    }
}
