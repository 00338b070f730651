//! Storage for durable entities: one [`Store`] trait for entity journals, snapshots, durable
//! state and remembered-entity sets, with three implementations: [`MemoryStore`] (tests and the
//! simulator), [`SqliteStore`] (the embedded default, one file shared by the processes of one
//! machine) and [`PostgresStore`] (clusters of many machines).
//!
//! The store, not a read-then-write in the caller, keeps one writer per entity: a journal
//! write names the persistence id and the sequence numbers it claims, and a number that already
//! exists refuses the whole write ([`WriteRefused`]), so two live copies of an entity can never
//! interleave events in one journal. Deleted events keep their sequence numbers (their payload
//! is dropped, the key stays), so a deleted number is never written again either.
//!
//! Writes are batched by the caller: [`Store::append`] takes the writes of many entities and
//! commits them together (one transaction), answering each one on its own.
//!
//! [`open_store`] opens a store from a URL (`memory:`, `sqlite:PATH`, `postgres://…`), as
//! configuration names it; [`SqliteStore`] and [`PostgresStore`] can also be opened directly.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;

pub mod conformance;
pub mod journaled;
mod memory;
mod open;
mod postgres;
mod sqlite;
mod util;

pub use journaled::{JournalCursor, Recovery, Retention, SnapshotPlan};
pub use memory::MemoryStore;
pub use open::open_store;
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;

/// The journal key of one entity: `"{kind}|{entity id}"` (see [`persistence_id`]).
pub type PersistenceId = Arc<str>;

/// The persistence id of entity `entity_id` of kind `kind`.
pub fn persistence_id(kind: &str, entity_id: &str) -> PersistenceId {
    format!("{kind}|{entity_id}").into()
}

/// One event to write: its sequence number, its encoded payload, and its tags (for queries by
/// tag, such as projections).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEvent {
    /// The event's sequence number in its journal (1 for the first event).
    pub seq: u64,
    /// The encoded event.
    pub payload: Bytes,
    /// Tags to find the event by, across journals.
    pub tags: Vec<String>,
}

/// The events one command persists for one entity: written all or none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AtomicWrite {
    /// Whose journal.
    pub persistence_id: PersistenceId,
    /// The events, with consecutive sequence numbers; never empty.
    pub events: Vec<NewEvent>,
}

/// An event read back from a journal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredEvent {
    /// Its sequence number in its journal.
    pub seq: u64,
    /// The encoded event.
    pub payload: Bytes,
    /// Its tags.
    pub tags: Vec<String>,
}

/// An event found by tag: where it is in the store's global order, and whose it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaggedEvent {
    /// The event's position in the store's global order (increasing in commit order within one
    /// store; resume a query after the last offset seen). [`PostgresStore`] numbers events as
    /// they are inserted, not as they commit: see its caveat for concurrent writers.
    pub offset: u64,
    /// Whose journal.
    pub persistence_id: PersistenceId,
    /// Its sequence number in that journal.
    pub seq: u64,
    /// The encoded event.
    pub payload: Bytes,
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

/// Why one write was refused while the store itself works: another writer got there first.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WriteRefused {
    /// A sequence number of the write is already in the journal (another live copy of the
    /// entity wrote it, or the write was already done).
    #[error("{persistence_id}: sequence number {seq} is already taken")]
    SequenceTaken {
        /// Whose journal.
        persistence_id: PersistenceId,
        /// The first number of the write that was taken.
        seq: u64,
    },
    /// The durable state is not at the revision the write expected.
    #[error("{persistence_id}: expected revision {expected}, the store has another")]
    RevisionConflict {
        /// Whose state.
        persistence_id: PersistenceId,
        /// The revision the writer expected to replace (0: none yet).
        expected: u64,
    },
    /// The write itself is malformed (empty, or its numbers are not consecutive from 1 up).
    #[error("{persistence_id}: malformed write: {why}")]
    Malformed {
        /// Whose journal.
        persistence_id: PersistenceId,
        /// What is wrong.
        why: String,
    },
}

/// Why the store could not do what was asked at all.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store URL is not one this build understands.
    #[error("bad store URL {url:?}: {why}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The store cannot be reached or opened (server down, wrong credentials, file not
    /// writable).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store's schema was written by a newer version of shardik.
    #[error(
        "the store's schema is version {found}, newer than this build's {supported}; upgrade shardik"
    )]
    SchemaTooNew {
        /// The version found in the store.
        found: u32,
        /// The newest version this build knows.
        supported: u32,
    },
    /// The store's contents are damaged (a corrupt or truncated file, a row that does not
    /// decode).
    #[error("store corrupt: {0}")]
    Corrupt(String),
    /// A call failed in the middle (connection lost, disk full, timeout); it may or may not
    /// have taken effect.
    #[error("store operation failed: {0}")]
    Failed(String),
}

