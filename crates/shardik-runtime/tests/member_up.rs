//! `Node::wait_until_up` and `Node::on_member_up` (Akka's `registerOnMemberUp`): they resolve,
//! or run, once the node is Up, and fail, or never run, when it stops before.
#![allow(clippy::disallowed_methods)] // tests spawn plainly: no node span to keep (src/task.rs)

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{BOUND, eventually, free_port};
use shardik_core::membership::{Address, MemberStatus, ShutdownReason};
use shardik_runtime::config::Settings;
use shardik_runtime::{Node, NotUp};

fn settings() -> Settings {
    Settings::from_toml_str(
        r#"
        [cluster]
        seed-node-timeout = "500ms"
        periodic-tasks-initial-delay = "100ms"
        gossip-interval = "200ms"
        leader-actions-interval = "200ms"
        "#,
    )
    .expect("settings")
}

async fn start(port: u16, seeds: Vec<Address>) -> Node {
    Node::builder(settings())
        .bind(Address::new("127.0.0.1", port))
        .seeds(seeds)
        .leave_timeout(Duration::from_secs(10))
        .start()
        .await
        .expect("node starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_becomes_up_resolves_and_runs_each_callback_once() {
    let port = free_port();
    let node = start(port, vec![Address::new("127.0.0.1", port)]).await;
    let ran = Arc::new(AtomicUsize::new(0));
    let before = Arc::clone(&ran);
    node.on_member_up(move || {
        before.fetch_add(1, Ordering::SeqCst);
    });
    tokio::time::timeout(BOUND, node.wait_until_up())
        .await
        .expect("Up within the bound")
        .expect("Up");
    assert_eq!(node.handle().snapshot().self_status, Some(MemberStatus::Up));
    eventually("the callback registered before Up ran", || {
        ran.load(Ordering::SeqCst) == 1
    })
    .await;
    // Registered once the node is Up: runs at once, as the reference's does.
    let after = Arc::clone(&ran);
    node.on_member_up(move || {
        after.fetch_add(10, Ordering::SeqCst);
    });
    eventually("the callback registered after Up ran", || {
        ran.load(Ordering::SeqCst) == 11
    })
    .await;
    // Already Up: resolves at once, again.
    assert_eq!(node.wait_until_up().await, Ok(()));
    node.leave().await;
    assert_eq!(ran.load(Ordering::SeqCst), 11, "each ran once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_stops_before_it_is_up_fails_the_wait_and_never_runs_the_callback() {
    // Its only seed is a port nobody listens on: it never joins.
    let node = start(free_port(), vec![Address::new("127.0.0.1", free_port())]).await;
    let ran = Arc::new(AtomicUsize::new(0));
    let flag = Arc::clone(&ran);
    node.on_member_up(move || {
        flag.fetch_add(1, Ordering::SeqCst);
    });
    let handle = node.handle().clone();
    let waiting = tokio::spawn(async move { handle.wait_until_up().await });
    node.leave().await;
    let result = tokio::time::timeout(BOUND, waiting)
        .await
        .expect("the wait ends when the node stops")
        .unwrap();
    assert_eq!(result.as_ref().map_err(|e| e.last_status), Err(None));
    let text = result.unwrap_err().to_string();
    assert!(
        text.contains("stopped before it became Up") && text.contains("cluster.seed-nodes"),
        "{text}"
    );
    // The callback's task ended with the wait: it can no longer run.
    tokio::task::yield_now().await;
    assert_eq!(ran.load(Ordering::SeqCst), 0);
}

/// A joiner the cluster refuses (another `number-of-shards`) learns why from the wait itself,
/// not only from its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_joiner_learns_from_the_wait_why_it_was_refused() {
    let seed_port = free_port();
    let seed = Address::new("127.0.0.1", seed_port);
    let first = start(seed_port, vec![seed.clone()]).await;
    first.wait_until_up().await.expect("the first node is Up");

    let mut other = settings();
    other.cluster.sharding.number_of_shards = 500;
    let joiner = Node::builder(other)
        .bind(Address::new("127.0.0.1", free_port()))
        .seeds([seed])
        .start()
        .await
        .expect("node starts");
    let refused = tokio::time::timeout(BOUND, joiner.wait_until_up())
        .await
        .expect("the wait ends when the joiner is refused")
        .expect_err("the joiner is refused");
    let Some(ShutdownReason::IncompatibleConfig(why)) = &refused.reason else {
        panic!("stopped for another reason: {refused:?}");
    };
    assert!(why.contains("number-of-shards"), "{why}");
    let text = refused.to_string();
    assert!(
        text.contains("refused its configuration") && text.contains("number-of-shards"),
        "{text}"
    );
    assert!(!text.contains("cluster.seed-nodes"), "{text}");
    first.leave().await;
}

/// A node whose seed nobody answers waits for it (it may start later), and a bounded wait
/// names the seed and why it did not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_wait_names_the_seeds_that_did_not_answer() {
    let dead_seed = Address::new("127.0.0.1", free_port());
    let node = start(free_port(), vec![dead_seed.clone()]).await;
    // `seed-node-timeout` is 500 ms here: the first report comes well within the wait.
    let err = node
        .wait_until_up_within(Duration::from_secs(3))
        .await
        .expect_err("the node cannot become Up");
    let NotUp::TimedOut {
        unanswered_seeds,
        last_status,
        ..
    } = &err
    else {
        panic!("not a timeout: {err:?}");
    };
    assert_eq!(*last_status, None);
    assert_eq!(unanswered_seeds.len(), 1, "{unanswered_seeds:?}");
    assert!(
        unanswered_seeds[0].starts_with(&dead_seed.to_string())
            && unanswered_seeds[0].contains("refused"),
        "{unanswered_seeds:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&dead_seed.to_string()) && text.contains("cluster.seed-nodes"),
        "{text}"
    );
    node.leave().await;
}
