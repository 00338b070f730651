//! Sharding on real nodes in one process, over loopback TCP: entities are created on their
//! first message, answer asks from any node, live on one node, and move on graceful shutdown.

mod common;

use common::{fast_membership, free_port};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use shardik_core::membership::{Address, MembershipConfig, UniqueAddress};
use shardik_runtime::node::{self, NodeOptions, RunningNode};
use shardik_runtime::sharding::{
    AllocationSnapshot, AskError, AsyncShardAllocationStrategy, Entity, EntityContext, EntityKind,
    EntityRegion, EntityTypeKey, ReplyTo, Sharding, ShardingConfig, ShardingError, StrategyFuture,
};
use shardik_runtime::transport::TransportConfig;

/// What the test counter is told or asked.
#[derive(Debug, Serialize, Deserialize)]
enum CounterCommand {
    Increment,
    IncrementAndGet(ReplyTo<CounterReply>),
    Get(ReplyTo<CounterReply>),
}

/// The test counter's answer: its value and the node that runs it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
struct CounterReply {
    value: u64,
    node: String,
}

/// A number per id, in memory.
#[derive(Debug, Default)]
struct Counter {
    value: u64,
}

impl Entity for Counter {
    type Command = CounterCommand;

    async fn handle(&mut self, cmd: CounterCommand, ctx: &mut EntityContext<Self>) {
        let reply_to = match cmd {
            CounterCommand::Increment => {
                self.value += 1;
                return;
            }
            CounterCommand::IncrementAndGet(reply_to) => {
                self.value += 1;
                reply_to
            }
            CounterCommand::Get(reply_to) => reply_to,
        };
        reply_to.send(CounterReply {
            value: self.value,
            node: ctx.node().address.to_string(),
        });
    }
}

const COUNTER: EntityTypeKey<Counter> = EntityTypeKey::new("counter");

fn counter_kind() -> EntityKind<Counter> {
    EntityKind::for_key(COUNTER, |_| Counter::default())
}

fn membership() -> MembershipConfig {
    fast_membership("sharding-test", &[])
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
    let running = node::start(NodeOptions {
        bind: Address::new("127.0.0.1", port),
        advertise: None,
        seeds: vec![Address::new("127.0.0.1", seed)],
        membership: membership(),
        transport: TransportConfig::default(),
        leave_timeout: Duration::from_secs(10),
    })
    .await
    .expect("node starts");
    let sharding = Sharding::start(&running, sharding_config()).expect("sharding starts");
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
                .ask(CounterCommand::IncrementAndGet, Duration::from_secs(10))
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
            .ask(CounterCommand::IncrementAndGet, Duration::from_secs(10))
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
            .ask(CounterCommand::IncrementAndGet, Duration::from_secs(10))
            .await
            .expect("answered");
        assert_eq!(r.node, low, "{id}: the synchronous strategy's choice");
        let r = highest
            .entity_ref(&id)
            .ask(CounterCommand::IncrementAndGet, Duration::from_secs(10))
            .await
            .expect("answered");
        assert_eq!(r.node, high, "{id}: the asynchronous strategy's choice");
    }
}

/// Settings for the builder tests: the reference's, with membership timers shortened.
fn fast_settings() -> shardik_runtime::config::Settings {
    let mut s = shardik_runtime::config::Settings::load(None).expect("built-in settings load");
    s.cluster.name = "builder-test".into();
    s.cluster.seed_node_timeout = Duration::from_millis(500);
    s.cluster.periodic_tasks_initial_delay = Duration::from_millis(100);
    s.cluster.gossip_interval = Duration::from_millis(200);
    s.cluster.leader_actions_interval = Duration::from_millis(200);
    s.cluster.sharding.number_of_shards = 20;
    s.cluster.sharding.retry_interval = Duration::from_millis(200);
    s
}

/// A node from the builder at `bind`, joining through `seed` (itself, to form a cluster).
async fn start_with_builder(bind: &Address, seed: &Address) -> shardik_runtime::Node {
    shardik_runtime::Node::builder(fast_settings())
        .bind(bind.clone())
        .seeds([seed.clone()])
        .start()
        .await
        .unwrap_or_else(|e| panic!("node {bind} starts: {e}"))
}

