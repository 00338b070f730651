//! Storage for durable entities: one [`Store`] trait for entity journals, snapshots, durable
//! state, remembered-entity sets, leases and reliable delivery's data (delivery marks,
//! producer queues), with three implementations: [`MemoryStore`] (tests and the simulator),
//! [`SqliteStore`] (the embedded default, one file shared by the processes of one machine)
//! and [`PostgresStore`] (clusters of many machines).
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
//!
//! The modules stand in layers, each using only those below it: what is stored (`records`),
//! why a call fails (`error`), fences, writes and leases; the [`Store`] trait over them; the
//! stores (`memory`, `sqlite`, `postgres`), the journal core ([`journaled`]) and the
//! [`conformance`] checks on the trait; and [`open_store`] on top. This file only names what
//! the crate offers.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod conformance;
mod delivery;
mod error;
mod fence;
pub mod journaled;
pub mod lease;
mod memory;
mod open;
#[cfg(feature = "postgres")]
mod postgres;
mod records;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;
mod store_url;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod util;
mod write;

pub use delivery::{
    DeliveryMark, KindDataRemoved, LeaseStillHeld, MarkChange, QueueConfirmation, QueuedMessage,
    QueuedStream, queued_streams,
};
pub use error::{StoreError, WriteRefused, WriteResult};
pub use fence::Fence;
pub use journaled::{
    JournalCursor, JournalGap, PageOutcome, Recovery, RecoveryStep, Retention, SnapshotPlan,
};
pub use lease::{LeaseAcquired, LeaseGrant, LeaseInfo};
pub use memory::MemoryStore;
pub use open::{open_store, redact_store_url};
#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
pub use records::{
    NewEvent, PersistenceId, Snapshot, StoredEvent, StoredState, TaggedEvent, persistence_id,
};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
pub use store::{Store, StoreFuture};
pub use write::{AtomicWrite, check_write};
