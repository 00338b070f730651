//! Whole-cluster sharding scenarios: the real membership and sharding cores on every node of
//! a simulated cluster, with clients sending numbered messages and the sharding checker
//! watching every event. Every run is seeded; a failure names the seed, and the same seed
//! replays the same run.
//!
//! Timers are the fast ones of [`ShardingConfig::fast`] and [`fast_world`]: stable-after and
//! the down-removal margin are 10 s, so a crash is handled in well under a minute of simulated
//! time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use shardik_core::Instant;
use shardik_core::membership::{
    Command, MemberStatus, MembershipConfig, ReachabilityStatus, ShutdownReason,
};
use shardik_core::sharding::{DropReason, HandOffMode, ShardId};
use shardik_passivation::{IdleCheck, ReplacementPolicy, ResolvedStrategy};
use shardik_persistence::Retention;
use shardik_sim::sharding::config::FAST_STABLE_AFTER;
use shardik_sim::sharding::{
    CrashPoints, DurableSpec, EntitySpec, FAST_LEASE_OVERRIDES, KindSpec, ReliableSpec,
    ReliableStats, ShardingConfig, ShardingWorld, StoreStats, TrafficConfig, entity_name,
    fast_membership, fast_settings, fast_world, handoff_mode_toml,
};
use shardik_sim::world::{NodeId, World};

/// Entities per kind in most scenarios (enough to touch nearly all 24 shards).
const ENTITIES: usize = 60;

/// [`fast_world`], with every seed named by an alias when `SHARDIK_SIM_SEED_ALIASES=1` (a
/// variant of the sweeps: every join then goes through the identification of aliases).
fn world_cfg(seed: u64) -> shardik_sim::world::WorldConfig {
    let mut cfg = fast_world(seed);
    cfg.seed_aliases = std::env::var("SHARDIK_SIM_SEED_ALIASES").is_ok_and(|v| v == "1");
    cfg
}

fn sim(seed: u64, cfg: ShardingConfig) -> ShardingWorld {
    ShardingWorld::new(world_cfg(seed), cfg)
}

/// A formed cluster of `n` nodes of the default settings.
fn cluster(seed: u64, cfg: ShardingConfig, n: usize) -> ShardingWorld {
    let mut s = sim(seed, cfg);
    let (_, at) = s.form_cluster(n);
    assert!(at.is_some(), "seed {seed}: the cluster did not form");
    s
}

fn with_roles(roles: &[&str]) -> MembershipConfig {
    let mut m = fast_membership();
    m.roles = roles.iter().map(|r| r.to_string()).collect();
    m
}

/// The last sharding and membership events, for failure messages.
fn tail(s: &ShardingWorld) -> String {
    let mut lines: Vec<(Instant, String)> = s
        .timeline()
        .iter()
        .chain(s.world().timeline().iter().filter(|e| {
            e.node.is_none()
                || e.what.starts_with("Member")
                || e.what.contains("eachable")
                || e.what.starts_with("shutdown")
        }))
        .map(|e| (e.at, format!("{:?} {:?} {}", e.at, e.node, e.what)))
        .collect();
    lines.sort();
    let lines: Vec<String> = lines.into_iter().map(|(_, l)| l).collect();
    let keep: usize = std::env::var("SHARDIK_SIM_TAIL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    lines[lines.len().saturating_sub(keep)..].join("\n")
}

fn assert_clean(s: &ShardingWorld, seed: u64) {
    let v = s.violations();
    if s.config().reliable.is_some() && !v.is_empty() {
        eprintln!("seed {seed}: {}", s.delivery().stats());
    }
    dump_if_asked(s);
    assert!(v.is_empty(), "seed {seed}: {v:#?}\n{}", tail(s));
}

/// For hunting: `SHARDIK_SIM_DUMP=FROM..TO` (seconds) prints that part of the timeline, and
/// with `SHARDIK_SIM_DUMP_ENTITY=e-N` every message to that entity.
fn dump_if_asked(s: &ShardingWorld) {
    if let Some((from, to)) = std::env::var("SHARDIK_SIM_DUMP").ok().and_then(|r| {
        r.split_once("..")
            .map(|(a, b)| (a.to_string(), b.to_string()))
    }) {
        let from = Instant::from_millis(from.parse::<u64>().unwrap_or(0) * 1000);
        let to = Instant::from_millis(to.parse::<u64>().unwrap_or(0) * 1000);
        // The sharding layer's timeline and the world's (faults, pauses, heals), merged.
        let mut entries: Vec<_> = s
            .timeline()
            .iter()
            .chain(s.world().timeline())
            .filter(|e| e.at >= from && e.at <= to)
            .collect();
        entries.sort_by_key(|e| e.at);
        for e in entries {
            eprintln!("{} {:?} {}", e.at, e.node, e.what);
        }
        if let Ok(entity) = std::env::var("SHARDIK_SIM_DUMP_ENTITY") {
            for (id, r) in s.ledger().sent() {
                if r.entity.as_ref() == entity {
                    eprintln!(
                        "msg {id} seq {} via {} at {} delivered {:?}",
                        r.seq,
                        r.via,
                        r.at,
                        s.ledger().deliveries(*id)
                    );
                }
            }
        }
    }
}

/// Sends one message to each of the first `entities` entities of `kind` through `via` and runs
/// until each was delivered, sending again any a region reported dropped (as a client would
/// on that error: drop mode drops what a hand-off catches) or that was lost with a node that
/// crashed (as a client would after its ask timed out). Returns the entities that did not
/// answer within `max`.
fn unanswered(
    s: &mut ShardingWorld,
    via: NodeId,
    kind: usize,
    entities: usize,
    max: Duration,
) -> Vec<String> {
    let deadline = s.now() + max;
    let mut pending: BTreeMap<String, Option<u64>> = (0..entities)
        .map(|i| {
            let e = entity_name(i);
            let id = s.tell(via, kind, &e);
            (e, id)
        })
        .collect();
    loop {
        pending.retain(|_, id| !id.is_some_and(|id| s.ledger().is_delivered(id)));
        if pending.is_empty() || s.now() >= deadline {
            return pending.into_keys().collect();
        }
        let gone = |s: &ShardingWorld, id: u64| {
            let l = s.ledger();
            l.is_dropped(id) || l.lost_on_wire().contains(&id) || l.lost_with_node().contains(&id)
        };
        for (e, id) in pending.iter_mut() {
            if id.is_none_or(|id| gone(s, id)) {
                *id = s.tell(via, kind, e);
            }
        }
        let ids: Vec<u64> = pending.values().flatten().copied().collect();
        let step = (deadline - s.now()).min(Duration::from_secs(1));
        let before = s.now();
        s.run_until_pred(step, |s| {
            ids.iter()
                .all(|id| s.ledger().is_delivered(*id) || gone(s, *id))
        });
        if s.now() == before {
            // Dropped at once: back off before trying again, as a client would.
            s.run_for(Duration::from_millis(100));
        }
    }
}

/// Whether every entity of `kind` answers a message sent through `via` within a minute.
fn every_entity_answers(s: &mut ShardingWorld, via: NodeId, kind: usize, entities: usize) -> bool {
    unanswered(s, via, kind, entities, Duration::from_secs(60)).is_empty()
}

/// Starts every entity of kind 0 (so each of their shards has a home) and waits for it.
fn warm_up(s: &mut ShardingWorld, seed: u64, via: NodeId, entities: usize) {
    assert!(
        every_entity_answers(s, via, 0, entities),
        "seed {seed}: warm-up did not reach every entity\n{}",
        tail(s)
    );
}

fn traffic(per_tick: usize) -> TrafficConfig {
    TrafficConfig::new(Duration::from_millis(20), per_tick, ENTITIES)
}

/// Stops the clients and lets everything in flight settle.
fn quiesce(s: &mut ShardingWorld) {
    s.set_traffic(None);
    s.run_for(Duration::from_secs(15));
}

/// Every message was delivered exactly once; none dropped, none lost.
fn assert_all_delivered_once(s: &ShardingWorld, seed: u64) {
    let l = s.ledger();
    let missing = l.unaccounted();
    assert!(
        missing.is_empty(),
        "seed {seed}: {} of {} messages never arrived, e.g. {:?}\n{}",
        missing.len(),
        l.sent_count(),
        missing
            .iter()
            .take(5)
            .map(|id| &l.sent()[id])
            .collect::<Vec<_>>(),
        tail(s)
    );
    assert_eq!(
        l.dropped_count(),
        0,
        "seed {seed}: {:?}",
        l.drops_by_reason()
    );
    assert!(l.duplicates().is_empty(), "seed {seed}: duplicates");
    assert_eq!(l.delivered_count(), l.sent_count(), "seed {seed}");
}

/// Shards of `kind` each node hosts now, as node → shards.
fn shards_by_node(s: &ShardingWorld, kind: usize) -> BTreeMap<NodeId, BTreeSet<ShardId>> {
    let mut out: BTreeMap<NodeId, BTreeSet<ShardId>> = BTreeMap::new();
    for (shard, nodes) in s.hosts(kind) {
        for n in nodes {
            out.entry(n).or_default().insert(shard.clone());
        }
    }
    out
}

fn hand_offs_started(s: &ShardingWorld) -> usize {
    s.timeline()
        .iter()
        .filter(|e| e.what.contains("HandOffStarted"))
        .count()
}

#[test]
fn same_seed_same_run() {
    let run = |seed| {
        let mut s = cluster(seed, ShardingConfig::fast(HandOffMode::Forward), 3);
        s.set_traffic(Some(traffic(2)));
        s.run_for(Duration::from_secs(5));
        s.crash(2);
        s.run_for(Duration::from_secs(20));
        (
            s.timeline().to_vec(),
            s.host_events().to_vec(),
            s.ledger().delivered_count(),
        )
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7).0, run(8).0);
}

