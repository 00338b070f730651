//! Reliable delivery across real `shardik node` processes, on SQLite and on a real PostgreSQL
//! server: a producer node (`--demo-producer`, no counters of its own) hands 10,000 increments
//! to 300 durable `reliable-counter`s hosted by other nodes. During the run one counter node
//! is SIGKILLed, the producer's node is SIGKILLed while its increments are in flight and
//! started again on its durable queue, and a new counter node joins, so shards move. At the
//! end every counter equals exactly the number of increments the producer accepted for it.
//!
//! The PostgreSQL test needs `SHARDIK_TEST_POSTGRES_URL`, which `scripts/with-postgres` sets
//! after starting a throwaway server; without it the test fails and says so.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::counters::SHARDING_FAST;
use support::*;

const COUNTERS: usize = 300;
/// Increments handed over per request.
const BATCH: u64 = 10;
/// Requests in all: 10,000 increments.
const BATCHES: usize = 1_000;
/// How long the producer may take to have every accepted increment confirmed at the end.
const DRAIN: Duration = Duration::from_secs(180);

/// The counter of batch `b`: 7 is prime to 300, so the batches go round every counter.
fn counter_of(b: usize) -> usize {
    b * 7 % COUNTERS
}

fn spec(name: &str, store: &str, role: bool) -> NodeSpec {
    let spec = SHARDING_FAST
        .iter()
        .fold(NodeSpec::new(name, &[]), |s, (k, v)| s.env(k, v))
        // Only nodes with the role `counters` host shards: the producer's node routes only.
        .env("SHARDIK_CLUSTER__SHARDING__ROLE", "counters")
        .arg("--demo-counters")
        .arg("--store")
        .arg(store);
    if role {
        spec.arg("--roles").arg("counters")
    } else {
        spec.arg("--demo-producer").arg("p1")
    }
}

/// Hands batch `b` to the producer: how many increments it accepted (all, or those before it
/// refused). The test never kills the producer's node during a request, so every request is
/// answered.
async fn hand_over(http: &reqwest::Client, producer: &str, b: usize) -> Result<u64, String> {
    let url = format!(
        "http://{producer}/demo/producer/increment/c{}?times={BATCH}",
        counter_of(b)
    );
    let response = http.post(&url).send().await.map_err(|e| e.to_string())?;
    let status = response.status();
    let body: Value = response.json().await.map_err(|e| e.to_string())?;
    let accepted = body["accepted"]
        .as_u64()
        .ok_or_else(|| format!("{status}: {body}"))?;
    if accepted < BATCH {
        eprintln!("batch {b}: {accepted} of {BATCH} accepted: {body}");
    }
    Ok(accepted)
}

async fn producer_unconfirmed(http: &reqwest::Client, producer: &str) -> Result<u64, String> {
    let v: Value = http
        .get(format!("http://{producer}/demo/producer"))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    v["unconfirmed"]
        .as_u64()
        .ok_or_else(|| format!("no unconfirmed count: {v}"))
}

async fn read(http: &reqwest::Client, management: &str, counter: usize) -> Result<u64, String> {
    let response = http
        .get(format!(
            "http://{management}/demo/reliable-counter/c{counter}"
        ))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let v: Value = response.json().await.map_err(|e| e.to_string())?;
    v["value"]
        .as_u64()
        .ok_or_else(|| format!("c{counter}: {v}"))
}

/// The shards of `reliable-counter` that `management`'s node hosts.
async fn hosted_shards(http: &reqwest::Client, management: &str) -> Result<usize, String> {
    let v: Value = http
        .get(format!(
            "http://{management}/cluster/shards/reliable-counter"
        ))
        .send()
        .await
        .map_err(|e| e.to_string())?
        .json()
        .await
        .map_err(|e| e.to_string())?;
    Ok(v["regions"].as_array().map_or(0, Vec::len))
}

/// Hands batches `range` over in order, adding what was accepted to `accepted`.
async fn hand_over_all(
    http: &reqwest::Client,
    producer: &str,
    range: std::ops::Range<usize>,
    accepted: &mut [u64],
) {
    for b in range {
        match hand_over(http, producer, b).await {
            Ok(n) => accepted[counter_of(b)] += n,
            Err(e) => panic!("batch {b} not answered: {e}"),
        }
    }
}

