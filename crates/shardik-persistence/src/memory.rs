//! A store in memory: for unit tests and the simulator. It keeps the same rules as the real
//! stores (a taken sequence number refuses the whole write, deleted events keep their numbers,
//! durable state moves one revision at a time, fences refuse older tokens, leases expire by
//! one clock), so code tested against it behaves the same on disk.
//!
//! Its lease clock can be injected ([`MemoryStore::with_clock`]), so that a simulator moves
//! lease expiry with its virtual time.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::delivery::{
    DeliveryMark, KindDataRemoved, LeaseStillHeld, MarkChange, QueueConfirmation, QueuedMessage,
    check_marks, check_producer,
};
use crate::error::{StoreError, WriteRefused, WriteResult};
use crate::fence::Fence;
use crate::lease::{LeaseAcquired, LeaseGrant, LeaseInfo, check_names, token_sql, ttl_micros};
use crate::records::{PersistenceId, Snapshot, StoredEvent, StoredState, TaggedEvent};
use crate::store::{Store, StoreFuture};
use crate::write::{AtomicWrite, check_write};

/// One event slot of a journal: `None` once deleted.
#[derive(Clone, Debug)]
struct Slot {
    payload: Option<Bytes>,
    manifest: Arc<str>,
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
    /// The newest token accepted per fence scope.
    fences: BTreeMap<Arc<str>, u64>,
    leases: BTreeMap<String, LeaseRow>,
    /// Each entity's delivery marks, by producer.
    marks: BTreeMap<PersistenceId, BTreeMap<Arc<str>, DeliveryMark>>,
    /// The last epoch handed out per durable producer.
    producer_epochs: BTreeMap<String, u64>,
    /// Each durable producer's queue, by (epoch, stream, seq).
    queues: BTreeMap<String, BTreeMap<(u64, u64, u64), QueuedMessage>>,
}

/// One lease: its last owner (`None` once released), token and expiry by the store's clock.
#[derive(Clone, Debug)]
struct LeaseRow {
    owner: Option<String>,
    token: u64,
    expires_at: Duration,
}

impl LeaseRow {
    fn held_at(&self, now: Duration) -> bool {
        self.owner.is_some() && self.expires_at > now
    }
}

/// The time leases are judged by: a duration since some fixed origin, never going back.
type Clock = Arc<dyn Fn() -> Duration + Send + Sync>;

/// A store in memory; clones share the same contents and clock.
#[derive(Clone)]
pub struct MemoryStore {
    contents: Arc<Mutex<Contents>>,
    clock: Clock,
    /// `memory-{process id}-{n}`: the n-th memory store this process made. Unique among the
    /// stores a node could meet (a memory store is never shared across processes), and
    /// counted rather than drawn at random, so that a simulation stays replayable.
    identity: Arc<str>,
}

/// How many memory stores this process made.
static MADE: AtomicU64 = AtomicU64::new(0);

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::with_clock(system_clock)
    }
}

/// The system's wall clock, as time since the Unix epoch.
fn system_clock() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

impl MemoryStore {
    /// An empty store whose leases expire by the system clock.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store whose leases expire by `clock`: the time since an origin of the
    /// caller's choosing (a simulator's virtual time, say). It must never go back.
    pub fn with_clock(clock: impl Fn() -> Duration + Send + Sync + 'static) -> Self {
        let n = MADE.fetch_add(1, Ordering::Relaxed) + 1;
        MemoryStore {
            contents: Arc::default(),
            clock: Arc::new(clock),
            identity: Arc::from(format!("memory-{}-{n}", std::process::id())),
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut Contents) -> T) -> T {
        f(&mut self.contents.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Contents {
    /// Judges a fence against its scope's newest token, without raising it.
    fn judge(&self, persistence_id: &str, fence: Option<&Fence>) -> WriteResult {
        fence.map_or(Ok(()), |f| {
            f.judge(persistence_id, self.fences.get(&f.scope).copied())
        })
    }

    /// Raises a fence's scope to its token (an accepted write's).
    fn raise(&mut self, fence: Option<Fence>) {
        if let Some(Fence { scope, token }) = fence {
            let newest = self.fences.entry(scope).or_insert(token);
            *newest = (*newest).max(token);
        }
    }

    /// Applies a write's mark changes to `persistence_id`'s marks.
    fn change_marks(&mut self, persistence_id: &PersistenceId, changes: Vec<MarkChange>) {
        if changes.is_empty() {
            return;
        }
        let marks = self.marks.entry(Arc::clone(persistence_id)).or_default();
        for change in changes {
            match change {
                MarkChange::Set(mark) => {
                    marks.insert(Arc::clone(&mark.producer), mark);
                }
                MarkChange::Remove(producer) => {
                    marks.remove(&producer);
                }
            }
        }
        if marks.is_empty() {
            self.marks.remove(persistence_id);
        }
    }

    fn append_one(&mut self, write: AtomicWrite) -> WriteResult {
        check_write(&write)?;
        self.judge(&write.persistence_id, write.fence.as_ref())?;
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
                    manifest: event.manifest,
                    tags: event.tags,
                },
            );
        }
        self.change_marks(&write.persistence_id, write.marks);
        self.raise(write.fence);
        Ok(())
    }
}

