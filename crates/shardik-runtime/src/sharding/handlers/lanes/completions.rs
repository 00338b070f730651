//! The way back from a kind's lanes to its task: finished handlers, how long they took, the
//! chunks the lanes emptied, and who wakes the kind's task to take them.
//!
//! Who wakes it matters. tokio runs a task woken from a worker thread on that worker, so a
//! kind's task woken by whichever lane finished a chunk moved between the workers at almost
//! every chunk, and each move left its entity table in the other core's cache: its lookups
//! took two to three times as long in the runs where the two vCPUs shared no cache, which made
//! the ratio to plain tasks swing between 0.83 and 0.93 from one run to the next.
//!
//! So the kind's task has a home, the thread it last took completions on, and the wake-up is
//! left to whoever is there:
//! - a lane that starts a chunk on the home thread *stays at home* (is counted in
//!   `home_lanes`) until it finds the queue empty or itself on another thread; at the end of
//!   each chunk it wakes the kind's task if anything is waiting, its own handlers or others';
//! - while the kind's task is taking completions and acting on them (`kind_busy`), nobody wakes
//!   it: before it waits again it looks for what came meanwhile ([`Completions::settle`]);
//! - a lane on another thread wakes the kind's task only when neither is the case, or when no
//!   lane at home has started a chunk for [`HOME_WAIT`] (a handler that blocks the home thread
//!   holds back the others' completions no longer than that).
//!
//! Every decision is taken under the one lock that guards the finished handlers, so a
//! completion is never left without someone bound to announce it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::sharding::api::Entity;
use crate::sharding::handlers::cells::Args;
use crate::sharding::handlers::lifecycle::Completed;

/// Handlers' arguments, at most `LANE_TURN` (lanes.rs) of them, in the order they were staged:
/// what the kind's task hands a lane at once, and what comes back here emptied, for reuse.
pub(super) type Chunk<E> = Vec<Args<E>>;

/// Most emptied chunks kept for reuse.
pub(super) const MAX_SPARE_CHUNKS: usize = 64;

/// Longest a lane on another thread than the kind's task leaves waking it to the lanes at
/// home, counted from the last chunk one of them started (see the module text): some ten
/// chunks of 5 µs handlers.
const HOME_WAIT: Duration = Duration::from_millis(2);

/// What the lanes hand back to the kind's task (see the module text).
pub(crate) struct Completions<E: Entity> {
    finished: HomeQueue<Completed<E>>,
    /// Emptied chunks, for the kind's task to fill again rather than allocate.
    emptied: Mutex<Vec<Chunk<E>>>,
    /// Nanoseconds the lanes spent in handlers, and how many, since the kind's task last read
    /// them.
    handler_nanos: AtomicU64,
    handlers: AtomicU64,
}

impl<E: Entity> Completions<E> {
    pub(super) fn new() -> Self {
        Completions {
            finished: HomeQueue::new(),
            emptied: Mutex::new(Vec::new()),
            handler_nanos: AtomicU64::new(0),
            handlers: AtomicU64::new(0),
        }
    }

    /// Waits until a lane has handed something back (at once if it did since the last wait).
    pub async fn ready(&self) {
        self.finished.wake.notified().await;
    }

    /// The kind's task moves every finished handler into `into`; see [`HomeQueue::take`].
    pub(super) fn take(&self, into: &mut Vec<Completed<E>>) {
        self.finished.take(into);
    }

    /// The kind's task is about to wait; see [`HomeQueue::settle`].
    pub(super) fn settle(&self) {
        self.finished.settle();
    }

    /// A lane starts a chunk; see [`HomeQueue::start_chunk`].
    pub(super) fn start_chunk(&self, at_home: bool, now: Instant) -> bool {
        self.finished.start_chunk(at_home, now)
    }

    /// A lane at home found nothing to run; see [`HomeQueue::leave`].
    pub(super) fn leave(&self) {
        self.finished.leave();
    }

    /// A lane hands `finished` to the kind's task, with the time `ran` handlers took; see
    /// [`HomeQueue::hand_back`] for `at_home`.
    pub(super) fn hand_back(
        &self,
        finished: &mut Vec<Completed<E>>,
        nanos: u64,
        ran: u64,
        at_home: bool,
    ) {
        if ran > 0 {
            self.handler_nanos.fetch_add(nanos, Ordering::Relaxed);
            self.handlers.fetch_add(ran, Ordering::Relaxed);
        }
        self.finished.hand_back(finished, at_home);
    }

