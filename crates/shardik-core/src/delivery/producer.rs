//! The producer side of reliable delivery: numbering, the window each entity grants, resends
//! until confirmed, and forgetting entities gone quiet.
//!
//! One [`Producer`] per producer id. It keeps a stream per entity it sends to ([`StreamId`]),
//! and holds each message until the entity confirms it. What it asks the driver to do comes
//! back as [`ProducerEffect`]s: send a message (to the entity, through sharding), and tell
//! that messages were confirmed (so a durable queue deletes them, and whoever waits hears).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use foldhash::fast::RandomState;

use super::stream::{ConsumerReply, StreamId};
use crate::Instant;

/// How a producer paces and bounds itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerSettings {
    /// Messages an entity may have in flight before it grants more (Akka's
    /// `flow-control-window`, 50).
    pub window: u64,
    /// Messages the producer holds unconfirmed, over all its entities; an offer beyond is
    /// refused, so a slow entity holds the producer back instead of growing its memory (Akka's
    /// `buffer-size`, 1,000).
    pub max_unconfirmed: usize,
    /// The first resend of an unconfirmed message waits this long (Akka's
    /// `resend-interval-min`, 2 s); each further one 1.5 times longer, up to `resend_max`.
    pub resend_min: Duration,
    /// The longest wait between resends (Akka's `resend-interval-max`, 30 s).
    pub resend_max: Duration,
    /// A stream with nothing unconfirmed and no activity for this long is forgotten (Akka's
    /// `cleanup-unused-after`, 120 s); the next message to that entity opens a new stream.
    pub idle_after: Duration,
}

impl Default for ProducerSettings {
    fn default() -> Self {
        ProducerSettings {
            window: 50,
            max_unconfirmed: 1_000,
            resend_min: Duration::from_secs(2),
            resend_max: Duration::from_secs(30),
            idle_after: Duration::from_secs(120),
        }
    }
}

/// What the producer asks its driver to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProducerEffect<K, P> {
    /// Send `payload` to entity `to`, with this header.
    Send {
        /// The entity.
        to: K,
        /// Its stream.
        stream: StreamId,
        /// The message's sequence number.
        seq: u64,
        /// Whether the entity may start following the stream here.
        first: bool,
        /// The message.
        payload: P,
    },
    /// Entity `to` confirmed every message of `stream` up to `seq`: a durable queue deletes
    /// them, and their offers are done.
    Confirmed {
        /// The entity.
        to: K,
        /// Its stream.
        stream: StreamId,
        /// The highest sequence number confirmed.
        seq: u64,
    },
}

/// Why an offer was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OfferRefused {
    /// The producer holds `max_unconfirmed` messages already.
    Full,
}

/// One message held until confirmed.
#[derive(Clone, Debug)]
struct Held<P> {
    seq: u64,
    payload: P,
}

/// The producer's side of one stream.
#[derive(Clone, Debug)]
struct Stream<P> {
    id: StreamId,
    /// The sequence number the next offer gets.
    next_seq: u64,
    /// Held messages, oldest first.
    unconfirmed: VecDeque<Held<P>>,
    /// Where sending stands: the held messages up to here went out (lowered to send again).
    sent_up_to: u64,
    /// The highest sequence number ever sent: an answer confirming more is not believed.
    highest_sent: u64,
    /// The highest sequence number the entity is ready for.
    granted_up_to: u64,
    /// The next message sent is marked first: the stream is new, or resumed from a durable
    /// queue, or the entity asked for it.
    mark_first: bool,
    /// The gap (the sequence number the entity expected) last answered by sending again from
    /// it. Further answers naming the same gap come from messages that left before that
    /// resend, and are not answered again: each would send the window again, and their
    /// answers would send it again, a storm that grows with every round (the resend timer
    /// covers a resend that is lost).
    gap_resent: Option<u64>,
    /// When to send what is unconfirmed again, while anything is.
    resend_at: Option<Instant>,
    /// The wait before the next resend.
    backoff: Duration,
    /// The last offer or answer.
    active_at: Instant,
    /// The deadline the stream is filed under in [`Producer::timers`], if it is filed (a
    /// stream is unfiled while [`Producer::handle_timeout`] handles it).
    filed: Option<Instant>,
}

impl<P> Stream<P> {
    /// When the stream next needs the producer: its resend while anything is held, else the
    /// moment it may be forgotten.
    fn deadline(&self, idle_after: Duration) -> Instant {
        self.resend_at.unwrap_or(self.active_at + idle_after)
    }

    /// Everything held goes out again from the oldest, marked first: the entity may have lost
    /// track of the stream (moved, passivated or restarted), or asked for it.
    fn send_again_from_oldest(&mut self) {
        if let Some(oldest) = self.unconfirmed.front() {
            self.sent_up_to = oldest.seq.saturating_sub(1);
        }
        self.mark_first = true;
    }
}

