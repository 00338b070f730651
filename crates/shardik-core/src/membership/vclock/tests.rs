//! Unit tests of vector clocks: the comparison table, and merge as least upper bound.

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
