//! `shardik bench remembered`: a restart of the whole cluster that brings back remembered
//! entities (Akka's `remember-entities`), measured on a real store.
//!
//! 1. Three nodes in this process on loopback ports, each with its own handle on the store (as
//!    three node processes would have), run a kind that remembers its entities: a `u64`
//!    counter, not event sourced. `cluster.min-nr-of-members` is 3, so that shards are
//!    allocated over all three nodes at once instead of first to the node that is Up first.
//! 2. Each of `--entities` entities is told once (round robin over the nodes, so two in three
//!    tells cross loopback), which creates it and records it as started; the benchmark waits
//!    until the store holds every one of them.
//! 3. The three nodes are stopped at once and abruptly (no leave, no hand-off: the whole
//!    cluster crashes), and their store handles closed.
//! 4. Three new nodes (new ports, new incarnations) open the same store, start, and register
//!    the kind, as an application does at start. Nobody sends them anything. Timed from the
//!    moment the first new node starts opening its store: the cluster Up (each node sees three
//!    members Up), the first remembered entity running again, and all of them running again
//!    (the sum of the live entities of the three regions, [`Sharding::region_stats`], sampled
//!    every [`SAMPLE`]).
//! 5. The entities running are checked to be exactly those remembered (none missing, none
//!    twice), then the new cluster is stopped too.
//!
//! [`Sharding::region_stats`]: shardik_runtime::sharding::Sharding::region_stats

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use serde_json::{Value, json};
use shardik_core::membership::Address;
use shardik_persistence::{Store, open_store};
use shardik_runtime::config::{EntityRecoveryStrategySetting, Settings};
use shardik_runtime::sharding::{Entity, EntityContext, EntityKind, EntityRecovery, EntityRegion};

use crate::bench_persistence::{redact, run_tag};
use crate::bench_sharding::BenchNode;
use crate::bench_support::{free_port, load_average, runtime};

/// Nodes of each cluster.
const NODES: usize = 3;
/// How often a phase's progress is sampled: the resolution of the times reported.
const SAMPLE: Duration = Duration::from_millis(10);
/// The longest any phase may take before the run fails (far above anything worth reporting).
const PHASE_LIMIT: Duration = Duration::from_secs(600);
/// Timeout of the regions' answers to the benchmark's questions.
const QUERY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a crashed node may take to end its task.
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// Arguments of `shardik bench remembered`.
#[derive(Args, Debug)]
pub struct RememberedArgs {
    /// The store: `sqlite:PATH`, `postgres://user@host:port/db` or `memory:`. Default: a new
    /// SQLite file in a temporary directory, removed afterwards. A store used before works
    /// (the kind's name is new each run), but its rows make this run's queries slower.
    #[arg(long)]
    store: Option<String>,
    /// How many entities are started, remembered and brought back.
    #[arg(long, default_value_t = 100_000)]
    entities: u64,
    /// How the new nodes start a shard's remembered entities: `all` at once, or `constant`
    /// (a few per step, as `cluster.sharding.entity-recovery-constant-rate-strategy` of the
    /// configuration says).
    #[arg(long, value_enum, default_value_t = RecoveryArg::All)]
    recovery: RecoveryArg,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// `--recovery`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum RecoveryArg {
    All,
    Constant,
}

/// What one run measures.
#[derive(Clone, Copy, Debug)]
struct Plan {
    entities: u64,
    recovery: EntityRecovery,
}

/// Everything one run measured.
#[derive(Debug)]
struct Report {
    entities: u64,
    /// Shards holding remembered entities.
    shards: usize,
    /// From the first tell to every entity recorded in the store.
    fill: Duration,
    /// From asking the three nodes to stop to their tasks having ended.
    stop: Duration,
    load_before_restart: f64,
    restart: Restart,
    load_after: f64,
}

/// The restart's times, each from the moment the first new node began opening its store.
#[derive(Debug)]
struct Restart {
    /// Every new node sees the three members Up.
    up: Duration,
    /// The first remembered entity runs again.
    first: Duration,
    /// Every remembered entity runs again.
    all: Duration,
    /// Entities running on each new node at the end.
    per_node: Vec<usize>,
}

