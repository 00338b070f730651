//! The phi-accrual failure detector and a registry of one detector per node.
//!
//! Instead of a yes/no timeout, the detector keeps a window of recent heartbeat inter-arrival
//! times and turns "how long since the last heartbeat" into a suspicion level `phi`: roughly,
//! `phi = -log10(P(a heartbeat this late))` under a normal distribution fitted to the window.
//! A node is available while `phi < threshold`. Time is always handed in by the caller.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::address::UniqueAddress;
use crate::time::Instant;

/// Settings of a [`PhiAccrualDetector`] (`pekko.cluster.failure-detector`).
#[derive(Clone, Debug, PartialEq)]
pub struct PhiAccrualConfig {
    /// Phi at or above which the node counts as unavailable. Default 8.0.
    pub threshold: f64,
    /// How many inter-arrival intervals the history keeps. Default 1000.
    pub max_sample_size: usize,
    /// Lower bound for the standard deviation, so that very regular heartbeats do not make
    /// the detector trigger on the smallest delay. Default 100 ms.
    pub min_std_deviation: Duration,
    /// Extra delay tolerated on top of the mean interval (GC pauses, transient hiccups).
    /// Default 3 s.
    pub acceptable_heartbeat_pause: Duration,
    /// The assumed heartbeat interval before any has been measured (the heartbeat interval).
    /// Default 1 s.
    pub first_heartbeat_estimate: Duration,
}

impl Default for PhiAccrualConfig {
    fn default() -> Self {
        PhiAccrualConfig {
            threshold: 8.0,
            max_sample_size: 1000,
            min_std_deviation: Duration::from_millis(100),
            acceptable_heartbeat_pause: Duration::from_secs(3),
            first_heartbeat_estimate: Duration::from_secs(1),
        }
    }
}

/// Intervals longer than this (about 12.7 days) are clamped before being squared, so the
/// running sums can never overflow; such an interval is far beyond any sane pause anyway.
const MAX_INTERVAL_MICROS: u64 = 1 << 40;

/// A bounded window of heartbeat inter-arrival intervals with running sum and sum of squares.
///
/// Intervals are kept in whole microseconds: fine enough for any heartbeat interval, and small
/// enough that sums of squares stay exact in a `u128`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeartbeatHistory {
    max_sample_size: usize,
    intervals: VecDeque<u64>,
    sum: u128,
    sum_sq: u128,
}

impl HeartbeatHistory {
    /// An empty history keeping at most `max_sample_size` intervals (at least one).
    pub fn new(max_sample_size: usize) -> Self {
        HeartbeatHistory {
            max_sample_size: max_sample_size.max(1),
            intervals: VecDeque::new(),
            sum: 0,
            sum_sq: 0,
        }
    }

    /// Appends an interval, dropping the oldest once the window is full.
    pub fn push(&mut self, interval: Duration) {
        let micros = u64::try_from(interval.as_micros())
            .unwrap_or(u64::MAX)
            .min(MAX_INTERVAL_MICROS);
        while self.intervals.len() >= self.max_sample_size {
            if let Some(old) = self.intervals.pop_front() {
                let old = u128::from(old);
                self.sum -= old;
                self.sum_sq -= old * old;
            }
        }
        self.intervals.push_back(micros);
        let m = u128::from(micros);
        self.sum += m;
        self.sum_sq += m * m;
    }

    /// Number of intervals held.
    pub fn len(&self) -> usize {
        self.intervals.len()
    }

    /// Whether no interval is held.
    pub fn is_empty(&self) -> bool {
        self.intervals.is_empty()
    }

    /// Mean interval in milliseconds (0 when empty).
    pub fn mean_ms(&self) -> f64 {
        if self.intervals.is_empty() {
            return 0.0;
        }
        self.sum as f64 / self.intervals.len() as f64 / 1e3
    }

