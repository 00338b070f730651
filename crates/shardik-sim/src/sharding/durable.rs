//! Durable entities in the simulator: every client message is a command that persists one to
//! three events to a real [`MemoryStore`] through the shared journal core
//! ([`shardik_persistence::journaled`], the code the runtime's event-sourced entities run), and
//! is acknowledged only once the store has committed them.
//!
//! This module is the node side: the handler of a durable entity's command (recovery first,
//! then a write, finished when the store answers), run by the core's entity lifecycle, which
//! decides, as in the runtime, that an entity handles one command at a time and that a stop
//! waits behind the writes before it. The store side (writes that take time, crash points, snapshots carried
//! out step by step) is [`super::store`]; the invariants are [`super::durability`].
//!
//! An entity's state is the list of the events it applied; each event names the message that
//! made it and its part (`k` of `n`), so any state can be compared with the journal.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shardik_core::Instant;
use shardik_core::delivery::{ConsumerMarks, Mark, Sequenced, StreamId};
use shardik_core::sharding::{EntityId, ShardId};
use shardik_persistence::journaled::{PageOutcome, RecoveryStep};
use shardik_persistence::{
    AtomicWrite, DeliveryMark, Fence, JournalCursor, MarkChange, MemoryStore, PersistenceId,
    Recovery, Retention, SnapshotPlan, Store, StoreError, StoreFuture, WriteResult, persistence_id,
};

use shardik_core::sharding::entities::{Done, Run};

use super::life::{SimEntity, SimLife};
use super::messages::{
    DeliveryReply, EventRec, Output, Sequencing, SimMsg, Wire, decode_state, encode_state,
};
use super::reliable::ReliableSpec;

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
    /// A deliberate fault, for the checker's own test: reads of shard leases say every lease
    /// has expired, held or not (what a coordinator that moved a shard whose lease had not
    /// lapsed would act on). Never set outside that test.
    pub reads_say_every_lease_lapsed: bool,
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
            reads_say_every_lease_lapsed: false,
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

/// A client command's write at the store: the handler that started it, waiting for the
/// store's answer.
struct InFlight {
    run: Run<SimLife>,
    msg: SimMsg,
    first_seq: u64,
    events: Vec<EventRec>,
    /// The entity was force-stopped meanwhile: the write still answers its asker, and the
    /// lifecycle (which no longer has the entity) is not told.
    orphan: bool,
    /// For a reliably delivered message: the answer to its producer, sent once the write is
    /// committed (the runtime's `Reliable` entity answers after `handle_delivered`).
    reply: Option<Output>,
}

/// How a durable kind's entities answer reliable producers (from [`ReliableSpec`]).
struct Consumer {
    window: u64,
    retention: Duration,
    /// [`ReliableSpec::mutation_confirm_before_write`].
    confirm_before_write: bool,
}

/// What receiving a sequenced message comes to, before any write.
enum Receipt {
    /// Not to be processed: answered (or, stale, not) at once.
    Judged(Option<Output>),
    /// To be processed: these mark changes go with its events, and this answer after them.
    Deliver(Vec<MarkChange>, Option<Output>),
}

/// The journal side of one durable kind's handlers on one node incarnation: a client
/// command's handler recovers its entity if it has to, starts one journal write, and finishes
/// when the store answers it. Which command runs when, and what waits behind it, is the
/// core's entity lifecycle, as for the runtime's event-sourced entities.
pub(crate) struct DurableJournal {
    store: Arc<MemoryStore>,
    retention: Option<Retention>,
    /// The kind's name (the persistence ids' prefix).
    kind: String,
    /// The kind's number, in the high bits of its write tokens (the node routes the store's
    /// answers by it).
    token_base: u64,
    writes: BTreeMap<u64, InFlight>,
    next_token: u64,
    /// The lease fences of shards that run under a lease here: their writes carry them.
    fences: BTreeMap<ShardId, Fence>,
    /// The kind's number.
    k: usize,
    /// How its entities answer reliable producers (`None`: no reliable delivery).
    consumer: Option<Consumer>,
}

/// How many bits of a write token number the write within its kind.
const TOKEN_BITS: u32 = 48;

/// The kind a write token belongs to.
pub(crate) fn token_kind(token: u64) -> usize {
    (token >> TOKEN_BITS) as usize
}

