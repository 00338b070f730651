//! Asks between nodes: the asks of this node that wait for a reply from another
//! ([`PendingAsks`]), and the way this node sends an answer to an asker by its ask id
//! ([`ReplyEndpoint`]).
//!
//! Each waiting ask is a one-shot callback under a fresh id, removed when its reply arrives. An
//! asker that gave up (timeout) leaves its entry behind; entries past their deadline are swept
//! as new ones are registered, so the table stays bounded by the asks in flight within their
//! timeouts. Ids start at a random point in each incarnation of a node, so that a late reply
//! meant for an earlier incarnation on the same address does not complete an unrelated ask.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use tokio::time::Instant;

use shardik_core::membership::UniqueAddress;
use shardik_wire::{ReplyError, ShardingBody, ShardingFrame, WireReply, encode_sharding};

use super::api::ShardingError;
use crate::transport::UserSender;

type Callback = Box<dyn FnOnce(Result<Bytes, ShardingError>) + Send>;

struct Entry {
    deadline: Instant,
    callback: Callback,
}

#[derive(Default)]
struct Table {
    entries: HashMap<u64, Entry>,
    registered_since_sweep: usize,
}

/// The asks of one node that wait for remote replies.
#[derive(Clone)]
pub(crate) struct PendingAsks {
    next: Arc<AtomicU64>,
    table: Arc<Mutex<Table>>,
    /// Runs a callback where answers that hold entity references or reply handles decode
    /// into references through the node's regions (set once the node's sharding exists; kept
    /// abstract so that this module does not depend on the one that resolves).
    decoding: Arc<OnceLock<DecodingContext>>,
}

/// Runs the given decoding inside the node's decoding context.
pub(crate) type DecodingContext = Box<dyn Fn(&mut dyn FnMut()) + Send + Sync>;

impl Default for PendingAsks {
    fn default() -> Self {
        // Half the id space from a random start: wrapping is never reached in practice.
        PendingAsks {
            next: Arc::new(AtomicU64::new(rand::random::<u64>() >> 1)),
            table: Arc::default(),
            decoding: Arc::default(),
        }
    }
}

impl PendingAsks {
    /// Answers are decoded inside `context` (the node's sharding) from now on.
    pub fn set_decoding_context(&self, context: DecodingContext) {
        let _ = self.decoding.set(context);
    }

    /// Registers `callback` until `deadline`; returns the id to send with the request.
    pub fn register(
        &self,
        deadline: Instant,
        callback: impl FnOnce(Result<Bytes, ShardingError>) + Send + 'static,
    ) -> NonZeroU64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let id = NonZeroU64::new(id).unwrap_or(NonZeroU64::MIN);
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.registered_since_sweep += 1;
        if t.registered_since_sweep >= 1024 {
            t.registered_since_sweep = 0;
            let now = Instant::now();
            t.entries.retain(|_, e| e.deadline > now);
        }
        t.entries.insert(
            id.get(),
            Entry {
                deadline,
                callback: Box::new(callback),
            },
        );
        id
    }

    /// Completes ask `id` with `result`; false when no such ask waits (late or unknown reply).
    pub fn complete(&self, id: u64, result: Result<Bytes, ShardingError>) -> bool {
        let entry = self
            .table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entries
            .remove(&id);
        match entry {
            Some(e) => {
                // The callback decodes the answer, which may hold entity references.
                match self.decoding.get() {
                    Some(context) => {
                        let mut call = Some((e.callback, result));
                        context(&mut || {
                            if let Some((callback, result)) = call.take() {
                                callback(result);
                            }
                        });
                    }
                    None => (e.callback)(result),
                }
                true
            }
            None => false,
        }
    }

    /// Drops ask `id` without completing it (it was answered another way).
    pub fn forget(&self, id: u64) {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entries
            .remove(&id);
    }

    /// Asks waiting (for tests and metrics).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entries
            .len()
    }
}

