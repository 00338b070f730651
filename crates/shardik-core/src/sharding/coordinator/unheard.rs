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
mod tests;
