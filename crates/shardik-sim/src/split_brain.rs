//! Split brain: whether two clusters survive a partition, checked all along a run of random
//! partitions, reshapes, heals, pauses and crashes.
//!
//! Two clusters have survived when two running members each hold the other as Down or
//! removed: each side has decided to down the other and acted on it. One side deciding to
//! down the other is a normal moment of any partition (the other side then downs itself); a
//! side downing itself marks itself Down, so it never counts. The check looks at this mutual
//! verdict, not at who can reach whom, so it needs no settling time and never waits for a
//! heal, which would let the quarantine of removed nodes hide the split.

use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shardik_core::Instant;
use shardik_core::membership::sbr::{SbrSettings, Strategy};
use shardik_core::membership::{MemberStatus, Membership, UniqueAddress};

use crate::scenario::form_cluster;
use crate::world::{NodeId, World, WorldConfig};

/// A running member that has not downed itself: what can be part of a surviving cluster.
fn survives(w: &World, id: NodeId) -> bool {
    w.is_alive(id)
        && w.core(id).is_member()
        && w.core(id).self_status().is_some_and(|s| {
            s.counts_as_up()
                || matches!(
                    s,
                    MemberStatus::Joining | MemberStatus::WeaklyUp | MemberStatus::Leaving
                )
        })
}

/// Whether `core` holds `node` as Down or has removed it.
fn dead_to(core: &Membership, node: &UniqueAddress) -> bool {
    let g = core.gossip();
    g.tombstones.contains_key(node)
        || g.member(node)
            .is_some_and(|m| m.status == MemberStatus::Down)
}

/// Two surviving nodes each of which holds the other Down or removed, if any.
pub fn two_clusters(w: &World) -> Option<(NodeId, NodeId)> {
    let live: Vec<NodeId> = (0..w.len()).filter(|&i| survives(w, i)).collect();
    for (k, &a) in live.iter().enumerate() {
        for &b in &live[k + 1..] {
            let (ca, cb) = (w.core(a), w.core(b));
            if dead_to(ca, cb.self_node()) && dead_to(cb, ca.self_node()) {
                return Some((a, b));
            }
        }
    }
    None
}

/// The outcome of one random run.
#[derive(Clone, Debug, Default)]
pub struct SplitBrainRun {
    /// The seed.
    pub seed: u64,
    /// Node slots.
    pub nodes: usize,
    /// What was done, in order (for a failure message).
    pub faults: Vec<String>,
    /// Two clusters seen (time, the two nodes), and the world checker's violations.
    pub violations: Vec<String>,
    /// Nodes still surviving at the end (0: the whole cluster downed itself).
    pub survivors: usize,
}

/// How often the check runs, in virtual time.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Runs until virtual time `end`, checking for two clusters every [`CHECK_EVERY`]; records
/// the first sighting.
fn run_checked(w: &mut World, end: Instant, run: &mut SplitBrainRun) {
    while w.now() < end {
        let step = CHECK_EVERY.min(end - w.now());
        w.run_for(step);
        if let Some((a, b)) = two_clusters(w)
            && run.violations.is_empty()
        {
            run.violations.push(format!(
                "{}: two clusters: node-{a:05} and node-{b:05} each hold the other Down or removed",
                w.now()
            ));
        }
    }
}

/// Random splits of `ids` into two or three non-empty groups.
fn random_groups(rng: &mut ChaCha8Rng, ids: &[NodeId]) -> Vec<Vec<NodeId>> {
    let k = if ids.len() >= 4 && rng.random_bool(0.3) {
        3
    } else {
        2
    };
    loop {
        let mut groups = vec![Vec::new(); k];
        for &id in ids {
            groups[rng.random_range(0..k)].push(id);
        }
        if groups.iter().all(|g| !g.is_empty()) {
            return groups;
        }
    }
}

