//! Invariants of reliable delivery, checked as producers offer, send and hear confirmations
//! and as the store commits the durable entities' writes, and once more at the end of a run.
//!
//! A message is *processed* when the store commits the write that records its mark (its
//! events and its mark, or its mark alone for a command that persists nothing): that is the
//! one place a durable entity records having processed it. The checker keeps every offer the
//! producers' cores took, where it stands in its stream, and holds the run to:
//!
//! * **(i) At most once.** No offer is processed twice (its events and its mark are
//!   committed once; the durability checker also sees its events in the journals once).
//! * **(ii) In order.** Per producer and entity, offers are processed in the order their
//!   producer accepted them: stream, then sequence number (a producer's streams to one entity
//!   only grow).
//! * **(iii) Exactly once, in the end.** Once the run has healed and settled, every offer a
//!   producer accepted (stored in its durable queue and answered) has been processed, if the
//!   producer runs (started again from its queue after a crash).
//! * **(iv) Confirmed means committed.** When a producer hears that an entity confirmed a
//!   stream up to a sequence number, every message of that stream up to it is processed.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;

use shardik_core::Instant;
use shardik_core::delivery::StreamId;
use shardik_persistence::{AtomicWrite, MarkChange, PersistenceId};

use super::messages::EventRec;
use super::reliable::persists_nothing;

/// Counts of reliable delivery over a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReliableStats {
    /// Offers the producers' cores took (numbered in a stream).
    pub offered: usize,
    /// Of those, offers stored in a durable queue and answered as accepted.
    pub accepted: usize,
    /// Offers processed (their write committed).
    pub processed: usize,
    /// Offers their producer heard confirmed.
    pub confirmed: usize,
    /// Messages sent (first sends and resends).
    pub sent: usize,
    /// Of those, resends of a message sent before.
    pub resent: usize,
    /// Messages an entity judged not to process (duplicates, gaps, unknown or stale streams).
    pub judged: usize,
    /// Producer incarnations started.
    pub producer_starts: usize,
    /// Of those, starts of a producer that had run before (its node restarted, or the
    /// producer was stopped and started again).
    pub producer_restarts: usize,
}

impl ReliableStats {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &ReliableStats) {
        self.offered += other.offered;
        self.accepted += other.accepted;
        self.processed += other.processed;
        self.confirmed += other.confirmed;
        self.sent += other.sent;
        self.resent += other.resent;
        self.judged += other.judged;
        self.producer_starts += other.producer_starts;
        self.producer_restarts += other.producer_restarts;
    }
}

impl fmt::Display for ReliableStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "reliable: accepted {} (offered {}), processed {}, confirmed {}, sent {} \
             (resent {}), judged {}, producer restarts {} (starts {})",
            self.accepted,
            self.offered,
            self.processed,
            self.confirmed,
            self.sent,
            self.resent,
            self.judged,
            self.producer_restarts,
            self.producer_starts
        )
    }
}

/// One offer the checker follows.
struct OfferRec {
    producer: Arc<str>,
    pid: PersistenceId,
    stream: StreamId,
    seq: u64,
    accepted: bool,
    processed: u32,
    confirmed: bool,
    sends: u32,
}

/// Where a message stands: its producer, its entity's journal, its stream and number.
type Place = (Arc<str>, PersistenceId, StreamId, u64);

/// Collects violations of the reliable-delivery invariants.
#[derive(Default)]
pub struct DeliveryChecker {
    offers: BTreeMap<u64, OfferRec>,
    places: BTreeMap<Place, u64>,
    /// Per producer and entity, the place of the last offer processed.
    last: BTreeMap<(Arc<str>, PersistenceId), (StreamId, u64)>,
    stats: ReliableStats,
    violations: Vec<String>,
}

impl DeliveryChecker {
    /// Violations found so far.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// The counts so far.
    pub fn stats(&self) -> &ReliableStats {
        &self.stats
    }

    fn violation(&mut self, now: Instant, what: String) {
        self.violations.push(format!("{now:?} {what}"));
    }

    /// A producer incarnation started (`again`: its producer had run before).
    pub fn producer_started(&mut self, again: bool) {
        self.stats.producer_starts += 1;
        self.stats.producer_restarts += usize::from(again);
    }

