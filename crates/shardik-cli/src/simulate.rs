//! `shardik simulate`: one scenario on the real membership core, printed as a timeline.

use std::process::ExitCode;

use clap::Args;
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
    /// Scenario: join, crash, partition or churn.
    #[arg(long, default_value = "join")]
    scenario: Scenario,
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
    let mut cfg = WorldConfig::new(args.seed);
    let default_max = if args.scenario == Scenario::Jitter {
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
    let (world, outcome) = scenario::run(args.scenario, args.nodes, args.seed, Some(cfg));
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
