//! [`GSet`]: a set that only grows.

use std::collections::BTreeSet;

use super::replicated::ReplicatedData;

/// A set elements are added to and never removed from; a merge is the union. (A set with
/// removals is an `ORSet`.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GSet<T: Ord> {
    elements: BTreeSet<T>,
}

impl<T: Ord> Default for GSet<T> {
    fn default() -> Self {
        GSet {
            elements: BTreeSet::new(),
        }
    }
}

impl<T: Ord + Clone> GSet<T> {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `element`; `false` if it was there already.
    pub fn add(&mut self, element: T) -> bool {
        self.elements.insert(element)
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
