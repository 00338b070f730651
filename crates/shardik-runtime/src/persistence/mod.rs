//! Durable entities: event-sourced ([`EventSourcedEntity`]) and durable-state
//! ([`DurableStateEntity`]) entities on a [`Store`](shardik_persistence::Store).
//!
//! A [`Persistence`] is one store plus the node's journal writer, which commits the writes of
//! many entities together. Open it once per node and hand it to the kinds that persist.
//!
//! A command is answered only after what it persists is durable. A write the store refuses
//! (another live copy of the entity wrote first) or loses (the store failed) fails the command
//! ([`ShardingError::EntityFailed`](crate::sharding::ShardingError::EntityFailed) for the
//! asker) and drops the entity's incarnation, so nothing half-applied stays live; the next
//! command recovers from the store.

mod adapter;
mod codec;
mod durable_state;
mod event_sourced;
mod journal;

use std::sync::Arc;

pub use adapter::{EventAdapterError, FIRST_EVENT_VERSION, JournalEvent};
pub use codec::StorageCodec;
pub use durable_state::{DurableState, DurableStateContext, DurableStateEntity, StateEffect};
pub use event_sourced::{
    Effect, EventSourced, EventSourcedContext, EventSourcedEntity, EventSourcedKind,
};
pub use shardik_persistence::{MemoryStore, Retention, Store, StoreError};

use journal::JournalWriter;

/// Makes a command's reply from the entity's state once what the command persisted is
/// written.
pub(crate) type ReplyFromState<B, R> = Box<dyn FnOnce(&B) -> R + Send>;

/// One store and this node's journal writer over it; clones share both.
#[derive(Clone)]
pub struct Persistence {
    store: Arc<dyn Store>,
    journal: JournalWriter,
}

impl std::fmt::Debug for Persistence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Persistence").finish_non_exhaustive()
    }
}

impl Persistence {
    /// Persistence on `store`. Starts the journal writer on the current tokio runtime.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Persistence {
            journal: JournalWriter::spawn(Arc::clone(&store)),
            store,
        }
    }

    /// Opens the store `url` names (`sqlite:PATH`, `postgres://…`, `memory:`; see
    /// [`shardik_persistence::open_store`]) and starts the journal writer over it. A store that
    /// cannot be reached, parsed or read is an error naming the cause.
    pub async fn open(url: &str) -> Result<Self, StoreError> {
        Ok(Self::new(shardik_persistence::open_store(url).await?))
    }

    /// The store underneath (for queries such as events by tag).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub(crate) fn journal(&self) -> &JournalWriter {
        &self.journal
    }
}
