//! A full cluster shutdown with the real binary (Akka's "prepare for full cluster shutdown"):
//! three nodes serve the demo's durable counters, with shards on every node; one node is
//! asked to prepare (`PUT /cluster`, `operation=PrepareForFullClusterShutdown`, here through
//! `shardik prepare-for-full-shutdown`); every member becomes ReadyForShutdown in every node's
//! `/cluster/members`; a fourth node that asks to join is not let in; then the nodes get
//! SIGTERM one after the other, each exits 0, and the nodes still running never gain a shard
//! (nothing is handed to them: the leaving node's shards stop where they are).
//!
//! Shard placements are read from each node's own region (`GET /cluster/shards/counter`,
//! `regions`), polled while a node stops; a placement shorter than a poll could be missed,
//! never invented.

mod support;

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use support::counters::{SHARDING_FAST, post_increment};
use support::*;

/// Counters incremented before the preparation (over 30 shards: some on every node).
const COUNTERS: usize = 24;

fn node_spec(name: &str, seeds: &[String], store: &str) -> NodeSpec {
    SHARDING_FAST
        .iter()
        .fold(NodeSpec::new(name, seeds), |s, (k, v)| s.env(k, v))
        .env(WRITES_ENABLED.0, WRITES_ENABLED.1)
        .arg("--demo-counters")
        .arg("--store")
        .arg(store)
}

