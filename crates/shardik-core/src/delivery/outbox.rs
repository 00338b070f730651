//! A producer with its queue: the [`Producer`], and the rule that, with a durable queue,
//! nothing leaves before it is stored.
//!
//! Offers are taken at any time, also while a write to the durable queue is under way; the
//! driver asks [`Outbox::next_step`] what to do, and gets either effects to carry out or
//! accepted messages to store in one write. While a write is under way, nothing is released:
//! what the core asks for meanwhile may send a message of that write or of the next one, so
//! it waits, and goes out with (after) the next write. Messages accepted meanwhile wait for
//! that next write, which therefore carries all of them at once: the store's latency sets how
//! often the producer writes, not how much it accepts.

use std::hash::Hash;

use super::producer::{OfferRefused, Producer, ProducerEffect, ProducerSettings};
use super::stream::{ConsumerReply, StreamId};
use crate::Instant;

/// What the driver does next ([`Outbox::next_step`]).
#[derive(Debug, PartialEq, Eq)]
pub enum OutboxStep<K, P, W> {
    /// Carry these out, in order: send, and delete what was confirmed from a durable queue.
    CarryOut(Vec<ProducerEffect<K, P>>),
    /// Store these accepted messages, in order, in one write, then call
    /// [`Outbox::stored`] with its outcome.
    Store(Vec<W>),
}

/// A [`Producer`] and what it has yet to release: see the module. `W` is what the driver
/// needs to store an accepted message and answer whoever offered it.
#[derive(Debug)]
pub struct Outbox<K, P, W> {
    core: Producer<K, P>,
    /// What the core asked for and was not released yet, in order.
    effects: Vec<ProducerEffect<K, P>>,
    /// Accepted messages not yet handed over to be stored, in order.
    unstored: Vec<W>,
    /// While a write is under way: what the core asked for before it was handed over, released
    /// once it is stored.
    writing: Option<Vec<ProducerEffect<K, P>>>,
}