    /// The handlers' statistics since the kind's task last read them: nanoseconds and count.
    pub(super) fn take_timings(&self) -> (u64, u64) {
        (
            self.handler_nanos.swap(0, Ordering::Relaxed),
            self.handlers.swap(0, Ordering::Relaxed),
        )
    }

    /// Takes back an emptied chunk (dropped if enough are waiting already).
    pub(super) fn return_chunk(&self, chunk: Chunk<E>) {
        debug_assert!(chunk.is_empty());
        let mut emptied = self.emptied.lock().unwrap_or_else(|e| e.into_inner());
        if emptied.len() < MAX_SPARE_CHUNKS {
            emptied.push(chunk);
        }
    }

    /// Moves the chunks the lanes emptied into `into`.
    pub(super) fn take_emptied(&self, into: &mut Vec<Chunk<E>>) {
        into.append(&mut self.emptied.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

/// Items handed from the lanes to the kind's task, and who is bound to wake it for them (the
/// module text).
struct HomeQueue<T> {
    state: Mutex<HomeState<T>>,
    /// The thread the kind's task last took items on (a [`thread_tag`]).
    home: AtomicU64,
    wake: Notify,
}

struct HomeState<T> {
    items: Vec<T>,
    /// Lanes staying at home: each wakes the kind's task at the end of its chunks.
    home_lanes: usize,
    /// When a lane at home last started a chunk.
    home_active: Option<Instant>,
    /// The kind's task is taking items and will look again before it waits.
    kind_busy: bool,
}

impl<T> HomeQueue<T> {
    fn new() -> Self {
        HomeQueue {
            state: Mutex::new(HomeState {
                items: Vec::new(),
                home_lanes: 0,
                home_active: None,
                kind_busy: false,
            }),
            home: AtomicU64::new(0),
            wake: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HomeState<T>> {
        // A panic while the lock was held left nothing half-done worth refusing.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The kind's task moves every item into `into`. Its thread becomes the home, and nobody
    /// wakes it until it [`settle`](Self::settle)s.
    fn take(&self, into: &mut Vec<T>) {
        let here = thread_tag();
        if self.home.load(Ordering::Relaxed) != here {
            self.home.store(here, Ordering::Relaxed);
        }
        let mut state = self.lock();
        state.kind_busy = true;
        into.append(&mut state.items);
    }

    /// The kind's task is about to wait: if lanes handed something back since it took items,
    /// it is woken at once (on its own thread, as it is running).
    fn settle(&self) {
        let mut state = self.lock();
        state.kind_busy = false;
        let waiting = !state.items.is_empty();
        drop(state);
        if waiting {
            self.wake.notify_one();
        }
    }

    /// A lane starts a chunk at `now`; `at_home` is whether it stayed at home so far. Answers
    /// whether it stays at home for this chunk: it does if it runs on the kind's task's
    /// thread. One that finds itself elsewhere leaves (and wakes the kind's task if what it
    /// was bound to announce is waiting).
    fn start_chunk(&self, at_home: bool, now: Instant) -> bool {
        let home = self.home.load(Ordering::Relaxed) == thread_tag();
        if !home && !at_home {
            return false;
        }
        let mut state = self.lock();
        if home {
            if !at_home {
                state.home_lanes += 1;
            }
            state.home_active = Some(now);
            return true;
        }
        self.leave_locked(state);
        false
    }

    /// A lane at home found nothing to run and is about to wait: it leaves home.
    fn leave(&self) {
        self.leave_locked(self.lock());
    }

    fn leave_locked(&self, mut state: MutexGuard<'_, HomeState<T>>) {
        state.home_lanes -= 1;
        if state.home_lanes == 0 {
            state.home_active = None;
        }
        let wake = !state.kind_busy && !state.items.is_empty();
        drop(state);
        if wake {
            self.wake.notify_one();
        }
    }

    /// A lane hands `items` to the kind's task. `at_home`: the lane ended a chunk at home,
    /// and wakes the kind's task for whatever is waiting, its own or not.
    fn hand_back(&self, items: &mut Vec<T>, at_home: bool) {
        if items.is_empty() && !at_home {
            return;
        }
        let mut state = self.lock();
        state.items.append(items);
        let wake = !state.kind_busy
            && !state.items.is_empty()
            && (at_home
                || state.home_lanes == 0
                || state
                    .home_active
                    .is_none_or(|since| since.elapsed() >= HOME_WAIT));
        drop(state);
        if wake {
            self.wake.notify_one();
        }
    }
}

/// A number naming the current thread (never 0), for a lane to tell whether it runs on the
/// kind's task's thread.
fn thread_tag() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static TAG: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    TAG.with(|tag| *tag)
}

#[cfg(test)]
mod tests;
