//! Durable entities in the simulator: every client message is a command that persists one to
//! three events to a real [`MemoryStore`] through the shared journal core
//! ([`shardik_persistence::journaled`], the code the runtime's event-sourced entities run), and
//! is acknowledged only once the store has committed them.
//!
//! This module is the node side: the entities of one node incarnation, each handling one
//! command at a time (recovery first, then a write, then the next command), as the runtime's
//! entity host does. The store side (writes that take time, crash points, snapshots carried
//! out step by step) is [`super::store`]; the invariants are [`super::durability`].
//!
//! An entity's state is the list of the events it applied; each event names the message that
//! made it and its part (`k` of `n`), so any state can be compared with the journal.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shardik_core::sharding::{EntityId, ShardId};
use shardik_persistence::journaled::{PageOutcome, RecoveryStep};
use shardik_persistence::{
    AtomicWrite, Fence, JournalCursor, MemoryStore, PersistenceId, Recovery, Retention,
    SnapshotPlan, Store, StoreError, StoreFuture, WriteResult, persistence_id,
};

use super::messages::{EventRec, Output, SimMsg, decode_state, encode_state};

/// The manifest every event is written with: what a runtime entity writes (its storage codec
/// and event version). The durability checker requires every stored event to keep it.
pub(crate) const EVENT_MANIFEST: &str = "postcard/1";

/// How the simulated entities persist, and where the simulated store makes nodes crash.
#[derive(Clone, Debug)]
pub struct DurableSpec {
    /// Snapshots and what they let go of (`None`: no snapshots).
    pub retention: Option<Retention>,
    /// How long a store call takes to commit, on average (each draws from half to one and a
    /// half times this).
    pub store_latency: Duration,
    /// Where the store makes the writing node crash.
    pub crash_points: CrashPoints,
}

impl DurableSpec {
    /// Snapshots every 3 events keeping 2 (events kept), 2 ms store calls, no crash points.
    pub fn new() -> Self {
        DurableSpec {
            retention: Some(Retention {
                every: 3,
                keep: 2,
                delete_events: false,
            }),
            store_latency: Duration::from_millis(2),
            crash_points: CrashPoints::none(),
        }
    }
}

impl Default for DurableSpec {
    fn default() -> Self {
        Self::new()
    }
}

/// The chances that the node a store call came from crashes at one of the points where a
/// durable entity can be caught half-way. A crashed node restarts as a new incarnation after
/// `restart_after` and joins again.
#[derive(Clone, Debug)]
pub struct CrashPoints {
    /// While a write is on its way to the store (the store may or may not get it; a write of
    /// several events is then caught between them, and must land whole or not at all).
    pub write_in_flight: f64,
    /// After the store committed a write, before the entity could reply.
    pub before_reply: f64,
    /// Between the steps of a snapshot (save, delete old snapshots, delete old events).
    pub during_snapshot: f64,
    /// At most this many crashes over a run.
    pub limit: usize,
    /// How long a crashed node stays down.
    pub restart_after: Duration,
}

impl CrashPoints {
    /// No crashes from the store.
    pub fn none() -> Self {
        CrashPoints {
            write_in_flight: 0.0,
            before_reply: 0.0,
            during_snapshot: 0.0,
            limit: 0,
            restart_after: Duration::from_secs(1),
        }
    }
}

/// The answer of a [`MemoryStore`] call, which never waits.
pub(crate) fn at_once<T>(mut f: StoreFuture<'_, T>) -> Result<T, StoreError> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match f.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(r) => r,
        std::task::Poll::Pending => unreachable!("the memory store answers at once"),
    }
}

/// Recovers the state of `pid` from `store` with the shared [`Recovery`], as the runtime's
/// event-sourced entities do: the newest snapshot (with `snapshots`), then the events after it.
pub fn recover(
    store: &MemoryStore,
    pid: &PersistenceId,
    snapshots: bool,
) -> Result<(JournalCursor, Vec<EventRec>), String> {
    let mut recovery = Recovery::new(pid.clone(), snapshots);
    let mut state = Vec::new();
    loop {
        match recovery.step() {
            RecoveryStep::ReadSnapshot => {
                let snapshot = at_once(store.latest_snapshot(pid)).map_err(|e| e.to_string())?;
                state = match &snapshot {
                    Some(s) => decode_state(&s.payload)?,
                    None => Vec::new(),
                };
                recovery.snapshot_read(snapshot.map(|s| s.seq));
            }
            RecoveryStep::ReadEvents { from, max } => {
                let page = at_once(store.read_events(pid, from, u64::MAX, max))
                    .map_err(|e| e.to_string())?;
                if recovery.events_read(&page).map_err(|g| g.to_string())? == PageOutcome::Apply {
                    for e in &page {
                        state.push(EventRec::from_payload(&e.payload)?);
                    }
                }
            }
            RecoveryStep::Done => return Ok((recovery.finish(), state)),
        }
    }
}

