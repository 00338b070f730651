//! `bench sharding memory`: resident memory per idle entity, and the rate at which entities are
//! created in shards that already run.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;
use shardik_runtime::sharding::Sharding;

use super::common::{ASK_TIMEOUT, Common, report};
use super::entities::{activate, ids_in_distinct_shards, produce, tell};
use super::nodes::{BenchNode, Ref};
use super::tally::{TallyCmd, tally_kind};
use crate::bench_support::load_average;

/// The kind of `memory`.
const MEMORY_KIND: &str = "bench-memory";

/// Arguments of `shardik bench sharding memory`.
#[derive(Args, Debug)]
pub(super) struct MemoryArgs {
    /// Entities created (one tell each).
    #[arg(long, default_value_t = 1_000_000)]
    entities: u64,
    #[command(flatten)]
    pub(super) common: Common,
}

pub(super) async fn memory_bench(a: MemoryArgs) -> anyhow::Result<()> {
    if a.entities == 0 {
        bail!("--entities must be positive");
    }
    let load = load_average();
    let node = BenchNode::start(Vec::new(), &[]).await?;
    node.wait_up(1).await?;
    let region = node.init(tally_kind(MEMORY_KIND, ()))?;
    // Warm every shard with one entity, so that only entities are created below.
    let shards = node.config.number_of_shards as usize;
    let warm: Vec<Ref<()>> = ids_in_distinct_shards(&region, "w", shards, &BTreeSet::new())?
        .iter()
        .map(|id| region.entity_ref(id))
        .collect();
    activate(&warm).await?;
    let expected = a.entities as usize + warm.len();
    drop(warm);
    settle().await;
    let before = rss_bytes()?;

    let started = Instant::now();
    let entities = a.entities;
    let creator = region.clone();
    let retries = tokio::spawn(async move {
        produce(entities, |i| tell(&creator.entity_ref(&format!("m{i}")), 1)).await
    })
    .await??;
    // Commands of one sender are handled in order: once the last entity answers, every
    // entity exists.
    region
        .entity_ref(&format!("m{}", a.entities - 1))
        .ask(TallyCmd::Read, ASK_TIMEOUT)
        .await?;
    let creation = started.elapsed();
    let live = wait_entities(&node.sharding, expected).await?;
    settle().await;
    let after = rss_bytes()?;

    let per_entity = after.saturating_sub(before) as f64 / a.entities as f64;
    let rate = a.entities as f64 / creation.as_secs_f64();
    let value = json!({
        "benchmark": "sharding-memory",
        "runtime": a.common.runtime,
        "entities": a.entities,
        "live_entities": live,
        "shards": shards,
        "rss_before_bytes": before,
        "rss_after_bytes": after,
        "bytes_per_entity": per_entity,
        "creation_s": creation.as_secs_f64(),
        "entities_per_s": rate,
        "buffer_full_retries": retries,
        "load1_before": load,
    });
    let line = format!(
        "sharding memory ({}): {} entities in {shards} warm shards: {per_entity:.1} bytes per entity (RSS {:.1} -> {:.1} MB), created at {rate:.0} entities/s ({retries} retries) (load {load:.2})",
        a.common.runtime,
        a.entities,
        before as f64 / 1e6,
        after as f64 / 1e6,
    );
    report(a.common.json, value, line);
    Ok(())
}

/// Lets finished work settle (freed buffers, idle handlers) before reading RSS.
pub(super) async fn settle() {
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// Waits until `sharding` reports `expected` live entities of the memory kind.
async fn wait_entities(sharding: &Sharding, expected: usize) -> anyhow::Result<usize> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let live: usize = sharding
            .region_stats(MEMORY_KIND, Duration::from_secs(10))
            .await
            .context("the memory kind did not report its statistics")?
            .iter()
            .map(|(_, n)| n)
            .sum();
        if live >= expected {
            return Ok(live);
        }
        if Instant::now() > deadline {
            bail!("only {live} of {expected} entities alive after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// This process's resident memory in bytes (`VmRSS` of `/proc/self/status`).
fn rss_bytes() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .context("no VmRSS in /proc/self/status")?;
    Ok(kb * 1024)
}