/// The outcome of one [`AtomicWrite`] in a batch.
pub type WriteResult = Result<(), WriteRefused>;

/// A future a store returns.
pub type StoreFuture<'a, T> = BoxFuture<'a, Result<T, StoreError>>;

/// Storage for journals, snapshots, durable state and remembered entities.
///
/// Every method is safe to call from many tasks and many processes at once. A method that
/// returns `Err(StoreError)` may or may not have taken effect; `Ok` means durable (committed).
pub trait Store: Send + Sync + 'static {
    /// Writes every write of `writes` in one commit, and answers each in order: a write is
    /// refused ([`WriteRefused::SequenceTaken`]) when any of its sequence numbers exists, and
    /// then none of its events is written; the others are written.
    fn append(&self, writes: Vec<AtomicWrite>) -> StoreFuture<'_, Vec<WriteResult>>;

    /// The events of `persistence_id` with `from <= seq <= to`, in order, at most `max` of
    /// them. Deleted events are skipped.
    fn read_events<'a>(
        &'a self,
        persistence_id: &'a str,
        from: u64,
        to: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<StoredEvent>>;

    /// The highest sequence number ever written for `persistence_id` (deleted ones included);
    /// 0 when none.
    fn highest_seq<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, u64>;

    /// Deletes the events of `persistence_id` up to `to` inclusive: their payloads go, their
    /// sequence numbers stay taken.
    fn delete_events_to<'a>(&'a self, persistence_id: &'a str, to: u64) -> StoreFuture<'a, ()>;

    /// Events with `tag`, after `offset` in the store's global order, at most `max`.
    fn events_by_tag<'a>(
        &'a self,
        tag: &'a str,
        offset: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<TaggedEvent>>;

    /// Stores `snapshot` (replacing one at the same `seq`).
    fn save_snapshot<'a>(
        &'a self,
        persistence_id: &'a str,
        snapshot: Snapshot,
    ) -> StoreFuture<'a, ()>;

    /// The snapshot of `persistence_id` with the highest `seq`, if any.
    fn latest_snapshot<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, Option<Snapshot>>;

    /// Deletes the snapshots of `persistence_id` with `seq < below`.
    fn delete_snapshots_below<'a>(
        &'a self,
        persistence_id: &'a str,
        below: u64,
    ) -> StoreFuture<'a, ()>;

    /// The durable state of `persistence_id`, if it was ever written.
    fn load_state<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, Option<StoredState>>;

    /// Writes `state` as revision `state.revision`, which must be one more than the stored
    /// revision (1 when none): otherwise the write is refused
    /// ([`WriteRefused::RevisionConflict`]) and nothing changes.
    fn write_state<'a>(
        &'a self,
        persistence_id: &'a str,
        state: StoredState,
    ) -> StoreFuture<'a, WriteResult>;

    /// Records that the entities `started` of shard `shard` of kind `kind` now run, and that
    /// `stopped` no longer do (applied after `started`, so an id in both ends stopped).
    fn update_remembered<'a>(
        &'a self,
        kind: &'a str,
        shard: &'a str,
        started: &'a [String],
        stopped: &'a [String],
    ) -> StoreFuture<'a, ()>;

    /// Stops the store: waits for the writes it already accepted to be answered, then releases
    /// its connections, threads and files. Calls after `close` fail with
    /// [`StoreError::Unavailable`]; closing twice is harmless. Dropping a store without closing
    /// it releases the same things, but in the background.
    ///
    /// The default does nothing, for stores with nothing to release (such as [`MemoryStore`]).
    fn close(&self) -> StoreFuture<'_, ()> {
        Box::pin(std::future::ready(Ok(())))
    }

    /// The shards of `kind` with at least one remembered entity, sorted.
    fn remembered_shards<'a>(&'a self, kind: &'a str) -> StoreFuture<'a, Vec<String>>;

    /// The remembered entities of shard `shard` of `kind`, sorted.
    fn remembered_entities<'a>(
        &'a self,
        kind: &'a str,
        shard: &'a str,
    ) -> StoreFuture<'a, Vec<String>>;
}

/// Checks a write's shape: not empty, consecutive sequence numbers starting at 1 or more.
pub fn check_write(write: &AtomicWrite) -> WriteResult {
    let malformed = |why: &str| WriteRefused::Malformed {
        persistence_id: Arc::clone(&write.persistence_id),
        why: why.to_string(),
    };
    let Some(first) = write.events.first() else {
        return Err(malformed("no events"));
    };
    if first.seq == 0 {
        return Err(malformed("sequence numbers start at 1"));
    }
    let consecutive = write
        .events
        .windows(2)
        .all(|w| w[0].seq.checked_add(1) == Some(w[1].seq));
    if !consecutive {
        return Err(malformed("sequence numbers are not consecutive"));
    }
    Ok(())
}
