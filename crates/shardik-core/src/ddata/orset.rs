//! [`OrSet`]: a set with additions and removals, where an addition wins over a concurrent
//! removal.

use super::kernel::{DotDelta, DotKernel};
use super::replicated::{DeltaReplicatedData, RemovedReplicaPruning, ReplicatedData};

/// An observed-remove set. Each addition is tagged with a *dot* (the adding replica and its
/// own change counter); a removal removes the dots the remover has seen. A merge keeps an
/// element if one side holds a dot of it that the other side has not seen; a dot the other
/// side has seen and no longer holds was removed there. So a removal takes away only what its
/// replica had seen added, and an addition concurrent with a removal survives ("add wins").
/// No tombstones are kept: what each replica has seen is one version vector (plus, while
/// deltas arrive out of order, the few dots seen beyond a gap).
///
/// Its delta is the elements added or removed since the last reset, with their dots: deltas
/// merge in any order and any number of times.
///
/// Remove only what you have seen: read with a majority before removing, or a removal may miss
/// additions made elsewhere.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct OrSet<R: Ord, T: Ord> {
    kernel: DotKernel<R, T, ()>,
    /// The changes made here since the delta was last reset.
    #[serde(skip, default = "Option::default")]
    delta: Option<DotDelta<R, T, ()>>,
}

impl<R: Ord, T: Ord> Default for OrSet<R, T> {
    fn default() -> Self {
        OrSet {
            kernel: DotKernel::default(),
            delta: None,
        }
    }
}

/// The same elements and the same dots seen make equal sets, whatever their deltas.
impl<R: Ord + Clone, T: Ord + Clone> PartialEq for OrSet<R, T> {
    fn eq(&self, other: &Self) -> bool {
        self.kernel == other.kernel
    }
}

impl<R: Ord + Clone, T: Ord + Clone> Eq for OrSet<R, T> {}

impl<R: Ord + Clone, T: Ord + Clone> OrSet<R, T> {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `element` on behalf of `replica`. Its earlier dots are replaced by the new one:
    /// this replica has seen them, so the new dot stands for them all.
    pub fn add(&mut self, replica: &R, element: T) {
        let change = self.kernel.put(replica, element, ());
        self.record(change);
    }

    /// Removes `element`, as far as this replica has seen it added; `false` if it was not in.
    pub fn remove(&mut self, element: &T) -> bool {
        match self.kernel.remove(element) {
            Some(change) => {
                self.record(change);
                true
            }
            None => false,
        }
    }

    /// Removes every element this replica has seen added.
    pub fn clear(&mut self) {
        let all: Vec<T> = self.kernel.keys().cloned().collect();
        for element in &all {
            self.remove(element);
        }
    }

    /// Whether `element` is in the set.
    pub fn contains(&self, element: &T) -> bool {
        self.kernel.contains_key(element)
    }

    /// The elements, in order.
    pub fn elements(&self) -> impl Iterator<Item = &T> {
        self.kernel.keys()
    }

    /// How many elements the set holds.
    pub fn len(&self) -> usize {
        self.kernel.len()
    }

    /// Whether the set holds nothing.
    pub fn is_empty(&self) -> bool {
        self.kernel.len() == 0
    }

    fn record(&mut self, change: DotDelta<R, T, ()>) {
        match &mut self.delta {
            Some(delta) => delta.merge(&change),
            None => self.delta = Some(change),
        }
    }
}

impl<R: Ord + Clone, T: Ord + Clone> ReplicatedData for OrSet<R, T> {
    fn merge(&mut self, other: &Self) {
        self.kernel.merge(&other.kernel);
    }
}

impl<R: Ord + Clone, T: Ord + Clone> DeltaReplicatedData for OrSet<R, T> {
    type Delta = DotDelta<R, T, ()>;

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

impl<R: Ord + Clone, T: Ord + Clone> RemovedReplicaPruning<R> for OrSet<R, T> {
    fn needs_pruning_from(&self, removed: &R) -> bool {
        self.kernel.names(removed, |_| false)
    }

    fn replicas_named(&self, into: &mut std::collections::BTreeSet<R>) {
        self.kernel.replicas_named(into, |_, _| {});
    }

    /// Adds again, on behalf of `owner`, every element an addition by `removed` keeps in, then
    /// forgets `removed`'s dots and its entry in what this state has seen.
    fn prune(&mut self, removed: &R, owner: &R) {
        if removed == owner {
            return;
        }
        for element in self.kernel.keys_naming(removed, |_| false) {
            self.add(owner, element);
        }
        self.pruning_cleanup(removed);
    }

    fn pruning_cleanup(&mut self, removed: &R) {
        self.kernel.forget(removed, |_| ());
        if let Some(delta) = &mut self.delta {
            delta.forget(removed, |_| ());
        }
    }
}
