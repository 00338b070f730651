//! Why a store refuses one write while it works ([`WriteRefused`]: another writer got there
//! first, or the write is malformed), or cannot do what was asked at all ([`StoreError`]).

use std::sync::Arc;

use crate::records::PersistenceId;

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

/// The outcome of one [`AtomicWrite`](crate::AtomicWrite) in a batch.
pub type WriteResult = Result<(), WriteRefused>;
