//! Remembered entities (Akka's `remember-entities`): the entities of a kind that run are
//! recorded per shard in the store, so that when a shard starts on a node (after a rebalance,
//! a crash, or a restart of the whole cluster) its entities are started again without waiting
//! for a message.
//!
//! An entity is recorded as started before its first command is handled (that command waits
//! for the write, as in the reference); it is recorded as stopped when it passivates. A
//! hand-off or a crash records nothing: the entity stays remembered and starts at the shard's
//! next home. A failure records nothing either: the shard starts the entity again after
//! `entity-restart-backoff` (`restarts.rs`), or its next message does. The writes of one kind go through one task, in order; what is queued while a
//! write is in flight is merged into one update per shard.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use shardik_core::sharding::{EntityId, ShardId};
use shardik_persistence::{Store, StoreError};
use tokio::sync::{mpsc, oneshot};

use super::messages::Control;
// The kind's task (`kind.rs`) takes the settings from here with the writer.
use super::remember_settings::EntityRecovery;
pub(crate) use super::remember_settings::RememberSettings;

/// One change to a shard's remembered set, with the waiter of a start.
struct Update {
    shard: ShardId,
    entity: EntityId,
    started: bool,
    done: Option<oneshot::Sender<Result<(), StoreError>>>,
}

/// The remembered-entities writer of one kind on one node; clones share it.
#[derive(Clone)]
pub(crate) struct RememberWriter {
    tx: mpsc::UnboundedSender<Update>,
}

impl RememberWriter {
    /// Starts the writer for kind `kind` over `store`. It ends when the last handle is gone.
    ///
    /// The queue is unbounded on purpose: its producers are the kind's own entities (one
    /// start and one stop per incarnation, each start waited for by the entity's first
    /// command), not the network, so it is bounded by the entities of the node.
    pub fn spawn(kind: Arc<str>, store: Arc<dyn Store>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        crate::task::spawn(run(kind, store, rx));
        RememberWriter { tx }
    }

    /// Records that `entity` of `shard` runs; resolves once the store has it.
    pub async fn started(&self, shard: &ShardId, entity: &EntityId) -> Result<(), StoreError> {
        let (done, answer) = oneshot::channel();
        let update = Update {
            shard: shard.clone(),
            entity: entity.clone(),
            started: true,
            done: Some(done),
        };
        let stopped = || StoreError::Failed("the remembered-entities writer has stopped".into());
        self.tx.send(update).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Records, without waiting, that `entity` of `shard` passivated.
    pub fn stopped(&self, shard: &ShardId, entity: &EntityId) {
        let _ = self.tx.send(Update {
            shard: shard.clone(),
            entity: entity.clone(),
            started: false,
            done: None,
        });
    }
}

async fn run(kind: Arc<str>, store: Arc<dyn Store>, mut rx: mpsc::UnboundedReceiver<Update>) {
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, 4096).await > 0 {
        // The last change of each entity wins: a start then a stop in one batch is a stop.
        let mut last: BTreeMap<(&ShardId, &EntityId), bool> = BTreeMap::new();
        for u in &batch {
            last.insert((&u.shard, &u.entity), u.started);
        }
        let mut per_shard: BTreeMap<&ShardId, (Vec<String>, Vec<String>)> = BTreeMap::new();
        for ((shard, entity), started) in last {
            let (s, t) = per_shard.entry(shard).or_default();
            if started {
                s.push(entity.to_string());
            } else {
                t.push(entity.to_string());
            }
        }
        let mut result = Ok(());
        for (shard, (started, stopped)) in &per_shard {
            if let Err(e) = store
                .update_remembered(&kind, shard, started, stopped)
                .await
            {
                tracing::warn!(%kind, %shard, error = %e, "remembered entities not updated");
                result = Err(e);
            }
        }
        for u in batch.drain(..) {
            if let Some(done) = u.done {
                let _ = done.send(result.clone());
            }
        }
    }
}

/// Loads the remembered entities of `shard` and sends them to the kind's task in steps, as
/// `recovery` says (the task starts those whose shard still runs there). Runs as a task of its
/// own; a failed load is retried every `retry`; it ends early when the kind's task is gone.
pub(crate) async fn load_and_start(
    kind: Arc<str>,
    shard: ShardId,
    settings: RememberSettings,
    retry: Duration,
    back: mpsc::WeakSender<Control>,
) {
    let ids = loop {
        match settings.store.remembered_entities(&kind, &shard).await {
            Ok(ids) => break ids,
            Err(e) => {
                tracing::warn!(%kind, %shard, error = %e, "remembered entities not loaded; retrying");
                tokio::time::sleep(retry).await;
            }
        }
    };
    tracing::debug!(%kind, %shard, entities = ids.len(), "starting remembered entities");
    let ids: Vec<EntityId> = ids.into_iter().map(EntityId::from).collect();
    let step = match settings.recovery {
        EntityRecovery::All => ids.len(),
        EntityRecovery::ConstantRate { entities, .. } => entities.max(1),
    }
    .max(1);
    // At least one step, the last marked, so that the host knows when the load is over.
    let chunks: Vec<&[EntityId]> = if ids.is_empty() {
        vec![&[]]
    } else {
        ids.chunks(step).collect()
    };
    let steps = chunks.len();
    for (i, chunk) in chunks.into_iter().enumerate() {
        let Some(tx) = back.upgrade() else { return };
        let msg = Control::StartRemembered {
            shard: shard.clone(),
            ids: chunk.to_vec(),
            last: i + 1 == steps,
        };
        if tx.send(msg).await.is_err() {
            return;
        }
        drop(tx);
        if let EntityRecovery::ConstantRate { frequency, .. } = settings.recovery {
            tokio::time::sleep(frequency).await;
        }
    }
}

/// Loads the shards of `kind` that have remembered entities and sends them to the kind's task,
/// which asks for their homes so that they start (and start their entities) without waiting
/// for a message: after a restart of the whole cluster nobody else would.
pub(crate) async fn load_shards(
    kind: Arc<str>,
    settings: RememberSettings,
    retry: Duration,
    back: mpsc::WeakSender<Control>,
) {
    let shards = loop {
        match settings.store.remembered_shards(&kind).await {
            Ok(shards) => break shards,
            Err(e) => {
                tracing::warn!(%kind, error = %e, "remembered shards not loaded; retrying");
                tokio::time::sleep(retry).await;
            }
        }
    };
    if shards.is_empty() {
        return;
    }
    tracing::info!(%kind, shards = shards.len(), "shards with remembered entities");
    if let Some(tx) = back.upgrade() {
        let shards = shards.into_iter().map(ShardId::from).collect();
        let _ = tx.send(Control::WantHomes(shards)).await;
    }
}
