//! Counters: [`GCounter`] only grows, [`PNCounter`] goes both ways.

use std::collections::{BTreeMap, BTreeSet};

use super::replicated::{DeltaReplicatedData, RemovedReplicaPruning, ReplicatedData};

/// A counter that only grows. Each replica counts its own increments; the value is the sum
/// over the replicas, and a merge keeps each replica's highest count (counts only grow, so
/// the highest is the newest).
///
/// The value is a `u128`: the sum of many replicas' `u64` counts cannot overflow it. A
/// replica's own count saturates at `u64::MAX`.
///
/// Its delta is the counts of the replicas that counted since the last reset: whole counts,
/// not differences, so a delta merged twice or out of order is harmless.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct GCounter<R: Ord> {
    counts: BTreeMap<R, u64>,
    /// Replicas whose count changed here since the delta was last reset.
    #[serde(skip, default = "BTreeSet::new")]
    changed: BTreeSet<R>,
}

impl<R: Ord> Default for GCounter<R> {
    fn default() -> Self {
        GCounter {
            counts: BTreeMap::new(),
            changed: BTreeSet::new(),
        }
    }
}

/// Equal counts make equal counters, whatever their deltas.
impl<R: Ord> PartialEq for GCounter<R> {
    fn eq(&self, other: &Self) -> bool {
        self.counts == other.counts
    }
}

impl<R: Ord> Eq for GCounter<R> {}

impl<R: Ord + Clone> GCounter<R> {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `n` on behalf of `replica` (the replica that makes the change).
    pub fn increment(&mut self, replica: &R, n: u64) {
        if n == 0 {
            return;
        }
        let count = self.counts.entry(replica.clone()).or_insert(0);
        *count = count.saturating_add(n);
        self.changed.insert(replica.clone());
    }

    /// The sum of every replica's count.
    pub fn value(&self) -> u128 {
        self.counts.values().map(|&c| u128::from(c)).sum()
    }

    /// What `replica` counted, as far as this state knows.
    pub fn count_of(&self, replica: &R) -> u64 {
        self.counts.get(replica).copied().unwrap_or(0)
    }

    /// The replicas that have counted something.
    pub fn replicas(&self) -> impl Iterator<Item = &R> {
        self.counts.keys()
    }
}

impl<R: Ord + Clone> ReplicatedData for GCounter<R> {
    fn merge(&mut self, other: &Self) {
        for (replica, &theirs) in &other.counts {
            let ours = self.counts.entry(replica.clone()).or_insert(0);
            *ours = (*ours).max(theirs);
        }
    }
}

impl<R: Ord + Clone> DeltaReplicatedData for GCounter<R> {
    type Delta = GCounter<R>;

    fn delta(&self) -> Option<Self::Delta> {
        if self.changed.is_empty() {
            return None;
        }
        let counts = self
            .changed
            .iter()
            .filter_map(|r| Some((r.clone(), *self.counts.get(r)?)))
            .collect();
        Some(GCounter {
            counts,
            changed: BTreeSet::new(),
        })
    }

    fn reset_delta(&mut self) {
        self.changed.clear();
    }

    fn merge_delta(&mut self, delta: &Self::Delta) {
        self.merge(delta);
    }
}

impl<R: Ord + Clone> RemovedReplicaPruning<R> for GCounter<R> {
    fn needs_pruning_from(&self, removed: &R) -> bool {
        self.counts.contains_key(removed)
    }

    fn replicas_named(&self, into: &mut BTreeSet<R>) {
        into.extend(self.counts.keys().cloned());
    }

    fn prune(&mut self, removed: &R, owner: &R) {
        if removed == owner {
            return;
        }
        self.changed.remove(removed);
        if let Some(count) = self.counts.remove(removed) {
            self.increment(owner, count);
        }
    }

    fn pruning_cleanup(&mut self, removed: &R) {
        self.counts.remove(removed);
        self.changed.remove(removed);
    }
}

/// A counter that goes up and down: two [`GCounter`]s, one of increments and one of
/// decrements; the value is their difference.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PNCounter<R: Ord> {
    increments: GCounter<R>,
    decrements: GCounter<R>,
}

impl<R: Ord> Default for PNCounter<R> {
    fn default() -> Self {
        PNCounter {
            increments: GCounter::default(),
            decrements: GCounter::default(),
        }
    }
}

impl<R: Ord + Clone> PNCounter<R> {
    /// A counter at zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `n` on behalf of `replica`.
    pub fn increment(&mut self, replica: &R, n: u64) {
        self.increments.increment(replica, n);
    }

    /// Subtracts `n` on behalf of `replica`.
    pub fn decrement(&mut self, replica: &R, n: u64) {
        self.decrements.increment(replica, n);
    }

    /// Increments minus decrements. Each side is at most `u64::MAX` per replica, so the
    /// difference fits an `i128` for any realistic number of replicas; it saturates beyond.
    pub fn value(&self) -> i128 {
        let up = i128::try_from(self.increments.value()).unwrap_or(i128::MAX);
        let down = i128::try_from(self.decrements.value()).unwrap_or(i128::MAX);
        up.saturating_sub(down)
    }
}

impl<R: Ord + Clone> ReplicatedData for PNCounter<R> {
    fn merge(&mut self, other: &Self) {
        self.increments.merge(&other.increments);
        self.decrements.merge(&other.decrements);
    }
}

impl<R: Ord + Clone> DeltaReplicatedData for PNCounter<R> {
    type Delta = PNCounter<R>;

    fn delta(&self) -> Option<Self::Delta> {
        let (up, down) = (self.increments.delta(), self.decrements.delta());
        if up.is_none() && down.is_none() {
            return None;
        }
        Some(PNCounter {
            increments: up.unwrap_or_default(),
            decrements: down.unwrap_or_default(),
        })
    }

    fn reset_delta(&mut self) {
        self.increments.reset_delta();
        self.decrements.reset_delta();
    }

    fn merge_delta(&mut self, delta: &Self::Delta) {
        self.merge(delta);
    }
}

impl<R: Ord + Clone> RemovedReplicaPruning<R> for PNCounter<R> {
    fn needs_pruning_from(&self, removed: &R) -> bool {
        self.increments.needs_pruning_from(removed) || self.decrements.needs_pruning_from(removed)
    }

    fn replicas_named(&self, into: &mut BTreeSet<R>) {
        self.increments.replicas_named(into);
        self.decrements.replicas_named(into);
    }

    fn prune(&mut self, removed: &R, owner: &R) {
        self.increments.prune(removed, owner);
        self.decrements.prune(removed, owner);
    }

    fn pruning_cleanup(&mut self, removed: &R) {
        self.increments.pruning_cleanup(removed);
        self.decrements.pruning_cleanup(removed);
    }
}
