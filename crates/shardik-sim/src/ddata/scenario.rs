//! The random scenario of replicated data: a cluster forms, clients call while nodes crash,
//! partitions open and heal, nodes join and leave; then everything heals, the dead come back,
//! and the checks run on the state the replicas settle on.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use shardik_core::membership::MemberStatus;
use shardik_core::replicator::{DeliberateFaults, ReplicatorSettings};

use super::checker::DataStats;
use super::world::DataWorld;
use crate::sharding::fast_world;
use crate::world::NodeId;

/// What a run of the scenario found, printed by `shardik simulate --json`.
#[derive(Clone, Debug, Serialize)]
pub struct DataOutcome {
    /// Node slots the cluster formed with.
    pub nodes: usize,
    /// Master seed.
    pub seed: u64,
    /// The scenario's name.
    pub scenario: &'static str,
    /// Whether every running replica held the same state at the end.
    pub converged: bool,
    /// Additions acknowledged at their consistency.
    pub acknowledged_writes: u64,
    /// Majority reads that missed an overlapping acknowledged write (violations).
    pub stale_reads: u64,
    /// Acknowledged additions lost though a holder survived (violations).
    pub lost_writes: u64,
    /// Every count of the run.
    pub stats: DataStats,
    /// Replicator messages delivered and lost.
    pub messages_delivered: u64,
    /// Replicator messages lost to partitions and dead ends.
    pub messages_lost: u64,
    /// Virtual milliseconds the run took.
    pub simulated_ms: u64,
    /// Every violation found, described.
    pub violations: Vec<String>,
}

/// The replicator's settings for the scenario: the reference's, with pruning paced for a
/// run of minutes (a round every 2 s, after 6 s of dissemination).
pub fn scenario_settings(faults: DeliberateFaults) -> ReplicatorSettings {
    ReplicatorSettings {
        pruning_interval: Duration::from_secs(2),
        max_pruning_dissemination: Duration::from_secs(6),
        pruning_marker_time_to_live: Duration::from_secs(600),
        faults,
        ..ReplicatorSettings::default()
    }
}

/// Runs the scenario on `nodes` nodes with `seed`; `faults` injects a deliberate fault (for
/// the checkers' own tests).
pub fn run_distributed_data(
    nodes: usize,
    seed: u64,
    faults: DeliberateFaults,
) -> (DataWorld, DataOutcome) {
    let nodes = nodes.max(1);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xd15c_0da7);
    let mut cfg = fast_world(seed);
    cfg.check_states = false;
    cfg.record_events = false;
    let mut d = DataWorld::new(cfg, scenario_settings(faults));
    let start = d.now();
    let formed = d.form_cluster(nodes);
    let mut violations = Vec::new();
    if formed.is_none() {
        violations.push("the cluster did not form".to_string());
    }
    d.set_clients(Some(Duration::from_millis(50)));
    d.run_for(Duration::from_secs(3));
    for _ in 0..rng.random_range(3..8) {
        let slots = d.world().len();
        let victim = rng.random_range(0..slots);
        match rng.random_range(0..6) {
            0 | 1 => d.world_mut().crash(victim),
            2 | 3 if slots >= 3 => {
                d.world_mut().heal();
                let cut = rng.random_range(1..slots);
                let all: Vec<NodeId> = (0..slots).collect();
                let (a, b) = all.split_at(cut);
                d.world_mut().partition(&[a, b]);
            }
            4 if slots < nodes + 2 => {
                let id = d.world_mut().add_node();
                let seeds: Vec<NodeId> = d.world().alive_nodes().into_iter().take(3).collect();
                d.world_mut().join(id, &seeds);
            }
            _ if d.world().core(victim).self_status() == Some(MemberStatus::Up) => {
                d.world_mut().leave(victim)
            }
            _ => {}
        }
        d.run_for(Duration::from_millis(rng.random_range(1_000..15_000)));
        if rng.random_bool(0.6) {
            d.world_mut().heal();
        }
    }
    d.world_mut().heal();
    // The resolver, the leader and pending leaves finish what the faults started.
    d.run_for(Duration::from_secs(30));
    let recovered = restart_the_dead(&mut d);
    if !recovered {
        violations.push("the cluster did not recover".to_string());
    }
    d.run_for(Duration::from_secs(10));
    d.set_clients(None);
    // Quiet: gossip converges the replicas, and removed nodes' data is pruned.
    d.run_for(Duration::from_secs(30));
    d.run_until_pred(Duration::from_secs(60), DataWorld::converged);
    d.final_check();
    violations.extend(d.checker().violations().iter().cloned());
    let stats = d.checker().stats.clone();
    let outcome = DataOutcome {
        nodes,
        seed,
        scenario: "distributed-data",
        converged: stats.converged,
        acknowledged_writes: stats.acknowledged_writes,
        stale_reads: stats.stale_reads,
        lost_writes: stats.lost_writes,
        stats,
        messages_delivered: d.delivered,
        messages_lost: d.lost,
        simulated_ms: (d.now() - start).as_millis() as u64,
        violations,
    };
    (d, outcome)
}

/// Restarts every slot that is not a member of the largest cluster and joins it to that
/// cluster; whether all were Up and agreed within two minutes (the operator looks again once,
/// as a seed picked may have been on its way out).
///
/// A membership change during a partition can leave two clusters that each kept themselves
/// (keep-majority counts the members each side knew: two of four on one side, four of six on
/// the other, seed 902). An operator then stops the smaller one and joins its nodes to the
/// larger, as here; what only the stopped nodes held goes with them.
fn restart_the_dead(d: &mut DataWorld) -> bool {
    let slots = d.world().len();
    let all: Vec<NodeId> = (0..slots).collect();
    for _ in 0..2 {
        let members = largest_cluster(d);
        let seeds: Vec<NodeId> = if members.is_empty() {
            (0..slots.min(3)).collect()
        } else {
            members.iter().copied().take(3).collect()
        };
        for id in 0..slots {
            if !members.contains(&id) {
                d.world_mut().restart(id);
                d.world_mut().join(id, &seeds);
            }
        }
        let up = d.run_until_pred(Duration::from_secs(120), |d| {
            d.world().all_up(&all) && d.world().agreed()
        });
        if up.is_some() {
            return true;
        }
    }
    false
}

/// The alive members of the largest cluster: nodes grouped by the members their views list;
/// of two groups of one size, the one with the lowest slot.
fn largest_cluster(d: &DataWorld) -> Vec<NodeId> {
    let mut clusters: std::collections::BTreeMap<Vec<NodeId>, Vec<NodeId>> =
        std::collections::BTreeMap::new();
    for id in d.world().alive_nodes() {
        let core = d.world().core(id);
        if !core.is_member() {
            continue;
        }
        let listed: Vec<NodeId> = d
            .world()
            .alive_nodes()
            .into_iter()
            .filter(|&j| {
                let node = d.world().core(j).self_node();
                core.gossip().members.values().any(|m| &m.addr == node)
            })
            .collect();
        clusters.entry(listed).or_default().push(id);
    }
    clusters
        .into_values()
        .max_by(|a, b| a.len().cmp(&b.len()).then(b.first().cmp(&a.first())))
        .unwrap_or_default()
}
