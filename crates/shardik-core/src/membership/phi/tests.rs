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

/// With default settings a silent node is detected ≈5.3 s after its only
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