#[test]
fn coordinator_node_crash_moves_the_coordinator_and_its_shards() {
    for seed in 1..=8 {
        let mut s = cluster(seed, ShardingConfig::fast(HandOffMode::Forward), 5);
        warm_up(&mut s, seed, 2, ENTITIES);
        assert_eq!(
            s.coordinator_nodes(0),
            vec![0],
            "seed {seed}: oldest runs it"
        );
        let lost_shards = shards_by_node(&s, 0).remove(&0).unwrap_or_default();
        assert!(
            !lost_shards.is_empty(),
            "seed {seed}: node 0 hosted nothing"
        );
        s.set_traffic(Some(traffic(2)));
        s.run_for(Duration::from_secs(2));
        s.crash(0);
        let moved = s.run_until_pred(Duration::from_secs(60), |s| {
            s.coordinator_nodes(0) == vec![1]
                && s.node(1)
                    .is_some_and(|n| n.coordinator(0).is_some_and(|c| c.may_allocate()))
        });
        assert!(
            moved.is_some(),
            "seed {seed}: no new coordinator\n{}",
            tail(&s)
        );
        quiesce(&mut s);
        for via in 1..5 {
            assert!(
                every_entity_answers(&mut s, via, 0, ENTITIES),
                "seed {seed}: an entity did not answer through node {via}\n{}",
                tail(&s)
            );
        }
        let hosts = s.hosts(0);
        for shard in &lost_shards {
            let h = &hosts[shard];
            assert!(
                h.len() == 1 && h[0] != 0,
                "seed {seed}: shard {shard} on {h:?}"
            );
        }
        assert_eq!(s.coordinator_nodes(0), vec![1]);
        assert_clean(&s, seed);
    }
}

#[test]
fn region_crash_re_homes_its_shards_and_keeps_the_coordinator() {
    for seed in 1..=8 {
        let mut s = cluster(seed, ShardingConfig::fast(HandOffMode::Forward), 5);
        warm_up(&mut s, seed, 0, ENTITIES);
        let lost_shards = shards_by_node(&s, 0).remove(&3).unwrap_or_default();
        assert!(
            !lost_shards.is_empty(),
            "seed {seed}: node 3 hosted nothing"
        );
        s.set_traffic(Some(traffic(2)));
        s.run_for(Duration::from_secs(2));
        let crash_at = s.now();
        s.crash(3);
        s.run_for(Duration::from_secs(30));
        quiesce(&mut s);
        for via in [0, 1, 2, 4] {
            assert!(
                every_entity_answers(&mut s, via, 0, ENTITIES),
                "seed {seed}: an entity did not answer through node {via}\n{}",
                tail(&s)
            );
        }
        let hosts = s.hosts(0);
        for shard in &lost_shards {
            assert!(
                hosts[shard] != vec![3],
                "seed {seed}: shard {shard} not moved"
            );
        }
        let restarted = s
            .timeline()
            .iter()
            .any(|e| e.at >= crash_at && e.what.contains("coordinator started"));
        assert!(!restarted, "seed {seed}: the coordinator moved");
        assert_eq!(s.coordinator_nodes(0), vec![0]);
        assert_clean(&s, seed);
    }
}

/// A fourth node joins a loaded cluster of three; rebalancing moves shards to it while
/// clients keep sending through every node.
fn rebalance_under_load(seed: u64, mode: HandOffMode) -> ShardingWorld {
    let mut s = cluster(seed, ShardingConfig::fast(mode), 3);
    warm_up(&mut s, seed, 0, ENTITIES);
    s.set_traffic(Some(traffic(4)));
    s.run_for(Duration::from_secs(3));
    let joiner = s.add_node();
    s.join(joiner, &[0]);
    let balanced = s.run_until_pred(Duration::from_secs(60), |s| {
        s.shard_counts(0).get(&joiner).is_some_and(|n| *n >= 5)
    });
    assert!(
        balanced.is_some(),
        "seed {seed}: the new node got {:?} shards\n{}",
        s.shard_counts(0),
        tail(&s)
    );
    s.run_for(Duration::from_secs(3));
    quiesce(&mut s);
    assert!(hand_offs_started(&s) >= 5, "seed {seed}: no rebalance");
    s
}

#[test]
fn rebalance_to_a_new_node_under_load_loses_nothing_in_forward_mode() {
    for seed in 1..=8 {
        let s = rebalance_under_load(seed, HandOffMode::Forward);
        assert!(
            s.ledger().sent_count() > 1000,
            "seed {seed}: too little load"
        );
        assert_all_delivered_once(&s, seed);
        assert_clean(&s, seed);
    }
}

#[test]
fn rebalance_in_drop_mode_reports_every_message_it_does_not_deliver() {
    let mut dropped = 0;
    for seed in 1..=8 {
        let s = rebalance_under_load(seed, HandOffMode::Drop);
        let l = s.ledger();
        let missing = l.unaccounted();
        assert!(
            missing.is_empty(),
            "seed {seed}: {} messages neither delivered nor reported\n{}",
            missing.len(),
            tail(&s)
        );
        assert!(l.duplicates().is_empty(), "seed {seed}");
        assert_eq!(l.delivered_count() + l.dropped_count(), l.sent_count());
        dropped += l.dropped_count();
        assert_clean(&s, seed);
    }
    // Drop mode drops what the old home buffered during a hand-off; under this load some
    // message always is.
    assert!(
        dropped > 0,
        "drop mode never dropped anything: the scenario lacks load"
    );
}

#[test]
fn two_nodes_leaving_at_once_including_the_coordinator_lose_nothing() {
    for seed in 1..=8 {
        let mut s = cluster(seed, ShardingConfig::fast(HandOffMode::Forward), 5);
        warm_up(&mut s, seed, 2, ENTITIES);
        let before: BTreeSet<ShardId> = s.hosts(0).into_keys().collect();
        s.set_traffic(Some(traffic(3)));
        s.run_for(Duration::from_secs(2));
        s.leave(0);
        s.leave(1);
        let rest = [2, 3, 4];
        let left = s.run_until_pred(Duration::from_secs(60), |s| {
            s.world().all_up(&rest) && s.coordinator_nodes(0) == vec![2]
        });
        assert!(
            left.is_some(),
            "seed {seed}: the leave did not finish\n{}",
            tail(&s)
        );
        for id in [0, 1] {
            assert_eq!(
                s.world().shutdown_reason(id),
                Some(&ShutdownReason::Left),
                "seed {seed}"
            );
        }
        quiesce(&mut s);
        let after = s.hosts(0);
        for shard in &before {
            let h = after.get(shard).cloned().unwrap_or_default();
            assert!(
                h.len() == 1 && rest.contains(&h[0]),
                "seed {seed}: shard {shard} is on {h:?}"
            );
        }
        assert_all_delivered_once(&s, seed);
        for via in rest {
            assert!(
                every_entity_answers(&mut s, via, 0, ENTITIES),
                "seed {seed}"
            );
        }
        assert_clean(&s, seed);
    }
}

/// Every way of leaving hands the shards off first: here another member asks for the leave
/// (as `PUT /cluster/members/{address}` on any node does), so the leaving node's own code
/// never asked its regions to shut down; they see their node Leaving and hand off, and the
/// node confirms Exiting only after that.
#[test]
fn a_leave_asked_by_another_member_hands_every_shard_off_first() {
    for seed in 1..=8 {
        let mut s = cluster(seed, ShardingConfig::fast(HandOffMode::Forward), 4);
        warm_up(&mut s, seed, 0, ENTITIES);
        let victim = 2;
        let had: BTreeSet<ShardId> = shards_by_node(&s, 0).remove(&victim).unwrap_or_default();
        assert!(!had.is_empty(), "seed {seed}: node {victim} hosts shards");
        s.set_traffic(Some(TrafficConfig {
            senders: Some(vec![0, 1, 3]),
            ..traffic(3)
        }));
        s.run_for(Duration::from_secs(2));
        s.world_mut()
            .command(0, Command::Leave(World::address_of(victim)));
        let rest = [0, 1, 3];
        let left = s.run_until_pred(Duration::from_secs(60), |s| {
            s.world().shutdown_reason(victim).is_some() && s.world().all_up(&rest)
        });
        assert!(
            left.is_some(),
            "seed {seed}: the leave did not finish\n{}",
            tail(&s)
        );
        assert_eq!(
            s.world().shutdown_reason(victim),
            Some(&ShutdownReason::Left),
            "seed {seed}"
        );
        quiesce(&mut s);
        let after = s.hosts(0);
        for shard in &had {
            let h = after.get(shard).cloned().unwrap_or_default();
            assert!(
                h.len() == 1 && rest.contains(&h[0]),
                "seed {seed}: shard {shard} is on {h:?}"
            );
        }
        assert!(
            hand_offs_started(&s) >= had.len(),
            "seed {seed}: handed off, not lost"
        );
        assert_all_delivered_once(&s, seed);
        assert_clean(&s, seed);
    }
}

#[test]
fn min_nr_of_members_holds_allocation_back_then_spreads_over_all() {
    let seed = 3;
    let mut cfg = ShardingConfig::fast(HandOffMode::Forward);
    // Set on the coordinator alone: the key (`min-nr-of-members`) would also hold the members
    // back from Up, which this test needs them to reach.
    cfg.sharding.coordinator.min_members = 3;
    let mut s = sim(seed, cfg);
    let (first, at) = s.form_cluster(1);
    assert!(at.is_some());
    let mut t = TrafficConfig::new(Duration::from_millis(100), 2, 30);
    t.senders = Some(first.clone());
    s.set_traffic(Some(t));
    s.run_for(Duration::from_secs(8));
    let second = s.add_node();
    s.join(second, &[0]);
    s.run_for(Duration::from_secs(10));
    assert!(s.world().all_up(&[0, 1]), "seed {seed}: two nodes are Up");
    assert!(
        s.hosts(0).is_empty(),
        "seed {seed}: allocated with two regions"
    );
    assert_eq!(s.ledger().delivered_count(), 0);
    assert!(s.ledger().sent_count() > 100);
    let third = s.add_node();
    s.join(third, &[0]);
    s.run_for(Duration::from_secs(10));
    quiesce(&mut s);
    // Everything buffered while waiting arrives, and the shards are spread over all three.
    assert_all_delivered_once(&s, seed);
    let counts = s.shard_counts(0);
    let (lo, hi) = (
        counts.values().min().copied().unwrap_or(0),
        counts.values().max().copied().unwrap_or(0),
    );
    assert_eq!(counts.len(), 3);
    assert!(lo >= 3 && hi - lo <= 2, "seed {seed}: {counts:?}");
    assert_clean(&s, seed);
}

