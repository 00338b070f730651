//! The scale of sharding: a large cluster (1 000 nodes in the recorded run) with one kind of
//! many shards (10 000) goes through formation, the first message to every shard, a rolling
//! restart of some nodes and a partition that heals, and reports how long each took in
//! simulated time, with the checkers' verdict.
//!
//! Built on [`ShardingWorld`]'s public API only (nodes, joins, leaves, restarts, partitions,
//! clients, [`ShardingWorld::hosts`]), so it keeps working whatever the layer underneath does
//! with entities. Every measured time is polled every [`ScaleSpec::poll`] of simulated time
//! (the checks walk the whole cluster, too costly after every step at this size), so each is
//! an upper bound at most one poll late. Wall time and memory are the caller's to measure:
//! the simulator reads no clock.
//!
//! The phases, in order:
//!
//! 1. **formation**: every node joins through the first three at once; until every node sees
//!    every other Up and all agree;
//! 2. **first messages**: one message to an entity of every shard (each sent through another
//!    node); until each was delivered, so that every shard has a home;
//! 3. **rolling restart** of [`ScaleSpec::restarts`] nodes, one after the other: a graceful
//!    leave, until every shard the node hosted is hosted by another node (*re-homed*) and the
//!    node has stopped; then a new incarnation joins, until all agree again (*rejoined*), and
//!    until rebalancing has given it its share again (*refilled*);
//! 4. **partition** of the last [`ScaleSpec::minority`] nodes from the rest: the split-brain
//!    resolver keeps the majority; until the majority agrees without the minority
//!    (*majority converged*) and every shard is hosted exactly once on the majority side
//!    (*re-homed*); then the partition heals, the minority's nodes (downed, stopped) start again
//!    as new incarnations and join, until all agree (*rejoined*) and until rebalancing has
//!    given every node its share (*refilled*).
//!
//! Light client traffic runs from the first messages to the end, so the checkers see
//! deliveries during every hand-off.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::Serialize;
use shardik_core::Instant;
use shardik_core::sharding::{HandOffMode, shard_id_for};

use super::cluster::ShardingWorld;
use super::config::{ShardingConfig, fast_world};
use super::traffic::{TrafficConfig, entity_name};
use crate::world::NodeId;

/// How long the run goes on after the clients stop, so that every message has a fate.
const QUIESCE: Duration = Duration::from_secs(15);

/// What to run.
#[derive(Clone, Debug)]
pub struct ScaleSpec {
    /// Master seed.
    pub seed: u64,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Shards of the one kind.
    pub shards: u32,
    /// Nodes restarted one after the other (never node 0, which runs the coordinator).
    pub restarts: usize,
    /// Nodes cut off by the partition (the last ones; fewer than half).
    pub minority: usize,
    /// Client messages per second during the faults.
    pub traffic_per_s: usize,
    /// How often the measured conditions are checked (simulated time).
    pub poll: Duration,
    /// The longest any phase may take (simulated time) before it counts as failed.
    pub phase_limit: Duration,
}

impl ScaleSpec {
    /// `nodes` nodes, `shards` shards, a rolling restart of 3 nodes, a tenth of the cluster
    /// (at least one node) cut off, 100 client messages a second, polled every 50 ms, each
    /// phase within 10 minutes.
    pub fn new(seed: u64, nodes: usize, shards: u32) -> Self {
        ScaleSpec {
            seed,
            nodes,
            shards,
            restarts: 3,
            minority: (nodes / 10).max(1),
            traffic_per_s: 100,
            poll: Duration::from_millis(50),
            phase_limit: Duration::from_secs(600),
        }
    }
}

/// One node of the rolling restart.
#[derive(Clone, Debug, Serialize)]
pub struct RestartReport {
    /// The node slot.
    pub node: NodeId,
    /// Shards it hosted when it was asked to leave.
    pub shards_hosted: usize,
    /// From its leave until each of those shards was hosted by another node.
    pub rehomed_s: Option<f64>,
    /// From its leave until it had stopped (exited, its layer gone).
    pub stopped_s: Option<f64>,
    /// From its new incarnation's join until every node agreed, all Up.
    pub rejoined_s: Option<f64>,
    /// From that join until it hosted its share (`shards / nodes`, rounded down) again.
    pub refilled_s: Option<f64>,
}

