//! The phi-accrual failure detector (digest §4.7) and a registry of one detector per node.
//!
//! Instead of a yes/no timeout, the detector keeps a window of recent heartbeat inter-arrival
//! times and turns "how long since the last heartbeat" into a suspicion level `phi`: roughly,
//! `phi = -log10(P(a heartbeat this late))` under a normal distribution fitted to the window.
//! A node is available while `phi < threshold`. Time is always handed in by the caller.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::address::UniqueAddress;
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
mod tests {
    use super::*;
    use crate::membership::address::Address;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Probability that a heartbeat is *not* this late, from phi (the spec's `cdf`).
    fn cdf(phi: f64) -> f64 {
        1.0 - 10f64.powf(-phi)
    }

    fn close(actual: f64, expected: f64, tol: f64) {
        assert!(
            (actual - expected).abs() <= tol,
            "expected {expected} ± {tol}, got {actual}"
        );
    }

    /// Config of AccrualFailureDetectorSpec's `createFailureDetector`: defaults but no
    /// acceptable pause.
    fn spec_config() -> PhiAccrualConfig {
        PhiAccrualConfig {
            acceptable_heartbeat_pause: Duration::ZERO,
            ..PhiAccrualConfig::default()
        }
    }

    /// Heartbeats at the cumulative sums of `intervals` (first one is the start offset);
    /// returns the detector and the time of the last heartbeat.
    fn beats(config: PhiAccrualConfig, intervals: &[u64]) -> (PhiAccrualDetector, Instant) {
        let mut fd = PhiAccrualDetector::new(config);
        let mut t = Instant::ZERO;
        for &i in intervals {
            t += ms(i);
            fd.heartbeat(t);
        }
        (fd, t)
    }

    /// AccrualFailureDetectorSpec "use good enough cumulative distribution function".
    #[test]
    fn cdf_approximation_matches_normal_distribution() {
        close(cdf(phi_of(0.0, 0.0, 10.0)), 0.5, 0.001);
        close(cdf(phi_of(6.0, 0.0, 10.0)), 0.7257, 0.001);
        close(cdf(phi_of(15.0, 0.0, 10.0)), 0.9332, 0.001);
        close(cdf(phi_of(20.0, 0.0, 10.0)), 0.97725, 0.001);
        close(cdf(phi_of(25.0, 0.0, 10.0)), 0.99379, 0.001);
        close(cdf(phi_of(35.0, 0.0, 10.0)), 0.99977, 0.001);
        close(cdf(phi_of(40.0, 0.0, 10.0)), 0.99997, 0.0001);
        for x in 0..40 {
            assert!(phi_of(x as f64, 0.0, 10.0) < phi_of((x + 1) as f64, 0.0, 10.0));
        }
        close(cdf(phi_of(22.0, 20.0, 3.0)), 0.7475, 0.001);
    }

    /// "handle outliers without losing precision or hitting exceptions".
    #[test]
    fn outliers_stay_finite() {
        close(phi_of(10.0, 0.0, 1.0), 38.0, 1.0);
        assert_eq!(phi_of(-25.0, 0.0, 1.0), 0.0);
    }

    /// "return realistic phi values" (mean 1000 ms, sd 100 ms).
    #[test]
    fn realistic_phi_values() {
        for (diff, expected) in [
            (0.0, 0.0),
            (500.0, 0.1),
            (1000.0, 0.3),
            (1200.0, 1.6),
            (1400.0, 4.7),
            (1600.0, 10.8),
            (1700.0, 15.3),
        ] {
            close(phi_of(diff, 1000.0, 100.0), expected, 0.1);
        }
        // A larger standard deviation means less suspicion for the same delay.
        assert!(phi_of(1100.0, 1000.0, 500.0) < phi_of(1100.0, 1000.0, 100.0));
    }

    #[test]
    fn phi_is_zero_without_heartbeats() {
        let fd = PhiAccrualDetector::new(spec_config());
        assert_eq!(fd.phi(Instant::from_millis(0)), 0.0);
        assert_eq!(fd.phi(Instant::from_millis(100_000)), 0.0);
        assert!(!fd.is_monitoring());
        assert!(fd.is_available(Instant::from_millis(100_000)));
        assert_eq!(fd.last_heartbeat(), None);
    }

    /// "return phi based on guess when only one heartbeat": bootstrap mean 1 s, sd 250 ms.
    #[test]
    fn phi_from_bootstrap_after_one_heartbeat() {
        let mut fd = PhiAccrualDetector::new(spec_config());
        fd.heartbeat(Instant::ZERO);
        close(fd.history().mean_ms(), 1000.0, 1e-9);
        close(fd.history().std_deviation_ms(), 250.0, 1e-9);
        close(fd.phi(Instant::from_millis(1000)), 0.3, 0.2);
        close(fd.phi(Instant::from_millis(2000)), 4.5, 0.3);
        assert!(fd.phi(Instant::from_millis(3000)) > 15.0);
    }

    /// "return phi value using first interval after second heartbeat".
    #[test]
    fn phi_positive_after_second_heartbeat() {
        let (fd, t) = beats(spec_config(), &[0]);
        assert!(fd.phi(t + ms(100)) > 0.0);
        let (fd, t) = beats(spec_config(), &[0, 100]);
        assert!(fd.phi(t + ms(100)) > 0.0);
    }

    /// "mark node as monitored after a series of successful heartbeats".
    #[test]
    fn monitored_after_heartbeats() {
        let (fd, t) = beats(spec_config(), &[0, 1000, 100]);
        assert!(fd.is_monitoring());
        assert!(fd.is_available(t + ms(100)));
        assert_eq!(fd.last_heartbeat(), Some(t));
    }

    /// "mark node as dead if heartbeat are missed" (threshold 3).
    #[test]
    fn dead_when_heartbeats_missed() {
        let config = PhiAccrualConfig {
            threshold: 3.0,
            ..spec_config()
        };
        let (fd, t) = beats(config, &[0, 1000, 100]);
        assert!(fd.is_available(t + ms(100)));
        assert!(!fd.is_available(t + ms(7100)));
    }

    /// "mark node as available if it starts heartbeat again after being marked dead": 1000
    /// regular beats, a 5 minute pause, then beats and another 7 s pause. Also checks the
    /// rule that the first interval after a failure is not recorded.
    #[test]
    fn available_again_after_failure_and_pause_not_recorded() {
        let config = PhiAccrualConfig {
            acceptable_heartbeat_pause: Duration::from_secs(3),
            ..spec_config()
        };
        let mut fd = PhiAccrualDetector::new(config);
        let mut t = Instant::ZERO;
        fd.heartbeat(t);
        for _ in 0..999 {
            t += ms(1000);
            fd.heartbeat(t);
        }
        let steady = fd.history().clone();
        let step = |fd: &mut PhiAccrualDetector, t: &mut Instant, d: u64| {
            *t += ms(d);
            let before = fd.is_available(*t);
            fd.heartbeat(*t);
            before
        };
        assert!(
            !step(&mut fd, &mut t, 5 * 60 * 1000),
            "after the long pause"
        );
        // The 5 minute interval was not recorded.
        assert_eq!(fd.history(), &steady);
        assert!(step(&mut fd, &mut t, 100));
        assert!(
            !step(&mut fd, &mut t, 900 + 100 + 7000),
            "after the 7 s pause"
        );
        assert!(step(&mut fd, &mut t, 100));
        assert!(step(&mut fd, &mut t, 900));
        assert!(
            fd.history().mean_ms() < 1001.0,
            "pauses stayed out of the stats"
        );
    }

    /// "accept some configured missing heartbeats".
    #[test]
    fn accepts_configured_missing_heartbeats() {
        let config = PhiAccrualConfig {
            acceptable_heartbeat_pause: Duration::from_secs(3),
            ..spec_config()
        };
        let (mut fd, t) = beats(config, &[0, 1000, 1000, 1000]);
        assert!(fd.is_available(t + ms(4000)));
        fd.heartbeat(t + ms(4000));
        assert!(fd.is_available(t + ms(5000)));
    }

    /// "fail after configured acceptable missing heartbeats".
    #[test]
    fn fails_after_configured_missing_heartbeats() {
        let config = PhiAccrualConfig {
            acceptable_heartbeat_pause: Duration::from_secs(3),
            ..spec_config()
        };
        let (fd, t) = beats(config, &[0, 1000, 1000, 1000, 1000, 1000]);
        assert!(fd.is_available(t + ms(500)));
        assert!(!fd.is_available(t + ms(500 + 500 + 5000)));
    }

    /// "use maxSampleSize heartbeats": once the 100 ms intervals have been pushed out by
    /// 500 ms ones, phi one mean interval after the last beat is the same as before. (The
    /// 700 ms gap is not recorded: the node was unavailable by then.)
    #[test]
    fn bounded_history_forgets_old_intervals() {
        let config = PhiAccrualConfig {
            max_sample_size: 3,
            ..spec_config()
        };
        let (fd, t) = beats(config.clone(), &[0, 100, 100, 100]);
        let phi1 = fd.phi(t + ms(100));
        let (fd, t) = beats(config, &[0, 100, 100, 100, 700, 500, 500, 500]);
        assert_eq!(fd.history().len(), 3);
        let phi2 = fd.phi(t + ms(500));
        // Both windows are uniform (sd clamped to 100 ms) and 1 mean interval has elapsed.
        close(phi2, phi1, 0.001);
    }

    /// "Statistics for heartbeats": mean/variance and the cap on sample size.
    #[test]
    fn history_statistics() {
        let mut h = HeartbeatHistory::new(20);
        for v in [100, 200, 125, 340, 130] {
            h.push(ms(v));
        }
        close(h.mean_ms(), 179.0, 1e-5);
        close(h.variance_ms2(), 7584.0, 1e-5);

        let mut one = HeartbeatHistory::new(600);
        one.push(ms(1000));
        close(one.variance_ms2(), 0.0, 1e-5);

        let mut h3 = HeartbeatHistory::new(3);
        for v in [100, 110, 90] {
            h3.push(ms(v));
        }
        close(h3.mean_ms(), 100.0, 1e-5);
        close(h3.variance_ms2(), 66.666_666_7, 1e-5);
        h3.push(ms(140));
        close(h3.mean_ms(), 113.333_333, 1e-5);
        close(h3.variance_ms2(), 422.222_222, 1e-5);
        h3.push(ms(80));
        close(h3.mean_ms(), 103.333_333, 1e-5);
        close(h3.variance_ms2(), 688.888_888_89, 1e-5);
        assert_eq!(h3.len(), 3);
    }

    /// The first instant after `last` (in 1 ms steps) at which the detector is unavailable.
    fn detection_time(fd: &PhiAccrualDetector, last: Instant) -> Duration {
        (0..60_000u64)
            .map(ms)
            .find(|&d| !fd.is_available(last + d))
            .expect("detected within a minute")
    }

    /// Digest §4.7: with default settings a silent node is detected ≈5.3 s after its only
    /// heartbeat (bootstrap stats: mean 1 s, sd 250 ms) and ≈4.5 s after the last of a
    /// steady stream of 1 s heartbeats (sd clamped to 100 ms).
    ///
    /// Analytically phi = 8 is reached at `y ≈ 5.226` standard deviations past
    /// `mean + acceptable pause = 4 s`: 4000 + 5.226·250 ≈ 5306 ms and 4000 + 5.226·100 ≈
    /// 4523 ms. We search in 1 ms steps, so allow ±2 ms around those values for the step and
    /// the rounding of `y`.
    #[test]
    fn computed_detection_time_with_defaults() {
        let config = PhiAccrualConfig::default();
        let mut fd = PhiAccrualDetector::new(config);
        fd.heartbeat(Instant::ZERO);
        let d = detection_time(&fd, Instant::ZERO);
        close(d.as_millis() as f64, 5306.0, 2.0);
        assert!(fd.is_available(Instant::from_millis(5300)));

        // 1100 steady beats push the two bootstrap samples out of the 1000-sample window.
        let mut t = Instant::ZERO;
        for _ in 0..1100 {
            t += ms(1000);
            fd.heartbeat(t);
        }
        close(fd.history().std_deviation_ms(), 0.0, 1e-9);
        let d = detection_time(&fd, t);
        close(d.as_millis() as f64, 4523.0, 2.0);
        // Around the threshold with default settings.
        assert!(fd.phi(t + ms(4500)) < 8.0);
        assert!(fd.phi(t + ms(4550)) >= 8.0);
    }

    #[test]
    fn growing_interval_is_reported() {
        let mut fd = PhiAccrualDetector::new(PhiAccrualConfig::default());
        assert_eq!(fd.heartbeat(Instant::ZERO), None);
        assert_eq!(fd.heartbeat(Instant::from_millis(1000)), None);
        assert_eq!(
            fd.heartbeat(Instant::from_millis(3000)),
            Some(ms(2000)),
            "2/3 of the 3 s acceptable pause"
        );
    }

    fn node(i: u16) -> UniqueAddress {
        UniqueAddress::new(Address::new("n", i), u64::from(i))
    }

    #[test]
    fn registry_tracks_nodes_independently() {
        let mut reg = FailureDetectorRegistry::new(PhiAccrualConfig::default());
        let (a, b) = (node(1), node(2));
        assert!(
            reg.is_available(&a, Instant::from_millis(1_000_000)),
            "unknown node"
        );
        assert!(!reg.is_monitoring(&a));
        assert_eq!(reg.phi(&a, Instant::from_millis(5)), 0.0);

        reg.heartbeat(&b, Instant::ZERO);
        reg.heartbeat(&a, Instant::from_millis(10_000));
        assert!(reg.is_monitoring(&a) && reg.is_monitoring(&b));
        let now = Instant::from_millis(11_000);
        assert!(reg.is_available(&a, now));
        assert!(!reg.is_available(&b, now));
        assert!(reg.phi(&b, now) > reg.phi(&a, now));
        let order: Vec<_> = reg.iter().map(|(n, _)| n.clone()).collect();
        assert_eq!(order, vec![a.clone(), b.clone()]);
        assert_eq!(reg.len(), 2);

        reg.remove(&b);
        assert!(!reg.is_monitoring(&b));
        assert!(
            reg.is_available(&b, now),
            "forgotten nodes are available again"
        );
        reg.reset();
        assert!(reg.is_empty());
        assert!(reg.get(&a).is_none());
    }
}
