//! What a kind that remembers its entities is configured with (Akka's `remember-entities` and
//! `entity-recovery-strategy`): the store and how a shard's remembered entities are started.
//!
//! Kept apart from `remember.rs`, which runs the remembering and talks to the kind's task:
//! the public API (`api/`) names these settings without depending on the task's messages.

use shardik_persistence::Store;
use std::sync::Arc;

/// How a shard's remembered entities are started; the type lives in the core, where the
/// node's settings name it.
pub use shardik_core::sharding::EntityRecovery;

/// What a kind that remembers its entities needs: the store and the recovery strategy.
#[derive(Clone)]
pub(crate) struct RememberSettings {
    pub store: Arc<dyn Store>,
    pub recovery: EntityRecovery,
}

/// Whether a kind remembers its entities: as `cluster.sharding.remember-entities` says (the
/// default, in the kind's own store), or as its code says.
#[derive(Clone, Default)]
pub(crate) enum RememberChoice {
    /// As configured: with `remember-entities = on`, in the kind's own store (a durable
    /// kind's, or the one given to `with_lease_store`), started as
    /// `entity-recovery-strategy` says.
    #[default]
    Configured,
    /// Remembered in this store, whatever the configuration.
    On(RememberSettings),
    /// Not remembered, whatever the configuration.
    Off,
}
