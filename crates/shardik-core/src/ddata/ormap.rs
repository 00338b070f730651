//! [`OrMap`]: a map from keys to replicated values, whose keys are added and removed as an
//! [`OrSet`](super::OrSet)'s elements are.

use super::kernel::{DotDelta, DotKernel};
use super::replicated::{DeltaReplicatedData, RemovedReplicaPruning, ReplicatedData};

/// An observed-remove map: keys come and go as in an [`OrSet`](super::OrSet) (an update
/// concurrent with a removal wins), and each key holds a replicated value.
///
/// Each update of a key is a change with its own dot, carrying the key's whole new value: the
/// value the updating replica saw (the merge of the key's dots it held), changed. A merge
/// keeps the dots an observed-remove set would keep, and a key's value is the merge of what
/// its surviving dots carry. So a removal forgets the values it saw, an update concurrent with
/// it brings back what that update saw, and a key removed and updated again starts from
/// nothing wherever the removal was seen.
///
/// This differs from Akka's `ORMap`, which keeps one value per key and merges a key re-added
/// after a removal with whatever value another replica still held: that merge is not
/// associative on states replicas reach, ours is (see docs/differences-from-akka.md).
///
/// Its delta is the keys updated or removed since the last reset, with their whole values.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct OrMap<R: Ord, K: Ord, V> {
    kernel: DotKernel<R, K, V>,
    /// The changes made here since the delta was last reset.
    #[serde(skip, default = "Option::default")]
    delta: Option<DotDelta<R, K, V>>,
}

impl<R: Ord, K: Ord, V> Default for OrMap<R, K, V> {
    fn default() -> Self {
        OrMap {
            kernel: DotKernel::default(),
            delta: None,
        }
    }
}

/// The same keys, values and dots seen make equal maps, whatever their deltas.
impl<R: Ord + Clone, K: Ord + Clone, V: ReplicatedData> PartialEq for OrMap<R, K, V> {
    fn eq(&self, other: &Self) -> bool {
        self.kernel == other.kernel
    }
}

impl<R: Ord + Clone, K: Ord + Clone, V: ReplicatedData + Eq> Eq for OrMap<R, K, V> {}

impl<R: Ord + Clone, K: Ord + Clone, V: ReplicatedData> OrMap<R, K, V> {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key`'s value, on behalf of `replica`, to what `change` makes of the current one
    /// (`None` if the key is not in).
    pub fn update(&mut self, replica: &R, key: K, change: impl FnOnce(Option<V>) -> V) {
        let value = change(self.kernel.get(&key));
        let delta = self.kernel.put(replica, key, value);
        self.record(delta);
    }

    /// Removes `key` and its value, as far as this replica has seen them; `false` if the key
    /// was not in.
    pub fn remove(&mut self, key: &K) -> bool {
        match self.kernel.remove(key) {
            Some(delta) => {
                self.record(delta);
                true
            }
            None => false,
        }
    }

    /// The value of `key`.
    pub fn get(&self, key: &K) -> Option<V> {
        self.kernel.get(key)
    }

    /// Whether `key` is in.
    pub fn contains_key(&self, key: &K) -> bool {
        self.kernel.contains_key(key)
    }

    /// The keys, in order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.kernel.keys()
    }

    /// The keys and their values, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, V)> {
        self.kernel.iter()
    }

    /// How many keys the map holds.
    pub fn len(&self) -> usize {
        self.kernel.len()
    }

    /// Whether the map holds nothing.
    pub fn is_empty(&self) -> bool {
        self.kernel.len() == 0
    }

    fn record(&mut self, change: DotDelta<R, K, V>) {
        match &mut self.delta {
            Some(delta) => delta.merge(&change),
            None => self.delta = Some(change),
        }
    }
}

impl<R: Ord + Clone, K: Ord + Clone, V: ReplicatedData> ReplicatedData for OrMap<R, K, V> {
    fn merge(&mut self, other: &Self) {
        self.kernel.merge(&other.kernel);
    }
}

impl<R: Ord + Clone, K: Ord + Clone, V: ReplicatedData> DeltaReplicatedData for OrMap<R, K, V> {
    type Delta = DotDelta<R, K, V>;

    fn delta(&self) -> Option<Self::Delta> {
        self.delta.clone()
    }

    fn reset_delta(&mut self) {
        self.delta = None;
    }

    fn merge_delta(&mut self, delta: &Self::Delta) {
        self.kernel.merge_delta(delta);
    }
}

impl<R, K, V> RemovedReplicaPruning<R> for OrMap<R, K, V>
where
    R: Ord + Clone,
    K: Ord + Clone,
    V: RemovedReplicaPruning<R>,
{
    fn needs_pruning_from(&self, removed: &R) -> bool {
        self.kernel
            .names(removed, |v| v.needs_pruning_from(removed))
    }

    fn replicas_named(&self, into: &mut std::collections::BTreeSet<R>) {
        self.kernel
            .replicas_named(into, |v, into| v.replicas_named(into));
    }

    /// Writes again, on behalf of `owner`, every key a dot of `removed` keeps in or whose value
    /// holds something of `removed`, with the value pruned; then forgets `removed`'s dots and
    /// cleans every value of it.
    fn prune(&mut self, removed: &R, owner: &R) {
        if removed == owner {
            return;
        }
        for key in self
            .kernel
            .keys_naming(removed, |v| v.needs_pruning_from(removed))
        {
            self.update(owner, key, |value| {
                let mut value = value.expect("a key naming the removed replica is in");
                value.prune(removed, owner);
                value
            });
        }
        self.pruning_cleanup(removed);
    }

    fn pruning_cleanup(&mut self, removed: &R) {
        let clean = |v: &mut V| v.pruning_cleanup(removed);
        self.kernel.forget(removed, clean);
        if let Some(delta) = &mut self.delta {
            delta.forget(removed, clean);
        }
    }
}
