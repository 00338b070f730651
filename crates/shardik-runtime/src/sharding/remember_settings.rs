//! What a kind that remembers its entities is configured with (Akka's `remember-entities` and
//! `entity-recovery-strategy`): the store and how a shard's remembered entities are started.
//!
//! Kept apart from `remember.rs`, which runs the remembering and talks to the kind's task:
//! the public API (`api.rs`) names these settings without depending on the task's messages.

use std::sync::Arc;
use std::time::Duration;

use shardik_persistence::Store;

/// How a shard's remembered entities are started when it starts on a node (Akka's
/// `entity-recovery-strategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntityRecovery {
    /// All at once.
    All,
    /// `entities` every `frequency`, so that a node taking over many shards does not start
    /// every entity at the same moment.
    ConstantRate {
        /// How many per step.
        entities: usize,
        /// The time between steps.
        frequency: Duration,
    },
}

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
