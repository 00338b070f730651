//! Durable counters across real `shardik node --demo-counters` processes, on SQLite and on a
//! real PostgreSQL server: under steady increments one node is killed with SIGKILL, later every
//! node is, and a new cluster starts on the same store. With remember-entities on, every
//! counter runs again before any message is sent to it; every acknowledged increment is still
//! in the counters, and none was applied twice.
//!
//! The PostgreSQL test needs `SHARDIK_TEST_POSTGRES_URL`, which `scripts/with-postgres` sets
//! after starting a throwaway server; without it the test fails and says so.

mod support;

use std::time::Instant;

use serde_json::Value;
use support::counters::{Books, SHARDING_FAST, read_counter, round};
use support::*;

/// Counters driven.
const COUNTERS: usize = 30;

async fn cluster(http: &reqwest::Client, prefix: &str, store: &str) -> Vec<Node> {
    let args = ["--demo-counters", "--store", store];
    let env: Vec<(&str, &str)> = SHARDING_FAST
        .iter()
        .copied()
        .chain([("SHARDIK_CLUSTER__SHARDING__REMEMBER_ENTITIES", "on")])
        .collect();
    start_cluster_with_args(http, prefix, 3, &env, &args).await
}

/// Live counters over the cluster, from each node's `GET /cluster/shards/counter`.
async fn live_counters(http: &reqwest::Client, managements: &[String]) -> Result<u64, String> {
    let mut total = 0;
    for m in managements {
        let v: Value = http
            .get(format!("http://{m}/cluster/shards/counter"))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .map_err(|e| e.to_string())?;
        // `regions`: this node's own shards, each with its live entities.
        for shard in v["regions"].as_array().cloned().unwrap_or_default() {
            total += shard["numEntities"].as_u64().unwrap_or(0);
        }
    }
    Ok(total)
}

async fn counters_survive_sigkills(prefix: &str, store: &str) {
    let http = client();
    let mut nodes = cluster(&http, prefix, store).await;
    let managements: Vec<String> = nodes.iter().map(|n| n.spec.management.clone()).collect();
    let mut books = Books::new(COUNTERS);
    // Steady increments until every counter has answered a few times.
    let start = Instant::now();
    while books.acked.iter().any(|a| *a < 3) {
        round(&http, &managements, &mut books).await;
        assert!(
            start.elapsed() < BOUND,
            "counters never all answered: {}",
            reports(&mut nodes.iter_mut().collect::<Vec<_>>())
        );
    }

    // SIGKILL one node mid-traffic; go on through the survivors until a whole round answers.
    let mut victim = nodes.remove(2);
    victim.kill9();
    let survivors = &managements[..2];
    let start = Instant::now();
    loop {
        let failed = round(&http, survivors, &mut books).await;
        if failed == 0 {
            break;
        }
        assert!(
            start.elapsed() < BOUND,
            "counters of the killed node never came back: {}",
            reports(&mut nodes.iter_mut().collect::<Vec<_>>())
        );
    }
    round(&http, survivors, &mut books).await;

    // SIGKILL every node, then a new cluster on the same store.
    for node in nodes.iter_mut() {
        node.kill9();
    }
    drop(nodes);
    let mut nodes = cluster(&http, &format!("{prefix}-again"), store).await;
    let managements: Vec<String> = nodes.iter().map(|n| n.spec.management.clone()).collect();
    let mut refs: Vec<&mut Node> = nodes.iter_mut().collect();
    // Remember-entities is on: every counter runs again before anyone writes to it.
    eventually(
        "every remembered counter runs again without a message",
        BOUND,
        &mut refs,
        || {
            let (http, managements) = (&http, &managements);
            async move {
                let live = live_counters(http, managements).await?;
                if live == COUNTERS as u64 {
                    Ok(())
                } else {
                    Err(format!("{live} of {COUNTERS} counters running"))
                }
            }
        },
    )
    .await;
    let values = std::sync::Mutex::new(vec![None; COUNTERS]);
    eventually(
        "every counter answers after the restart",
        BOUND,
        &mut refs,
        || {
            let (http, managements, values) = (&http, &managements, &values);
            async move {
                for i in 0..COUNTERS {
                    if values.lock().unwrap()[i].is_some() {
                        continue;
                    }
                    let v = read_counter(http, &managements[i % 3], i).await?;
                    values.lock().unwrap()[i] = Some(v);
                }
                Ok(())
            }
        },
    )
    .await;
    let values = values.into_inner().unwrap();
    for (i, v) in values.into_iter().enumerate() {
        books.check(i, v.expect("read"), "after the full restart");
    }
    // And they count on.
    assert_eq!(round(&http, &managements, &mut books).await, 0);
    let acked: u64 = books.acked.iter().sum();
    assert!(
        acked >= 5 * COUNTERS as u64,
        "enough traffic to mean something: {acked}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_counters_survive_the_sigkill_of_one_node_and_of_all() {
    let store = fresh_sqlite_store("durable");
    counters_survive_sigkills("sqlite", &store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_counters_survive_the_sigkill_of_one_node_and_of_all() {
    let store = fresh_postgres_database("durable");
    counters_survive_sigkills("pg", &store).await;
}

#[test]
fn an_unusable_store_stops_the_node_at_startup_with_the_cause() {
    let garbage = std::env::temp_dir().join(format!("shardik-garbage-{}.db", std::process::id()));
    let bytes: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    std::fs::write(&garbage, &bytes).unwrap();
    let garbage_url = format!("sqlite:{}", garbage.display());
    let cases = [
        ("nosuch:thing", "unknown scheme"),
        ("postgres://nobody@127.0.0.1:1/none", "unavailable"),
        (garbage_url.as_str(), "corrupt"),
    ];
    for (url, cause) in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_shardik"))
            .args([
                "node",
                "--demo-counters",
                "--bind",
                &free_addr(),
                "--management",
                &free_addr(),
                "--store",
                url,
            ])
            .env("SHARDIK_LOGGING__LEVEL", "error")
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{url}: exited 0");
        assert!(
            stderr.to_lowercase().contains(cause),
            "{url}: the error names the cause ({cause}):\n{stderr}"
        );
    }
    assert_eq!(
        std::fs::read(&garbage).unwrap(),
        bytes,
        "the corrupt file is left as it was"
    );
    let _ = std::fs::remove_file(&garbage);
}
