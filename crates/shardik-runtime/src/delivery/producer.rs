//! The reliable producer: a task per producer id that numbers the commands handed to it,
//! keeps each until its entity confirms it, sends it again until then, holds back while an
//! entity's window is used up, and (with a durable queue) stores each command before it is
//! accepted, so that a producer started again after a crash sends what was not confirmed.
//!
//! The decisions are the core's [`Producer`]; this file carries them out with asks through
//! sharding and calls to the store.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use shardik_core::Instant as CoreInstant;
use shardik_core::delivery::{ConsumerReply, Producer, ProducerEffect, ProducerSettings, StreamId};
use shardik_persistence::{
    QueueConfirmation, QueuedMessage, QueuedStream, Store, StoreError, queued_streams,
};
use tokio::sync::{mpsc, oneshot, watch};

use super::consumer::{Reliable, ReliableConsumer};
use super::message::{Delivery, SequencedCommand};
use crate::sharding::{EntityRegion, ShardingError};

/// How a reliable producer is named, paced and made durable.
#[derive(Clone)]
pub struct ProducerOptions {
    id: String,
    settings: ProducerSettings,
    queue: Option<Arc<dyn Store>>,
}

impl std::fmt::Debug for ProducerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProducerOptions")
            .field("id", &self.id)
            .field("settings", &self.settings)
            .field("queue", &self.queue.as_ref().map(|s| s.location()))
            .finish()
    }
}

impl ProducerOptions {
    /// A producer named `id`, unique in the cluster (entities keep their marks per producer
    /// id), with the default pacing and an in-memory queue.
    pub fn new(id: &str) -> Self {
        ProducerOptions {
            id: id.to_string(),
            settings: ProducerSettings::default(),
            queue: None,
        }
    }

    /// Paces and bounds the producer with `settings` (window, unconfirmed limit, resend
    /// intervals, idle time).
    pub fn with_settings(mut self, settings: ProducerSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Keeps the producer's queue in `store`: a command is accepted once stored, and a
    /// producer started again with the same id (after a crash, on any node) sends what its
    /// entities had not confirmed. Without it, the queue lives in memory and goes with the
    /// producer.
    pub fn with_durable_queue(mut self, store: Arc<dyn Store>) -> Self {
        self.queue = Some(store);
        self
    }
}

/// Where an accepted command stands in its stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The stream to its entity.
    pub stream: StreamId,
    /// Its sequence number in the stream.
    pub seq: u64,
}

/// Why a producer could not start, or did not accept a command.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProducerError {
    /// The producer id is empty.
    #[error("a reliable producer needs a non-empty id")]
    EmptyId,
    /// The producer has stopped (it was stopped, or its durable queue failed).
    #[error("the reliable producer {0:?} has stopped")]
    Stopped(String),
    /// The durable queue's store failed: the command may or may not be stored (and then it
    /// is sent when the producer starts again).
    #[error("the durable queue of producer {producer:?} failed: {error}")]
    Queue {
        /// The producer.
        producer: String,
        /// What the store said.
        error: StoreError,
    },
    /// A command does not encode for the durable queue, or a stored one does not decode.
    #[error("producer {producer:?}: {why}")]
    Codec {
        /// The producer.
        producer: String,
        /// What failed.
        why: String,
    },
}

/// What the producer's task is asked.
enum Request<C> {
    Offer {
        to: Arc<str>,
        cmd: C,
        accepted: oneshot::Sender<Result<Accepted, ProducerError>>,
    },
    Stop(oneshot::Sender<()>),
}

/// A reliable producer (Akka's `ShardingProducerController`, with its durable queue): hand it
/// commands for entities of a [reliable kind](crate::sharding::EntityKind::reliable), and each
/// accepted command reaches its entity once per sequence number, in the order sent to that
/// entity, however often it has to be sent again. Clones share the producer.
pub struct ReliableProducer<C> {
    id: Arc<str>,
    requests: mpsc::Sender<Request<C>>,
    unconfirmed: watch::Receiver<usize>,
}

impl<C> Clone for ReliableProducer<C> {
    fn clone(&self) -> Self {
        ReliableProducer {
            id: Arc::clone(&self.id),
            requests: self.requests.clone(),
            unconfirmed: self.unconfirmed.clone(),
        }
    }
}

impl<C> std::fmt::Debug for ReliableProducer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReliableProducer")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// How many offers wait for the producer's task before `send` waits for room.
const REQUESTS: usize = 1024;

fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl<C> ReliableProducer<C>
where
    C: serde::Serialize + serde::de::DeserializeOwned + Clone + Send + Sync + 'static,
{
    /// Starts producer `options`' id sending to the entities of `region`'s kind (a region or
    /// a proxy of a reliable kind), on the current tokio runtime. With a durable queue, it
    /// first takes a new incarnation from the store and resumes what the queue holds.
    pub async fn start<E>(
        region: &EntityRegion<Reliable<E>>,
        options: ProducerOptions,
    ) -> Result<Self, ProducerError>
    where
        E: ReliableConsumer<Command = C>,
    {
        if options.id.is_empty() {
            return Err(ProducerError::EmptyId);
        }
        let id: Arc<str> = options.id.as_str().into();
        let queue_error = |error| ProducerError::Queue {
            producer: options.id.clone(),
            error,
        };
        // Each start is a new incarnation, whose streams every entity takes for newer than the
        // last one's: the store counts incarnations; without one, the clock does (restarts are
        // further apart than a millisecond).
        let (epoch, held) = match &options.queue {
            Some(store) => {
                let epoch = store.start_producer(&id).await.map_err(queue_error)?;
                let rows = store.queued(&id).await.map_err(queue_error)?;
                (epoch, rows)
            }
            None => (wall_clock_ms(), Vec::new()),
        };
        let base = tokio::time::Instant::now();
        let mut core = Producer::new(options.settings.clone(), epoch);
        let mut effects = Vec::new();
        let (streams, other_kinds) = queued_streams(region.kind(), held);
        if other_kinds > 0 {
            tracing::warn!(
                producer = %id,
                commands = other_kinds,
                "queued commands of another kind under this producer id are not resumed"
            );
        }
        for QueuedStream {
            entity,
            epoch,
            stream,
            messages: rows,
        } in streams
        {
            let stream = StreamId {
                epoch,
                number: stream,
            };
            let mut messages = Vec::with_capacity(rows.len());
            for (seq, payload) in rows {
                let cmd =
                    postcard::from_bytes::<C>(&payload).map_err(|e| ProducerError::Codec {
                        producer: options.id.clone(),
                        why: format!("a queued command for {entity:?} does not decode: {e}"),
                    })?;
                messages.push((seq, cmd));
            }
            core.resume(CoreInstant::ZERO, entity, stream, messages, &mut effects);
        }
        let (requests, rx) = mpsc::channel(REQUESTS);
        let (unconfirmed_tx, unconfirmed) = watch::channel(core.unconfirmed());
        let task = ProducerTask {
            id: Arc::clone(&id),
            region: region.clone(),
            core,
            base,
            queue: options.queue.clone(),
            ask_timeout: options.settings.resend_max,
            answers: FuturesUnordered::new(),
            confirmer: options
                .queue
                .clone()
                .map(|store| Confirmer::spawn(Arc::clone(&id), store)),
            unconfirmed: unconfirmed_tx,
            stopped: false,
            stop_waiters: Vec::new(),
        };
        crate::task::spawn(task.run(rx, effects));
        Ok(ReliableProducer {
            id,
            requests,
            unconfirmed,
        })
    }

    /// The producer's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Hands `cmd` for entity `entity` to the producer, and resolves once it is accepted:
    /// numbered in its stream and (with a durable queue) stored. From then on the producer
    /// sends it until the entity confirms it. Waits while the producer holds as many
    /// unconfirmed commands as its settings allow (flow control).
    pub async fn send(&self, entity: &str, cmd: C) -> Result<Accepted, ProducerError> {
        let (accepted, answer) = oneshot::channel();
        let stopped = || ProducerError::Stopped(self.id.to_string());
        self.requests
            .send(Request::Offer {
                to: entity.into(),
                cmd,
                accepted,
            })
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// How many accepted commands wait for their entities' confirmation.
    pub fn unconfirmed(&self) -> usize {
        *self.unconfirmed.borrow()
    }

    /// Waits until every accepted command is confirmed, at most `timeout`; `false` if some are
    /// not by then.
    pub async fn all_confirmed(&self, timeout: Duration) -> bool {
        let mut watch = self.unconfirmed.clone();
        tokio::time::timeout(timeout, watch.wait_for(|n| *n == 0))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Stops the producer, once the confirmations it has heard are deleted from its durable
    /// queue: it sends nothing more. What is unconfirmed stays in the queue, if it has one,
    /// for its next start.
    pub async fn stop(&self) {
        let (done, stopped) = oneshot::channel();
        if self.requests.send(Request::Stop(done)).await.is_ok() {
            let _ = stopped.await;
        }
    }
}

/// An entity's answer about one of its streams (or why none came).
type Answer = (Arc<str>, StreamId, Result<ConsumerReply, ShardingError>);

/// The producer's task: the core, and what carries out its effects.
struct ProducerTask<E: ReliableConsumer> {
    id: Arc<str>,
    region: EntityRegion<Reliable<E>>,
    core: Producer<Arc<str>, E::Command>,
    /// The moment the core's clock counts from.
    base: tokio::time::Instant,
    queue: Option<Arc<dyn Store>>,
    ask_timeout: Duration,
    answers: FuturesUnordered<BoxFuture<'static, Answer>>,
    /// Deletes confirmed commands from the durable queue, if there is one.
    confirmer: Option<Confirmer>,
    unconfirmed: watch::Sender<usize>,
    stopped: bool,
    /// Who asked the producer to stop, answered once it has.
    stop_waiters: Vec<oneshot::Sender<()>>,
}

impl<E> ProducerTask<E>
where
    E: ReliableConsumer,
    E::Command: serde::Serialize + Clone + Send + Sync + 'static,
{
    fn now(&self) -> CoreInstant {
        CoreInstant::from_nanos(
            tokio::time::Instant::now()
                .saturating_duration_since(self.base)
                .as_nanos() as u64,
        )
    }

    async fn run(
        mut self,
        mut requests: mpsc::Receiver<Request<E::Command>>,
        resumed: Vec<ProducerEffect<Arc<str>, E::Command>>,
    ) {
        self.carry_out(resumed).await;
        let mut batch = Vec::new();
        while !self.stopped {
            let deadline = self
                .core
                .poll_timeout()
                .map(|at| self.base + Duration::from_nanos(at.as_nanos()));
            // Offers are taken only while the core has room for them all (flow control: the
            // senders wait meanwhile).
            let room = self
                .core
                .settings()
                .max_unconfirmed
                .saturating_sub(self.core.unconfirmed())
                .min(REQUESTS);
            tokio::select! {
                n = requests.recv_many(&mut batch, room), if room > 0 => {
                    if n == 0 {
                        break;
                    }
                    self.offer(std::mem::take(&mut batch)).await;
                }
                Some((to, stream, answer)) = self.answers.next(), if !self.answers.is_empty() => {
                    if let Ok(reply) = answer {
                        let mut out = Vec::new();
                        let now = self.now();
                        self.core.on_reply(now, &to, stream, reply, &mut out);
                        self.carry_out(out).await;
                    }
                    // No answer (timed out, the entity failed, its shard was unavailable):
                    // the resend timer sends it again.
                }
                () = sleep_until(deadline) => {
                    let mut out = Vec::new();
                    let now = self.now();
                    self.core.handle_timeout(now, &mut out);
                    self.carry_out(out).await;
                }
            }
            self.unconfirmed.send_replace(self.core.unconfirmed());
        }
        // Let the confirmations already on their way reach the store, then tell who stopped
        // the producer.
        if let Some(confirmer) = self.confirmer.take() {
            confirmer.finish().await;
        }
        for done in self.stop_waiters {
            let _ = done.send(());
        }
    }

    /// Offers a batch of requests to the core; with a durable queue, stores the accepted
    /// commands (one write for the batch) before they are sent and answered as accepted.
    async fn offer(&mut self, batch: Vec<Request<E::Command>>) {
        let mut accepted = Vec::with_capacity(batch.len());
        let mut rows = Vec::new();
        let mut effects = Vec::new();
        let now = self.now();
        for request in batch {
            match request {
                Request::Stop(done) => {
                    self.stopped = true;
                    self.stop_waiters.push(done);
                }
                Request::Offer { .. } if self.stopped => {}
                Request::Offer {
                    to,
                    cmd,
                    accepted: answer,
                } => {
                    let payload = match &self.queue {
                        Some(_) => match postcard::to_allocvec(&cmd) {
                            Ok(bytes) => Some(bytes::Bytes::from(bytes)),
                            Err(e) => {
                                let _ = answer.send(Err(ProducerError::Codec {
                                    producer: self.id.to_string(),
                                    why: format!("the command for {to:?} does not encode: {e}"),
                                }));
                                continue;
                            }
                        },
                        None => None,
                    };
                    match self.core.offer(now, Arc::clone(&to), cmd, &mut effects) {
                        Ok((stream, seq)) => {
                            if let Some(payload) = payload {
                                rows.push(QueuedMessage {
                                    kind: self.region.kind().into(),
                                    entity: to,
                                    epoch: stream.epoch,
                                    stream: stream.number,
                                    seq,
                                    payload,
                                });
                            }
                            accepted.push((answer, Accepted { stream, seq }));
                        }
                        // Not reached: the task takes no more offers than the core has room
                        // for. Refused rather than assumed.
                        Err(_) => {
                            let _ = answer.send(Err(ProducerError::Stopped(self.id.to_string())));
                        }
                    }
                }
            }
        }
        if let Some(store) = self.queue.clone()
            && !rows.is_empty()
            && let Err(error) = store.enqueue(&self.id, rows).await
        {
            // Nothing of the batch was sent: refuse it all, and stop, rather than send what
            // may not be stored. What the queue holds is sent at the producer's next start.
            tracing::error!(producer = %self.id, %error, "the durable producer queue failed; the producer stops");
            for (answer, _) in accepted {
                let _ = answer.send(Err(ProducerError::Queue {
                    producer: self.id.to_string(),
                    error: error.clone(),
                }));
            }
            self.stopped = true;
            return;
        }
        // Counted before answered: a sender that waits for every confirmation right after its
        // command was accepted must find the command counted.
        self.unconfirmed.send_replace(self.core.unconfirmed());
        for (answer, place) in accepted {
            let _ = answer.send(Ok(place));
        }
        self.carry_out(effects).await;
    }

    /// Sends what the core asks to send, and deletes what it says is confirmed from the
    /// durable queue.
    async fn carry_out(&mut self, effects: Vec<ProducerEffect<Arc<str>, E::Command>>) {
        let mut confirmations = Vec::new();
        for effect in effects {
            match effect {
                ProducerEffect::Send {
                    to,
                    stream,
                    seq,
                    first,
                    payload,
                } => self.send(to, stream, seq, first, payload).await,
                ProducerEffect::Confirmed { stream, seq, .. } => {
                    confirmations.push(QueueConfirmation {
                        epoch: stream.epoch,
                        stream: stream.number,
                        up_to: seq,
                    })
                }
            }
        }
        if let Some(confirmer) = &self.confirmer
            && !confirmations.is_empty()
        {
            confirmer.confirm(confirmations);
        }
    }

    /// Sends one command as an ask whose answer is the entity's verdict. Asks are put in the
    /// region's queue one after the other, so the commands of a stream leave in order.
    async fn send(
        &mut self,
        to: Arc<str>,
        stream: StreamId,
        seq: u64,
        first: bool,
        command: E::Command,
    ) {
        let entity = self.region.entity_ref(&to);
        let producer = self.id.to_string();
        let sent = entity
            .send_ask(
                move |reply_to| {
                    Delivery::Sequenced(SequencedCommand {
                        producer,
                        stream,
                        seq,
                        first,
                        command,
                        reply_to,
                    })
                },
                self.ask_timeout,
            )
            .await;
        match sent {
            Ok(answer) => self
                .answers
                .push(Box::pin(async move { (to, stream, answer.await) })),
            // Not even queued (the region stopped, or stayed full): the resend timer tries
            // again.
            Err(e) => {
                tracing::debug!(producer = %self.id, entity = %to, error = %e, "reliable send not queued")
            }
        }
    }
}

/// The task that deletes confirmed commands from the durable queue, apart from the producer's
/// task: the producer must never wait for it (a store whose connections it held while the
/// producer waited for one would hold both up), and what it has not deleted yet is only sent
/// again at the next start, and confirmed again without being processed.
struct Confirmer {
    tx: mpsc::UnboundedSender<Vec<QueueConfirmation>>,
    task: tokio::task::JoinHandle<()>,
}

impl Confirmer {
    fn spawn(producer: Arc<str>, store: Arc<dyn Store>) -> Self {
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<QueueConfirmation>>();
        let task = crate::task::spawn(async move {
            let mut waiting = Vec::new();
            // What piled up while a deletion ran goes in the next one.
            while rx.recv_many(&mut waiting, 256).await > 0 {
                let confirmations: Vec<QueueConfirmation> = waiting.drain(..).flatten().collect();
                if let Err(error) = store.confirm_queued(&producer, confirmations).await {
                    tracing::warn!(%producer, %error, "confirmed commands not deleted from the durable queue");
                }
            }
        });
        Confirmer { tx, task }
    }

    fn confirm(&self, confirmations: Vec<QueueConfirmation>) {
        // Bounded by what the producer holds: each stream's confirmations are at most its
        // window's worth of answers ahead of the deletions.
        let _ = self.tx.send(confirmations);
    }

    /// Waits until what was handed over is deleted (or failed to be).
    async fn finish(self) {
        drop(self.tx);
        let _ = self.task.await;
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