async fn exactly_once_through_kills_and_moves(prefix: &str, store: &str) {
    let http = client();
    let specs = vec![
        spec(&format!("{prefix}-counters0"), store, true),
        spec(&format!("{prefix}-counters1"), store, true),
        spec(&format!("{prefix}-counters2"), store, true),
        spec(&format!("{prefix}-producer"), store, false),
    ];
    let mut nodes = start_cluster_of(&http, specs).await;
    let seeds = nodes[0].spec.seeds.clone();
    let producer = nodes[3].spec.management.clone();
    let reader = nodes[0].spec.management.clone();
    let mut accepted = vec![0u64; COUNTERS];

    hand_over_all(&http, &producer, 0..300, &mut accepted).await;

    // A counter node dies; its counters come back elsewhere, and what was sent to them and
    // not confirmed is sent again.
    nodes[2].kill9();
    hand_over_all(&http, &producer, 300..500, &mut accepted).await;

    // The producer's node dies while increments it accepted are in flight (the test's own
    // requests have all been answered: none is in doubt).
    let mut b = 500;
    loop {
        let unconfirmed = producer_unconfirmed(&http, &producer).await.unwrap();
        if unconfirmed > 0 {
            eprintln!("killing the producer with {unconfirmed} increments unconfirmed");
            break;
        }
        assert!(
            b < 560,
            "never caught the producer with increments in flight"
        );
        hand_over_all(&http, &producer, b..b + 4, &mut accepted).await;
        b += 4;
    }
    let producer_spec = nodes[3].spec.clone();
    nodes[3].kill9();
    let restarted = Node::spawn(NodeSpec {
        seeds: seeds.clone(),
        ..producer_spec
    });
    nodes[3] = restarted;
    eventually(
        "the producer's node serves again",
        BOUND,
        &mut [&mut nodes[3]],
        || {
            let (http, producer) = (&http, &producer);
            async move { producer_unconfirmed(http, producer).await.map(|_| ()) }
        },
    )
    .await;

    // A new counter node joins: shards move to it at the next rebalances.
    let mut joiner = Node::spawn(NodeSpec {
        seeds,
        ..spec(&format!("{prefix}-counters3"), store, true)
    });
    let joiner_management = joiner.spec.management.clone();
    let half = b + (BATCHES - b) / 2;
    hand_over_all(&http, &producer, b..half, &mut accepted).await;
    eventually(
        "the new counter node hosts shards",
        BOUND,
        &mut [&mut joiner],
        || {
            let (http, m) = (&http, &joiner_management);
            async move {
                match hosted_shards(http, m).await? {
                    0 => Err("no shard yet".to_string()),
                    _ => Ok(()),
                }
            }
        },
    )
    .await;
    hand_over_all(&http, &producer, half..BATCHES, &mut accepted).await;

    // Every accepted increment is confirmed, then each counter holds exactly its own.
    let start = Instant::now();
    loop {
        match producer_unconfirmed(&http, &producer).await {
            Ok(0) => break,
            Ok(n) => assert!(
                start.elapsed() < DRAIN,
                "{n} increments still unconfirmed after {DRAIN:?}: {}",
                reports(&mut nodes.iter_mut().chain([&mut joiner]).collect::<Vec<_>>())
            ),
            Err(e) => panic!("the producer does not answer: {e}"),
        }
        tokio::time::sleep(POLL).await;
    }
    let total: u64 = accepted.iter().sum();
    assert!(total >= 9_900, "nearly every increment accepted: {total}");
    let mut wrong = Vec::new();
    for (i, want) in accepted.iter().enumerate() {
        let value = read(&http, &reader, i).await.unwrap();
        if value != *want {
            wrong.push(format!("c{i}: {value}, accepted {want}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "counters off (lost or doubled increments): {wrong:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_every_accepted_increment_counts_once_through_kills_and_moves() {
    let store = fresh_sqlite_store("reliable");
    exactly_once_through_kills_and_moves("sqlite", &store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_every_accepted_increment_counts_once_through_kills_and_moves() {
    let store = fresh_postgres_database("reliable");
    exactly_once_through_kills_and_moves("pg", &store).await;
}
