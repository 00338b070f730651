//! Named scenarios for `shardik simulate`, each run on the real membership core.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use shardik_core::Instant;
use shardik_core::membership::MemberStatus;

use crate::world::{NodeId, World, WorldConfig};

/// Which scenario to run.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// Nodes form a cluster from seeds started at once.
    Join,
    /// A node crashes; it is detected, downed by the resolver and removed.
    Crash,
    /// A clean partition into a majority and a minority; the resolver keeps the majority.
    Partition,
    /// Random crashes, restarts, partitions and leaves, then heal; the survivors converge.
    Churn,
    /// One node joins an already converged cluster of `nodes - 1`; measures until all see it Up.
    JoinOne,
    /// One node of a converged cluster crashes; measures until every other node marks it unreachable.
    Detect,
    /// A converged cluster runs for five minutes on a network whose latency jitters within the
    /// acceptable heartbeat pause; counts unreachable verdicts (false positives).
    Jitter,
}

impl std::str::FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "join" => Ok(Scenario::Join),
            "crash" => Ok(Scenario::Crash),
            "partition" => Ok(Scenario::Partition),
            "churn" => Ok(Scenario::Churn),
            "join-one" => Ok(Scenario::JoinOne),
            "detect" => Ok(Scenario::Detect),
            "jitter" => Ok(Scenario::Jitter),
            other => Err(format!(
                "unknown scenario `{other}` (expected join, crash, partition, churn, join-one, detect or jitter)"
            )),
        }
    }
}

impl Scenario {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Join => "join",
            Scenario::Crash => "crash",
            Scenario::Partition => "partition",
            Scenario::Churn => "churn",
            Scenario::JoinOne => "join-one",
            Scenario::Detect => "detect",
            Scenario::Jitter => "jitter",
        }
    }
}

/// The outcome of a scenario, printed as the last line with `--json`.
#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    /// Node slots in the run.
    pub nodes: usize,
    /// Master seed.
    pub seed: u64,
    /// Scenario name.
    pub scenario: String,
    /// Whether the surviving nodes converged on one view with the expected members.
    pub converged: bool,
    /// Virtual milliseconds from the start of the scenario's last phase to convergence.
    pub simulated_ms_to_convergence: Option<u64>,
    /// Gossip messages (status or full) sent in the whole run.
    pub gossip_rounds: u64,
    /// Members Up in the final view.
    pub members_up: usize,
    /// Members removed during the run (as seen by the final leader's events).
    pub members_removed: usize,
    /// Gossip bytes (size model) per node per virtual second over the whole run.
    pub gossip_bytes_per_node_per_s: f64,
    /// Unreachable verdicts during the run (for `jitter`: false positives, since nothing failed).
    pub unreachable_events: u64,
    /// Invariant violations found by the checker (must be empty).
    pub violations: Vec<String>,
}

/// How long a scenario may take (virtual) before it counts as not converged.
const LIMIT: Duration = Duration::from_secs(300);

/// Forms a cluster of `n` nodes: the first `min(3, n)` are seeds and all start at once.
pub fn form_cluster(world: &mut World, n: usize) -> Option<Instant> {
    let ids: Vec<NodeId> = (0..n).map(|_| world.add_node()).collect();
    let seeds: Vec<NodeId> = ids.iter().copied().take(3).collect();
    for &id in &ids {
        world.join(id, &seeds);
    }
    world.run_until_pred(LIMIT, |w| w.all_up(&ids) && w.agreed())
}

/// Runs `scenario` with `nodes` nodes and the given seed.
pub fn run(
    scenario: Scenario,
    nodes: usize,
    seed: u64,
    cfg: Option<WorldConfig>,
) -> (World, Outcome) {
    let mut world = World::new(cfg.unwrap_or_else(|| WorldConfig::new(seed)));
    let nodes = nodes.max(1);
    let start = world.now();
    if matches!(
        scenario,
        Scenario::JoinOne | Scenario::Detect | Scenario::Jitter
    ) {
        return run_on_converged(world, scenario, nodes, seed);
    }
    let formed = form_cluster(&mut world, nodes);
    let (converged_at, phase_start, expected): (Option<Instant>, Instant, Vec<NodeId>) =
        match scenario {
            Scenario::Join => (formed, start, (0..nodes).collect()),
            Scenario::Crash => {
                let victim = nodes - 1;
                world.crash(victim);
                let t0 = world.now();
                let survivors: Vec<NodeId> = (0..nodes).filter(|i| *i != victim).collect();
                let s2 = survivors.clone();
                (
                    world.run_until_pred(LIMIT, move |w| w.all_up(&s2) && w.agreed()),
                    t0,
                    survivors,
                )
            }
            Scenario::Partition => {
                let minority = nodes / 2;
                let majority: Vec<NodeId> = (0..nodes - minority).collect();
                let minor: Vec<NodeId> = (nodes - minority..nodes).collect();
                world.partition(&[&majority, &minor]);
                let t0 = world.now();
                let m2 = majority.clone();
                let at = world.run_until_pred(LIMIT, move |w| w.all_up(&m2) && w.agreed());
                world.heal();
                world.run_for(Duration::from_secs(10));
                (at, t0, majority)
            }
            Scenario::Churn => churn(&mut world, nodes, seed),
            Scenario::JoinOne | Scenario::Detect | Scenario::Jitter => {
                unreachable!("handled above")
            }
        };
    let final_ok = converged_at.is_some() && world.all_up(&expected) && world.agreed();
    let elapsed_s = world
        .now()
        .saturating_duration_since(start)
        .as_secs_f64()
        .max(1e-9);
    let removed = world.stats().removed_members.len();
    let up = expected
        .first()
        .map(|&i| {
            world
                .members_seen_by(i)
                .iter()
                .filter(|m| m.status == MemberStatus::Up)
                .count()
        })
        .unwrap_or(0);
    let outcome = Outcome {
        nodes,
        seed,
        scenario: scenario.name().to_string(),
        converged: final_ok,
        simulated_ms_to_convergence: converged_at
            .map(|t| t.saturating_duration_since(phase_start).as_millis() as u64),
        gossip_rounds: world.stats().gossip_messages,
        members_up: up,
        members_removed: removed,
        gossip_bytes_per_node_per_s: world.stats().gossip_bytes as f64 / nodes as f64 / elapsed_s,
        unreachable_events: world.stats().unreachable_events,
        violations: world.checker().violations().to_vec(),
    };
    (world, outcome)
}

