//! Throughput of one concurrency level: plain appends (the baseline) and persisted commands
//! through sharding, each in a closed loop.
//!
//! Closed loop: every writer issues its next write only once the previous one is answered, so
//! the number of writes in flight is exactly the number of writers, and the rate is what the
//! store (and the path to it) sustains at that concurrency, not what a generator offers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use shardik_persistence::{AtomicWrite, NewEvent, PersistenceId, Store, persistence_id};
use shardik_runtime::metrics::MetricsHandle;
use shardik_runtime::persistence::{EventSourced, EventSourcedKind, Persistence};
use shardik_runtime::sharding::{EntityKind, EntityRef, EntityRegion, EntityTypeKey};

use super::counter::{ASK_TIMEOUT, BenchCounter, CounterCmd};
use super::journal_metrics::journal_counters;
use crate::bench_support::{Latencies, load_average};

/// The kind measured: no snapshots, so that it writes exactly one row per command, as the
/// baseline does.
const DURABLE: EntityTypeKey<EventSourced<BenchCounter>> = EntityTypeKey::new("bench-durable");
/// The "kind" part of the baseline's persistence ids (ids shaped as the entities' are).
const PLAIN: &str = "bench-plain";

type Region = EntityRegion<EventSourced<BenchCounter>>;

/// The event-sourced counter kind of the throughput cases, never passivated.
pub(super) fn kind(persistence: &Persistence) -> EntityKind<EventSourced<BenchCounter>> {
    EventSourcedKind::new(DURABLE, persistence, |_| BenchCounter::default())
        .into_kind()
        .with_idle_timeout(None)
}

/// Persists one increment through sharding and reads back the stored event, so that the
/// baseline writes the very bytes an entity writes. Also warms up the node: the shard
/// allocation, the journal writer and the store's connections.
pub(super) async fn stored_event(
    region: &Region,
    store: &dyn Store,
    tag: &str,
) -> anyhow::Result<Bytes> {
    let probe = region.entity_ref(&format!("{tag}-probe"));
    probe
        .ask(CounterCmd::Increment, ASK_TIMEOUT)
        .await
        .context("the first persisted command failed")?;
    let pid = persistence_id(DURABLE.name(), probe.entity_id());
    let mut events = store
        .read_events(&pid, 1, 1, 1)
        .await
        .with_context(|| format!("reading back {pid}"))?;
    match events.pop() {
        Some(e) => Ok(e.payload),
        None => bail!("{pid}: the acknowledged event is not in the store"),
    }
}

/// One closed-loop measurement.
pub(super) struct Run {
    /// Writes answered (after the warm-up).
    pub(super) ops: u64,
    /// From the start until the last writer's last answer.
    pub(super) elapsed: Duration,
    /// Time from each write to its answer.
    pub(super) latencies: Latencies,
}

impl Run {
    pub(super) fn per_second(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Both cases at one concurrency.
pub(super) struct Level {
    pub(super) writers: usize,
    /// The one-minute load average when the level started.
    pub(super) load: f64,
    pub(super) baseline: Run,
    pub(super) sharded: Run,
    /// Mean writes per journal batch in the sharded case (`None` if the metrics recorder is
    /// not this run's).
    pub(super) writes_per_batch: Option<f64>,
}

impl Level {
    /// Persisted commands per second as a fraction of plain appends per second.
    pub(super) fn ratio(&self) -> f64 {
        self.sharded.per_second() / self.baseline.per_second()
    }
}

/// Measures the baseline, then sharding, with `writers` in flight for `duration` each.
pub(super) async fn level(
    store: &Arc<dyn Store>,
    region: &Region,
    metrics: Option<&MetricsHandle>,
    tag: &str,
    writers: usize,
    event: &Bytes,
    duration: Duration,
) -> anyhow::Result<Level> {
    let load = load_average();
    let baseline = baseline(store, tag, writers, event, duration).await?;
    let before = journal_counters(metrics);
    let sharded = sharded(store.as_ref(), region, tag, writers, duration).await?;
    let writes_per_batch = match (before, journal_counters(metrics)) {
        (Some((w0, b0)), Some((w1, b1))) if b1 > b0 => Some((w1 - w0) / (b1 - b0)),
        _ => None,
    };
    Ok(Level {
        writers,
        load,
        baseline,
        sharded,
        writes_per_batch,
    })
}

/// One writer of a closed loop.
trait Writer: Send + 'static {
    /// Whatever must happen before the clock starts (opening connections, activating).
    fn warm_up(&mut self) -> impl Future<Output = anyhow::Result<()>> + Send;
    /// One write, answered.
    fn write(&mut self) -> impl Future<Output = anyhow::Result<()>> + Send;
}

/// Warms every writer up, then lets each write in a loop until `duration` has passed. Returns
/// the writers (for checks) and the measurement.
async fn closed_loop<W: Writer>(
    writers: Vec<W>,
    duration: Duration,
) -> anyhow::Result<(Vec<W>, Run)> {
    let warming: Vec<_> = writers
        .into_iter()
        .map(|mut w| {
            tokio::spawn(async move {
                w.warm_up().await?;
                anyhow::Ok(w)
            })
        })
        .collect();
    let mut warm = Vec::with_capacity(warming.len());
    for task in warming {
        warm.push(task.await??);
    }
    let start = Instant::now();
    let deadline = start + duration;
    let running: Vec<_> = warm
        .into_iter()
        .map(|mut w| {
            tokio::spawn(async move {
                let mut latencies = Latencies::new();
                let mut ops = 0u64;
                while Instant::now() < deadline {
                    let sent = Instant::now();
                    w.write().await?;
                    latencies.record(sent.elapsed().as_nanos() as u64);
                    ops += 1;
                }
                anyhow::Ok((w, latencies, ops))
            })
        })
        .collect();
    let mut run = Run {
        ops: 0,
        elapsed: Duration::ZERO,
        latencies: Latencies::new(),
    };
    let mut done = Vec::with_capacity(running.len());
    for task in running {
        let (w, latencies, ops) = task.await??;
        run.latencies.merge(&latencies)?;
        run.ops += ops;
        done.push(w);
    }
    run.elapsed = start.elapsed();
    Ok((done, run))
}

// ---------------------------------------------------------------------------------------------
// The baseline.

/// Appends one event at a time to its own journal, numbering the events itself.
struct PlainWriter {
    store: Arc<dyn Store>,
    pid: PersistenceId,
    payload: Bytes,
    /// The sequence number of the next event.
    next: u64,
}

impl PlainWriter {
    async fn append(&mut self) -> anyhow::Result<()> {
        let write = AtomicWrite {
            persistence_id: Arc::clone(&self.pid),
            events: vec![NewEvent {
                seq: self.next,
                payload: self.payload.clone(),
                manifest: "".into(),
                tags: Vec::new(),
            }],
            fence: None,
            marks: Vec::new(),
        };
        let answers = self
            .store
            .append(vec![write])
            .await
            .with_context(|| format!("appending to {}", self.pid))?;
        match answers.as_slice() {
            [Ok(())] => {}
            [Err(refused)] => bail!("the store refused an append: {refused}"),
            other => bail!("the store answered {} results for one write", other.len()),
        }
        self.next += 1;
        Ok(())
    }
}

impl Writer for PlainWriter {
    /// One append: the first use of a store connection costs more than the rest.
    async fn warm_up(&mut self) -> anyhow::Result<()> {
        self.append().await
    }

