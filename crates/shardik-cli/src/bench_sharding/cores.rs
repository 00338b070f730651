//! `shardik bench sharding cores`: how much of a node's cores one entity kind can use (issue 44).
//!
//! One node, one kind, `--entities` entities already active. Each command burns `--work-us` of
//! CPU in its handler (a spin on the clock, no sleep), and `--producers` tasks tell commands
//! round-robin as fast as the kind's queue takes them. The ceiling is the same work done by
//! plain tokio tasks, one per worker thread, on a runtime of the same shape, with no messages at
//! all: `ratio_to_plain` is how much of that ceiling sharding reaches.
//!
//! Every worker count from 1 to the machine's cores (or `--max-workers`) gets a runtime of its
//! own, a node of its own and one line of output. `--remote` asks the same entities from another
//! process instead ([`super::cores_remote`]). Each measurement counts the commands handled
//! (the tasks' iterations) during `--duration-s`, after a warm-up second in which the queues
//! fill and the workers settle.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;
use shardik_runtime::sharding::{Entity, EntityContext, EntityKind, EntityRef, TellError};

use super::common::{SendMode, report};
use super::cores_remote::remote_rate;
use super::cores_work::{burn, count_over};
use super::nodes::BenchNode;
use crate::bench_support::load_average;

/// The kind the benchmark runs.
const CORES_KIND: &str = "bench-cores";
/// Longest wait for every entity to handle its first command.
const ACTIVATION_LIMIT: Duration = Duration::from_secs(60);
/// Iterations of a plain task between two yields: long enough to cost nothing, short enough
/// that the runtime's own timers still run.
const PLAIN_YIELD_EVERY: u64 = 64;

/// Arguments of `shardik bench sharding cores`.
#[derive(Args, Debug)]
pub(super) struct CoresArgs {
    /// CPU time each command burns in its handler, in microseconds.
    #[arg(long = "work-us", default_value_t = 20)]
    work_us: u64,
    /// Entities the commands are spread over (round-robin).
    #[arg(long, default_value_t = 1000)]
    entities: u64,
    /// Producer tasks telling commands.
    #[arg(long, default_value_t = 4)]
    producers: usize,
    /// How a producer meets a full queue: `retry` (`try_tell`, yield, try again) or `wait`
    /// (`tell(..).await`).
    #[arg(long, value_enum, default_value = "retry")]
    send: SendMode,
    /// Seconds each measurement counts, after a warm-up second.
    #[arg(long = "duration-s", default_value_t = 3)]
    duration_s: u64,
    /// The lowest worker count measured.
    #[arg(long, default_value_t = 1)]
    min_workers: usize,
    /// The highest worker count measured (default: this machine's cores).
    #[arg(long)]
    max_workers: Option<usize>,
    /// Ask the entities from another process, through a proxy over loopback TCP, instead of
    /// telling them from this one.
    #[arg(long)]
    remote: bool,
    /// With `--remote`: asks kept outstanding, each asked again once answered.
    #[arg(long = "in-flight", default_value_t = 128)]
    in_flight: usize,
    /// Print one JSON object per worker count instead of a line of text.
    #[arg(long)]
    json: bool,
}

/// An entity whose every command burns the same CPU time.
struct Burner {
    work: Duration,
    handled: Arc<AtomicU64>,
}

impl Entity for Burner {
    type Command = u64;

