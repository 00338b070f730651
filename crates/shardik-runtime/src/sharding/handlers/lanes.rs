//! A kind's lanes: tasks that run its entities' handlers beside the kind's own task, so that
//! one kind uses every worker thread of the runtime.
//!
//! The kind's task keeps everything else: routing, the region and coordinator, and the core's
//! entity lifecycle, which decides when a handler runs and takes its entity back when it
//! finishes. Only running the handler moves. To the lifecycle, a handler sent to a lane is one
//! that awaited (`Runner::run` answers `None`, and its `Done` comes back later), a case it and
//! the simulator already know: one command at a time per entity, the next one queued in the
//! entity's slot until the previous one is back, whatever lane ran it. So per-sender order,
//! one live copy, hand-offs, remembered entities and the kind's passivation limits are the
//! lifecycle's, unchanged. Two things the lanes add, because a handler handed over may wait in
//! their queue before it starts: a shard stopped at once (its lease lost) takes back its
//! handlers that no lane has started ([`Lanes::withdraw`]), so none starts after the stop; and
//! the first command of a new remembered incarnation, which awaits the store's record anyway,
//! stays in the kind's task.
//!
//! Handlers go to the lanes only when they are worth the trip: a handler that takes a few
//! hundred nanoseconds runs in the kind's task as before, where sending it elsewhere would
//! cost more than it runs. The kind's task times one handler in [`SAMPLE_EVERY`], and the
//! lanes time theirs; while the mean is at least [`SPREAD_FROM`], handlers go to the lanes.
//!
//! Each turn of the kind's task stages what it started in chunks of at most [`LANE_TURN`]
//! handlers and, at the end of the turn, puts the chunks on the queue the lanes share (one
//! lock, one wake-up of the idle lanes). Whichever lane is free takes the next chunk, runs it,
//! hands back what finished (and the empty chunk, for the kind's task to fill again) and
//! yields: a lane that shares its worker with the kind's task, or got slower handlers, holds
//! back nothing another lane could run (per-lane queues filled in turn measured 0.65 to 0.84
//! of the ceiling at 5 µs a handler, the shared queue 0.77 to 0.90), and a long batch neither
//! keeps finished entities from their next commands nor the worker from the other tasks. Only
//! chunks move under the lock, never the handlers' arguments: copying those into and out of
//! one shared deque, lock held, was the largest cost of the hand-over.
//!
//! While enough handlers wait for a lane ([`Lanes::full`]), the kind's task takes no more
//! commands from local senders; and the lanes wake the kind's task so that it stays on one
//! worker thread (`completions.rs` says how, and why it matters).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::{FutureExt, StreamExt};
use tokio::sync::Notify;

use shardik_core::membership::UniqueAddress;
use shardik_core::sharding::ShardId;

use super::cells::{Args, Cells};
use super::lifecycle::Completed;
use crate::metrics as m;
use crate::sharding::api::Entity;

mod completions;
#[cfg(test)]
mod tests;

pub(crate) use completions::Completions;
use completions::{Chunk, MAX_SPARE_CHUNKS};

/// One handler in this many that the kind's task runs itself is timed.
const SAMPLE_EVERY: u32 = 64;
/// Handlers whose mean run time is at least this go to the lanes.
const SPREAD_FROM: Duration = Duration::from_micros(2);
/// Most handlers a lane runs before it hands back what finished and yields: the size of a
/// chunk.
const LANE_TURN: usize = 32;
/// Most a sample counts for in the mean. One handler that was preempted, or found everything
/// out of cache, can take a thousand times the usual; counted whole, it sent a kind of short
/// handlers to the lanes for thousands of commands, where each costs more to hand over than
/// to run (seen in `bench sharding local`, whose handlers take well under a microsecond).
/// Capped, one such sample moves a mean of short handlers by under a microsecond, and a kind
/// of handlers that take 2 µs or more still reaches [`SPREAD_FROM`]. The price: a kind of
/// mostly short handlers with rare long ones keeps them all in its task, as before the lanes
/// (long work belongs in `EntityContext::blocking`).
const SAMPLE_CAP: Duration = Duration::from_micros(8);
/// Weight of a new sample in the mean, as a shift: 1/8.
const MEAN_SHIFT: u32 = 3;
/// Chunks a lane has waiting for it before the kind's task stops taking in commands: enough
/// that a lane finishing its chunk finds the next one while the kind's task waits for its
/// turn on a worker. Taking in more only deepened the entities' queues, and reading back deep
/// queues, out of cache, cost the kind's task more than its routing (docs/PERFORMANCE-HISTORY.md, "One kind on several cores").
const CHUNKS_AHEAD: usize = 2;

/// The jobs waiting for a lane, shared by the kind's lanes: whichever lane is free takes the
/// next ones, so a lane that got slower work, or shares its worker thread with the kind's task,
/// does not hold back work another lane could run.
struct Queue<E: Entity> {
    state: Mutex<QueueState<E>>,
    /// Wakes the lanes waiting for work.
    wake: Notify,
    /// Handlers in `chunks`, which no lane has taken yet (read by the kind's task without the
    /// lock, to decide whether to take in more commands: [`Lanes::full`]).
    waiting: AtomicUsize,
}

