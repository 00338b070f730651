//! Invariants of durable entities, checked as the store commits and entities recover and
//! answer, and once more over the whole store at the end of a run.
//!
//! The checker keeps its own copy of every journal, built from the writes the store reported
//! committed (whatever retention deleted later stays in the copy), and holds the store and
//! the entities to it:
//!
//! * **(e) No gap.** Every committed write continues its journal: its first number is one past
//!   the journal's last.
//! * **(f) Once, whole, in order.** A message's events are in the journal once, all of them,
//!   next to each other, parts in order; per sender, messages are in the journal in the order
//!   they were sent.
//! * **(g) Acknowledged means written.** An acknowledged command's events are in the journal at
//!   the numbers the entity was told, and the store returns them there.
//! * **(h) Recovery is the fold.** A recovered state is exactly the journal's events up to the
//!   number recovered, and that number is the journal's last: recovery sees every commit
//!   before it.

use std::collections::{BTreeMap, BTreeSet};

use shardik_core::Instant;
use shardik_persistence::{AtomicWrite, MemoryStore, PersistenceId, Store};

use super::durable::{at_once, recover};
use super::messages::EventRec;

/// Collects violations of the durable-entity invariants.
#[derive(Default)]
pub struct DurabilityChecker {
    journals: BTreeMap<PersistenceId, Vec<EventRec>>,
    /// Where each message's events are: (journal, first number).
    placed: BTreeMap<u64, (PersistenceId, u64)>,
    acked: BTreeSet<u64>,
    /// Per journal and sender, the sender's number of the last message committed.
    last_from: BTreeMap<(PersistenceId, u64), u64>,
    recoveries: usize,
    violations: Vec<String>,
}

impl DurabilityChecker {
    /// Violations found so far.
    pub fn violations(&self) -> &[String] {
        &self.violations
    }

    /// How many recoveries were checked.
    pub fn recoveries(&self) -> usize {
        self.recoveries
    }

    /// How many commands were acknowledged.
    pub fn acknowledged(&self) -> usize {
        self.acked.len()
    }

    /// How many events the store committed over the run.
    pub fn events_committed(&self) -> usize {
        self.journals.values().map(Vec::len).sum()
    }

    fn violation(&mut self, now: Instant, what: String) {
        self.violations.push(format!("{now:?} {what}"));
    }

    /// The store committed `write`.
    pub fn committed(&mut self, now: Instant, write: &AtomicWrite) {
        if write.events.is_empty() {
            // A reliably delivered command that persisted nothing: its mark alone, which the
            // delivery checker follows.
            return;
        }
        let pid = write.persistence_id.clone();
        let journal = self.journals.entry(pid.clone()).or_default();
        let first = write.events.first().map_or(0, |e| e.seq);
        if first != journal.len() as u64 + 1 {
            let last = journal.len();
            self.violation(
                now,
                format!("{pid}: a write at {first} committed after event {last} (gap or overlap)"),
            );
            return;
        }
        let mut events = Vec::with_capacity(write.events.len());
        for e in &write.events {
            match EventRec::from_payload(&e.payload) {
                Ok(ev) => events.push(ev),
                Err(why) => return self.violation(now, format!("{pid}: {why}")),
            }
        }
        let whole = events
            .iter()
            .enumerate()
            .all(|(i, e)| e.msg == events[0].msg && usize::from(e.part) == i)
            && events.len() == usize::from(events[0].parts);
        if !whole {
            self.violation(
                now,
                format!("{pid}: a write that is not one whole command: {events:?}"),
            );
        }
        let msg = events[0].msg;
        if let Some((other, at)) = self.placed.get(&msg) {
            let what = format!("{pid}: message {msg} persisted again (first in {other} at {at})");
            self.violation(now, what);
        }
        // Per sender, journal order is sending order.
        let (sender, seq) = (events[0].sender, events[0].sender_seq);
        let last = self.last_from.entry((pid.clone(), sender)).or_insert(0);
        if seq <= *last {
            let last = *last;
            self.violation(
                now,
                format!("{pid}: message {msg} (seq {seq} of sender {sender}) after seq {last}"),
            );
        } else {
            *last = seq;
        }
        let journal = self.journals.get_mut(&pid).expect("inserted above");
        self.placed.insert(msg, (pid.clone(), first));
        journal.extend(events);
    }

