//! Durable entities: event-sourced ([`EventSourcedEntity`]) and durable-state
//! ([`DurableStateEntity`]) entities on a [`Store`].
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
mod after_write;
mod codec;
mod durable_state;
mod event_sourced;
mod journal;
mod store;

pub use adapter::{EventAdapterError, FIRST_EVENT_VERSION, JournalEvent};
pub use codec::StorageCodec;
pub use durable_state::{DurableState, DurableStateContext, DurableStateEntity, StateEffect};
pub use event_sourced::{
    Effect, EventSourced, EventSourcedContext, EventSourcedEntity, EventSourcedKind,
};
pub use shardik_persistence::{MemoryStore, Retention, Store, StoreError};
pub use store::{Persistence, open_configured_store};
