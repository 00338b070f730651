//! `shardik bench persistence`: what durable entities cost on a real store, measured in one run
//! against a plain-insert baseline on the same store.
//!
//! 1. Baseline: `Store::append` of one event per write, each writer on its own persistence
//!    id, 1, 16 and 256 writers in a closed loop (append, await, append again), no sharding.
//! 2. Through sharding: one in-process node with an event-sourced counter kind on
//!    [`Persistence`] over the same store; as many entities as writers, each asked `Increment`
//!    in a closed loop, so the entities persist concurrently and the node's journal writer
//!    batches them. The ratio to the baseline at the same concurrency is the figure issue 10
//!    sets an aim for (at least half).
//! 3. Recovery: an entity with 10 000 events, recovered without and with snapshots: the time
//!    from the first command of a new incarnation (after a passivation) to its answer, median
//!    of a few runs.
//!
//! The restart of many remembered entities is `shardik bench remembered`
//! ([`crate::bench_remembered`]).
//!
//! The two throughput cases of one concurrency run back to back, so that the store holds about
//! as many rows for both (one store serves the whole run). Every figure comes with the
//! one-minute load average it was measured under.

mod counter;
mod journal_metrics;
mod plan;
mod recovery;
mod throughput;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use clap::Args;
use serde_json::{Value, json};
use shardik_persistence::open_store;
use shardik_runtime::metrics::Metrics;
use shardik_runtime::persistence::Persistence;

use crate::bench_sharding::BenchNode;
use crate::bench_support::{load_average, runtime};
use plan::Plan;
use recovery::Recovery;
use throughput::{Level, Run};

/// Arguments of `shardik bench persistence`.
#[derive(Args, Debug)]
pub struct PersistenceArgs {
    /// The store measured: `sqlite:PATH`, `postgres://user@host:port/db` or `memory:`. Default:
    /// a new SQLite file in a temporary directory, removed afterwards. Give a store of its own
    /// (an empty file or database): the rows of earlier runs would slow this one.
    #[arg(long)]
    store: Option<String>,
    /// How long each throughput case runs (e.g. `5s`, `500ms`).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Writers (baseline) and entities (sharding) in flight, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    concurrency: Vec<usize>,
    /// Events of the entity whose recovery is measured.
    #[arg(long, default_value_t = 10_000)]
    recovery_events: u64,
    /// Snapshot interval (events) of the recovery with snapshots.
    #[arg(long, default_value_t = 100)]
    snapshot_every: u64,
    /// Recoveries measured per case (the median is reported).
    #[arg(long, default_value_t = 5)]
    recovery_runs: usize,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// Everything one run measured.
struct Report {
    levels: Vec<Level>,
    recoveries: Vec<Recovery>,
    /// Bytes of the counter's stored event (the baseline writes the same bytes).
    event_bytes: usize,
}

/// Runs `shardik bench persistence`.
pub fn run(a: PersistenceArgs) -> anyhow::Result<ExitCode> {
    let plan = Plan {
        duration: a.duration,
        concurrency: a.concurrency,
        recovery_events: a.recovery_events,
        snapshot_every: a.snapshot_every,
        recovery_runs: a.recovery_runs,
    };
    plan.check()?;
    // Held until the end: the default store's file lives in it.
    let temp = tempfile::Builder::new()
        .prefix("shardik-bench-persistence-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let url = match a.store {
        Some(url) => url,
        None => format!("sqlite:{}", temp.path().join("bench.db").display()),
    };
    let load = load_average();
    let report = runtime()?.block_on(measure(&url, &plan))?;
    if a.json {
        println!("{}", to_json(&url, &plan, load, &report));
    } else {
        print_table(&url, &plan, load, &report);
    }
    Ok(ExitCode::SUCCESS)
}

/// Measures every case of `plan` on the store `url`, which the whole run shares.
async fn measure(url: &str, plan: &Plan) -> anyhow::Result<Report> {
    // Installed before the node's own attempt, so that the journal writer's batch counters can
    // be read; `None` when a recorder is already installed (as in tests).
    let metrics = Metrics::install().ok();
    let store = open_store(url)
        .await
        .with_context(|| format!("cannot open the store {}", redact(url)))?;
    let persistence = Persistence::new(Arc::clone(&store));
    let node = BenchNode::start(Vec::new(), &[]).await?;
    node.wait_up(1).await?;
    // Entity ids carry a tag of this run, so a store used before gets fresh journals.
    let tag = run_tag();
    let region = node.sharding.init(throughput::kind(&persistence))?;
    let event = throughput::stored_event(&region, store.as_ref(), &tag).await?;
    let mut levels = Vec::with_capacity(plan.concurrency.len());
    for &writers in &plan.concurrency {
        levels.push(
            throughput::level(
                &store,
                &region,
                metrics.as_ref(),
                &tag,
                writers,
                &event,
                plan.duration,
            )
            .await?,
        );
    }
    let recoveries = recovery::measure(&node.sharding, &persistence, &tag, plan).await?;
    store
        .close()
        .await
        .context("closing the store after the run")?;
    Ok(Report {
        levels,
        recoveries,
        event_bytes: event.len(),
    })
}

/// A tag unique to this run (hex nanoseconds since the epoch).
pub(crate) fn run_tag() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:x}")
}

