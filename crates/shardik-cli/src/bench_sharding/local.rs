//! `bench sharding local`: tells to active entities on a single-node cluster, against a raw
//! tokio channel into one task doing the same work.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;
use shardik_runtime::sharding::{Entity, EntityRegion};
use tokio::sync::mpsc;

use super::common::{Common, SendMode, report};
use super::entities::{
    activate, entity_refs, produce, produce_waiting, share, tell_round_robin, verify_shares,
};
use super::nodes::BenchNode;
use super::tally::{Progress, TallyCmd, sync_tally_kind, tally_kind};
use crate::bench_support::{Throughput, load_average, unix_ns};

/// The kinds of `local`: async entities, and the same as sync entities.
const LOCAL_KIND: &str = "bench-local";
const LOCAL_SYNC_KIND: &str = "bench-local-sync";

/// Longest wait for all tells of a throughput run to be handled.
const DONE_LIMIT: Duration = Duration::from_secs(300);

/// Batch size of the raw baseline's consumer (the same as the entity kind task's).
const RAW_BATCH: usize = 256;

/// Arguments of `shardik bench sharding local`.
#[derive(Args, Debug)]
pub(super) struct LocalArgs {
    /// Entities, activated before the measurement.
    #[arg(long, default_value_t = 1000)]
    entities: u64,
    /// Tells, spread round-robin over the entities from one producer task.
    #[arg(long, default_value_t = 5_000_000)]
    messages: u64,
    /// How the producer waits when the queue is full.
    #[arg(long, value_enum, default_value = "retry")]
    send: SendMode,
    #[command(flatten)]
    pub(super) common: Common,
}

pub(super) async fn local_bench(a: LocalArgs) -> anyhow::Result<()> {
    if a.entities == 0 || a.messages == 0 {
        bail!("--entities and --messages must be positive");
    }
    let load = load_average();
    let node = BenchNode::start(Vec::new(), &[]).await?;
    node.wait_up(1).await?;
    let progress = Progress::new(a.messages);
    let kind = tally_kind(LOCAL_KIND, Arc::clone(&progress));
    let sharding = sharding_local(node.sharding.init(kind)?, &progress, &a).await?;
    let progress = Progress::new(a.messages);
    let kind = sync_tally_kind(LOCAL_SYNC_KIND, Arc::clone(&progress));
    let sync = sharding_local(node.sharding.init(kind)?, &progress, &a).await?;
    let raw = raw_local(&a, node.config.region.buffer_size.max(1)).await?;
    let ratio = sharding.per_second() / raw.per_second();
    let sync_ratio = sync.per_second() / raw.per_second();
    let value = json!({
        "benchmark": "sharding-local",
        "runtime": a.common.runtime,
        "send": a.send.name(),
        "entities": a.entities,
        "messages": a.messages,
        "sharding_msgs_per_s": sharding.per_second(),
        "sharding_elapsed_s": sharding.elapsed.as_secs_f64(),
        "sharding_send_s": sharding.send_time.as_secs_f64(),
        "sharding_buffer_full_retries": sharding.retries,
        "sync_msgs_per_s": sync.per_second(),
        "sync_elapsed_s": sync.elapsed.as_secs_f64(),
        "sync_buffer_full_retries": sync.retries,
        "sync_ratio_to_raw": sync_ratio,
        "raw_msgs_per_s": raw.per_second(),
        "raw_elapsed_s": raw.elapsed.as_secs_f64(),
        "raw_full_retries": raw.retries,
        "ratio_to_raw": ratio,
        "verified": true,
        "load1_before": load,
    });
    let line = format!(
        "sharding local ({}, {}): {} tells to {} entities: sharding {:.0} msgs/s ({} BufferFull retries), SyncEntity {:.0} msgs/s, raw tokio {:.0} msgs/s, ratios {ratio:.3} and {sync_ratio:.3} (load {load:.2})",
        a.common.runtime,
        a.send.name(),
        a.messages,
        a.entities,
        sharding.per_second(),
        sharding.retries,
        sync.per_second(),
        raw.per_second(),
    );
    report(a.common.json, value, line);
    Ok(())
}

