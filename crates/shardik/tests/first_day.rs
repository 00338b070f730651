//! What a new user met on their first day, through the facade alone: entities sent right
//! after `init` on every node all landed on the node whose region registered first, because
//! nothing said when the other nodes could be given shards. `wait_until_hosted` says it. The
//! tests use the test kit's cluster: no port and no timing key of their own.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use shardik::testkit::TestCluster;
use shardik::{
    Entity, EntityContext, EntityKind, EntityTypeKey, ReplyTo, Settings, ShutdownReason,
};

#[derive(Serialize, Deserialize)]
enum Cmd {
    Add(u64),
    Get(ReplyTo<u64>),
}

#[derive(Default)]
struct Tally(u64);

impl Entity for Tally {
    type Command = Cmd;
    async fn handle(&mut self, cmd: Cmd, _ctx: &mut EntityContext<Self>) {
        match cmd {
            Cmd::Add(n) => self.0 += n,
            Cmd::Get(reply_to) => reply_to.send(self.0),
        }
    }
}

const TALLY: EntityTypeKey<Tally> = EntityTypeKey::new("tally");

/// Generous bound on anything that should take well under a second here.
const BOUND: Duration = Duration::from_secs(20);

/// Two nodes, the kind started on both, and a wait until both can host it (what
/// `TestCluster::init` does): the first entities then spread over both nodes, in every run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_waiting_until_hosted_the_first_entities_spread_over_every_node() {
    let cluster = TestCluster::start(2, Settings::reference())
        .await
        .expect("the cluster comes up");
    for node in cluster.nodes() {
        node.sharding()
            .init(EntityKind::for_key(TALLY, |_| Tally::default()))
            .expect("the kind starts");
    }
    cluster
        .node(0)
        .sharding()
        .wait_until_hosted("tally", BOUND)
        .await
        .expect("both nodes host the kind");

    let sharding = cluster.node(0).sharding();
    for i in 0..50 {
        let tally = sharding
            .entity_ref_for(TALLY, &format!("t-{i}"))
            .expect("a reference");
        tally.tell(Cmd::Add(1)).await.expect("told");
        let value = tally
            .ask(Cmd::Get, Duration::from_secs(10))
            .await
            .expect("answered");
        assert_eq!(value, 1);
    }
    let stats = sharding
        .cluster_stats("tally", Duration::from_secs(5))
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
    cluster.leave().await;
}

/// A kind that one member never starts is not hosted there: the wait says which member, in
/// time, instead of waiting for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_kind_a_member_never_starts_names_that_member() {
    // Node 0 is the oldest, so the kind's coordinator runs there. (A kind the oldest member
    // never starts has no coordinator at all, and no member can host it.)
    let cluster = TestCluster::start(2, Settings::reference())
        .await
        .expect("the cluster comes up");
    let (first, second) = (cluster.node(0), cluster.node(1));
    first
        .sharding()
        .init(EntityKind::for_key(TALLY, |_| Tally::default()))
        .expect("the kind starts");
    // The first node's own region registers with its coordinator in a moment (longer on a
    // loaded machine); the second never starts the kind, so each bounded wait fails, and once
    // the first is registered it names the second alone.
    let second_address = second.self_node().address.to_string();
    let deadline = std::time::Instant::now() + BOUND;
    let err = loop {
        let err = first
            .sharding()
            .wait_until_hosted("tally", Duration::from_secs(1))
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
    cluster.leave().await;
}

/// The last two nodes of a cluster leave one just after the other: each then has nobody to
/// hand its shards to, and stops them where they are. Both leaves end, as leaves, at once.
/// (The hang this guards against, a region waiting for a coordinator no member would run
/// until the leave timeout, needs the first node's removal to lag behind its exit; the
/// simulator reproduces it: `the_last_nodes_leaving_one_after_the_other_do_not_wait_for_a_coordinator`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_two_nodes_leaving_together_both_leave_promptly() {
    let cluster = TestCluster::start(2, Settings::reference())
        .await
        .expect("the cluster comes up");
    cluster
        .init(|| EntityKind::for_key(TALLY, |_| Tally::default()))
        .await
        .expect("both nodes host the kind");
    let sharding = cluster.node(0).sharding();
    for i in 0..20 {
        let tally = sharding
            .entity_ref_for(TALLY, &format!("t-{i}"))
            .expect("a reference");
        tally
            .ask(Cmd::Get, Duration::from_secs(10))
            .await
            .expect("answered");
    }
    let mut nodes = cluster.into_nodes().into_iter();
    let (oldest, next) = (nodes.next().unwrap(), nodes.next().unwrap());
    let started = std::time::Instant::now();
    let first = tokio::spawn(oldest.leave());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = tokio::spawn(next.leave());
    let reasons = tokio::time::timeout(BOUND, async {
        (first.await.unwrap(), second.await.unwrap())
    })
    .await
    .expect("both leaves end well before the leave timeout");
    assert_eq!(reasons, (ShutdownReason::Left, ShutdownReason::Left));
    assert!(started.elapsed() < BOUND);
}
