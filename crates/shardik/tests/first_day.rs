//! What a new user met on their first day, through the facade alone: entities sent right
//! after `init` on every node all landed on the node whose region registered first, because
//! nothing said when the other nodes could be given shards. `wait_until_hosted` says it.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use shardik::{Address, Entity, EntityContext, EntityKind, EntityTypeKey, Node, ReplyTo, Settings};

#[derive(Serialize, Deserialize)]
enum Cmd {
    Add(u64),
    Get(ReplyTo<u64>),
}

#[derive(Default)]
struct Counter(u64);

impl Entity for Counter {
    type Command = Cmd;
    async fn handle(&mut self, cmd: Cmd, _ctx: &mut EntityContext<Self>) {
        match cmd {
            Cmd::Add(n) => self.0 += n,
            Cmd::Get(reply_to) => reply_to.send(self.0),
        }
    }
}

const COUNTER: EntityTypeKey<Counter> = EntityTypeKey::new("counter");

/// Generous bound on anything that should take well under a second here.
const BOUND: Duration = Duration::from_secs(20);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn fast_settings() -> Settings {
    let mut settings = Settings::reference();
    settings.cluster.seed_node_timeout = Duration::from_millis(300);
    settings.cluster.periodic_tasks_initial_delay = Duration::from_millis(50);
    settings.cluster.gossip_interval = Duration::from_millis(100);
    settings.cluster.leader_actions_interval = Duration::from_millis(100);
    settings
}

async fn start(port: u16, seed: &Address) -> Node {
    Node::builder(fast_settings())
        .bind(Address::new("127.0.0.1", port))
        .seeds([seed.clone()])
        .start()
        .await
        .expect("the node starts")
}

/// Waits until `node` sees `n` members, all Up.
async fn until_members_up(node: &Node, n: usize) {
    let all_up = |snapshot: &shardik::MembershipSnapshot| {
        snapshot.members.len() == n
            && snapshot
                .members
                .iter()
                .all(|m| m.status == shardik::MemberStatus::Up)
    };
    let mut watch = node.handle().watch();
    tokio::time::timeout(BOUND, async {
        while !all_up(&watch.borrow_and_update()) {
            watch.changed().await.expect("the node runs");
        }
    })
    .await
    .expect("every member Up in time");
}

/// Two nodes, the kind started on both, and a wait until both can host it: the first
/// entities then spread over both nodes, in every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_waiting_until_hosted_the_first_entities_spread_over_every_node() {
    let seed_port = free_port();
    let seed = Address::new("127.0.0.1", seed_port);
    let first = start(seed_port, &seed).await;
    let second = start(free_port(), &seed).await;
    for node in [&first, &second] {
        tokio::time::timeout(BOUND, node.wait_until_up())
            .await
            .expect("Up in time")
            .expect("Up");
    }
    // Both see both Up before the kind starts, as a program that waits for its members does.
    for node in [&first, &second] {
        until_members_up(node, 2).await;
    }
    for node in [&first, &second] {
        node.sharding()
            .init(EntityKind::for_key(COUNTER, |_| Counter::default()))
            .expect("the kind starts");
    }
    first
        .sharding()
        .wait_until_hosted("counter", BOUND)
        .await
        .expect("both nodes host the kind");

    for i in 0..50 {
        let counter = first
            .sharding()
            .entity_ref_for(COUNTER, &format!("c-{i}"))
            .expect("a reference");
        counter.tell(Cmd::Add(1)).await.expect("told");
        let value = counter
            .ask(Cmd::Get, Duration::from_secs(10))
            .await
            .expect("answered");
        assert_eq!(value, 1);
    }
    let stats = first
        .sharding()
        .cluster_stats("counter", Duration::from_secs(5))
        .await
        .expect("the kind runs here");
    assert!(
        stats.failed.is_empty() && stats.unregistered.is_empty(),
        "{stats:?}"
    );
    assert_eq!(stats.regions.len(), 2, "{stats:?}");
    for (node, shards) in &stats.regions {
        let entities: u32 = shards.iter().map(|(_, n)| n).sum();
        assert!(entities > 0, "no entity on {node}: {stats:?}");
    }
    second.leave().await;
    first.leave().await;
}

/// A kind that one member never starts is not hosted there: the wait says which member, in
/// time, instead of waiting for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_kind_a_member_never_starts_names_that_member() {
    let seed_port = free_port();
    let seed = Address::new("127.0.0.1", seed_port);
    // The first is Up before the second starts, so it is the oldest and runs the kind's
    // coordinator. (Started together, both may be moved Up at once and the oldest be either;
    // a kind the oldest member never starts has no coordinator at all, and then no member
    // can host it, which the wait reports too.)
    let first = start(seed_port, &seed).await;
    first.wait_until_up().await.expect("Up");
    let second = start(free_port(), &seed).await;
    second.wait_until_up().await.expect("Up");
    until_members_up(&first, 2).await;
    first
        .sharding()
        .init(EntityKind::for_key(COUNTER, |_| Counter::default()))
        .expect("the kind starts");
    // The first node's own region registers with its coordinator (in a moment, or longer on
    // a loaded machine); the second never starts the kind, so each bounded wait fails, and
    // once the first is registered it names the second alone.
    let second_address = second.self_node().address.to_string();
    let deadline = std::time::Instant::now() + BOUND;
    let err = loop {
        let err = first
            .sharding()
            .wait_until_hosted("counter", Duration::from_secs(1))
            .await
            .expect_err("the second node never starts the kind");
        if err.missing == [second_address.clone()] {
            break err;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still missing {:?}",
            err.missing
        );
    };
    assert!(err.to_string().contains("sharding().init"), "{err}");
    second.leave().await;
    first.leave().await;
}