    /// `producer`'s core took `offer` for the entity of journal `pid`, as message `seq` of
    /// `stream`.
    pub fn offered(
        &mut self,
        now: Instant,
        offer: u64,
        producer: &Arc<str>,
        pid: PersistenceId,
        stream: StreamId,
        seq: u64,
    ) {
        let place = (Arc::clone(producer), pid.clone(), stream, seq);
        if let Some(other) = self.places.insert(place, offer) {
            // A producer started from its queue continues the streams it finds there, so it
            // numbers its next offer where an offer of the incarnation before may have been:
            // one the queue never got (its node crashed before it was stored), which was
            // therefore neither accepted nor sent. Anything else is one place for two.
            let before = &self.offers[&other];
            if before.accepted || before.sends > 0 {
                let what = format!(
                    "{producer}: offers {other} and {offer} both numbered {seq} of {stream:?} \
                     to {pid}"
                );
                self.violation(now, what);
            }
        }
        self.stats.offered += 1;
        self.offers.insert(
            offer,
            OfferRec {
                producer: Arc::clone(producer),
                pid,
                stream,
                seq,
                accepted: false,
                processed: 0,
                confirmed: false,
                sends: 0,
            },
        );
    }

    /// Offers stored in their producer's queue and answered as accepted.
    pub fn accepted(&mut self, offers: &[u64]) {
        for offer in offers {
            if let Some(rec) = self.offers.get_mut(offer) {
                rec.accepted = true;
                self.stats.accepted += 1;
            }
        }
    }

    /// A producer sent `offer` (for the first time, or again).
    pub fn sent(&mut self, offer: u64) {
        self.stats.sent += 1;
        if let Some(rec) = self.offers.get_mut(&offer) {
            rec.sends += 1;
            if rec.sends > 1 {
                self.stats.resent += 1;
            }
        }
    }

    /// An entity judged a message not to be processed, and answered it (or not) at once.
    pub fn judged(&mut self) {
        self.stats.judged += 1;
    }

    /// The store committed `write`: the offer whose mark it sets is processed ((i), (ii)).
    pub fn committed(&mut self, now: Instant, write: &AtomicWrite) {
        let pid = &write.persistence_id;
        for change in &write.marks {
            let MarkChange::Set(mark) = change else {
                continue;
            };
            let stream = StreamId {
                epoch: mark.epoch,
                number: mark.stream,
            };
            let place = (Arc::clone(&mark.producer), pid.clone(), stream, mark.seq);
            let Some(&offer) = self.places.get(&place) else {
                let what = format!(
                    "{pid}: a mark for message {} of {stream:?} of {}, which no producer offered",
                    mark.seq, mark.producer
                );
                self.violation(now, what);
                continue;
            };
            self.processed(now, write, offer, place);
        }
    }

    fn processed(&mut self, now: Instant, write: &AtomicWrite, offer: u64, place: Place) {
        let (producer, pid, stream, seq) = place;
        self.stats.processed += 1;
        let rec = self
            .offers
            .get_mut(&offer)
            .expect("every place has its offer");
        rec.processed += 1;
        if rec.processed > 1 {
            let what = format!(
                "(i) {pid}: offer {offer} (message {seq} of {stream:?} of {producer}) processed \
                 {} times",
                rec.processed
            );
            self.violation(now, what);
        }
        let events: Vec<Option<u64>> = write
            .events
            .iter()
            .map(|e| EventRec::from_payload(&e.payload).ok().map(|ev| ev.msg))
            .collect();
        let whole = if persists_nothing(offer) {
            events.is_empty()
        } else {
            !events.is_empty() && events.iter().all(|m| *m == Some(offer))
        };
        if !whole {
            let what = format!(
                "{pid}: the write marking offer {offer} as processed carries events of {events:?}"
            );
            self.violation(now, what);
        }
        let key = (Arc::clone(&producer), pid.clone());
        if let Some(&(last_stream, last_seq)) = self.last.get(&key)
            && (stream, seq) <= (last_stream, last_seq)
        {
            let what = format!(
                "(ii) {pid}: message {seq} of {stream:?} of {producer} (offer {offer}) processed \
                 after message {last_seq} of {last_stream:?}"
            );
            self.violation(now, what);
        }
        self.last.insert(key, (stream, seq));
    }