impl<K, P, W> Outbox<K, P, W>
where
    K: Clone + Eq + Hash + Ord,
    P: Clone,
{
    /// An outbox around `core`, with what the core asked for already (resuming a durable
    /// queue's messages, which are stored).
    pub fn new(core: Producer<K, P>, effects: Vec<ProducerEffect<K, P>>) -> Self {
        Outbox {
            core,
            effects,
            unstored: Vec::new(),
            writing: None,
        }
    }

    /// The producer.
    pub fn core(&self) -> &Producer<K, P> {
        &self.core
    }

    /// How the producer paces and bounds itself.
    pub fn settings(&self) -> &ProducerSettings {
        self.core.settings()
    }

    /// Messages held unconfirmed (accepted, stored or not).
    pub fn unconfirmed(&self) -> usize {
        self.core.unconfirmed()
    }

    /// Whether the producer holds as many unconfirmed messages as it may: an offer now is
    /// refused.
    pub fn is_full(&self) -> bool {
        self.core.unconfirmed() >= self.core.settings().max_unconfirmed
    }

    /// Whether a write is under way.
    pub fn is_writing(&self) -> bool {
        self.writing.is_some()
    }

    /// Whether anything waits to be released or stored.
    pub fn has_work(&self) -> bool {
        !self.effects.is_empty() || !self.unstored.is_empty()
    }

    /// Offers `payload` for `to`, for a producer whose queue is in memory: accepted, it is
    /// numbered, and released as the window allows.
    pub fn offer(
        &mut self,
        now: Instant,
        to: K,
        payload: P,
    ) -> Result<(StreamId, u64), OfferRefused> {
        self.core.offer(now, to, payload, &mut self.effects)
    }

    /// Offers `payload` for `to`, for a producer with a durable queue: accepted, it is
    /// numbered, and what `row` makes of its place goes in the next write; nothing of the
    /// message leaves before that write is stored.
    pub fn offer_stored(
        &mut self,
        now: Instant,
        to: K,
        payload: P,
        row: impl FnOnce(StreamId, u64) -> W,
    ) -> Result<(StreamId, u64), OfferRefused> {
        let (stream, seq) = self.core.offer(now, to, payload, &mut self.effects)?;
        self.unstored.push(row(stream, seq));
        Ok((stream, seq))
    }

    /// What entity `to` answered about `stream` (see [`Producer::on_reply`]).
    pub fn on_reply(&mut self, now: Instant, to: &K, stream: StreamId, reply: ConsumerReply) {
        self.core
            .on_reply(now, to, stream, reply, &mut self.effects);
    }

    /// When [`handle_timeout`](Self::handle_timeout) has something to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.core.poll_timeout()
    }

    /// Resends and forgets what is due (see [`Producer::handle_timeout`]).
    pub fn handle_timeout(&mut self, now: Instant) {
        self.core.handle_timeout(now, &mut self.effects);
    }

    /// What to do next: nothing while a write is under way; else store what was accepted (and
    /// hold what the core asked for until it is stored), else carry out what the core asked
    /// for.
    pub fn next_step(&mut self) -> Option<OutboxStep<K, P, W>> {
        if self.writing.is_some() {
            return None;
        }
        if !self.unstored.is_empty() {
            self.writing = Some(std::mem::take(&mut self.effects));
            return Some(OutboxStep::Store(std::mem::take(&mut self.unstored)));
        }
        if self.effects.is_empty() {
            return None;
        }
        Some(OutboxStep::CarryOut(std::mem::take(&mut self.effects)))
    }

    /// The write under way is stored: what waited for it, to carry out.
    pub fn stored(&mut self) -> Vec<ProducerEffect<K, P>> {
        self.writing.take().unwrap_or_default()
    }

    /// The write under way failed: what waited for it is dropped (it may send messages that
    /// are not stored), and so is everything not released yet. Returns the accepted messages
    /// that were waiting for a later write, whose offerers must hear that they were not
    /// stored. The producer must not be used any more: it holds messages the queue may not.
    pub fn write_failed(&mut self) -> Vec<W> {
        self.writing = None;
        self.effects.clear();
        std::mem::take(&mut self.unstored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(window: u64) -> ProducerSettings {
        ProducerSettings {
            window,
            ..ProducerSettings::default()
        }
    }

    /// The sequence numbers `effects` send.
    fn seqs(effects: &[ProducerEffect<&'static str, u32>]) -> Vec<u64> {
        effects
            .iter()
            .filter_map(|e| match e {
                ProducerEffect::Send { seq, .. } => Some(*seq),
                ProducerEffect::Confirmed { .. } => None,
            })
            .collect()
    }

    fn sends<W>(step: Option<OutboxStep<&'static str, u32, W>>) -> Vec<u64> {
        match step {
            Some(OutboxStep::CarryOut(effects)) => seqs(&effects),
            _ => panic!("expected effects to carry out"),
        }
    }

    #[test]
    fn without_a_durable_queue_offers_are_released_at_once() {
        let mut outbox: Outbox<&str, u32, ()> = Outbox::new(Producer::new(settings(5), 1), vec![]);
        outbox.offer(Instant::ZERO, "a", 1).unwrap();
        outbox.offer(Instant::ZERO, "a", 2).unwrap();
        assert_eq!(sends(outbox.next_step()), vec![1, 2]);
        assert_eq!(outbox.next_step(), None);
    }

    #[test]
    fn nothing_leaves_before_its_write_is_stored_even_when_the_window_opens_meanwhile() {
        let mut outbox: Outbox<&str, u32, u64> = Outbox::new(Producer::new(settings(1), 1), vec![]);
        let (stream, _) = outbox
            .offer_stored(Instant::ZERO, "a", 1, |_, seq| seq)
            .unwrap();
        assert_eq!(outbox.next_step(), Some(OutboxStep::Store(vec![1])));
        // Offers while the write is under way wait for the next write.
        outbox
            .offer_stored(Instant::ZERO, "a", 2, |_, seq| seq)
            .unwrap();
        outbox
            .offer_stored(Instant::ZERO, "a", 3, |_, seq| seq)
            .unwrap();
        assert_eq!(outbox.next_step(), None);
        let first = outbox.stored();
        assert_eq!(first.len(), 1, "message 1 goes once stored");
        // The entity confirms 1 and grants up to 3: the core would send 2 and 3, which are
        // not stored yet.
        outbox.on_reply(
            Instant::ZERO,
            &"a",
            stream,
            ConsumerReply::Confirmed {
                confirmed: 1,
                up_to: 3,
            },
        );
        assert_eq!(
            outbox.next_step(),
            Some(OutboxStep::Store(vec![2, 3])),
            "both wait for one write"
        );
        assert_eq!(outbox.next_step(), None, "nothing is released meanwhile");
        let released = outbox.stored();
        assert_eq!(seqs(&released), vec![2, 3]);
        assert!(
            released
                .iter()
                .any(|e| matches!(e, ProducerEffect::Confirmed { seq: 1, .. })),
            "the confirmation of 1 waited too"
        );
    }

    #[test]
    fn a_failed_write_releases_nothing_and_returns_the_later_offers() {
        let mut outbox: Outbox<&str, u32, u64> = Outbox::new(Producer::new(settings(5), 1), vec![]);
        outbox
            .offer_stored(Instant::ZERO, "a", 1, |_, seq| seq)
            .unwrap();
        assert_eq!(outbox.next_step(), Some(OutboxStep::Store(vec![1])));
        outbox
            .offer_stored(Instant::ZERO, "a", 2, |_, seq| seq)
            .unwrap();
        assert_eq!(outbox.write_failed(), vec![2]);
        assert_eq!(outbox.next_step(), None);
    }
}
