//! Who observes whom as unreachable: per-observer rows, merged by observer version.

use std::collections::{BTreeMap, BTreeSet};

use crate::address::UniqueAddress;

/// One observer's verdict on one subject.
#[derive(
    Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize,
)]
pub enum ReachabilityStatus {
    /// Heartbeats arrive.
    Reachable,
    /// The failure detector gave up on it.
    Unreachable,
    /// Known dead for good (a new incarnation replaced it, or it was quarantined). Sticky.
    Terminated,
}

/// One observer's rows: its version and the subjects it does not see as reachable.
#[derive(Clone, PartialEq, Eq, Default, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct ObserverRows {
    /// Bumped on every change the observer makes.
    pub version: u64,
    /// Subject → status; only Unreachable/Terminated are kept (a fully reachable row set is empty).
    pub subjects: BTreeMap<UniqueAddress, ReachabilityStatus>,
}

/// The reachability table: per observer, its verdicts on subjects, under a version the
/// observer bumps on every change, so that a merge keeps the newer rows of each observer.
/// Only an observer changes its own rows.
#[derive(Clone, PartialEq, Eq, Default, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Reachability {
    observers: BTreeMap<UniqueAddress, ObserverRows>,
}

impl Reachability {
    /// An empty table: everyone reachable.
    pub fn new() -> Self {
        Self::default()
    }

    fn change(
        &mut self,
        observer: &UniqueAddress,
        subject: &UniqueAddress,
        status: ReachabilityStatus,
    ) {
        let rows = self.observers.entry(observer.clone()).or_default();
        let current = rows
            .subjects
            .get(subject)
            .copied()
            .unwrap_or(ReachabilityStatus::Reachable);
        if current == status || current == ReachabilityStatus::Terminated {
            return;
        }
        rows.version += 1;
        if status == ReachabilityStatus::Reachable {
            rows.subjects.remove(subject);
        } else {
            rows.subjects.insert(subject.clone(), status);
        }
    }

    /// `observer` now sees `subject` as unreachable.
    pub fn unreachable(&mut self, observer: &UniqueAddress, subject: &UniqueAddress) {
        self.change(observer, subject, ReachabilityStatus::Unreachable);
    }

    /// `observer` sees `subject` again (no-op if Terminated).
    pub fn reachable(&mut self, observer: &UniqueAddress, subject: &UniqueAddress) {
        self.change(observer, subject, ReachabilityStatus::Reachable);
    }

    /// `observer` records `subject` as gone for good.
    pub fn terminated(&mut self, observer: &UniqueAddress, subject: &UniqueAddress) {
        self.change(observer, subject, ReachabilityStatus::Terminated);
    }

    /// Aggregated status of `subject`: Terminated if anyone says so, else Unreachable if
    /// anyone says so, else Reachable.
    pub fn status(&self, subject: &UniqueAddress) -> ReachabilityStatus {
        self.status_by(subject, |_| true)
    }

    /// Like [`status`](Self::status), counting only observers for which `count_observer` holds.
    pub fn status_by(
        &self,
        subject: &UniqueAddress,
        count_observer: impl Fn(&UniqueAddress) -> bool,
    ) -> ReachabilityStatus {
        let mut worst = ReachabilityStatus::Reachable;
        for (obs, rows) in &self.observers {
            if !count_observer(obs) {
                continue;
            }
            if let Some(&s) = rows.subjects.get(subject) {
                worst = worst.max(s);
            }
        }
        worst
    }

    /// Subjects that some observer accepted by `count_observer` sees as unreachable or
    /// terminated: what [`status_by`](Self::status_by) says is not Reachable, for every
    /// subject at once, in one pass over the table (asking `status_by` of each member walks
    /// every observer row per member, which is quadratic in a large cluster).
    pub fn unreachable_by(
        &self,
        count_observer: impl Fn(&UniqueAddress) -> bool,
    ) -> BTreeSet<UniqueAddress> {
        self.observers
            .iter()
            .filter(|(obs, _)| count_observer(obs))
            .flat_map(|(_, rows)| rows.subjects.keys().cloned())
            .collect()
    }

    /// Whether anyone sees `subject` as unreachable or terminated.
    pub fn is_reachable(&self, subject: &UniqueAddress) -> bool {
        self.status(subject) == ReachabilityStatus::Reachable
    }

    /// Whether `observer` itself sees `subject` as reachable.
    pub fn is_reachable_from(&self, observer: &UniqueAddress, subject: &UniqueAddress) -> bool {
        self.observers
            .get(observer)
            .and_then(|r| r.subjects.get(subject))
            .is_none()
    }

    /// Subjects that some observer sees as unreachable or terminated.
    pub fn all_unreachable_or_terminated(&self) -> BTreeSet<UniqueAddress> {
        self.unreachable_by(|_| true)
    }

    /// Subjects `observer` sees as unreachable or terminated.
    pub fn unreachable_from(&self, observer: &UniqueAddress) -> BTreeSet<UniqueAddress> {
        self.observers
            .get(observer)
            .map(|r| r.subjects.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Every non-reachable record as `(observer, subject, status)`, in order.
    pub fn records(
        &self,
    ) -> impl Iterator<Item = (&UniqueAddress, &UniqueAddress, ReachabilityStatus)> {
        self.observers
            .iter()
            .flat_map(|(o, r)| r.subjects.iter().map(move |(s, st)| (o, s, *st)))
    }

    /// Observer → rows, for the wire and for inspection.
    pub fn observers(&self) -> &BTreeMap<UniqueAddress, ObserverRows> {
        &self.observers
    }

    /// Rebuilds a table from observer rows (wire decoding).
    pub fn from_observers(observers: BTreeMap<UniqueAddress, ObserverRows>) -> Self {
        Reachability { observers }
    }

    /// The version `observer` has reached (0 if it never changed anything).
    pub fn observer_version(&self, observer: &UniqueAddress) -> u64 {
        self.observers.get(observer).map_or(0, |r| r.version)
    }

    /// Merge: per observer, the rows of the higher version win whole; rows are restricted to
    /// `members` (as observers and as subjects).
    pub fn merge(&self, other: &Reachability, members: &BTreeSet<UniqueAddress>) -> Reachability {
        let mut out = BTreeMap::new();
        let observers: BTreeSet<&UniqueAddress> = self
            .observers
            .keys()
            .chain(other.observers.keys())
            .collect();
        for obs in observers {
            if !members.contains(obs) {
                continue;
            }
            let pick = match (self.observers.get(obs), other.observers.get(obs)) {
                (Some(a), Some(b)) => {
                    if b.version > a.version {
                        b
                    } else {
                        a
                    }
                }
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => continue,
            };
            let mut rows = pick.clone();
            rows.subjects.retain(|s, _| members.contains(s));
            out.insert(obs.clone(), rows);
        }
        Reachability { observers: out }
    }

    /// Forgets `nodes` as observers and as subjects (they were removed from the cluster).
    pub fn remove(&mut self, nodes: &[UniqueAddress]) {
        for n in nodes {
            self.observers.remove(n);
        }
        for rows in self.observers.values_mut() {
            for n in nodes {
                rows.subjects.remove(n);
            }
        }
    }

    /// Drops the observations made by `observer` (used when counting with Down observers excluded).
    pub fn without_observations_of(&self, observer: &UniqueAddress) -> Reachability {
        let mut r = self.clone();
        r.observers.remove(observer);
        r
    }
}

#[cfg(test)]
mod tests;