    /// An entity acknowledged message `msg`, whose events it wrote at `first..=last` of `pid`;
    /// `store` is read to see them there.
    pub fn acked(
        &mut self,
        now: Instant,
        store: &MemoryStore,
        pid: &PersistenceId,
        msg: u64,
        first: u64,
        last: u64,
    ) {
        if !self.acked.insert(msg) {
            self.violation(now, format!("message {msg} acknowledged twice"));
        }
        if self.placed.get(&msg) != Some(&(pid.clone(), first)) {
            let placed = self.placed.get(&msg).cloned();
            self.violation(
                now,
                format!("message {msg} acknowledged at {pid}:{first} but committed at {placed:?}"),
            );
            return;
        }
        let read = match at_once(store.read_events(pid, first, last, usize::MAX)) {
            Ok(r) => r,
            Err(e) => return self.violation(now, format!("{pid}: read failed: {e}")),
        };
        let journal = &self.journals[pid];
        let expected = &journal[(first - 1) as usize..last as usize];
        let got: Vec<Option<EventRec>> = read
            .iter()
            .map(|e| EventRec::from_payload(&e.payload).ok())
            .collect();
        let mut matches = got.len() == expected.len()
            && got.iter().zip(expected).all(|(g, e)| g.as_ref() == Some(e))
            && expected.iter().all(|e| e.msg == msg);
        if !matches && got.is_empty() {
            // The answer came late (its node was paused) and a later holder's snapshot
            // retention deleted the events meanwhile: the snapshot must hold them.
            matches = at_once(store.latest_snapshot(pid))
                .ok()
                .flatten()
                .filter(|snap| snap.seq >= last)
                .and_then(|snap| super::messages::decode_state(&snap.payload).ok())
                .is_some_and(|state| {
                    state.len() as u64 >= last
                        && &state[(first - 1) as usize..last as usize] == expected
                        && expected.iter().all(|e| e.msg == msg)
                });
        }
        if !matches {
            self.violation(
                now,
                format!(
                    "{pid}: acknowledged message {msg} at {first}..={last}, the store has {got:?}"
                ),
            );
        }
    }

    /// An entity recovered `state` at `seq` of `pid`.
    pub fn recovered(&mut self, now: Instant, pid: &PersistenceId, seq: u64, state: &[EventRec]) {
        self.recoveries += 1;
        let journal = self.journals.get(pid).map_or(&[][..], Vec::as_slice);
        if seq != journal.len() as u64 || state != journal {
            let (n, got) = (journal.len(), state.len());
            self.violation(
                now,
                format!(
                    "{pid}: recovered {got} events at seq {seq}, the journal has {n} committed"
                ),
            );
        }
    }

    /// The end of a run: every journal in `store` matches the copy (past what retention
    /// deleted), recovers to the fold of the whole journal, and holds every acknowledged
    /// message once, whole, with each sender's messages in sending order.
    pub fn check_store(&mut self, now: Instant, store: &MemoryStore, snapshots: bool) {
        let journals = std::mem::take(&mut self.journals);
        for (pid, journal) in &journals {
            match at_once(store.read_events(pid, 1, u64::MAX, usize::MAX)) {
                Ok(kept) => {
                    let tail = journal.len() - kept.len().min(journal.len());
                    let ok = kept.iter().enumerate().all(|(i, e)| {
                        e.seq == (tail + i + 1) as u64
                            && &*e.manifest == super::durable::EVENT_MANIFEST
                            && EventRec::from_payload(&e.payload).ok().as_ref()
                                == journal.get(tail + i)
                    });
                    if !ok || kept.len() > journal.len() {
                        self.violation(
                            now,
                            format!(
                                "{pid}: the store's {} events are not the journal's last",
                                kept.len()
                            ),
                        );
                    }
                }
                Err(e) => self.violation(now, format!("{pid}: read failed: {e}")),
            }
            match recover(store, pid, snapshots) {
                Ok((cursor, state))
                    if cursor.seq() == journal.len() as u64 && state == *journal => {}
                Ok((cursor, state)) => self.violation(
                    now,
                    format!(
                        "{pid}: recovers {} events at {}, the journal has {}",
                        state.len(),
                        cursor.seq(),
                        journal.len()
                    ),
                ),
                Err(why) => self.violation(now, format!("{pid}: does not recover: {why}")),
            }
        }
        for msg in &self.acked.clone() {
            if !self.placed.contains_key(msg) {
                self.violation(now, format!("acknowledged message {msg} is in no journal"));
            }
        }
        self.journals = journals;
    }

