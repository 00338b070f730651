//! The allocation strategy a [`KindNode`](super::KindNode)'s coordinator consults: one the
//! node can call synchronously, or a *deferred* one whose questions leave the core as effects
//! and whose answers come back as inputs.
//!
//! The coordinator asks its strategy synchronously so that it stays free of I/O and
//! replayable. A strategy that must wait (for another service, a database) is therefore split:
//! the first question about a shard records it and answers "not yet"; the runtime sees the
//! question as [`KindEffect::AllocationAsked`](super::KindEffect::AllocationAsked), works out
//! the answer however it likes, and hands it back with
//! [`KindInput::AllocationAnswered`](super::KindInput::AllocationAnswered), upon which the node
//! asks the coordinator again on the requester's behalf and the answer is taken. Rebalancing is
//! periodic, so a rebalance answer is simply used at the next round.

use std::collections::{BTreeMap, BTreeSet};

use crate::membership::UniqueAddress;
use crate::sharding::allocation::{AllocationSnapshot, ShardAllocationStrategy};
use crate::sharding::shard_id::ShardId;

/// A synchronous strategy, boxed so that configuration or a user can choose it.
pub type BoxedStrategy = Box<dyn ShardAllocationStrategy<UniqueAddress> + Send>;

/// Makes the strategy each time this node starts its coordinator (a coordinator starts with
/// a fresh strategy, as the reference's singleton does after a hand-over).
pub type StrategyFactory = Box<dyn FnMut() -> BoxedStrategy + Send>;

/// How a kind's coordinator decides where shards go.
pub enum AllocationChoice {
    /// A strategy answered on the spot.
    Immediate(StrategyFactory),
    /// Questions leave as effects and answers come back as inputs.
    Deferred,
}

impl std::fmt::Debug for AllocationChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AllocationChoice::Immediate(_) => "Immediate",
            AllocationChoice::Deferred => "Deferred",
        })
    }
}

/// A question the deferred strategy could not answer yet.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Question {
    Allocate {
        requester: UniqueAddress,
        shard: ShardId,
        snapshot: AllocationSnapshot<UniqueAddress>,
    },
    Rebalance {
        snapshot: AllocationSnapshot<UniqueAddress>,
        in_progress: BTreeSet<ShardId>,
    },
}

/// Answers that arrived and wait to be taken, and the questions still open.
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    answers: BTreeMap<ShardId, Option<UniqueAddress>>,
    asking: BTreeSet<ShardId>,
    rebalance: Option<BTreeSet<ShardId>>,
    rebalancing: bool,
    /// Questions raised since the node last collected them.
    pub(crate) raised: Vec<Question>,
}

impl Deferred {
    /// Keeps the answer for `shard` until the coordinator asks again.
    pub(crate) fn answered(&mut self, shard: ShardId, answer: Option<UniqueAddress>) {
        self.asking.remove(&shard);
        self.answers.insert(shard, answer);
    }

    /// Keeps the rebalance answer for the next round.
    pub(crate) fn rebalance_answered(&mut self, shards: BTreeSet<ShardId>) {
        self.rebalancing = false;
        self.rebalance = Some(shards);
    }
}

/// The strategy inside a [`KindNode`](super::KindNode)'s coordinator.
pub enum KindStrategy {
    /// Answered on the spot.
    Immediate(BoxedStrategy),
    /// Answered later, through the node's inputs.
    #[doc(hidden)]
    Deferred(DeferredState),
}

/// Opaque state of a deferred strategy.
#[derive(Debug, Default)]
pub struct DeferredState(pub(crate) Deferred);

impl std::fmt::Debug for KindStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KindStrategy::Immediate(_) => f.write_str("Immediate"),
            KindStrategy::Deferred(d) => f.debug_tuple("Deferred").field(&d.0).finish(),
        }
    }
}

impl KindStrategy {
    pub(crate) fn deferred_mut(&mut self) -> Option<&mut Deferred> {
        match self {
            KindStrategy::Deferred(d) => Some(&mut d.0),
            KindStrategy::Immediate(_) => None,
        }
    }
}

impl ShardAllocationStrategy<UniqueAddress> for KindStrategy {
    fn allocate_shard(
        &mut self,
        requester: &UniqueAddress,
        shard: &ShardId,
        current: &AllocationSnapshot<UniqueAddress>,
    ) -> Option<UniqueAddress> {
        let d = match self {
            KindStrategy::Immediate(s) => return s.allocate_shard(requester, shard, current),
            KindStrategy::Deferred(d) => &mut d.0,
        };
        if let Some(answer) = d.answers.remove(shard) {
            return answer;
        }
        if d.asking.insert(shard.clone()) {
            d.raised.push(Question::Allocate {
                requester: requester.clone(),
                shard: shard.clone(),
                snapshot: current.clone(),
            });
        }
        None
    }

    fn rebalance(
        &mut self,
        current: &AllocationSnapshot<UniqueAddress>,
        in_progress: &BTreeSet<ShardId>,
    ) -> BTreeSet<ShardId> {
        let d = match self {
            KindStrategy::Immediate(s) => return s.rebalance(current, in_progress),
            KindStrategy::Deferred(d) => &mut d.0,
        };
        if let Some(moves) = d.rebalance.take() {
            return moves;
        }
        if !d.rebalancing {
            d.rebalancing = true;
            d.raised.push(Question::Rebalance {
                snapshot: current.clone(),
                in_progress: in_progress.clone(),
            });
        }
        BTreeSet::new()
    }
}
