//! Dots and the causal context that records which dots a state has seen: the bookkeeping the
//! observed-remove types ([`OrSet`](super::OrSet), [`OrMap`](super::OrMap)) share.

use std::collections::{BTreeMap, BTreeSet};

/// An event: the `n`th change made by replica `R` (counted from 1).
pub(super) type Dot<R> = (R, u64);

/// The dots a state has seen: every replica's contiguous run from 1 (a version vector) and
/// the dots seen beyond a gap (the *cloud*). A full state's dots are always contiguous; a
/// cloud appears when deltas arrive out of order, and folds into the version vector once the
/// gap is filled.
///
/// The representation is canonical: a cloud dot never continues its replica's run and is
/// never covered by it, so two contexts that have seen the same dots are equal.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct DotContext<R: Ord> {
    runs: BTreeMap<R, u64>,
    cloud: BTreeSet<Dot<R>>,
}

impl<R: Ord> Default for DotContext<R> {
    fn default() -> Self {
        DotContext {
            runs: BTreeMap::new(),
            cloud: BTreeSet::new(),
        }
    }
}

impl<R: Ord + Clone> DotContext<R> {
    /// Whether `dot` has been seen.
    pub(super) fn contains(&self, (replica, n): &Dot<R>) -> bool {
        self.runs.get(replica).is_some_and(|run| run >= n)
            || self.cloud.contains(&(replica.clone(), *n))
    }

    /// A new dot for a change `replica` makes, recorded as seen. A replica's own dots are
    /// all in its state, so its next dot is one past the highest it has seen.
    pub(super) fn next_dot(&mut self, replica: &R) -> Dot<R> {
        let run = self.runs.get(replica).copied().unwrap_or(0);
        let beyond = self
            .cloud
            .range((replica.clone(), 0)..)
            .take_while(|(r, _)| r == replica)
            .map(|&(_, n)| n)
            .max()
            .unwrap_or(0);
        let dot = (replica.clone(), run.max(beyond) + 1);
        self.insert(dot.clone());
        dot
    }

    /// Records `dot` as seen.
    pub(super) fn insert(&mut self, dot: Dot<R>) {
        if !self.contains(&dot) {
            self.cloud.insert(dot);
            self.compact();
        }
    }

    /// Records everything `other` has seen.
    pub(super) fn merge(&mut self, other: &Self) {
        for (replica, &n) in &other.runs {
            let run = self.runs.entry(replica.clone()).or_insert(0);
            *run = (*run).max(n);
        }
        self.cloud.extend(other.cloud.iter().cloned());
        self.compact();
    }

    /// Forgets every dot of `replica`.
    pub(super) fn forget(&mut self, replica: &R) {
        self.runs.remove(replica);
        self.cloud.retain(|(r, _)| r != replica);
    }

    /// Adds every replica with a dot seen to `into`.
    pub(super) fn replicas_named(&self, into: &mut BTreeSet<R>) {
        into.extend(self.runs.keys().cloned());
        into.extend(self.cloud.iter().map(|(r, _)| r.clone()));
    }

    /// Whether any dot of `replica` has been seen.
    pub(super) fn names(&self, replica: &R) -> bool {
        self.runs.contains_key(replica) || self.cloud.iter().any(|(r, _)| r == replica)
    }

    /// Folds cloud dots that continue or fall within their replica's run into the run. The
    /// cloud is sorted by replica then number, so one pass suffices.
    fn compact(&mut self) {
        if self.cloud.is_empty() {
            return;
        }
        let cloud = std::mem::take(&mut self.cloud);
        for (replica, n) in cloud {
            let run = self.runs.get(&replica).copied().unwrap_or(0);
            if n <= run {
                continue;
            }
            if n == run + 1 {
                self.runs.insert(replica, n);
            } else {
                self.cloud.insert((replica, n));
            }
        }
    }
}
