//! Inbound sharding traffic: each frame read from another node goes to its kind's task, or
//! completes the ask it answers, straight from the connection's reader (no queue and task in
//! between).

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use shardik_core::membership::UniqueAddress;
use shardik_wire::{
    EnvelopeBatch, ReplyErrorKind, ShardingBody, ShardingLimits, decode_sharding_bytes,
};
use std::time::Duration;
use tokio::sync::mpsc;

use shardik_core::sharding::Protocol;
use tracing::{debug, info, warn};

use super::api::ShardingError;
use super::inner::Inner;
use super::messages::Control;
use super::pending::PendingAsks;
use crate::metrics as m;
use shardik_transport::log_limit::LogLimit;
use shardik_transport::{Backpressure, InboundUser, UserConnection, UserSink};

/// The sink sharding installs in the transport: one [`Dispatcher`] per inbound connection.
/// It holds the sharding state weakly: the transport outlives nothing it serves.
pub(super) struct InboundSink {
    pub(super) inner: Weak<Inner>,
    pub(super) pending: PendingAsks,
}

impl UserSink for InboundSink {
    fn connection(&self) -> Box<dyn UserConnection> {
        Box::new(Dispatcher::new(self.inner.clone(), self.pending.clone()))
    }
}

/// Hands the frames of one connection (or of the fallback queue) to their kinds.
pub(super) struct Dispatcher {
    inner: Weak<Inner>,
    pending: PendingAsks,
    limits: ShardingLimits,
    /// The kinds' control queues, looked up in the shared registry (a lock) only on first use:
    /// this runs for every message that arrives from another node.
    routes: HashMap<Arc<str>, mpsc::Sender<Control>>,
}

impl UserConnection for Dispatcher {
    fn deliver(&mut self, from: &UniqueAddress, payload: Bytes) -> Option<Backpressure> {
        self.dispatch(from, payload)
    }
}

impl Dispatcher {
    pub(super) fn new(inner: Weak<Inner>, pending: PendingAsks) -> Self {
        Dispatcher {
            inner,
            pending,
            limits: ShardingLimits::default(),
            routes: HashMap::new(),
        }
    }