    async fn handle(&mut self, _cmd: u64, _ctx: &mut EntityContext<Self>) {
        burn(self.work);
        self.handled.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs the benchmark: one line per worker count.
pub(super) fn run(a: CoresArgs) -> anyhow::Result<()> {
    if a.work_us == 0
        || a.entities == 0
        || a.producers == 0
        || a.duration_s == 0
        || a.in_flight == 0
    {
        bail!("--work-us, --entities, --producers, --in-flight and --duration-s must be positive");
    }
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let max = a.max_workers.unwrap_or(cores).max(1);
    let window = Duration::from_secs(a.duration_s);
    for workers in a.min_workers.max(1)..=max {
        let load = load_average();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        let (sharded, plain, failed) = rt.block_on(async {
            let (sharded, failed) = if a.remote {
                let r = remote_rate(workers, a.work_us, a.entities, a.in_flight, window).await?;
                (r.answered_per_s, Some(r.failed))
            } else {
                (sharded_rate(&a).await?, None)
            };
            let plain = plain_rate(&a, workers).await;
            anyhow::Ok((sharded, plain, failed))
        })?;
        rt.shutdown_timeout(Duration::from_secs(5));
        let ratio = sharded / plain;
        let mut value = json!({
            "benchmark": if a.remote { "sharding-cores-remote" } else { "sharding-cores" },
            "workers": workers,
            "cores": cores,
            "work_us": a.work_us,
            "entities": a.entities,
            "duration_s": a.duration_s,
            "sharded_per_s": sharded,
            "plain_per_s": plain,
            "ratio_to_plain": ratio,
            "load1_before": load,
        });
        let line = match failed {
            Some(failed) => {
                value["in_flight"] = json!(a.in_flight);
                value["asks_failed"] = json!(failed);
                format!(
                    "sharding cores, asked from another process: {workers} of {cores} workers on the host, {} µs a command, {} asks in flight: answered {sharded:.0}/s ({failed} failed), plain tasks {plain:.0}/s, ratio {ratio:.3} (load {load:.2})",
                    a.work_us, a.in_flight
                )
            }
            None => {
                value["producers"] = json!(a.producers);
                value["send"] = json!(a.send.name());
                format!(
                    "sharding cores: {workers} of {cores} workers, {} µs a command: sharded {sharded:.0}/s, plain tasks {plain:.0}/s, ratio {ratio:.3} (load {load:.2})",
                    a.work_us
                )
            }
        };
        report(a.json, value, line);
    }
    Ok(())
}

/// Commands handled per second by one kind on a node of this runtime.
async fn sharded_rate(a: &CoresArgs) -> anyhow::Result<f64> {
    let node = BenchNode::start(Vec::new(), &[]).await?;
    node.wait_up(1).await?;
    let handled = Arc::new(AtomicU64::new(0));
    let work = Duration::from_micros(a.work_us);
    let counter = Arc::clone(&handled);
    let kind = EntityKind::new(CORES_KIND, move |_| Burner {
        work,
        handled: Arc::clone(&counter),
    })
    .with_idle_timeout(None);
    let region = node.sharding.init(kind)?;
    let refs: Arc<[EntityRef<Burner>]> = (0..a.entities)
        .map(|i| region.entity_ref(&format!("e{i}")))
        .collect();
    // Every entity once, handled: created, and its shard allocated.
    for r in refs.iter() {
        r.tell(0).await?;
    }
    let deadline = Instant::now() + ACTIVATION_LIMIT;
    while handled.load(Ordering::Relaxed) < a.entities {
        if Instant::now() > deadline {
            bail!(
                "only {} of {} entities handled their first command within {ACTIVATION_LIMIT:?}",
                handled.load(Ordering::Relaxed),
                a.entities
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut producers = Vec::new();
    for p in 0..a.producers {
        let (refs, stop) = (Arc::clone(&refs), Arc::clone(&stop));
        // Each producer starts at another entity, so that they do not all queue for one.
        let first = p * refs.len() / a.producers;
        let send = a.send;
        producers.push(tokio::spawn(async move {
            let n = refs.len();
            let mut i = first;
            while !stop.load(Ordering::Relaxed) {
                let told = match send {
                    SendMode::Retry => refs[i % n].try_tell(1),
                    SendMode::Wait => refs[i % n].tell(1).await,
                };
                match told {
                    Ok(()) => i += 1,
                    Err(TellError::BufferFull) => tokio::task::yield_now().await,
                    Err(e) => return Err(anyhow::Error::from(e)),
                }
            }
            anyhow::Ok(())
        }));
    }
    let rate = count_over(&handled, Duration::from_secs(a.duration_s)).await;
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        p.await??;
    }
    node.crash().await;
    node.stopped(Duration::from_secs(10)).await?;
    Ok(rate)
}

/// Iterations per second of the same work on plain tasks, one per worker thread.
async fn plain_rate(a: &CoresArgs, workers: usize) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let work = Duration::from_micros(a.work_us);
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (done, stop) = (Arc::clone(&done), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    burn(work);
                    done.fetch_add(1, Ordering::Relaxed);
                    n += 1;
                    if n.is_multiple_of(PLAIN_YIELD_EVERY) {
                        tokio::task::yield_now().await;
                    }
                }
            })
        })
        .collect();
    let rate = count_over(&done, Duration::from_secs(a.duration_s)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    rate
}