#[test]
fn a_node_without_the_role_routes_through_a_proxy_and_hosts_nothing() {
    let seed = 5;
    let cfg = ShardingConfig::fast(HandOffMode::Forward)
        .with_kinds(vec![KindSpec::with_role("counter", "worker")]);
    let mut s = sim(seed, cfg);
    // The oldest node (and leader) has no role: the coordinator runs on the oldest worker.
    let (ids, at) = s.form_cluster_with(vec![
        with_roles(&[]),
        with_roles(&["worker"]),
        with_roles(&["worker"]),
        with_roles(&["worker"]),
    ]);
    assert!(at.is_some());
    assert!(s.node(0).is_some_and(|n| n.region(0).is_proxy()));
    let mut t = traffic(3);
    t.senders = Some(vec![0]);
    s.set_traffic(Some(t));
    s.run_for(Duration::from_secs(10));
    quiesce(&mut s);
    assert!(s.ledger().sent_count() > 1000);
    assert_all_delivered_once(&s, seed);
    assert_eq!(s.coordinator_nodes(0), vec![1]);
    let counts = s.shard_counts(0);
    assert_eq!(counts[&0], 0, "the proxy hosts nothing");
    assert!(s.node(0).is_some_and(|n| n.entities(0).is_empty()));
    assert!(ids[1..].iter().all(|w| counts[w] > 0), "{counts:?}");
    assert_clean(&s, seed);
}

#[test]
fn roles_keep_two_kinds_on_their_own_nodes() {
    let seed = 9;
    let cfg = ShardingConfig::fast(HandOffMode::Forward).with_kinds(vec![
        KindSpec::with_role("alpha", "a"),
        KindSpec::with_role("beta", "b"),
    ]);
    let mut s = sim(seed, cfg);
    let (_, at) = s.form_cluster_with(vec![
        with_roles(&["a"]),
        with_roles(&["b"]),
        with_roles(&["a"]),
        with_roles(&["b"]),
    ]);
    assert!(at.is_some());
    let mut t = traffic(4);
    t.kinds = vec![0, 1];
    s.set_traffic(Some(t));
    s.run_for(Duration::from_secs(10));
    quiesce(&mut s);
    assert_all_delivered_once(&s, seed);
    let a = shards_by_node(&s, 0);
    let b = shards_by_node(&s, 1);
    assert_eq!(
        a.keys().copied().collect::<Vec<_>>(),
        vec![0, 2],
        "alpha on {a:?}"
    );
    assert_eq!(
        b.keys().copied().collect::<Vec<_>>(),
        vec![1, 3],
        "beta on {b:?}"
    );
    assert_eq!(s.coordinator_nodes(0), vec![0]);
    assert_eq!(s.coordinator_nodes(1), vec![1]);
    for id in 0..4 {
        let n = s.node(id).expect("running");
        assert_eq!(n.region(0).is_proxy(), id % 2 == 1);
        assert_eq!(n.region(1).is_proxy(), id % 2 == 0);
    }
    assert_clean(&s, seed);
}

/// A member whose application never starts the kind (here node 3 of four, by its role
/// "bare") answers the coordinator's announcement with `KindNotStarted`: allocation proceeds
/// among the three regions that registered, every message is delivered once, node 3 hosts
/// nothing, and each shard has at most one home throughout (the checker). Then the
/// coordinator's node crashes: the next coordinator (a new incarnation elsewhere) is answered
/// too and re-homes the lost shards.
#[test]
fn a_member_that_never_starts_the_kind_does_not_hold_allocation_back() {
    for seed in 1..=6 {
        let cfg = ShardingConfig::fast(HandOffMode::Forward)
            .with_kinds(vec![KindSpec::new("counter").not_started_with_role("bare")]);
        let mut s = sim(seed, cfg);
        let (ids, at) = s.form_cluster_with(vec![
            with_roles(&[]),
            with_roles(&[]),
            with_roles(&[]),
            with_roles(&["bare"]),
        ]);
        assert!(at.is_some(), "seed {seed}: the cluster did not form");
        assert!(s.node(ids[3]).is_some_and(|n| !n.started(0)));
        let mut t = traffic(3);
        t.senders = Some(vec![ids[0], ids[1], ids[2]]);
        s.set_traffic(Some(t));
        s.run_for(Duration::from_secs(10));
        let counts = s.shard_counts(0);
        assert_eq!(counts.get(&ids[3]).copied().unwrap_or(0), 0, "seed {seed}");
        assert!(
            ids[..3].iter().all(|n| counts[n] > 0),
            "seed {seed}: {counts:?}"
        );
        let said_so = |s: &ShardingWorld| {
            s.timeline()
                .iter()
                .filter(|e| e.what.contains("KindNotStarted("))
                .count()
        };
        assert_eq!(said_so(&s), 1, "seed {seed}\n{}", tail(&s));
        // The coordinator's node crashes; its shards get new homes among nodes 1 and 2.
        assert_eq!(s.coordinator_nodes(0), vec![ids[0]]);
        s.crash(ids[0]);
        let mut t = traffic(3);
        t.senders = Some(vec![ids[1], ids[2]]);
        s.set_traffic(Some(t));
        s.run_for(Duration::from_secs(40));
        assert_eq!(s.coordinator_nodes(0), vec![ids[1]], "seed {seed}");
        assert_eq!(
            said_so(&s),
            2,
            "seed {seed}: the new coordinator was answered too"
        );
        quiesce(&mut s);
        assert!(
            every_entity_answers(&mut s, ids[2], 0, ENTITIES),
            "seed {seed}: after the crash\n{}",
            tail(&s)
        );
        let counts = s.shard_counts(0);
        assert_eq!(counts.get(&ids[3]).copied().unwrap_or(0), 0, "seed {seed}");
        assert_clean(&s, seed);
    }
}

#[test]
fn a_3_2_partition_re_homes_the_minority_shards_only_after_the_margin() {
    for seed in 1..=8 {
        let mut s = cluster(seed, ShardingConfig::fast(HandOffMode::Forward), 5);
        warm_up(&mut s, seed, 3, ENTITIES);
        // The minority holds the coordinator (node 0, the oldest) and node 1.
        let minority: BTreeSet<ShardId> = shards_by_node(&s, 0)
            .into_iter()
            .filter(|(n, _)| *n < 2)
            .flat_map(|(_, shards)| shards)
            .collect();
        assert!(!minority.is_empty());
        s.set_traffic(Some(traffic(2)));
        s.run_for(Duration::from_secs(2));
        let cut_at = s.now();
        s.partition(&[&[0, 1], &[2, 3, 4]]);
        let settled = s.run_until_pred(Duration::from_secs(90), |s| {
            s.world().all_up(&[2, 3, 4]) && s.coordinator_nodes(0) == vec![2]
        });
        assert!(
            settled.is_some(),
            "seed {seed}: the majority did not recover\n{}",
            tail(&s)
        );
        quiesce(&mut s);
        for via in [2, 3, 4] {
            assert!(
                every_entity_answers(&mut s, via, 0, ENTITIES),
                "seed {seed}: an entity did not answer\n{}",
                tail(&s)
            );
        }
        for id in [0, 1] {
            assert_eq!(
                s.world().shutdown_reason(id),
                Some(&ShutdownReason::Downed),
                "seed {seed}"
            );
        }
        // When the majority first removed a minority member, and when the minority died.
        let removed_at = s
            .world()
            .timeline()
            .iter()
            .filter(|e| e.node.is_some_and(|n| n >= 2))
            .filter(|e| {
                e.what.starts_with("MemberRemoved node-00000")
                    || e.what.starts_with("MemberRemoved node-00001")
            })
            .map(|e| e.at)
            .min()
            .expect("the majority removed the minority");
        let margin = s.config().sharding.down_removal_margin;
        let rehomed: Vec<_> = s
            .host_events()
            .iter()
            .filter(|e| e.started && e.at > cut_at && e.node >= 2 && minority.contains(&e.shard))
            .collect();
        assert!(!rehomed.is_empty(), "seed {seed}: nothing re-homed");
        for e in rehomed {
            assert!(
                e.at >= removed_at + margin,
                "seed {seed}: shard {} re-homed at {:?}, removal at {removed_at:?}",
                e.shard,
                e.at
            );
        }
        assert_clean(&s, seed);
    }
}

/// What the random scenario waits for, after healing, before it cuts a new partition.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Settle {
    /// A clean cluster: every running member is Up, sees exactly the running members, agrees
    /// with the others, and has no unreachability record left (at most 40 s; the partition is
    /// skipped if that does not happen). The default.
    Clean,
    /// Only that no running node sees another running node as unreachable (at most 20 s).
    /// This lets a node that the others removed while it could not hear them (a "zombie")
    /// still run when the next partition cuts it off again; see
    /// `a_brief_heal_lets_a_removed_node_outlive_the_down_removal_margin`.
    Reachability,
}

/// Heals the network and waits as `settle` says. Returns whether a partition may be cut now.
///
/// Partitions are only ever cut from a settled network, because this very test found that
/// cutting a network that is still sorting out earlier faults goes wrong in ways sharding
/// cannot defend against on its own:
///
/// * stale "unreachable" records (from observers that have since recovered, or that are then
///   cut off themselves) make the split-brain resolver's indirectly-connected rule (the
///   reference's) keep both sides alive: a split brain (seeds 497 and 3747, reproduced by
///   `membership_scenarios::reshaped_partition_before_reachability_recovers_*`);
/// * cutting again right after a heal can leave a node that the majority removed, and whose
///   own resolver clock the heal restarted, running past the down-removal margin
///   ([`Settle::Reachability`]).
fn heal_and_settle(s: &mut ShardingWorld, settle: Settle) -> bool {
    s.heal();
    match settle {
        Settle::Clean => s
            .run_until_pred(Duration::from_secs(40), |s| {
                let w = s.world();
                let members: Vec<NodeId> = w
                    .alive_nodes()
                    .into_iter()
                    .filter(|&i| w.core(i).is_member())
                    .collect();
                !members.is_empty()
                    && w.all_up(&members)
                    && w.agreed()
                    && members.iter().all(|&i| {
                        w.core(i)
                            .gossip()
                            .reachability
                            .records()
                            .all(|(_, _, st)| st == ReachabilityStatus::Reachable)
                    })
            })
            .is_some(),
        Settle::Reachability => {
            s.run_until_pred(Duration::from_secs(20), |s| {
                let w = s.world();
                let alive = w.alive_nodes();
                alive.iter().all(|&i| {
                    w.core(i)
                        .gossip()
                        .unreachable_members()
                        .iter()
                        .all(|u| !alive.iter().any(|&j| w.core(j).self_node() == u))
                })
            });
            true
        }
    }
}

