//! `bench sharding first-message`: the first ask to an entity whose shard has no home yet (a
//! coordinator round trip), against the second ask to the same entity.

use std::collections::BTreeSet;
use std::time::Instant;

use anyhow::bail;
use clap::Args;
use serde_json::json;

use super::common::{ASK_TIMEOUT, Common, FIRST_KIND, report};
use super::entities::ids_in_distinct_shards;
use super::nodes::{BenchNode, Region, RemoteSetup};
use super::tally::{Probe, TallyCmd, tally_kind};
use crate::bench_support::{Latencies, load_average};

/// Arguments of `shardik bench sharding first-message`.
#[derive(Args, Debug)]
pub(super) struct FirstArgs {
    /// Fresh shards measured (each gets one entity).
    #[arg(long, default_value_t = 300)]
    shards: usize,
    /// Measure from a proxy node to a coordinator in a second process instead of on one node.
    #[arg(long)]
    remote: bool,
    #[command(flatten)]
    pub(super) common: Common,
}

pub(super) async fn first_message_bench(a: FirstArgs) -> anyhow::Result<()> {
    if a.shards == 0 {
        bail!("--shards must be positive");
    }
    let load = load_average();
    let (first, second) = if a.remote {
        let setup = RemoteSetup::start(0, None, 0).await?;
        let region = setup.proxy(FIRST_KIND)?;
        let samples = first_and_second(&region, a.shards).await?;
        setup.peer.stop().await;
        samples
    } else {
        let node = BenchNode::start(Vec::new(), &[]).await?;
        node.wait_up(1).await?;
        let region = node.init(tally_kind(FIRST_KIND, ()))?;
        first_and_second(&region, a.shards).await?
    };
    let place = if a.remote {
        "proxy, remote coordinator"
    } else {
        "one node, local coordinator"
    };
    let value = json!({
        "benchmark": "sharding-first-message",
        "runtime": a.common.runtime,
        "where": place,
        "shards": a.shards,
        "first": first.summary(),
        "second": second.summary(),
        "load1_before": load,
    });
    let line = format!(
        "sharding first-message ({}, {place}): {} fresh shards: first ask p50 {:.1} / p99 {:.1} / max {:.1} µs; second ask to the same entity p50 {:.1} / p99 {:.1} µs (load {load:.2})",
        a.common.runtime,
        a.shards,
        first.quantile_us(0.5),
        first.quantile_us(0.99),
        first.quantile_us(1.0),
        second.quantile_us(0.5),
        second.quantile_us(0.99),
    );
    report(a.common.json, value, line);
    Ok(())
}

/// Asks one entity in each of `shards` fresh shards twice, one after the other: the first ask
/// waits for the shard's allocation, the second finds it running.
async fn first_and_second<P: Probe>(
    region: &Region<P>,
    shards: usize,
) -> anyhow::Result<(Latencies, Latencies)> {
    // The region registers with its coordinator first; this ask waits for that, and its
    // shard is left out of the measurement.
    let warm = region.entity_ref("warm-up");
    warm.ask(TallyCmd::Read, ASK_TIMEOUT).await?;
    let exclude = BTreeSet::from([region.shard_of("warm-up").to_string()]);
    let ids = ids_in_distinct_shards(region, "f", shards, &exclude)?;
    let (mut first, mut second) = (Latencies::new(), Latencies::new());
    for id in ids {
        let r = region.entity_ref(&id);
        for samples in [&mut first, &mut second] {
            let t = Instant::now();
            r.ask(TallyCmd::Read, ASK_TIMEOUT).await?;
            samples.record(t.elapsed().as_nanos() as u64);
        }
    }
    Ok((first, second))
}
