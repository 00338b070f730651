//! Storage for durable entities: one [`Store`] trait for entity journals, snapshots, durable
//! state, remembered-entity sets and leases, with three implementations: [`MemoryStore`]
//! (tests and the simulator), [`SqliteStore`] (the embedded default, one file shared by the
//! processes of one machine) and [`PostgresStore`] (clusters of many machines).
//!
//! The store, not a read-then-write in the caller, keeps one writer per entity: a journal
//! write names the persistence id and the sequence numbers it claims, and a number that already
//! exists refuses the whole write ([`WriteRefused`]), so two live copies of an entity can never
//! interleave events in one journal. Deleted events keep their sequence numbers (their payload
//! is dropped, the key stays), so a deleted number is never written again either.
//!
//! Leases live in the same store ([`Store::acquire_lease`] and its siblings; see [`lease`]):
//! a named lease has one owner at a time, expires by the store's clock unless renewed, and
//! carries a fencing token that goes up whenever it changes hands. A write may carry its
//! writer's token ([`Fence`]), and the store refuses one whose token is older than the newest
//! it accepted for that scope ([`WriteRefused::Fenced`]): a holder that lost its lease without
//! noticing cannot write.
//!
//! Writes are batched by the caller: [`Store::append`] takes the writes of many entities and
//! commits them together (one transaction), answering each one on its own.
//!
//! [`open_store`] opens a store from a URL (`memory:`, `sqlite:PATH`, `postgres://…`), as
//! configuration names it; [`SqliteStore`] and [`PostgresStore`] can also be opened directly.
//!
//! Cargo features `sqlite` and `postgres` (both on by default) bring in each SQL store and its
//! driver. Without them the crate links no database driver (the simulator builds it so), and
//! [`open_store`] refuses their URLs with a [`StoreError::BadUrl`] that names the feature.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

pub mod conformance;
mod fence;
pub mod journaled;
pub mod lease;
mod memory;
mod open;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store_url;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod util;

pub use fence::Fence;
pub use journaled::{
    JournalCursor, JournalGap, PageOutcome, Recovery, RecoveryStep, Retention, SnapshotPlan,
};
pub use lease::{LeaseAcquired, LeaseGrant, LeaseInfo};
pub use memory::MemoryStore;
pub use open::{open_store, redact_store_url};
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;

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

/// The events one command persists for one entity: written all or none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AtomicWrite {
    /// Whose journal.
    pub persistence_id: PersistenceId,
    /// The events, with consecutive sequence numbers; never empty.
    pub events: Vec<NewEvent>,
    /// The writer's lease token, when the entity's kind runs under leases: the write is
    /// refused ([`WriteRefused::Fenced`]) if the store accepted a newer token in its scope.
    pub fence: Option<Fence>,
}