/// Random faults under traffic: crashes, short pauses, partitions and heals, joins of new
/// nodes and graceful leaves, in either hand-off mode. Afterwards the network heals, every
/// slot that is no longer a member comes back as a new incarnation, and every entity must
/// answer; the checker must have found nothing, and every message must be delivered,
/// reported dropped, or lost to a crash or a cut link.
fn chaos(seed: u64) {
    chaos_with(seed, Settle::Clean, Timing::FAST);
}

/// The timing of the random scenario.
#[derive(Copy, Clone, Debug)]
struct Timing {
    /// The resolver's stable-after, and the down-removal margin.
    stable_after: Duration,
    /// Longest time between two faults.
    longest_phase: Duration,
    /// Whether nodes fence themselves after stable-after without a majority (as the runtime
    /// does with keep-majority).
    self_fence: bool,
}

impl Timing {
    /// What the tests run: [`FAST_STABLE_AFTER`], phases up to 20 s.
    const FAST: Timing = Timing {
        stable_after: FAST_STABLE_AFTER,
        longest_phase: Duration::from_secs(20),
        self_fence: true,
    };
    /// What the scenario first ran with: 5 s (too short for the failure detector; see
    /// [`FAST_STABLE_AFTER`]), phases up to 12 s. Kept to replay the seeds it found.
    const FIRST: Timing = Timing {
        stable_after: Duration::from_secs(5),
        longest_phase: Duration::from_secs(12),
        self_fence: true,
    };
    /// [`Timing::FIRST`] without self-fencing: the seeds that ran an entity twice before
    /// fencing still do, to show what the store does then.
    const FIRST_UNFENCED: Timing = Timing {
        self_fence: false,
        ..Timing::FIRST
    };
}

fn chaos_with(seed: u64, settle: Settle, timing: Timing) -> ShardingWorld {
    chaos_run(seed, settle, timing, Variant::default(), Expect::Clean)
}

/// What the random scenario asserts at the end.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Expect {
    /// Every invariant: membership, sharding, durable entities.
    Clean,
    /// Only the durable entities' invariants (for a run known to break sharding's).
    DurableOnly,
    /// Nothing at the end: the caller looks at the violations (a run with a deliberate
    /// fault, which the checkers must catch).
    Unchecked,
}

/// What the entities of the random scenario are and do beyond the plain ones.
#[derive(Default)]
struct Variant {
    /// Durable entities, persisting to the store.
    durable: Option<DurableSpec>,
    /// Shards and coordinators under leases ([`FAST_LEASE_OVERRIDES`]).
    leases: bool,
    /// What the entities' handlers do (handling time, failures, timers).
    entities: EntitySpec,
    /// Configuration on top of the fast settings (TOML), such as how the entities live
    /// (passivation, remembering).
    config: &'static str,
    /// Crashes are silent (the crashed node's machine refuses no connection), as every crash
    /// was before refusals were modelled: the scenarios that reproduce a fault found then.
    silent_crashes: bool,
    /// Nodes may also lose the store (not their peers) for a while: one more fault to draw
    /// from, drawn only in this variant so that the other seeds keep their fault sequences.
    /// (Every partition already cuts nodes off from their peers and not from the store: the
    /// simulated store is reached whatever the partitions.)
    store_cuts: bool,
    /// Reliable producers on some nodes, delivering to the durable entities; with one more
    /// fault to draw (drawn only in this variant): a producer restarted from its queue, or
    /// its node crashed.
    reliable: Option<ReliableSpec>,
}

/// No lease, even for durable entities (whose default, "auto", takes them): the scenarios that
/// show what happens without one.
const NO_LEASES: &str = r#"
[cluster.sharding]
use-lease = ""

[cluster.sharding.coordinator-singleton]
use-lease = ""
"#;

/// The random scenario, with the entities `variant` describes.
fn chaos_run(
    seed: u64,
    settle: Settle,
    timing: Timing,
    variant: Variant,
    expect: Expect,
) -> ShardingWorld {
    let Variant {
        durable,
        leases,
        entities,
        config,
        silent_crashes,
        store_cuts,
        reliable,
    } = variant;
    let producers = reliable.as_ref().map(|r| r.producers.clone());
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xc4a0_5000);
    let mode = if seed.is_multiple_of(2) {
        HandOffMode::Forward
    } else {
        HandOffMode::Drop
    };
    // The resolver's stable-after, and with it (as the runtime derives them) the down-removal
    // margin and the self-fencing delay.
    let stable_after = format!(
        "[cluster.split-brain-resolver]\nstable-after = \"{}ms\"\n",
        timing.stable_after.as_millis()
    );
    let mut layers = vec![handoff_mode_toml(mode), stable_after.as_str()];
    if leases {
        layers.push(FAST_LEASE_OVERRIDES);
    }
    layers.push(config);
    let node = fast_settings(&layers).node_settings();
    let mut wcfg = world_cfg(seed);
    wcfg.refuse_connections = !silent_crashes;
    wcfg.check_states = false;
    wcfg.membership = node.membership;
    let mut cfg = ShardingConfig::with_sharding(node.sharding);
    if !timing.self_fence {
        // No key turns self-fencing off under keep-majority: the scenario that shows what the
        // store does without it takes it away here.
        cfg.sharding.self_fence_after = None;
    }
    cfg.durable = durable;
    cfg.entities = entities;
    cfg.reliable = reliable;
    let mut s = ShardingWorld::new(wcfg, cfg);
    let n = rng.random_range(3..6);
    let (_, at) = s.form_cluster(n);
    assert!(at.is_some(), "seed {seed}: no cluster");
    s.set_traffic(Some(TrafficConfig::new(Duration::from_millis(50), 2, 40)));
    s.run_for(Duration::from_secs(3));
    for _ in 0..rng.random_range(3..8) {
        let slots = s.world().len();
        let victim = rng.random_range(0..slots);
        let faults = 6 + usize::from(store_cuts) + usize::from(producers.is_some());
        match rng.random_range(0..faults) {
            6 if store_cuts => {
                s.cut_from_store(victim, Duration::from_millis(rng.random_range(500..15_000)))
            }
            // A producer's node: its producer is stopped and started again from its queue, or
            // the node crashes with whatever the producer had out.
            6.. => {
                let producers = producers.as_deref().unwrap_or_default();
                let id = producers[rng.random_range(0..producers.len())];
                if rng.random_bool(0.5) {
                    s.restart_producer(id);
                } else {
                    s.crash(id);
                }
            }
            0 => s.crash(victim),
            // Under leases, pauses may outlast a lease (and the resolver): the paused node
            // wakes up holding shards whose leases others may have taken meanwhile.
            1 if leases => s.pause(victim, Duration::from_millis(rng.random_range(200..30_000))),
            1 => s.pause(victim, Duration::from_millis(rng.random_range(200..2500))),
            2 | 3 if slots >= 3 => {
                let cut = rng.random_range(1..slots);
                if heal_and_settle(&mut s, settle) {
                    let all: Vec<NodeId> = (0..slots).collect();
                    let (a, b) = all.split_at(cut);
                    s.partition(&[a, b]);
                }
            }
            4 if slots < 7 => {
                let id = s.add_node();
                let seeds: Vec<NodeId> = s.world().alive_nodes().into_iter().take(3).collect();
                s.join(id, &seeds);
            }
            _ if s.world().core(victim).self_status() == Some(MemberStatus::Up) => s.leave(victim),
            _ => {}
        }
        let longest = timing.longest_phase.as_millis() as u64;
        s.run_for(Duration::from_millis(rng.random_range(1000..longest)));
        if rng.random_bool(0.6) {
            s.heal();
        }
    }
    s.heal();
    // Let the resolver, the leader and pending leaves finish what the faults started.
    s.run_for(Duration::from_secs(30));
    let slots = s.world().len();
    let all: Vec<NodeId> = (0..slots).collect();
    // The operator restarts what is gone and joins it to what is left. A member picked as a
    // seed may still be on its way out (a minority the resolver downs a moment later, seed
    // 2530): then the joiners wait for it in vain, so the operator looks again once.
    let mut up = None;
    for _ in 0..2 {
        let members: Vec<NodeId> = s
            .world()
            .alive_nodes()
            .into_iter()
            .filter(|&i| {
                s.world().core(i).is_member() && !s.node(i).is_some_and(|n| n.is_leaving())
            })
            .collect();
        let seeds: Vec<NodeId> = if members.is_empty() {
            (0..slots.min(3)).collect()
        } else {
            members.iter().copied().take(3).collect()
        };
        for id in 0..slots {
            if !members.contains(&id) {
                s.restart(id);
                s.join(id, &seeds);
            }
        }
        up = s.run_until_pred(Duration::from_secs(120), |s| {
            s.world().all_up(&all) && s.world().agreed()
        });
        if up.is_some() {
            break;
        }
    }
    if up.is_none() && std::env::var("SHARDIK_SIM_DEBUG").is_ok() {
        for id in s.world().alive_nodes() {
            let c = s.world().core(id);
            let view: Vec<String> = c
                .gossip()
                .members
                .values()
                .map(|m| {
                    format!(
                        "{}#{} {:?}",
                        m.addr.address.host,
                        m.addr.uid % 10000,
                        m.status
                    )
                })
                .collect();
            eprintln!(
                "node {id} {:?} status {:?} member {} sees {view:?} unreachable {:?}",
                c.self_node().uid % 10000,
                c.self_status(),
                c.is_member(),
                c.gossip().unreachable_members()
            );
        }
    }
    assert!(
        up.is_some(),
        "seed {seed}: the cluster did not recover; violations {:#?}\n{}",
        s.violations(),
        tail(&s)
    );
    s.run_for(Duration::from_secs(10));
    s.set_traffic(None);
    s.run_for(Duration::from_secs(10));
    let via = all[rng.random_range(0..all.len())];
    let missing = unanswered(&mut s, via, 0, 40, Duration::from_secs(60));
    if !missing.is_empty() && std::env::var("SHARDIK_SIM_DEBUG").is_ok() {
        for id in s.world().alive_nodes() {
            if let Some(n) = s.node(id) {
                let r = n.region(0);
                eprintln!(
                    "DBG node {id} coord-reg {:?} buffered {} hosted {:?} coordinator-here {} stopped {}",
                    r.coordinator().map(|c| c.uid % 10000),
                    r.buffered(),
                    r.hosted_shards().collect::<Vec<_>>(),
                    n.coordinator(0).is_some(),
                    r.is_stopped()
                );
            }
        }
        eprintln!("DBG store {:?}", s.store_stats());
        for id in s.world().alive_nodes() {
            let c = s.world().core(id);
            eprintln!(
                "DBGM node {id} self {:?} member {} members {:?}",
                c.self_node(),
                c.is_member(),
                c.gossip()
                    .members
                    .values()
                    .map(|m| (m.addr.uid % 10000, m.status))
                    .collect::<Vec<_>>()
            );
        }
        for e in s
            .timeline()
            .iter()
            .rev()
            .take(400)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
        {
            eprintln!("TL {e:?}");
        }
    }
    assert!(
        missing.is_empty(),
        "seed {seed}: entities {missing:?} did not answer through node {via}; hosts {:?}\n{}",
        s.hosts(0),
        tail(&s)
    );
    if s.config().durable.is_some() {
        // The store's crash points may have taken a node down even now: let what it held
        // (messages waiting for the home its shards get once the margin has passed) settle.
        s.run_for(Duration::from_secs(20));
    }
    let l = s.ledger();
    assert!(l.duplicates().is_empty(), "seed {seed}: duplicates");
    // Crashes and cut links lose messages; nothing else may.
    let vanished = l.vanished();
    if !vanished.is_empty() {
        dump_if_asked(&s);
    }
    assert!(
        vanished.is_empty(),
        "seed {seed}: {} messages vanished, e.g. {:?}",
        vanished.len(),
        vanished
            .iter()
            .take(5)
            .map(|id| &l.sent()[id])
            .collect::<Vec<_>>()
    );
    if mode == HandOffMode::Forward {
        let drops = l.drops_by_reason();
        assert!(
            !drops.contains_key(&DropReason::HandOff),
            "seed {seed}: forward mode dropped at hand-off: {drops:?}"
        );
    }
    if s.config().reliable.is_some() {
        // Every producer runs again (the operator restarted every node): what they accepted
        // must now be confirmed, resent as often as it takes.
        s.run_until_pred(Duration::from_secs(120), ShardingWorld::producers_settled);
        // Let the last writes and queue deletions land.
        s.run_for(Duration::from_secs(5));
        s.check_delivery();
    }
    match expect {
        Expect::Clean => assert_clean(&s, seed),
        Expect::DurableOnly => {
            let v = s.durability().violations();
            assert!(v.is_empty(), "seed {seed}: {v:#?}");
        }
        Expect::Unchecked => {}
    }
    s
}

