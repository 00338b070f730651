//! A store in memory: for unit tests and the simulator. It keeps the same rules as the real
//! stores (a taken sequence number refuses the whole write, deleted events keep their numbers,
//! durable state moves one revision at a time), so code tested against it behaves the same on
//! disk.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::{
    AtomicWrite, PersistenceId, Snapshot, Store, StoreFuture, StoredEvent, StoredState,
    TaggedEvent, WriteRefused, WriteResult, check_write,
};

/// One event slot of a journal: `None` once deleted.
#[derive(Clone, Debug)]
struct Slot {
    payload: Option<Bytes>,
    tags: Vec<String>,
}

#[derive(Debug, Default)]
struct Contents {
    journals: BTreeMap<PersistenceId, BTreeMap<u64, Slot>>,
    /// Every event in commit order, for queries by tag: (persistence id, seq).
    global: Vec<(PersistenceId, u64)>,
    snapshots: BTreeMap<PersistenceId, BTreeMap<u64, Bytes>>,
    states: BTreeMap<PersistenceId, StoredState>,
    remembered: BTreeMap<(String, String), BTreeSet<String>>,
}

/// A store in memory; clones share the same contents.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    contents: Arc<Mutex<Contents>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Contents) -> T) -> T {
        f(&mut self.contents.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Contents {
    fn append_one(&mut self, write: AtomicWrite) -> WriteResult {
        check_write(&write)?;
        let journal = self
            .journals
            .entry(Arc::clone(&write.persistence_id))
            .or_default();
        if let Some(taken) = write.events.iter().find(|e| journal.contains_key(&e.seq)) {
            return Err(WriteRefused::SequenceTaken {
                persistence_id: write.persistence_id,
                seq: taken.seq,
            });
        }
        for event in write.events {
            self.global
                .push((Arc::clone(&write.persistence_id), event.seq));
            journal.insert(
                event.seq,
                Slot {
                    payload: Some(event.payload),
                    tags: event.tags,
                },
            );
        }
        Ok(())
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(Ok(value)))
}

impl Store for MemoryStore {
    fn append(&self, writes: Vec<AtomicWrite>) -> StoreFuture<'_, Vec<WriteResult>> {
        ready(self.with(|c| writes.into_iter().map(|w| c.append_one(w)).collect()))
    }

    fn read_events<'a>(
        &'a self,
        persistence_id: &'a str,
        from: u64,
        to: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<StoredEvent>> {
        ready(self.with(|c| {
            let Some(journal) = c.journals.get(persistence_id) else {
                return Vec::new();
            };
            if from > to {
                return Vec::new();
            }
            journal
                .range(from..=to)
                .filter_map(|(seq, slot)| {
                    slot.payload.as_ref().map(|p| StoredEvent {
                        seq: *seq,
                        payload: p.clone(),
                        tags: slot.tags.clone(),
                    })
                })
                .take(max)
                .collect()
        }))
    }

    fn highest_seq<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, u64> {
        ready(self.with(|c| {
            c.journals
                .get(persistence_id)
                .and_then(|j| j.keys().next_back().copied())
                .unwrap_or(0)
        }))
    }

    fn delete_events_to<'a>(&'a self, persistence_id: &'a str, to: u64) -> StoreFuture<'a, ()> {
        self.with(|c| {
            if let Some(journal) = c.journals.get_mut(persistence_id) {
                for (_, slot) in journal.range_mut(..=to) {
                    slot.payload = None;
                }
            }
        });
        ready(())
    }

    fn events_by_tag<'a>(
        &'a self,
        tag: &'a str,
        offset: u64,
        max: usize,
    ) -> StoreFuture<'a, Vec<TaggedEvent>> {
        ready(self.with(|c| {
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            c.global
                .iter()
                .enumerate()
                .skip(start)
                .filter_map(|(i, (pid, seq))| {
                    let slot = c.journals.get(pid)?.get(seq)?;
                    let payload = slot.payload.as_ref()?;
                    slot.tags.iter().any(|t| t == tag).then(|| TaggedEvent {
                        offset: i as u64 + 1,
                        persistence_id: Arc::clone(pid),
                        seq: *seq,
                        payload: payload.clone(),
                    })
                })
                .take(max)
                .collect()
        }))
    }

    fn save_snapshot<'a>(
        &'a self,
        persistence_id: &'a str,
        snapshot: Snapshot,
    ) -> StoreFuture<'a, ()> {
        self.with(|c| {
            c.snapshots
                .entry(persistence_id.into())
                .or_default()
                .insert(snapshot.seq, snapshot.payload);
        });
        ready(())
    }

    fn latest_snapshot<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, Option<Snapshot>> {
        ready(self.with(|c| {
            c.snapshots
                .get(persistence_id)
                .and_then(|s| s.iter().next_back())
                .map(|(seq, payload)| Snapshot {
                    seq: *seq,
                    payload: payload.clone(),
                })
        }))
    }

    fn delete_snapshots_below<'a>(
        &'a self,
        persistence_id: &'a str,
        below: u64,
    ) -> StoreFuture<'a, ()> {
        self.with(|c| {
            if let Some(s) = c.snapshots.get_mut(persistence_id) {
                s.retain(|seq, _| *seq >= below);
            }
        });
        ready(())
    }

    fn load_state<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, Option<StoredState>> {
        ready(self.with(|c| c.states.get(persistence_id).cloned()))
    }

    fn write_state<'a>(
        &'a self,
        persistence_id: &'a str,
        state: StoredState,
    ) -> StoreFuture<'a, WriteResult> {
        ready(self.with(|c| {
            let current = c.states.get(persistence_id).map_or(0, |s| s.revision);
            if state.revision == 0 || current != state.revision - 1 {
                return Err(WriteRefused::RevisionConflict {
                    persistence_id: persistence_id.into(),
                    expected: state.revision.saturating_sub(1),
                });
            }
            c.states.insert(persistence_id.into(), state);
            Ok(())
        }))
    }

    fn update_remembered<'a>(
        &'a self,
        kind: &'a str,
        shard: &'a str,
        started: &'a [String],
        stopped: &'a [String],
    ) -> StoreFuture<'a, ()> {
        self.with(|c| {
            let key = (kind.to_string(), shard.to_string());
            let set = c.remembered.entry(key.clone()).or_default();
            set.extend(started.iter().cloned());
            for id in stopped {
                set.remove(id);
            }
            if set.is_empty() {
                c.remembered.remove(&key);
            }
        });
        ready(())
    }

    fn remembered_shards<'a>(&'a self, kind: &'a str) -> StoreFuture<'a, Vec<String>> {
        ready(self.with(|c| {
            c.remembered
                .keys()
                .filter(|(k, _)| k == kind)
                .map(|(_, s)| s.clone())
                .collect()
        }))
    }

    fn remembered_entities<'a>(
        &'a self,
        kind: &'a str,
        shard: &'a str,
    ) -> StoreFuture<'a, Vec<String>> {
        ready(self.with(|c| {
            c.remembered
                .get(&(kind.to_string(), shard.to_string()))
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default()
        }))
    }
}
