//! Deleting confirmed commands from a producer's durable queue, off the producer's task.

use std::sync::Arc;

use shardik_persistence::{QueueConfirmation, Store};
use tokio::sync::mpsc;

/// The task that deletes confirmed commands from the durable queue, apart from the producer's
/// task: the producer must never wait for it (a store whose connections it held while the
/// producer waited for one would hold both up), and what it has not deleted yet is only sent
/// again at the next start, and confirmed again without being processed.
pub(super) struct Confirmer {
    tx: mpsc::UnboundedSender<Vec<QueueConfirmation>>,
    task: tokio::task::JoinHandle<()>,
}

impl Confirmer {
    pub(super) fn spawn(producer: Arc<str>, store: Arc<dyn Store>) -> Self {
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

    pub(super) fn confirm(&self, confirmations: Vec<QueueConfirmation>) {
        // Bounded by what the producer holds: each stream's confirmations are at most its
        // window's worth of answers ahead of the deletions.
        let _ = self.tx.send(confirmations);
    }

    /// Waits until what was handed over is deleted (or failed to be).
    pub(super) async fn finish(self) {
        drop(self.tx);
        let _ = self.task.await;
    }
}