/// Found by the random scenario (seeds 82, 670 and 871 with [`Settle::Reachability`] and
/// [`Timing::FIRST`]); seed 670 is the simplest, three nodes:
///
/// 1. {0,1} | {2}. Node 0 downs 2 (t22.3); 2's own resolver would down itself about a second
///    later (its last reachability change came later).
/// 2. The network heals in between (t22.6). Node 2 hears heartbeats again and marks 0 and 1
///    reachable (t23.3), which restarts its stable-after clock; it does not learn that it is
///    Down (nobody gossips with a node they still mark unreachable). Node 0 removes 2 (t23.3).
/// 3. The network splits the same way again (t23.4). Node 2 sees 0 and 1 unreachable again
///    and would down itself at about t34.
/// 4. At removal + margin (t28.3) nodes 0 and 1 re-home node 2's shards while 2 still hosts
///    them: two homes and two live instances until t30, when a heal tells 2 it was removed.
///
/// The down-removal margin assumes the removed side stops within the margin after the
/// removal; a brief heal can restart that side's resolver clock, so no fixed margin is enough
/// on its own. The reference has the same exposure. Self-fencing closes it: node 2 stops its
/// shards stable-after from when it first lost the majority, and the brief heal does not
/// restart that clock (see ARCHITECTURE.md, "Self-fencing"). Leases close it too
/// (`the_known_two_copy_seeds_run_one_copy_under_leases`).
#[test]
fn a_brief_heal_lets_a_removed_node_outlive_the_down_removal_margin() {
    chaos_with(670, Settle::Reachability, Timing::FIRST);
}

/// Found by the random scenario (seed 2111, drop mode; nothing on the path depends on the
/// mode). A message forwarded to a shard's new home overtakes the `HostShard` that makes it
/// the home, and the new home forwards it along a stale home entry; it comes back after the
/// same sender's later messages:
///
/// 1. Node 0, the coordinator, is cut off and crashes. When its margin passes, node 1 starts
///    the new coordinator (t31.72) with a graceful leave pending, so it hands its own shards
///    off at once, shard 19 among them. Only its own region has registered yet, so node 3
///    gets no `BeginHandOff` and keeps "19 lives on node 1".
/// 2. Node 2 has buffered its messages to e-11 (shard 19, seq 1..15) since the partition. It
///    registers, asks, and is told node 3 (t32.215); the coordinator sends `HostShard` to
///    node 3 in the same instant, on another connection.
/// 3. Seq 1 reaches node 3 before `HostShard`: node 3 forwards it to node 1 (stale entry).
///    Seq 2..15 arrive after `HostShard` and are delivered. Node 1 sends seq 1 back; it is
///    delivered last (t32.219).
///
/// The reference sends `ShardHome` and `HostShard` at once too. Possible fixes, for the core:
/// answer requesters only after the new home's `ShardStarted`; or have a region forget its
/// cached homes when its coordinator changes (they may have moved without it hearing); or
/// buffer, rather than forward, a message another region sent here for a shard not hosted
/// here (the sender's information is the newer one). Fixed the last way: the region holds
/// such a message and asks the coordinator.
#[test]
fn a_message_overtaking_host_shard_at_a_region_with_a_stale_home_keeps_its_order() {
    chaos(2111);
}

#[test]
fn random_faults_under_traffic_keep_one_home_and_order() {
    for seed in 1..=200 {
        chaos(seed);
    }
}

/// Random joins and graceful leaves (the coordinator's node among them) under heavy traffic,
/// without failures: every shard move is a hand-off. Returns the world after quiescence.
fn membership_churn(seed: u64, mode: HandOffMode) -> ShardingWorld {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x10_1ea7e5);
    let mut s = sim(seed, ShardingConfig::fast(mode));
    let (_, at) = s.form_cluster(rng.random_range(2..5));
    assert!(at.is_some(), "seed {seed}: no cluster");
    s.set_traffic(Some(TrafficConfig::new(Duration::from_millis(10), 2, 60)));
    s.run_for(Duration::from_secs(2));
    for _ in 0..rng.random_range(3..7) {
        let staying: Vec<NodeId> = s.senders(0);
        if staying.len() > 2 && rng.random_bool(0.5) {
            s.leave(staying[rng.random_range(0..staying.len())]);
        } else if s.world().len() < 8 {
            let id = s.add_node();
            s.join(id, &staying[..staying.len().min(3)]);
        }
        s.run_for(Duration::from_millis(rng.random_range(500..8_000)));
    }
    s.run_for(Duration::from_secs(10));
    quiesce(&mut s);
    s.run_for(Duration::from_secs(10));
    s
}

/// Graceful churn keeps every invariant, delivers nothing twice, and loses nothing silently:
/// every message is delivered, reported dropped, or lost on the way to a node that had left.
/// (That last kind should not exist in forward mode; see
/// `graceful_churn_in_forward_mode_loses_nothing`.)
#[test]
fn random_joins_and_leaves_keep_every_invariant() {
    for seed in 1..=24 {
        let mode = if seed % 2 == 0 {
            HandOffMode::Forward
        } else {
            HandOffMode::Drop
        };
        let s = membership_churn(seed, mode);
        let l = s.ledger();
        assert!(l.duplicates().is_empty(), "seed {seed}: duplicates");
        assert!(
            l.vanished().is_empty(),
            "seed {seed}: {} vanished",
            l.vanished().len()
        );
        assert!(l.sent_count() > 1000, "seed {seed}: too little load");
        assert_clean(&s, seed);
    }
}

/// Found by the churn scenario (seeds 8, 31, 56, 57, 110, 112 of 150, either mode): messages
/// are forwarded to nodes that left, because a region kept homes that moved while it was not
/// registered with the coordinator. Seed 8:
///
/// 1. Node 0 leaves; nodes 1 and 4 ask to leave while no coordinator runs. (Node 0 was
///    removed only after it was flagged unreachable, so the view treats it as crashed and it
///    lingers for the down-removal margin: no coordinator for 10 s after a graceful leave.)
/// 2. Node 1 starts the new coordinator (t34.3) and at once hands off its own and node 4's
///    shards, before regions 2 and 5 have registered. Those two get no `BeginHandOff`;
///    nothing can take the shards (the only registered region is shutting down), so they
///    stay unallocated, and the `ShardHomes` node 2 receives when it registers does not
///    mention them.
/// 3. Node 2 keeps forwarding to nodes 1 and 4: dropped there (`RegionStopped`) until they
///    exit (t36.3), then lost on the wire until they are no longer "possibly alive" (t51.9).
///
/// Possible fixes, for the core: a region forgets its cached homes when its coordinator
/// changes (as for the reordering above); and the view treats a member removed from Exiting
/// as gone gracefully even if it was flagged unreachable first (the reference decides the
/// margin on the previous status being Down). The second is done, which fixes these seeds; a
/// region can still miss a `BeginHandOff` sent before it registered (see the closing note of
/// the sharding issue).
#[test]
fn graceful_churn_in_forward_mode_loses_nothing() {
    let s = membership_churn(8, HandOffMode::Forward);
    assert_all_delivered_once(&s, 8);
    assert_clean(&s, 8);
}

