//! Vector clocks: which gossip state is newer, older, the same or concurrent.
//!
//! The reference keys entries by an MD5 hex of the node's address and uid; we key by the
//! [`UniqueAddress`] itself, which is exact (no hashing) and lets a removed node's entry be
//! pruned by identity. The wire layer maps addresses to small indexes, so the size is the same.

use std::collections::BTreeMap;

use crate::address::UniqueAddress;

/// How two versions relate.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Ordering {
    /// Every entry equal.
    Same,
    /// `self` happened before `other` (`other` is newer).
    Before,
    /// `self` happened after `other` (`self` is newer).
    After,
    /// Neither dominates: both sides changed independently.
    Concurrent,
}

/// A vector clock over cluster nodes. Missing entries count as zero.
#[derive(Clone, PartialEq, Eq, Default, Hash, serde::Serialize, serde::Deserialize)]
pub struct VectorClock {
    versions: BTreeMap<UniqueAddress, u64>,
}

impl VectorClock {
    /// The empty clock (all zeros).
    pub fn new() -> Self {
        Self::default()
    }

    /// Bumps `node`'s entry by one.
    pub fn increment(&mut self, node: &UniqueAddress) {
        *self.versions.entry(node.clone()).or_insert(0) += 1;
    }

    /// `node`'s entry (0 when absent).
    pub fn get(&self, node: &UniqueAddress) -> u64 {
        self.versions.get(node).copied().unwrap_or(0)
    }

    /// Entries, in node order.
    pub fn entries(&self) -> impl Iterator<Item = (&UniqueAddress, u64)> {
        self.versions.iter().map(|(k, v)| (k, *v))
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.versions.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    /// Builds a clock from entries (zeros are dropped).
    pub fn from_entries(entries: impl IntoIterator<Item = (UniqueAddress, u64)>) -> Self {
        VectorClock {
            versions: entries.into_iter().filter(|(_, v)| *v > 0).collect(),
        }
    }

    /// How `self` relates to `other`, walking both sorted maps once.
    pub fn compare(&self, other: &VectorClock) -> Ordering {
        let mut self_bigger = false;
        let mut other_bigger = false;
        let mut a = self.versions.iter().peekable();
        let mut b = other.versions.iter().peekable();
        loop {
            match (a.peek(), b.peek()) {
                (None, None) => break,
                (Some(&(_, &va)), None) => {
                    self_bigger |= va > 0;
                    a.next();
                }
                (None, Some(&(_, &vb))) => {
                    other_bigger |= vb > 0;
                    b.next();
                }
                (Some(&(ka, &va)), Some(&(kb, &vb))) => match ka.cmp(kb) {
                    std::cmp::Ordering::Less => {
                        self_bigger |= va > 0;
                        a.next();
                    }
                    std::cmp::Ordering::Greater => {
                        other_bigger |= vb > 0;
                        b.next();
                    }
                    std::cmp::Ordering::Equal => {
                        self_bigger |= va > vb;
                        other_bigger |= vb > va;
                        a.next();
                        b.next();
                    }
                },
            }
            if self_bigger && other_bigger {
                return Ordering::Concurrent;
            }
        }
        match (self_bigger, other_bigger) {
            (false, false) => Ordering::Same,
            (true, false) => Ordering::After,
            (false, true) => Ordering::Before,
            (true, true) => Ordering::Concurrent,
        }
    }

    /// Pointwise maximum.
    pub fn merge(&self, other: &VectorClock) -> VectorClock {
        let mut out = self.versions.clone();
        for (k, &v) in &other.versions {
            let e = out.entry(k.clone()).or_insert(0);
            if v > *e {
                *e = v;
            }
        }
        VectorClock { versions: out }
    }

    /// Drops `node`'s entry (done when a node is removed, so clocks do not grow forever).
    pub fn prune(&mut self, node: &UniqueAddress) {
        self.versions.remove(node);
    }
}

impl std::fmt::Debug for VectorClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.versions.iter()).finish()
    }
}

#[cfg(test)]
mod tests;
