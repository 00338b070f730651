//! The journal side of an event-sourced entity, without I/O: how recovery walks the store
//! (newest snapshot, then pages of events, a gap detected rather than skipped), how the next
//! write is numbered, and when a snapshot is due and what it lets go of.
//!
//! The runtime drives these with the real store's futures; the simulator drives the very same
//! code against a modelled store with crash points, so the rules it checks over thousands of
//! seeds are the rules the runtime runs.

use std::sync::Arc;

use bytes::Bytes;

use crate::records::{NewEvent, PersistenceId, StoredEvent};
use crate::write::AtomicWrite;

/// How many events recovery reads per call to the store.
pub const RECOVERY_PAGE: usize = 1024;

/// How many times recovery starts over from the newest snapshot after finding a gap, before it
/// fails. A gap is legitimate once in a while: the previous incarnation's snapshot task (a
/// hand-off does not wait for it) may save a newer snapshot and delete the events it covers
/// between this recovery's snapshot read and its event reads. Starting over then finds that
/// newer snapshot. A gap that stays is real damage.
const RECOVERY_ATTEMPTS: u32 = 3;

/// When to snapshot, and what to keep (Akka's `RetentionCriteria.snapshotEvery`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    /// A snapshot after every this many events.
    pub every: u64,
    /// How many snapshots to keep; older ones are deleted.
    pub keep: u64,
    /// Also delete the events up to the oldest kept snapshot (their numbers stay taken).
    pub delete_events: bool,
}

/// What a due snapshot does, in this order: save the state at `seq`, delete the snapshots
/// below `delete_snapshots_below`, and delete the events up to `delete_events_to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotPlan {
    /// The sequence number the snapshot is taken at.
    pub seq: u64,
    /// Snapshots older than this are deleted (the oldest kept one is at this number).
    pub delete_snapshots_below: u64,
    /// Events up to this number are deleted, when the retention deletes events.
    pub delete_events_to: Option<u64>,
}

impl Retention {
    /// The same retention with `every` and `keep` at least 1.
    pub fn normalized(self) -> Self {
        Retention {
            every: self.every.max(1),
            keep: self.keep.max(1),
            ..self
        }
    }

    /// The snapshot due after a write took the journal from `before` to `after`, if the write
    /// crossed a multiple of `every`.
    pub fn after_write(&self, before: u64, after: u64) -> Option<SnapshotPlan> {
        let every = self.every.max(1);
        if before / every == after / every {
            return None;
        }
        // Keep `keep` snapshots: the oldest kept one is `keep - 1` periods back.
        let oldest_kept = after.saturating_sub((self.keep.max(1) - 1) * every);
        Some(SnapshotPlan {
            seq: after,
            delete_snapshots_below: oldest_kept,
            delete_events_to: (self.delete_events && oldest_kept > 0).then_some(oldest_kept),
        })
    }
}

/// Where an entity's journal stands: the sequence number of its last event, and so the number
/// its next write starts at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalCursor {
    persistence_id: PersistenceId,
    seq: u64,
}

impl JournalCursor {
    /// The journal of `persistence_id`, at sequence number `seq`.
    pub fn new(persistence_id: PersistenceId, seq: u64) -> Self {
        JournalCursor {
            persistence_id,
            seq,
        }
    }

    /// Whose journal.
    pub fn persistence_id(&self) -> &PersistenceId {
        &self.persistence_id
    }

    /// The sequence number of the last event.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The write that appends `events` (payload and tags each), each under `manifest` (the
    /// events of one write are of one type), numbered from the next sequence number on, without
    /// a fence (add one with [`AtomicWrite::fenced`]). The cursor moves only once the store
    /// took it ([`written`]).
    ///
    /// [`written`]: Self::written
    pub fn next_write(
        &self,
        manifest: &Arc<str>,
        events: impl IntoIterator<Item = (Bytes, Vec<String>)>,
    ) -> AtomicWrite {
        AtomicWrite {
            persistence_id: self.persistence_id.clone(),
            events: (self.seq + 1..)
                .zip(events)
                .map(|(seq, (payload, tags))| NewEvent {
                    seq,
                    payload,
                    manifest: Arc::clone(manifest),
                    tags,
                })
                .collect(),
            fence: None,
            marks: Vec::new(),
        }
    }