/// Runs the random scenario over a range of seeds given as `SHARDIK_SIM_SEEDS=FROM..TO`
/// (default `1..500`) and lists those that fail; the variant `SHARDIK_SIM_SETTLE=reachability`
/// runs [`Settle::Reachability`], `SHARDIK_SIM_DURABLE=1` the durable-entity variant
/// ([`durable_chaos`]), `SHARDIK_SIM_LEASES=1` the leased one ([`leased_chaos`]) and
/// `SHARDIK_SIM_LIFECYCLE=1` the entity-lifecycle one ([`lifecycle_chaos`]),
/// `SHARDIK_SIM_STORE_CUTS=1` (with the leased one) nodes losing the store,
/// `SHARDIK_SIM_RELIABLE=1` the reliable-delivery one ([`reliable_chaos`], printing each
/// seed's counts); `SHARDIK_SIM_SEED_ALIASES=1` names every seed by an alias in any of
/// them. For hunting: `cargo test -p shardik-sim --test
/// sharding_scenarios many_seeds -- --ignored --nocapture` (about 60 seeds a second).
#[test]
#[ignore = "a search over many seeds, run by hand"]
fn many_seeds() {
    let range = std::env::var("SHARDIK_SIM_SEEDS").unwrap_or_else(|_| "1..500".into());
    let (from, to) = range.split_once("..").expect("FROM..TO");
    let (from, to): (u64, u64) = (from.parse().expect("FROM"), to.parse().expect("TO"));
    let settle = match std::env::var("SHARDIK_SIM_SETTLE").as_deref() {
        Ok("reachability") => Settle::Reachability,
        _ => Settle::Clean,
    };
    let durable = std::env::var("SHARDIK_SIM_DURABLE").is_ok_and(|v| v == "1");
    let leases = std::env::var("SHARDIK_SIM_LEASES").is_ok_and(|v| v == "1");
    let lifecycle = std::env::var("SHARDIK_SIM_LIFECYCLE").is_ok_and(|v| v == "1");
    let store_cuts = std::env::var("SHARDIK_SIM_STORE_CUTS").is_ok_and(|v| v == "1");
    let reliable = std::env::var("SHARDIK_SIM_RELIABLE").is_ok_and(|v| v == "1");
    let failed: Vec<u64> = (from..to)
        .filter(|&seed| {
            std::panic::catch_unwind(|| {
                if reliable {
                    let s = reliable_chaos(seed);
                    eprintln!("seed {seed}: {}", s.delivery().stats());
                } else if lifecycle {
                    lifecycle_chaos(seed);
                } else if leases {
                    leased_chaos_with(seed, settle, store_cuts);
                } else if durable {
                    durable_chaos(seed);
                } else {
                    chaos_with(seed, settle, Timing::FAST);
                }
            })
            .is_err()
        })
        .collect();
    assert!(failed.is_empty(), "failing seeds: {failed:?}");
}

/// The durable settings of seed `seed`: no snapshots, snapshots keeping events, or snapshots
/// that delete the events they cover (so recovery can race a deletion), by turns; crash points
/// at every place a durable entity can be caught half-way, at most three crashes a run.
fn durable_spec(seed: u64) -> DurableSpec {
    let retention = match seed % 3 {
        0 => None,
        1 => Some(Retention {
            every: 3,
            keep: 2,
            delete_events: false,
        }),
        _ => Some(Retention {
            every: 3,
            keep: 1,
            delete_events: true,
        }),
    };
    DurableSpec {
        retention,
        store_latency: Duration::from_millis(2),
        crash_points: CrashPoints {
            write_in_flight: 0.003,
            before_reply: 0.003,
            during_snapshot: 0.01,
            limit: 3,
            restart_after: Duration::from_secs(2),
        },
        reads_say_every_lease_lapsed: false,
    }
}

/// The random scenario with durable entities: every message is a command persisting one to
/// three events. On top of the sharding checks: every acknowledged command's events are in
/// the journal exactly once, whole, in order, with no gaps; every recovery equals the fold of
/// the journal; at the end the whole store recovers to it; and every command delivered was
/// acknowledged, failed (and its asker told), or died with its node.
fn durable_chaos(seed: u64) -> StoreStats {
    durable_chaos_world(seed)
        .store_stats()
        .expect("durable")
        .clone()
}

/// [`durable_chaos`], returning the world at its end.
fn durable_chaos_world(seed: u64) -> ShardingWorld {
    durable_chaos_world_with(seed, Variant::default())
}

/// [`durable_chaos_world`] with `variant`'s choices besides the entities.
fn durable_chaos_world_with(seed: u64, variant: Variant) -> ShardingWorld {
    let spec = Some(durable_spec(seed));
    let variant = Variant {
        durable: spec,
        ..variant
    };
    let mut s = chaos_run(seed, Settle::Clean, Timing::FAST, variant, Expect::Clean);
    // Let every write and snapshot in flight land.
    s.run_for(Duration::from_secs(5));
    s.check_store();
    assert_clean(&s, seed);
    let l = s.ledger();
    let unanswered = l.unanswered_commands();
    assert!(
        unanswered.is_empty(),
        "seed {seed}: commands {:?} delivered and never answered",
        &unanswered[..unanswered.len().min(5)]
    );
    let d = s.durability();
    assert!(
        l.acked_count() >= 200 && d.acknowledged() == l.acked_count(),
        "seed {seed}: {} acknowledged ({} checked)",
        l.acked_count(),
        d.acknowledged()
    );
    assert!(
        d.recoveries() >= 40,
        "seed {seed}: {} recoveries",
        d.recoveries()
    );
    s
}

#[test]
fn random_faults_with_durable_entities_keep_every_acknowledged_event_once() {
    let mut total = StoreStats::default();
    for seed in 1..=300 {
        let st = durable_chaos(seed);
        total.committed += st.committed;
        total.refused += st.refused;
        total.committed_after_crash += st.committed_after_crash;
        total.lost_in_crash += st.lost_in_crash;
        total.crashes_write_in_flight += st.crashes_write_in_flight;
        total.crashes_between_events += st.crashes_between_events;
        total.crashes_before_reply += st.crashes_before_reply;
        total.crashes_during_snapshot += st.crashes_during_snapshot;
        total.snapshots_saved += st.snapshots_saved;
        total.snapshot_steps_cut += st.snapshot_steps_cut;
    }
    eprintln!("{total:#?}");
    // Every crash point was reached, and both fates of a write caught by a crash happened.
    assert!(total.crashes_write_in_flight >= 10, "{total:#?}");
    assert!(total.crashes_between_events >= 5, "{total:#?}");
    assert!(total.crashes_before_reply >= 10, "{total:#?}");
    assert!(total.crashes_during_snapshot >= 10, "{total:#?}");
    assert!(
        total.committed_after_crash >= 3 && total.lost_in_crash >= 3,
        "{total:#?}"
    );
    assert!(total.snapshots_saved >= 1000, "{total:#?}");
}

/// The known cases where sharding runs an entity twice (see
/// `a_brief_heal_lets_a_removed_node_outlive_the_down_removal_margin`), with durable entities:
/// the two copies write to one journal, and the store's unique key keeps it whole. The copy
/// that writes second is refused and fails its command; every acknowledged event is still in
/// the journal once, in order, and the journal recovers to its fold. Run without the self-fence,
/// which (like leases) keeps the second copy from running at all.
#[test]
fn two_live_copies_of_a_durable_entity_cannot_interleave_their_journal() {
    // Seeds of that scenario in which both copies took commands (in seed 670 only one did).
    for seed in [82, 871] {
        let mut spec = durable_spec(seed);
        spec.crash_points = CrashPoints::none();
        let mut s = chaos_run(
            seed,
            Settle::Reachability,
            Timing::FIRST_UNFENCED,
            Variant {
                durable: Some(spec),
                // As found: without leases (the durable default takes them, which keep the
                // second copy out) and with silent crashes.
                config: NO_LEASES,
                silent_crashes: true,
                ..Variant::default()
            },
            Expect::DurableOnly,
        );
        s.run_for(Duration::from_secs(5));
        s.check_store();
        let sharding = s.checker().violations();
        assert!(
            sharding.iter().any(|v| v.contains("started while live")),
            "seed {seed}: the scenario no longer runs two copies: {sharding:#?}"
        );
        let durable = s.durability().violations();
        assert!(durable.is_empty(), "seed {seed}: {durable:#?}");
        let refused = s.store_stats().expect("durable").refused;
        assert!(refused > 0, "seed {seed}: no write was refused");
        assert!(
            s.ledger().failed_count() >= refused,
            "seed {seed}: a refusal not told"
        );
    }
}

/// The random scenario with every shard and coordinator under a lease in the store the durable
/// entities write to (with its crash points), their writes fenced by the lease's token. On top
/// of everything [`durable_chaos`] checks: no entity and no shard ever runs on two nodes at
/// once, counting a copy on a node whose lease has passed its deadline (a paused node, which
/// checks its lease before it delivers anything) as stopped.
fn leased_chaos(seed: u64, settle: Settle) -> (StoreStats, usize, usize) {
    leased_chaos_with(seed, settle, false)
}

