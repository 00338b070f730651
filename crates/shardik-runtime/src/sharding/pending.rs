//! Asks waiting for a reply from another node.
//!
//! Each is a one-shot callback under a fresh id, removed when its reply arrives. An asker that
//! gave up (timeout) leaves its entry behind; entries past their deadline are swept as new ones
//! are registered, so the table stays bounded by the asks in flight within their timeouts.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tokio::time::Instant;

use super::api::ShardingError;

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
#[derive(Clone, Default)]
pub(crate) struct PendingAsks {
    next: Arc<AtomicU64>,
    table: Arc<Mutex<Table>>,
}

impl PendingAsks {
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
                (e.callback)(result);
                true
            }
            None => false,
        }
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