/// One durable entity incarnation.
struct DurableEntity {
    shard: ShardId,
    /// Where its journal stands (`None`: not recovered; a failed command resets it).
    journal: Option<JournalCursor>,
    /// The events applied.
    state: Vec<EventRec>,
    /// Commands waiting their turn.
    queue: VecDeque<SimMsg>,
    /// The command whose write is at the store (its token).
    writing: Option<u64>,
}

/// A write at the store, and whose it is.
struct InFlight {
    kind: usize,
    entity: EntityId,
    msg: SimMsg,
    first_seq: u64,
    events: Vec<EventRec>,
    /// The entity was force-stopped meanwhile: the handler still answers, nothing is kept.
    orphan: bool,
}

/// The durable entities of one node incarnation.
pub(crate) struct DurableEntities {
    store: Arc<MemoryStore>,
    retention: Option<Retention>,
    kinds: Vec<String>,
    entities: BTreeMap<(usize, EntityId), DurableEntity>,
    writes: BTreeMap<u64, InFlight>,
    next_token: u64,
    /// The lease fences of shards that run under a lease here: their writes carry them.
    fences: BTreeMap<(usize, ShardId), Fence>,
}

impl DurableEntities {
    pub(crate) fn new(store: Arc<MemoryStore>, spec: &DurableSpec, kinds: Vec<String>) -> Self {
        DurableEntities {
            store,
            retention: spec.retention,
            kinds,
            entities: BTreeMap::new(),
            writes: BTreeMap::new(),
            next_token: 1,
            fences: BTreeMap::new(),
        }
    }

    /// The writes of `shard`'s entities carry `fence` from now on (`None`: no lease).
    pub(crate) fn set_fence(&mut self, kind: usize, shard: &ShardId, fence: Option<Fence>) {
        match fence {
            Some(f) => self.fences.insert((kind, shard.clone()), f),
            None => self.fences.remove(&(kind, shard.clone())),
        };
    }

    /// A command reached its entity (created if it does not run).
    pub(crate) fn deliver(
        &mut self,
        kind: usize,
        shard: &ShardId,
        entity: &EntityId,
        msg: SimMsg,
        out: &mut Vec<Output>,
    ) {
        let e = self
            .entities
            .entry((kind, entity.clone()))
            .or_insert_with(|| DurableEntity {
                shard: shard.clone(),
                journal: None,
                state: Vec::new(),
                queue: VecDeque::new(),
                writing: None,
            });
        e.queue.push_back(msg);
        self.advance(kind, entity, out);
    }

    /// Runs the entity's next command, unless one is at the store.
    fn advance(&mut self, kind: usize, entity: &EntityId, out: &mut Vec<Output>) {
        let pid = persistence_id(&self.kinds[kind], entity);
        let snapshots = self.retention.is_some();
        let Some(e) = self.entities.get_mut(&(kind, entity.clone())) else {
            return;
        };
        while e.writing.is_none() {
            let Some(msg) = e.queue.pop_front() else {
                return;
            };
            if e.journal.is_none() {
                match recover(&self.store, &pid, snapshots) {
                    Ok((cursor, state)) => {
                        out.push(Output::Recovered {
                            pid: pid.clone(),
                            seq: cursor.seq(),
                            state: state.clone(),
                        });
                        e.state = state;
                        e.journal = Some(cursor);
                    }
                    Err(why) => {
                        // As the runtime: the command fails and the incarnation is dropped;
                        // the next command recovers again.
                        e.state.clear();
                        out.push(Output::CommandFailed {
                            msg,
                            why: format!("recovery failed: {why}"),
                        });
                        continue;
                    }
                }
            }
            let journal = e.journal.as_ref().expect("recovered above");
            let events = EventRec::for_msg(&msg);
            let manifest = std::sync::Arc::from(EVENT_MANIFEST);
            let mut write: AtomicWrite = journal.next_write(
                &manifest,
                events.iter().map(|ev| (ev.payload(), Vec::new())),
            );
            write.fence = self.fences.get(&(kind, e.shard.clone())).cloned();
            let token = self.next_token;
            self.next_token += 1;
            e.writing = Some(token);
            self.writes.insert(
                token,
                InFlight {
                    kind,
                    entity: entity.clone(),
                    msg,
                    first_seq: journal.seq() + 1,
                    events,
                    orphan: false,
                },
            );
            out.push(Output::JournalWrite { token, write });
        }
    }