/// Tells through sharding to active entities of `region`, whose handlers report to
/// `progress`; every entity's count is checked.
async fn sharding_local<E: Entity<Command = TallyCmd>>(
    region: EntityRegion<E>,
    progress: &Progress,
    a: &LocalArgs,
) -> anyhow::Result<Throughput> {
    let refs = entity_refs(&region, "e", a.entities);
    activate(&refs).await?;
    let (refs, first, send_time, retries) = tell_round_robin(refs, a.messages, a.send).await?;
    let last = progress.wait(DONE_LIMIT).await?;
    verify_shares(&refs, a.messages).await?;
    Ok(Throughput {
        sent: a.messages,
        received: a.messages,
        elapsed: Duration::from_nanos(last.saturating_sub(first)),
        send_time,
        retries,
    })
}

/// The same work without sharding: (entity id, command) through a bounded channel of the
/// region's capacity into one task that keeps the states in a `HashMap`.
async fn raw_local(a: &LocalArgs, capacity: usize) -> anyhow::Result<Throughput> {
    let ids: Vec<Arc<str>> = (0..a.entities)
        .map(|i| Arc::from(format!("e{i}")))
        .collect();
    let (tx, rx) = mpsc::channel::<(Arc<str>, u64)>(capacity);
    let progress = Progress::new(a.messages);
    let consumer = tokio::spawn(raw_consumer(rx, Arc::clone(&progress)));
    for id in &ids {
        tx.send((Arc::clone(id), 0)).await?;
    }
    let (messages, mode) = (a.messages, a.send);
    let producer = tokio::spawn(async move {
        let n = ids.len() as u64;
        let pick = |i: u64| (Arc::clone(&ids[(i % n) as usize]), 1);
        let first = unix_ns();
        let started = Instant::now();
        let retries = match mode {
            SendMode::Retry => {
                produce(messages, |i| match tx.try_send(pick(i)) {
                    Ok(()) => Ok(true),
                    Err(mpsc::error::TrySendError::Full(_)) => Ok(false),
                    Err(mpsc::error::TrySendError::Closed(_)) => bail!("the consumer stopped"),
                })
                .await?
            }
            SendMode::Wait => {
                let tx = &tx;
                produce_waiting(messages, |i| async move {
                    tx.send(pick(i)).await.context("the consumer stopped")
                })
                .await?
            }
        };
        anyhow::Ok((ids, first, started.elapsed(), retries))
    });
    let (ids, first, send_time, retries) = producer.await??;
    let last = progress.wait(DONE_LIMIT).await?;
    let states = consumer.await?;
    for (k, id) in ids.iter().enumerate() {
        let want = share(k as u64, ids.len() as u64, a.messages);
        if states.get(id) != Some(&want) {
            bail!(
                "raw baseline: {id} counted {:?}, expected {want}",
                states.get(id)
            );
        }
    }
    Ok(Throughput {
        sent: a.messages,
        received: a.messages,
        elapsed: Duration::from_nanos(last.saturating_sub(first)),
        send_time,
        retries,
    })
}

async fn raw_consumer(
    mut rx: mpsc::Receiver<(Arc<str>, u64)>,
    progress: Arc<Progress>,
) -> HashMap<Arc<str>, u64> {
    let mut states: HashMap<Arc<str>, u64> = HashMap::new();
    let mut batch = Vec::with_capacity(RAW_BATCH);
    while rx.recv_many(&mut batch, RAW_BATCH).await > 0 {
        for (id, add) in batch.drain(..) {
            *states.entry(id).or_insert(0) += add;
            if add > 0 {
                progress.hit();
            }
        }
    }
    states
}