/// The producer side of reliable delivery for one producer id: see the module.
#[derive(Debug)]
pub struct Producer<K, P> {
    settings: ProducerSettings,
    epoch: u64,
    next_stream: u64,
    /// Hashed with a randomly seeded foldhash: entity ids come from users.
    streams: HashMap<K, Stream<P>, RandomState>,
    /// Every stream under its deadline, so that finding what is due costs a look at the
    /// earliest, not a pass over every stream the producer keeps.
    timers: BTreeSet<(Instant, K)>,
    unconfirmed: usize,
}

impl<K, P> Producer<K, P>
where
    K: Clone + Eq + Hash + Ord,
    P: Clone,
{
    /// A producer in its incarnation `epoch`, which must be greater than every earlier one
    /// of the same producer id (see [`StreamId`]).
    pub fn new(settings: ProducerSettings, epoch: u64) -> Self {
        Producer {
            settings,
            epoch,
            next_stream: 1,
            streams: HashMap::default(),
            timers: BTreeSet::new(),
            unconfirmed: 0,
        }
    }

    /// How the producer paces and bounds itself.
    pub fn settings(&self) -> &ProducerSettings {
        &self.settings
    }

    /// Messages held unconfirmed, over all entities.
    pub fn unconfirmed(&self) -> usize {
        self.unconfirmed
    }

    /// Entities the producer keeps a stream for.
    pub fn streams(&self) -> usize {
        self.streams.len()
    }

    /// Takes back the unconfirmed messages of a stream of an earlier incarnation, read from a
    /// durable queue: they are sent again on that stream, the first of them marked first, and
    /// later offers to `to` continue it.
    pub fn resume(
        &mut self,
        now: Instant,
        to: K,
        stream: StreamId,
        held: Vec<(u64, P)>,
        out: &mut Vec<ProducerEffect<K, P>>,
    ) {
        let Some(&(first_seq, _)) = held.first() else {
            return;
        };
        debug_assert!(held.windows(2).all(|w| w[0].0 + 1 == w[1].0), "consecutive");
        let next_seq = first_seq + held.len() as u64;
        self.unconfirmed += held.len();
        let s = Stream {
            id: stream,
            next_seq,
            unconfirmed: held
                .into_iter()
                .map(|(seq, payload)| Held { seq, payload })
                .collect(),
            sent_up_to: first_seq.saturating_sub(1),
            highest_sent: first_seq.saturating_sub(1),
            granted_up_to: first_seq.saturating_sub(1) + self.settings.window,
            mark_first: true,
            gap_resent: None,
            resend_at: None,
            backoff: self.settings.resend_min,
            active_at: now,
            filed: None,
        };
        if let Some(replaced) = self.streams.insert(to.clone(), s) {
            self.unconfirmed -= replaced.unconfirmed.len();
            if let Some(filed) = replaced.filed {
                self.timers.remove(&(filed, to.clone()));
            }
        }
        self.pump(now, &to, out);
    }

    /// Offers `payload` for entity `to`. Accepted, it gets its stream and sequence number,
    /// and is sent at once when the entity's window allows, else when it grants more.
    pub fn offer(
        &mut self,
        now: Instant,
        to: K,
        payload: P,
        out: &mut Vec<ProducerEffect<K, P>>,
    ) -> Result<(StreamId, u64), OfferRefused> {
        if self.unconfirmed >= self.settings.max_unconfirmed {
            return Err(OfferRefused::Full);
        }
        let window = self.settings.window;
        let resend_min = self.settings.resend_min;
        let (epoch, next_stream) = (self.epoch, &mut self.next_stream);
        let stream = self.streams.entry(to.clone()).or_insert_with(|| {
            let id = StreamId {
                epoch,
                number: *next_stream,
            };
            *next_stream += 1;
            Stream {
                id,
                next_seq: 1,
                unconfirmed: VecDeque::new(),
                sent_up_to: 0,
                highest_sent: 0,
                granted_up_to: window,
                mark_first: true,
                gap_resent: None,
                resend_at: None,
                backoff: resend_min,
                active_at: now,
                filed: None,
            }
        });
        let seq = stream.next_seq;
        stream.next_seq += 1;
        stream.unconfirmed.push_back(Held { seq, payload });
        stream.active_at = now;
        let id = stream.id;
        self.unconfirmed += 1;
        pump(stream, &mut self.timers, &self.settings, now, &to, out);
        Ok((id, seq))
    }

    /// What entity `to` answered about `stream`. Answers about a stream the producer no
    /// longer keeps are ignored.
    pub fn on_reply(
        &mut self,
        now: Instant,
        to: &K,
        stream: StreamId,
        reply: ConsumerReply,
        out: &mut Vec<ProducerEffect<K, P>>,
    ) {
        let Some(s) = self.streams.get_mut(to) else {
            return;
        };
        if s.id != stream {
            return;
        }
        s.active_at = now;
        let processed = match reply {
            ConsumerReply::Confirmed { confirmed, up_to } => {
                s.granted_up_to = s.granted_up_to.max(up_to);
                confirmed
            }
            ConsumerReply::Gap { expected } => expected.saturating_sub(1),
            ConsumerReply::NeedFirst => 0,
        }
        // An entity can have processed only what was sent to it; a claim beyond (a confused
        // or misbehaving peer) must not drop messages it never received.
        .min(s.highest_sent);
        let before = s.unconfirmed.len();
        while s.unconfirmed.front().is_some_and(|h| h.seq <= processed) {
            s.unconfirmed.pop_front();
        }
        let confirmed_now = before - s.unconfirmed.len();
        self.unconfirmed -= confirmed_now;
        if confirmed_now > 0 {
            out.push(ProducerEffect::Confirmed {
                to: to.clone(),
                stream,
                seq: processed,
            });
            // Progress: the next silence is waited out from the shortest interval again.
            s.backoff = self.settings.resend_min;
        }
        match reply {
            ConsumerReply::Confirmed { .. } => s.gap_resent = None,
            // What the entity dropped goes again, in order, from the oldest held: once per gap.
            ConsumerReply::Gap { expected } => {
                if s.gap_resent != Some(expected) {
                    s.gap_resent = Some(expected);
                    s.sent_up_to = processed;
                }
            }
            ConsumerReply::NeedFirst => {
                s.gap_resent = None;
                s.send_again_from_oldest();
            }
        }
        s.resend_at = if s.unconfirmed.is_empty() {
            None
        } else {
            Some(now + s.backoff)
        };
        self.pump(now, to, out);
    }

    /// When [`handle_timeout`](Self::handle_timeout) has something to do: the earliest resend
    /// or the earliest moment a quiet stream may be forgotten.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.first().map(|(at, _)| *at)
    }

    /// Sends again what no answer confirmed in time (the oldest marked first, since the entity
    /// may have lost track of the stream: moved, passivated or restarted), backing off; and
    /// forgets streams with nothing held that have been quiet for `idle_after`.
    pub fn handle_timeout(&mut self, now: Instant, out: &mut Vec<ProducerEffect<K, P>>) {
        let idle_after = self.settings.idle_after;
        let resend_max = self.settings.resend_max;
        // In deadline order, then by entity: a simulated run replays the same sends.
        while let Some((at, to)) = self.timers.first().cloned()
            && at <= now
        {
            self.timers.pop_first();
            let Some(s) = self.streams.get_mut(&to) else {
                continue;
            };
            s.filed = None;
            if s.unconfirmed.is_empty() {
                if now >= s.active_at + idle_after {
                    self.streams.remove(&to);
                } else {
                    refile(s, &mut self.timers, idle_after, &to);
                }
                continue;
            }
            s.send_again_from_oldest();
            s.backoff = (s.backoff * 3 / 2).min(resend_max);
            s.resend_at = Some(now + s.backoff);
            self.pump(now, &to, out);
        }
    }

    /// Sends the held messages of `to`'s stream that were not sent yet and fit its window.
    fn pump(&mut self, now: Instant, to: &K, out: &mut Vec<ProducerEffect<K, P>>) {
        if let Some(s) = self.streams.get_mut(to) {
            pump(s, &mut self.timers, &self.settings, now, to, out);
        }
    }
}

