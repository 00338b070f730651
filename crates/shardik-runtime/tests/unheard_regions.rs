//! A coordinator that waits for members that neither register nor say they never started the
//! kind says so: a WARN naming them, `Sharding::allocation_held_back` (what `/ready` lists) and
//! the `shardik_sharding_unheard_regions` gauge. A member whose node runs no sharding at all
//! stands in for a node of the previous version, which never answers.
//!
//! The wait only arises when a coordinator starts while such a member is in the cluster: here
//! the oldest node leaves and the next one starts a new coordinator.
#![allow(clippy::disallowed_methods)] // tests spawn plainly: no node span to keep (src/task.rs)

mod common;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use common::{BOUND, counter, eventually, fast_membership, free_port, start_sharding_node_with};
use serde::{Deserialize, Serialize};
use shardik_core::membership::{Address, MemberStatus};
use shardik_runtime::node::{self, NodeOptions, RunningNode, StopRequest};
use shardik_runtime::sharding::{
    Entity, EntityContext, EntityKind, EntityTypeKey, ReplyTo, Sharding,
};
use shardik_runtime::transport::TransportConfig;

#[derive(Debug, Default)]
struct Counter(u64);

/// Adds one; the new count goes to the asker.
#[derive(Debug, Serialize, Deserialize)]
struct Increment(ReplyTo<u64>);

impl Entity for Counter {
    type Command = Increment;

    async fn handle(&mut self, Increment(reply_to): Increment, _: &mut EntityContext<Self>) {
        self.0 += 1;
        reply_to.send(self.0);
    }
}

// One kind per test: the tests share the process's metrics, labelled by kind.
const COUNTER: EntityTypeKey<Counter> = EntityTypeKey::new("unheard-counter");
const ANSWERED: EntityTypeKey<Counter> = EntityTypeKey::new("answered-counter");

/// Everything logged by this test binary (installed once).
fn captured_log() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&log);
        tracing_subscriber::fmt()
            .with_ansi(false)
            .with_max_level(tracing::Level::INFO)
            .with_writer(move || common::LogSink(Arc::clone(&sink)))
            .init();
        log
    })
}

fn log_lines(level: &str, needle: &str) -> Vec<String> {
    let log = captured_log().lock().unwrap();
    String::from_utf8_lossy(&log)
        .lines()
        .filter(|l| l.contains(level) && l.contains(needle))
        .map(str::to_string)
        .collect()
}

const CLUSTER: &str = "unheard";

/// A node with sharding and the kind `key`, joining through `seed`.
async fn counter_node(
    key: EntityTypeKey<Counter>,
    port: u16,
    seed: u16,
) -> (RunningNode, Sharding) {
    let (running, sharding) = start_sharding_node_with(CLUSTER, port, seed, &[], |c| {
        c.coordinator.unheard_warning_after = Duration::from_millis(500);
        c.coordinator.rebalance_interval = Duration::from_millis(300);
    })
    .await;
    sharding
        .init(EntityKind::for_key(key, |_| Counter::default()))
        .expect("init");
    (running, sharding)
}

/// A member that runs no sharding: it never registers a region nor answers, as a node of the
/// previous version that never started the kind.
async fn silent_node(port: u16, seed: u16) -> RunningNode {
    node::start(NodeOptions {
        bind: Address::new("127.0.0.1", port),
        advertise: None,
        seeds: vec![Address::new("127.0.0.1", seed)],
        membership: fast_membership(CLUSTER, &[]),
        transport: TransportConfig::default(),
        leave_timeout: Duration::from_secs(10),
    })
    .await
    .expect("node starts")
}

