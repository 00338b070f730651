//! `shardik simulate`: one scenario on the real membership core, printed as a timeline.

use std::process::ExitCode;

use clap::Args;
use shardik_core::replicator::DeliberateFaults;
use shardik_sim::ddata::run_distributed_data;
use shardik_sim::scenario::{self, Scenario};
use shardik_sim::world::{TimelineEntry, WorldConfig};

/// Arguments of `shardik simulate`.
#[derive(Args, Debug)]
pub struct SimulateArgs {
    /// Number of nodes.
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// Master seed; the same seed prints the same timeline.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Scenario: join, crash, partition, churn, join-one, detect, jitter (membership), or
    /// distributed-data (replicators on every node under crashes, partitions, joins and
    /// leaves, with clients at random consistencies, checked).
    #[arg(long, default_value = "join")]
    scenario: SimScenario,
    /// Print one JSON object as the last line.
    #[arg(long)]
    json: bool,
    /// Do not print the per-node timeline (useful for thousands of nodes).
    #[arg(long)]
    quiet: bool,
    /// Largest one-way network latency in milliseconds (uniform from 1 ms); the `jitter`
    /// scenario defaults to 1000 ms, inside the 3 s acceptable heartbeat pause.
    #[arg(long)]
    max_latency_ms: Option<u64>,
}

/// A scenario of the membership core, or the replicated-data one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimScenario {
    /// One of [`Scenario`].
    Membership(Scenario),
    /// The replicated-data scenario ([`run_distributed_data`]).
    DistributedData,
}

impl std::str::FromStr for SimScenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "distributed-data" => Ok(SimScenario::DistributedData),
            other => other
                .parse()
                .map(SimScenario::Membership)
                .map_err(|e: String| e.replace(" or jitter)", ", jitter or distributed-data)")),
        }
    }
}

/// Formats one timeline line: virtual time, node, what happened.
pub fn format_entry(e: &TimelineEntry) -> String {
    let node = e
        .node
        .map_or("world     ".to_string(), |n| format!("node-{n:05}"));
    format!("{:>9.3}s  {node}  {}", e.at.as_nanos() as f64 / 1e9, e.what)
}

/// Runs the command.
pub fn run(args: SimulateArgs) -> anyhow::Result<ExitCode> {
    if args.nodes == 0 {
        anyhow::bail!("--nodes must be at least 1");
    }
    let scenario = match args.scenario {
        SimScenario::Membership(scenario) => scenario,
        SimScenario::DistributedData => return run_distributed(&args),
    };
    let mut cfg = WorldConfig::new(args.seed);
    let default_max = if scenario == Scenario::Jitter {
        Some(1000)
    } else {
        None
    };
    if let Some(ms) = args.max_latency_ms.or(default_max) {
        cfg.latency.1 = std::time::Duration::from_millis(ms.max(1));
    }
    let big = args.nodes > 200;
    cfg.record_events = !args.quiet && !big;
    cfg.check_states = !big;
    let wall = std::time::Instant::now();
    let (world, outcome) = scenario::run(scenario, args.nodes, args.seed, Some(cfg));
    if !args.quiet {
        for e in world.timeline() {
            println!("{}", format_entry(e));
        }
    }
    eprintln!(
        "{} nodes, scenario {}, seed {}: converged={} in {:?} simulated ms; wall time {:.2}s",
        outcome.nodes,
        outcome.scenario,
        outcome.seed,
        outcome.converged,
        outcome.simulated_ms_to_convergence,
        wall.elapsed().as_secs_f64()
    );
    for v in &outcome.violations {
        eprintln!("invariant violated: {v}");
    }
    if args.json {
        println!("{}", serde_json::to_string(&outcome)?);
    }
    Ok(if outcome.converged && outcome.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Runs the replicated-data scenario: a summary on stderr, one JSON line with `--json`, and
/// failure when a check failed.
fn run_distributed(args: &SimulateArgs) -> anyhow::Result<ExitCode> {
    let wall = std::time::Instant::now();
    let (_, outcome) = run_distributed_data(args.nodes, args.seed, DeliberateFaults::default());
    eprintln!(
        "{} nodes, scenario distributed-data, seed {}: converged={}, {} acknowledged writes, {} majority reads, {} stale, {} lost; wall time {:.2}s",
        outcome.nodes,
        outcome.seed,
        outcome.converged,
        outcome.acknowledged_writes,
        outcome.stats.majority_reads,
        outcome.stale_reads,
        outcome.lost_writes,
        wall.elapsed().as_secs_f64()
    );
    for v in &outcome.violations {
        eprintln!("invariant violated: {v}");
    }
    if args.json {
        println!("{}", serde_json::to_string(&outcome)?);
    }
    Ok(if outcome.violations.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
