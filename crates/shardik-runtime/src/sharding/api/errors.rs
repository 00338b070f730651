//! Why a message to an entity did not go out or was not answered: [`ShardingError`] for asks,
//! [`TellError`] for the two ways a tell fails, and [`AskError`] for an ask whose entity may
//! also refuse with an error of its own.

use std::time::Duration;

use super::codec::CodecError;

/// Why a message could not be sent or answered.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardingError {
    /// No answer within the ask's timeout. The command may or may not have been handled.
    #[error("no reply within {0:?}; the command may or may not have been handled")]
    Timeout(Duration),
    /// The region's queue is full (from `try_tell`); slow down, or use `tell`, which waits.
    #[error("the region's queue is full; retry later, or use tell(..).await, which waits for room")]
    BufferFull,
    /// The message was dropped on the way, for the reason given (see metrics
    /// `shardik_sharding_dropped_total`).
    #[error("message dropped: {0}")]
    Dropped(&'static str),
    /// The shard could not be reached (its node left or failed mid-request); retry.
    #[error("shard unavailable: {0}")]
    ShardUnavailable(String),
    /// The region is stopped (the node is shutting down).
    #[error("the region is stopped")]
    RegionStopped,
    /// The entity's shard runs under a lease (`cluster.sharding.use-lease`) that its node
    /// could not take because the lease's store failed or did not answer; the command was not
    /// handled rather than run unfenced. Retry once the store is back.
    #[error(
        "the shard's lease could not be acquired (its store failed or did not answer); the \
         command was not handled"
    )]
    LeaseUnavailable,
    /// The command or reply could not be encoded or decoded.
    #[error(transparent)]
    Codec(#[from] CodecError),
    /// The entity's handler panicked; the entity was dropped and will be re-created by the next
    /// command.
    #[error("the entity failed: {0}")]
    EntityFailed(String),
    /// The remote node does not know this entity kind (it was not initialised there).
    #[error(
        "entity kind {0:?} is not running on the target node (its application never called \
         sharding().init for it there)"
    )]
    UnknownKind(String),
    /// The entity kind was never initialised on this node, so this node cannot route to it:
    /// call `sharding().init` with an `EntityKind` of that name first (on a node without the
    /// kind's role, `init` starts a proxy that only routes).
    #[error(
        "entity kind {0:?} was never initialised on this node: call \
         sharding().init(EntityKind::new({0:?}, ...)) for it first (on a node without the \
         kind's role, init starts a proxy that only routes to the nodes that host it)"
    )]
    NotInitialized(String),
    /// A timeout of zero was given.
    #[error("the ask timeout must be positive")]
    InvalidTimeout,
    /// An entity reference was looked up with a key whose entity type differs from the type
    /// the kind was registered with.
    #[error("entity kind {0:?} is registered with another entity type")]
    WrongEntityType(String),
}

/// Why a tell did not go out: the only two ways it can fail, so a caller matches exactly
/// those (an ask can fail in more ways: [`ShardingError`], which a `TellError` converts into).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TellError {
    /// The region's queue is full (only from `try_tell`; `tell` waits for room instead).
    #[error("the region's queue is full; retry later, or use tell(..).await, which waits for room")]
    BufferFull,
    /// The region is stopped (the node is shutting down).
    #[error("the region is stopped")]
    RegionStopped,
}

impl ShardingError {
    /// The asker's error for a reply frame's error, from an ask to kind `kind`.
    pub(crate) fn from_reply_error(kind: &str, e: shardik_wire::ReplyError) -> Self {
        use shardik_wire::ReplyErrorKind;
        match e.kind {
            ReplyErrorKind::UnknownKind => ShardingError::UnknownKind(kind.to_string()),
            ReplyErrorKind::BufferFull => ShardingError::BufferFull,
            ReplyErrorKind::RegionStopped => ShardingError::RegionStopped,
            ReplyErrorKind::EntityFailed => ShardingError::EntityFailed(e.message),
            ReplyErrorKind::DecodeFailed => ShardingError::Codec(CodecError(e.message)),
            ReplyErrorKind::ShardUnavailable => ShardingError::ShardUnavailable(e.message),
        }
    }
}

impl From<TellError> for ShardingError {
    fn from(e: TellError) -> Self {
        match e {
            TellError::BufferFull => ShardingError::BufferFull,
            TellError::RegionStopped => ShardingError::RegionStopped,
        }
    }
}

/// Why an [`EntityRef::ask_result`](crate::sharding::EntityRef::ask_result) gave no success value:
/// the entity handled the command and refused it with its own error type, or the command was
/// not answered at all.
///
/// An entity whose commands can be refused answers `Result<T, E>` with an error type of its
/// own (anything serde can carry: an enum a caller can match, not a string); `ask_result`
/// puts the two kinds of failure side by side, so that a caller handles "refused" in the same
/// `match` as "timed out".
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AskError<E> {
    /// The entity handled the command and refused it: nothing changed; retrying the same
    /// command gets the same answer until the entity's state changes.
    Refused(E),
    /// The command was not answered: see [`ShardingError`] for each cause and what to do.
    Sharding(ShardingError),
}

impl<E> From<ShardingError> for AskError<E> {
    fn from(e: ShardingError) -> Self {
        AskError::Sharding(e)
    }
}

impl<E: std::fmt::Display> std::fmt::Display for AskError<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AskError::Refused(e) => write!(f, "refused by the entity: {e}"),
            AskError::Sharding(e) => e.fmt(f),
        }
    }
}

impl<E> std::error::Error for AskError<E>
where
    E: std::error::Error + 'static,
{
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AskError::Refused(e) => Some(e),
            AskError::Sharding(e) => Some(e),
        }
    }
}