    /// Dispatches one frame; returns what to wait for when its kind's queue is full.
    fn dispatch(&mut self, from: &UniqueAddress, payload: Bytes) -> Option<Backpressure> {
        // Most traffic: a batch of envelopes, checked here and read in place by the kind.
        let decoded = match EnvelopeBatch::decode(payload.clone(), &self.limits) {
            Ok(Some(batch)) => return self.dispatch_batch(from, batch),
            Ok(None) => decode_sharding_bytes(payload, &self.limits),
            Err(e) => Err(e),
        };
        let frame = match decoded {
            Ok(frame) => frame,
            Err(e) => {
                metrics::counter!(m::SHARDING_DROPPED_TOTAL, "kind" => "?", "reason" => "malformed")
                    .increment(1);
                warn!(%from, error = %e, "malformed sharding frame dropped");
                return None;
            }
        };
        let control = match frame.body {
            ShardingBody::Reply(reply) => {
                let result = reply
                    .result
                    .map_err(|e| ShardingError::from_reply_error(&frame.kind, e));
                if !self.pending.complete(reply.ask_id, result) {
                    debug!(
                        ask_id = reply.ask_id,
                        "reply for an ask that is no longer waiting"
                    );
                }
                return None;
            }
            ShardingBody::Envelope(env) => Control::Remote {
                from: from.clone(),
                env,
            },
            // Batch frames are read by `EnvelopeBatch` above; the generated decoder only sees
            // one that reader gave up on, and it fails on the same bytes. Counted all the same.
            ShardingBody::Envelopes(envs) => {
                metrics::counter!(m::SHARDING_DROPPED_TOTAL, "kind" => frame.kind.to_string(), "reason" => "malformed")
                    .increment(envs.len() as u64);
                warn!(%from, envelopes = envs.len(), "batch frame not read as a batch: dropped");
                return None;
            }
            ShardingBody::Protocol(p) => Control::Protocol {
                from: from.clone(),
                msg: p,
            },
            ShardingBody::StatsRequest { request_id } => {
                // Answered from a task of its own, so a slow region never stalls the reader.
                let inner = self.inner.upgrade()?;
                let (kind, to) = (frame.kind.clone(), from.clone());
                crate::task::spawn(async move {
                    let timeout = inner.config.query_timeout;
                    // A node that does not run the kind answers with no shards, unregistered.
                    let counts = inner
                        .query(&kind, Control::Stats, timeout)
                        .await
                        .unwrap_or_default();
                    let reply = shardik_wire::ShardingFrame {
                        kind,
                        body: ShardingBody::StatsReply(shardik_wire::WireStats {
                            request_id,
                            shards: counts
                                .shards
                                .into_iter()
                                .map(|(s, n)| (s, u32::try_from(n).unwrap_or(u32::MAX)))
                                .collect(),
                            registered: counts.registered,
                        }),
                    };
                    inner
                        .sender
                        .send(&to.address, shardik_wire::encode_sharding(&reply))
                        .await;
                });
                return None;
            }
            ShardingBody::StatsReply(stats) => {
                let inner = self.inner.upgrade()?;
                let waiter = inner
                    .stats_waiters
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get(&stats.request_id.get())
                    .cloned();
                if let Some(tx) = waiter {
                    let _ = tx.send((from.clone(), stats.shards, stats.registered));
                }
                return None;
            }
        };
        let Some(queue) = self.queue_of(&frame.kind) else {
            let asks = match &control {
                Control::Remote { env, .. } => env.ask_id,
                _ => None,
            };
            if let Control::Protocol { msg, .. } = &control {
                self.say_kind_not_started(from, &frame.kind, msg);
            }
            self.unknown_kind(from, &frame.kind, asks);
            return None;
        };
        match offer(queue, control) {
            Offered::Taken => None,
            Offered::Wait(wait) => Some(wait),
            Offered::Closed(_) => {
                self.routes.remove(&frame.kind);
                None
            }
        }
    }

    /// Hands a batch to its kind's queue; returns what to wait for when it is full.
    fn dispatch_batch(
        &mut self,
        from: &UniqueAddress,
        batch: EnvelopeBatch,
    ) -> Option<Backpressure> {
        let Some(queue) = self.queue_of(batch.kind()) else {
            let kind = Arc::from(batch.kind());
            self.unknown_kind(from, &kind, batch.iter().filter_map(|e| e.ask_id));
            return None;
        };
        let control = Control::RemoteBatch {
            from: from.clone(),
            batch,
        };
        match offer(queue, control) {
            Offered::Taken => None,
            Offered::Wait(wait) => Some(wait),
            Offered::Closed(Control::RemoteBatch { batch, .. }) => {
                self.routes.remove(batch.kind());
                None
            }
            Offered::Closed(_) => None,
        }
    }

    /// The queue of kind `kind`, looked up in the shared registry (a lock) only on first use:
    /// this runs for every frame that arrives from another node.
    fn queue_of(&mut self, kind: &str) -> Option<&mpsc::Sender<Control>> {
        if !self.routes.contains_key(kind) {
            let inner = self.inner.upgrade()?;
            let registered = inner
                .kinds
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_key_value(kind)
                .map(|(name, k)| (name.clone(), k.control.clone()));
            let (name, queue) = registered?;
            self.routes.insert(name, queue);
        }
        self.routes.get(kind)
    }

    /// A frame for a kind that does not run here: counted, and an ask is answered so that
    /// its asker need not wait for its timeout.
    fn unknown_kind(
        &self,
        from: &UniqueAddress,
        kind: &Arc<str>,
        asks: impl IntoIterator<Item = NonZeroU64>,
    ) {
        metrics::counter!(m::SHARDING_DROPPED_TOTAL, "kind" => kind.to_string(), "reason" => "unknown-kind")
            .increment(1);
        debug!(%kind, %from, "message for an entity kind not running here");
        for ask_id in asks {
            self.refuse_ask(from, kind, ask_id);
        }
    }

