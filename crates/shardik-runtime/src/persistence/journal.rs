//! The journal writer of one node: one task that collects the writes of every entity using a
//! store and commits them together, so that a thousand entities persisting at once cost a few
//! commits, not a thousand (group commit, as journals do).
//!
//! One batch is in flight at a time; while it commits, new writes queue up and form the next
//! batch. The queue is bounded: an entity that persists while it is full waits.

use std::sync::Arc;

use shardik_persistence::{AtomicWrite, Store, StoreError, WriteResult};
use tokio::sync::{mpsc, oneshot};

/// How many writes one batch takes at most.
const MAX_BATCH: usize = 1024;
/// How many writes may wait for the next batch.
const QUEUE: usize = 16 * 1024;

struct Request {
    write: AtomicWrite,
    done: oneshot::Sender<Result<WriteResult, StoreError>>,
}

/// A handle to the node's journal writer; clones share it.
#[derive(Clone)]
pub(crate) struct JournalWriter {
    tx: mpsc::Sender<Request>,
}

impl JournalWriter {
    /// Starts the writer task over `store` (on the current tokio runtime). It ends when the
    /// last handle is dropped.
    pub(crate) fn spawn(store: Arc<dyn Store>) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        crate::task::spawn(run(store, rx));
        JournalWriter { tx }
    }

    /// Writes `write` with the next batch; answers once the batch is committed (or failed).
    pub(crate) async fn write(&self, write: AtomicWrite) -> Result<WriteResult, StoreError> {
        let (done, answer) = oneshot::channel();
        self.tx
            .send(Request { write, done })
            .await
            .map_err(|_| StoreError::Failed("the journal writer has stopped".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Failed("the journal writer has stopped".into()))?
    }
}

async fn run(store: Arc<dyn Store>, mut rx: mpsc::Receiver<Request>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let (writes, answers): (Vec<_>, Vec<_>) =
            batch.drain(..).map(|r| (r.write, r.done)).unzip();
        metrics::counter!(crate::metrics::JOURNAL_BATCHES_TOTAL).increment(1);
        metrics::counter!(crate::metrics::JOURNAL_WRITES_TOTAL).increment(writes.len() as u64);
        match store.append(writes).await {
            Ok(results) if results.len() == answers.len() => {
                for (done, result) in answers.into_iter().zip(results) {
                    let _ = done.send(Ok(result));
                }
            }
            Ok(results) => {
                let e = StoreError::Failed(format!(
                    "the store answered {} of {} writes",
                    results.len(),
                    answers.len()
                ));
                tracing::error!(error = %e, "journal batch answered incompletely");
                for done in answers {
                    let _ = done.send(Err(e.clone()));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, writes = answers.len(), "journal batch failed");
                for done in answers {
                    let _ = done.send(Err(e.clone()));
                }
            }
        }
    }
}