    /// Population variance in milliseconds squared (0 when empty).
    pub fn variance_ms2(&self) -> f64 {
        if self.intervals.is_empty() {
            return 0.0;
        }
        let n = self.intervals.len() as u128;
        // n·Σx² − (Σx)² is exact in integers and never negative, unlike Σx²/n − mean² in
        // floating point, which can dip below zero for perfectly regular heartbeats.
        let exact = n
            .checked_mul(self.sum_sq)
            .zip(self.sum.checked_mul(self.sum))
            .map(|(a, b)| a - b);
        let micros2 = match exact {
            Some(num) => num as f64 / (n as f64 * n as f64),
            None => {
                let mean = self.sum as f64 / n as f64;
                (self.sum_sq as f64 / n as f64 - mean * mean).max(0.0)
            }
        };
        micros2 / 1e6
    }

    /// Standard deviation in milliseconds.
    pub fn std_deviation_ms(&self) -> f64 {
        self.variance_ms2().sqrt()
    }
}

/// Phi for a heartbeat `time_diff_ms` late, given the expected interval `mean_ms` and its
/// standard deviation `std_deviation_ms` (all in milliseconds).
///
/// Uses the logistic approximation of the normal CDF (error below 0.01 %), which unlike the
/// error function has a closed form; the two branches keep precision on either side of the
/// mean, where `1 − Φ` is close to 1 or close to 0.
pub fn phi_of(time_diff_ms: f64, mean_ms: f64, std_deviation_ms: f64) -> f64 {
    let y = (time_diff_ms - mean_ms) / std_deviation_ms;
    let e = (-y * (1.5976 + 0.070566 * y * y)).exp();
    if time_diff_ms > mean_ms {
        -(e / (1.0 + e)).log10()
    } else {
        -(1.0 - 1.0 / (1.0 + e)).log10()
    }
}

/// One monitored node's phi-accrual failure detector.
#[derive(Clone, Debug, PartialEq)]
pub struct PhiAccrualDetector {
    config: PhiAccrualConfig,
    history: HeartbeatHistory,
    last_heartbeat: Option<Instant>,
}

impl PhiAccrualDetector {
    /// A detector that has not heard any heartbeat yet.
    pub fn new(config: PhiAccrualConfig) -> Self {
        PhiAccrualDetector {
            history: Self::bootstrap_history(&config),
            config,
            last_heartbeat: None,
        }
    }

    /// Two guessed samples `mean ± mean/4` around the expected interval, so that a node that
    /// sends a single heartbeat and dies is still detected (with a deliberately wide spread,
    /// sd = mean/4, until real samples come in).
    fn bootstrap_history(config: &PhiAccrualConfig) -> HeartbeatHistory {
        let mean = config.first_heartbeat_estimate;
        let sd = mean / 4;
        let mut h = HeartbeatHistory::new(config.max_sample_size);
        h.push(mean.saturating_sub(sd));
        h.push(mean + sd);
        h
    }

    /// The settings this detector runs with.
    pub fn config(&self) -> &PhiAccrualConfig {
        &self.config
    }

    /// Records a heartbeat arriving at `now`.
    ///
    /// The first heartbeat starts monitoring with the bootstrap history. Later ones record the
    /// interval since the previous heartbeat, but only if the node was still available at
    /// `now`: the first heartbeat after a detected failure would otherwise put a huge pause
    /// into the statistics and make the detector sluggish for a long time.
    ///
    /// Returns the interval when it was recorded and is at least 2/3 of the acceptable pause
    /// (the reference logs a "heartbeat interval is growing too large" warning then).
    pub fn heartbeat(&mut self, now: Instant) -> Option<Duration> {
        let mut growing = None;
        match self.last_heartbeat {
            None => self.history = Self::bootstrap_history(&self.config),
            Some(last) => {
                if self.is_available(now) {
                    let interval = now - last;
                    let warn_at = self.config.acceptable_heartbeat_pause * 2 / 3;
                    if !warn_at.is_zero() && interval >= warn_at {
                        growing = Some(interval);
                    }
                    self.history.push(interval);
                }
            }
        }
        self.last_heartbeat = Some(now);
        growing
    }