/// Runs `shardik bench remembered`.
pub fn run(a: RememberedArgs) -> anyhow::Result<ExitCode> {
    if a.entities == 0 {
        bail!("--entities must be positive");
    }
    let settings = Settings::load(None).context("invalid configuration")?;
    let plan = Plan {
        entities: a.entities,
        recovery: recovery_of(&settings, a.recovery),
    };
    // Held until the end: the default store's file lives in it.
    let temp = tempfile::Builder::new()
        .prefix("shardik-bench-remembered-")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let url = match a.store {
        Some(url) => url,
        None => format!("sqlite:{}", temp.path().join("bench.db").display()),
    };
    let report = runtime()?.block_on(measure(&url, plan))?;
    if a.json {
        println!("{}", to_json(&url, &plan, &report));
    } else {
        print_table(&url, &plan, &report);
    }
    Ok(ExitCode::SUCCESS)
}

/// The recovery strategy `arg` names, with the constant rate of the configuration.
fn recovery_of(settings: &Settings, arg: RecoveryArg) -> EntityRecovery {
    let mut sharding = settings.cluster.sharding.clone();
    sharding.entity_recovery_strategy = match arg {
        RecoveryArg::All => EntityRecoveryStrategySetting::All,
        RecoveryArg::Constant => EntityRecoveryStrategySetting::Constant,
    };
    sharding.entity_recovery()
}

/// Fills, crashes and restarts a cluster on the store `url`.
async fn measure(url: &str, plan: Plan) -> anyhow::Result<Report> {
    let stores = Stores::new(url).await?;
    // A kind of its own per run, so that a store used before brings back none of its entities.
    let kind = format!("bench-remembered-{}", run_tag());

    let first = Cluster::start(&stores, &kind, plan.recovery).await?;
    first.wait_up().await?;
    let fill_started = Instant::now();
    first.tell_all(plan.entities).await?;
    let shards = wait_recorded(first.stores[0].as_ref(), &kind, plan.entities).await?;
    let fill = fill_started.elapsed();

    let stop_started = Instant::now();
    first.crash().await?;
    let stop = stop_started.elapsed();

    let load_before_restart = load_average();
    let started = Instant::now();
    let second = Cluster::start(&stores, &kind, plan.recovery).await?;
    let restart = second.wait_restored(started, plan.entities).await;
    // Checked and stopped whatever the outcome, so that a failed run leaves no node behind.
    let checked = match &restart {
        Ok(_) => second.check_ids(plan.entities).await,
        Err(_) => Ok(()),
    };
    let load_after = load_average();
    second.crash().await?;
    let restart = restart?;
    checked?;
    Ok(Report {
        entities: plan.entities,
        shards,
        fill,
        stop,
        load_before_restart,
        restart,
        load_after,
    })
}

/// The id of the benchmark's `i`-th entity.
fn entity_id(i: u64) -> String {
    format!("e{i}")
}

