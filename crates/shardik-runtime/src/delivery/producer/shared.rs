//! What a producer's handles and its task share: the core, under a lock, and what the core
//! asked for that the task has yet to carry out.
//!
//! A sender offers its command to the core itself, under the lock, instead of asking the task
//! and waiting for it to answer: accepting a command into an in-memory queue costs the sender
//! a lock and no task switch, and the task wakes once for all that was offered meanwhile.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use shardik_core::Instant as CoreInstant;
use shardik_core::delivery::{Outbox, Producer, ProducerEffect, StreamId};
use shardik_persistence::QueuedMessage;
use tokio::sync::{Notify, oneshot};

use super::outcome::{Accepted, ProducerError};

/// Who waits for an accepted command to be stored, and what to tell them then.
pub(super) type Unstored = (
    QueuedMessage,
    Accepted,
    oneshot::Sender<Result<Accepted, ProducerError>>,
);

/// The producer's state behind its lock.
pub(super) struct State<C> {
    /// The decisions (numbering, windows, resends), and what they released: with a durable
    /// queue, nothing leaves before it is stored.
    pub(super) outbox: Outbox<Arc<str>, C, Unstored>,
    /// No more offers are accepted: the producer was stopped, every handle was dropped, or
    /// its durable queue failed.
    pub(super) stopped: bool,
    /// Who asked the producer to stop, answered once it has.
    pub(super) stop_waiters: Vec<oneshot::Sender<()>>,
    /// The task has ended: nobody is left to answer a stop.
    pub(super) ended: bool,
}

/// Shared by a producer's handles and its task.
pub(super) struct Shared<C> {
    pub(super) id: Arc<str>,
    /// The moment the core's clock counts from.
    pub(super) base: tokio::time::Instant,
    /// Whether accepted commands are stored before they count as accepted.
    pub(super) durable: bool,
    state: Mutex<State<C>>,
    /// Wakes the task: something to carry out, or a stop.
    pub(super) work: Notify,
    /// Wakes senders that wait for the producer to hold fewer unconfirmed commands.
    pub(super) room: Notify,
    /// How many accepted commands wait for confirmation (written under the lock).
    pub(super) unconfirmed: AtomicUsize,
    /// Wakes whoever waits for every accepted command to be confirmed, when none is left.
    pub(super) drained: Notify,
}

impl<C> Shared<C> {
    pub(super) fn lock(&self) -> MutexGuard<'_, State<C>> {
        // Nothing panics while holding the lock (the core does not), but a poisoned producer
        // is still a producer.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The core's clock now.
    pub(super) fn now(&self) -> CoreInstant {
        CoreInstant::from_nanos(
            tokio::time::Instant::now()
                .saturating_duration_since(self.base)
                .as_nanos() as u64,
        )
    }

    /// The tokio instant of the core's instant `at`.
    pub(super) fn instant(&self, at: CoreInstant) -> tokio::time::Instant {
        self.base + Duration::from_nanos(at.as_nanos())
    }

    /// Stops accepting offers and wakes the task, which finishes what was accepted.
    pub(super) fn stop(&self, waiter: Option<oneshot::Sender<()>>) {
        let mut state = self.lock();
        state.stopped = true;
        if !state.ended {
            state.stop_waiters.extend(waiter);
        }
        drop(state);
        self.work.notify_one();
    }
}

impl<C: Clone> Shared<C> {
    pub(super) fn new(
        id: Arc<str>,
        base: tokio::time::Instant,
        durable: bool,
        core: Producer<Arc<str>, C>,
        effects: Vec<ProducerEffect<Arc<str>, C>>,
    ) -> Self {
        let unconfirmed = AtomicUsize::new(core.unconfirmed());
        Shared {
            id,
            base,
            durable,
            state: Mutex::new(State {
                outbox: Outbox::new(core, effects),
                stopped: false,
                stop_waiters: Vec::new(),
                ended: false,
            }),
            work: Notify::new(),
            room: Notify::new(),
            unconfirmed,
            drained: Notify::new(),
        }
    }

    /// Publishes how many commands wait for confirmation (while the lock is held, so that the
    /// count never goes back), and wakes who waits for none to be left if none is. A plain
    /// count, not a watch channel: each offer changes it, and nobody waits for most values.
    pub(super) fn publish_unconfirmed(&self, state: &State<C>) {
        let unconfirmed = state.outbox.unconfirmed();
        self.unconfirmed.store(unconfirmed, Ordering::Release);
        if unconfirmed == 0 {
            self.drained.notify_waiters();
        }
    }

    /// Offers `cmd` for `to` under the lock, if the producer has room: `Ok(Err(cmd))` when it
    /// has not. With `payload` (a durable queue), the command waits for the next write, and
    /// the receiver hears when it is stored.
    #[allow(clippy::type_complexity)]
    pub(super) fn try_offer(
        &self,
        kind: &Arc<str>,
        to: &Arc<str>,
        cmd: C,
        payload: &mut Option<bytes::Bytes>,
    ) -> Result<Result<Offered, C>, ProducerError> {
        // Read before the lock is taken: senders contend for it. A sender that waited for the
        // lock hands the core an instant a moment older than one the task may have handed it
        // meanwhile; the core only adds durations to the instants it is given (deadlines, idle
        // times), so a stream's deadline is at most that moment early.
        let now = self.now();
        let mut guard = self.lock();
        let state = &mut *guard;
        if state.stopped {
            return Err(ProducerError::Stopped(self.id.to_string()));
        }
        if state.outbox.is_full() {
            return Ok(Err(cmd));
        }
        // The task takes everything there is when it runs: it needs waking only by the first
        // offer since it last took.
        let wake = !state.outbox.has_work();
        let (placed, stored) = match payload.take() {
            None => (state.outbox.offer(now, Arc::clone(to), cmd), None),
            Some(payload) => {
                let (answer, stored) = oneshot::channel();
                let row = |stream: StreamId, seq| {
                    let row = QueuedMessage {
                        kind: Arc::clone(kind),
                        entity: Arc::clone(to),
                        epoch: stream.epoch,
                        stream: stream.number,
                        seq,
                        payload,
                    };
                    (row, Accepted { stream, seq }, answer)
                };
                let placed = state.outbox.offer_stored(now, Arc::clone(to), cmd, row);
                (placed, Some(stored))
            }
        };
        let Ok((stream, seq)) = placed else {
            // Not reached: there was room, under the same lock.
            return Err(ProducerError::Stopped(self.id.to_string()));
        };
        let accepted = Accepted { stream, seq };
        self.publish_unconfirmed(state);
        Ok(Ok(Offered {
            accepted,
            stored,
            wake,
        }))
    }
}

/// A command the producer accepted: its place, and (with a durable queue) what tells when it
/// is stored.
pub(super) struct Offered {
    pub(super) accepted: Accepted,
    pub(super) stored: Option<oneshot::Receiver<Result<Accepted, ProducerError>>>,
    /// Whether the task must be woken to carry it out.
    pub(super) wake: bool,
}
