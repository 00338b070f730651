//! A full cluster shutdown in simulation: the cluster prepares (Akka's
//! `prepareForFullClusterShutdown`), every member becomes ReadyForShutdown, then every node
//! leaves, one after the other, as each gets its SIGTERM. While that happens no shard may be
//! given a new home: a shard that moved would start its (remembered) entities on a node that
//! is about to stop too, once per node that stops before it. The simulator does not model
//! remembered entities themselves; a shard starting anywhere is where they would start.
//!
//! The sharding checker meanwhile asserts, on every step, at most one home per shard and one
//! live copy per entity. Every run is seeded; a failure names the seed. More seeds:
//! `SHARDIK_SIM_SEEDS=1..300 cargo test -p shardik-sim --test full_shutdown -- --ignored`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shardik_core::Instant;
use shardik_core::membership::{Command, MemberStatus, ShutdownReason};
use shardik_core::sharding::{HandOffMode, ShardId};
use shardik_sim::sharding::{ShardingConfig, ShardingWorld, TrafficConfig, fast_world};
use shardik_sim::world::NodeId;

/// Entities the clients use (enough to give each of the 24 shards a home).
const ENTITIES: usize = 60;

/// The last events, for failure messages.
fn tail(s: &ShardingWorld) -> String {
    let mut lines: Vec<(Instant, String)> = s
        .timeline()
        .iter()
        .chain(
            s.world()
                .timeline()
                .iter()
                .filter(|e| e.node.is_none() || e.what.starts_with("Member")),
        )
        .map(|e| (e.at, format!("{:?} {:?} {}", e.at, e.node, e.what)))
        .collect();
    lines.sort();
    let lines: Vec<String> = lines.into_iter().map(|(_, l)| l).collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// Whether every running node sees every member ReadyForShutdown.
fn all_ready(s: &ShardingWorld, nodes: &[NodeId]) -> bool {
    nodes.iter().all(|&id| {
        let g = s.world().core(id).gossip();
        g.members.len() == nodes.len()
            && g.members
                .values()
                .all(|m| m.status == MemberStatus::ReadyForShutdown)
    })
}

/// When the coordinator of kind 0 first reported the preparation (the moment from which no
/// shard may move).
fn coordinator_saw_it(s: &ShardingWorld) -> Option<Instant> {
    s.timeline()
        .iter()
        .find(|e| e.what == "kind 0: PreparingForShutdown")
        .map(|e| e.at)
}

/// One run. Odd seeds keep the clients sending to the end and stop the coordinator's node
/// last; even seeds stop the clients once the preparation reached the coordinator and stop
/// the nodes in any order (a coordinator that starts on another node meanwhile does not know
/// which shards were retired, and would allocate one a client asks for: see the
/// coordinator's module docs).
fn full_shutdown(seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xf0_11_5d_0e);
    let mode = if seed % 4 < 2 {
        HandOffMode::Forward
    } else {
        HandOffMode::Drop
    };
    let n = rng.random_range(3..=5);
    let mut s = ShardingWorld::new(fast_world(seed), ShardingConfig::fast(mode));
    let (nodes, at) = s.form_cluster(n);
    assert!(at.is_some(), "seed {seed}: the cluster did not form");
    s.set_traffic(Some(TrafficConfig::new(
        Duration::from_millis(20),
        3,
        ENTITIES,
    )));
    s.run_for(Duration::from_millis(rng.random_range(3_000..8_000)));

    let by = nodes[rng.random_range(0..n)];
    s.world_mut()
        .command(by, Command::PrepareForFullClusterShutdown);
    let saw = s.run_until_pred(Duration::from_secs(20), |s| coordinator_saw_it(s).is_some());
    assert!(
        saw.is_some(),
        "seed {seed}: the coordinator never saw it\n{}",
        tail(&s)
    );
    let mark = s.host_events().len();
    let homes: BTreeMap<ShardId, Vec<NodeId>> = s.hosts(0);
    assert!(
        homes.len() > 12,
        "seed {seed}: the clients gave most shards a home: {homes:?}"
    );
    let keep_sending = seed % 2 == 1;
    if !keep_sending {
        s.set_traffic(None);
    }
    let ready = s.run_until_pred(Duration::from_secs(30), |s| all_ready(s, &nodes));
    assert!(
        ready.is_some(),
        "seed {seed}: not all ReadyForShutdown\n{}",
        tail(&s)
    );

    // Each node gets its SIGTERM (a leave), one after the other.
    let mut order = nodes.clone();
    order.shuffle(&mut rng);
    if keep_sending {
        let coordinator = s.coordinator_nodes(0);
        assert_eq!(coordinator.len(), 1, "seed {seed}");
        order.retain(|id| *id != coordinator[0]);
        order.push(coordinator[0]);
    }
    for (i, &id) in order.iter().enumerate() {
        s.leave(id);
        let stopped = s.run_until_pred(Duration::from_secs(40), |s| {
            s.world().shutdown_reason(id).is_some()
        });
        assert_eq!(
            s.world().shutdown_reason(id),
            Some(&ShutdownReason::Left),
            "seed {seed}: node {id} did not leave ({stopped:?})\n{}",
            tail(&s)
        );
        // The nodes still running keep exactly the shards they had.
        let still: BTreeSet<NodeId> = order[i + 1..].iter().copied().collect();
        for (shard, on) in s.hosts(0) {
            assert!(
                on.iter().all(|n| still.contains(n)),
                "seed {seed}: {shard} on {on:?}"
            );
            assert_eq!(
                homes.get(&shard),
                Some(&on),
                "seed {seed}: shard {shard} moved after node {id} left\n{}",
                tail(&s)
            );
        }
        s.run_for(Duration::from_millis(rng.random_range(0..3_000)));
    }

    // After the preparation reached the coordinator, no shard that had a home started
    // anywhere; one that had none started at most once.
    let mut started: BTreeMap<&ShardId, usize> = BTreeMap::new();
    for e in &s.host_events()[mark..] {
        if e.started && e.kind == 0 {
            assert!(
                !homes.contains_key(&e.shard),
                "seed {seed}: shard {} started on node {} at {} after the preparation\n{}",
                e.shard,
                e.node,
                e.at,
                tail(&s)
            );
            *started.entry(&e.shard).or_default() += 1;
        }
    }
    assert!(
        started.values().all(|n| *n == 1),
        "seed {seed}: {started:?}"
    );
    assert!(
        !s.timeline()
            .iter()
            .any(|e| e.what.contains("HandOffStarted")
                && e.at >= coordinator_saw_it(&s).expect("seen")),
        "seed {seed}: a hand-off started after the preparation\n{}",
        tail(&s)
    );
    let l = s.ledger();
    assert!(l.duplicates().is_empty(), "seed {seed}: duplicates");
    assert!(
        l.vanished().is_empty(),
        "seed {seed}: {} vanished",
        l.vanished().len()
    );
    let v = s.violations();
    assert!(v.is_empty(), "seed {seed}: {v:#?}\n{}", tail(&s));
    let w = s.world().checker().violations();
    assert!(w.is_empty(), "seed {seed}: {w:#?}");
}