/// The partition.
#[derive(Clone, Debug, Serialize)]
pub struct PartitionReport {
    /// Nodes cut off.
    pub minority: usize,
    /// Shards the minority hosted when it was cut off.
    pub shards_cut_off: usize,
    /// From the cut until the majority agreed, all Up, without the minority.
    pub majority_converged_s: Option<f64>,
    /// From the cut until every shard was hosted exactly once, on the majority side.
    pub rehomed_s: Option<f64>,
    /// From the heal (and the minority's restart) until every node agreed, all Up.
    pub rejoined_s: Option<f64>,
    /// From the heal until rebalancing had given every node its share (`shards / nodes`,
    /// rounded down).
    pub refilled_s: Option<f64>,
}

/// What [`run`] measured; times are simulated seconds, `None` when the phase did not finish
/// within [`ScaleSpec::phase_limit`].
#[derive(Clone, Debug, Serialize)]
pub struct ScaleReport {
    /// Master seed.
    pub seed: u64,
    /// Nodes.
    pub nodes: usize,
    /// Shards.
    pub shards: u32,
    /// From the joins until every node saw every other Up and all agreed.
    pub formed_s: Option<f64>,
    /// From the first messages until each had been delivered: every shard has a home.
    pub all_homed_s: Option<f64>,
    /// The rolling restart, node by node.
    pub restarts: Vec<RestartReport>,
    /// The partition and its heal.
    pub partition: Option<PartitionReport>,
    /// Client messages sent, delivered, reported dropped, lost on the wire or with a node.
    pub messages: MessageCounts,
    /// Hosted shards per node at the end: fewest and most.
    pub shards_per_node: (usize, usize),
    /// Simulated seconds in the whole run.
    pub simulated_s: f64,
    /// Every invariant violation of membership, sharding and the ledger (none in a good run).
    pub violations: Vec<String>,
}

/// The fate of the client messages.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MessageCounts {
    /// Sent.
    pub sent: usize,
    /// Delivered (once each: duplicates are violations).
    pub delivered: usize,
    /// Reported dropped by a region.
    pub dropped: usize,
    /// Lost on a cut link or with a crashed node.
    pub lost: usize,
}

impl ScaleReport {
    /// Whether every phase finished and nothing was violated.
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
            && self.formed_s.is_some()
            && self.all_homed_s.is_some()
            && self
                .restarts
                .iter()
                .all(|r| r.rehomed_s.is_some() && r.stopped_s.is_some() && r.rejoined_s.is_some())
            && self.partition.as_ref().is_some_and(|p| {
                p.majority_converged_s.is_some() && p.rehomed_s.is_some() && p.rejoined_s.is_some()
            })
    }
}

/// The sharding settings of the run: [`ShardingConfig::fast`] with `shards` shards, and no
/// timeline (it would hold millions of lines).
pub fn config(shards: u32) -> ShardingConfig {
    let shards = format!("[cluster.sharding]\nnumber-of-shards = {shards}\n");
    let mut cfg = ShardingConfig::fast_with(HandOffMode::Forward, &[&shards]);
    cfg.record_events = false;
    cfg
}

/// Runs the four phases (see the module docs).
pub fn run(spec: &ScaleSpec) -> ScaleReport {
    run_with_progress(spec, |_| {})
}

