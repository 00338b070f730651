//! The producer's task: carries out what the core decided (sends through sharding, writes to
//! the durable queue, deletions of what was confirmed) and feeds the core the entities'
//! answers and its timers.
//!
//! With a durable queue, no command leaves before it is stored: the core's
//! [`Outbox`](shardik_core::delivery::Outbox) decides what is released when, and the task
//! writes what it hands over while answers and timers go on being heard. Commands accepted
//! during a write wait for the next one, which carries all of them at once.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use shardik_core::delivery::{ConsumerReply, OutboxStep, ProducerEffect, StreamId};
use shardik_persistence::{QueueConfirmation, Store, StoreError};
use tokio::sync::oneshot;

use super::confirmer::Confirmer;
use super::outcome::{Accepted, ProducerError};
use super::shared::{Shared, Unstored};
use crate::delivery::consumer::{Reliable, ReliableConsumer};
use crate::delivery::message::{Delivery, SequencedCommand};
use crate::sharding::{EntityRegion, ShardingError};

/// The most commands sent together as one run. Runs bound the messages and answers per
/// command; this bound keeps a run's frame far below the transport's frame limit for commands
/// of ordinary size (an entity whose run went unanswered is sent one command at a time until
/// it answers, in case the run was too large to travel).
const MAX_RUN: usize = 32;

/// An entity's answer about one of its streams, with how many commands the run it answers
/// held (or why no answer came).
type Answer = (
    Arc<str>,
    StreamId,
    usize,
    Result<ConsumerReply, ShardingError>,
);

/// A write of accepted commands to the durable queue, under way (what waits for it is held
/// by the outbox).
struct Storing {
    write: BoxFuture<'static, Result<(), StoreError>>,
    /// Who waits for it.
    waiting: Vec<(Accepted, oneshot::Sender<Result<Accepted, ProducerError>>)>,
}

/// The producer's task: see the module.
pub(super) struct ProducerTask<E: ReliableConsumer> {
    pub(super) shared: Arc<Shared<E::Command>>,
    pub(super) region: EntityRegion<Reliable<E>>,
    pub(super) queue: Option<Arc<dyn Store>>,
    pub(super) ask_timeout: Duration,
    pub(super) answers: FuturesUnordered<BoxFuture<'static, Answer>>,
    /// Entities a run went unanswered to: sent one command at a time until they answer.
    pub(super) one_at_a_time: HashSet<Arc<str>>,
    /// Deletes confirmed commands from the durable queue, if there is one.
    pub(super) confirmer: Option<Confirmer>,
}

