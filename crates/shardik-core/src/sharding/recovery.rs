//! How a shard starts its remembered entities (Akka's `entity-recovery-strategy`): a setting
//! of the node that the configuration reads and the runtime's remembering carries out.

use std::time::Duration;

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
