//! Unit tests of reachability: aggregation over observers and merging by observer version.

use super::*;
use crate::membership::address::Address;
use ReachabilityStatus::*;

fn n(i: u16) -> UniqueAddress {
    UniqueAddress::new(Address::new("n", i), i as u64)
}

/// The reference's `ReachabilitySpec`: Terminated beats Unreachable beats Reachable,
/// Terminated is sticky, an observer that sees everyone reachable keeps no rows.
#[test]
fn aggregation_and_stickiness() {
    let mut r = Reachability::new();
    assert_eq!(r.status(&n(2)), Reachable);
    r.unreachable(&n(1), &n(2));
    assert_eq!(r.status(&n(2)), Unreachable);
    assert!(!r.is_reachable_from(&n(1), &n(2)));
    assert!(r.is_reachable_from(&n(3), &n(2)));
    r.terminated(&n(3), &n(2));
    assert_eq!(r.status(&n(2)), Terminated);
    r.reachable(&n(3), &n(2));
    assert_eq!(r.status(&n(2)), Terminated, "terminated is sticky");
    r.reachable(&n(1), &n(2));
    assert_eq!(r.observer_version(&n(1)), 2);
    assert!(r.observers()[&n(1)].subjects.is_empty());
    assert_eq!(r.status_by(&n(2), |o| o != &n(3)), Reachable);
}

#[test]
fn merge_takes_higher_observer_version_whole() {
    let members: BTreeSet<_> = (1..=4).map(n).collect();
    let mut a = Reachability::new();
    a.unreachable(&n(1), &n(2));
    let mut b = a.clone();
    b.reachable(&n(1), &n(2));
    b.unreachable(&n(1), &n(3));
    a.unreachable(&n(4), &n(3));
    let m = a.merge(&b, &members);
    assert_eq!(m, b.merge(&a, &members));
    assert_eq!(m.status(&n(2)), Reachable);
    assert_eq!(m.status(&n(3)), Unreachable);
    assert_eq!(m.observer_version(&n(4)), 1);
    let fewer: BTreeSet<_> = [n(1), n(2)].into_iter().collect();
    let m2 = a.merge(&b, &fewer);
    assert!(m2.records().next().is_none());
}
