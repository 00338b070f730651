//! [`GSet`]: a set that only grows.

use std::collections::BTreeSet;

use super::replicated::{DeltaReplicatedData, RemovedReplicaPruning, ReplicatedData};

/// A set elements are added to and never removed from; a merge is the union. (A set with
/// removals is an [`OrSet`](super::OrSet).) Its delta is the elements added since the last
/// reset.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct GSet<T: Ord> {
    elements: BTreeSet<T>,
    /// Elements added here since the delta was last reset.
    #[serde(skip, default = "BTreeSet::new")]
    added: BTreeSet<T>,
}

impl<T: Ord> Default for GSet<T> {
    fn default() -> Self {
        GSet {
            elements: BTreeSet::new(),
            added: BTreeSet::new(),
        }
    }
}

/// Equal elements make equal sets, whatever their deltas.
impl<T: Ord> PartialEq for GSet<T> {
    fn eq(&self, other: &Self) -> bool {
        self.elements == other.elements
    }
}

impl<T: Ord> Eq for GSet<T> {}

impl<T: Ord + Clone> GSet<T> {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `element`; `false` if it was there already.
    pub fn add(&mut self, element: T) -> bool {
        let new = self.elements.insert(element.clone());
        if new {
            self.added.insert(element);
        }
        new
    }

    /// Whether `element` was added, as far as this state knows.
    pub fn contains(&self, element: &T) -> bool {
        self.elements.contains(element)
    }

    /// The elements, in order.
    pub fn elements(&self) -> impl Iterator<Item = &T> {
        self.elements.iter()
    }

    /// How many elements the set holds.
    pub fn len(&self) -> usize {
        self.elements.len()
    }

    /// Whether the set holds nothing.
    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }
}

impl<T: Ord + Clone> ReplicatedData for GSet<T> {
    fn merge(&mut self, other: &Self) {
        self.elements.extend(other.elements.iter().cloned());
    }
}

impl<T: Ord + Clone> DeltaReplicatedData for GSet<T> {
    type Delta = GSet<T>;

    fn delta(&self) -> Option<Self::Delta> {
        (!self.added.is_empty()).then(|| GSet {
            elements: self.added.clone(),
            added: BTreeSet::new(),
        })
    }

    fn reset_delta(&mut self) {
        self.added.clear();
    }

    fn merge_delta(&mut self, delta: &Self::Delta) {
        self.merge(delta);
    }
}

/// Nothing here is kept per replica, so there is nothing to prune: this lets the type be a
/// map's value, or be replicated under the same rules as the types that are pruned.
impl<R, T: Ord + Clone> RemovedReplicaPruning<R> for GSet<T> {
    fn needs_pruning_from(&self, _removed: &R) -> bool {
        false
    }

    fn replicas_named(&self, _into: &mut std::collections::BTreeSet<R>) {}

    fn prune(&mut self, _removed: &R, _owner: &R) {}

    fn pruning_cleanup(&mut self, _removed: &R) {}
}