#[test]
fn a_cluster_that_prepared_for_a_full_shutdown_moves_no_shard_while_every_node_leaves() {
    for seed in 1..=16 {
        full_shutdown(seed);
    }
}

/// A joiner that asks while the cluster prepares is not let in, and no member is moved up.
#[test]
fn a_node_that_asks_to_join_while_the_cluster_prepares_is_not_let_in() {
    for seed in 1..=6 {
        let mut s =
            ShardingWorld::new(fast_world(seed), ShardingConfig::fast(HandOffMode::Forward));
        let (nodes, at) = s.form_cluster(3);
        assert!(at.is_some(), "seed {seed}: the cluster did not form");
        s.world_mut()
            .command(nodes[1], Command::PrepareForFullClusterShutdown);
        let ready = s.run_until_pred(Duration::from_secs(30), |s| all_ready(s, &nodes));
        assert!(ready.is_some(), "seed {seed}\n{}", tail(&s));
        let joiner = s.add_node();
        s.join(joiner, &nodes);
        s.run_for(Duration::from_secs(30));
        for &id in &nodes {
            let g = s.world().core(id).gossip();
            assert!(
                g.members
                    .keys()
                    .all(|m| m.address != shardik_sim::world::World::address_of(joiner)),
                "seed {seed}: node {id} has the joiner as a member"
            );
        }
        assert!(!s.world().core(joiner).is_member(), "seed {seed}");
        let refused = s
            .world()
            .stats()
            .dropped_by_core
            .get("preparing-for-shutdown")
            .copied()
            .unwrap_or(0);
        assert!(
            refused > 0,
            "seed {seed}: the joins were refused and counted"
        );
        let v = s.violations();
        assert!(v.is_empty(), "seed {seed}: {v:#?}");
    }
}

/// More seeds, by hand: `SHARDIK_SIM_SEEDS=FROM..TO` (default `1..300`).
#[test]
#[ignore = "a search over many seeds, run by hand"]
fn many_seeds() {
    let range = std::env::var("SHARDIK_SIM_SEEDS").unwrap_or_else(|_| "1..300".into());
    let (from, to) = range.split_once("..").expect("FROM..TO");
    let (from, to): (u64, u64) = (from.parse().expect("FROM"), to.parse().expect("TO"));
    let failed: Vec<u64> = (from..to)
        .filter(|&seed| std::panic::catch_unwind(|| full_shutdown(seed)).is_err())
        .collect();
    assert!(failed.is_empty(), "failing seeds: {failed:?}");
}
