//! `shardik bench coordinator`: what the shard coordinator costs as the cluster grows: the
//! time of one allocation decision, of one rebalance round, of completing a hand-off and of
//! re-homing a lost region's shards, and the heap bytes of the coordinator's state, at every
//! combination of the region and shard counts given (by default 10, 100 and 1 000 regions
//! and 1 000, 10 000 and 100 000 shards), for the default least-shard strategy and the older
//! threshold one.
//!
//! The coordinator is the I/O-free core the node runs (`shardik_core::sharding::Coordinator`),
//! driven in this process with no network ([`cluster`]); [`measure`] says what each phase
//! does. Heap bytes come from the allocator's own count ([`heap`]). One line of text per
//! measurement, or one JSON object per line with `--json`.

mod cluster;
mod heap;
mod measure;

use std::process::ExitCode;

use clap::Args;

use measure::{Row, Size, StrategyChoice};

/// Arguments of `shardik bench coordinator`.
#[derive(Args, Debug)]
pub struct CoordinatorArgs {
    /// Region counts measured (each at least 2: one region starts empty).
    #[arg(long, value_delimiter = ',', default_values_t = [10, 100, 1_000])]
    regions: Vec<usize>,
    /// Shard counts measured.
    #[arg(long, value_delimiter = ',', default_values_t = [1_000, 10_000, 100_000])]
    shards: Vec<usize>,
    /// New shards allocated one at a time (each timed) per measurement.
    #[arg(long, default_value_t = 200)]
    allocations: usize,
    /// Most rebalance rounds timed per measurement.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Only this strategy (`least-shard` or `threshold`); both by default.
    #[arg(long, value_parser = ["least-shard", "threshold"])]
    strategy: Option<String>,
    /// Print one JSON object per measurement instead of a line of text.
    #[arg(long)]
    json: bool,
}

/// Runs the command.
pub fn run(args: CoordinatorArgs) -> anyhow::Result<ExitCode> {
    if let Some(r) = args.regions.iter().find(|&&r| r < 2) {
        anyhow::bail!("--regions: {r} is too few; every count must be at least 2");
    }
    let strategies: Vec<StrategyChoice> = [StrategyChoice::LeastShard, StrategyChoice::Threshold]
        .into_iter()
        .filter(|s| args.strategy.as_deref().is_none_or(|only| only == s.name()))
        .collect();
    let mut all_consistent = true;
    for &strategy in &strategies {
        for &regions in &args.regions {
            for &shards in &args.shards {
                let size = Size {
                    regions,
                    shards,
                    allocations: args.allocations,
                    rounds: args.rounds,
                };
                let row = measure::measure(strategy, size);
                all_consistent &= row.consistent;
                print(&row, args.json)?;
            }
        }
    }
    if !all_consistent {
        eprintln!("a measurement ended with a shard without a home or an inconsistent table");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn print(row: &Row, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(row)?);
        return Ok(());
    }
    println!(
        "coordinator {:<11} R={:<5} S={:<7} rebuild {:>9.1} ms  state {:>6.1} MB ({:>5.0} B/shard)  \
         allocate {:>8.1} us (strategy {:>7.1})  round {:>8.1} us x{:<2} ({} moved, hand-off {:>7.1} us/shard)  \
         re-home {} shards {:>9.1} ms ({:>7.1} us/shard){}",
        row.strategy,
        row.regions,
        row.shards,
        row.rebuild_ms,
        row.state_bytes as f64 / 1e6,
        row.bytes_per_shard,
        row.allocate_us_median,
        row.strategy_allocate_us,
        row.round_us_mean,
        row.rounds,
        row.shards_moved,
        row.handoff_us_per_shard,
        row.lost_region_shards,
        row.rehome_ms,
        row.rehome_us_per_shard,
        if row.consistent { "" } else { "  INCONSISTENT" },
    );
    Ok(())
}
