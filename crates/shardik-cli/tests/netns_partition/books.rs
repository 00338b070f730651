//! What the clients know of each counter, with increments in flight concurrently.
//!
//! An increment is *tried* when it is sent and *acknowledged* when it is answered with the
//! counter's new value. An unanswered increment may or may not have been applied. So, with one
//! live copy of each counter and a store that keeps what it acknowledged:
//! - an acknowledged increment's value is above the count of increments acknowledged before
//!   it was sent (they were all applied before it), and at most the count tried so far;
//! - a value read at the end lies between the acknowledged and the tried counts.
//!
//! A value below the first bound is an acknowledged increment lost (or answered by a stale
//! copy); a value above the second is an increment applied twice.

/// Counts of one counter.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Increments sent.
    pub tried: u64,
    /// Increments answered with a value.
    pub acked: u64,
}

/// An increment in flight.
#[derive(Debug)]
#[must_use = "an increment in flight is settled with `acked` or `unanswered`"]
pub struct InFlight {
    counter: usize,
    acked_before: u64,
}

/// The books of every counter, and every breach of the rules above.
#[derive(Debug)]
pub struct Books {
    counts: Vec<Counts>,
    unanswered: u64,
    breaches: Vec<String>,
}

impl Books {
    /// Books for `n` counters, all at zero.
    pub fn new(n: usize) -> Books {
        Books {
            counts: vec![Counts::default(); n],
            unanswered: 0,
            breaches: Vec::new(),
        }
    }

    /// Records that an increment of `counter` is being sent.
    pub fn send(&mut self, counter: usize) -> InFlight {
        let c = &mut self.counts[counter];
        c.tried += 1;
        InFlight {
            counter,
            acked_before: c.acked,
        }
    }

    /// Records the answer `value` to `sent`, noting a breach if it is impossible.
    pub fn acked(&mut self, sent: InFlight, value: u64, via: &str) {
        let c = &mut self.counts[sent.counter];
        c.acked += 1;
        if value <= sent.acked_before || value > c.tried {
            self.breaches.push(format!(
                "c{}: an increment answered {value} via {via}, but {} increments were \
                 acknowledged before it was sent and {} sent so far",
                sent.counter, sent.acked_before, c.tried
            ));
        }
    }

    /// Records that `sent` got no value back (error, timeout, node gone).
    pub fn unanswered(&mut self, sent: InFlight) {
        let _ = sent;
        self.unanswered += 1;
    }

    /// Checks a value read once nothing is in flight.
    pub fn check_final(&self, counter: usize, value: u64) -> Result<(), String> {
        let c = self.counts[counter];
        if value < c.acked {
            return Err(format!(
                "c{counter}: value {value}, but {} increments were acknowledged: lost",
                c.acked
            ));
        }
        if value > c.tried {
            return Err(format!(
                "c{counter}: value {value}, but only {} increments were sent: one applied twice",
                c.tried
            ));
        }
        Ok(())
    }

    /// The counts of `counter`.
    pub fn counts(&self, counter: usize) -> Counts {
        self.counts[counter]
    }

    /// Increments acknowledged in all.
    pub fn total_acked(&self) -> u64 {
        self.counts.iter().map(|c| c.acked).sum()
    }

    /// Increments that got no value back.
    pub fn total_unanswered(&self) -> u64 {
        self.unanswered
    }

    /// Every impossible answer seen.
    pub fn breaches(&self) -> &[String] {
        &self.breaches
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrent_answers_are_judged_by_what_was_known_when_they_were_sent() {
        let mut b = Books::new(2);
        let first = b.send(0);
        let second = b.send(0);
        // Applied in the other order: both answers are possible.
        b.acked(second, 1, "n0");
        b.acked(first, 2, "n1");
        assert!(b.breaches().is_empty(), "{:?}", b.breaches());
        // Sent after two acknowledgements: 2 would be a stale copy's answer.
        let third = b.send(0);
        b.acked(third, 2, "n3");
        assert_eq!(b.breaches().len(), 1, "{:?}", b.breaches());
        // More than was sent: applied twice.
        let fourth = b.send(1);
        b.acked(fourth, 2, "n0");
        assert_eq!(b.breaches().len(), 2);
        assert_eq!(b.total_acked(), 4);
    }

    #[test]
    fn a_final_value_lies_between_acknowledged_and_tried() {
        let mut b = Books::new(1);
        let acked = b.send(0);
        b.acked(acked, 1, "n0");
        let lost = b.send(0);
        b.unanswered(lost);
        assert_eq!(b.counts(0), Counts { tried: 2, acked: 1 });
        assert_eq!(b.total_unanswered(), 1);
        assert!(b.check_final(0, 0).unwrap_err().contains("lost"));
        assert!(b.check_final(0, 1).is_ok());
        assert!(
            b.check_final(0, 2).is_ok(),
            "the unanswered one may have landed"
        );
        assert!(b.check_final(0, 3).unwrap_err().contains("twice"));
    }
}
