//! Reconnect delays: exponential growth with random jitter, between a floor and a ceiling.
//!
//! Why jitter: when a node restarts or a network blip cuts many links at once, every peer's
//! writer fails at nearly the same instant. Without jitter they all retry at the same
//! instants (100 ms, 200 ms, 400 ms, …) and the restarted node takes every handshake at
//! once, round after round.
//!
//! Which jitter: "full jitter" above the floor. Attempt `n` (from 0) waits a delay drawn
//! uniformly from `[min, min(max, min · 2ⁿ⁺¹)]`. Compared with a ±20 % band around the
//! exponential value, retries spread over the whole window instead of staying in a narrow
//! band that moves in step for every peer, which is what decorrelates them; the expected
//! wait is also shorter, so a peer that comes back is reached sooner. The floor keeps a
//! refused connection from being retried in a tight loop, and the ceiling bounds how long a
//! peer that came back waits to be reconnected; no delay is ever outside `[min, max]`.

use std::time::Duration;

use rand::Rng;

/// The delay before each reconnect attempt of one writer. Reset after a connection succeeds.
#[derive(Clone, Debug)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    /// Upper end of the window the next delay is drawn from.
    window: Duration,
}

impl Backoff {
    /// Delays between `min` and `max` (a `max` below `min` is taken as `min`; the settings
    /// refuse that combination anyway).
    pub(crate) fn new(min: Duration, max: Duration) -> Self {
        let max = max.max(min);
        Backoff {
            min,
            max,
            window: Self::first_window(min, max),
        }
    }

    fn first_window(min: Duration, max: Duration) -> Duration {
        min.saturating_mul(2).min(max)
    }

    /// Starts over from the shortest window (after a successful connection).
    pub(crate) fn reset(&mut self) {
        self.window = Self::first_window(self.min, self.max);
    }

    /// The delay before the next attempt, drawn from `rng`; the window then doubles, up to
    /// `max`.
    pub(crate) fn next_delay(&mut self, rng: &mut impl Rng) -> Duration {
        let delay = if self.window > self.min {
            // Nanosecond resolution; u64 nanoseconds cover 584 years, and the window is at
            // most `max`.
            let lo = u64::try_from(self.min.as_nanos()).unwrap_or(u64::MAX);
            let hi = u64::try_from(self.window.as_nanos()).unwrap_or(u64::MAX);
            Duration::from_nanos(rng.random_range(lo..=hi))
        } else {
            self.min
        };
        self.window = self.window.saturating_mul(2).min(self.max);
        delay
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    const MIN: Duration = Duration::from_millis(100);
    const MAX: Duration = Duration::from_secs(5);

    /// Every delay of many long retry sequences stays within `[min, max]`, and within the
    /// attempt's window `[min, min · 2ⁿ⁺¹]`.
    #[test]
    fn delays_stay_within_min_max_and_the_attempts_window() {
        for seed in 0..200 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut b = Backoff::new(MIN, MAX);
            for attempt in 0..20u32 {
                let d = b.next_delay(&mut rng);
                let window = MIN
                    .saturating_mul(2u32.saturating_pow(attempt + 1))
                    .min(MAX);
                assert!(
                    MIN <= d && d <= window,
                    "seed {seed}, attempt {attempt}: {d:?} outside [{MIN:?}, {window:?}]"
                );
            }
        }
    }

    /// Jitter is real: peers that fail together do not retry together. Across 100 writers
    /// (different generators), the third delay takes many distinct values spread over its
    /// window, with both halves of the window used.
    #[test]
    fn delays_of_different_writers_are_spread_over_the_window() {
        let third: Vec<Duration> = (0..100)
            .map(|seed| {
                let mut rng = StdRng::seed_from_u64(seed);
                let mut b = Backoff::new(MIN, MAX);
                b.next_delay(&mut rng);
                b.next_delay(&mut rng);
                b.next_delay(&mut rng)
            })
            .collect();
        let mut distinct = third.clone();
        distinct.sort();
        distinct.dedup();
        assert!(
            distinct.len() > 90,
            "only {} distinct delays",
            distinct.len()
        );
        // Third attempt: window [100 ms, 800 ms], midpoint 450 ms.
        let mid = Duration::from_millis(450);
        let low = third.iter().filter(|d| **d < mid).count();
        assert!((20..=80).contains(&low), "{low} of 100 below the midpoint");
    }

    /// Once the window reaches `max` it stays there, and a reset starts over.
    #[test]
    fn window_caps_at_max_and_reset_starts_over() {
        let mut rng = StdRng::seed_from_u64(7);
        let mut b = Backoff::new(MIN, MAX);
        for _ in 0..10 {
            b.next_delay(&mut rng);
        }
        assert_eq!(b.window, MAX);
        b.reset();
        assert_eq!(b.window, Duration::from_millis(200));
        let d = b.next_delay(&mut rng);
        assert!(MIN <= d && d <= Duration::from_millis(200), "{d:?}");
    }

    /// Degenerate bounds: `min == max` always waits exactly that long; `max < min` is taken
    /// as `min`.
    #[test]
    fn equal_or_inverted_bounds_wait_min() {
        let mut rng = StdRng::seed_from_u64(1);
        for max in [MIN, Duration::from_millis(10)] {
            let mut b = Backoff::new(MIN, max);
            for _ in 0..5 {
                assert_eq!(b.next_delay(&mut rng), MIN);
            }
        }
    }
}