    /// Tells a coordinator that announced itself, or a region that registers with this node,
    /// that this node has not started the kind, so that the coordinator stops waiting for a
    /// region that will never register (see `shardik_core::sharding::coordinator`). One answer
    /// per message received, and only members' messages get here (the transport's rule).
    fn say_kind_not_started(&self, from: &UniqueAddress, kind: &Arc<str>, msg: &Protocol) {
        let epoch = match msg {
            Protocol::CoordinatorStarted { epoch } => *epoch,
            Protocol::Register { .. } => 0,
            _ => return,
        };
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        metrics::counter!(m::SHARDING_KIND_NOT_STARTED_ANSWERS_TOTAL, "kind" => kind.to_string())
            .increment(1);
        if KIND_NOT_STARTED_LOG.check().is_some() {
            info!(
                %kind, %from,
                "a peer runs entity kind {kind}, which this node never started: told it so \
                 (call sharding().init for {kind} on this node if it should run here too)"
            );
        }
        let answer = shardik_wire::ShardingFrame {
            kind: kind.clone(),
            body: ShardingBody::Protocol(Protocol::KindNotStarted { epoch }),
        };
        send_soon(&inner, from, shardik_wire::encode_sharding(&answer));
    }

    /// Answers an ask for a kind that does not run here.
    fn refuse_ask(&self, from: &UniqueAddress, kind: &Arc<str>, ask_id: NonZeroU64) {
        let Some(inner) = self.inner.upgrade() else {
            return;
        };
        let reply = shardik_wire::ShardingFrame {
            kind: kind.clone(),
            body: ShardingBody::Reply(shardik_wire::WireReply {
                ask_id: ask_id.get(),
                result: Err(shardik_wire::ReplyError {
                    kind: ReplyErrorKind::UnknownKind,
                    message: format!(
                        "entity kind {kind} is not running on {}",
                        inner.self_node.address
                    ),
                }),
            }),
        };
        send_soon(&inner, from, shardik_wire::encode_sharding(&reply));
    }
}

/// At most one "told a peer this node never started the kind" line per minute: every
/// coordinator re-announces itself each rebalance interval while it waits.
static KIND_NOT_STARTED_LOG: LogLimit = LogLimit::new(Duration::from_secs(60));

/// Sends `payload` to `to` without blocking the reader: at once when the connection's queue
/// has room, else from a task of its own.
fn send_soon(inner: &Arc<Inner>, to: &UniqueAddress, payload: Bytes) {
    if let Err(payload) = inner.sender.try_send(&to.address, payload) {
        let inner = Arc::clone(inner);
        let to = to.address.clone();
        crate::task::spawn(async move {
            inner.sender.send(&to, payload).await;
        });
    }
}

/// What became of a message offered to a kind's queue.
enum Offered {
    Taken,
    /// The queue is full: waiting stops reading the connection, back-pressure to the sender.
    Wait(Backpressure),
    /// The kind's task ended (node stopping); the message comes back.
    Closed(Control),
}

fn offer(queue: &mpsc::Sender<Control>, control: Control) -> Offered {
    match queue.try_send(control) {
        Ok(()) => Offered::Taken,
        Err(mpsc::error::TrySendError::Full(control)) => {
            let queue = queue.clone();
            Offered::Wait(Box::pin(async move {
                let _ = queue.send(control).await;
            }))
        }
        Err(mpsc::error::TrySendError::Closed(control)) => Offered::Closed(control),
    }
}

/// Drains what reached the transport's user queue before sharding installed its sink.
pub(super) async fn drain_queue(
    mut dispatcher: Dispatcher,
    mut queue: mpsc::Receiver<InboundUser>,
) {
    while let Some(msg) = queue.recv().await {
        if let Some(wait) = dispatcher.dispatch(&msg.from, msg.payload) {
            wait.await;
        }
    }
}
