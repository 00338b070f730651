//! Sharding on real nodes in one process, over loopback TCP: entities are created on their
//! first message, answer asks from any node, live on one node, and move on graceful shutdown.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use shardik_core::membership::{Address, MembershipConfig, UniqueAddress};
use shardik_runtime::node::{self, NodeOptions, RunningNode};
use shardik_runtime::sharding::counter::{Counter, CounterCommand, counter_kind};
use shardik_runtime::sharding::{
    AllocationSnapshot, AsyncShardAllocationStrategy, EntityRegion, Sharding, ShardingConfig,
    StrategyFuture,
};
use shardik_runtime::transport::TransportConfig;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

fn membership() -> MembershipConfig {
    MembershipConfig {
        cluster_name: "sharding-test".into(),
        seed_node_timeout: Duration::from_millis(500),
        periodic_tasks_initial_delay: Duration::from_millis(100),
        gossip_interval: Duration::from_millis(200),
        leader_actions_interval: Duration::from_millis(200),
        ..MembershipConfig::default()
    }
}

fn sharding_config() -> ShardingConfig {
    let mut c = ShardingConfig {
        number_of_shards: 20,
        down_removal_margin: Duration::from_secs(1),
        shutdown_timeout: Duration::from_secs(20),
        ..ShardingConfig::default()
    };
    c.region.retry_interval = Duration::from_millis(200);
    c.coordinator.rebalance_interval = Duration::from_millis(500);
    c
}

struct TestNode {
    running: RunningNode,
    sharding: Sharding,
    counters: EntityRegion<Counter>,
}

async fn start(port: u16, seed: u16) -> TestNode {
    let mut running = node::start(NodeOptions {
        bind: Address::new("127.0.0.1", port),
        seeds: vec![Address::new("127.0.0.1", seed)],
        membership: membership(),
        transport: TransportConfig::default(),
        leave_timeout: Duration::from_secs(10),
    })
    .await
    .expect("node starts");
    let (_, dummy) = tokio::sync::mpsc::channel(1);
    let user = std::mem::replace(&mut running.user_messages, dummy);
    let sharding = Sharding::start(
        running.handle.clone(),
        running.self_node.clone(),
        user,
        running.user_sender.clone(),
        sharding_config(),
    );
    let counters = sharding.init(counter_kind()).expect("kind registers");
    TestNode {
        running,
        sharding,
        counters,
    }
}