    /// `producer` heard the entity of journal `pid` confirm `stream` up to `seq`: every
    /// message of it up to there must be processed (iv).
    pub fn confirmed(
        &mut self,
        now: Instant,
        producer: &Arc<str>,
        pid: &PersistenceId,
        stream: StreamId,
        seq: u64,
    ) {
        let from = (Arc::clone(producer), pid.clone(), stream, 0);
        let to = (Arc::clone(producer), pid.clone(), stream, seq);
        let offers: Vec<u64> = self.places.range(from..=to).map(|(_, o)| *o).collect();
        for offer in offers {
            let rec = self
                .offers
                .get_mut(&offer)
                .expect("every place has its offer");
            if rec.confirmed {
                continue;
            }
            rec.confirmed = true;
            self.stats.confirmed += 1;
            if rec.processed == 0 {
                let what = format!(
                    "(iv) {pid}: offer {offer} (message {} of {stream:?} of {producer}) \
                     confirmed to its producer before it was processed",
                    rec.seq
                );
                self.violation(now, what);
            }
        }
    }

    /// Producers that still hold what they were handed, at the end of a run healed and
    /// settled for long enough to confirm everything (iii).
    pub fn stuck(&mut self, now: Instant, producers: &[String]) {
        let what = format!("(iii) producers still hold unconfirmed offers: {producers:?}");
        self.violation(now, what);
    }

    /// The end of a run, healed and settled: every accepted offer of the producers in
    /// `running` has been processed exactly once (iii).
    pub fn check_end(&mut self, now: Instant, running: &BTreeSet<Arc<str>>) {
        let missing: Vec<String> = self
            .offers
            .iter()
            .filter(|(_, r)| r.accepted && r.processed == 0 && running.contains(&r.producer))
            .map(|(offer, r)| {
                format!(
                    "offer {offer} (message {} of {:?} of {} to {})",
                    r.seq, r.stream, r.producer, r.pid
                )
            })
            .collect();
        if !missing.is_empty() {
            let n = missing.len();
            let some = &missing[..n.min(5)];
            self.violation(
                now,
                format!("(iii) {n} accepted offers were never processed, e.g. {some:?}"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardik_persistence::{DeliveryMark, NewEvent};

    const T: Instant = Instant::ZERO;
    const S: StreamId = StreamId {
        epoch: 1,
        number: 1,
    };

    fn write(offer: u64, seq: u64) -> AtomicWrite {
        let ev = EventRec {
            msg: offer,
            sender: 1,
            sender_seq: seq,
            part: 0,
            parts: 1,
        };
        AtomicWrite {
            persistence_id: "k|e".into(),
            events: vec![NewEvent {
                seq,
                payload: ev.payload(),
                manifest: "postcard/1".into(),
                tags: vec![],
            }],
            fence: None,
            marks: vec![MarkChange::Set(DeliveryMark {
                producer: "p".into(),
                epoch: S.epoch,
                stream: S.number,
                seq,
                written_at_ms: 0,
            })],
        }
    }

    #[test]
    fn twice_out_of_order_confirmed_early_and_never_processed_are_caught() {
        let mut c = DeliveryChecker::default();
        let p: Arc<str> = "p".into();
        // Offers 1..=4 as messages 1..=4 (none persists nothing: 7 is not among them).
        for seq in 1..=4 {
            c.offered(T, seq, &p, "k|e".into(), S, seq);
        }
        c.accepted(&[1, 2, 3, 4]);
        c.committed(T, &write(1, 1));
        c.confirmed(T, &p, &"k|e".into(), S, 1);
        assert!(c.violations().is_empty(), "{:#?}", c.violations());
        c.committed(T, &write(1, 1)); // (i) and (ii)
        c.committed(T, &write(3, 3));
        c.committed(T, &write(2, 2)); // (ii)
        c.confirmed(T, &p, &"k|e".into(), S, 4); // (iv): 4 is not processed
        c.check_end(T, &[Arc::clone(&p)].into()); // (iii): nor ever
        let v = c.violations();
        assert!(v.iter().any(|v| v.contains("(i) ")), "{v:#?}");
        assert_eq!(
            v.iter().filter(|v| v.contains("(ii) ")).count(),
            2,
            "{v:#?}"
        );
        assert!(
            v.iter()
                .any(|v| v.contains("(iv) ") && v.contains("offer 4")),
            "{v:#?}"
        );
        assert!(v.iter().any(|v| v.contains("(iii) 1 accepted")), "{v:#?}");
    }
}
