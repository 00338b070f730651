//! [`OrSet`]: a set with additions and removals, where an addition wins over a concurrent
//! removal.

use std::collections::{BTreeMap, BTreeSet};

use super::replicated::{RemovedReplicaPruning, ReplicatedData};

/// An event: the `n`th change made by replica `R`.
type Dot<R> = (R, u64);

/// An observed-remove set. Each addition is tagged with a *dot* (the adding replica and its
/// own change counter); a removal removes the dots the remover has seen. A merge keeps an
/// element if one side holds a dot of it that the other side has not seen; a dot the other
/// side has seen and no longer holds was removed there. So a removal takes away only what its
/// replica had seen added, and an addition concurrent with a removal survives ("add wins").
/// No tombstones are kept: what each replica has seen is one version vector.
///
/// Remove only what you have seen: read with a majority before removing, or a removal may miss
/// additions made elsewhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrSet<R: Ord, T: Ord> {
    /// Each element, with the dots of the additions that keep it in.
    elements: BTreeMap<T, BTreeSet<Dot<R>>>,
    /// Every replica's highest dot this state has seen.
    seen: BTreeMap<R, u64>,
}

impl<R: Ord, T: Ord> Default for OrSet<R, T> {
    fn default() -> Self {
        OrSet {
            elements: BTreeMap::new(),
            seen: BTreeMap::new(),
        }
    }
}

impl<R: Ord + Clone, T: Ord + Clone> OrSet<R, T> {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `element` on behalf of `replica`. Its earlier dots are replaced by the new one:
    /// this replica has seen them, so the new dot stands for them all.
    pub fn add(&mut self, replica: &R, element: T) {
        let counter = self.seen.entry(replica.clone()).or_insert(0);
        *counter += 1;
        let dot = (replica.clone(), *counter);
        self.elements.insert(element, BTreeSet::from([dot]));
    }

    /// Removes `element`, as far as this replica has seen it added; `false` if it was not in.
    pub fn remove(&mut self, element: &T) -> bool {
        self.elements.remove(element).is_some()
    }

    /// Removes every element this replica has seen added.
    pub fn clear(&mut self) {
        self.elements.clear();
    }

    /// Whether `element` is in the set.
    pub fn contains(&self, element: &T) -> bool {
        self.elements.contains_key(element)
    }

    /// The elements, in order.
    pub fn elements(&self) -> impl Iterator<Item = &T> {
        self.elements.keys()
    }

    /// How many elements the set holds.
    pub fn len(&self) -> usize {
        self.elements.len()
    }

    /// Whether the set holds nothing.
    pub fn is_empty(&self) -> bool {
        self.elements.is_empty()
    }

    /// Whether this state has seen `dot`.
    fn has_seen(&self, (replica, n): &Dot<R>) -> bool {
        self.seen.get(replica).is_some_and(|seen| seen >= n)
    }
}

impl<R: Ord + Clone, T: Ord + Clone> ReplicatedData for OrSet<R, T> {
    fn merge(&mut self, other: &Self) {
        let mut merged = BTreeMap::new();
        let all: BTreeSet<&T> = self.elements.keys().chain(other.elements.keys()).collect();
        for element in all {
            let ours = self.elements.get(element);
            let theirs = other.elements.get(element);
            let mut dots = BTreeSet::new();
            // A dot both sides hold stays; a dot one side holds stays unless the other side
            // has seen it (and so removed it).
            if let Some(ours) = ours {
                for dot in ours {
                    if theirs.is_some_and(|t| t.contains(dot)) || !other.has_seen(dot) {
                        dots.insert(dot.clone());
                    }
                }
            }
            if let Some(theirs) = theirs {
                for dot in theirs {
                    if ours.is_some_and(|o| o.contains(dot)) || !self.has_seen(dot) {
                        dots.insert(dot.clone());
                    }
                }
            }
            if !dots.is_empty() {
                merged.insert(element.clone(), dots);
            }
        }
        self.elements = merged;
        for (replica, &n) in &other.seen {
            let ours = self.seen.entry(replica.clone()).or_insert(0);
            *ours = (*ours).max(n);
        }
    }
}

impl<R: Ord + Clone, T: Ord + Clone> RemovedReplicaPruning<R> for OrSet<R, T> {
    fn needs_pruning_from(&self, removed: &R) -> bool {
        self.seen.contains_key(removed)
            || self
                .elements
                .values()
                .any(|dots| dots.iter().any(|(r, _)| r == removed))
    }

    /// Adds again, on behalf of `owner`, every element an addition by `removed` keeps in, then
    /// forgets `removed`'s dots and its entry in what this state has seen.
    fn prune(&mut self, removed: &R, owner: &R) {
        if removed == owner {
            return;
        }
        let kept_by_removed: Vec<T> = self
            .elements
            .iter()
            .filter(|(_, dots)| dots.iter().any(|(r, _)| r == removed))
            .map(|(element, _)| element.clone())
            .collect();
        for element in kept_by_removed {
            self.add(owner, element);
        }
        self.pruning_cleanup(removed);
    }

    fn pruning_cleanup(&mut self, removed: &R) {
        self.seen.remove(removed);
        self.elements.retain(|_, dots| {
            dots.retain(|(r, _)| r != removed);
            !dots.is_empty()
        });
    }
}