    /// The store answered write `token`.
    pub(crate) fn write_done(&mut self, token: u64, result: WriteResult, out: &mut Vec<Output>) {
        let Some(w) = self.writes.remove(&token) else {
            return;
        };
        let pid = persistence_id(&self.kinds[w.kind], &w.entity);
        let last_seq = w.first_seq + w.events.len() as u64 - 1;
        match (&result, w.orphan) {
            (Ok(()), true) => out.push(Output::Acked {
                pid,
                msg: w.msg,
                first_seq: w.first_seq,
                last_seq,
            }),
            (Ok(()), false) => {
                let e = self
                    .entities
                    .get_mut(&(w.kind, w.entity.clone()))
                    .expect("a live write's entity runs");
                e.writing = None;
                let journal = e.journal.as_mut().expect("recovered before writing");
                let plan = journal.written(w.events.len(), self.retention.as_ref());
                e.state.extend_from_slice(&w.events);
                out.push(Output::Acked {
                    pid: pid.clone(),
                    msg: w.msg,
                    first_seq: w.first_seq,
                    last_seq,
                });
                if let Some(plan) = plan {
                    out.push(Output::SnapshotDue {
                        pid,
                        plan,
                        payload: encode_state(&e.state),
                    });
                }
                self.advance(w.kind, &w.entity, out);
            }
            (Err(refused), orphan) => {
                out.push(Output::CommandFailed {
                    msg: w.msg,
                    why: format!("journal write refused: {refused}"),
                });
                if !orphan {
                    let e = self
                        .entities
                        .get_mut(&(w.kind, w.entity.clone()))
                        .expect("a live write's entity runs");
                    e.writing = None;
                    e.journal = None;
                    e.state.clear();
                    self.advance(w.kind, &w.entity, out);
                }
            }
        }
    }

    /// Whether an entity of `shard` has a command running or waiting (a stop waits for it,
    /// as the runtime queues a stop behind the commands before it).
    pub(crate) fn busy(&self, kind: usize, shard: &ShardId) -> bool {
        self.entities.iter().any(|((k, _), e)| {
            *k == kind && e.shard == *shard && (e.writing.is_some() || !e.queue.is_empty())
        })
    }

    /// The entities of `shard` stop. `forced`: commands still waiting are answered with a
    /// failure, and a write at the store still answers its asker (as the runtime's host does
    /// when a shard is stopped under it); otherwise nothing may be waiting ([`busy`]).
    ///
    /// [`busy`]: Self::busy
    pub(crate) fn stop_shard(&mut self, kind: usize, shard: &ShardId, out: &mut Vec<Output>) {
        let ids: Vec<EntityId> = self
            .entities
            .iter()
            .filter(|((k, _), e)| *k == kind && e.shard == *shard)
            .map(|((_, id), _)| id.clone())
            .collect();
        for id in ids {
            let e = self.entities.remove(&(kind, id)).expect("listed above");
            for msg in e.queue {
                out.push(Output::CommandFailed {
                    msg,
                    why: "the shard was stopped before this command ran".into(),
                });
            }
            if let Some(token) = e.writing {
                if let Some(w) = self.writes.get_mut(&token) {
                    w.orphan = true;
                }
            }
        }
    }

    /// The node died: every command waiting or at the store dies with it.
    pub(crate) fn kill(&mut self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.writes.values().map(|w| w.msg.id).collect();
        for e in self.entities.values() {
            ids.extend(e.queue.iter().map(|m| m.id));
        }
        self.entities.clear();
        self.writes.clear();
        ids
    }
}

/// A snapshot's steps, as the runtime's snapshot task takes them.
#[derive(Clone, Debug)]
pub(crate) struct SnapshotTask {
    pub(crate) pid: PersistenceId,
    pub(crate) plan: SnapshotPlan,
    pub(crate) payload: Bytes,
}