/// Sends the held messages of `to`'s stream `s` that were not sent yet and fit its window, in
/// order, and files the stream under its deadline. (A function of the stream, not of the
/// producer: an offer looks its stream up once.)
fn pump<K, P>(
    s: &mut Stream<P>,
    timers: &mut BTreeSet<(Instant, K)>,
    settings: &ProducerSettings,
    now: Instant,
    to: &K,
    out: &mut Vec<ProducerEffect<K, P>>,
) where
    K: Clone + Ord,
    P: Clone,
{
    // Held messages are numbered consecutively: the first one not sent yet is found by its
    // number, not by walking past the ones already sent.
    let unsent = s.unconfirmed.front().map_or(0, |oldest| {
        usize::try_from(s.sent_up_to.saturating_add(1).saturating_sub(oldest.seq))
            .unwrap_or(usize::MAX)
            .min(s.unconfirmed.len())
    });
    for held in s.unconfirmed.range(unsent..) {
        if held.seq > s.granted_up_to {
            break;
        }
        out.push(ProducerEffect::Send {
            to: to.clone(),
            stream: s.id,
            seq: held.seq,
            first: std::mem::take(&mut s.mark_first),
            payload: held.payload.clone(),
        });
        s.sent_up_to = held.seq;
        s.highest_sent = s.highest_sent.max(held.seq);
    }
    if s.resend_at.is_none() && !s.unconfirmed.is_empty() {
        s.resend_at = Some(now + s.backoff);
    }
    refile(s, timers, settings.idle_after, to);
}

/// Files `to`'s stream `s` under its current deadline, if it is not filed there already.
fn refile<K: Clone + Ord, P>(
    s: &mut Stream<P>,
    timers: &mut BTreeSet<(Instant, K)>,
    idle_after: Duration,
    to: &K,
) {
    let deadline = s.deadline(idle_after);
    if s.filed == Some(deadline) {
        return;
    }
    if let Some(filed) = s.filed.take() {
        timers.remove(&(filed, to.clone()));
    }
    timers.insert((deadline, to.clone()));
    s.filed = Some(deadline);
}

#[cfg(test)]
mod tests;
