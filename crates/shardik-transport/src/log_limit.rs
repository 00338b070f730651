//! Rate-limited logging: at most one line per reason per interval, with the number of lines
//! left out since the last one.
//!
//! Whatever a stranger can trigger (a refused connection, a dropped frame) must not let them
//! flood the log: the event is still counted in a metric every time, and the log gets one line
//! per interval saying how many were suppressed.
//!
//! ```
//! use shardik_transport::log_limit::LogLimit;
//! static REFUSED: LogLimit = LogLimit::every_10s();
//! if let Some(suppressed) = REFUSED.check() {
//!     tracing::warn!(suppressed, "refusing connection: too many connections");
//! }
//! ```

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// The interval of [`LogLimit::every_10s`] and [`LogLimits::every_10s`].
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// One reason's state: when it was last logged and how many lines were left out since.
#[derive(Debug, Default)]
struct Window {
    last: Option<Instant>,
    suppressed: u64,
}

impl Window {
    fn check(&mut self, now: Instant, interval: Duration) -> Option<u64> {
        match self.last {
            Some(t) if now.saturating_duration_since(t) < interval => {
                self.suppressed = self.suppressed.saturating_add(1);
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

/// Allows one log line per interval for one reason (usable as a `static`).
#[derive(Debug)]
pub struct LogLimit {
    interval: Duration,
    window: Mutex<Window>,
}

impl LogLimit {
    /// A limit of one line per `interval`.
    pub const fn new(interval: Duration) -> Self {
        LogLimit {
            interval,
            window: Mutex::new(Window {
                last: None,
                suppressed: 0,
            }),
        }
    }

    /// A limit of one line per [`DEFAULT_INTERVAL`].
    pub const fn every_10s() -> Self {
        LogLimit::new(DEFAULT_INTERVAL)
    }

    /// `Some(n)` when a line may be logged now (`n` lines were left out since the last one);
    /// `None` when this one is to be left out (and is counted as such).
    pub fn check(&self) -> Option<u64> {
        self.check_at(Instant::now())
    }

    fn check_at(&self, now: Instant) -> Option<u64> {
        self.window
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .check(now, self.interval)
    }
}

/// Allows one log line per interval for each of several reasons, named by `&'static str`
/// (so the number of reasons is fixed by the code, never by the network).
#[derive(Debug)]
pub struct LogLimits {
    interval: Duration,
    windows: Mutex<BTreeMap<&'static str, Window>>,
}

impl LogLimits {
    /// Limits of one line per `interval` for each reason.
    pub const fn new(interval: Duration) -> Self {
        LogLimits {
            interval,
            windows: Mutex::new(BTreeMap::new()),
        }
    }

    /// Limits of one line per [`DEFAULT_INTERVAL`] for each reason.
    pub const fn every_10s() -> Self {
        LogLimits::new(DEFAULT_INTERVAL)
    }

    /// As [`LogLimit::check`], for `reason`.
    pub fn check(&self, reason: &'static str) -> Option<u64> {
        self.check_at(reason, Instant::now())
    }

    fn check_at(&self, reason: &'static str, now: Instant) -> Option<u64> {
        self.windows
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(reason)
            .or_default()
            .check(now, self.interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_number_left_out() {
        let limit = LogLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(limit.check_at(t0), Some(0), "the first line is logged");
        for i in 1..=5 {
            assert_eq!(limit.check_at(t0 + Duration::from_secs(i)), None);
        }
        assert_eq!(
            limit.check_at(t0 + Duration::from_secs(10)),
            Some(5),
            "the next line says how many were left out"
        );
        assert_eq!(limit.check_at(t0 + Duration::from_secs(11)), None);
        assert_eq!(limit.check_at(t0 + Duration::from_secs(25)), Some(1));
    }

    #[test]
    fn each_reason_has_its_own_window() {
        let limits = LogLimits::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(limits.check_at("a", t0), Some(0));
        assert_eq!(limits.check_at("b", t0), Some(0));
        assert_eq!(limits.check_at("a", t0 + Duration::from_secs(1)), None);
        assert_eq!(limits.check_at("a", t0 + Duration::from_secs(2)), None);
        assert_eq!(limits.check_at("b", t0 + Duration::from_secs(3)), None);
        assert_eq!(limits.check_at("a", t0 + Duration::from_secs(10)), Some(2));
        assert_eq!(limits.check_at("b", t0 + Duration::from_secs(10)), Some(1));
    }
}