/// The store URL without a password, for printing.
pub(crate) fn redact(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((userinfo, server)) => {
                let user = userinfo.split(':').next().unwrap_or_default();
                format!("{scheme}://{user}@{server}")
            }
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// Output.

fn run_json(r: &Run) -> Value {
    json!({
        "ops": r.ops,
        "elapsed_s": r.elapsed.as_secs_f64(),
        "per_s": r.per_second(),
        "latency": r.latencies.summary(),
    })
}

fn to_json(url: &str, plan: &Plan, load: f64, report: &Report) -> Value {
    let levels: Vec<Value> = report
        .levels
        .iter()
        .map(|l| {
            json!({
                "concurrency": l.writers,
                "load1": l.load,
                "baseline_append": run_json(&l.baseline),
                "sharded_persist": run_json(&l.sharded),
                "journal_writes_per_batch": l.writes_per_batch,
                "ratio_to_baseline": l.ratio(),
            })
        })
        .collect();
    let recoveries: Vec<Value> = report
        .recoveries
        .iter()
        .map(|r| {
            json!({
                "case": r.case,
                "events": r.events,
                "snapshot_seq": r.snapshot_seq,
                "events_replayed": r.replayed(),
                "runs_ms": r.runs.iter().map(|d| d.as_secs_f64() * 1e3).collect::<Vec<_>>(),
                "median_ms": r.median().as_secs_f64() * 1e3,
                "load1": r.load,
            })
        })
        .collect();
    json!({
        "benchmark": "persistence",
        "store": redact(url),
        "duration_s": plan.duration.as_secs_f64(),
        "event_bytes": report.event_bytes,
        "load1_before": load,
        "throughput": levels,
        "recovery": recoveries,
    })
}

fn print_table(url: &str, plan: &Plan, load: f64, report: &Report) {
    println!(
        "shardik bench persistence: store {}, {:?} per case, event {} bytes, load {load:.2} at start",
        redact(url),
        plan.duration,
        report.event_bytes
    );
    println!(
        "\n{:>7} | {:>12} {:>9} {:>9} | {:>12} {:>9} {:>9} {:>11} | {:>6} {:>5}",
        "writers",
        "append/s",
        "p50 µs",
        "p99 µs",
        "persist/s",
        "p50 µs",
        "p99 µs",
        "writes/batch",
        "ratio",
        "load"
    );
    for l in &report.levels {
        let per_batch = l
            .writes_per_batch
            .map_or_else(|| "-".to_string(), |w| format!("{w:.1}"));
        println!(
            "{:>7} | {:>12.0} {:>9.0} {:>9.0} | {:>12.0} {:>9.0} {:>9.0} {:>11} | {:>6.2} {:>5.2}",
            l.writers,
            l.baseline.per_second(),
            l.baseline.latencies.quantile_us(0.5),
            l.baseline.latencies.quantile_us(0.99),
            l.sharded.per_second(),
            l.sharded.latencies.quantile_us(0.5),
            l.sharded.latencies.quantile_us(0.99),
            per_batch,
            l.ratio(),
            l.load,
        );
    }
    println!();
    for r in &report.recoveries {
        let runs: Vec<String> = r
            .runs
            .iter()
            .map(|d| format!("{:.3}", d.as_secs_f64() * 1e3))
            .collect();
        println!(
            "recovery, {}: {} events, {} replayed: median {:.3} ms (runs: {} ms; load {:.2})",
            r.case,
            r.events,
            r.replayed(),
            r.median().as_secs_f64() * 1e3,
            runs.join(", "),
            r.load,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole benchmark on a memory store, briefly: every case runs and its figures are
    /// sane (the benchmark itself checks that every acknowledged write is in the store and
    /// that each recovery rebuilt every event).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_case_runs_on_a_memory_store_with_sane_numbers() {
        let plan = Plan {
            duration: Duration::from_millis(200),
            concurrency: vec![1, 8],
            recovery_events: 250,
            snapshot_every: 100,
            recovery_runs: 2,
        };
        plan.check().unwrap();
        let report = measure("memory:", &plan).await.unwrap();
        assert_eq!(report.levels.len(), 2);
        for l in &report.levels {
            for (what, run) in [("baseline", &l.baseline), ("sharded", &l.sharded)] {
                assert!(run.ops > 0, "{what} at {}: no operations", l.writers);
                assert!(run.per_second() > 0.0, "{what} at {}", l.writers);
                assert_eq!(run.latencies.len(), run.ops, "one sample per operation");
                let (p50, p99) = (
                    run.latencies.quantile_us(0.5),
                    run.latencies.quantile_us(0.99),
                );
                assert!(
                    p50 > 0.0 && p50 <= p99,
                    "{what}: p50 {p50} µs, p99 {p99} µs"
                );
            }
            assert!(l.ratio() > 0.0 && l.ratio().is_finite());
        }
        assert_eq!(report.recoveries.len(), 2);
        let plain = &report.recoveries[0];
        assert_eq!((plain.snapshot_seq, plain.replayed()), (None, 250));
        let snap = &report.recoveries[1];
        assert_eq!((snap.snapshot_seq, snap.replayed()), (Some(200), 50));
        for r in &report.recoveries {
            assert_eq!(r.runs.len(), 2);
            assert!(r.median() > Duration::ZERO);
        }
        let v = to_json("memory:", &plan, 0.0, &report);
        assert_eq!(v["throughput"][1]["concurrency"], 8);
        assert!(
            v["throughput"][0]["baseline_append"]["per_s"]
                .as_f64()
                .unwrap()
                > 0.0
        );
    }

    #[test]
    fn passwords_are_not_printed() {
        assert_eq!(
            redact("postgres://bob:secret@db:5432/x"),
            "postgres://bob@db:5432/x"
        );
        assert_eq!(redact("sqlite:/tmp/a.db"), "sqlite:/tmp/a.db");
    }

    #[test]
    fn bad_plans_are_refused() {
        let good = Plan {
            duration: Duration::from_secs(1),
            concurrency: vec![1],
            recovery_events: 1,
            snapshot_every: 1,
            recovery_runs: 1,
        };
        assert!(good.check().is_ok());
        let zero_writers = Plan {
            concurrency: vec![1, 0],
            ..good.clone()
        };
        assert!(zero_writers.check().is_err());
        let no_time = Plan {
            duration: Duration::ZERO,
            ..good
        };
        assert!(no_time.check().is_err());
    }
}
