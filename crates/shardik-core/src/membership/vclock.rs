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
mod tests {
    use super::*;
    use crate::membership::address::Address;
    use proptest::prelude::*;

    fn n(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("n", i), i as u64)
    }

    fn vc(entries: &[(u16, u64)]) -> VectorClock {
        VectorClock::from_entries(entries.iter().map(|&(i, v)| (n(i), v)))
    }

    /// The reference's `VectorClockSpec` vectors: Same, Before, After, Concurrent.
    #[test]
    fn comparison_table() {
        use Ordering::*;
        type Entries = &'static [(u16, u64)];
        let cases: &[(Entries, Entries, Ordering)] = &[
            (&[], &[], Same),
            (&[(1, 1)], &[(1, 1)], Same),
            (&[(1, 1)], &[(1, 2)], Before),
            (&[(1, 2)], &[(1, 1)], After),
            (&[(1, 1)], &[(1, 1), (2, 1)], Before),
            (&[(1, 1), (2, 1)], &[(1, 1)], After),
            (&[(1, 2)], &[(1, 1), (2, 1)], Concurrent),
            (&[(1, 1), (2, 2)], &[(1, 2), (2, 1)], Concurrent),
            (&[(1, 1), (3, 1)], &[(1, 1), (2, 1)], Concurrent),
            (&[(2, 1)], &[(1, 1), (3, 1)], Concurrent),
            (&[(1, 3), (2, 3), (3, 3)], &[(1, 3), (2, 3), (3, 3)], Same),
            (&[(1, 3), (2, 3), (3, 3)], &[(1, 3), (2, 4), (3, 3)], Before),
        ];
        for (a, b, want) in cases {
            assert_eq!(vc(a).compare(&vc(b)), *want, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn increment_merge_prune() {
        let mut a = VectorClock::new();
        a.increment(&n(1));
        a.increment(&n(1));
        let mut b = VectorClock::new();
        b.increment(&n(2));
        let m = a.merge(&b);
        assert_eq!(m, vc(&[(1, 2), (2, 1)]));
        assert_eq!(m.compare(&a), Ordering::After);
        assert_eq!(m.compare(&b), Ordering::After);
        let mut p = m.clone();
        p.prune(&n(1));
        assert_eq!(p, vc(&[(2, 1)]));
    }

    fn arb_clock() -> impl Strategy<Value = VectorClock> {
        proptest::collection::vec((0u16..6, 0u64..4), 0..6).prop_map(|v| vc(&v))
    }

    proptest! {
        #[test]
        fn merge_is_lub(a in arb_clock(), b in arb_clock(), c in arb_clock()) {
            prop_assert_eq!(a.merge(&b), b.merge(&a));
            prop_assert_eq!(a.merge(&b).merge(&c), a.merge(&b.merge(&c)));
            prop_assert_eq!(a.merge(&a), a.clone());
            let m = a.merge(&b);
            prop_assert!(matches!(m.compare(&a), Ordering::After | Ordering::Same));
            prop_assert!(matches!(m.compare(&b), Ordering::After | Ordering::Same));
        }

        #[test]
        fn compare_is_antisymmetric(a in arb_clock(), b in arb_clock()) {
            let ab = a.compare(&b);
            let ba = b.compare(&a);
            let flipped = match ab {
                Ordering::Before => Ordering::After,
                Ordering::After => Ordering::Before,
                o => o,
            };
            prop_assert_eq!(ba, flipped);
        }
    }
}