    /// The store committed a write of `count` events made by [`next_write`](Self::next_write):
    /// moves the cursor past them, and returns the snapshot `retention` asks for now, if any.
    pub fn written(&mut self, count: usize, retention: Option<&Retention>) -> Option<SnapshotPlan> {
        let before = self.seq;
        self.seq += count as u64;
        retention.and_then(|r| r.after_write(before, self.seq))
    }
}

/// What recovery needs from the store next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryStep {
    /// The newest snapshot (then call [`Recovery::snapshot_read`]).
    ReadSnapshot,
    /// Up to `max` events from `from` on (then call [`Recovery::events_read`]).
    ReadEvents {
        /// The first sequence number wanted.
        from: u64,
        /// The most events to read.
        max: usize,
    },
    /// Nothing: the state is recovered ([`Recovery::finish`]).
    Done,
}

/// What to do with a page of events that [`Recovery::events_read`] accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageOutcome {
    /// Apply every event of the page, in order.
    Apply,
    /// Apply none: the journal jumps (see `RECOVERY_ATTEMPTS`); recovery starts over from
    /// the newest snapshot, and the state must go back to what that snapshot (or, without
    /// one, the initial state) says.
    StartOver,
}

/// Recovery failed: the journal has a gap that reading again did not close.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{persistence_id}: the journal jumps from event {after} to {next} (events deleted without a snapshot to start from?)"
)]
pub struct JournalGap {
    /// Whose journal.
    pub persistence_id: PersistenceId,
    /// The last event recovered.
    pub after: u64,
    /// The next event the store has.
    pub next: u64,
}

/// One recovery of an entity's state: ask [`step`](Self::step) what to read, hand back what
/// the store answered, apply what it says to apply, until [`RecoveryStep::Done`].
#[derive(Clone, Debug)]
pub struct Recovery {
    persistence_id: PersistenceId,
    snapshots: bool,
    seq: u64,
    step: RecoveryStep,
    attempts: u32,
}

impl Recovery {
    /// Recovery of `persistence_id`, from the newest snapshot when the kind takes
    /// `snapshots`, else from the first event.
    pub fn new(persistence_id: PersistenceId, snapshots: bool) -> Self {
        Recovery {
            persistence_id,
            snapshots,
            seq: 0,
            step: Self::first_step(snapshots),
            attempts: 1,
        }
    }

    fn first_step(snapshots: bool) -> RecoveryStep {
        if snapshots {
            RecoveryStep::ReadSnapshot
        } else {
            RecoveryStep::ReadEvents {
                from: 1,
                max: RECOVERY_PAGE,
            }
        }
    }

    /// What to read next.
    pub fn step(&self) -> RecoveryStep {
        self.step
    }

    /// The sequence number recovered so far.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The newest snapshot's sequence number (`None`: there is none). The state must now be
    /// the snapshot's, or the initial state without one.
    pub fn snapshot_read(&mut self, snapshot_seq: Option<u64>) {
        self.seq = snapshot_seq.unwrap_or(0);
        self.step = RecoveryStep::ReadEvents {
            from: self.seq + 1,
            max: RECOVERY_PAGE,
        };
    }

    /// A page the store answered for [`RecoveryStep::ReadEvents`]. `Ok(Apply)`: apply its
    /// events in order; `Ok(StartOver)`: apply none and follow [`step`](Self::step) again.
    pub fn events_read(&mut self, page: &[StoredEvent]) -> Result<PageOutcome, JournalGap> {
        let mut expected = self.seq + 1;
        for event in page {
            if event.seq != expected {
                let gap = JournalGap {
                    persistence_id: self.persistence_id.clone(),
                    after: expected - 1,
                    next: event.seq,
                };
                if !self.snapshots || self.attempts >= RECOVERY_ATTEMPTS {
                    self.step = RecoveryStep::Done;
                    return Err(gap);
                }
                self.attempts += 1;
                self.seq = 0;
                self.step = RecoveryStep::ReadSnapshot;
                return Ok(PageOutcome::StartOver);
            }
            expected += 1;
        }
        self.seq = expected - 1;
        self.step = if page.len() < RECOVERY_PAGE {
            RecoveryStep::Done
        } else {
            RecoveryStep::ReadEvents {
                from: self.seq + 1,
                max: RECOVERY_PAGE,
            }
        };
        Ok(PageOutcome::Apply)
    }

