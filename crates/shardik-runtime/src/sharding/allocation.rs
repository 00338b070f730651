//! Custom shard allocation strategies for an entity kind, synchronous or asynchronous.
//!
//! The coordinator core asks its strategy synchronously, so that it stays free of I/O and
//! replayable. An asynchronous strategy (one that consults another service, say) is run as the
//! core's *deferred* strategy: the core raises each open question as an effect
//! (`KindEffect::AllocationAsked`, `RebalanceAsked`); here its future runs in a task of its
//! own, and the answer goes back to the kind's task as an input, after which the core places
//! the shard. What to do with an answer is the core's decision, not this file's.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{
    AllocationChoice, AllocationSettings, AllocationSnapshot, BoxedStrategy, ShardId,
};
use tokio::sync::mpsc;

use super::kind::Control;

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

/// Works out the answer to an allocation question in a task of its own and hands it back to
/// the kind's task, whose core then places the shard. The handle is weak, so a strategy that
/// never answers cannot keep a stopped kind's queue open.
pub(crate) fn answer_allocation(
    strategy: &Arc<dyn AsyncShardAllocationStrategy>,
    control: mpsc::WeakSender<Control>,
    requester: UniqueAddress,
    shard: ShardId,
    snapshot: AllocationSnapshot<UniqueAddress>,
) {
    let future = strategy.allocate_shard(requester.clone(), shard.clone(), snapshot);
    tokio::spawn(async move {
        let answer = future.await;
        if let Some(control) = control.upgrade() {
            // A closed queue means the kind stopped: nobody waits for the answer.
            let _ = control
                .send(Control::AllocationAnswered {
                    requester,
                    shard,
                    answer,
                })
                .await;
        }
    });
}

/// As [`answer_allocation`], for the question which shards to move.
pub(crate) fn answer_rebalance(
    strategy: &Arc<dyn AsyncShardAllocationStrategy>,
    control: mpsc::WeakSender<Control>,
    snapshot: AllocationSnapshot<UniqueAddress>,
    in_progress: BTreeSet<ShardId>,
) {
    let future = strategy.rebalance(snapshot, in_progress);
    tokio::spawn(async move {
        let moves = future.await;
        if let Some(control) = control.upgrade() {
            let _ = control.send(Control::RebalanceAnswered(moves)).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use shardik_core::membership::Address;
    use shardik_core::sharding::RegionEntry;

    use super::*;

    /// Picks the region with the highest address, after a pause.
    struct Highest;

    impl AsyncShardAllocationStrategy for Highest {
        fn allocate_shard(
            &self,
            _requester: UniqueAddress,
            _shard: ShardId,
            current: AllocationSnapshot<UniqueAddress>,
        ) -> StrategyFuture<Option<UniqueAddress>> {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                current.regions().map(|e| e.region.clone()).max()
            })
        }

        fn rebalance(
            &self,
            _current: AllocationSnapshot<UniqueAddress>,
            _in_progress: BTreeSet<ShardId>,
        ) -> StrategyFuture<BTreeSet<ShardId>> {
            Box::pin(async { BTreeSet::from([ShardId::from("7")]) })
        }
    }

    fn node(port: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("127.0.0.1", port), u64::from(port))
    }

    #[tokio::test]
    async fn answers_come_back_to_the_kind_as_inputs() {
        let (tx, mut rx) = mpsc::channel(8);
        let strategy: Arc<dyn AsyncShardAllocationStrategy> = Arc::new(Highest);
        let mut snapshot = AllocationSnapshot::new();
        for port in [2551, 2553, 2552] {
            snapshot.insert(RegionEntry {
                region: node(port),
                member: None,
                shards: Vec::new(),
            });
        }
        answer_allocation(
            &strategy,
            tx.downgrade(),
            node(2551),
            ShardId::from("3"),
            snapshot.clone(),
        );
        let answer = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("answered")
            .expect("queue open");
        match answer {
            Control::AllocationAnswered {
                requester,
                shard,
                answer,
            } => {
                assert_eq!(requester, node(2551));
                assert_eq!(shard, ShardId::from("3"));
                assert_eq!(answer, Some(node(2553)));
            }
            _ => panic!("expected an allocation answer"),
        }
        answer_rebalance(&strategy, tx.downgrade(), snapshot, BTreeSet::new());
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Some(Control::RebalanceAnswered(moves))) => {
                assert_eq!(moves, BTreeSet::from([ShardId::from("7")]))
            }
            _ => panic!("expected a rebalance answer"),
        }
    }

    #[tokio::test]
    async fn an_answer_for_a_stopped_kind_goes_nowhere() {
        let (tx, rx) = mpsc::channel(8);
        drop(rx);
        let weak = tx.downgrade();
        drop(tx);
        let strategy: Arc<dyn AsyncShardAllocationStrategy> = Arc::new(Highest);
        // Must not panic nor keep anything alive.
        answer_allocation(
            &strategy,
            weak,
            node(1),
            ShardId::from("1"),
            AllocationSnapshot::new(),
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