fn ready<'a, T: Send + 'a>(value: T) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(Ok(value)))
}

fn answer<'a, T: Send + 'a>(value: Result<T, StoreError>) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(value))
}

impl Store for MemoryStore {
    /// Only the nodes of one process share a memory store: a lease in it keeps no one else out.
    fn is_shared(&self) -> bool {
        false
    }

    fn identity(&self) -> &str {
        &self.identity
    }

    fn location(&self) -> String {
        "memory:".to_string()
    }

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
                        manifest: Arc::clone(&slot.manifest),
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
                        manifest: Arc::clone(&slot.manifest),
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
        fence: Option<Fence>,
        marks: Vec<MarkChange>,
    ) -> StoreFuture<'a, WriteResult> {
        if let Some(Err(malformed)) = fence.as_ref().map(|f| f.check_shape(persistence_id)) {
            return ready(Err(malformed));
        }
        if let Err(why) = check_marks(&marks) {
            return ready(Err(WriteRefused::Malformed {
                persistence_id: persistence_id.into(),
                why,
            }));
        }
        ready(self.with(|c| {
            c.judge(persistence_id, fence.as_ref())?;
            let current = c.states.get(persistence_id).map_or(0, |s| s.revision);
            if state.revision == 0 || current != state.revision - 1 {
                return Err(WriteRefused::RevisionConflict {
                    persistence_id: persistence_id.into(),
                    expected: state.revision.saturating_sub(1),
                });
            }
            c.raise(fence);
            let pid: PersistenceId = persistence_id.into();
            c.change_marks(&pid, marks);
            c.states.insert(pid, state);
            Ok(())
        }))
    }

    fn acquire_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        ttl: Duration,
    ) -> StoreFuture<'a, LeaseAcquired> {
        if let Err(e) = check_names(name, owner).and_then(|()| ttl_micros(name, ttl)) {
            return answer(Err(e));
        }
        let now = (self.clock)();
        ready(self.with(|c| {
            let row = c.leases.entry(name.to_string()).or_insert(LeaseRow {
                owner: None,
                token: 0,
                expires_at: Duration::ZERO,
            });
            let held = row.held_at(now);
            if held && row.owner.as_deref() != Some(owner) {
                return LeaseAcquired::HeldByOther {
                    owner: row.owner.clone().unwrap_or_default(),
                    time_left: row.expires_at - now,
                };
            }
            // Still ours: the same tenure. Free or expired: a new one, with a new token.
            if !held {
                row.token += 1;
                row.owner = Some(owner.to_string());
            }
            row.expires_at = now + ttl;
            LeaseAcquired::Granted(LeaseGrant {
                token: row.token,
                expires_in: ttl,
            })
        }))
    }

    fn renew_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        token: u64,
        ttl: Duration,
    ) -> StoreFuture<'a, bool> {
        let checked = check_names(name, owner)
            .and_then(|()| ttl_micros(name, ttl))
            .and_then(|_| token_sql(name, token));
        if let Err(e) = checked {
            return answer(Err(e));
        }
        let now = (self.clock)();
        ready(self.with(|c| match c.leases.get_mut(name) {
            Some(row)
                if row.held_at(now)
                    && row.owner.as_deref() == Some(owner)
                    && row.token == token =>
            {
                row.expires_at = now + ttl;
                true
            }
            _ => false,
        }))
    }

    fn release_lease<'a>(
        &'a self,
        name: &'a str,
        owner: &'a str,
        token: u64,
    ) -> StoreFuture<'a, bool> {
        if let Err(e) = check_names(name, owner).and_then(|()| token_sql(name, token)) {
            return answer(Err(e));
        }
        let now = (self.clock)();
        ready(self.with(|c| match c.leases.get_mut(name) {
            Some(row) if row.owner.as_deref() == Some(owner) && row.token == token => {
                row.owner = None;
                row.expires_at = row.expires_at.min(now);
                true
            }
            _ => false,
        }))
    }

    fn read_lease<'a>(&'a self, name: &'a str) -> StoreFuture<'a, Option<LeaseInfo>> {
        let now = (self.clock)();
        ready(self.with(|c| {
            c.leases.get(name).map(|row| LeaseInfo {
                owner: row.owner.clone(),
                token: row.token,
                time_left: row.expires_at.saturating_sub(now),
            })
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

    fn keeps_delivery_data(&self) -> bool {
        true
    }

    fn delivery_marks<'a>(&'a self, persistence_id: &'a str) -> StoreFuture<'a, Vec<DeliveryMark>> {
        ready(self.with(|c| {
            c.marks
                .get(persistence_id)
                .map(|m| m.values().cloned().collect())
                .unwrap_or_default()
        }))
    }

    fn start_producer<'a>(&'a self, producer: &'a str) -> StoreFuture<'a, u64> {
        if let Err(e) = check_producer(producer) {
            return answer(Err(e));
        }
        ready(self.with(|c| {
            let epoch = c.producer_epochs.entry(producer.to_string()).or_insert(0);
            *epoch += 1;
            *epoch
        }))
    }

    fn enqueue<'a>(
        &'a self,
        producer: &'a str,
        messages: Vec<QueuedMessage>,
    ) -> StoreFuture<'a, ()> {
        if let Err(e) = check_producer(producer) {
            return answer(Err(e));
        }
        self.with(|c| {
            let queue = c.queues.entry(producer.to_string()).or_default();
            for m in messages {
                queue.insert((m.epoch, m.stream, m.seq), m);
            }
        });
        ready(())
    }

    fn confirm_queued<'a>(
        &'a self,
        producer: &'a str,
        confirmations: Vec<QueueConfirmation>,
    ) -> StoreFuture<'a, ()> {
        if let Err(e) = check_producer(producer) {
            return answer(Err(e));
        }
        self.with(|c| {
            let Some(queue) = c.queues.get_mut(producer) else {
                return;
            };
            for k in confirmations {
                queue.retain(|&(epoch, stream, seq), _| {
                    !(epoch == k.epoch && stream == k.stream && seq <= k.up_to)
                });
            }
            if queue.is_empty() {
                c.queues.remove(producer);
            }
        });
        ready(())
    }

    fn queued<'a>(&'a self, producer: &'a str) -> StoreFuture<'a, Vec<QueuedMessage>> {
        if let Err(e) = check_producer(producer) {
            return answer(Err(e));
        }
        ready(self.with(|c| {
            c.queues
                .get(producer)
                .map(|q| q.values().cloned().collect())
                .unwrap_or_default()
        }))
    }

    fn lease_names<'a>(&'a self, prefix: &'a str) -> StoreFuture<'a, Vec<String>> {
        ready(self.with(|c| {
            c.leases
                .keys()
                .filter(|name| name.starts_with(prefix))
                .cloned()
                .collect()
        }))
    }

    fn remove_kind_data<'a>(
        &'a self,
        kind: &'a str,
        leases: &'a [String],
    ) -> StoreFuture<'a, Result<KindDataRemoved, LeaseStillHeld>> {
        let now = (self.clock)();
        ready(self.with(|c| {
            for name in leases {
                if let Some(row) = c.leases.get(name)
                    && row.held_at(now)
                {
                    return Err(LeaseStillHeld {
                        lease: name.clone(),
                        owner: row.owner.clone().unwrap_or_default(),
                        time_left_ms: row.expires_at.saturating_sub(now).as_millis() as u64,
                    });
                }
            }
            let mut removed = KindDataRemoved::default();
            c.remembered.retain(|(k, _), ids| {
                let keep = k != kind;
                if !keep {
                    removed.remembered += ids.len() as u64;
                }
                keep
            });
            for name in leases {
                removed.leases += u64::from(c.leases.remove(name).is_some());
                removed.fences += u64::from(c.fences.remove(name.as_str()).is_some());
            }
            for queue in c.queues.values_mut() {
                let before = queue.len();
                queue.retain(|_, m| &*m.kind != kind);
                removed.queued += (before - queue.len()) as u64;
            }
            c.queues.retain(|_, q| !q.is_empty());
            Ok(removed)
        }))
    }
}
