//! A rolling update with the real binary, as a Deployment with `maxUnavailable: 0` does it:
//! under steady increments to durable counters, each of three nodes is replaced in turn
//! (SIGTERM, exit 0, started again on the same addresses with a newer `cluster.app-version`).
//!
//! What must hold:
//! - every increment sent to a running node is answered, none is lost, none applied twice
//!   (the load is steered away from a node just before it is stopped, as a Service stops
//!   routing to a terminating pod);
//! - while a newer node is Up, no shard is placed on an older one: the shards of a leaving
//!   old node go to the newer nodes only;
//! - no rebalancing while versions differ (the old nodes are about to go anyway), and shards
//!   spread again once every node runs the new version.
//!
//! Shard placements are read from each node's own region (`GET /cluster/shards/counter`,
//! `regions`), polled; a placement that lasts shorter than a poll could be missed, never
//! invented.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use support::counters::{Ledger, SHARDING_FAST, SteadyLoad};
use support::*;

/// Counters driven (over 30 shards).
const COUNTERS: usize = 24;
/// The version the cluster starts with, and the one each node is replaced with.
const OLD: &str = "1.4.0";
const NEW: &str = "1.5.0";
/// How long the cluster runs with both versions before the next node is replaced: several
/// of SHARDING_FAST's 1 s rebalance intervals, in which an unheld rebalance would move shards
/// to the new node, which holds none.
const MIXED_VERSIONS_FOR: Duration = Duration::from_secs(4);

fn node_spec(name: &str, seeds: &[String], store: &str, version: &str) -> NodeSpec {
    SHARDING_FAST
        .iter()
        .fold(NodeSpec::new(name, seeds), |s, (k, v)| s.env(k, v))
        .env("SHARDIK_CLUSTER__APP_VERSION", version)
        .arg("--demo-counters")
        .arg("--store")
        .arg(store)
}

