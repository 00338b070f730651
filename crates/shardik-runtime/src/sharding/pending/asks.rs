//! The asks of this node that wait for a reply from another node ([`PendingAsks`]).
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
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use tokio::time::Instant;

use crate::sharding::api::ShardingError;
use crate::sharding::messages::AskSlot;

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