/// The shards the node's own region runs.
async fn shards_at(http: &reqwest::Client, management: &str) -> Result<BTreeSet<String>, String> {
    let v: serde_json::Value = http
        .get(format!("http://{management}/cluster/shards/counter"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map_err(|e| format!("{management}: {e}"))?
        .json()
        .await
        .map_err(|e| format!("{management}: {e}"))?;
    Ok(v["regions"]
        .as_array()
        .ok_or_else(|| format!("{management}: no regions in {v}"))?
        .iter()
        .filter_map(|r| r["shardId"].as_str().map(str::to_string))
        .collect())
}

/// Whether `/cluster/members` at `management` lists exactly `expected`, all ReadyForShutdown.
async fn all_ready_at(
    http: &reqwest::Client,
    management: &str,
    expected: &[&str],
) -> Result<(), String> {
    let v = members_at(http, management).await?;
    let ms = member_list(&v);
    let mut addrs: Vec<&str> = ms.iter().map(|(a, _, _)| a.as_str()).collect();
    addrs.sort_unstable();
    let mut want = expected.to_vec();
    want.sort_unstable();
    if addrs != want {
        return Err(format!("{management}: members {addrs:?}, want {want:?}"));
    }
    match ms.iter().find(|(_, _, s)| s != "ReadyForShutdown") {
        Some((a, _, s)) => Err(format!("{management}: {a} is {s}")),
        None => Ok(()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_cluster_stops_node_by_node_without_moving_a_shard() {
    let http = client();
    let store = fresh_sqlite_store("full-shutdown");
    let mut specs: Vec<NodeSpec> = (0..3)
        .map(|i| node_spec(&format!("full{i}"), &[], &store))
        .collect();
    let seeds: Vec<String> = specs.iter().take(2).map(|s| s.bind.clone()).collect();
    for s in &mut specs {
        s.seeds = seeds.clone();
    }
    let addrs: Vec<String> = specs.iter().map(|s| s.bind.clone()).collect();
    let expected: Vec<&str> = addrs.iter().map(String::as_str).collect();
    let all: Vec<String> = specs.iter().map(|s| s.management.clone()).collect();
    let mut nodes: Vec<Node> = specs.iter().cloned().map(Node::spawn).collect();
    wait_all_up(&http, &mut nodes.iter_mut().collect::<Vec<_>>(), &expected).await;

    // Every counter once, through the nodes in turn: shards on every node.
    for i in 0..COUNTERS {
        let via = all[i % 3].clone();
        eventually(
            &format!("c{i} answers an increment"),
            BOUND,
            &mut nodes.iter_mut().collect::<Vec<_>>(),
            || {
                let (http, via) = (&http, via.clone());
                async move {
                    post_increment(http, &via, i)
                        .await
                        .map(|_| ())
                        .ok_or_else(|| format!("c{i} via {via}: no answer"))
                }
            },
        )
        .await;
    }
    let placed: Vec<BTreeSet<String>> = eventually(
        "every node hosts shards",
        BOUND,
        &mut nodes.iter_mut().collect::<Vec<_>>(),
        || async {
            let mut sets = Vec::new();
            for m in &all {
                let s = shards_at(&http, m).await?;
                if s.is_empty() {
                    return Err(format!("{m} hosts no shard"));
                }
                sets.push(s);
            }
            Ok(sets)
        },
    )
    .await;

    // An unknown operation is refused, naming the one there is.
    let resp = http
        .put(format!("http://{}/cluster", all[1]))
        .form(&[("operation", "Shutdown")])
        .send()
        .await
        .expect("PUT /cluster");
    assert_eq!(resp.status().as_u16(), 400);
    let body: serde_json::Value = resp.json().await.expect("JSON");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("PrepareForFullClusterShutdown")),
        "{body}"
    );

    // The operator's command, on one node.
    let out = Command::new(env!("CARGO_BIN_EXE_shardik"))
        .args(["prepare-for-full-shutdown", "--management", &all[1]])
        .output()
        .expect("run shardik");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "Preparing for full cluster shutdown"
    );
    eventually(
        "every node lists every member ReadyForShutdown",
        BOUND,
        &mut nodes.iter_mut().collect::<Vec<_>>(),
        || async {
            for m in &all {
                all_ready_at(&http, m, &expected).await?;
                let gauge = metric_at(&http, m, "shardik_cluster_preparing_for_shutdown").await?;
                if gauge != 1.0 {
                    return Err(format!("{m}: preparing gauge {gauge}"));
                }
            }
            Ok(())
        },
    )
    .await;
    // Asking again is harmless and answered the same (Akka Management's JSON).
    let resp = http
        .put(format!("http://{}/cluster", all[0]))
        .form(&[("operation", "PrepareForFullClusterShutdown")])
        .send()
        .await
        .expect("PUT /cluster");
    assert_eq!(resp.status().as_u16(), 200);
    let body: serde_json::Value = resp.json().await.expect("JSON");
    assert_eq!(
        body,
        serde_json::json!({"message": "Preparing for full cluster shutdown"})
    );

    // A fourth node asks to join: refused (counted by the members), never a member.
    let mut joiner = Node::spawn(node_spec("full-joiner", &seeds, &store));
    let joiner_addr = joiner.spec.bind.clone();
    eventually(
        "the members refuse the joiner twice",
        BOUND,
        &mut [&mut joiner],
        || async {
            let mut refused = 0.0;
            for m in &seeds_management(&specs) {
                refused += metric_sum_with_label(
                    &http,
                    m,
                    "shardik_dropped_messages_total",
                    "reason=\"preparing-for-shutdown\"",
                )
                .await?;
            }
            if refused >= 2.0 {
                Ok(())
            } else {
                Err(format!("{refused} refusals"))
            }
        },
    )
    .await;
    for m in &all {
        let v = members_at(&http, m).await.expect("members");
        assert!(
            member_list(&v).iter().all(|(a, _, _)| *a != joiner_addr),
            "{m} lists the joiner: {v}"
        );
    }
    joiner.kill9();

    // Shards as the nodes stop: none is handed to a node still running.
    let placed_now: Vec<BTreeSet<String>> = {
        let mut sets = Vec::new();
        for m in &all {
            sets.push(shards_at(&http, m).await.expect("shards"));
        }
        sets
    };
    assert_eq!(placed_now, placed, "nothing moved while preparing");
    for i in [1, 0, 2] {
        let running: Vec<usize> = (0..3)
            .filter(|&j| j != i && nodes[j].exited().is_none())
            .collect();
        nodes[i].signal("TERM");
        let deadline = Instant::now() + BOUND;
        let status = loop {
            for &j in &running {
                if let Ok(now) = shards_at(&http, &all[j]).await {
                    let gained: Vec<&String> = now.difference(&placed[j]).collect();
                    assert!(
                        gained.is_empty(),
                        "node {j} gained shards {gained:?} while node {i} stopped\n{}",
                        reports(&mut nodes.iter_mut().collect::<Vec<_>>())
                    );
                }
            }
            if let Some(status) = nodes[i].exited() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "node {i} did not exit within {BOUND:?} of SIGTERM\n{}",
                reports(&mut nodes.iter_mut().collect::<Vec<_>>())
            );
            tokio::time::sleep(POLL).await;
        };
        assert_eq!(
            status.code(),
            Some(0),
            "node {i} exits 0 on SIGTERM\n{}",
            nodes[i].report()
        );
        // Once it is gone, the others still run exactly what they ran.
        for &j in &running {
            let now = eventually(
                &format!("node {j} answers"),
                BOUND,
                &mut nodes.iter_mut().collect::<Vec<_>>(),
                || shards_at(&http, &all[j]),
            )
            .await;
            assert_eq!(now, placed[j], "node {j} after node {i} stopped");
        }
    }
    // Each node said it saw the preparation; the coordinator said what it did not re-home.
    for (i, n) in nodes.iter().enumerate() {
        assert!(
            n.stderr()
                .contains("the cluster is preparing for a full shutdown"),
            "node {i} logs the preparation"
        );
    }
    assert!(
        nodes.iter().any(|n| n.stderr().contains("get no new home")),
        "the coordinator logs the shards it retired"
    );
}

fn seeds_management(specs: &[NodeSpec]) -> Vec<String> {
    specs.iter().take(2).map(|s| s.management.clone()).collect()
}