struct QueueState<E: Entity> {
    chunks: VecDeque<Chunk<E>>,
    /// The kind's task is gone: the lanes end once nothing is left.
    closed: bool,
}

impl<E: Entity> Queue<E> {
    fn lock(&self) -> MutexGuard<'_, QueueState<E>> {
        // A panic while the lock was held left nothing half-done worth refusing.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The lanes of one kind on this node, as its task sees them.
pub(crate) struct Lanes<E: Entity> {
    queue: Arc<Queue<E>>,
    /// Jobs started during the current turn, in chunks; only the last may have room.
    staged: Vec<Chunk<E>>,
    /// Emptied chunks to stage into.
    spare: Vec<Chunk<E>>,
    completions: Arc<Completions<E>>,
    /// Handlers the kind's task ran itself since the last timed one.
    since_sample: u32,
    /// The mean run time of a handler, in nanoseconds.
    mean_nanos: u64,
    /// Whether handlers go to the lanes: the mean, as of the last turn, is worth the trip.
    spread: bool,
    /// Handlers sent to the lanes that have not come back (finished or withdrawn).
    outstanding: usize,
    /// The kind's task took completions and has not settled since.
    taking: bool,
    /// Handlers waiting in the lanes' queue at which they have enough to run: see
    /// [`full`](Self::full).
    enough: usize,
}

impl<E: Entity> Lanes<E> {
    /// Spawns `count` lanes of kind `kind`, whose entities run on `node`, on the current
    /// runtime.
    pub fn start(count: usize, kind: &str, node: &UniqueAddress) -> Self {
        let ran_here =
            metrics::counter!(m::SHARDING_LANE_HANDLERS_TOTAL, "kind" => kind.to_string());
        let completions = Arc::new(Completions::new());
        let queue = Arc::new(Queue {
            state: Mutex::new(QueueState {
                chunks: VecDeque::new(),
                closed: false,
            }),
            wake: Notify::new(),
            waiting: AtomicUsize::new(0),
        });
        for _ in 0..count {
            crate::task::spawn(run_lane(
                Cells::new(node),
                Arc::clone(&queue),
                Arc::clone(&completions),
                ran_here.clone(),
            ));
        }
        Lanes {
            queue,
            staged: Vec::new(),
            spare: Vec::new(),
            completions,
            since_sample: 0,
            mean_nanos: 0,
            spread: false,
            outstanding: 0,
            taking: false,
            enough: count * CHUNKS_AHEAD * LANE_TURN,
        }
    }

    /// Handlers sent to the lanes that have not come back yet.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Whether enough handlers wait for a lane to keep every lane busy until the kind's task
    /// next runs ([`CHUNKS_AHEAD`] chunks a lane). Handlers that started and await are not
    /// counted: a kind whose handlers wait for a store keeps as many of them waiting as its
    /// senders ask for.
    pub fn full(&self) -> bool {
        self.queue.waiting.load(Ordering::Relaxed) >= self.enough
    }

    /// Moves what the lanes finished into `into`. Until [`settle`](Self::settle), the lanes
    /// leave the kind's task to look for more itself.
    pub fn take(&mut self, into: &mut Vec<Completed<E>>) {
        let before = into.len();
        self.completions.take(into);
        self.taking = true;
        self.outstanding -= into.len() - before;
    }

    /// The kind's task is about to wait: what the lanes handed back since it last took
    /// completions wakes it at once.
    pub fn settle(&mut self) {
        if std::mem::take(&mut self.taking) {
            self.completions.settle();
        }
    }

    /// Where the lanes hand back finished handlers.
    pub fn completions(&self) -> Arc<Completions<E>> {
        Arc::clone(&self.completions)
    }

    /// Whether handlers go to the lanes now: their mean run time, as of the last turn, is
    /// worth the trip.
    pub fn spreading(&self) -> bool {
        self.spread
    }

    /// Takes in what the lanes measured since the last turn, and decides whether handlers go
    /// to them during the next one (once per turn: the lanes write those counters).
    fn refresh(&mut self) {
        let (nanos, ran) = self.completions.take_timings();
        if let Some(mean) = nanos.checked_div(ran) {
            self.mix(mean);
        }
        self.spread = self.mean_nanos >= SPREAD_FROM.as_nanos() as u64;
    }

    /// Whether the handler the kind's task is about to run itself is one to time.
    pub fn sample_due(&mut self) -> bool {
        self.since_sample += 1;
        if self.since_sample >= SAMPLE_EVERY {
            self.since_sample = 0;
            true
        } else {
            false
        }
    }

    /// A handler the kind's task ran itself took `took`.
    pub fn sampled(&mut self, took: Duration) {
        self.mix(took.as_nanos().min(u64::MAX as u128) as u64);
    }

    fn mix(&mut self, sample: u64) {
        let sample = sample.min(SAMPLE_CAP.as_nanos() as u64);
        if self.mean_nanos == 0 {
            self.mean_nanos = sample;
        } else {
            self.mean_nanos =
                self.mean_nanos - (self.mean_nanos >> MEAN_SHIFT) + (sample >> MEAN_SHIFT);
        }
    }

