//! Custom shard allocation strategies for an entity kind, synchronous or asynchronous.
//!
//! The coordinator core asks its strategy synchronously, so that it stays free of I/O and
//! replayable. An asynchronous strategy (one that consults another service, say) is adapted
//! here: the first question about a shard starts the strategy's future and answers "not yet";
//! when the future finishes, its answer is kept and the kind's task is told to ask the
//! coordinator again on the requester's behalf, which then finds the answer waiting. Rebalancing
//! is periodic, so a rebalance answer is simply used at the next round.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{AllocationSnapshot, ShardAllocationStrategy, ShardId};
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

/// The strategy a coordinator of the kind starts with.
pub(crate) type BoxedStrategy = Box<dyn ShardAllocationStrategy<UniqueAddress> + Send>;

/// Makes a kind's strategy each time this node starts its coordinator. It gets a way back to
/// the kind's task, for answers that arrive later.
pub(crate) type StrategyFactory = Arc<dyn Fn(Redrive) -> BoxedStrategy + Send + Sync>;

/// A weak handle on a kind's control queue: asks the coordinator again for a shard once an
/// asynchronous answer is in. Weak, so that a strategy never keeps its own task's queue open.
#[derive(Clone)]
pub(crate) struct Redrive {
    control: mpsc::WeakSender<Control>,
}

impl Redrive {
    pub fn new(control: &mpsc::Sender<Control>) -> Self {
        Redrive {
            control: control.downgrade(),
        }
    }

    async fn ask_again(&self, requester: UniqueAddress, shard: ShardId) {
        if let Some(control) = self.control.upgrade() {
            // A closed queue means the kind stopped: nobody is waiting for the answer.
            let _ = control
                .send(Control::RetryAllocation { requester, shard })
                .await;
        }
    }
}

/// Answers of an asynchronous strategy that arrived and wait to be taken.
#[derive(Default)]
struct Answers {
    allocations: BTreeMap<ShardId, Option<UniqueAddress>>,
    allocating: BTreeSet<ShardId>,
    rebalance: Option<BTreeSet<ShardId>>,
    rebalancing: bool,
}

/// An [`AsyncShardAllocationStrategy`] seen through the synchronous interface of the core.
pub(crate) struct AsyncAdapter<S: AsyncShardAllocationStrategy> {
    strategy: Arc<S>,
    answers: Arc<Mutex<Answers>>,
    redrive: Redrive,
}

impl<S: AsyncShardAllocationStrategy> AsyncAdapter<S> {
    pub fn new(strategy: Arc<S>, redrive: Redrive) -> Self {
        AsyncAdapter {
            strategy,
            answers: Arc::default(),
            redrive,
        }
    }

    fn answers(&self) -> std::sync::MutexGuard<'_, Answers> {
        self.answers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<S: AsyncShardAllocationStrategy> ShardAllocationStrategy<UniqueAddress> for AsyncAdapter<S> {
    fn allocate_shard(
        &mut self,
        requester: &UniqueAddress,
        shard: &ShardId,
        current: &AllocationSnapshot<UniqueAddress>,
    ) -> Option<UniqueAddress> {
        let mut answers = self.answers();
        if let Some(answer) = answers.allocations.remove(shard) {
            return answer;
        }
        if answers.allocating.insert(shard.clone()) {
            let future =
                self.strategy
                    .allocate_shard(requester.clone(), shard.clone(), current.clone());
            let (answers, redrive) = (Arc::clone(&self.answers), self.redrive.clone());
            let (requester, shard) = (requester.clone(), shard.clone());
            tokio::spawn(async move {
                let answer = future.await;
                {
                    let mut answers = answers.lock().unwrap_or_else(|e| e.into_inner());
                    answers.allocating.remove(&shard);
                    answers.allocations.insert(shard.clone(), answer);
                }
                redrive.ask_again(requester, shard).await;
            });
        }
        None
    }

    fn rebalance(
        &mut self,
        current: &AllocationSnapshot<UniqueAddress>,
        in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId> {
        let mut answers = self.answers();
        if let Some(moves) = answers.rebalance.take() {
            return moves;
        }
        if !answers.rebalancing {
            answers.rebalancing = true;
            let future = self
                .strategy
                .rebalance(current.clone(), in_progress.clone());
            let answers = Arc::clone(&self.answers);
            tokio::spawn(async move {
                let moves = future.await;
                let mut answers = answers.lock().unwrap_or_else(|e| e.into_inner());
                answers.rebalancing = false;
                answers.rebalance = Some(moves);
            });
        }
        BTreeSet::new()
    }
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
    async fn an_answer_that_arrives_later_is_asked_for_again_and_then_used() {
        let (tx, mut rx) = mpsc::channel(8);
        let mut adapter = AsyncAdapter::new(Arc::new(Highest), Redrive::new(&tx));
        let mut snapshot = AllocationSnapshot::new();
        for port in [2551, 2553, 2552] {
            snapshot.insert(RegionEntry {
                region: node(port),
                member: None,
                shards: Vec::new(),
            });
        }
        let shard = ShardId::from("3");
        // Not known yet: the future starts, and asking again meanwhile starts no second one.
        assert_eq!(adapter.allocate_shard(&node(2551), &shard, &snapshot), None);
        assert_eq!(adapter.allocate_shard(&node(2551), &shard, &snapshot), None);
        // The answer arrives with a request to ask again for the original requester.
        let again = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("the kind is asked to retry")
            .expect("queue open");
        match again {
            Control::RetryAllocation {
                requester,
                shard: s,
            } => {
                assert_eq!(requester, node(2551));
                assert_eq!(s, shard);
            }
            _ => panic!("expected a retry of the allocation"),
        }
        assert!(rx.try_recv().is_err(), "one future, one retry");
        // Asked again, the answer is there, once.
        assert_eq!(
            adapter.allocate_shard(&node(2551), &shard, &snapshot),
            Some(node(2553))
        );
        assert_eq!(adapter.allocate_shard(&node(2551), &shard, &snapshot), None);
        // Rebalancing: nothing at the first round, the strategy's answer at a later one.
        assert!(adapter.rebalance(&snapshot, &BTreeSet::new()).is_empty());
        let moves = async {
            loop {
                let moves = adapter.rebalance(&snapshot, &BTreeSet::new());
                if !moves.is_empty() {
                    return moves;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        let moves = tokio::time::timeout(Duration::from_secs(5), moves)
            .await
            .expect("the rebalance answer arrives");
        assert_eq!(moves, BTreeSet::from([ShardId::from("7")]));
    }
}