impl AtomicWrite {
    /// The same write under `fence`.
    pub fn fenced(self, fence: Fence) -> Self {
        AtomicWrite {
            fence: Some(fence),
            ..self
        }
    }
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
    /// store; resume a query after the last offset seen). [`PostgresStore`] numbers events as
    /// they are inserted, not as they commit: see its caveat for concurrent writers.
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
    /// The write's lease token is older than the newest the store accepted for its scope: the
    /// writer lost its lease (another holder has written since).
    #[error(
        "{persistence_id}: fenced: token {token} is older than {newest}, the newest accepted for {scope}"
    )]
    Fenced {
        /// Whose journal or state.
        persistence_id: PersistenceId,
        /// The fence's scope.
        scope: Arc<str>,
        /// The write's token.
        token: u64,
        /// The newest token the store accepted for the scope.
        newest: u64,
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
        /// The URL as given, any password in it replaced by `***`.
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
    /// The call's arguments cannot be acted on (an empty lease name or owner, a time-to-live
    /// out of range); nothing was done.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// The outcome of one [`AtomicWrite`] in a batch.
pub type WriteResult = Result<(), WriteRefused>;

/// A future a store returns (what `Box::pin(async move { .. })` makes; spelt out rather than
/// as `futures::future::BoxFuture`, the same type, so that a store of one's own needs no
/// futures crate to name it).
pub type StoreFuture<'a, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// Storage for journals, snapshots, durable state and remembered entities.
///
/// Every method is safe to call from many tasks and many processes at once. A method that
/// returns `Err(StoreError)` may or may not have taken effect; `Ok` means durable (committed).
pub trait Store: Send + Sync + 'static {
    /// Writes every write of `writes` in one commit, and answers each in order, as if they were
    /// applied one after the other: a write is refused when its fence's token is older than
    /// the newest accepted in its scope ([`WriteRefused::Fenced`]) or when any of its sequence
    /// numbers exists ([`WriteRefused::SequenceTaken`]), and then none of its events is
    /// written and its fence raises nothing; the others are written, and their fences raise
    /// their scopes' newest tokens.
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
    /// revision (1 when none), under `fence` if given (judged as for [`append`]): otherwise
    /// the write is refused ([`WriteRefused::RevisionConflict`], [`WriteRefused::Fenced`])
    /// and nothing changes.
    ///
    /// [`append`]: Store::append
    fn write_state<'a>(
        &'a self,
        persistence_id: &'a str,
        state: StoredState,
        fence: Option<Fence>,
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

    /// Takes the lease `name` for `owner` for `ttl` (by the store's clock) if it is free,
    /// expired, or already `owner`'s. A lease that changes hands (or is taken again after it
    /// expired or was released) gets a token higher than any it had; one that `owner` still
    /// holds keeps its token and gets `ttl` from now.
    ///
    /// Errors: [`StoreError::InvalidArgument`] for an empty name or owner, or a `ttl` under
    /// 1 ms or over [`lease::MAX_LEASE_TTL`].
    fn acquire_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, LeaseAcquired>;

    /// Extends `owner`'s tenure `token` of lease `name` to `ttl` from now, keeping the token.
    /// `false` (and nothing changes) when the lease is no longer `owner`'s with `token`: it
    /// expired, was released, or changed hands. An expired lease is never renewed, even when
    /// nobody took it: its holder must acquire it again, for a new token.
    fn renew_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        token: u64,
        ttl: Duration,
    ) -> StoreFuture<'a, bool>;

    /// Ends `owner`'s tenure `token` of lease `name`, so that anyone can take it at once.
    /// `false` (and nothing changes) when the lease is not `owner`'s with `token`.
    fn release_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        token: u64,
    ) -> StoreFuture<'a, bool>;

    /// The lease `name` as the store sees it now; `None` when it was never taken.
    fn read_lease<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<LeaseInfo>>;

    /// Whether every process that opens this store (the same SQLite file, the same PostgreSQL
    /// database) sees the same data, so that a lease held in it keeps every other node out.
    /// `cluster.sharding.use-lease = "auto"` takes leases only in such a store. The default
    /// says yes; [`MemoryStore`] says no (only the nodes of one process share one).
    fn is_shared(&self) -> bool {
        true
    }

    /// The store's identity: chosen at random when the store was created and kept with its
    /// data, so every process that opens the same store (the same SQLite file under any path,
    /// the same PostgreSQL database through any host name) reads the same one, and two
    /// stores never share one. Nodes compare it when one joins another: a durable entity
    /// that moves between nodes keeps its history only if both use the same store.
    fn identity(&self) -> &str;

    /// Where the store is, for messages: `sqlite:PATH`, `postgres://HOST:PORT/DATABASE`
    /// (never a password), `memory:`.
    fn location(&self) -> String;

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

/// Checks a write's shape: not empty, consecutive sequence numbers starting at 1 or more, and
/// a fence (if any) with a scope and a token a store can hold.
pub fn check_write(write: &AtomicWrite) -> WriteResult {
    if let Some(fence) = &write.fence {
        fence.check_shape(&write.persistence_id)?;
    }
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