async fn wait_for_event(
    events: &mut tokio::sync::broadcast::Receiver<shardik_core::membership::ClusterEvent>,
    what: &str,
    matches: impl Fn(&shardik_core::membership::ClusterEvent) -> bool,
) {
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match events.recv().await {
                Ok(ev) if matches(&ev) => return,
                Ok(_) => {}
                Err(e) => panic!("event stream failed while waiting for {what}: {e}"),
            }
        }
    })
    .await;
    assert!(found.is_ok(), "no {what} event within 20 s");
}

/// The application's front door: a node with sharding in one call, entity references looked
/// up by typed key from the node's sharding, both ways of telling, cluster events as a stream,
/// and a leave that waits until the node is out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_from_the_builder_serves_entities_by_key_and_publishes_events() {
    use shardik_core::membership::{ClusterEvent, ShutdownReason};

    let (a_addr, b_addr) = (
        Address::new("127.0.0.1", free_port()),
        Address::new("127.0.0.1", free_port()),
    );
    let a = start_with_builder(&a_addr, &a_addr).await;
    a.sharding().init(counter_kind()).expect("kind registers");
    let mut events = a.subscribe();
    wait_for_event(
        &mut events,
        "a Up",
        |ev| matches!(ev, ClusterEvent::MemberUp(m) if m.addr.address == a_addr),
    )
    .await;
    let b = start_with_builder(&b_addr, &a_addr).await;
    b.sharding().init(counter_kind()).expect("kind registers");
    wait_for_event(
        &mut events,
        "b Up",
        |ev| matches!(ev, ClusterEvent::MemberUp(m) if m.addr.address == b_addr),
    )
    .await;

    // From anywhere with the node's sharding: a reference by key, not by the region handle.
    let counter = b
        .sharding()
        .entity_ref_for(COUNTER, "by-key")
        .expect("known kind");
    let first = counter
        .ask(CounterCommand::IncrementAndGet, Duration::from_secs(10))
        .await
        .expect("answered");
    assert_eq!(first.value, 1);
    counter
        .tell(CounterCommand::Increment)
        .await
        .expect("tell waits for room");
    counter
        .try_tell(CounterCommand::Increment)
        .expect("room in the queue");
    let value = counter
        .ask(CounterCommand::Get, Duration::from_secs(10))
        .await
        .expect("answered")
        .value;
    assert_eq!(value, 3, "one sender's tells and asks arrive in order");
    let through_a = a
        .sharding()
        .entity_ref_for(COUNTER, "by-key")
        .expect("known");

    const OTHER: EntityTypeKey<Counter> = EntityTypeKey::new("not-registered");
    let never_initialised = b.sharding().entity_ref_for(OTHER, "x").err();
    assert_eq!(
        never_initialised,
        Some(ShardingError::NotInitialized("not-registered".into()))
    );
    let text = never_initialised.unwrap().to_string();
    assert!(
        text.contains("never initialised on this node")
            && text.contains("call sharding().init(EntityKind::new(\"not-registered\""),
        "{text}"
    );
    struct Impostor;
    impl Entity for Impostor {
        type Command = CounterCommand;
        async fn handle(&mut self, _: CounterCommand, _: &mut EntityContext<Self>) {
            unreachable!("never registered")
        }
    }
    const WRONG: EntityTypeKey<Impostor> = EntityTypeKey::new("counter");
    assert_eq!(
        b.sharding().entity_ref_for(WRONG, "x").err(),
        Some(ShardingError::WrongEntityType("counter".into()))
    );

    assert_eq!(b.leave().await, ShutdownReason::Left);
    // A reference into the stopped node's region says so, as the one error a tell can meet
    // besides a full queue.
    let stopped = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match counter.try_tell(CounterCommand::Increment) {
                Err(shardik_runtime::sharding::TellError::RegionStopped) => return,
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await;
    assert!(
        stopped.is_ok(),
        "the left node's region reports itself stopped"
    );
    assert_eq!(
        counter.tell(CounterCommand::Increment).await,
        Err(shardik_runtime::sharding::TellError::RegionStopped)
    );
    wait_for_event(&mut events, "b removed", |ev| {
        matches!(ev, ClusterEvent::MemberRemoved { member, .. } if member.addr.address == b_addr)
    })
    .await;
    let value = through_a
        .ask(CounterCommand::Get, Duration::from_secs(10))
        .await
        .expect("answered from a")
        .value;
    assert!(value == 3 || value == 0, "the counter answers after b left");
    let (running, _) = a.into_parts();
    assert!(matches!(
        Sharding::start(&running, sharding_config()),
        Err(shardik_runtime::sharding::StartError::AlreadyStarted)
    ));
}