/// The shards each node's own region runs, node by node (`None` for a node not polled).
async fn shard_sets(
    http: &reqwest::Client,
    managements: &[Option<String>],
) -> Result<Vec<Option<BTreeSet<String>>>, String> {
    let mut sets = Vec::new();
    for m in managements {
        let Some(m) = m else {
            sets.push(None);
            continue;
        };
        let v: serde_json::Value = http
            .get(format!("http://{m}/cluster/shards/counter"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map_err(|e| format!("{m}: {e}"))?
            .json()
            .await
            .map_err(|e| format!("{m}: {e}"))?;
        let shards = v["regions"]
            .as_array()
            .ok_or_else(|| format!("{m}: no regions in {v}"))?
            .iter()
            .filter_map(|r| r["shardId"].as_str().map(str::to_string))
            .collect();
        sets.push(Some(shards));
    }
    Ok(sets)
}

/// Waits until every counter has had `more` acknowledged increments since `since`.
async fn until_each_counter_answers(
    ledger: &Ledger,
    since: &[u64],
    more: u64,
    nodes: &mut [&mut Node],
    what: &str,
) {
    eventually(what, BOUND, nodes, || async {
        let acked = ledger.acked();
        match acked.iter().zip(since).position(|(a, s)| *a < s + more) {
            None => Ok(()),
            Some(i) => Err(format!("c{i} acknowledged {} times", acked[i])),
        }
    })
    .await;
}

/// Fails with the ledger's first wrong answer, if any.
fn assert_no_violation(ledger: &Ledger, when: &str) {
    let st = ledger.lock();
    assert!(
        st.violations.is_empty(),
        "{when}: {} wrong answers, first: {}",
        st.violations.len(),
        st.violations[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_update_keeps_every_increment_and_places_shards_on_the_newest_version() {
    let http = client();
    let store = fresh_sqlite_store("rolling");
    let mut specs: Vec<NodeSpec> = (0..3)
        .map(|i| node_spec(&format!("roll{i}"), &[], &store, OLD))
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

    let ledger = Ledger::new(COUNTERS);
    let mut load = SteadyLoad::start(&http, &all, &ledger);
    let zero = vec![0; COUNTERS];
    until_each_counter_answers(
        &ledger,
        &zero,
        2,
        &mut nodes.iter_mut().collect::<Vec<_>>(),
        "every counter answers on the old version",
    )
    .await;

    let mut versions = [OLD; 3];
    for i in 0..3 {
        // Steer the load away from the node about to stop.
        load.stop().await;
        let others: Vec<String> = (0..3).filter(|&j| j != i).map(|j| all[j].clone()).collect();
        load = SteadyLoad::start(&http, &others, &ledger);

        // The nodes still on the old version, other than the one leaving: while a newer node
        // is Up, none of them may gain a shard.
        let newer_up = versions.contains(&NEW);
        let watched: Vec<Option<String>> = (0..3)
            .map(|j| (newer_up && j != i && versions[j] == OLD).then(|| all[j].clone()))
            .collect();
        let before = shard_sets(&http, &watched).await.expect("shards before");
        let leaving_had = shard_sets(&http, &[Some(all[i].clone())])
            .await
            .expect("the leaving node's shards")
            .remove(0)
            .unwrap_or_default();

        nodes[i].signal("TERM");
        let deadline = Instant::now() + BOUND;
        let status = loop {
            let now = shard_sets(&http, &watched)
                .await
                .expect("shards while leaving");
            for (j, (b, n)) in before.iter().zip(&now).enumerate() {
                if let (Some(b), Some(n)) = (b, n) {
                    let gained: Vec<&String> = n.difference(b).collect();
                    assert!(
                        gained.is_empty(),
                        "node {j} ({OLD}) gained shards {gained:?} while a {NEW} node was Up \
                         (node {i} leaving, which ran {leaving_had:?})\n{}",
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
            "node {i} leaves gracefully and exits 0 on SIGTERM\n{}",
            nodes[i].report()
        );
        assert_no_violation(&ledger, &format!("after node {i} left"));

        // The same addresses, the newer version.
        let mut spec = node_spec(&format!("roll{i}-new"), &seeds, &store, NEW);
        spec.bind = specs[i].bind.clone();
        spec.management = specs[i].management.clone();
        nodes[i] = Node::spawn(spec);
        versions[i] = NEW;
        wait_all_up(&http, &mut nodes.iter_mut().collect::<Vec<_>>(), &expected).await;

        // Through every node again, the new one included.
        load.stop().await;
        load = SteadyLoad::start(&http, &all, &ledger);
        let since = ledger.acked();
        until_each_counter_answers(
            &ledger,
            &since,
            2,
            &mut nodes.iter_mut().collect::<Vec<_>>(),
            &format!("every counter answers after node {i} runs {NEW}"),
        )
        .await;

        if versions.contains(&OLD) {
            // Both versions run: nothing is rebalanced, so the newest node, which no leave
            // has given shards yet, holds none for the whole interval.
            let everyone: Vec<Option<String>> = all.iter().cloned().map(Some).collect();
            let first = shard_sets(&http, &everyone).await.expect("shards");
            // The scenario: a mixed-version cluster under load for several rebalance rounds.
            tokio::time::sleep(MIXED_VERSIONS_FOR).await;
            let second = shard_sets(&http, &everyone).await.expect("shards");
            assert_eq!(
                first, second,
                "no shard moves while versions differ (versions {versions:?})"
            );
            if i == 0 {
                assert_eq!(
                    second[0].as_ref().map(BTreeSet::len),
                    Some(0),
                    "the only {NEW} node has been given nothing to run yet: {second:?}"
                );
            }
        }
    }

    // Every node runs the new version: shards spread again, to every node.
    let everyone: Vec<Option<String>> = all.iter().cloned().map(Some).collect();
    eventually(
        "rebalancing resumes after the rollout and every node runs shards",
        BOUND,
        &mut nodes.iter_mut().collect::<Vec<_>>(),
        || async {
            let sets = shard_sets(&http, &everyone).await?;
            if sets.iter().flatten().all(|s| !s.is_empty()) {
                Ok(())
            } else {
                Err(format!("shards per node: {sets:?}"))
            }
        },
    )
    .await;

    load.stop().await;
    assert_no_violation(&ledger, "after the rollout");
    let (acked, tried, failures, failed) = {
        let st = ledger.lock();
        (
            st.books.acked.clone(),
            st.books.tried.clone(),
            st.books.failures,
            st.failed.clone(),
        )
    };
    assert_eq!(
        failures, 0,
        "every increment sent to a running node is answered; not answered: {failed:#?}"
    );
    let values = ledger.check_all(&http, &all).await.expect("read back");
    // Nothing unanswered: each counter holds exactly its acknowledged increments.
    assert_eq!(acked, tried);
    assert_eq!(values, acked, "no increment lost or applied twice");
    let total: u64 = acked.iter().sum();
    assert!(
        total >= 10 * COUNTERS as u64,
        "enough traffic to mean something: {total}"
    );
    eprintln!("rolling update: {total} increments acknowledged, none lost, none twice");
}