impl<E> ProducerTask<E>
where
    E: ReliableConsumer,
    E::Command: serde::Serialize + Clone + Send + Sync + 'static,
{
    pub(super) async fn run(mut self) {
        let shared = Arc::clone(&self.shared);
        let mut storing: Option<Storing> = None;
        loop {
            let (step, stopped) = {
                let mut state = shared.lock();
                (state.outbox.next_step(), state.stopped)
            };
            match step {
                Some(OutboxStep::CarryOut(effects)) => self.carry_out(effects).await,
                Some(OutboxStep::Store(unstored)) => storing = Some(self.store(unstored)),
                // Stopped, with everything accepted stored and sent.
                None if stopped && storing.is_none() => break,
                None => {}
            }
            let deadline = shared
                .lock()
                .outbox
                .poll_timeout()
                .map(|at| shared.instant(at));
            tokio::select! {
                () = shared.work.notified() => {}
                written = wait_for(&mut storing) => {
                    if let Some(done) = storing.take() {
                        self.stored(written, done).await;
                    }
                }
                Some(answer) = self.answers.next(), if !self.answers.is_empty() => {
                    self.on_answers(answer);
                }
                () = sleep_until(deadline) => {
                    let now = shared.now();
                    shared.lock().outbox.handle_timeout(now);
                }
            }
        }
        // Let the confirmations already on their way reach the store, then tell who stopped
        // the producer.
        if let Some(confirmer) = self.confirmer.take() {
            confirmer.finish().await;
        }
        let waiters = {
            let mut state = shared.lock();
            state.ended = true;
            std::mem::take(&mut state.stop_waiters)
        };
        for done in waiters {
            let _ = done.send(());
        }
    }

    /// Starts the write of `unstored` to the durable queue.
    fn store(&self, unstored: Vec<Unstored>) -> Storing {
        let mut rows = Vec::with_capacity(unstored.len());
        let mut waiting = Vec::with_capacity(unstored.len());
        for (row, accepted, answer) in unstored {
            rows.push(row);
            waiting.push((accepted, answer));
        }
        let write: BoxFuture<'static, Result<(), StoreError>> = match &self.queue {
            Some(store) => {
                let (store, id) = (Arc::clone(store), Arc::clone(&self.shared.id));
                Box::pin(async move { store.enqueue(&id, rows).await })
            }
            // Not reached: only a producer with a durable queue has commands to store.
            None => Box::pin(std::future::ready(Err(StoreError::Failed(
                "no durable queue to store commands in".into(),
            )))),
        };
        Storing { write, waiting }
    }

    /// A write to the durable queue is done: its commands are accepted and what waited for it
    /// is carried out; or it failed, and the producer stops, sending nothing of what waited
    /// (it may not be stored). What the queue holds is sent at the producer's next start.
    async fn stored(&mut self, written: Result<(), StoreError>, done: Storing) {
        match written {
            Ok(()) => {
                let released = self.shared.lock().outbox.stored();
                for (accepted, answer) in done.waiting {
                    let _ = answer.send(Ok(accepted));
                }
                self.carry_out(released).await;
            }
            Err(error) => {
                let id = &self.shared.id;
                tracing::error!(producer = %id, %error, "the durable producer queue failed; the producer stops");
                let refused = || ProducerError::Queue {
                    producer: id.to_string(),
                    error: error.clone(),
                };
                let later = {
                    let mut state = self.shared.lock();
                    state.stopped = true;
                    state.outbox.write_failed()
                };
                for (_, answer) in done.waiting {
                    let _ = answer.send(Err(refused()));
                }
                for (_, _, answer) in later {
                    let _ = answer.send(Err(refused()));
                }
            }
        }
    }

    /// Feeds the core `first` and every other answer already there, at once.
    fn on_answers(&mut self, first: Answer) {
        let mut ready = vec![first];
        while let Some(Some(more)) = self.answers.next().now_or_never() {
            ready.push(more);
        }
        let now = self.shared.now();
        let mut guard = self.shared.lock();
        let state = &mut *guard;
        let before = state.outbox.unconfirmed();
        for (to, stream, commands, answer) in ready {
            match answer {
                Ok(reply) => {
                    self.one_at_a_time.remove(&to);
                    state.outbox.on_reply(now, &to, stream, reply);
                }
                // No answer (timed out, the entity failed, its shard was unavailable): the
                // resend timer sends it again, one command at a time if a run went unanswered.
                Err(_) if commands > 1 => {
                    self.one_at_a_time.insert(to);
                }
                Err(_) => {}
            }
        }
        let confirmed = state.outbox.unconfirmed() < before;
        self.shared.publish_unconfirmed(state);
        drop(guard);
        if confirmed {
            self.shared.room.notify_waiters();
        }
    }

    /// Sends what the core asks to send, and deletes what it says is confirmed from the
    /// durable queue. Consecutive commands of a stream go together, as one run: one message
    /// and one answer for up to [`MAX_RUN`] commands.
    async fn carry_out(&mut self, effects: Vec<ProducerEffect<Arc<str>, E::Command>>) {
        if effects.is_empty() {
            return;
        }
        let mut confirmations = Vec::new();
        let mut runs: Vec<Run<E::Command>> = Vec::new();
        // The run each entity's next command may join, by its place in `runs`.
        let mut open: HashMap<Arc<str>, usize> = HashMap::new();
        for effect in effects {
            match effect {
                ProducerEffect::Send {
                    to,
                    stream,
                    seq,
                    first,
                    payload,
                } => {
                    let limit = if self.one_at_a_time.contains(&to) {
                        1
                    } else {
                        MAX_RUN
                    };
                    if let Some(&at) = open.get(&to) {
                        let run = &mut runs[at];
                        if run.stream == stream
                            && run.next_seq() == seq
                            && !first
                            && run.commands.len() < limit
                        {
                            run.commands.push(payload);
                            continue;
                        }
                    }
                    open.insert(Arc::clone(&to), runs.len());
                    runs.push(Run {
                        to,
                        stream,
                        seq,
                        first,
                        commands: vec![payload],
                    });
                }
                ProducerEffect::Confirmed { stream, seq, .. } => {
                    confirmations.push(QueueConfirmation {
                        epoch: stream.epoch,
                        stream: stream.number,
                        up_to: seq,
                    })
                }
            }
        }
        for run in runs {
            self.send(run).await;
        }
        if let Some(confirmer) = &self.confirmer
            && !confirmations.is_empty()
        {
            confirmer.confirm(confirmations);
        }
    }

    /// Sends a run of commands as one ask whose answer is the entity's verdict. Asks are put
    /// in the region's queue one after the other, so the commands of a stream leave in order.
    async fn send(&mut self, run: Run<E::Command>) {
        let Run {
            to,
            stream,
            seq,
            first,
            commands,
        } = run;
        let entity = self.region.entity_ref(&to);
        let producer = Arc::clone(&self.shared.id);
        let count = commands.len();
        let sent = entity
            .send_ask(
                move |reply_to| {
                    Delivery::Sequenced(SequencedCommand {
                        producer,
                        stream,
                        seq,
                        first,
                        commands,
                        reply_to,
                    })
                },
                self.ask_timeout,
            )
            .await;
        match sent {
            Ok(answer) => self
                .answers
                .push(Box::pin(async move { (to, stream, count, answer.await) })),
            // Not even queued (the region stopped, or stayed full): the resend timer tries
            // again.
            Err(e) => {
                tracing::debug!(producer = %self.shared.id, entity = %to, error = %e, "reliable send not queued")
            }
        }
    }
}

/// Consecutive commands of one stream, sent as one message.
struct Run<C> {
    to: Arc<str>,
    stream: StreamId,
    /// The first command's sequence number.
    seq: u64,
    first: bool,
    commands: Vec<C>,
}

impl<C> Run<C> {
    /// The sequence number a command must have to join the run.
    fn next_seq(&self) -> u64 {
        self.seq + self.commands.len() as u64
    }
}

/// The outcome of the write under way; never, while none is.
async fn wait_for(storing: &mut Option<Storing>) -> Result<(), StoreError> {
    match storing {
        Some(s) => (&mut s.write).await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