/// [`run`], telling `progress` what each phase measured as soon as it ends (a run of 1 000
/// nodes takes long enough that the early phases are worth having on their own).
pub fn run_with_progress(spec: &ScaleSpec, mut progress: impl FnMut(String)) -> ScaleReport {
    assert!(spec.nodes >= 3, "at least three nodes");
    assert!(
        spec.minority >= 1 && 2 * spec.minority < spec.nodes,
        "the partition cuts off fewer than half of the nodes"
    );
    assert!(
        spec.restarts < spec.nodes - spec.minority,
        "restarted nodes come from the majority, node 0 excluded"
    );
    let mut world = fast_world(spec.seed);
    world.record_events = false;
    world.check_states = false;
    let mut run = Run {
        s: ShardingWorld::new(world, config(spec.shards)),
        spec: spec.clone(),
        kind: 0,
    };
    let all: Vec<NodeId> = (0..spec.nodes).collect();

    // 1. formation
    let t0 = run.s.now();
    for _ in 0..spec.nodes {
        run.s.add_node();
    }
    for &id in &all {
        run.s.join(id, &all[..3]);
    }
    let formed_s = run.poll_until(t0, |s| agreed(s, &all));
    progress(format!("formed: {formed_s:?} s"));

    // 2. the first message to every shard
    let t0 = run.s.now();
    let ids: Vec<u64> = one_entity_per_shard(spec.shards)
        .iter()
        .enumerate()
        .filter_map(|(i, entity)| run.s.tell(i % spec.nodes, run.kind, entity))
        .collect();
    let all_homed_s = run.poll_until(t0, |s| ids.iter().all(|id| s.ledger().is_delivered(*id)));
    progress(format!("every shard homed: {all_homed_s:?} s"));
    let per_s = spec.traffic_per_s.max(1);
    run.s.set_traffic(Some(TrafficConfig::new(
        Duration::from_millis(100),
        per_s.div_ceil(10),
        spec.shards as usize,
    )));

    // 3. the rolling restart: evenly spread over the nodes after node 0
    let restarts = (1..=spec.restarts)
        .map(|i| i * (spec.nodes - spec.minority) / (spec.restarts + 1))
        .map(|id| {
            let report = run.restart(id.max(1), &all);
            progress(format!("restart: {report:?}"));
            report
        })
        .collect();

    // 4. the partition, then the heal
    let partition = Some(run.partition(&all));
    progress(format!("partition: {partition:?}"));

    // The clients stop; what is in flight settles before the ledger is read.
    run.s.set_traffic(None);
    run.s.run_for(QUIESCE);
    let counts = run.s.shard_counts(run.kind);
    let shards_per_node = (
        counts.values().copied().min().unwrap_or(0),
        counts.values().copied().max().unwrap_or(0),
    );
    let ledger = run.s.ledger();
    let messages = MessageCounts {
        sent: ledger.sent_count(),
        delivered: ledger.delivered_count(),
        dropped: ledger.dropped_count(),
        lost: ledger.lost_on_wire().len() + ledger.lost_with_node().len(),
    };
    let mut violations = run.s.violations();
    violations.extend(
        ledger
            .duplicates()
            .iter()
            .map(|id| format!("message {id} delivered more than once")),
    );
    violations.extend(
        ledger
            .vanished()
            .iter()
            .map(|id| format!("message {id} vanished")),
    );
    ScaleReport {
        seed: spec.seed,
        nodes: spec.nodes,
        shards: spec.shards,
        formed_s,
        all_homed_s,
        restarts,
        partition,
        messages,
        shards_per_node,
        simulated_s: secs(run.s.now(), Instant::ZERO),
        violations,
    }
}

/// For every shard `0..shards`, the first entity (by [`entity_name`]) that lives in it.
pub fn one_entity_per_shard(shards: u32) -> Vec<String> {
    let mut found: Vec<Option<String>> = vec![None; shards as usize];
    let mut missing = shards as usize;
    let mut i = 0;
    while missing > 0 {
        let name = entity_name(i);
        let shard = shard_id_for(&name, shards).expect("shards above 0");
        let n: usize = shard.parse().expect("decimal shard ids");
        if found[n].is_none() {
            found[n] = Some(name);
            missing -= 1;
        }
        i += 1;
    }
    found.into_iter().flatten().collect()
}

/// The scenario's state between phases.
struct Run {
    s: ShardingWorld,
    spec: ScaleSpec,
    kind: usize,
}

impl Run {
    /// Runs until `done` holds, looking every poll; the simulated seconds from `t0`, or `None`
    /// after the phase limit.
    fn poll_until(
        &mut self,
        t0: Instant,
        mut done: impl FnMut(&ShardingWorld) -> bool,
    ) -> Option<f64> {
        let deadline = self.s.now() + self.spec.phase_limit;
        loop {
            if done(&self.s) {
                return Some(secs(self.s.now(), t0));
            }
            if self.s.now() >= deadline {
                return None;
            }
            self.s.run_for(self.spec.poll);
        }
    }

