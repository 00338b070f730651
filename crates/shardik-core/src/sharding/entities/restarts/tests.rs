//! Unit tests of the restarts of failed remembered entities.

use super::*;

fn ids(s: &str, e: &str) -> (ShardId, EntityId) {
    (ShardId::from(s), EntityId::from(e))
}

#[test]
fn restarts_come_due_in_time_order_and_only_once_due() {
    let mut r = RestartSchedule::default();
    let (s1, a) = ids("1", "a");
    let (s2, b) = ids("2", "b");
    r.schedule(&s1, &a, 300);
    r.schedule(&s2, &b, 100);
    assert_eq!(r.next_due(), Some(100));
    assert_eq!(r.pop_due(99), None);
    assert_eq!(r.pop_due(100), Some((s2.clone(), b.clone())));
    assert_eq!(r.pop_due(299), None);
    assert_eq!(r.pop_due(1_000), Some((s1, a)));
    assert_eq!(r.pop_due(1_000), None);
    assert!(r.is_empty() && r.next_due().is_none());
}

#[test]
fn a_cancelled_or_rescheduled_restart_does_not_come_due_twice() {
    let mut r = RestartSchedule::default();
    let (s, a) = ids("1", "a");
    r.schedule(&s, &a, 100);
    r.cancel(&s, &a);
    assert_eq!(r.next_due(), None);
    r.schedule(&s, &a, 200);
    r.schedule(&s, &a, 500);
    assert_eq!(
        r.next_due(),
        Some(500),
        "the later entry replaced the earlier"
    );
    assert_eq!(r.pop_due(1_000), Some((s, a)));
    assert_eq!(r.pop_due(1_000), None);
}

#[test]
fn stopping_a_shard_cancels_its_restarts_only() {
    let mut r = RestartSchedule::default();
    // "1" and "10" share a prefix: the range walk must stop at the shard's own ids.
    for (s, e) in [("1", "a"), ("1", "b"), ("10", "c"), ("0", "d")] {
        let (s, e) = ids(s, e);
        r.schedule(&s, &e, 100);
    }
    r.cancel_shard(&ShardId::from("1"));
    let mut left = Vec::new();
    while let Some((s, e)) = r.pop_due(100) {
        left.push(format!("{s}/{e}"));
    }
    left.sort();
    assert_eq!(left, ["0/d", "10/c"]);
}