/// An account that refuses to go below zero, with a refusal of its own type.
#[derive(Default)]
struct Account(u64);

/// Each answered with the balance, or why not.
type Answer = ReplyTo<Result<u64, AccountError>>;

#[derive(Serialize, Deserialize)]
enum AccountCommand {
    Deposit(u64, Answer),
    Withdraw(u64, Answer),
}

/// Why an account refuses a withdrawal: a type the caller matches, carried by serde.
#[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
enum AccountError {
    Insufficient { balance: u64, asked: u64 },
}

impl Entity for Account {
    type Command = AccountCommand;

    async fn handle(&mut self, cmd: AccountCommand, _: &mut EntityContext<Self>) {
        let reply_to = match cmd {
            AccountCommand::Deposit(n, reply_to) => {
                self.0 += n;
                reply_to
            }
            AccountCommand::Withdraw(n, reply_to) if n > self.0 => {
                return reply_to.send(Err(AccountError::Insufficient {
                    balance: self.0,
                    asked: n,
                }));
            }
            AccountCommand::Withdraw(n, reply_to) => {
                self.0 -= n;
                reply_to
            }
        };
        reply_to.send(Ok(self.0));
    }
}

/// `ask_result` gives a success's value, and a refusal as the entity's own error, across nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_result_gives_a_refusal_as_the_entitys_own_error() {
    const ACCOUNT: EntityTypeKey<Account> = EntityTypeKey::new("account");
    let pb = free_port();
    let a_addr = Address::new("127.0.0.1", free_port());
    let a = start_with_builder(&a_addr, &a_addr).await;
    let b = start_with_builder(&Address::new("127.0.0.1", pb), &a_addr).await;
    for n in [&a, &b] {
        n.sharding()
            .init(EntityKind::for_key(ACCOUNT, |_| Account::default()))
            .expect("kind registers");
    }
    let mut events = a.subscribe();
    if a.handle().snapshot().members.len() < 2 {
        wait_for_event(&mut events, "two members Up", |ev| {
            matches!(ev, shardik_core::membership::ClusterEvent::MemberUp(m) if m.addr.address.port == pb)
        })
        .await;
    }
    // Through both nodes, so that at least one of the asks crosses the network.
    for (i, node) in [&a, &b].into_iter().enumerate() {
        let account = node
            .sharding()
            .entity_ref_for(ACCOUNT, &format!("acct-{i}"))
            .expect("known kind");
        let balance = account
            .ask_result(|r| AccountCommand::Deposit(10, r), Duration::from_secs(10))
            .await
            .expect("deposit succeeds");
        assert_eq!(balance, 10);
        let refused = account
            .ask_result(|r| AccountCommand::Withdraw(25, r), Duration::from_secs(10))
            .await;
        assert_eq!(
            refused,
            Err(AskError::Refused(AccountError::Insufficient {
                balance: 10,
                asked: 25
            }))
        );
        let balance = account
            .ask_result(|r| AccountCommand::Withdraw(4, r), Duration::from_secs(10))
            .await
            .expect("withdrawal succeeds");
        assert_eq!(balance, 6);
    }
    b.leave().await;
    a.leave().await;
}
