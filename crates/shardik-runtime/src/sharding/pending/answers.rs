//! How this node answers an ask by its id, wherever the asker is ([`ReplyEndpoint`], through
//! the [`AnswerRoute`] each `ReplyTo` holds), and how the answers made during one poll of a
//! kind's task are gathered to leave together ([`gathering`]). The route, the endpoint and the
//! gathering call one another, so they live in one file.
//!
//! ## Gathering the answers of one poll
//!
//! A kind's task runs its entities' handlers; with many asks in flight it handles a batch of
//! commands in one poll, and each handler answers through its [`ReplyTo`](super::ReplyTo).
//! Written one by one, every answer would be a write of its own to the asker's connection (a
//! system call each while the connection is idle). Instead, while the task is polled, the
//! answers it makes are gathered here: the task takes them at the end of each of its turns and
//! sends them with the turn's other messages (`take_gathered`), and whatever is left when the
//! poll ends (a handler that answered and then waited) is handed on together then, so that the
//! answers for one node leave in one write. An answer made anywhere else (an
//! entity's own spawned task, a test) is not gathered and is sent at once, as before.
//!
//! The gathering is a thread-local scope around each poll, like the decoding scope of
//! `resolve`: the handlers run synchronously inside the poll, on this thread.

use std::cell::RefCell;
use std::future::Future;
use std::num::NonZeroU64;
use std::pin::pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use bytes::Bytes;

use shardik_core::membership::{Address, UniqueAddress};
use shardik_wire::{ReplyError, ShardingBody, ShardingFrame, WireReply, encode_sharding};

use super::asks::PendingAsks;
use crate::sharding::api::ShardingError;
use shardik_transport::UserSender;

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
        let Err(answer) = gather(answer) else {
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

/// One answer waiting for the end of the poll: its route (the asker's node, and the kind asked
/// for the logs and counters of a reply that cannot be sent), and the encoded reply frame.
pub(crate) struct GatheredAnswer {
    pub route: Arc<AnswerRoute>,
    pub frame: Bytes,
}

thread_local! {
    static GATHERING: RefCell<Option<Vec<GatheredAnswer>>> = const { RefCell::new(None) };
}

/// Keeps `answer` for the end of the current poll, if a task gathers answers on this thread;
/// otherwise hands it back, for the caller to send now.
pub(crate) fn gather(answer: GatheredAnswer) -> Result<(), GatheredAnswer> {
    GATHERING.with(|g| match g.borrow_mut().as_mut() {
        Some(answers) => {
            answers.push(answer);
            Ok(())
        }
        None => Err(answer),
    })
}

/// Moves the answers gathered so far in this poll to `into`, for a task that sends them now
/// with its own messages (a kind's task does at each turn, so that answers do not wait for the
/// end of a poll that goes on serving).
pub(crate) fn take_gathered(into: &mut Vec<GatheredAnswer>) {
    GATHERING.with(|g| {
        if let Some(answers) = g.borrow_mut().as_mut() {
            into.append(answers);
        }
    });
}

/// Runs `task`, gathering the answers made during each of its polls and handing them to
/// `send` when the poll ends (in the order they were made; `send` empties the list).
pub(crate) async fn gathering<F: Future>(
    task: F,
    mut send: impl FnMut(&mut Vec<GatheredAnswer>),
) -> F::Output {
    let mut task = pin!(task);
    // One list for the task's life: taken into the scope for a poll, given back after it.
    let mut kept = Vec::new();
    std::future::poll_fn(|cx| {
        let previous = GATHERING.with(|g| g.replace(Some(std::mem::take(&mut kept))));
        let scope = Scope {
            previous,
            kept: &mut kept,
            send: &mut send,
        };
        let out = task.as_mut().poll(cx);
        drop(scope);
        out
    })
    .await
}

/// Ends one poll's scope: the previous scope comes back and the gathered answers are sent,
/// also when the poll panicked (so that no later task on this thread gathers into a list no
/// one will send).
struct Scope<'a, S: FnMut(&mut Vec<GatheredAnswer>)> {
    previous: Option<Vec<GatheredAnswer>>,
    kept: &'a mut Vec<GatheredAnswer>,
    send: &'a mut S,
}

impl<S: FnMut(&mut Vec<GatheredAnswer>)> Drop for Scope<'_, S> {
    fn drop(&mut self) {
        let previous = self.previous.take();
        let mut gathered = GATHERING.with(|g| g.replace(previous)).unwrap_or_default();
        if !gathered.is_empty() {
            (self.send)(&mut gathered);
            gathered.clear();
        }
        *self.kept = gathered;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shardik_core::membership::{Address, UniqueAddress};
    use std::sync::Weak;

    fn answer(port: u16, byte: u8) -> GatheredAnswer {
        let asker = UniqueAddress::new(Address::new("127.0.0.1", port), 1);
        GatheredAnswer {
            route: Arc::new(AnswerRoute::new(Arc::from("k"), asker, Weak::new())),
            frame: Bytes::from(vec![byte]),
        }
    }

    #[tokio::test]
    async fn answers_made_in_one_poll_are_sent_together_and_in_order() {
        let mut sent: Vec<Vec<u8>> = Vec::new();
        gathering(
            async {
                assert!(gather(answer(1, 1)).is_ok());
                assert!(gather(answer(1, 2)).is_ok());
                tokio::task::yield_now().await;
                assert!(gather(answer(2, 3)).is_ok());
            },
            |answers| sent.push(answers.drain(..).map(|a| a.frame[0]).collect()),
        )
        .await;
        assert_eq!(sent, vec![vec![1, 2], vec![3]]);
    }

    #[tokio::test]
    async fn answers_taken_during_the_poll_are_not_sent_again_at_its_end() {
        let mut sent = 0;
        let mut taken = Vec::new();
        gathering(
            async {
                let _ = gather(answer(1, 1));
                take_gathered(&mut taken);
                let _ = gather(answer(1, 2));
            },
            |answers| {
                sent += answers.len();
                answers.clear();
            },
        )
        .await;
        assert_eq!(taken.len(), 1);
        assert_eq!(sent, 1, "only the answer made after the take");
    }

    #[test]
    fn outside_a_gathering_task_an_answer_is_handed_back() {
        assert!(gather(answer(1, 1)).is_err());
    }

    #[tokio::test]
    async fn a_panicking_poll_still_sends_and_ends_its_scope() {
        let sent = std::sync::Mutex::new(0usize);
        let result = std::panic::AssertUnwindSafe(gathering(
            async {
                let _ = gather(answer(1, 1));
                panic!("handler bug");
            },
            |answers| {
                *sent.lock().unwrap() += answers.len();
                answers.clear();
            },
        ));
        let caught = futures_util::FutureExt::catch_unwind(result).await;
        assert!(caught.is_err());
        assert_eq!(*sent.lock().unwrap(), 1);
        assert!(
            gather(answer(1, 1)).is_err(),
            "the scope ended with the poll"
        );
    }
}
