//! `shardik bench reliable`: reliable delivery against plain tells to the same entities, on
//! one node.
//!
//! Two pairs of paths, each pair measured in alternated rounds in the same run, so that the
//! ratio compares like with like:
//!
//! * **durable**: event-sourced counters in a SQLite store (one event per increment); plain
//!   tells, against a reliable producer whose queue is in the same store, each increment
//!   processed once and its mark written with its event;
//! * **memory**: in-memory counters; plain tells, against a reliable producer with its queue
//!   in memory (at-least-once to in-memory entities).
//!
//! A path's rate is increments over the time until every one is processed: counted by the
//! counters for tells, confirmed to the producer for the reliable path. It also measures what
//! holding unconfirmed increments costs: resident memory per increment that a producer holds
//! while no node hosts its entities' shards (the producer's copy, its ask, and the proxy's
//! buffer of it), measured before the rounds, while the allocator has no freed memory to hand
//! out again.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use serde::{Deserialize, Serialize};
use serde_json::json;
use shardik_persistence::open_store;
use shardik_runtime::delivery::{ProducerOptions, ProducerSettings, ReliableProducer};
use shardik_runtime::persistence::{
    Effect, EventSourcedContext, EventSourcedEntity, EventSourcedKind, Persistence,
};
use shardik_runtime::sharding::{
    EntityContext, EntityKind, EntityRegion, EntityTypeKey, ReplyTo, SyncEntity,
};

use crate::bench_sharding::BenchNode;
use crate::bench_support::{load_average, runtime, set_runtime_kind};

/// Arguments of `shardik bench reliable`.
#[derive(Args, Debug)]
pub struct ReliableArgs {
    /// Increments per measured round. Long enough that plain in-memory tells (two million a
    /// second on two cores) run for a tenth of a second: in a shorter round, reading the
    /// counters back is a fixed cost that hides what a reliable increment costs more.
    #[arg(long, default_value_t = 200_000)]
    messages: u64,
    /// Counters they are spread over.
    #[arg(long, default_value_t = 100)]
    entities: u64,
    /// Rounds of each path (alternated); each path's median round is reported.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Senders handing increments over at once.
    #[arg(long, default_value_t = 32)]
    senders: u64,
    /// Which pairs of paths to measure: both, or one of them (the other's fields are null).
    #[arg(long, value_enum, default_value_t = Paths::All)]
    paths: Paths,
    /// Increments held unconfirmed for the memory measurement.
    #[arg(long, default_value_t = 50_000)]
    held: u64,
    /// Print one JSON object instead of lines of text.
    #[arg(long)]
    json: bool,
}

/// The pairs of paths `shardik bench reliable` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Paths {
    /// Durable and in-memory.
    All,
    /// Only event-sourced counters in SQLite.
    Durable,
    /// Only in-memory counters, with an in-memory queue.
    Memory,
}

/// What the benchmark's counters are sent.
#[derive(Clone, Debug, Serialize, Deserialize)]
enum Cmd {
    Increment,
    Get(ReplyTo<u64>),
}

#[derive(Debug, Serialize, Deserialize)]
struct Incremented;

/// An event-sourced counter: one event per increment.
#[derive(Default)]
struct DurableCounter(u64);

impl EventSourcedEntity for DurableCounter {
    type Command = Cmd;
    type Event = Incremented;
    fn handle_command(&self, cmd: Cmd, _: &mut EventSourcedContext<Self>) -> Effect<Self> {
        match cmd {
            Cmd::Increment => Self::persist(Incremented),
            Cmd::Get(reply_to) => Effect::reply(reply_to, self.0),
        }
    }
    fn apply_event(&mut self, _: &Incremented) {
        self.0 += 1;
    }
}

/// An in-memory counter.
#[derive(Default)]
struct MemoryCounter(u64);

impl SyncEntity for MemoryCounter {
    type Command = Cmd;
    fn handle(&mut self, cmd: Cmd, _: &mut EntityContext<Self>) {
        match cmd {
            Cmd::Increment => self.0 += 1,
            Cmd::Get(reply_to) => reply_to.send(self.0),
        }
    }
}

const ASK: Duration = Duration::from_secs(30);
/// Longest a round may take before the run fails.
const ROUND_LIMIT: Duration = Duration::from_secs(600);