    /// Stages `job` for the lanes; it goes at the end of the turn ([`send`](Self::send)).
    pub fn stage(&mut self, job: Args<E>) {
        match self.staged.last_mut() {
            Some(chunk) if chunk.len() < LANE_TURN => chunk.push(job),
            _ => {
                let mut chunk = self
                    .spare
                    .pop()
                    .unwrap_or_else(|| Vec::with_capacity(LANE_TURN));
                chunk.push(job);
                self.staged.push(chunk);
            }
        }
    }

    /// Takes back every job of `shard` that no lane has started yet, into `into`: its shard
    /// was stopped at once (its lease lost), and a handler that had not started by then must
    /// not start afterwards, however long the queue.
    pub fn withdraw(&mut self, shard: &ShardId, into: &mut Vec<Args<E>>) {
        for chunk in &mut self.staged {
            take_shard(chunk, shard, into);
        }
        self.staged.retain(|chunk| !chunk.is_empty());
        // Those sent already were counted as outstanding.
        let before = into.len();
        let mut state = self.queue.lock();
        for chunk in &mut state.chunks {
            take_shard(chunk, shard, into);
        }
        state.chunks.retain(|chunk| !chunk.is_empty());
        self.queue
            .waiting
            .fetch_sub(into.len() - before, Ordering::Relaxed);
        drop(state);
        self.outstanding -= into.len() - before;
    }

    /// Hands the lanes what was staged during this turn, at its end.
    pub fn send(&mut self) {
        self.refresh();
        if self.staged.is_empty() {
            return;
        }
        let staged = self.staged.iter().map(Vec::len).sum::<usize>();
        self.outstanding += staged;
        let mut state = self.queue.lock();
        state.chunks.extend(self.staged.drain(..));
        self.queue.waiting.fetch_add(staged, Ordering::Relaxed);
        drop(state);
        self.queue.wake.notify_waiters();
        // The chunks the lanes emptied since the last turn, to fill during the next ones.
        if self.spare.len() < MAX_SPARE_CHUNKS {
            self.completions.take_emptied(&mut self.spare);
        }
    }
}

impl<E: Entity> Drop for Lanes<E> {
    /// The kind's task is gone: what no lane started is dropped (its askers learn the kind
    /// stopped), and the lanes end once their handlers that await are done.
    fn drop(&mut self) {
        let mut state = self.queue.lock();
        state.closed = true;
        state.chunks.clear();
        drop(state);
        self.queue.wake.notify_waiters();
    }
}

/// Moves the jobs of `shard` out of `chunk` into `into`, keeping the others in order.
fn take_shard<E: Entity>(chunk: &mut Chunk<E>, shard: &ShardId, into: &mut Vec<Args<E>>) {
    if !chunk.iter().any(|job| job.shard == *shard) {
        return;
    }
    let (theirs, others): (Vec<_>, Vec<_>) = chunk.drain(..).partition(|job| job.shard == *shard);
    into.extend(theirs);
    chunk.extend(others);
}

/// One lane: takes the next chunk from the kind's queue, runs it, hands back what finished.
async fn run_lane<E: Entity>(
    mut cells: Cells<E>,
    queue: Arc<Queue<E>>,
    completions: Arc<Completions<E>>,
    ran_here: metrics::Counter,
) {
    let mut finished: Vec<Completed<E>> = Vec::new();
    // Whether this lane stays on the kind's task's thread, bound to wake it ([`Completions`]).
    let mut at_home = false;
    loop {
        // Registered before the queue is looked at, so that jobs queued after the look wake
        // this lane (`notify_waiters` wakes only the registered).
        let woken = queue.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let chunk = {
            let mut state = queue.lock();
            let chunk = state.chunks.pop_front();
            if let Some(chunk) = &chunk {
                queue.waiting.fetch_sub(chunk.len(), Ordering::Relaxed);
            }
            if state.closed && chunk.is_none() && cells.running.is_empty() {
                return;
            }
            chunk
        };
        if let Some(mut chunk) = chunk {
            let started = Instant::now();
            at_home = completions.start_chunk(at_home, started);
            let ran = chunk.len() as u64;
            for job in chunk.drain(..) {
                finished.extend(cells.start(job));
            }
            let nanos = started.elapsed().as_nanos().min(u64::MAX as u128) as u64;
            ran_here.increment(ran);
            completions.return_chunk(chunk);
            completions.hand_back(&mut finished, nanos, ran, at_home);
            // A turn is over: the other tasks of this worker (the kind's own, the senders)
            // run before the next one.
            tokio::task::yield_now().await;
        } else {
            if at_home {
                completions.leave();
                at_home = false;
            }
            tokio::select! {
                biased;
                Some(done) = cells.running.next(), if !cells.running.is_empty() => {
                    finished.push(done);
                }
                _ = woken => {}
            }
        }
        // Handlers that awaited and are done by now.
        while let Some(Some(done)) = cells.running.next().now_or_never() {
            finished.push(done);
        }
        completions.hand_back(&mut finished, 0, 0, false);
    }
}
