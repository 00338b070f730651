//! What a store keeps for an entity and hands back: the persistence id that keys a journal,
//! events to write and events read back (from one journal, or by tag across journals),
//! snapshots, and durable state.

use std::sync::Arc;

use bytes::Bytes;

/// The journal key of one entity: `"{kind}|{entity id}"` (see [`persistence_id`]).
pub type PersistenceId = Arc<str>;

/// The persistence id of entity `entity_id` of kind `kind`.
pub fn persistence_id(kind: &str, entity_id: &str) -> PersistenceId {
    format!("{kind}|{entity_id}").into()
}

/// One event to write: its sequence number, its encoded payload, its manifest, and its tags
/// (for queries by tag, such as projections).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEvent {
    /// The event's sequence number in its journal (1 for the first event).
    pub seq: u64,
    /// The encoded event.
    pub payload: Bytes,
    /// What the payload is, as its writer names it (Akka's event manifest), kept beside the
    /// event so that a later version of the program knows how to read it: shardik's
    /// event-sourced entities write `"{format}/{version}"` (`"cbor/2"`). May be empty.
    pub manifest: Arc<str>,
    /// Tags to find the event by, across journals.
    pub tags: Vec<String>,
}

/// An event read back from a journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredEvent {
    /// Its sequence number in its journal.
    pub seq: u64,
    /// The encoded event.
    pub payload: Bytes,
    /// Its manifest as written ([`NewEvent::manifest`]); empty for events written before the
    /// store kept manifests (schema version 3).
    pub manifest: Arc<str>,
    /// Its tags.
    pub tags: Vec<String>,
}

/// An event found by tag: where it is in the store's global order, and whose it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaggedEvent {
    /// The event's position in the store's global order (increasing in commit order within one
    /// store; resume a query after the last offset seen).
    /// [`PostgresStore`](crate::PostgresStore) numbers events as they are inserted, not as they
    /// commit: see its caveat for concurrent writers.
    pub offset: u64,
    /// Whose journal.
    pub persistence_id: PersistenceId,
    /// Its sequence number in that journal.
    pub seq: u64,
    /// The encoded event.
    pub payload: Bytes,
    /// Its manifest as written ([`NewEvent::manifest`]); empty for events written before the
    /// store kept manifests.
    pub manifest: Arc<str>,
}

/// A snapshot of an entity's state after the event `seq`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The sequence number of the last event the state includes.
    pub seq: u64,
    /// The encoded state.
    pub payload: Bytes,
}

/// A durable-state entity's stored state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredState {
    /// How many times the state was written (1 after the first write).
    pub revision: u64,
    /// The encoded state.
    pub payload: Bytes,
}
