//! Durable-state entities (Akka's `DurableStateBehavior`): the whole state is stored by
//! revision, written before the reply. Each write must be exactly one revision past the stored
//! one, so a second live copy of the entity cannot overwrite the first copy's state unseen.

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;
use serde::de::DeserializeOwned;
use shardik_persistence::{StoredState, persistence_id};

use super::codec::StorageCodec;
use super::{Persistence, ReplyFromState};
use crate::sharding::{
    Entity, EntityContext, EntityFailure, EntityKind, EntityTypeKey, Postcard, reply_or_panic,
};

/// An entity whose whole state is stored after each change (Akka's `DurableStateBehavior`).
/// The entity value is the state; the command handler reads it and decides.
pub trait DurableStateEntity: Serialize + DeserializeOwned + Send + 'static {
    /// What the entity is told or asked.
    type Command: Serialize + DeserializeOwned + Send + 'static;
    /// What it answers.
    type Reply: Serialize + DeserializeOwned + Send + 'static;

    /// Decides what `cmd` does: a new state to store, then a reply, or a reply alone.
    fn handle_command(
        &self,
        cmd: Self::Command,
        ctx: &mut DurableStateContext<Self>,
    ) -> StateEffect<Self>;
}

/// The context a durable-state command handler gets.
pub type DurableStateContext<B> = EntityContext<DurableState<B>>;

/// What a durable-state command handler decided: a new state to store and the reply to make
/// once it is stored, or a reply alone. To stop the entity after the effect, call
/// `ctx.passivate()` in the handler.
#[must_use = "an effect does nothing unless returned from the command handler"]
pub struct StateEffect<B: DurableStateEntity> {
    new_state: Option<B>,
    reply: ReplyFromState<B, B::Reply>,
}

impl<B: DurableStateEntity> StateEffect<B> {
    /// Stores `state` as the entity's new state, then answers what `reply` makes of it.
    pub fn persist(state: B, reply: impl FnOnce(&B) -> B::Reply + Send + 'static) -> Self {
        StateEffect {
            new_state: Some(state),
            reply: Box::new(reply),
        }
    }

    /// Answers `reply` and stores nothing.
    pub fn reply(reply: B::Reply) -> Self {
        StateEffect {
            new_state: None,
            reply: Box::new(move |_| reply),
        }
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
    type Reply = B::Reply;

    async fn handle(&mut self, cmd: B::Command, ctx: &mut EntityContext<Self>) -> B::Reply {
        reply_or_panic(self.try_handle(cmd, ctx).await)
    }

    async fn try_handle(
        &mut self,
        cmd: B::Command,
        ctx: &mut EntityContext<Self>,
    ) -> Result<B::Reply, EntityFailure> {
        if !self.loaded {
            self.load(ctx.entity_id()).await?;
        }
        let StateEffect { new_state, reply } = self.state.handle_command(cmd, ctx);
        if let Some(state) = new_state {
            let fence = ctx.fence().cloned();
            self.store(ctx.entity_id(), state, fence).await?;
        }
        Ok(reply(&self.state))
    }
}
