//! Recovery time of an entity with a long journal, without and with snapshots.
//!
//! The entity's journal is filled through the entity itself (commands persisting many events
//! at once), so the store holds what a real entity leaves: with snapshots, the kind's
//! retention (the newest two kept, older events deleted, as the demo counter does) has run.
//! Then, several times: the entity passivates, the benchmark waits until it is gone, and the
//! next command (a read) starts a new incarnation, which recovers before answering. That
//! command's round trip is the recovery time.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use shardik_persistence::{Store, persistence_id};
use shardik_runtime::persistence::{EventSourced, EventSourcedKind, Persistence, Retention};
use shardik_runtime::sharding::{EntityRef, EntityRegion, EntityTypeKey, Sharding};

use super::counter::{ASK_TIMEOUT, BenchCounter, CounterCmd};
use super::plan::Plan;
use crate::bench_support::load_average;

const PLAIN: EntityTypeKey<EventSourced<BenchCounter>> = EntityTypeKey::new("bench-recover");
const SNAPSHOTS: EntityTypeKey<EventSourced<BenchCounter>> =
    EntityTypeKey::new("bench-recover-snapshots");

/// How long the background snapshot work or a passivation may take before the run fails.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(5);

type Region = EntityRegion<EventSourced<BenchCounter>>;
type Ref = EntityRef<EventSourced<BenchCounter>>;

/// The recoveries of one entity.
pub(super) struct Recovery {
    /// What was measured, e.g. "no snapshot".
    pub(super) case: String,
    /// Events in the journal.
    pub(super) events: u64,
    /// The sequence number of the snapshot recovery starts from, if any.
    pub(super) snapshot_seq: Option<u64>,
    /// Each recovery's time: from the new incarnation's first command to its answer.
    pub(super) runs: Vec<Duration>,
    /// The one-minute load average before the recoveries.
    pub(super) load: f64,
}

impl Recovery {
    /// Events read and applied after the snapshot.
    pub(super) fn replayed(&self) -> u64 {
        self.events - self.snapshot_seq.unwrap_or(0)
    }

    /// The median run (the lower middle one of an even count).
    pub(super) fn median(&self) -> Duration {
        let mut runs = self.runs.clone();
        runs.sort_unstable();
        runs.get(runs.len().saturating_sub(1) / 2)
            .copied()
            .unwrap_or_default()
    }
}

/// Measures recovery without snapshots, then with a snapshot every `plan.snapshot_every`.
pub(super) async fn measure(
    sharding: &Sharding,
    persistence: &Persistence,
    tag: &str,
    plan: &Plan,
) -> anyhow::Result<Vec<Recovery>> {
    let retention = Retention {
        every: plan.snapshot_every,
        keep: 2,
        delete_events: true,
    };
    let plain = EventSourcedKind::new(PLAIN, persistence, |_| BenchCounter::default());
    let snapshots = EventSourcedKind::new(SNAPSHOTS, persistence, |_| BenchCounter::default())
        .with_snapshots(retention);
    // Passivated on command only, never because the benchmark paused.
    let plain = sharding.init(plain.into_kind().with_idle_timeout(None))?;
    let snapshots = sharding.init(snapshots.into_kind().with_idle_timeout(None))?;
    let store = persistence.store().as_ref();
    Ok(vec![
        case(sharding, store, &plain, None, tag, plan).await?,
        case(sharding, store, &snapshots, Some(retention), tag, plan).await?,
    ])
}

async fn case(
    sharding: &Sharding,
    store: &dyn Store,
    region: &Region,
    retention: Option<Retention>,
    tag: &str,
    plan: &Plan,
) -> anyhow::Result<Recovery> {
    let entity = region.entity_ref(&format!("{tag}-recover"));
    fill(&entity, plan.recovery_events, plan.snapshot_every).await?;
    let snapshot_seq = match retention {
        Some(r) => {
            settle(
                store,
                region.kind(),
                entity.entity_id(),
                plan.recovery_events,
                r,
            )
            .await?
        }
        None => None,
    };
    let load = load_average();
    let mut runs = Vec::with_capacity(plan.recovery_runs);
    for _ in 0..plan.recovery_runs {
        stop(sharding, region.kind(), &entity).await?;
        let asked = Instant::now();
        let value = entity.ask(CounterCmd::Get, ASK_TIMEOUT).await?;
        runs.push(asked.elapsed());
        if value != plan.recovery_events {
            bail!(
                "{}: recovered {value} of {} events",
                entity.entity_id(),
                plan.recovery_events
            );
        }
    }
    Ok(Recovery {
        case: match retention {
            Some(r) => format!("snapshot every {}", r.every),
            None => "no snapshot".to_string(),
        },
        events: plan.recovery_events,
        snapshot_seq,
        runs,
        load,
    })
}

/// Persists `events` events through the entity, `chunk` per command (with snapshots, one
/// command per snapshot interval, so each command crosses one snapshot point, as that many
/// single increments would).
async fn fill(entity: &Ref, events: u64, chunk: u64) -> anyhow::Result<()> {
    let mut written = 0;
    while written < events {
        let n = chunk.min(events - written);
        let count = u32::try_from(n).context("too many events per command")?;
        let value = entity
            .ask(|r| CounterCmd::Add(count, r), ASK_TIMEOUT)
            .await
            .with_context(|| format!("{}: filling the journal failed", entity.entity_id()))?;
        written += n;
        if value != written {
            bail!(
                "{}: counts {value} after {written} events",
                entity.entity_id()
            );
        }
    }
    Ok(())
}

/// Waits until the background snapshot work of the fill is done: the newest snapshot is in
/// the store and the events it makes obsolete are deleted. Returns the snapshot's number
/// (`None` when the journal is shorter than one interval).
async fn settle(
    store: &dyn Store,
    kind: &str,
    entity: &str,
    events: u64,
    retention: Retention,
) -> anyhow::Result<Option<u64>> {
    let newest = events / retention.every * retention.every;
    if newest == 0 {
        return Ok(None);
    }
    let pid = persistence_id(kind, entity);
    let oldest_kept = newest.saturating_sub((retention.keep - 1) * retention.every);
    let began = Instant::now();
    loop {
        let snapshot = store.latest_snapshot(&pid).await?.map(|s| s.seq);
        let deleted = !retention.delete_events
            || oldest_kept == 0
            || store.read_events(&pid, 1, oldest_kept, 1).await?.is_empty();
        if snapshot == Some(newest) && deleted {
            return Ok(Some(newest));
        }
        if began.elapsed() > SETTLE_LIMIT {
            bail!(
                "{pid}: after {SETTLE_LIMIT:?} the newest snapshot is {snapshot:?} (expected {newest}) and old events deleted: {deleted}"
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Passivates the entity and waits until its region runs no entity of the kind.
async fn stop(sharding: &Sharding, kind: &str, entity: &Ref) -> anyhow::Result<()> {
    entity.ask(CounterCmd::Stop, ASK_TIMEOUT).await?;
    let began = Instant::now();
    loop {
        let live: usize = sharding
            .region_stats(kind, ASK_TIMEOUT)
            .await
            .context("the region did not answer for its statistics")?
            .iter()
            .map(|(_, n)| n)
            .sum();
        if live == 0 {
            return Ok(());
        }
        if began.elapsed() > SETTLE_LIMIT {
            bail!(
                "{}: still running {SETTLE_LIMIT:?} after passivating",
                entity.entity_id()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}