    /// The journal's cursor once recovery is done.
    ///
    /// # Panics
    /// If recovery is not [`Done`](RecoveryStep::Done) (a bug in the caller's loop).
    pub fn finish(self) -> JournalCursor {
        assert_eq!(self.step, RecoveryStep::Done, "recovery finished early");
        JournalCursor::new(self.persistence_id, self.seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(seqs: impl IntoIterator<Item = u64>) -> Vec<StoredEvent> {
        seqs.into_iter()
            .map(|seq| StoredEvent {
                seq,
                payload: Bytes::new(),
                manifest: "".into(),
                tags: vec![],
            })
            .collect()
    }

    #[test]
    fn recovery_reads_the_snapshot_then_pages_until_a_short_one() {
        let mut r = Recovery::new("k|e".into(), true);
        assert_eq!(r.step(), RecoveryStep::ReadSnapshot);
        r.snapshot_read(Some(10));
        assert_eq!(
            r.step(),
            RecoveryStep::ReadEvents {
                from: 11,
                max: RECOVERY_PAGE
            }
        );
        let full = events(11..11 + RECOVERY_PAGE as u64);
        assert_eq!(r.events_read(&full), Ok(PageOutcome::Apply));
        let next = 11 + RECOVERY_PAGE as u64;
        assert_eq!(
            r.step(),
            RecoveryStep::ReadEvents {
                from: next,
                max: RECOVERY_PAGE
            }
        );
        assert_eq!(
            r.events_read(&events(next..next + 3)),
            Ok(PageOutcome::Apply)
        );
        assert_eq!(r.step(), RecoveryStep::Done);
        let cursor = r.finish();
        assert_eq!(cursor.seq(), next + 2);
    }

    #[test]
    fn a_gap_starts_over_from_the_snapshot_then_fails_if_it_stays() {
        let mut r = Recovery::new("k|e".into(), true);
        r.snapshot_read(None);
        // Events 1..=4 were deleted under a snapshot saved meanwhile.
        assert_eq!(r.events_read(&events(5..7)), Ok(PageOutcome::StartOver));
        assert_eq!(r.step(), RecoveryStep::ReadSnapshot);
        r.snapshot_read(Some(4));
        assert_eq!(r.events_read(&events(5..7)), Ok(PageOutcome::Apply));
        assert_eq!(r.finish().seq(), 6);

        let mut r = Recovery::new("k|e".into(), true);
        for _ in 1..RECOVERY_ATTEMPTS {
            r.snapshot_read(Some(1));
            assert_eq!(r.events_read(&events([3])), Ok(PageOutcome::StartOver));
        }
        r.snapshot_read(Some(1));
        let gap = r.events_read(&events([3])).unwrap_err();
        assert_eq!((gap.after, gap.next), (1, 3));
    }

    #[test]
    fn without_snapshots_a_gap_fails_at_once() {
        let mut r = Recovery::new("k|e".into(), false);
        assert!(r.events_read(&events([1, 2, 4])).is_err());
        assert_eq!(r.step(), RecoveryStep::Done);
    }

    #[test]
    fn writes_are_numbered_on_and_snapshots_fall_due_on_crossing_a_multiple() {
        let mut c = JournalCursor::new("k|e".into(), 8);
        let w = c.next_write(
            &Arc::from("m/1"),
            [(Bytes::new(), vec![]), (Bytes::new(), vec!["t".into()])],
        );
        assert_eq!(w.events.iter().map(|e| e.seq).collect::<Vec<_>>(), [9, 10]);
        assert!(w.events.iter().all(|e| &*e.manifest == "m/1"));
        let retention = Retention {
            every: 5,
            keep: 2,
            delete_events: true,
        };
        assert_eq!(
            c.written(2, Some(&retention)),
            Some(SnapshotPlan {
                seq: 10,
                delete_snapshots_below: 5,
                delete_events_to: Some(5)
            })
        );
        assert_eq!(c.written(1, Some(&retention)), None);
        assert_eq!(c.seq(), 11);
        let keep_all = Retention {
            delete_events: false,
            ..retention
        };
        assert_eq!(
            keep_all.after_write(4, 5).and_then(|p| p.delete_events_to),
            None
        );
    }
}
