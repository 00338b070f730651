//! Whom a rebuilding coordinator still waits for, since when, and when to say so.
//!
//! While a new coordinator is not complete, each expected member that has neither registered
//! nor answered [`Protocol::KindNotStarted`](crate::sharding::Protocol::KindNotStarted) holds
//! every new allocation of the kind back. That is safe but silent, and a member that never
//! started the kind and runs a version that cannot say so would hold it back until it leaves.
//! This tracker makes the wait visible: after a grace period the coordinator reports the
//! members it waits for, and again with a doubling interval while the wait lasts.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::Instant;
use crate::membership::UniqueAddress;

/// The longest interval between two reports of the same wait.
pub const MAX_REPORT_INTERVAL: Duration = Duration::from_secs(300);

/// The members a coordinator waits for and the report schedule.
#[derive(Debug)]
pub(super) struct Unheard {
    grace: Duration,
    /// Each member waited for, and since when.
    since: BTreeMap<UniqueAddress, Instant>,
    /// When the next report is due (only while someone is waited for).
    next_report: Option<Instant>,
    /// The interval after the next report.
    interval: Duration,
}

impl Unheard {
    /// A tracker that reports a member once it has been waited for `grace`.
    pub(super) fn new(grace: Duration) -> Self {
        Unheard {
            grace,
            since: BTreeMap::new(),
            next_report: None,
            interval: grace,
        }
    }

    /// Sets whom the coordinator waits for now: members new to the set are waited for from
    /// `now`, members no longer in it are forgotten. An empty set ends the wait, and the
    /// report interval starts over for the next one.
    pub(super) fn track(&mut self, now: Instant, missing: &BTreeSet<UniqueAddress>) {
        self.since.retain(|m, _| missing.contains(m));
        for m in missing {
            self.since.entry(m.clone()).or_insert(now);
        }
        if self.since.is_empty() {
            self.next_report = None;
            self.interval = self.grace;
        } else if self.next_report.is_none() {
            self.next_report = self.since.values().min().map(|t| *t + self.grace);
        }
    }

    /// When [`due`](Self::due) has something to report.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.next_report
    }

    /// The members waited for at least the grace period, with how long, when a report is due
    /// at `now` (then the next one is scheduled, twice as far off as the last, at most
    /// [`MAX_REPORT_INTERVAL`]).
    pub(super) fn due(&mut self, now: Instant) -> Option<Vec<(UniqueAddress, Duration)>> {
        if self.next_report.is_none_or(|t| t > now) {
            return None;
        }
        let overdue: Vec<(UniqueAddress, Duration)> = self
            .since
            .iter()
            .map(|(m, since)| (m.clone(), now.saturating_duration_since(*since)))
            .filter(|(_, waited)| *waited >= self.grace)
            .collect();
        if overdue.is_empty() {
            // Whoever was due registered meanwhile: wait for the next one's grace.
            self.next_report = self.since.values().min().map(|t| *t + self.grace);
            return None;
        }
        self.next_report = Some(now + self.interval);
        self.interval = (self.interval * 2).min(MAX_REPORT_INTERVAL.max(self.grace));
        Some(overdue)
    }
}

#[cfg(test)]
mod tests {
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
}