    /// The suspicion level at `now`; 0 if no heartbeat was ever received (an unknown node is
    /// presumed healthy).
    pub fn phi(&self, now: Instant) -> f64 {
        let Some(last) = self.last_heartbeat else {
            return 0.0;
        };
        let time_diff_ms = (now - last).as_secs_f64() * 1e3;
        let mean_ms =
            self.history.mean_ms() + self.config.acceptable_heartbeat_pause.as_secs_f64() * 1e3;
        let sd_ms = self
            .history
            .std_deviation_ms()
            .max(self.config.min_std_deviation.as_secs_f64() * 1e3);
        phi_of(time_diff_ms, mean_ms, sd_ms)
    }

    /// Whether the node counts as alive at `now` (`phi < threshold`).
    pub fn is_available(&self, now: Instant) -> bool {
        self.phi(now) < self.config.threshold
    }

    /// Whether at least one heartbeat has been received.
    pub fn is_monitoring(&self) -> bool {
        self.last_heartbeat.is_some()
    }

    /// When the last heartbeat arrived.
    pub fn last_heartbeat(&self) -> Option<Instant> {
        self.last_heartbeat
    }

    /// The interval history (for metrics and tests).
    pub fn history(&self) -> &HeartbeatHistory {
        &self.history
    }
}

/// One [`PhiAccrualDetector`] per node, created on the node's first heartbeat.
///
/// Ordered by node so that iteration (metrics, logs) is deterministic.
#[derive(Clone, Debug, PartialEq)]
pub struct FailureDetectorRegistry {
    config: PhiAccrualConfig,
    detectors: BTreeMap<UniqueAddress, PhiAccrualDetector>,
}

impl FailureDetectorRegistry {
    /// An empty registry whose detectors use `config`.
    pub fn new(config: PhiAccrualConfig) -> Self {
        FailureDetectorRegistry {
            config,
            detectors: BTreeMap::new(),
        }
    }

    /// The settings new detectors get.
    pub fn config(&self) -> &PhiAccrualConfig {
        &self.config
    }

    /// Records a heartbeat from `node` at `now`, starting to monitor it if needed.
    /// Returns what [`PhiAccrualDetector::heartbeat`] returns.
    pub fn heartbeat(&mut self, node: &UniqueAddress, now: Instant) -> Option<Duration> {
        let config = &self.config;
        self.detectors
            .entry(node.clone())
            .or_insert_with(|| PhiAccrualDetector::new(config.clone()))
            .heartbeat(now)
    }

    /// Whether `node` counts as alive at `now`. Nodes never heard from are available: they
    /// are not being monitored, so nothing speaks against them.
    pub fn is_available(&self, node: &UniqueAddress, now: Instant) -> bool {
        self.detectors.get(node).is_none_or(|d| d.is_available(now))
    }

    /// Whether at least one heartbeat from `node` has been received (and it was not removed).
    pub fn is_monitoring(&self, node: &UniqueAddress) -> bool {
        self.detectors.get(node).is_some_and(|d| d.is_monitoring())
    }

    /// Phi of `node` at `now` (0 for an unmonitored node).
    pub fn phi(&self, node: &UniqueAddress, now: Instant) -> f64 {
        self.detectors.get(node).map_or(0.0, |d| d.phi(now))
    }

    /// Stops monitoring `node` and forgets its history.
    pub fn remove(&mut self, node: &UniqueAddress) {
        self.detectors.remove(node);
    }

    /// Forgets every node.
    pub fn reset(&mut self) {
        self.detectors.clear();
    }

    /// The detector of `node`, if monitored.
    pub fn get(&self, node: &UniqueAddress) -> Option<&PhiAccrualDetector> {
        self.detectors.get(node)
    }

    /// Monitored nodes and their detectors, in node order.
    pub fn iter(&self) -> impl Iterator<Item = (&UniqueAddress, &PhiAccrualDetector)> {
        self.detectors.iter()
    }

    /// Number of monitored nodes.
    pub fn len(&self) -> usize {
        self.detectors.len()
    }

    /// Whether no node is monitored.
    pub fn is_empty(&self) -> bool {
        self.detectors.is_empty()
    }
}

#[cfg(test)]
mod tests;
