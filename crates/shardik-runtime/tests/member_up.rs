//! `Node::wait_until_up` and `Node::on_member_up` (Akka's `registerOnMemberUp`): they resolve,
//! or run, once the node is Up, and fail, or never run, when it stops before.
#![allow(clippy::disallowed_methods)] // tests spawn plainly: no node span to keep (src/task.rs)

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{BOUND, eventually, free_port};
use shardik_core::membership::{Address, MemberStatus};
use shardik_runtime::Node;
use shardik_runtime::config::Settings;

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