    /// Each journal's events, as committed.
    pub fn journals(&self) -> &BTreeMap<PersistenceId, Vec<EventRec>> {
        &self.journals
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardik_persistence::NewEvent;

    const T: Instant = Instant::ZERO;

    fn ev(msg: u64, sender_seq: u64, part: u8, parts: u8) -> EventRec {
        EventRec {
            msg,
            sender: 7,
            sender_seq,
            part,
            parts,
        }
    }

    fn write(pid: &str, first: u64, events: &[EventRec]) -> AtomicWrite {
        AtomicWrite {
            persistence_id: pid.into(),
            events: (first..)
                .zip(events)
                .map(|(seq, e)| NewEvent {
                    seq,
                    payload: e.payload(),
                    manifest: super::super::durable::EVENT_MANIFEST.into(),
                    tags: vec![],
                })
                .collect(),
            fence: None,
            marks: Vec::new(),
        }
    }

    #[test]
    fn a_clean_journal_is_no_violation() {
        let store = MemoryStore::new();
        let mut c = DurabilityChecker::default();
        let pid: PersistenceId = "k|e".into();
        for w in [
            write("k|e", 1, &[ev(1, 1, 0, 2), ev(1, 1, 1, 2)]),
            write("k|e", 3, &[ev(2, 2, 0, 1)]),
        ] {
            assert_eq!(at_once(store.append(vec![w.clone()])).unwrap(), [Ok(())]);
            c.committed(T, &w);
        }
        c.acked(T, &store, &pid, 1, 1, 2);
        c.acked(T, &store, &pid, 2, 3, 3);
        c.recovered(
            T,
            &pid,
            3,
            &[ev(1, 1, 0, 2), ev(1, 1, 1, 2), ev(2, 2, 0, 1)],
        );
        c.check_store(T, &store, true);
        assert!(c.violations().is_empty(), "{:#?}", c.violations());
    }

    #[test]
    fn an_event_stored_without_its_manifest_is_caught() {
        let store = MemoryStore::new();
        let mut c = DurabilityChecker::default();
        let w = write("k|e", 1, &[ev(1, 1, 0, 1)]);
        c.committed(T, &w);
        let mut stored = w.clone();
        stored.events[0].manifest = "".into();
        assert_eq!(at_once(store.append(vec![stored])).unwrap(), [Ok(())]);
        c.check_store(T, &store, false);
        let v = c.violations();
        assert!(
            v.iter().any(|v| v.contains("are not the journal's last")),
            "{v:#?}"
        );
    }

    #[test]
    fn gaps_repeats_halves_disorder_lies_and_stale_recoveries_are_caught() {
        let store = MemoryStore::new();
        let mut c = DurabilityChecker::default();
        let pid: PersistenceId = "k|e".into();
        c.committed(T, &write("k|e", 1, &[ev(1, 5, 0, 1)]));
        c.committed(T, &write("k|e", 3, &[ev(2, 6, 0, 1)])); // (e) a gap
        c.committed(T, &write("k|e", 2, &[ev(1, 5, 0, 1)])); // (f) again, and out of order
        c.committed(T, &write("k|e", 3, &[ev(3, 7, 0, 2)])); // (f) half a command
        c.acked(T, &store, &pid, 3, 3, 3); // (g) the store does not have it
        c.recovered(T, &pid, 2, &[ev(1, 5, 0, 1)]); // (h) behind the journal
        let v = c.violations();
        assert!(
            v[0].contains("a write at 3 committed after event 1"),
            "{v:#?}"
        );
        assert!(v.iter().any(|v| v.contains("persisted again")), "{v:#?}");
        assert!(v.iter().any(|v| v.contains("after seq 5")), "{v:#?}");
        assert!(
            v.iter().any(|v| v.contains("not one whole command")),
            "{v:#?}"
        );
        assert!(v.iter().any(|v| v.contains("the store has []")), "{v:#?}");
        assert!(
            v.iter().any(|v| v.contains("recovered 1 events at seq 2")),
            "{v:#?}"
        );
    }
}