/// Runs `shardik bench reliable`.
pub fn run(a: ReliableArgs) -> anyhow::Result<ExitCode> {
    if a.messages == 0 || a.entities == 0 || a.rounds == 0 || a.senders == 0 {
        bail!("--messages, --entities, --rounds and --senders must be positive");
    }
    set_runtime_kind("multi");
    let temp = tempfile::Builder::new()
        .prefix("shardik-bench-reliable-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let url = format!("sqlite:{}", temp.path().join("bench.db").display());
    let load = load_average();
    let r = runtime()?.block_on(measure(&a, &url))?;
    let (durable, memory) = (r.durable.as_ref(), r.memory.as_ref());
    let value = json!({
        "bench": "reliable",
        "messages": a.messages,
        "entities": a.entities,
        "senders": a.senders,
        "rounds": a.rounds,
        "store": "sqlite",
        "durable_tell_per_s": durable.map(|p| p.tell),
        "durable_reliable_per_s": durable.map(|p| p.reliable),
        "durable_ratio_to_tell": durable.map(Pair::ratio),
        "memory_tell_per_s": memory.map(|p| p.tell),
        "memory_reliable_per_s": memory.map(|p| p.reliable),
        "memory_ratio_to_tell": memory.map(Pair::ratio),
        "held_unconfirmed": a.held,
        "bytes_per_unconfirmed": r.bytes_per_unconfirmed,
        "load_average": load,
    });
    if a.json {
        println!("{value}");
    } else {
        println!(
            "reliable delivery, {} increments over {} counters, {} senders, median of {} rounds (load {load:.2}):",
            a.messages, a.entities, a.senders, a.rounds,
        );
        for (name, pair) in [("durable (SQLite)", durable), ("memory", memory)] {
            if let Some(p) = pair {
                println!(
                    "{:<17} tell {:.0}/s, reliable {:.0}/s, ratio {:.2}",
                    format!("{name}:"),
                    p.tell,
                    p.reliable,
                    p.ratio()
                );
            }
        }
        println!(
            "held unconfirmed: {:.0} bytes per increment ({} held)",
            r.bytes_per_unconfirmed, a.held,
        );
    }
    Ok(ExitCode::SUCCESS)
}

struct Rates {
    durable: Option<Pair>,
    memory: Option<Pair>,
    bytes_per_unconfirmed: f64,
}

/// Median rates of a pair of paths to the same kind of entity.
struct Pair {
    tell: f64,
    reliable: f64,
}

impl Pair {
    fn ratio(&self) -> f64 {
        self.reliable / self.tell
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn measure(a: &ReliableArgs, url: &str) -> anyhow::Result<Rates> {
    let store = open_store(url).await.context("cannot open the store")?;
    let persistence = Persistence::new(Arc::clone(&store));
    // The memory measurement's kind is hosted only by nodes with a role this one lacks: its
    // shards never get a home, so nothing is ever confirmed.
    let node = BenchNode::start(Vec::new(), &[]).await?;
    node.wait_up(1).await?;
    let sharding = &node.sharding;
    let durable = sharding.init(
        EventSourcedKind::new(EntityTypeKey::new("bench-durable"), &persistence, |_| {
            DurableCounter::default()
        })
        .into_kind(),
    )?;
    let durable_reliable = sharding.init(
        EventSourcedKind::new(
            EntityTypeKey::new("bench-durable-reliable"),
            &persistence,
            |_| DurableCounter::default(),
        )
        .into_kind()
        .reliable(),
    )?;
    let memory = sharding.init(EntityKind::new("bench-memory", |_| {
        MemoryCounter::default()
    }))?;
    let memory_reliable = sharding
        .init(EntityKind::new("bench-memory-reliable", |_| MemoryCounter::default()).reliable())?;
    let settings = ProducerSettings {
        max_unconfirmed: 10_000,
        ..ProducerSettings::default()
    };
    let durable_producer = ReliableProducer::start(
        &durable_reliable,
        ProducerOptions::new("bench-durable")
            .with_settings(settings.clone())
            .with_durable_queue(Arc::clone(&store)),
    )
    .await?;
    let memory_producer = ReliableProducer::start(
        &memory_reliable,
        ProducerOptions::new("bench-memory").with_settings(settings),
    )
    .await?;

    // First, while the allocator has no freed memory to reuse: after the rounds it has plenty,
    // and holding costs no new resident memory.
    let bytes_per_unconfirmed = held_memory(a.held, sharding).await?;
    let (mut dt, mut dr, mut mt, mut mr) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let with_durable = a.paths != Paths::Memory;
    let with_memory = a.paths != Paths::Durable;
    for round in 0..a.rounds {
        if with_durable {
            dt.push(tells(a, &durable, round).await?);
            dr.push(reliable(a, &durable_producer, round).await?);
        }
        if with_memory {
            mt.push(tells(a, &memory, round).await?);
            mr.push(reliable(a, &memory_producer, round).await?);
        }
    }
    let pair = |tell: Vec<f64>, reliable: Vec<f64>| {
        (!tell.is_empty()).then(|| Pair {
            tell: median(tell),
            reliable: median(reliable),
        })
    };
    Ok(Rates {
        durable: pair(dt, dr),
        memory: pair(mt, mr),
        bytes_per_unconfirmed,
    })
}

/// The counter of increment `i` in round `round` (fresh counters each round, so every round
/// creates and recovers the same number of entities).
fn counter(a: &ReliableArgs, round: usize, i: u64) -> String {
    format!("r{round}-c{}", i % a.entities)
}

/// Hands the round's increments to `send`, one counter id at a time, from `a.senders` tasks
/// at once (each its share, in order), and waits until all are handed over.
async fn send_from_all<F, Fut>(a: &ReliableArgs, round: usize, send: F) -> anyhow::Result<()>
where
    F: Fn(String) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let mut senders = tokio::task::JoinSet::new();
    for s in 0..a.senders {
        let ids: Vec<String> = (s..a.messages)
            .step_by(a.senders as usize)
            .map(|i| counter(a, round, i))
            .collect();
        let send = send.clone();
        senders.spawn(async move {
            for id in ids {
                send(id).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(sent) = senders.join_next().await {
        sent??;
    }
    Ok(())
}

/// Plain tells: increments per second until every counter has counted its own.
async fn tells<E>(a: &ReliableArgs, region: &EntityRegion<E>, round: usize) -> anyhow::Result<f64>
where
    E: shardik_runtime::sharding::Entity<Command = Cmd>,
{
    let started = Instant::now();
    let sender = region.clone();
    send_from_all(a, round, move |id| {
        let region = sender.clone();
        async move { Ok(region.entity_ref(&id).tell(Cmd::Increment).await?) }
    })
    .await?;
    // Each sender's commands are handled in order: an entity that answers a read after them
    // has counted them. Read until every counter holds its share.
    let mut counted = 0;
    while counted < a.messages {
        counted = 0;
        for e in 0..a.entities.min(a.messages) {
            let id = counter(a, round, e);
            counted += region.entity_ref(&id).ask(Cmd::Get, ASK).await?;
        }
        if started.elapsed() > ROUND_LIMIT {
            bail!("tells: {counted} of {} counted in time", a.messages);
        }
    }
    Ok(a.messages as f64 / started.elapsed().as_secs_f64())
}

/// The reliable path: increments per second until every one is confirmed.
async fn reliable(
    a: &ReliableArgs,
    producer: &ReliableProducer<Cmd>,
    round: usize,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let sender = producer.clone();
    send_from_all(a, round, move |id| {
        let producer = sender.clone();
        async move { Ok(producer.send(&id, Cmd::Increment).await.map(|_| ())?) }
    })
    .await?;
    if !producer.all_confirmed(ROUND_LIMIT).await {
        bail!(
            "reliable: {} unconfirmed after {ROUND_LIMIT:?}",
            producer.unconfirmed()
        );
    }
    Ok(a.messages as f64 / started.elapsed().as_secs_f64())
}

/// Resident bytes per increment a producer holds unconfirmed while no node hosts its
/// entities' shards.
async fn held_memory(
    held: u64,
    sharding: &shardik_runtime::sharding::Sharding,
) -> anyhow::Result<f64> {
    let nowhere = sharding.init(
        EntityKind::new("bench-held", |_| MemoryCounter::default())
            .with_role("nobody-has-this-role")
            .reliable(),
    )?;
    let producer = ReliableProducer::start(
        &nowhere,
        ProducerOptions::new("bench-held").with_settings(ProducerSettings {
            max_unconfirmed: held as usize,
            window: held,
            ..ProducerSettings::default()
        }),
    )
    .await?;
    settle().await;
    let before = rss_bytes()?;
    for i in 0..held {
        producer
            .send(&format!("h{}", i % 1_000), Cmd::Increment)
            .await?;
    }
    settle().await;
    let after = rss_bytes()?;
    if producer.unconfirmed() as u64 != held {
        bail!("{} of {held} held", producer.unconfirmed());
    }
    // No resends of what it holds during the rounds.
    producer.stop().await;
    Ok(after.saturating_sub(before) as f64 / held as f64)
}

/// Lets finished work settle before reading RSS.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// This process's resident memory in bytes.
fn rss_bytes() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status").context("no /proc/self/status")?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS in /proc/self/status")?;
    Ok(kb * 1024)
}
