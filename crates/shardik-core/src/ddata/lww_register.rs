//! [`LwwRegister`]: one value, the last written wins.

use super::replicated::{RemovedReplicaPruning, ReplicatedData};

/// A register holding one value; a merge keeps the value written last, by the writer's clock,
/// and between writes with the same timestamp the one by the lower replica id (as Akka's
/// `LWWRegister`, whose tie goes to the lower address).
///
/// Timestamps are the writer's: [`set`](Self::set) takes `max(now, current + 1)`, so a
/// replica's writes always move the register forward, and a single writer (a singleton, say)
/// needs no synchronised clocks. Concurrent writes by different replicas within their clocks'
/// skew pick a winner arbitrarily, but the same winner everywhere. The merge relies on one
/// replica never writing two values at the same timestamp, which `set` guarantees; create a
/// register once (with [`new`](Self::new)) and let the others start from a merge, not from a
/// `new` of their own naming the same writer and time.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LwwRegister<R, T> {
    value: T,
    timestamp: u64,
    writer: R,
}

impl<R: Ord + Clone, T: Clone + PartialEq> LwwRegister<R, T> {
    /// A register holding `value`, written by `replica` at `now` (any clock that only grows,
    /// milliseconds since the Unix epoch by convention).
    pub fn new(replica: &R, value: T, now: u64) -> Self {
        LwwRegister {
            value,
            timestamp: now,
            writer: replica.clone(),
        }
    }

    /// Writes `value` on behalf of `replica` at `now`, or just after the current write if
    /// the clock is behind it.
    pub fn set(&mut self, replica: &R, value: T, now: u64) {
        self.timestamp = now.max(self.timestamp.saturating_add(1));
        self.writer = replica.clone();
        self.value = value;
    }

    /// The value written last.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// When the value was written, by its writer's clock.
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }

    /// Who wrote the value.
    pub fn writer(&self) -> &R {
        &self.writer
    }
}

impl<R: Ord + Clone, T: Clone + PartialEq> ReplicatedData for LwwRegister<R, T> {
    fn merge(&mut self, other: &Self) {
        let theirs_wins = other.timestamp > self.timestamp
            || (other.timestamp == self.timestamp && other.writer < self.writer);
        if theirs_wins {
            self.clone_from(other);
        }
    }
}

/// A register keeps no state per replica (its writer only breaks ties), so there is nothing to
/// prune: this lets registers be the values of maps that are pruned.
impl<R: Ord + Clone, T: Clone + PartialEq> RemovedReplicaPruning<R> for LwwRegister<R, T> {
    fn needs_pruning_from(&self, _removed: &R) -> bool {
        false
    }

    fn replicas_named(&self, _into: &mut std::collections::BTreeSet<R>) {}

    fn prune(&mut self, _removed: &R, _owner: &R) {}

    fn pruning_cleanup(&mut self, _removed: &R) {}
}
