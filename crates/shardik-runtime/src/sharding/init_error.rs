//! Why sharding, or one of its entity kinds, could not start on a node.

/// Why sharding could not start on a node.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The node's user traffic is already served (sharding was started on it before).
    #[error("sharding is already started on this node")]
    AlreadyStarted,
}

/// Why an entity kind could not be registered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    /// A kind of that name is already registered on this node.
    #[error("entity kind {0:?} is already registered on this node")]
    AlreadyRegistered(String),
    /// The name is empty or too long.
    #[error("invalid entity kind name {0:?}: it must be 1 to 255 bytes")]
    InvalidName(String),
    /// Leases are configured (`cluster.sharding.use-lease` or
    /// `coordinator-singleton.use-lease`) but the kind has no store to keep them in.
    #[error(
        "entity kind {0:?}: leases are configured (cluster.sharding.use-lease or \
         coordinator-singleton.use-lease) but the kind has no lease store; give it one with \
         EntityKind::with_lease_store (durable kinds use their own store)"
    )]
    NoLeaseStore(String),
    /// `cluster.sharding.remember-entities` is on but the kind has no store to remember its
    /// entities in.
    #[error(
        "entity kind {0:?}: cluster.sharding.remember-entities is on but the kind has no \
         store; give it one with EntityKind::with_remember_entities (or \
         EntityKind::with_lease_store), or opt out with EntityKind::without_remember_entities \
         (durable kinds use their own store)"
    )]
    NoRememberStore(String),
}
