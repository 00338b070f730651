//! The shard allocation strategies a kind may bring: the user-facing asynchronous strategy
//! trait, and the kind's choice among the configured, a synchronous or an asynchronous
//! strategy. Kept apart from the code that runs an asynchronous strategy (`allocation.rs`) so
//! that the user-facing types (`api/`) need nothing of the kind's task.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{
    AllocationChoice, AllocationSettings, AllocationSnapshot, BoxedStrategy, ShardId,
};

/// A future an asynchronous strategy returns.
pub type StrategyFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A shard allocation strategy that may wait (for another service, a database, …) before it
/// decides. Register one with
/// [`EntityKind::with_async_allocation_strategy`](super::EntityKind::with_async_allocation_strategy).
///
/// The snapshot is the coordinator's view when it asked; by the time the answer arrives the
/// cluster may have changed, so an answer naming a region that is no longer offered is
/// ignored and the shard is asked about again.
pub trait AsyncShardAllocationStrategy: Send + Sync + 'static {
    /// Where to put a new shard (one of the regions of `current`), or `None` for "not now".
    fn allocate_shard(
        &self,
        requester: UniqueAddress,
        shard: ShardId,
        current: AllocationSnapshot<UniqueAddress>,
    ) -> StrategyFuture<Option<UniqueAddress>>;

    /// Which allocated shards to move; `in_progress` are already moving.
    fn rebalance(
        &self,
        current: AllocationSnapshot<UniqueAddress>,
        in_progress: BTreeSet<ShardId>,
    ) -> StrategyFuture<BTreeSet<ShardId>>;
}

/// How a kind's coordinator places shards on this node.
#[derive(Clone, Default)]
pub(crate) enum KindAllocation {
    /// The strategy `cluster.sharding.least-shard-allocation-strategy` selects.
    #[default]
    Configured,
    /// The kind's own synchronous strategy, built afresh whenever this node starts the
    /// coordinator.
    Immediate(Arc<dyn Fn() -> BoxedStrategy + Send + Sync>),
    /// The kind's own asynchronous strategy: the core asks it through effects.
    Deferred(Arc<dyn AsyncShardAllocationStrategy>),
}

impl KindAllocation {
    /// What the core's coordinator is given.
    pub fn choice(&self, configured: AllocationSettings) -> AllocationChoice {
        match self {
            KindAllocation::Configured => {
                AllocationChoice::Immediate(Box::new(move || configured.strategy()))
            }
            KindAllocation::Immediate(make) => {
                let make = Arc::clone(make);
                AllocationChoice::Immediate(Box::new(move || make()))
            }
            KindAllocation::Deferred(_) => AllocationChoice::Deferred,
        }
    }

    /// The asynchronous strategy that answers the core's questions, if the kind has one.
    pub fn deferred(&self) -> Option<&Arc<dyn AsyncShardAllocationStrategy>> {
        match self {
            KindAllocation::Deferred(s) => Some(s),
            _ => None,
        }
    }
}