impl DurableJournal {
    pub(crate) fn new(
        store: Arc<MemoryStore>,
        spec: &DurableSpec,
        reliable: Option<&ReliableSpec>,
        kind: &str,
        k: usize,
    ) -> Self {
        DurableJournal {
            k,
            consumer: reliable.map(|r| Consumer {
                window: r.consumer_window,
                retention: r.mark_retention,
                confirm_before_write: r.mutation_confirm_before_write,
            }),
            store,
            retention: spec.retention,
            kind: kind.to_string(),
            token_base: (k as u64) << TOKEN_BITS,
            writes: BTreeMap::new(),
            next_token: 1,
            fences: BTreeMap::new(),
        }
    }

    /// The writes of `shard`'s entities carry `fence` from now on (`None`: no lease).
    pub(crate) fn set_fence(&mut self, shard: &ShardId, fence: Option<Fence>) {
        match fence {
            Some(f) => self.fences.insert(shard.clone(), f),
            None => self.fences.remove(shard),
        };
    }

    /// Runs client command `msg`'s handler: recovers the entity first if this incarnation
    /// has not, then sends its write. Finished at once only when the recovery fails (the
    /// command fails and the incarnation ends, as in the runtime: the next one recovers
    /// again).
    pub(crate) fn start(
        &mut self,
        mut run: Run<SimLife>,
        msg: SimMsg,
        now: Instant,
        out: &mut Vec<Output>,
    ) -> Option<Done<SimLife>> {
        let pid = persistence_id(&self.kind, &run.id);
        let journal = match run.entity.journal.take() {
            Some(journal) => journal,
            None => match recover(&self.store, &pid, self.retention.is_some()) {
                Ok((cursor, state)) => {
                    out.push(Output::Recovered {
                        pid: pid.clone(),
                        seq: cursor.seq(),
                        state: state.clone(),
                    });
                    run.entity.state = state;
                    cursor
                }
                Err(why) => return Some(finish(run, Err(format!("recovery failed: {why}")))),
            },
        };
        let (marks, reply) = match msg.delivery.clone() {
            None => (Vec::new(), None),
            Some(d) => match self.receive(&mut run.entity, &run.id, &pid, &d, now) {
                Err(why) => {
                    run.entity.journal = Some(journal);
                    return Some(finish(run, Err(format!("recovery failed: {why}"))));
                }
                Ok(Receipt::Judged(reply)) => {
                    run.entity.journal = Some(journal);
                    out.push(Output::Judged { msg: msg.clone() });
                    out.extend(reply);
                    return Some(finish(run, Ok(Some(msg.id))));
                }
                Ok(Receipt::Deliver(marks, reply)) => (marks, reply),
            },
        };
        let reply = match self.consumer.as_ref() {
            // The deliberate fault: the producer hears `Confirmed` before the write commits.
            Some(c) if c.confirm_before_write => {
                out.extend(reply);
                None
            }
            _ => reply,
        };
        let events = EventRec::for_msg(&msg);
        let manifest = std::sync::Arc::from(EVENT_MANIFEST);
        let mut write: AtomicWrite = journal.next_write(
            &manifest,
            events.iter().map(|ev| (ev.payload(), Vec::new())),
        );
        // The mark commits with the events, or alone when the command persists nothing.
        write.marks = marks;
        write.fence = self.fences.get(&run.shard).cloned();
        let first_seq = journal.seq() + 1;
        run.entity.journal = Some(journal);
        let token = self.token_base | self.next_token;
        self.next_token += 1;
        self.writes.insert(
            token,
            InFlight {
                run,
                msg,
                first_seq,
                events,
                orphan: false,
                reply,
            },
        );
        out.push(Output::JournalWrite { token, write });
        None
    }