/// Random faults for a while, then heal and restart what died; every slot must end Up.
fn churn(world: &mut World, nodes: usize, seed: u64) -> (Option<Instant>, Instant, Vec<NodeId>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_c4a2);
    let all: Vec<NodeId> = (0..nodes).collect();
    for _ in 0..8 {
        let victim = rng.random_range(0..nodes);
        match rng.random_range(0..4) {
            0 => world.crash(victim),
            1 => world.pause(victim, Duration::from_millis(rng.random_range(500..8000))),
            2 if nodes >= 3 => {
                let cut = rng.random_range(1..nodes);
                let (a, b) = all.split_at(cut);
                world.partition(&[a, b]);
            }
            _ => world.leave(victim),
        }
        world.run_for(Duration::from_millis(rng.random_range(1000..15_000)));
        world.heal();
    }
    world.heal();
    // Let the resolver and the leader finish what the faults started.
    world.run_for(Duration::from_secs(60));
    // Every slot that is no longer a running member comes back as a new incarnation.
    let alive: Vec<NodeId> = world
        .alive_nodes()
        .into_iter()
        .filter(|i| world.core(*i).is_member())
        .collect();
    // Join the survivors if there are any; otherwise the original seeds form a new cluster.
    let seeds: Vec<NodeId> = if alive.is_empty() {
        (0..nodes.min(3)).collect()
    } else {
        alive.iter().copied().take(3).collect()
    };
    for id in 0..nodes {
        if !alive.contains(&id) {
            world.restart(id);
            world.join(id, &seeds);
        }
    }
    let t0 = world.now();
    let at = world.run_until_pred(LIMIT, |w| w.all_up(&all) && w.agreed());
    (at, t0, all)
}

/// Scale scenarios that start from a converged cluster built directly (no formation replayed).
fn run_on_converged(
    mut world: World,
    scenario: Scenario,
    nodes: usize,
    seed: u64,
) -> (World, Outcome) {
    let existing = nodes.saturating_sub(1).max(2);
    let ids = world.add_converged_cluster(existing);
    // Let heartbeats start and the detectors learn the intervals before measuring.
    world.run_for(Duration::from_secs(5));
    let bytes_before = world.stats().gossip_bytes;
    let msgs_before = world.stats().gossip_messages;
    let t0 = world.now();
    let (at, total) = match scenario {
        Scenario::Jitter => {
            world.run_for(Duration::from_secs(300));
            let none = world.stats().unreachable_events == 0;
            (none.then(|| world.now()), existing)
        }
        Scenario::JoinOne => {
            let joiner = world.add_node();
            world.track_up(joiner);
            world.join(joiner, &ids[..3.min(ids.len())]);
            let total = existing + 1;
            (
                world.run_until_pred(LIMIT, |w| w.tracked_up_count() >= total),
                total,
            )
        }
        _ => {
            let victim = ids[ids.len() / 2];
            world.track_unreachable(victim);
            world.crash(victim);
            let total = existing - 1;
            (
                world.run_until_pred(LIMIT, |w| w.tracked_unreachable_count() >= total),
                total,
            )
        }
    };
    let elapsed_s = world
        .now()
        .saturating_duration_since(t0)
        .as_secs_f64()
        .max(1e-9);
    let outcome = Outcome {
        nodes: total,
        seed,
        scenario: scenario.name().to_string(),
        converged: at.is_some(),
        simulated_ms_to_convergence: at.map(|t| t.saturating_duration_since(t0).as_millis() as u64),
        gossip_rounds: world.stats().gossip_messages - msgs_before,
        members_up: total,
        members_removed: 0,
        gossip_bytes_per_node_per_s: (world.stats().gossip_bytes - bytes_before) as f64
            / world.len() as f64
            / elapsed_s,
        unreachable_events: world.stats().unreachable_events,
        violations: world.checker().violations().to_vec(),
    };
    (world, outcome)
}