/// Waits until the store records all `n` entities of `kind` as running; returns how many
/// shards hold them.
async fn wait_recorded(store: &dyn Store, kind: &str, n: u64) -> anyhow::Result<usize> {
    let deadline = Instant::now() + PHASE_LIMIT;
    loop {
        let shards = store
            .remembered_shards(kind)
            .await
            .context("reading the remembered shards")?;
        let mut recorded = 0u64;
        for shard in &shards {
            recorded += store
                .remembered_entities(kind, shard)
                .await
                .context("reading remembered entities")?
                .len() as u64;
        }
        if recorded == n {
            return Ok(shards.len());
        }
        if recorded > n {
            bail!("the store remembers {recorded} entities of {kind}, {n} were started");
        }
        if Instant::now() > deadline {
            bail!("only {recorded} of {n} entities recorded after {PHASE_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The store and the nodes.

/// Where each node's store handle comes from.
enum Stores {
    /// A handle of its own on the URL per node, as node processes would have.
    PerNode(String),
    /// `memory:`, one store that every node shares: a second memory store would be empty.
    Shared(Arc<dyn Store>),
}

impl Stores {
    async fn new(url: &str) -> anyhow::Result<Stores> {
        if url == "memory:" {
            Ok(Stores::Shared(open(url).await?))
        } else {
            // Opened once here, so that a bad URL fails before any node starts.
            open(url).await?.close().await?;
            Ok(Stores::PerNode(url.to_string()))
        }
    }

    async fn open(&self) -> anyhow::Result<Arc<dyn Store>> {
        match self {
            Stores::PerNode(url) => open(url).await,
            Stores::Shared(store) => Ok(Arc::clone(store)),
        }
    }
}

async fn open(url: &str) -> anyhow::Result<Arc<dyn Store>> {
    open_store(url)
        .await
        .with_context(|| format!("cannot open the store {}", redact(url)))
}

/// The benchmark's entity: a counter that remembers nothing but its value in memory.
struct Counter(u64);

impl Entity for Counter {
    type Command = u64;

    async fn handle(&mut self, add: u64, _ctx: &mut EntityContext<Self>) {
        self.0 += add;
    }
}

/// Three nodes, each with the kind registered over its own store handle.
struct Cluster {
    kind: String,
    nodes: Vec<BenchNode>,
    regions: Vec<EntityRegion<Counter>>,
    stores: Vec<Arc<dyn Store>>,
}

impl Cluster {
    /// Starts the nodes (the first is the seed of the others) and registers the kind on each
    /// at once, before the cluster is Up, as an application does at start.
    async fn start(stores: &Stores, kind: &str, recovery: EntityRecovery) -> anyhow::Result<Self> {
        let seed = Address::new("127.0.0.1", free_port()?);
        let mut cluster = Cluster {
            kind: kind.to_string(),
            nodes: Vec::with_capacity(NODES),
            regions: Vec::with_capacity(NODES),
            stores: Vec::with_capacity(NODES),
        };
        for i in 0..NODES {
            let (bind, seeds) = if i == 0 {
                (seed.clone(), Vec::new())
            } else {
                (Address::new("127.0.0.1", free_port()?), vec![seed.clone()])
            };
            let store = stores.open().await?;
            let node = BenchNode::start_with(bind, seeds, &[], |s| {
                s.cluster.min_nr_of_members = NODES;
            })
            .await?;
            let region = node.sharding.init(
                EntityKind::new(kind, |_| Counter(0))
                    .with_remember_entities(Arc::clone(&store), recovery),
            )?;
            cluster.nodes.push(node);
            cluster.regions.push(region);
            cluster.stores.push(store);
        }
        Ok(cluster)
    }

    fn all_up(&self) -> bool {
        self.nodes.iter().all(|n| n.members_up() == Some(NODES))
    }

    async fn wait_up(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + PHASE_LIMIT;
        while !self.all_up() {
            if Instant::now() > deadline {
                bail!("the cluster was not Up after {PHASE_LIMIT:?}");
            }
            tokio::time::sleep(SAMPLE).await;
        }
        Ok(())
    }

    /// Tells each of `n` entities once, round robin over the nodes.
    async fn tell_all(&self, n: u64) -> anyhow::Result<()> {
        for i in 0..n {
            let region = &self.regions[(i % NODES as u64) as usize];
            region
                .tell(&entity_id(i), 1)
                .await
                .with_context(|| format!("telling entity {}", entity_id(i)))?;
        }
        Ok(())
    }

    /// Live entities of the kind on each node.
    async fn running(&self) -> anyhow::Result<Vec<usize>> {
        let mut counts = Vec::with_capacity(NODES);
        for node in &self.nodes {
            let stats = node
                .sharding
                .region_stats(&self.kind, QUERY_TIMEOUT)
                .await
                .with_context(|| format!("the region on {} did not answer", node.address()))?;
            counts.push(stats.iter().map(|(_, n)| n).sum());
        }
        Ok(counts)
    }

    /// Samples the restart from `started` until all `n` entities run again.
    async fn wait_restored(&self, started: Instant, n: u64) -> anyhow::Result<Restart> {
        let mut up = None;
        let mut first = None;
        loop {
            let now = started.elapsed();
            if up.is_none() && self.all_up() {
                up = Some(now);
            }
            let per_node = self.running().await?;
            let total = per_node.iter().sum::<usize>() as u64;
            if first.is_none() && total > 0 {
                first = Some(now);
            }
            if total > n {
                bail!("{total} entities run after the restart, but {n} were remembered");
            }
            // Done only once the cluster was also seen Up (it always is before a shard
            // starts, but a sample can fall between the two).
            if let (Some(up), Some(first), true) = (up, first, total == n) {
                return Ok(Restart {
                    up,
                    first,
                    all: now,
                    per_node,
                });
            }
            if now > PHASE_LIMIT {
                bail!("{total} of {n} entities running again after {PHASE_LIMIT:?}");
            }
            tokio::time::sleep(SAMPLE).await;
        }
    }

    /// Checks that the entities running are exactly the `n` started, none on two nodes.
    async fn check_ids(&self, n: u64) -> anyhow::Result<()> {
        let mut seen = BTreeSet::new();
        for node in &self.nodes {
            let state = node
                .sharding
                .region_state(&self.kind, QUERY_TIMEOUT)
                .await
                .with_context(|| format!("the region on {} did not answer", node.address()))?;
            for id in state.shards.into_iter().flat_map(|(_, ids)| ids) {
                if !seen.insert(id.to_string()) {
                    bail!("entity {id} runs on two nodes after the restart");
                }
            }
        }
        let expected: BTreeSet<String> = (0..n).map(entity_id).collect();
        if seen != expected {
            let missing = expected.difference(&seen).take(5).collect::<Vec<_>>();
            let extra = seen.difference(&expected).take(5).collect::<Vec<_>>();
            bail!("after the restart: missing {missing:?}…, not started before {extra:?}…");
        }
        Ok(())
    }

    /// Stops every node at once without leaving, then closes the store handles.
    async fn crash(self) -> anyhow::Result<()> {
        for node in &self.nodes {
            node.crash().await;
        }
        for node in self.nodes {
            node.stopped(STOP_LIMIT).await?;
        }
        drop(self.regions);
        for store in self.stores {
            store.close().await.context("closing a node's store")?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Output.

fn recovery_json(r: &EntityRecovery) -> Value {
    match r {
        EntityRecovery::All => json!("all"),
        EntityRecovery::ConstantRate {
            entities,
            frequency,
        } => json!({
            "constant": {
                "entities_per_step": entities,
                "frequency_ms": frequency.as_secs_f64() * 1e3,
            }
        }),
    }
}

fn to_json(url: &str, plan: &Plan, r: &Report) -> Value {
    let s = |d: Duration| d.as_secs_f64();
    json!({
        "benchmark": "remembered",
        "store": redact(url),
        "nodes": NODES,
        "entities": r.entities,
        "shards": r.shards,
        "recovery": recovery_json(&plan.recovery),
        "fill_s": s(r.fill),
        "stop_s": s(r.stop),
        "load1_before_restart": r.load_before_restart,
        "restart": {
            "up_s": s(r.restart.up),
            "first_entity_s": s(r.restart.first),
            "all_entities_s": s(r.restart.all),
            "entities_per_node": r.restart.per_node,
            "sample_ms": SAMPLE.as_secs_f64() * 1e3,
        },
        "load1_after": r.load_after,
    })
}

fn print_table(url: &str, plan: &Plan, r: &Report) {
    let recovery = match plan.recovery {
        EntityRecovery::All => "all".to_string(),
        EntityRecovery::ConstantRate {
            entities,
            frequency,
        } => format!("constant ({entities} every {frequency:?})"),
    };
    println!(
        "shardik bench remembered: store {}, {NODES} nodes, {} entities in {} shards, recovery {recovery}",
        redact(url),
        r.entities,
        r.shards
    );
    println!(
        "started and remembered in {:.3} s; the {NODES} nodes stopped in {:.3} s",
        r.fill.as_secs_f64(),
        r.stop.as_secs_f64()
    );
    println!(
        "restart (load {:.2} before, {:.2} after): Up after {:.3} s, first entity after {:.3} s, \
         all {} after {:.3} s (per node: {:?}; sampled every {SAMPLE:?})",
        r.load_before_restart,
        r.load_after,
        r.restart.up.as_secs_f64(),
        r.restart.first.as_secs_f64(),
        r.entities,
        r.restart.all.as_secs_f64(),
        r.restart.per_node,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The whole benchmark on a real SQLite file, with a few entities: every remembered entity
    /// comes back on the new nodes (the run itself fails if one is missing or runs twice).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_remembered_entity_comes_back_after_a_full_restart() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite:{}", dir.path().join("bench.db").display());
        let plan = Plan {
            entities: 200,
            recovery: EntityRecovery::All,
        };
        let report = measure(&url, plan).await.unwrap();
        assert_eq!(report.restart.per_node.len(), NODES);
        assert_eq!(report.restart.per_node.iter().sum::<usize>(), 200);
        assert!(report.shards > 0 && report.shards <= 200);
        let r = &report.restart;
        assert!(r.up > Duration::ZERO && r.first <= r.all, "{r:?}");
        let v = to_json(&url, &plan, &report);
        assert_eq!(v["entities"], 200);
        assert_eq!(v["recovery"], "all");
    }

    #[test]
    fn the_constant_rate_comes_from_the_configuration() {
        let settings = Settings::load(None).unwrap();
        let c = &settings
            .cluster
            .sharding
            .entity_recovery_constant_rate_strategy;
        assert_eq!(
            recovery_of(&settings, RecoveryArg::Constant),
            EntityRecovery::ConstantRate {
                entities: c.number_of_entities,
                frequency: c.frequency,
            }
        );
        assert_eq!(
            recovery_of(&settings, RecoveryArg::All),
            EntityRecovery::All
        );
    }
}