/// [`leased_chaos`], with nodes also losing the store for a while when `store_cuts`.
fn leased_chaos_with(seed: u64, settle: Settle, store_cuts: bool) -> (StoreStats, usize, usize) {
    let spec = Some(durable_spec(seed));
    let variant = Variant {
        durable: spec,
        leases: true,
        store_cuts,
        ..Variant::default()
    };
    let mut s = chaos_run(seed, settle, Timing::FAST, variant, Expect::Clean);
    s.run_for(Duration::from_secs(5));
    s.check_store();
    assert_clean(&s, seed);
    let unanswered = s.ledger().unanswered_commands();
    assert!(
        unanswered.is_empty(),
        "seed {seed}: commands {:?} delivered and never answered",
        &unanswered[..unanswered.len().min(5)]
    );
    let stats = s.store_stats().expect("a store").clone();
    assert!(stats.leases_granted > 0, "seed {seed}: no lease taken");
    (stats, s.checker().fenced_copies(), s.shards_taken_over())
}

/// The random scenario with leases, in its harder settling mode (a partition may be cut again
/// right after a heal: the brief heals of
/// `a_brief_heal_lets_a_removed_node_outlive_the_down_removal_margin`): never two copies.
#[test]
fn random_faults_with_leases_never_run_an_entity_twice() {
    let mut granted = 0;
    let mut fenced_writes = 0;
    let mut held_by_other = 0;
    let mut taken_over = 0;
    for seed in 1..=150 {
        let (stats, _, taken) = leased_chaos(seed, Settle::Reachability);
        taken_over += taken;
        granted += stats.leases_granted;
        held_by_other += stats.leases_held_by_other;
        fenced_writes += stats.fenced_writes;
    }
    eprintln!(
        "150 seeds: {granted} leases granted, {held_by_other} acquisitions found the lease \
         held, {fenced_writes} writes fenced, {taken_over} shards taken from silent members"
    );
    assert!(
        granted > 1000 && held_by_other > 0 && taken_over > 0,
        "{granted} {held_by_other} {taken_over}"
    );
}

/// The random scenario with leases, where nodes also lose the store (and only the store) for
/// up to 15 s: a node that cannot renew stops its shards by its own deadline, a coordinator
/// that cannot read leases moves nothing early, and writes that wait out the cut meet the
/// fence. Never two copies, never a reorder.
#[test]
fn random_faults_with_leases_and_store_cuts_never_run_an_entity_twice() {
    let mut taken_over = 0;
    for seed in 1..=150 {
        let (_, _, taken) = leased_chaos_with(seed, Settle::Reachability, true);
        taken_over += taken;
    }
    eprintln!("150 seeds with store cuts: {taken_over} shards taken from silent members");
    assert!(taken_over > 0, "no shard was taken over");
}

/// The checker's own test: a store whose reads say every lease has lapsed makes coordinators
/// move silent members' shards whose leases they still hold. The new home's acquisition
/// still keeps a second copy out (the durable entities' invariants hold, which the run
/// asserts), so only the checker's rule that a shard is never taken while its holder still
/// counts on its lease can catch it; it must, within the seeds that take shards over when
/// the store tells the truth.
#[test]
fn a_takeover_of_a_shard_whose_lease_has_not_lapsed_is_caught() {
    let caught = (1..=150).find(|&seed| {
        let mut spec = durable_spec(seed);
        spec.reads_say_every_lease_lapsed = true;
        let variant = Variant {
            durable: Some(spec),
            leases: true,
            ..Variant::default()
        };
        let s = chaos_run(
            seed,
            Settle::Reachability,
            Timing::FAST,
            variant,
            Expect::DurableOnly,
        );
        s.checker()
            .violations()
            .iter()
            .any(|v| v.contains("while its lease there still counted"))
    });
    assert!(caught.is_some(), "no seed of 150 caught the lying store");
}

/// The seeds that run an entity twice without leases (see
/// `a_brief_heal_lets_a_removed_node_outlive_the_down_removal_margin` and
/// `two_live_copies_of_a_durable_entity_cannot_interleave_their_journal`), with leases: the
/// removed node's copies stop at their lease's deadline, and the new home waits for the lease.
#[test]
fn the_known_two_copy_seeds_run_one_copy_under_leases() {
    for seed in [82, 670, 871] {
        let mut spec = durable_spec(seed);
        spec.crash_points = CrashPoints::none();
        let mut s = chaos_run(
            seed,
            Settle::Reachability,
            Timing::FIRST,
            Variant {
                durable: Some(spec),
                leases: true,
                ..Variant::default()
            },
            Expect::Clean,
        );
        s.run_for(Duration::from_secs(5));
        s.check_store();
        assert_clean(&s, seed);
        let stats = s.store_stats().expect("a store");
        assert!(stats.leases_held_by_other > 0, "seed {seed}: {stats:?}");
    }
}

/// Found by the leased sweep once a crashed node's leased shards re-homed without the
/// down-removal margin and refused connections counted as a process gone (issue 24):
///
/// * 262, 1512, 2403, 3576: a node paused past its removal wakes with messages sent to it
///   before the pause, while its shard's lease lapsed, another node held the shard (and
///   handled newer messages from the same senders) and lost it in turn. The paused node takes
///   the lease again and must not deliver what it buffered: the new token is more than one
///   above the one it lost, so it drops those messages, each reported (`DropReason::LeaseLapsed`).
/// * 1344: a node paused 23 s, removed meanwhile, wakes still believing it is Up and welcomed
///   two restarted nodes within a second: two clusters. A member now welcomes nobody after a
///   freeze until the members it heartbeats have answered again
///   (`shardik-core/src/membership/node/freeze.rs`); those that removed it answer
///   `Quarantined` instead, and it stops.
#[test]
fn nodes_waking_from_long_pauses_keep_order_and_one_cluster() {
    for seed in [262, 1344, 1512, 2403, 3576] {
        leased_chaos(seed, Settle::Reachability);
    }
}

/// Seeds of the leased sweeps that once failed while a silent node's shards, and then its
/// coordinator, learnt to move on the store's word: with store cuts, 1176 (what waited for a
/// lost hand-over marker delivered after a freeze), 519 and 4907 (messages passed on by a node
/// that had been silent, after senders already used the shard's next home); without, 76 (a
/// member silent when a coordinator started never heard of it) and 2530 (the recovery's seed
/// was itself on its way out) and 3264 (a region a coordinator named as a shard's home, which
/// never hosted it, passed on what a sender had sent it after that sender's later messages
/// had run at the real home); with durable entities, 2412 (a shard a stand-in placed on a
/// node, waiting there for a lease another node held, delivered what other nodes had sent
/// it after their later messages, once the stand-in was gone and the lease came free).
#[test]
fn the_leased_seeds_that_once_broke_order_or_recovery_keep_both() {
    for seed in [519, 1176, 4907] {
        leased_chaos_with(seed, Settle::Clean, true);
    }
    leased_chaos(76, Settle::Reachability);
    leased_chaos(2530, Settle::Reachability);
    leased_chaos(3264, Settle::Reachability);
    durable_chaos(2412);
}

/// Found by the durable-entity random scenario (14 of seeds 1..=5000: 609, 1708, 2042, 2121,
/// 2437, 2814, 3091, 3276, 3839, 4676, 4790, 4896, 4902, 4909), whose crash points restart
/// nodes within seconds. Seed 609:
///
/// 1. Node 1 crashes and comes back as a new incarnation (t8.1); its join is refused until the
///    old incarnation is removed (t17.3), then node 0 welcomes it (t18.16).
/// 2. Node 0 crashes 0.1 s later (a crash point), before its gossip about the joiner reached
///    any other member.
/// 3. Node 1 believes it is Joining; nodes 3 and 4 never heard of it and drop its gossip (as the
///    reference does with gossip from an unknown node). Before the fix nobody told it, so it
///    stayed Joining for good (and welcomed node 5's next incarnation into the same dead end).
///
/// The fix (`shardik-core/src/membership/node/not_known.rs`): the members that do not know
/// node 1 answer its gossip with `NotKnown` (a removed incarnation would be told `Quarantined`
/// and stop); `retry-unsuccessful-join-after` after its welcome (t28.2) node 1 sends a `Join`
/// to node 3, merges its `Welcome` into what it knew, and is Up at t28.8.
#[test]
fn a_joiner_whose_welcomer_crashes_at_once_does_not_stay_joining() {
    // As found: without leases and with silent crashes (see `Variant::silent_crashes`).
    let s = durable_chaos_world_with(
        609,
        Variant {
            config: NO_LEASES,
            silent_crashes: true,
            ..Variant::default()
        },
    );
    let w = s.world();
    assert!(
        w.core(1).stats().rejoins >= 1,
        "node 1 did not join again: the scenario no longer reproduces the case\n{}",
        tail(&s)
    );
}

/// How the entities of seed `seed` live in [`lifecycle_chaos`], by turns: passivated when idle,
/// passivated over a limit (least recently used), or remembered (with some commands failing,
/// so that failed entities restart after the back-off). In every variant a command takes 5 to
/// 25 ms (so commands queue behind busy entities and stops behind commands), the stop message
/// takes the configuration's stop delay, and every seventh command starts a timer.
fn lifecycle_spec(seed: u64) -> (EntitySpec, &'static str) {
    let base = EntitySpec {
        handle_time: Duration::from_millis(5 + 10 * (seed % 3)),
        timer_every: Some(7),
        ..EntitySpec::default()
    };
    match seed % 3 {
        0 => (base, LIFECYCLE_IDLE),
        1 => (base, LIFECYCLE_LIMIT),
        _ => (
            EntitySpec {
                fail_every: Some(13),
                ..base
            },
            LIFECYCLE_REMEMBER,
        ),
    }
}

/// [`lifecycle_spec`]'s idle passivation: after 600 ms idle, looked for every 300 ms.
const LIFECYCLE_IDLE: &str = r#"
[cluster.sharding.passivation]
strategy = "default-idle-strategy"

[cluster.sharding.passivation.default-idle-strategy.idle-entity]
timeout = "600ms"
interval = "300ms"
"#;

/// [`lifecycle_spec`]'s limit: 12 entities per region, the least recently used one leaving
/// (a strategy block of its own: no admission window, no idle timeout).
const LIFECYCLE_LIMIT: &str = r#"
[cluster.sharding.passivation]
strategy = "lru-12"