/// `GET /ready` of `node`'s management API, as JSON.
async fn ready_body(node: &RunningNode, sharding: &Sharding) -> serde_json::Value {
    use tower::ServiceExt;
    let router = shardik_runtime::http::ManagementApi::new(node.handle.clone())
        .sharding(sharding.clone())
        .router();
    let request = axum::http::Request::get("/ready")
        .body(axum::body::Body::empty())
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn up_count(node: &RunningNode) -> usize {
    node.handle
        .snapshot()
        .members
        .iter()
        .filter(|m| m.status == MemberStatus::Up)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_member_is_named_in_a_warning_in_ready_and_in_metrics_until_it_leaves() {
    captured_log();
    let metrics = common::metrics();
    let (pa, pb, pc) = (free_port(), free_port(), free_port());
    // Up one after another, so that a is the oldest and b the next.
    let (a, sharding_a) = counter_node(COUNTER, pa, pa).await;
    eventually("a is Up", || up_count(&a) == 1).await;
    let (b, sharding_b) = counter_node(COUNTER, pb, pa).await;
    eventually("a and b are Up", || up_count(&a) == 2).await;
    let c = silent_node(pc, pa).await;
    eventually("all three are Up", || up_count(&b) == 3).await;
    let counter_a = sharding_a.entity_ref_for(COUNTER, "before").unwrap();
    assert_eq!(counter_a.ask(Increment, BOUND).await, Ok(1));
    assert!(
        sharding_a.allocation_held_back().is_empty(),
        "a's coordinator started before c joined"
    );

    // a leaves: b's new coordinator must hear from c, which never answers.
    a.stop.send(StopRequest::Leave).await.unwrap();
    let _ = a.finished.await;
    drop(sharding_a);
    let c_addr = format!("127.0.0.1:{pc}");
    eventually("b names c as holding allocation back", || {
        sharding_b
            .allocation_held_back()
            .iter()
            .any(|k| k.kind == COUNTER.name() && k.members == vec![c_addr.clone()])
    })
    .await;
    let gauge = |m: &shardik_runtime::metrics::MetricsHandle| {
        counter(
            m,
            "shardik_sharding_unheard_regions",
            &format!("kind=\"{}\"", COUNTER.name()),
        )
    };
    assert_eq!(gauge(&metrics), 1.0);
    let ready = ready_body(&b, &sharding_b).await;
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(
        ready["allocationHeldBack"][0]["kind"],
        COUNTER.name(),
        "{ready}"
    );
    assert_eq!(
        ready["allocationHeldBack"][0]["members"],
        serde_json::json!([c_addr]),
        "{ready}"
    );
    let warned = log_lines("WARN", "allocates no new shard");
    assert!(
        warned.iter().any(|l| l.contains(&c_addr)),
        "no WARN names c: {warned:?}"
    );
    assert!(
        warned
            .iter()
            .all(|l| !l.contains(&format!("127.0.0.1:{pb}"))),
        "only the silent member is named: {warned:?}"
    );

    // A counter never used before needs a new shard: its ask waits until c is gone.
    let counter_b = sharding_b.entity_ref_for(COUNTER, "after").unwrap();
    let waiting = tokio::spawn(async move { counter_b.ask(Increment, BOUND).await });
    c.stop.send(StopRequest::Leave).await.unwrap();
    let _ = c.finished.await;
    assert_eq!(waiting.await.unwrap(), Ok(1), "answered once c left");
    eventually("the wait is over", || {
        sharding_b.allocation_held_back().is_empty()
    })
    .await;
    assert_eq!(gauge(&metrics), 0.0);
    let ready = ready_body(&b, &sharding_b).await;
    assert!(ready.get("allocationHeldBack").is_none(), "{ready}");
    b.stop.send(StopRequest::Leave).await.unwrap();
    let _ = b.finished.await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_says_it_never_started_the_kind_is_not_waited_for() {
    captured_log();
    let metrics = common::metrics();
    let (pa, pb, pc) = (free_port(), free_port(), free_port());
    let (a, sharding_a) = counter_node(ANSWERED, pa, pa).await;
    eventually("a is Up", || up_count(&a) == 1).await;
    let (b, sharding_b) = counter_node(ANSWERED, pb, pa).await;
    eventually("a and b are Up", || up_count(&a) == 2).await;
    // c runs sharding but never initialises the kind: its node answers for it.
    let (c, _sharding_c) = start_sharding_node_with(CLUSTER, pc, pa, &[], |_| {}).await;
    eventually("all three are Up", || up_count(&b) == 3).await;
    let answers_before = counter(
        &metrics,
        "shardik_sharding_kind_not_started_answers_total",
        &format!("kind=\"{}\"", ANSWERED.name()),
    );

    a.stop.send(StopRequest::Leave).await.unwrap();
    let _ = a.finished.await;
    drop(sharding_a);
    let counter_b = sharding_b.entity_ref_for(ANSWERED, "fresh").unwrap();
    assert_eq!(
        counter_b.ask(Increment, Duration::from_secs(5)).await,
        Ok(1),
        "b's new coordinator allocates without waiting for c"
    );
    let answers_after = counter(
        &metrics,
        "shardik_sharding_kind_not_started_answers_total",
        &format!("kind=\"{}\"", ANSWERED.name()),
    );
    assert!(
        answers_after > answers_before,
        "c answered ({answers_before} -> {answers_after})"
    );
    let c_addr = format!("127.0.0.1:{pc}");
    assert!(
        !log_lines("INFO", &format!("member {c_addr} has not started")).is_empty(),
        "b's coordinator logged c"
    );
    assert!(sharding_b.allocation_held_back().is_empty());
    for n in [b, c] {
        n.stop.send(StopRequest::Leave).await.unwrap();
        let _ = n.finished.await;
    }
}