async fn wait_up(nodes: &[&TestNode], n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let all = nodes.iter().all(|t| {
            let s = t.running.handle.snapshot();
            s.members
                .iter()
                .filter(|m| m.status == shardik_core::membership::MemberStatus::Up)
                .count()
                == n
        });
        if all {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "cluster did not form"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_answer_from_every_node_and_live_on_one() {
    let (p1, p2, p3) = (free_port(), free_port(), free_port());
    let a = start(p1, p1).await;
    let b = start(p2, p1).await;
    let c = start(p3, p1).await;
    wait_up(&[&a, &b, &c], 3).await;
    let ids: Vec<String> = (0..60).map(|i| format!("c{i}")).collect();
    // Each counter is incremented once through every node.
    for node in [&a, &b, &c] {
        for id in &ids {
            let r = node
                .counters
                .entity_ref(id)
                .ask(CounterCommand::Increment, Duration::from_secs(10))
                .await
                .expect("answered");
            assert!(r.value >= 1);
        }
    }
    let mut homes: BTreeMap<String, String> = BTreeMap::new();
    for id in &ids {
        let r = a
            .counters
            .entity_ref(id)
            .ask(CounterCommand::Get, Duration::from_secs(10))
            .await
            .expect("answered");
        assert_eq!(r.value, 3, "{id}: one entity saw all three increments");
        homes.insert(id.clone(), r.node);
    }
    let nodes: std::collections::BTreeSet<&String> = homes.values().collect();
    assert_eq!(nodes.len(), 3, "entities spread over the three nodes");
    // Region state agrees: every entity is listed on exactly the node that answered.
    let mut listed = BTreeMap::new();
    for node in [&a, &b, &c] {
        let state = node
            .counters
            .state(Duration::from_secs(5))
            .await
            .expect("state");
        for (_, entities) in state.shards {
            for e in entities {
                assert!(
                    listed
                        .insert(e.to_string(), node.running.self_node.address.to_string())
                        .is_none(),
                    "{e} listed twice"
                );
            }
        }
    }
    assert_eq!(listed, homes);
    // Cluster-wide statistics: every region answered, and the counts add up.
    let stats = b
        .sharding
        .cluster_stats("counter", Duration::from_secs(5))
        .await
        .expect("kind registered");
    assert!(stats.failed.is_empty(), "{:?}", stats.failed);
    assert_eq!(stats.regions.len(), 3);
    let total: u32 = stats.regions.values().flatten().map(|(_, n)| *n).sum();
    assert_eq!(total as usize, ids.len());

    // Graceful shutdown of one node hands its shards to the others; every counter still
    // answers (values restart where entities moved: they are in memory only).
    assert!(c.sharding.shutdown().await, "hand-off completed");
    let state = c.counters.state(Duration::from_secs(5)).await;
    assert!(state.is_none_or(|s| s.shards.is_empty()));
    for id in &ids {
        let r = a
            .counters
            .entity_ref(id)
            .ask(CounterCommand::Get, Duration::from_secs(10))
            .await
            .expect("answered after hand-off");
        assert_ne!(r.node, c.running.self_node.address.to_string());
    }
}

/// A limit-based passivation strategy keeps the number of live entities near its limit while
/// thousands of ids are touched, and every message is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_entity_limit_bounds_live_entities() {
    use shardik_passivation::{ReplacementPolicy, ResolvedStrategy};
    active_entity_limit_bounds_live_entities(|limit| ResolvedStrategy::Limit {
        per_region_limit: limit,
        policy: ReplacementPolicy::LeastRecentlyUsed,
        idle: None,
    })
    .await;
}

/// The same with the recommended composite strategy, whose admission filter often refuses a
/// newcomer: the refused entity still answers its command, then stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_composite_strategy_bounds_live_entities() {
    use shardik_passivation::PassivationSettings;
    let base = PassivationSettings::default()
        .with_strategy("default-strategy")
        .validate()
        .expect("the built-in default-strategy is valid");
    active_entity_limit_bounds_live_entities(move |limit| match base.clone() {
        shardik_passivation::ResolvedStrategy::Composite { settings, idle, .. } => {
            shardik_passivation::ResolvedStrategy::Composite {
                per_region_limit: limit,
                settings,
                idle,
            }
        }
        other => panic!("default-strategy is composite, got {other:?}"),
    })
    .await;
}

async fn active_entity_limit_bounds_live_entities(
    strategy: impl Fn(usize) -> shardik_passivation::ResolvedStrategy,
) {
    let port = free_port();
    let node = start(port, port).await;
    wait_up(&[&node], 1).await;
    const LIMIT: usize = 100;
    let limited = node
        .sharding
        .init(
            shardik_runtime::sharding::EntityKind::new("limited", |_| Counter::default())
                .with_passivation(strategy(LIMIT)),
        )
        .expect("kind registers");
    let mut most = 0;
    for i in 0..3000 {
        let r = limited
            .entity_ref(&format!("e{i}"))
            .ask(CounterCommand::Increment, Duration::from_secs(10))
            .await
            .expect("every message answered");
        assert_eq!(r.value, 1, "a fresh entity each time");
        if i % 100 == 99 {
            let state = limited.state(Duration::from_secs(5)).await.expect("state");
            let live: usize = state.shards.iter().map(|(_, ids)| ids.len()).sum();
            most = most.max(live);
        }
    }
    // The per-region limit is split over the 20 shards (5 each), so at most 100 stay live,
    // plus the one just touched per shard while its victim stops.
    assert!(most <= LIMIT + 20, "at most about {LIMIT} live, saw {most}");
    assert!(
        most >= LIMIT / 2,
        "the limit is used, not undershot: {most}"
    );
    // A passivated entity comes back (as a new incarnation) on its next message. Which ones a
    // strategy keeps is its business (an admission filter may keep the first ones): take one
    // that is not live now.
    let state = limited.state(Duration::from_secs(5)).await.expect("state");
    let live: std::collections::BTreeSet<String> = state
        .shards
        .iter()
        .flat_map(|(_, ids)| ids.iter().map(|id| id.to_string()))
        .collect();
    let gone = (0..3000)
        .map(|i| format!("e{i}"))
        .find(|id| !live.contains(id))
        .expect("some entity was passivated");
    let r = limited
        .entity_ref(&gone)
        .ask(CounterCommand::Get, Duration::from_secs(10))
        .await
        .expect("answered");
    assert_eq!(r.value, 0);
}

