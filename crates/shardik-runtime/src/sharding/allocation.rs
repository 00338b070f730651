//! Running an entity kind's asynchronous shard allocation strategy (the strategy types are in
//! `strategy.rs`).
//!
//! The coordinator core asks its strategy synchronously, so that it stays free of I/O and
//! replayable. An asynchronous strategy (one that consults another service, say) is run as the
//! core's *deferred* strategy: the core raises each open question as an effect
//! (`KindEffect::AllocationAsked`, `RebalanceAsked`); here its future runs in a task of its
//! own, and the answer goes back to the kind's task as an input, after which the core places
//! the shard. What to do with an answer is the core's decision, not this file's.

use std::collections::BTreeSet;
use std::sync::Arc;

use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::{AllocationSnapshot, ShardId};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::messages::Control;
use super::strategy::AsyncShardAllocationStrategy;

/// Works out the answer to an allocation question in a task of its own and hands it back to
/// the kind's task, whose core then places the shard. The handle is weak, so a strategy that
/// never answers cannot keep a stopped kind's queue open.
///
/// Returns the task's handle; the kind's task lets it go (the answer arrives as an input),
/// tests await it to see the task end without panicking.
pub(crate) fn answer_allocation(
    strategy: &Arc<dyn AsyncShardAllocationStrategy>,
    control: mpsc::WeakSender<Control>,
    requester: UniqueAddress,
    shard: ShardId,
    snapshot: AllocationSnapshot<UniqueAddress>,
) -> JoinHandle<()> {
    let future = strategy.allocate_shard(requester.clone(), shard.clone(), snapshot);
    crate::task::spawn(async move {
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
    })
}

/// As [`answer_allocation`], for the question which shards to move.
pub(crate) fn answer_rebalance(
    strategy: &Arc<dyn AsyncShardAllocationStrategy>,
    control: mpsc::WeakSender<Control>,
    snapshot: AllocationSnapshot<UniqueAddress>,
    in_progress: BTreeSet<ShardId>,
) -> JoinHandle<()> {
    let future = strategy.rebalance(snapshot, in_progress);
    crate::task::spawn(async move {
        let moves = future.await;
        if let Some(control) = control.upgrade() {
            let _ = control.send(Control::RebalanceAnswered(moves)).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use shardik_core::membership::Address;
    use shardik_core::sharding::RegionEntry;

    use super::*;
    use crate::sharding::strategy::StrategyFuture;

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
        let allocation = answer_allocation(
            &strategy,
            weak.clone(),
            node(1),
            ShardId::from("1"),
            AllocationSnapshot::new(),
        );
        let rebalance =
            answer_rebalance(&strategy, weak, AllocationSnapshot::new(), BTreeSet::new());
        // Each task ends once its strategy answered, without panicking (a panic in the task
        // comes back here as a `JoinError`) and without waiting for a queue nobody reads.
        for (question, task) in [("allocation", allocation), ("rebalance", rebalance)] {
            match tokio::time::timeout(Duration::from_secs(5), task).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => panic!("the {question} task failed: {e}"),
                Err(_) => panic!("the {question} task did not end"),
            }
        }
    }
}
