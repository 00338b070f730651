//! Asks between nodes: the asks of this node that wait for a reply from another
//! ([`PendingAsks`]), and the way this node sends an answer to an asker by its ask id
//! ([`ReplyEndpoint`]).
//!
//! Each waiting ask is its answer slot (or a one-shot callback) under its id, removed when its
//! reply arrives. An asker that gave up (timeout) leaves its entry behind; entries past their
//! deadline are swept as new ones are registered, so the table stays bounded by the asks in
//! flight within their timeouts. Ids start at a random point in each incarnation of a node, so
//! that a late reply meant for an earlier incarnation on the same address does not complete an
//! unrelated ask.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use bytes::Bytes;
use tokio::time::Instant;

use shardik_core::membership::{Address, UniqueAddress};
use shardik_wire::{ReplyError, ShardingBody, ShardingFrame, WireReply, encode_sharding};

use super::api::ShardingError;
use super::messages::AskSlot;
use answer_batch::GatheredAnswer;
use shardik_transport::UserSender;

pub(crate) mod answer_batch;

type Callback = Box<dyn FnOnce(Result<Bytes, ShardingError>) + Send>;

struct Entry {
    deadline: Instant,
    waiting: Waiting,
}

/// Who waits for a reply: an asker's own slot (the usual ask), or a callback (a node relaying
/// a command for an asker elsewhere passes the answer on).
enum Waiting {
    Slot(Arc<dyn AskSlot>),
    Callback(Callback),
}

impl Waiting {
    fn complete(self, result: Result<Bytes, ShardingError>) {
        match self {
            Waiting::Slot(slot) => slot.answer_encoded(result),
            Waiting::Callback(callback) => callback(result),
        }
    }
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

    /// A fresh ask id of this node.
    pub fn next_id(&self) -> NonZeroU64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        NonZeroU64::new(id).unwrap_or(NonZeroU64::MIN)
    }

    /// Registers `callback` until `deadline`; returns the id to send with the request.
    pub fn register(
        &self,
        deadline: Instant,
        callback: impl FnOnce(Result<Bytes, ShardingError>) + Send + 'static,
    ) -> NonZeroU64 {
        let id = self.next_id();
        self.insert(id, deadline, Waiting::Callback(Box::new(callback)));
        id
    }

    /// Registers the slot of ask `id` (from [`next_id`](Self::next_id)) until `deadline`, as
    /// its command leaves for another node.
    pub fn register_slot(&self, id: NonZeroU64, deadline: Instant, slot: Arc<dyn AskSlot>) {
        self.insert(id, deadline, Waiting::Slot(slot));
    }

    fn insert(&self, id: NonZeroU64, deadline: Instant, waiting: Waiting) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.registered_since_sweep += 1;
        if t.registered_since_sweep >= 1024 {
            t.registered_since_sweep = 0;
            let now = Instant::now();
            t.entries.retain(|_, e| e.deadline > now);
        }
        t.entries.insert(id.get(), Entry { deadline, waiting });
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
                        let mut call = Some((e.waiting, result));
                        context(&mut || {
                            if let Some((waiting, result)) = call.take() {
                                waiting.complete(result);
                            }
                        });
                    }
                    None => e.waiting.complete(result),
                }
                true
            }
            None => false,
        }
    }

    /// Asks waiting for an answer from another node (with those past their deadline that are
    /// not swept yet): a kind's task asks before it writes a batch whether other asks are in
    /// flight, whose answers will soon wake askers.
    pub fn len(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entries
            .len()
    }
}

/// Where the answers of asks made from one node to one kind go: the kind the asks went to
/// (named in reply frames, for the asker's logs), the asker's node and this node's way of
/// sending answers. Shared by all the `ReplyTo`s of one region's asks, or of one batch of
/// envelopes from one node, so that making a `ReplyTo` costs one reference count, not three.
///
/// The endpoint is weak: an ask's `ReplyTo` may sit in the endpoint's own table of waiting
/// asks, which must not keep the endpoint alive.
pub(crate) struct AnswerRoute {
    kind: Arc<str>,
    asker: UniqueAddress,
    endpoint: Weak<ReplyEndpoint>,
    /// Whether the asker is the endpoint's own node (decided once here, not at every answer).
    local: bool,
}

impl AnswerRoute {
    pub fn new(kind: Arc<str>, asker: UniqueAddress, endpoint: Weak<ReplyEndpoint>) -> Self {
        let local = endpoint.upgrade().is_some_and(|e| e.self_node == asker);
        AnswerRoute {
            kind,
            asker,
            endpoint,
            local,
        }
    }

    /// The kind the asks went to.
    pub fn kind(&self) -> &Arc<str> {
        &self.kind
    }

    /// The asker's node.
    pub fn asker(&self) -> &UniqueAddress {
        &self.asker
    }

