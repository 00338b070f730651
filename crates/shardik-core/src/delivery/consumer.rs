//! The consumer side of reliable delivery: what an entity does with an arriving message,
//! given what it processed before.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use super::stream::{ConsumerReply, Sequenced, StreamId};
use crate::Instant;

/// How far an entity got with one producer: the newest stream it followed and the highest
/// sequence number of it that it processed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The stream.
    pub stream: StreamId,
    /// The highest sequence number processed (0: none yet).
    pub seq: u64,
    /// When the entity last processed a message of this producer (for expiry).
    pub touched: Instant,
}

/// What to do with an arriving message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Process it, then record it with [`ConsumerMarks::processed`] (in the same write as what
    /// processing it persists, for a durable entity) and confirm it.
    Deliver,
    /// Processed before: do not process it again, but confirm up to `confirmed` again (the
    /// producer did not hear the first confirmation).
    Duplicate {
        /// The highest sequence number processed of this stream.
        confirmed: u64,
    },
    /// Messages before it are missing (lost, or overtaken): drop it and tell the producer to
    /// send again from `expected`.
    Gap {
        /// The next sequence number the entity can process.
        expected: u64,
    },
    /// A stream the entity has not followed, and not marked first: the producer must send its
    /// oldest unconfirmed message of that stream again, marked first.
    NeedFirst,
    /// A message of a stream older than the one the entity follows for this producer: the
    /// producer has moved on from it (restarted, or opened a new stream after confirming all
    /// of this one). Dropped without an answer.
    Stale,
}

impl Verdict {
    /// The answer to the producer for a message with sequence number `seq`, judged so, once
    /// it is processed (for [`Verdict::Deliver`]: once what processing it wrote is durable).
    /// The entity grants `window` messages past the highest it processed. A stale message gets
    /// no answer.
    pub fn reply(self, seq: u64, window: u64) -> Option<ConsumerReply> {
        match self {
            Verdict::Deliver => Some(ConsumerReply::Confirmed {
                confirmed: seq,
                up_to: seq.saturating_add(window),
            }),
            Verdict::Duplicate { confirmed } => Some(ConsumerReply::Confirmed {
                confirmed,
                up_to: confirmed.saturating_add(window),
            }),
            Verdict::Gap { expected } => Some(ConsumerReply::Gap { expected }),
            Verdict::NeedFirst => Some(ConsumerReply::NeedFirst),
            Verdict::Stale => None,
        }
    }
}

/// What receiving one message comes to ([`ConsumerMarks::receive`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Receipt {
    /// What to do with the message.
    pub verdict: Verdict,
    /// For a message to deliver: the producer's new mark, to write in the same write as what
    /// processing the message persists.
    pub mark: Option<Mark>,
    /// Producers whose marks expired: their marks are removed by the same write.
    pub expired: Vec<Arc<str>>,
}

/// One entity's marks, per producer.
#[derive(Clone, Debug, Default)]
pub struct ConsumerMarks {
    marks: HashMap<Arc<str>, Mark>,
}

impl ConsumerMarks {
    /// No marks: an entity that has processed no reliable message (or whose marks expired).
    pub fn new() -> Self {
        Self::default()
    }

    /// Marks recovered from the entity's store.
    pub fn restore(&mut self, producer: &str, mark: Mark) {
        self.marks.insert(Arc::from(producer), mark);
    }

    /// The mark for `producer`, if any.
    pub fn mark(&self, producer: &str) -> Option<&Mark> {
        self.marks.get(producer)
    }

    /// How many producers the entity keeps a mark for.
    pub fn len(&self) -> usize {
        self.marks.len()
    }

    /// Whether the entity keeps no mark.
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }

    /// What to do with `msg`.
    pub fn judge(&self, msg: &Sequenced<'_>) -> Verdict {
        let Some(mark) = self.marks.get(msg.producer) else {
            // Nothing known of this producer: only a message marked first may start the
            // stream, wherever it starts (a producer resending from its oldest unconfirmed).
            return if msg.first {
                Verdict::Deliver
            } else {
                Verdict::NeedFirst
            };
        };
        if msg.stream < mark.stream {
            return Verdict::Stale;
        }
        if msg.stream > mark.stream {
            return if msg.first {
                Verdict::Deliver
            } else {
                Verdict::NeedFirst
            };
        }
        match msg.seq {
            seq if seq <= mark.seq => Verdict::Duplicate {
                confirmed: mark.seq,
            },
            seq if seq == mark.seq + 1 => Verdict::Deliver,
            // A message marked first is where the producer resumes the stream: everything
            // before it was confirmed to the producer, so nothing is missing.
            _ if msg.first => Verdict::Deliver,
            _ => Verdict::Gap {
                expected: mark.seq + 1,
            },
        }
    }

    /// Records that `msg`, judged [`Verdict::Deliver`], was processed at `now`: the mark moves
    /// to its stream and sequence number.
    pub fn processed(&mut self, msg: &Sequenced<'_>, now: Instant) -> Mark {
        debug_assert_eq!(
            self.judge(msg),
            Verdict::Deliver,
            "only a delivered message is recorded"
        );
        let mark = Mark {
            stream: msg.stream,
            seq: msg.seq,
            touched: now,
        };
        match self.marks.get_mut(msg.producer) {
            Some(kept) => *kept = mark,
            None => {
                self.marks.insert(Arc::from(msg.producer), mark);
            }
        }
        mark
    }

    /// Receives `msg` at `now`: judges it and, for a message to deliver, records it as
    /// processed and expires the marks older than `retention`. The runtime and the simulator
    /// both go through here, so what a durable entity writes with a message (the mark and the
    /// expiries) is decided in one place. If the write then fails, the marks are out of step
    /// with the store: drop them with the entity's incarnation and load them again.
    pub fn receive(&mut self, msg: &Sequenced<'_>, now: Instant, retention: Duration) -> Receipt {
        let verdict = self.judge(msg);
        if verdict != Verdict::Deliver {
            return Receipt {
                verdict,
                mark: None,
                expired: Vec::new(),
            };
        }
        let mark = self.processed(msg, now);
        let expired = self.expire(now, retention);
        Receipt {
            verdict,
            mark: Some(mark),
            expired,
        }
    }

    /// Drops the marks of producers not heard from for `retention` up to `now`, and returns
    /// their ids (a durable entity deletes them with its next write). A producer that comes
    /// back after that starts a new stream, which needs no mark; only a copy of an old message
    /// delayed longer than `retention` could then be processed twice, so `retention` is far
    /// beyond any resend interval.
    pub fn expire(&mut self, now: Instant, retention: Duration) -> Vec<Arc<str>> {
        let mut expired = Vec::new();
        self.marks.retain(|producer, mark| {
            let keep = now.saturating_duration_since(mark.touched) < retention;
            if !keep {
                expired.push(Arc::clone(producer));
            }
            keep
        });
        expired.sort();
        expired
    }
}

#[cfg(test)]
mod tests;
