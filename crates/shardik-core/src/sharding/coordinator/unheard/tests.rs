//! Unit tests of the unheard-members warning: when it is reported, whom it names, and its
//! doubling interval.

use super::*;
use crate::sharding::testkit::node;

fn at(secs: u64) -> Instant {
    Instant::ZERO + Duration::from_secs(secs)
}

fn set(nodes: &[u16]) -> BTreeSet<UniqueAddress> {
    nodes.iter().map(|i| node(*i)).collect()
}

#[test]
fn reports_after_the_grace_then_with_a_doubling_interval_until_the_wait_ends() {
    let mut u = Unheard::new(Duration::from_secs(10));
    u.track(at(0), &set(&[2, 3]));
    assert_eq!(u.poll_timeout(), Some(at(10)));
    assert_eq!(u.due(at(9)), None, "not before the grace");
    let first = u.due(at(10)).expect("due at the grace");
    assert_eq!(
        first,
        vec![
            (node(2), Duration::from_secs(10)),
            (node(3), Duration::from_secs(10))
        ]
    );
    // Reports at 10, 20, 40, 80 s: each interval twice the last.
    let mut reported_at = vec![10];
    let mut t = 10;
    while reported_at.len() < 4 {
        t += 1;
        if u.due(at(t)).is_some() {
            reported_at.push(t);
        }
    }
    assert_eq!(reported_at, vec![10, 20, 40, 80]);
    u.track(at(81), &set(&[]));
    assert_eq!(
        u.poll_timeout(),
        None,
        "nobody waited for: nothing to report"
    );
    u.track(at(100), &set(&[4]));
    assert_eq!(
        u.poll_timeout(),
        Some(at(110)),
        "a new wait starts with the grace again"
    );
}

#[test]
fn only_members_waited_for_the_whole_grace_are_named() {
    let mut u = Unheard::new(Duration::from_secs(10));
    u.track(at(0), &set(&[2]));
    u.track(at(5), &set(&[2, 3]));
    assert_eq!(
        u.due(at(10)),
        Some(vec![(node(2), Duration::from_secs(10))]),
        "node 3 is waited for since 5 s only"
    );
    u.track(at(12), &set(&[3]));
    assert_eq!(
        u.due(at(30)),
        Some(vec![(node(3), Duration::from_secs(25))])
    );
}

#[test]
fn a_member_that_registers_before_its_grace_is_never_named() {
    let mut u = Unheard::new(Duration::from_secs(10));
    u.track(at(0), &set(&[2]));
    u.track(at(3), &set(&[3]));
    assert_eq!(u.due(at(10)), None, "node 2 registered, node 3 is not due");
    assert_eq!(u.poll_timeout(), Some(at(13)));
    assert_eq!(
        u.due(at(13)),
        Some(vec![(node(3), Duration::from_secs(10))])
    );
}

#[test]
fn the_interval_stops_growing_at_its_maximum() {
    let mut u = Unheard::new(Duration::from_secs(100));
    u.track(at(0), &set(&[2]));
    let mut last = None;
    let mut gaps = Vec::new();
    for t in 0..3_000 {
        if u.due(at(t)).is_some() {
            if let Some(l) = last {
                gaps.push(t - l);
            }
            last = Some(t);
        }
    }
    assert_eq!(gaps[..3], [100, 200, 300]);
    assert!(gaps[3..].iter().all(|g| *g == 300), "{gaps:?}");
}