[cluster.sharding.passivation.lru-12]
active-entity-limit = 12

[cluster.sharding.passivation.lru-12.replacement]
policy = "least-recently-used"
"#;

/// [`lifecycle_spec`]'s remembered entities, started again 300 ms after a failure.
const LIFECYCLE_REMEMBER: &str = r#"
[cluster.sharding]
remember-entities = "on"
entity-restart-backoff = "300ms"
"#;

/// The lifecycle sweep's settings reach the simulated nodes as the strategies it was written
/// for (they were once set by hand): the configuration, mapped as the runtime maps it.
#[test]
fn the_lifecycle_settings_reach_the_simulated_entities() {
    let entities = |config: &str| {
        let cfg = ShardingConfig::fast_with(HandOffMode::Forward, &[config]);
        cfg.sharding.entity_settings(cfg.remembers())
    };
    let idle = entities(LIFECYCLE_IDLE);
    assert_eq!(
        idle.passivation,
        ResolvedStrategy::Idle(IdleCheck {
            timeout_ms: 600,
            interval_ms: 300,
        })
    );
    assert!(!idle.remember);
    let limit = entities(LIFECYCLE_LIMIT);
    assert_eq!(
        limit.passivation,
        ResolvedStrategy::Limit {
            per_region_limit: 12,
            policy: ReplacementPolicy::LeastRecentlyUsed,
            idle: None,
        }
    );
    let remember = entities(LIFECYCLE_REMEMBER);
    assert!(remember.remember);
    assert_eq!(remember.restart_backoff, Duration::from_millis(300));
    // Without a layer of its own, a scenario's entities are never passivated automatically.
    assert_eq!(entities("").passivation, ResolvedStrategy::Disabled);
}

/// The random scenario with entities that live by the whole lifecycle ([`lifecycle_spec`]).
/// On top of the plain scenario's checks (one live copy, every entity answers, nothing
/// vanishes, and the checker's lifecycle rules: no command handled twice, none answered with
/// an error by a passivation or a hand-off, no timer reaching another incarnation): every
/// command delivered to its entity was handled, failed by itself or by a forced stop (and its
/// asker told), or died with its node; with remembered entities, every remembered entity runs
/// again at its shard's home, after the faults and again after every node was killed and
/// started anew.
fn lifecycle_chaos(seed: u64) -> ShardingWorld {
    let (spec, config) = lifecycle_spec(seed);
    let remember = config == LIFECYCLE_REMEMBER;
    // Half the remembered seeds run their shards under leases: remembered starts and restarts
    // then wait for the lease, not only for the shard.
    let leases = remember && seed % 2 == 1;
    let variant = Variant {
        entities: spec,
        leases,
        config,
        ..Variant::default()
    };
    let mut s = chaos_run(seed, Settle::Clean, Timing::FAST, variant, Expect::Clean);
    // The last commands were delivered, but their handlers may still run.
    s.run_for(Duration::from_secs(1));
    let l = s.ledger();
    let unhandled: Vec<u64> = l
        .sent()
        .keys()
        .copied()
        .filter(|&id| {
            l.is_delivered(id)
                && !s.checker().was_handled(id)
                && !l.is_failed(id)
                && !l.lost_with_node().contains(&id)
        })
        .collect();
    assert!(
        unhandled.is_empty(),
        "seed {seed}: commands {:?} delivered and neither handled, failed nor lost",
        &unhandled[..unhandled.len().min(5)]
    );
    assert!(
        s.checker().handled_count() >= 200,
        "seed {seed}: only {} commands handled",
        s.checker().handled_count()
    );
    if remember {
        // A shard may be between two homes (a rebalance round runs every few seconds) or its
        // remembered set still loading: every remembered entity must run again soon, not at
        // this very instant.
        let running = s.run_until_pred(Duration::from_secs(10), |s| {
            s.remembered_not_running(0).is_empty()
        });
        assert!(
            running.is_some(),
            "seed {seed}: {:#?}\n{}",
            s.remembered_not_running(0),
            tail(&s)
        );
        // Every node killed at once, then started anew: the remembered entities come back
        // without a message.
        let slots = s.world().len();
        for id in 0..slots {
            s.crash(id);
        }
        s.run_for(Duration::from_secs(1));
        let all: Vec<NodeId> = (0..slots).collect();
        for id in 0..slots {
            s.restart(id);
            s.join(id, &all[..1]);
        }
        let up = s.run_until_pred(Duration::from_secs(120), |s| {
            s.world().all_up(&all) && s.world().agreed()
        });
        assert!(
            up.is_some(),
            "seed {seed}: no cluster after the full restart"
        );
        let started = s.run_until_pred(Duration::from_secs(60), |s| {
            s.remembered_not_running(0).is_empty()
        });
        assert!(
            started.is_some(),
            "seed {seed}: after a full restart {:#?}\n{}",
            s.remembered_not_running(0),
            tail(&s)
        );
        assert_clean(&s, seed);
    }
    s
}

#[test]
fn random_faults_with_the_whole_entity_lifecycle_lose_and_repeat_nothing() {
    for seed in 1..=60 {
        lifecycle_chaos(seed);
    }
}

/// The whole cluster leaves, one node a moment after the other: the second leaves before the
/// coordinator could move to it, so when the first is gone no member may host the
/// coordinator. The second's regions must not wait for one until the leave timeout (60 s):
/// with no member left to take its shards, it stops them and leaves.
#[test]
fn the_last_nodes_leaving_one_after_the_other_do_not_wait_for_a_coordinator() {
    for seed in 1..=8 {
        let mut s = cluster(seed, ShardingConfig::fast(HandOffMode::Forward), 2);
        warm_up(&mut s, seed, 1, ENTITIES);
        let start = s.now();
        s.leave(0);
        s.run_for(Duration::from_secs(1));
        s.leave(1);
        let done = s.run_until_pred(Duration::from_secs(90), |s| {
            (0..2).all(|id| s.world().shutdown_reason(id).is_some())
        });
        assert!(
            done.is_some(),
            "seed {seed}: the leaves never ended\n{}",
            tail(&s)
        );
        for id in [0, 1] {
            assert_eq!(
                s.world().shutdown_reason(id),
                Some(&ShutdownReason::Left),
                "seed {seed}: node {id}\n{}",
                tail(&s)
            );
        }
        let took = s.now() - start;
        assert!(
            took < Duration::from_secs(5),
            "seed {seed}: the leaves took {took:?}\n{}",
            tail(&s)
        );
        assert_clean(&s, seed);
    }
}

/// The random scenario with reliable delivery: producers on node slots 0 and 1 (their own
/// faults drawn besides the others: a producer restarted from its queue, its node crashed)
/// offer messages to the durable entities, whose shards run under leases in a store that
/// crashes writers at its crash points, that nodes lose for a while, and whose entities
/// passivate or are remembered as [`lifecycle_spec`] says (so marks are loaded again by many
/// incarnations). On top of everything the leased durable scenario checks: every offer
/// processed at most once and in the order it was accepted, confirmed only once processed,
/// and, once every producer runs again from its queue, every accepted offer processed.
fn reliable_chaos(seed: u64) -> ShardingWorld {
    let s = reliable_chaos_with(seed, false, Expect::Clean);
    let st = s.delivery().stats();
    assert!(
        st.accepted >= 50 && st.processed >= st.accepted && st.confirmed >= st.accepted,
        "seed {seed}: {st}"
    );
    s
}

/// [`reliable_chaos`], with the consumer that confirms before its write commits when
/// `mutation`, asserting what `expect` says.
fn reliable_chaos_with(seed: u64, mutation: bool, expect: Expect) -> ShardingWorld {
    let mut reliable = ReliableSpec::new(vec![0, 1]);
    reliable.mutation_confirm_before_write = mutation;
    let (_, config) = lifecycle_spec(seed);
    let variant = Variant {
        durable: Some(durable_spec(seed)),
        leases: true,
        store_cuts: true,
        config,
        reliable: Some(reliable),
        ..Variant::default()
    };
    let mut s = chaos_run(seed, Settle::Clean, Timing::FAST, variant, expect);
    s.run_for(Duration::from_secs(5));
    s.check_store();
    if expect == Expect::Clean {
        assert_clean(&s, seed);
        let l = s.ledger();
        let unanswered = l.unanswered_commands();
        assert!(
            unanswered.is_empty(),
            "seed {seed}: commands {:?} delivered and never answered",
            &unanswered[..unanswered.len().min(5)]
        );
    }
    s
}

#[test]
fn random_faults_with_reliable_producers_process_every_accepted_message_once() {
    let mut total = ReliableStats::default();
    for seed in 1..=200 {
        total.add(reliable_chaos(seed).delivery().stats());
    }
    eprintln!("{total}");
    // Every path was taken, often: resends, producers started again from their queues,
    // messages judged duplicates or out of place (about 60 000, 590 and 25 000 when written).
    assert!(total.resent >= 10_000, "{total}");
    assert!(total.producer_restarts >= 200, "{total}");
    assert!(total.judged >= 5_000, "{total}");
}

/// The checker's own test: a consumer that answers `Confirmed` as soon as it sends its write,
/// before the store committed it. Every seed catches it at once: its producers hear
/// confirmations of messages not processed yet (iv), hundreds of times a run. And where such a
/// write is then refused (a newer lease holder's fence, a journal number taken), the message
/// its producer dropped as confirmed is lost: seed 53 is the first (of 9 in seeds 1 to 400)
/// where an accepted message is never processed (iii).
#[test]
fn a_consumer_confirming_before_its_write_commits_is_caught() {
    let caught = |seed: u64, check: &str| {
        let s = reliable_chaos_with(seed, true, Expect::Unchecked);
        let v = s.delivery().violations();
        assert!(
            v.iter().any(|v| v.contains(check)),
            "seed {seed}: the consumer confirming before its write was not caught by {check}: \
             {:#?}",
            &v[..v.len().min(5)]
        );
    };
    for seed in 1..=3 {
        caught(seed, "confirmed to its producer before it was processed");
    }
    caught(53, "accepted offers were never processed");
}