/// Places every shard on the region with the lowest address.
struct Lowest;

impl shardik_runtime::sharding::ShardAllocationStrategy<UniqueAddress> for Lowest {
    fn allocate_shard(
        &mut self,
        _requester: &UniqueAddress,
        _shard: &shardik_runtime::sharding::ShardId,
        current: &AllocationSnapshot<UniqueAddress>,
    ) -> Option<UniqueAddress> {
        current.regions().map(|e| e.region.clone()).min()
    }

    fn rebalance(
        &mut self,
        _current: &AllocationSnapshot<UniqueAddress>,
        _in_progress: &BTreeSet<shardik_runtime::sharding::ShardId>,
    ) -> BTreeSet<shardik_runtime::sharding::ShardId> {
        BTreeSet::new()
    }
}

/// Places every shard on the region with the highest address, after asking "elsewhere".
struct HighestLater;

impl AsyncShardAllocationStrategy for HighestLater {
    fn allocate_shard(
        &self,
        _requester: UniqueAddress,
        _shard: shardik_runtime::sharding::ShardId,
        current: AllocationSnapshot<UniqueAddress>,
    ) -> StrategyFuture<Option<UniqueAddress>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            current.regions().map(|e| e.region.clone()).max()
        })
    }

    fn rebalance(
        &self,
        _current: AllocationSnapshot<UniqueAddress>,
        _in_progress: BTreeSet<shardik_runtime::sharding::ShardId>,
    ) -> StrategyFuture<BTreeSet<shardik_runtime::sharding::ShardId>> {
        Box::pin(async { BTreeSet::new() })
    }
}

/// A kind's own allocation strategy, synchronous or asynchronous, decides where its shards
/// live; every entity answers from the node it chose, asked through either node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_allocation_strategies_place_the_shards() {
    use shardik_runtime::sharding::EntityKind;
    let (pa, pb) = (free_port(), free_port());
    let a = start(pa, pa).await;
    let b = start(pb, pa).await;
    wait_up(&[&a, &b], 2).await;
    let register = |t: &TestNode| {
        let lowest = t
            .sharding
            .init(
                EntityKind::new("lowest", |_| Counter::default())
                    .with_allocation_strategy(|| Lowest),
            )
            .expect("kind registers");
        let highest = t
            .sharding
            .init(
                EntityKind::new("highest", |_| Counter::default())
                    .with_async_allocation_strategy(HighestLater),
            )
            .expect("kind registers");
        (lowest, highest)
    };
    let (lowest_a, highest_a) = register(&a);
    let (lowest_b, highest_b) = register(&b);
    let (addr_a, addr_b) = (
        a.running.self_node.address.clone(),
        b.running.self_node.address.clone(),
    );
    let low = addr_a.clone().min(addr_b.clone()).to_string();
    let high = addr_a.max(addr_b).to_string();
    for i in 0..30 {
        let id = format!("p{i}");
        let (lowest, highest) = if i % 2 == 0 {
            (&lowest_a, &highest_a)
        } else {
            (&lowest_b, &highest_b)
        };
        let r = lowest
            .entity_ref(&id)
            .ask(CounterCommand::Increment, Duration::from_secs(10))
            .await
            .expect("answered");
        assert_eq!(r.node, low, "{id}: the synchronous strategy's choice");
        let r = highest
            .entity_ref(&id)
            .ask(CounterCommand::Increment, Duration::from_secs(10))
            .await
            .expect("answered");
        assert_eq!(r.node, high, "{id}: the asynchronous strategy's choice");
    }
}
