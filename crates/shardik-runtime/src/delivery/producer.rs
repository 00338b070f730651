//! The reliable producer: numbers the commands handed to it, keeps each until its entity
//! confirms it, sends it again until then, holds back while an entity's window is used up,
//! and (with a durable queue) stores each command before it is accepted, so that a producer
//! started again after a crash sends what was not confirmed.
//!
//! The decisions are the core's [`Producer`], which senders and the producer's task share
//! ([`shared`]); the task ([`task`]) carries them out with asks through sharding and writes
//! to the store, and a task of its own deletes what was confirmed ([`confirmer`]).

mod confirmer;
mod outcome;
mod shared;
mod task;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::stream::FuturesUnordered;
use shardik_core::Instant as CoreInstant;
use shardik_core::delivery::{Producer, ProducerSettings, StreamId};
use shardik_persistence::{QueuedStream, Store, queued_streams};
use tokio::sync::oneshot;

pub use self::outcome::{Accepted, ProducerError};

use self::confirmer::Confirmer;
use self::shared::{Offered, Shared};
use self::task::ProducerTask;
use super::consumer::{Reliable, ReliableConsumer};
use crate::sharding::EntityRegion;

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

/// A reliable producer (Akka's `ShardingProducerController`, with its durable queue): hand it
/// commands for entities of a [reliable kind](crate::sharding::EntityKind::reliable), and each
/// accepted command reaches its entity once per sequence number, in the order sent to that
/// entity, however often it has to be sent again. Clones share the producer; it stops when
/// the last is dropped.
pub struct ReliableProducer<C> {
    shared: Arc<Shared<C>>,
    /// The kind its commands go to (named in the rows of its durable queue).
    kind: Arc<str>,
    _alive: Arc<Alive<C>>,
}

/// Stops the producer when the last of its handles is dropped.
struct Alive<C>(Arc<Shared<C>>);

impl<C> Drop for Alive<C> {
    fn drop(&mut self) {
        self.0.stop(None);
    }
}

impl<C> Clone for ReliableProducer<C> {
    fn clone(&self) -> Self {
        ReliableProducer {
            shared: Arc::clone(&self.shared),
            kind: Arc::clone(&self.kind),
            _alive: Arc::clone(&self._alive),
        }
    }
}

impl<C> std::fmt::Debug for ReliableProducer<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReliableProducer")
            .field("id", &self.shared.id)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

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
        let shared = Arc::new(Shared::new(
            Arc::clone(&id),
            base,
            options.queue.is_some(),
            core,
            effects,
        ));
        let task = ProducerTask {
            shared: Arc::clone(&shared),
            region: region.clone(),
            queue: options.queue.clone(),
            ask_timeout: options.settings.resend_max,
            answers: FuturesUnordered::new(),
            one_at_a_time: HashSet::new(),
            confirmer: options
                .queue
                .clone()
                .map(|store| Confirmer::spawn(Arc::clone(&id), store)),
        };
        crate::task::spawn(task.run());
        Ok(ReliableProducer {
            kind: region.kind().into(),
            _alive: Arc::new(Alive(Arc::clone(&shared))),
            shared,
        })
    }

    /// The producer's id.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// Hands `cmd` for entity `entity` to the producer, and resolves once it is accepted:
    /// numbered in its stream and (with a durable queue) stored. From then on the producer
    /// sends it until the entity confirms it. Waits while the producer holds as many
    /// unconfirmed commands as its settings allow (flow control).
    pub async fn send(&self, entity: &str, cmd: C) -> Result<Accepted, ProducerError> {
        let shared = &self.shared;
        let stopped = || ProducerError::Stopped(shared.id.to_string());
        // Encoded before the lock is taken: other senders need not wait for it.
        let payload = if shared.durable {
            let bytes = postcard::to_allocvec(&cmd).map_err(|e| ProducerError::Codec {
                producer: shared.id.to_string(),
                why: format!("the command for {entity:?} does not encode: {e}"),
            })?;
            Some(bytes::Bytes::from(bytes))
        } else {
            None
        };
        let to: Arc<str> = entity.into();
        let mut payload = payload;
        let mut cmd = cmd;
        let Offered {
            accepted,
            stored,
            wake,
        } = loop {
            match shared.try_offer(&self.kind, &to, cmd, &mut payload)? {
                Ok(offered) => break offered,
                Err(back) => cmd = back,
            }
            // No room: wait for confirmations to make some. Registered before the producer is
            // looked at again, so that room made in between is not missed.
            let room = shared.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            match shared.try_offer(&self.kind, &to, cmd, &mut payload)? {
                Ok(offered) => break offered,
                Err(back) => cmd = back,
            }
            room.await;
        };
        if wake {
            shared.work.notify_one();
        }
        match stored {
            None => Ok(accepted),
            Some(stored) => stored.await.map_err(|_| stopped())?,
        }
    }

    /// How many accepted commands wait for their entities' confirmation.
    pub fn unconfirmed(&self) -> usize {
        self.shared.unconfirmed.load(Ordering::Acquire)
    }

    /// Waits until every accepted command is confirmed, at most `timeout`; `false` if some are
    /// not by then.
    pub async fn all_confirmed(&self, timeout: Duration) -> bool {
        let shared = &self.shared;
        let drained = async {
            loop {
                // Registered before the count is read, so that a drain in between is heard.
                let notified = shared.drained.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if shared.unconfirmed.load(Ordering::Acquire) == 0 {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(timeout, drained).await.is_ok()
    }

    /// Stops the producer, once what it accepted is stored (with a durable queue) and the
    /// confirmations it has heard are deleted from its durable queue: it accepts and sends
    /// nothing more. What is unconfirmed stays in the queue, if it has one, for its next
    /// start.
    pub async fn stop(&self) {
        let (done, stopped) = oneshot::channel();
        self.shared.stop(Some(done));
        let _ = stopped.await;
    }
}

/// Senders hand commands over from any task of a multi-threaded runtime: `send`'s future must
/// be `Send` (it takes the producer's lock, and must not hold it across an await). Compiled,
/// not run.
#[cfg(test)]
#[allow(dead_code)]
fn sending_is_send(
    producer: &ReliableProducer<u32>,
) -> impl std::future::Future<Output = Result<Accepted, ProducerError>> + Send + '_ {
    producer.send("entity", 1)
}