/// How this node answers an ask by its id, wherever the asker is: through the pending table
/// when the asker is this node, else in a reply frame to the asker's node.
pub(crate) struct ReplyEndpoint {
    self_node: UniqueAddress,
    pending: PendingAsks,
    sender: UserSender,
    /// Replies waiting for room in their asker's queue, each in a task of its own.
    waiting: Arc<std::sync::atomic::AtomicUsize>,
}

/// The most replies that may wait for room in their askers' queues at once. Entities answer
/// commands that arrive from the network; without a bound, an asker that stops reading would
/// make this node hold every reply meant for it.
const MAX_WAITING_REPLIES: usize = 4096;

impl ReplyEndpoint {
    pub fn new(self_node: UniqueAddress, pending: PendingAsks, sender: UserSender) -> Self {
        ReplyEndpoint {
            self_node,
            pending,
            sender,
            waiting: Arc::default(),
        }
    }

    /// This node's table of waiting asks.
    pub fn pending(&self) -> &PendingAsks {
        &self.pending
    }

    /// This node.
    pub fn self_node(&self) -> &UniqueAddress {
        &self.self_node
    }

    /// Answers ask `ask_id` of `asker` with `result` (the encoded reply, or why there is none).
    /// `kind` names the entity kind the ask went to, for the asker's logs. Never waits: when
    /// the asker's queue is full, the reply waits in a task of its own (at most
    /// [`MAX_WAITING_REPLIES`] at once; beyond, it is dropped, counted and logged).
    pub fn answer(
        &self,
        kind: &Arc<str>,
        asker: &UniqueAddress,
        ask_id: NonZeroU64,
        result: Result<Bytes, ReplyError>,
    ) {
        if *asker == self.self_node {
            let result = result.map_err(|e| ShardingError::from_reply_error(kind, e));
            if !self.pending.complete(ask_id.get(), result) {
                tracing::debug!(ask_id, "reply for an ask that is no longer waiting");
            }
            return;
        }
        let frame = ShardingFrame {
            kind: Arc::clone(kind),
            body: ShardingBody::Reply(WireReply {
                ask_id: ask_id.get(),
                result,
            }),
        };
        let payload = encode_sharding(&frame);
        // Most of the time the asker's lane has room: the reply is written from here.
        let Err(payload) = self.sender.try_send(&asker.address, payload) else {
            return;
        };
        let (sender, to, kind) = (self.sender.clone(), asker.address.clone(), Arc::clone(kind));
        if self.waiting.fetch_add(1, Ordering::Relaxed) >= MAX_WAITING_REPLIES {
            self.waiting.fetch_sub(1, Ordering::Relaxed);
            metrics::counter!(crate::metrics::SHARDING_DROPPED_TOTAL, "kind" => kind.to_string(), "reason" => "replies-waiting-full")
                .increment(1);
            tracing::warn!(%to, %kind, limit = MAX_WAITING_REPLIES, "too many replies wait for their askers; this one is dropped and its ask will time out");
            return;
        }
        let waiting = Arc::clone(&self.waiting);
        crate::task::spawn(async move {
            if !sender.send(&to, payload).await {
                metrics::counter!(crate::metrics::SHARDING_DROPPED_TOTAL, "kind" => kind.to_string(), "reason" => "reply-undeliverable")
                    .increment(1);
                tracing::warn!(%to, %kind, "a reply could not be queued for its asker; the ask will time out");
            }
            waiting.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn replies_complete_their_ask_once_and_expired_ones_are_swept() {
        let p = PendingAsks::default();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let id = p.register(Instant::now() + Duration::from_secs(60), move |r| {
            let _ = tx.send(r);
        });
        assert!(p.complete(id.get(), Ok(Bytes::from_static(b"x"))));
        assert_eq!(rx.await.unwrap().unwrap(), Bytes::from_static(b"x"));
        assert!(!p.complete(id.get(), Ok(Bytes::new())), "only once");
        let past = Instant::now() - Duration::from_millis(1);
        for _ in 0..2000 {
            p.register(past, |_| {});
        }
        assert!(p.len() < 1100, "expired asks are swept ({})", p.len());
    }
}