    /// Whether answers of `other` go to the same node (routes are shared, so this is most often
    /// the same route).
    fn same_asker(&self, other: &Arc<AnswerRoute>) -> bool {
        std::ptr::eq(self, &**other) || self.asker == other.asker
    }

    /// The node's endpoint, unless the node's sharding is gone.
    pub fn endpoint(&self) -> Option<Arc<ReplyEndpoint>> {
        self.endpoint.upgrade()
    }

    /// Answers ask `ask_id` of the asker with `result` (the encoded reply, or why there is
    /// none). Never waits. An asker on this node is answered through the table of waiting asks.
    /// For one on another node, the reply frame made by a handler in a kind's task is gathered
    /// and leaves with that task's turn (which waits for room like the task's other messages);
    /// made elsewhere, it is written now, or, when the asker's queue is full, waits in a task
    /// of its own (at most [`MAX_WAITING_REPLIES`] at once; beyond, it is dropped, counted and
    /// logged). Nothing happens when the node's sharding is gone (the asker times out).
    pub fn answer(self: &Arc<Self>, ask_id: NonZeroU64, result: Result<Bytes, ReplyError>) {
        if self.local {
            if let Some(endpoint) = self.endpoint.upgrade() {
                let result = result.map_err(|e| ShardingError::from_reply_error(&self.kind, e));
                if !endpoint.pending.complete(ask_id.get(), result) {
                    tracing::debug!(ask_id, "reply for an ask that is no longer waiting");
                }
            }
            return;
        }
        let frame = ShardingFrame {
            kind: Arc::clone(&self.kind),
            body: ShardingBody::Reply(WireReply {
                ask_id: ask_id.get(),
                result,
            }),
        };
        let answer = GatheredAnswer {
            route: Arc::clone(self),
            frame: encode_sharding(&frame),
        };
        // Made by a handler of a kind's task: written with the poll's other answers.
        let Err(answer) = answer_batch::gather(answer) else {
            return;
        };
        if let Some(endpoint) = self.endpoint.upgrade() {
            endpoint.send_now(answer);
        }
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

    /// Writes one answer made outside a kind's task: now when the asker's lane has room (most
    /// of the time), else from a task that waits for room.
    fn send_now(&self, answer: GatheredAnswer) {
        let to = &answer.route.asker.address;
        let Err(frame) = self.sender.try_send(to, answer.frame) else {
            return;
        };
        self.wait_for_room(to.clone(), Arc::clone(&answer.route.kind), vec![frame]);
    }

    /// Sends the answers a kind's task made during one poll: consecutive answers to one node
    /// are queued together (one write when its connection is idle). Empties `answers`.
    pub fn send_gathered(&self, answers: &mut Vec<GatheredAnswer>) {
        let mut answers = answers.drain(..).peekable();
        while let Some(first) = answers.next() {
            let GatheredAnswer { route, frame } = first;
            let mut run = vec![frame];
            while let Some(next) = answers.next_if(|a| a.route.same_asker(&route)) {
                run.push(next.frame);
            }
            let to = &route.asker.address;
            let left = self.sender.try_send_run(to, run);
            if !left.is_empty() {
                self.wait_for_room(to.clone(), Arc::clone(&route.kind), left);
            }
        }
    }

    /// Sends `frames` to `to` from a task of their own, which waits for room in the asker's
    /// queue; at most [`MAX_WAITING_REPLIES`] wait at once, and beyond that they are dropped,
    /// counted and logged (their asks time out).
    fn wait_for_room(&self, to: Address, kind: Arc<str>, frames: Vec<Bytes>) {
        let n = frames.len();
        if self.waiting.fetch_add(n, Ordering::Relaxed) + n > MAX_WAITING_REPLIES {
            self.waiting.fetch_sub(n, Ordering::Relaxed);
            metrics::counter!(crate::metrics::SHARDING_DROPPED_TOTAL, "kind" => kind.to_string(), "reason" => "replies-waiting-full")
                .increment(n as u64);
            tracing::warn!(%to, %kind, replies = n, limit = MAX_WAITING_REPLIES, "too many replies wait for their askers; these are dropped and their asks will time out");
            return;
        }
        let (sender, waiting) = (self.sender.clone(), Arc::clone(&self.waiting));
        crate::task::spawn(async move {
            let failed = sender.send_all(&to, frames).await;
            if failed > 0 {
                metrics::counter!(crate::metrics::SHARDING_DROPPED_TOTAL, "kind" => kind.to_string(), "reason" => "reply-undeliverable")
                    .increment(failed as u64);
                tracing::warn!(%to, %kind, replies = failed, "replies could not be queued for their asker; their asks will time out");
            }
            waiting.fetch_sub(n, Ordering::Relaxed);
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