    /// Three running members other than `except`, to join through.
    fn seeds(&self, except: &BTreeSet<NodeId>) -> Vec<NodeId> {
        (0..self.spec.nodes)
            .filter(|id| !except.contains(id) && self.s.node(*id).is_some())
            .filter(|&id| self.s.world().core(id).is_member())
            .take(3)
            .collect()
    }

    fn restart(&mut self, node: NodeId, all: &[NodeId]) -> RestartReport {
        let held: BTreeSet<_> = self
            .s
            .hosts(self.kind)
            .into_iter()
            .filter(|(_, hosts)| hosts.contains(&node))
            .map(|(shard, _)| shard)
            .collect();
        let kind = self.kind;
        let t0 = self.s.now();
        self.s.leave(node);
        let rehomed_s = self.poll_until(t0, |s| {
            let hosts = s.hosts(kind);
            held.iter().all(|shard| {
                hosts
                    .get(shard)
                    .is_some_and(|h| h.len() == 1 && h[0] != node)
            })
        });
        let stopped_s = self.poll_until(t0, |s| s.node(node).is_none());
        let t0 = self.s.now();
        self.s.restart(node);
        let seeds = self.seeds(&BTreeSet::from([node]));
        self.s.join(node, &seeds);
        let rejoined_s = self.poll_until(t0, |s| agreed(s, all));
        let share = (self.spec.shards as usize) / self.spec.nodes;
        let refilled_s = self.poll_until(t0, |s| {
            s.shard_counts(kind).get(&node).copied().unwrap_or(0) >= share
        });
        RestartReport {
            node,
            shards_hosted: held.len(),
            rehomed_s,
            stopped_s,
            rejoined_s,
            refilled_s,
        }
    }

    fn partition(&mut self, all: &[NodeId]) -> PartitionReport {
        let cut = self.spec.nodes - self.spec.minority;
        let (majority, minority) = all.split_at(cut);
        let minority_set: BTreeSet<NodeId> = minority.iter().copied().collect();
        let kind = self.kind;
        let shards_cut_off = self
            .s
            .hosts(kind)
            .values()
            .filter(|h| h.iter().any(|n| minority_set.contains(n)))
            .count();
        let t0 = self.s.now();
        self.s.partition(&[majority, minority]);
        let majority_converged_s = self.poll_until(t0, |s| agreed_among(s, majority));
        let shards = self.spec.shards as usize;
        let rehomed_s = self.poll_until(t0, |s| {
            let hosts = s.hosts(kind);
            hosts.len() == shards
                && hosts
                    .values()
                    .all(|h| h.len() == 1 && !minority_set.contains(&h[0]))
        });
        // The minority downed itself; once its nodes have stopped, they start again.
        self.poll_until(self.s.now(), |s| {
            minority.iter().all(|&id| s.node(id).is_none())
        });
        self.s.heal();
        let t0 = self.s.now();
        let seeds = self.seeds(&minority_set);
        for &id in minority {
            self.s.restart(id);
            self.s.join(id, &seeds);
        }
        let rejoined_s = self.poll_until(t0, |s| agreed(s, all));
        let share = shards / self.spec.nodes;
        let refilled_s = self.poll_until(t0, |s| {
            let counts = s.shard_counts(kind);
            all.iter()
                .all(|id| counts.get(id).copied().unwrap_or(0) >= share)
        });
        PartitionReport {
            minority: minority.len(),
            shards_cut_off,
            majority_converged_s,
            rehomed_s,
            rejoined_s,
            refilled_s,
        }
    }
}

/// Every node of `ids` sees exactly `ids` Up, and all agree.
fn agreed(s: &ShardingWorld, ids: &[NodeId]) -> bool {
    s.world().all_up(ids) && s.world().agreed()
}

/// Like [`agreed`], among the nodes of `ids` only (others may still run, cut off).
fn agreed_among(s: &ShardingWorld, ids: &[NodeId]) -> bool {
    if !s.world().all_up(ids) {
        return false;
    }
    let first = s.world().core(ids[0]);
    ids.iter().all(|&id| {
        let core = s.world().core(id);
        core.is_converged() && core.leader() == first.leader()
    })
}

fn secs(at: Instant, from: Instant) -> f64 {
    at.saturating_duration_since(from).as_secs_f64()
}