    async fn write(&mut self) -> anyhow::Result<()> {
        self.append().await
    }
}

/// `writers` writers appending plain rows to `store`; then checks that every acknowledged
/// append is in the store.
async fn baseline(
    store: &Arc<dyn Store>,
    tag: &str,
    writers: usize,
    event: &Bytes,
    duration: Duration,
) -> anyhow::Result<Run> {
    let plain = (0..writers)
        .map(|i| PlainWriter {
            store: Arc::clone(store),
            pid: persistence_id(PLAIN, &format!("{tag}-c{writers}-{i}")),
            payload: event.clone(),
            next: 1,
        })
        .collect();
    let (plain, run) = closed_loop(plain, duration).await?;
    for w in &plain {
        let highest = store.highest_seq(&w.pid).await?;
        if highest != w.next - 1 {
            bail!(
                "{}: {} appends acknowledged, the store's highest is {highest}",
                w.pid,
                w.next - 1
            );
        }
    }
    Ok(run)
}

// ---------------------------------------------------------------------------------------------
// Through sharding.

/// Asks one entity to increment, checking each answer against the increments acknowledged.
struct EntityWriter {
    entity: EntityRef<EventSourced<BenchCounter>>,
    acked: u64,
}

impl Writer for EntityWriter {
    /// Activates the entity: it recovers (from an empty journal) on its first command.
    async fn warm_up(&mut self) -> anyhow::Result<()> {
        let value = self.entity.ask(CounterCmd::Get, ASK_TIMEOUT).await?;
        if value != 0 {
            bail!("{}: a fresh entity counts {value}", self.entity.entity_id());
        }
        Ok(())
    }

    async fn write(&mut self) -> anyhow::Result<()> {
        let value = self
            .entity
            .ask(CounterCmd::Increment, ASK_TIMEOUT)
            .await
            .with_context(|| format!("{}: increment failed", self.entity.entity_id()))?;
        self.acked += 1;
        if value != self.acked {
            bail!(
                "{}: answered {value} after {} increments",
                self.entity.entity_id(),
                self.acked
            );
        }
        Ok(())
    }
}

/// `writers` entities each asked to increment in a closed loop; then checks that every
/// acknowledged increment is in the store (the journal's highest number).
async fn sharded(
    store: &dyn Store,
    region: &Region,
    tag: &str,
    writers: usize,
    duration: Duration,
) -> anyhow::Result<Run> {
    let entities = (0..writers)
        .map(|i| EntityWriter {
            entity: region.entity_ref(&format!("{tag}-c{writers}-{i}")),
            acked: 0,
        })
        .collect();
    let (entities, run) = closed_loop(entities, duration).await?;
    for w in &entities {
        let pid = persistence_id(DURABLE.name(), w.entity.entity_id());
        let highest = store.highest_seq(&pid).await?;
        if highest != w.acked {
            bail!(
                "{pid}: {} increments acknowledged, the store's highest is {highest}",
                w.acked
            );
        }
    }
    Ok(run)
}