/// A cluster of 3 to 7 nodes under `strategy` (stable-after 20 s) goes through eight random
/// faults, each held 1–90 s: a partition into two or three groups (sometimes replacing the
/// previous one without a heal in between), a heal, pauses of 1–60 s of some nodes, or a crash
/// of one node which restarts as a new incarnation and joins again 10–60 s later. Then the
/// network heals for 90 s. Two clusters are looked for every 250 ms throughout.
pub fn random_partitions(seed: u64, strategy: Strategy) -> SplitBrainRun {
    random_partitions_world(seed, strategy).1
}

/// [`random_partitions`], with the world at the end (its timeline shows what happened).
pub fn random_partitions_world(seed: u64, strategy: Strategy) -> (World, SplitBrainRun) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5b1_17b2a1);
    let nodes = rng.random_range(3..=7);
    let mut cfg = WorldConfig::new(seed);
    cfg.membership.downing = Some(SbrSettings::new(strategy, Duration::from_secs(20)));
    let mut w = World::new(cfg);
    let mut run = SplitBrainRun {
        seed,
        nodes,
        ..SplitBrainRun::default()
    };
    if form_cluster(&mut w, nodes).is_none() {
        run.violations.push("the cluster did not form".into());
        return (w, run);
    }
    let all: Vec<NodeId> = (0..nodes).collect();
    // Crashed slots and when they come back.
    let mut restarts: Vec<(Instant, NodeId)> = Vec::new();
    for _ in 0..8 {
        let fault = match rng.random_range(0..10) {
            0..=3 => {
                let groups = random_groups(&mut rng, &all);
                let refs: Vec<&[NodeId]> = groups.iter().map(Vec::as_slice).collect();
                w.partition(&refs);
                format!("partition {groups:?}")
            }
            4 | 5 => {
                w.heal();
                "heal".to_string()
            }
            6 | 7 => {
                let mut paused = Vec::new();
                for &id in &all {
                    if rng.random_bool(0.4) {
                        let d = Duration::from_millis(rng.random_range(1_000..60_000));
                        w.pause(id, d);
                        paused.push((id, d.as_millis()));
                    }
                }
                format!("pause {paused:?} (ms)")
            }
            _ => {
                let victim = rng.random_range(0..nodes);
                let back = Duration::from_millis(rng.random_range(10_000..60_000));
                w.crash(victim);
                restarts.push((w.now() + back, victim));
                format!("crash {victim}, back after {}ms", back.as_millis())
            }
        };
        run.faults.push(format!("{} {fault}", w.now()));
        let end = w.now() + Duration::from_millis(rng.random_range(1_000..90_000));
        restarts.sort();
        while let Some(&(at, victim)) = restarts.first().filter(|(at, _)| *at <= end) {
            run_checked(&mut w, at, &mut run);
            restarts.remove(0);
            rejoin(&mut w, victim, &all, &mut run);
        }
        run_checked(&mut w, end, &mut run);
    }
    w.heal();
    for (_, victim) in std::mem::take(&mut restarts) {
        rejoin(&mut w, victim, &all, &mut run);
    }
    run.faults.push(format!("{} heal", w.now()));
    let end = w.now() + Duration::from_secs(90);
    run_checked(&mut w, end, &mut run);
    run.violations
        .extend(w.checker().violations().iter().cloned());
    run.survivors = all.iter().filter(|&&i| survives(&w, i)).count();
    (w, run)
}

/// Restarts slot `victim` as a new incarnation that joins through the surviving members (or
/// forms a new cluster with the first slot's address as its seed when nobody survives).
fn rejoin(w: &mut World, victim: NodeId, all: &[NodeId], run: &mut SplitBrainRun) {
    let seeds: Vec<NodeId> = all
        .iter()
        .copied()
        .filter(|&i| i != victim && survives(w, i))
        .take(3)
        .collect();
    w.restart(victim);
    let seeds = if seeds.is_empty() {
        vec![victim]
    } else {
        seeds
    };
    w.join(victim, &seeds);
    run.faults
        .push(format!("{} restart {victim}, join via {seeds:?}", w.now()));
}