    /// Receives sequenced message `d` for `entity` (`entity_id`, of journal `pid`) at `now`, as the
    /// runtime's `Reliable` entity does: loads the entity's marks from the store if this
    /// incarnation has not, and lets the core's [`ConsumerMarks::receive`] judge the message
    /// and say what the write records. `Err` when the marks cannot be read.
    fn receive(
        &self,
        entity: &mut SimEntity,
        entity_id: &EntityId,
        pid: &PersistenceId,
        d: &Sequencing,
        now: Instant,
    ) -> Result<Receipt, String> {
        let consumer = self
            .consumer
            .as_ref()
            .expect("sequenced messages only reach a kind with reliable delivery");
        if entity.marks.is_none() {
            let mut marks = ConsumerMarks::new();
            for kept in at_once(self.store.delivery_marks(pid)).map_err(|e| e.to_string())? {
                let stream = StreamId {
                    epoch: kept.epoch,
                    number: kept.stream,
                };
                let touched = Instant::from_millis(kept.written_at_ms);
                let (seq, producer) = (kept.seq, kept.producer);
                marks.restore(
                    &producer,
                    Mark {
                        stream,
                        seq,
                        touched,
                    },
                );
            }
            entity.marks = Some(marks);
        }
        let marks = entity.marks.as_mut().expect("loaded above");
        let header = Sequenced {
            producer: &d.producer,
            stream: d.stream,
            seq: d.seq,
            first: d.first,
        };
        // Marks are stamped in whole milliseconds, as the runtime stamps them.
        let written_at_ms = now.as_millis();
        let receipt = marks.receive(
            &header,
            Instant::from_millis(written_at_ms),
            consumer.retention,
        );
        let reply = receipt
            .verdict
            .reply(d.seq, consumer.window)
            .map(|reply| Output::Send {
                kind: self.k,
                to: d.reply_to.clone(),
                wire: Wire::Reply(DeliveryReply {
                    producer: Arc::clone(&d.producer),
                    incarnation: d.incarnation,
                    entity: entity_id.clone(),
                    stream: d.stream,
                    reply,
                }),
            });
        let Some(mark) = receipt.mark else {
            return Ok(Receipt::Judged(reply));
        };
        let mut changes = vec![MarkChange::Set(DeliveryMark {
            producer: Arc::clone(&d.producer),
            epoch: mark.stream.epoch,
            stream: mark.stream.number,
            seq: mark.seq,
            written_at_ms,
        })];
        changes.extend(receipt.expired.into_iter().map(MarkChange::Remove));
        Ok(Receipt::Deliver(changes, reply))
    }

    /// The store answered write `token`: the handler that sent it finishes, unless its entity
    /// was force-stopped meanwhile (then only its asker hears).
    pub(crate) fn write_done(
        &mut self,
        token: u64,
        result: WriteResult,
        out: &mut Vec<Output>,
    ) -> Option<Done<SimLife>> {
        let w = self.writes.remove(&token)?;
        let pid = persistence_id(&self.kind, &w.run.id);
        let last_seq = w.first_seq + w.events.len() as u64 - 1;
        match result {
            Ok(()) => {
                out.push(Output::Acked {
                    pid: pid.clone(),
                    msg: w.msg.clone(),
                    first_seq: w.first_seq,
                    last_seq,
                });
                // Committed: now the producer may hear it (even if the entity was stopped
                // meanwhile: what it says is durable).
                out.extend(w.reply);
                if w.orphan {
                    return None;
                }
                let mut run = w.run;
                let journal = run
                    .entity
                    .journal
                    .as_mut()
                    .expect("recovered before writing");
                let plan = journal.written(w.events.len(), self.retention.as_ref());
                run.entity.state.extend_from_slice(&w.events);
                if let Some(plan) = plan {
                    out.push(Output::SnapshotDue {
                        pid,
                        plan,
                        payload: encode_state(&run.entity.state),
                    });
                }
                Some(finish(run, Ok(Some(w.msg.id))))
            }
            Err(refused) => {
                let why = format!("journal write refused: {refused}");
                if w.orphan {
                    out.push(Output::CommandFailed { msg: w.msg, why });
                    return None;
                }
                // The marks moved past a message that was not written: they go with the
                // incarnation (which the failure ends), and the next one loads them again.
                let mut run = w.run;
                run.entity.marks = None;
                Some(finish(run, Err(why)))
            }
        }
    }

    /// `shard`'s entities were force-stopped: their writes at the store still answer their
    /// askers, but no longer complete a handler.
    pub(crate) fn orphan_shard(&mut self, shard: &ShardId) {
        for w in self.writes.values_mut() {
            if w.run.shard == *shard {
                w.orphan = true;
            }
        }
    }

    /// The node died: the commands whose writes were at the store die with it.
    pub(crate) fn kill(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.writes)
            .into_values()
            .map(|w| w.msg.id)
            .collect()
    }
}

/// The handler of `run` finishes with `outcome`: a failure ends the incarnation.
fn finish(run: Run<SimLife>, outcome: Result<Option<u64>, String>) -> Done<SimLife> {
    let Run {
        shard,
        id,
        entity,
        job,
        was_stop,
        ..
    } = run;
    Done {
        shard,
        id,
        entity: outcome.is_ok().then_some(entity),
        reply: job.reply,
        outcome,
        passivate: false,
        was_stop,
        from_context: job.from_context,
        requests: Vec::new(),
        unrecorded: false,
    }
}

/// A snapshot's steps, as the runtime's snapshot task takes them.
#[derive(Clone, Debug)]
pub(crate) struct SnapshotTask {
    pub(crate) pid: PersistenceId,
    pub(crate) plan: SnapshotPlan,
    pub(crate) payload: Bytes,
}
